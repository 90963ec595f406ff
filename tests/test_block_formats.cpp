// SPDX-License-Identifier: GPL-3.0-or-later
// FP4 E2M1, E8M0 and E4M3 block scales, and the block recipes fp8-block, nvfp4 and mxfp4, bit
// for bit against tables computed with ml_dtypes' casts (tests/data/block_formats/generate.py
// follows TransformerEngine's reference quantizers in numpy), plus the edges the specs name.

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include <torch/torch.h>

#include "block_fp4_gemm.h"
#include "block_scaling.h"
#include "blockwise_fp8.h"
#include "cpu_hadamard.h"
#include "cpu_transpose.h"
#include "fp4.h"
#include "fp8_scaling.h"
#include "layer_gemm.h"
#include "precision_policy.h"
#include "project_config.h"
#include "quantize.h"
#include "sweep.h"
#include "thread_count.h"
#include "trainer.h"

// Qt after LibTorch: Qt's `slots` macro would break torch's IValue::slots().
#include <QtTest>

using namespace mantissa;

namespace {

const QString kData = QStringLiteral(MANTISSA_TEST_DATA_DIR "/block_formats/");

float from_hex(const QString& text)
{
    bool ok = false;
    const uint32_t bits = text.toUInt(&ok, 16);
    if (!ok) qFatal("bad hex '%s'", qPrintable(text));
    return std::bit_cast<float>(bits);
}

uint32_t bits_of(float v) { return std::bit_cast<uint32_t>(v); }

// The table's lines without comments.
QStringList table(const QString& name)
{
    QFile f(kData + name);
    if (!f.open(QIODevice::ReadOnly | QIODevice::Text)) qFatal("cannot read %s", qPrintable(f.fileName()));
    QStringList lines;
    for (const auto& line : QString::fromLatin1(f.readAll()).split(QLatin1Char('\n')))
        if (!line.isEmpty() && !line.startsWith(QLatin1Char('#'))) lines << line;
    return lines;
}

// Bit-identical, NaN included.
bool same_bits(const torch::Tensor& a, const torch::Tensor& b)
{
    if (a.sizes() != b.sizes()) return false;
    return torch::equal(a.to(torch::kFloat32).contiguous().view(torch::kInt32),
                        b.to(torch::kFloat32).contiguous().view(torch::kInt32));
}

// The deterministic operand generate.py builds too: 24-bit LCG values in [-1, 1), each row
// scaled by 2^((7i mod 24) - 12) and each column by 2^(-4 (j mod 5)), exact in FP32.
torch::Tensor test_matrix(int64_t rows, int64_t cols)
{
    auto out = torch::empty({rows, cols});
    auto a = out.accessor<float, 2>();
    uint32_t state = 12345;
    for (int64_t i = 0; i < rows; ++i) {
        const double row_scale = std::ldexp(1.0, static_cast<int>((i * 7) % 24) - 12);
        for (int64_t j = 0; j < cols; ++j) {
            state = state * 1664525u + 1013904223u;
            const double u = static_cast<double>(state >> 8) / std::ldexp(1.0, 23) - 1.0;
            a[i][j] = static_cast<float>(u * row_scale * std::ldexp(1.0, -4 * static_cast<int>(j % 5)));
        }
    }
    return out;
}

// Rows "<tag> v v v" of a table, each value parsed by `parse`.
torch::Tensor grid_rows(const QStringList& lines, const QString& tag, bool hex_float)
{
    std::vector<std::vector<float>> rows;
    for (const auto& line : lines) {
        if (!line.startsWith(tag + QLatin1Char(' '))) continue;
        std::vector<float> row;
        for (const auto& v : line.mid(tag.size() + 1).split(QLatin1Char(' ')))
            row.push_back(hex_float ? from_hex(v) : static_cast<float>(v.toUInt(nullptr, 16)));
        rows.push_back(row);
    }
    auto t = torch::empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < rows[i].size(); ++j) t[i][j] = rows[i][j];
    return t;
}

// "codes" rows: one hex digit (E2M1) or two (E4M3) per element.
torch::Tensor code_rows(const QStringList& lines, int width)
{
    std::vector<std::vector<uint8_t>> rows;
    for (const auto& line : lines) {
        if (!line.startsWith(QLatin1String("codes "))) continue;
        const QString s = line.mid(6);
        std::vector<uint8_t> row;
        for (int i = 0; i + width <= s.size(); i += width) row.push_back(static_cast<uint8_t>(s.mid(i, width).toUInt(nullptr, 16)));
        rows.push_back(row);
    }
    auto t = torch::empty({static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())}, torch::kUInt8);
    for (size_t i = 0; i < rows.size(); ++i) std::memcpy(t[i].data_ptr<uint8_t>(), rows[i].data(), rows[i].size());
    return t;
}

// A (gr, gc) grid of per-block values spread over the (rows, cols) elements of its blocks.
torch::Tensor expand_grid(const torch::Tensor& grid, int64_t tile_rows, int64_t tile_cols, int64_t rows, int64_t cols)
{
    return grid.repeat_interleave(tile_rows, 0).repeat_interleave(tile_cols, 1).narrow(0, 0, rows).narrow(1, 0, cols);
}

torch::Tensor e4m3_decode(const torch::Tensor& codes) { return codes.view(torch::kFloat8_e4m3fn).to(torch::kFloat32); }

Fp8Recipe recipe_of(Fp8Scaling s)
{
    Fp8Recipe r;
    r.scaling = s;
    return r;
}

BlockQuantized quantize_2d(const QString& recipe, const torch::Tensor& x)
{
    if (recipe == "nvfp4") return quantize_nvfp4_2d(x, false, std::nullopt);
    if (recipe == "mxfp4") return quantize_mxfp4_2d(x, false);
    return quantize_fp8_block_2d(x, NumberFormat::E4M3, true, false);
}

int64_t block_of(const QString& recipe)
{
    return recipe == "nvfp4" ? 16 : recipe == "mxfp4" || recipe == "mxfp8" ? 32 : 128;
}

ProjectConfig golden_project() { return load_project_file(MANTISSA_TEST_DATA_DIR "/golden_project.json"); }

struct Losses : TelemetrySink {
    std::vector<double> train;
    void on_step(const StepMetrics& m) override { train.push_back(m.train_loss); }
    void on_eval(const EvalMetrics&) override {}
    void on_event(const RunEvent&) override {}
};

} // namespace

class TestBlockFormats : public QObject {
    Q_OBJECT

private slots:
    // ---- E2M1 -------------------------------------------------------------------------

    void e2m1EveryCode()
    {
        const float expected[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
        const auto codes = torch::arange(16, torch::kUInt8);
        const auto values = e2m1_decode(codes);
        for (int c = 0; c < 16; ++c) QCOMPARE(bits_of(values[c].item<float>()), bits_of(expected[c]));
        QVERIFY(torch::equal(e2m1_encode(values), codes));          // encode inverts decode, -0 included
        QVERIFY(same_bits(round_to_e2m1(values), values));          // grid values are fixed points
    }

    void e2m1MatchesMlDtypes()
    {
        const auto lines = table(QStringLiteral("e2m1_rne.txt"));
        QVERIFY(lines.size() > 3000);
        std::vector<float> in;
        std::vector<uint8_t> want;
        for (const auto& line : lines) {
            const auto parts = line.split(QLatin1Char(' '));
            in.push_back(from_hex(parts[0]));
            want.push_back(static_cast<uint8_t>(parts[1].toUInt(nullptr, 16)));
        }
        const auto x = torch::tensor(in);
        const auto codes = e2m1_encode(round_to_e2m1(x));
        const auto expected = torch::from_blob(want.data(), {static_cast<int64_t>(want.size())}, torch::kUInt8);
        const auto mismatches = (codes != expected).sum().item<int64_t>();
        QCOMPARE(mismatches, int64_t(0));
    }

    void e2m1TiesZeroSaturation_data()
    {
        QTest::addColumn<float>("in");
        QTest::addColumn<float>("out");
        // Ties go to the even code: 0.25 -> 0 (code 0), 0.75 -> 1 (code 2), 1.25 -> 1, 1.75 -> 2,
        // 2.5 -> 2 (code 4), 3.5 -> 4 (code 6), 5 -> 4 (code 6, not 7).
        const float ties[][2] = {{0.25f, 0}, {0.75f, 1}, {1.25f, 1}, {1.75f, 2}, {2.5f, 2}, {3.5f, 4}, {5, 4}};
        for (const auto& t : ties) {
            QTest::addRow("tie %g", t[0]) << t[0] << t[1];
            QTest::addRow("tie -%g", t[0]) << -t[0] << -t[1];
        }
        QTest::newRow("just above 5") << std::nextafter(5.0f, 6.0f) << 6.0f;
        QTest::newRow("just below 0.25") << std::nextafter(0.25f, 0.0f) << 0.0f;
        QTest::newRow("6.5 saturates") << 6.5f << 6.0f;
        QTest::newRow("1e30 saturates") << 1e30f << 6.0f;
        QTest::newRow("+inf saturates") << std::numeric_limits<float>::infinity() << 6.0f;
        QTest::newRow("-inf saturates") << -std::numeric_limits<float>::infinity() << -6.0f;
        QTest::newRow("+0") << 0.0f << 0.0f;
        QTest::newRow("-0 keeps its sign") << -0.0f << -0.0f;
        QTest::newRow("-tiny underflows to -0") << -1e-30f << -0.0f;
    }
    void e2m1TiesZeroSaturation()
    {
        QFETCH(float, in);
        QFETCH(float, out);
        QCOMPARE(bits_of(round_to_e2m1(torch::tensor({in})).item<float>()), bits_of(out));
    }

    void e2m1NaNStaysNaN()
    {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        QVERIFY(std::isnan(round_to_e2m1(torch::tensor({nan})).item<float>()));
        QVERIFY(std::isnan(round_to_e2m1_stochastic(torch::tensor({nan}), torch::tensor({0.5f})).item<float>()));
    }

    // The mean of 10^6 stochastic roundings is x within 5 standard errors of one draw:
    // |mean - x| <= 5 * step * sqrt(p (1 - p)) / sqrt(N), p = (|x| - lo) / step.
    void e2m1StochasticRoundingIsUnbiased_data()
    {
        QTest::addColumn<float>("x");
        for (float v : {0.1f, 0.3f, 0.8f, 1.2f, 1.9f, 2.7f, 3.3f, 4.6f, 5.1f, 5.9f, -0.7f, -3.9f})
            QTest::addRow("%g", v) << v;
    }
    void e2m1StochasticRoundingIsUnbiased()
    {
        QFETCH(float, x);
        constexpr int64_t n = 1000000;
        auto gen = at::detail::createCPUGenerator(18);
        const auto u = torch::rand({n}, gen);
        const auto q = round_to_e2m1_stochastic(torch::full({n}, x), u);
        const float a = std::abs(x);
        const float step = a < 2 ? 0.5f : a < 4 ? 1.0f : 2.0f;
        const float lo = std::floor(a / step) * step;
        const auto neighbours = (q.abs() == lo) | (q.abs() == lo + step);
        QVERIFY(neighbours.all().item<bool>()); // only the two neighbours, sign kept
        QVERIFY(((q >= 0) == (x >= 0)).all().item<bool>());
        const double p = (a - lo) / step;
        const double tolerance = 5.0 * step * std::sqrt(p * (1 - p)) / std::sqrt(static_cast<double>(n));
        const double mean = q.to(torch::kFloat64).mean().item<double>();
        QVERIFY2(std::abs(mean - x) <= tolerance, qPrintable(QString("mean %1, x %2, tolerance %3").arg(mean).arg(x).arg(tolerance)));
    }

    void e2m1StochasticRoundingKeepsGridAndSaturates()
    {
        auto gen = at::detail::createCPUGenerator(7);
        const auto u = torch::rand({1000}, gen);
        for (float v : {0.0f, -0.0f, 0.5f, 3.0f, -4.0f, 6.0f}) {
            const auto q = round_to_e2m1_stochastic(torch::full({1000}, v), u);
            QVERIFY(same_bits(q, torch::full({1000}, v)));
        }
        QVERIFY(same_bits(round_to_e2m1_stochastic(torch::full({1000}, 7.5f), u), torch::full({1000}, 6.0f)));
        QVERIFY(same_bits(round_to_e2m1_stochastic(torch::full({1000}, -1e30f), u), torch::full({1000}, -6.0f)));
        // u = 0 rounds no value off the grid up, u -> 1 every one: |x| + u steps, floored.
        QCOMPARE(round_to_e2m1_stochastic(torch::tensor({2.2f}), torch::tensor({0.0f})).item<float>(), 2.0f);
        QCOMPARE(round_to_e2m1_stochastic(torch::tensor({2.2f}), torch::tensor({0.9999999f})).item<float>(), 3.0f);
        QCOMPARE(round_to_e2m1_stochastic(torch::tensor({2.2f}), torch::tensor({0.8f})).item<float>(), 3.0f); // 3.0 reached
        QCOMPARE(round_to_e2m1_stochastic(torch::tensor({2.2f}), torch::tensor({0.79f})).item<float>(), 2.0f);
    }

    // The training casts draw 8 random bits per element, as Blackwell's cvt.rs takes: over all
    // 256 draws |x| rounds up floor(256 p) times, p = (|x| - lo) / step. The mean is low by
    // less than step / 256, and |x| below step / 256 always goes to 0 (TE's software cvt.rs,
    // ptx.cuh, gives the same).
    void e2m1StochasticRoundingWithEightBitsIsTheHardwares_data()
    {
        QTest::addColumn<float>("x");
        QTest::addColumn<int>("ups");
        QTest::addRow("0.1: p 0.2") << 0.1f << 51;              // floor(51.2)
        QTest::addRow("-0.7: p 0.4") << -0.7f << 102;           // floor(102.4)
        QTest::addRow("2.7: p 0.7") << 2.7f << 179;             // floor(179.2)
        QTest::addRow("5.1: p 0.55") << 5.1f << 140;            // floor(140.8)
        QTest::addRow("2^-10: below step / 256") << std::ldexp(1.0f, -10) << 0; // p = 1/512
        QTest::addRow("3 * 2^-10: p 1.5/256") << 3 * std::ldexp(1.0f, -10) << 1;
        QTest::addRow("1.5 + 2^-9: p 1/256") << 1.5f + std::ldexp(1.0f, -9) << 1;
        QTest::addRow("on the grid") << 3.0f << 0;
    }
    void e2m1StochasticRoundingWithEightBitsIsTheHardwares()
    {
        QFETCH(float, x);
        QFETCH(int, ups);
        const auto u = torch::arange(256, torch::kFloat32) / 256.0f;
        const auto q = round_to_e2m1_stochastic(torch::full({256}, x), u);
        const float a = std::abs(x);
        const float step = a < 2 ? 0.5f : a < 4 ? 1.0f : 2.0f;
        const float lo = std::floor(a / step) * step;
        QCOMPARE((q.abs() == lo + step).sum().item<int64_t>(), int64_t(ups));
        QCOMPARE((q.abs() == lo).sum().item<int64_t>(), int64_t(256 - ups));
        QVERIFY(((q >= 0) == (x >= 0)).all().item<bool>());
    }

    // ---- E8M0 and E4M3 scales -----------------------------------------------------------

    void e8m0MatchesMlDtypes()
    {
        const auto lines = table(QStringLiteral("e8m0_codes.txt"));
        QCOMPARE(lines.size(), 256);
        const auto decoded = e8m0_decode(torch::arange(256).to(torch::kUInt8));
        for (int c = 0; c < 256; ++c) {
            const float want = from_hex(lines[c].split(QLatin1Char(' '))[1]);
            const float got = decoded[c].item<float>();
            if (std::isnan(want)) QVERIFY(std::isnan(got));
            else QCOMPARE(bits_of(got), bits_of(want));
        }
        const auto exponents = torch::arange(-127, 128).to(torch::kFloat32);
        const auto codes = e8m0_encode_exponent(exponents);
        QVERIFY(torch::equal(codes.to(torch::kInt32), torch::arange(0, 255).to(torch::kInt32)));
        QVERIFY(same_bits(e8m0_decode(codes), pow2_exact(exponents)));
        QCOMPARE(bits_of(pow2_exact(torch::tensor({-127.0f})).item<float>()), 0x00400000u); // an FP32 subnormal
        QCOMPARE(bits_of(pow2_exact(torch::tensor({-149.0f})).item<float>()), 0x00000001u);
    }

    void e4m3BlockScaleMatchesMlDtypes()
    {
        std::vector<float> in, want;
        for (const auto& line : table(QStringLiteral("e4m3_scale.txt"))) {
            const auto parts = line.split(QLatin1Char(' '));
            in.push_back(from_hex(parts[0]));
            want.push_back(from_hex(parts[1]));
        }
        QVERIFY(in.size() > 700);
        QVERIFY(same_bits(round_to_format(torch::tensor(in), NumberFormat::E4M3, Overflow::Saturate), torch::tensor(want)));
    }

    void log2FromBitsIsExact()
    {
        const float below4 = std::nextafter(4.0f, 0.0f); // log2f rounds this to 2.0 in FP32
        const auto x = torch::tensor({1.0f, 4.0f, below4, 6.0f, 1e-45f, std::ldexp(1.0f, -127), 3.0e38f});
        const auto fl = floor_log2(x);
        const auto ce = ceil_log2(x);
        const float want_floor[] = {0, 2, 1, 2, -149, -127, 127};
        const float want_ceil[] = {0, 2, 2, 3, -149, -127, 128};
        for (int i = 0; i < 7; ++i) {
            QCOMPARE(fl[i].item<float>(), want_floor[i]);
            QCOMPARE(ce[i].item<float>(), want_ceil[i]);
        }
    }

    // ---- Recipes against the reference tables ----------------------------------------

    void nvfp4MatchesReference_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("tile2d");
        QTest::newRow("1x16") << "nvfp4_1x16.txt" << false;
        QTest::newRow("16x16") << "nvfp4_16x16.txt" << true;
    }
    void nvfp4MatchesReference()
    {
        QFETCH(QString, file);
        QFETCH(bool, tile2d);
        const auto lines = table(file);
        const auto x = test_matrix(40, 72);
        const auto q = quantize_nvfp4_2d(x, tile2d, std::nullopt);
        QVERIFY(lines[0].startsWith(QLatin1String("tensor_amax ")));
        const float tensor_amax = from_hex(lines[0].split(QLatin1Char(' '))[1]);
        QCOMPARE(bits_of(q.tensor_amax.item<float>()), bits_of(tensor_amax));
        const auto scales = grid_rows(lines, QStringLiteral("scales"), true);
        QVERIFY(same_bits(q.block_scales, scales));
        if (!tile2d) QVERIFY((scales == 0).any().item<bool>()); // 1x16 reaches E4M3 scale underflow
        const auto codes = code_rows(lines, 1);
        QCOMPARE(codes.size(0), int64_t(40));
        // TE's dequantize kernel: code * ((s * amax) * fl(1/2688)); no product overflows here.
        const float inv_2688 = 1.0f / 2688.0f;
        const auto step = (expand_grid(scales, tile2d ? 16 : 1, 16, 40, 72) * tensor_amax) * inv_2688;
        QVERIFY(same_bits(q.values, e2m1_decode(codes) * step));
    }

    void mxfp4MatchesReference_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("up");
        QTest::newRow("OCP floor") << "mxfp4_floor.txt" << false;
        QTest::newRow("TE round up") << "mxfp4_up.txt" << true;
    }
    void mxfp4MatchesReference()
    {
        QFETCH(QString, file);
        QFETCH(bool, up);
        const auto lines = table(file);
        const auto q = quantize_mxfp4_2d(test_matrix(40, 72), up);
        const auto scales = e8m0_decode(grid_rows(lines, QStringLiteral("scales"), false).to(torch::kUInt8));
        QVERIFY(same_bits(q.block_scales, scales));
        const auto expected = e2m1_decode(code_rows(lines, 1)) * expand_grid(scales, 1, 32, 40, 72);
        QVERIFY(same_bits(q.values, expected));
    }

    void fp8BlockMatchesReference_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<bool>("tile2d");
        QTest::addColumn<bool>("pow2");
        QTest::newRow("1x128 pow2") << "fp8_block_1x128_pow2.txt" << false << true;
        QTest::newRow("1x128 fp32 scales") << "fp8_block_1x128_fp32.txt" << false << false;
        QTest::newRow("128x128 pow2") << "fp8_block_128x128_pow2.txt" << true << true;
    }
    void fp8BlockMatchesReference()
    {
        QFETCH(QString, file);
        QFETCH(bool, tile2d);
        QFETCH(bool, pow2);
        const auto lines = table(file);
        const auto q = quantize_fp8_block_2d(test_matrix(132, 260), NumberFormat::E4M3, pow2, tile2d);
        const auto scales = grid_rows(lines, QStringLiteral("scales"), true);
        QVERIFY(same_bits(q.block_scales, scales));
        const auto expected = e4m3_decode(code_rows(lines, 2)) * expand_grid(scales, tile2d ? 128 : 1, 128, 132, 260);
        QVERIFY(same_bits(q.values, expected));
    }

    // Crafted cases, each row its own (1, n) tensor, against generate.py's tables: the edges
    // the specs name (zeros, signed zeros, Inf and NaN blocks, subnormal and FLT_MAX amaxes,
    // scales that overflow or underflow, ties, powers of two and their neighbours, padding)
    // and random rows, on both kernels. NaN matches NaN.
    void blockEdgesMatchReference_data()
    {
        QTest::addColumn<QString>("file");
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<int>("kernel");
        for (const auto kernel : {BlockKernel::FusedCpu, BlockKernel::TensorOps}) {
            const char* k = kernel == BlockKernel::FusedCpu ? "fused" : "tensor ops";
            for (const char* f : {"nvfp4_edges", "mxfp4_edges_floor", "mxfp4_edges_up", "fp8_block_edges_e4m3_pow2",
                                  "fp8_block_edges_e4m3_fp32", "fp8_block_edges_e5m2_pow2", "fp8_block_edges_e5m2_fp32"})
                QTest::addRow("%s, %s", f, k) << QString::fromLatin1(f) + ".txt" << QString::fromLatin1(f) << int(kernel);
        }
    }
    void blockEdgesMatchReference()
    {
        QFETCH(QString, file);
        QFETCH(QString, recipe);
        QFETCH(int, kernel);
        const auto lines = table(file);
        const auto row_of = [](const QString& line) {
            std::vector<float> v;
            for (const auto& h : line.section(QLatin1Char(' '), 1).split(QLatin1Char(' '))) v.push_back(from_hex(h));
            return torch::tensor(v).view({1, -1});
        };
        const auto same = [](const torch::Tensor& got, const torch::Tensor& want) {
            const auto g = got.reshape({-1}), w = want.reshape({-1});
            const auto both_nan = torch::isnan(g) & torch::isnan(w);
            return g.sizes() == w.sizes() && torch::equal(torch::where(both_nan, torch::zeros_like(g), g).view(torch::kInt32),
                                                          torch::where(both_nan, torch::zeros_like(w), w).view(torch::kInt32));
        };
        const auto k = static_cast<BlockKernel>(kernel);
        int cases = 0;
        for (int i = 0; i < lines.size(); ++i) {
            if (!lines[i].startsWith(QLatin1String("in "))) continue;
            const auto x = row_of(lines[i]);
            BlockQuantized q;
            int next = i + 1;
            if (recipe.startsWith(QLatin1String("nvfp4"))) {
                q = quantize_nvfp4_2d(x, false, std::nullopt, k);
                QVERIFY(same(q.tensor_amax, row_of(lines[next++])));
            } else if (recipe.startsWith(QLatin1String("mxfp4"))) {
                q = quantize_mxfp4_2d(x, recipe.endsWith(QLatin1String("up")), k);
            } else {
                const auto format = recipe.contains(QLatin1String("e5m2")) ? NumberFormat::E5M2 : NumberFormat::E4M3;
                q = quantize_fp8_block_2d(x, format, recipe.endsWith(QLatin1String("pow2")), false, k);
            }
            QVERIFY2(same(q.block_scales, row_of(lines[next])), qPrintable(QString("scales of case %1").arg(cases)));
            QVERIFY2(same(q.values, row_of(lines[next + 1])), qPrintable(QString("values of case %1").arg(cases)));
            ++cases;
        }
        QVERIFY(cases >= 35);
    }

    // The fused kernels' own rounding, at the ties: every input of the ml_dtypes E2M1 table
    // below 8 goes through an mxfp4 block whose amax is 6 (scale 1 under OCP's floor rule), and
    // every E4M3 table input up to 448 becomes an nvfp4 block scale (tensor amax 448 makes
    // S * fl(1/6) exactly 1, so the scale is E4M3(block amax)). Both kernels.
    void fusedKernelsRoundTiesAsMlDtypes()
    {
        std::vector<float> e2m1_in, e2m1_out;
        for (const auto& line : table(QStringLiteral("e2m1_rne.txt"))) {
            const auto parts = line.split(QLatin1Char(' '));
            const float v = from_hex(parts[0]);
            if (!(std::abs(v) < 8.0f)) continue;
            e2m1_in.push_back(v);
            e2m1_out.push_back(e2m1_decode(torch::tensor({static_cast<uint8_t>(parts[1].toUInt(nullptr, 16))}, torch::kUInt8)).item<float>());
        }
        const int64_t n = static_cast<int64_t>(e2m1_in.size()), rows = (n + 30) / 31;
        auto inputs = torch::zeros({rows * 31});
        inputs.narrow(0, 0, n).copy_(torch::tensor(e2m1_in));
        const auto x = torch::cat({torch::full({rows, 1}, 6.0f), inputs.view({rows, 31})}, 1);
        std::vector<float> e4m3_in, e4m3_out;
        for (const auto& line : table(QStringLiteral("e4m3_scale.txt"))) {
            const auto parts = line.split(QLatin1Char(' '));
            if (from_hex(parts[0]) > 448.0f) continue;
            e4m3_in.push_back(from_hex(parts[0]));
            e4m3_out.push_back(from_hex(parts[1]));
        }
        QVERIFY(n > 2000 && e4m3_in.size() > 700);
        auto blocks = torch::zeros({1, 16 * static_cast<int64_t>(e4m3_in.size() + 1)});
        blocks[0][0] = 448.0f;
        blocks.view({-1, 16}).narrow(0, 1, static_cast<int64_t>(e4m3_in.size())).select(1, 3).copy_(torch::tensor(e4m3_in));
        for (const auto kernel : {BlockKernel::FusedCpu, BlockKernel::TensorOps}) {
            const auto q = quantize_mxfp4_2d(x, false, kernel);
            QVERIFY(same_bits(q.block_scales, torch::ones({rows, 1})));
            QVERIFY(same_bits(q.values.narrow(1, 1, 31).reshape({-1}).narrow(0, 0, n), torch::tensor(e2m1_out)));
            const auto s = quantize_nvfp4_2d(blocks, false, std::nullopt, kernel).block_scales.view({-1});
            QCOMPARE(s[0].item<float>(), 448.0f);
            QVERIFY(same_bits(s.narrow(0, 1, static_cast<int64_t>(e4m3_in.size())), torch::tensor(e4m3_out)));
        }
    }

    // The dgrad GEMM multiplies W cast along N (its contraction dimension), not the forward's
    // cast along K: the weight cache may share one cast only where square tiles make the two
    // identical (fp8-block, nvfp4 with 2-D weights). dx is checked bit for bit against the
    // casts made by hand, after a forward that filled the cache.
    // The native fp8-block GEMM takes the rounded operands apart into E4M3 codes and a
    // power-of-two scale per 1x128 block: back together they must be the very same bits, for
    // 1x128 activations and 128x128 weight tiles, across many binades, with a block of zeros,
    // E4M3 subnormal codes (a block whose amax is far above its smallest value), and a block
    // holding a NaN (which stays NaN).
    void blockwiseSplitIsExact()
    {
        torch::manual_seed(11);
        auto x = torch::randn({256, 384}) * torch::exp2(torch::randint(-30, 30, {256, 1}).to(torch::kFloat32));
        x.index_put_({5, torch::indexing::Slice(128, 256)}, 0.0f);              // a block of zeros
        x.index_put_({6, torch::indexing::Slice(0, 128)}, 0.01f);               // small beside ...
        x.index_put_({6, 0}, 300.0f);                                            // ... its amax: subnormal codes
        x.index_put_({7, 3}, std::numeric_limits<float>::quiet_NaN());           // a NaN block
        for (const bool tile_2d : {false, true}) {
            const auto q = quantize_fp8_block_2d(x, NumberFormat::E4M3, /*power_of_two=*/true, tile_2d).values;
            const auto parts = split_fp8_blocks(q);
            QCOMPARE(parts.codes.scalar_type(), torch::kFloat8_e4m3fn);
            QCOMPARE(parts.decode.sizes(), (torch::IntArrayRef{256, 3}));
            const auto back = join_fp8_blocks(parts);
            const auto finite = torch::isfinite(q);
            QVERIFY(torch::equal(back.masked_select(finite).view(torch::kInt32), q.masked_select(finite).view(torch::kInt32)));
            QVERIFY(torch::equal(torch::isnan(back), torch::isnan(q))); // the block holding (7, 3), and only it
            QCOMPARE(torch::isnan(q).sum().item<int64_t>(), int64_t(tile_2d ? 128 * 128 : 128));
            // Scales are powers of two, 1 for the block of zeros.
            const auto scales = parts.decode.masked_select(torch::isfinite(parts.decode));
            QVERIFY(torch::equal(std::get<0>(torch::frexp(scales)), torch::full_like(scales, 0.5f)));
            QCOMPARE(parts.decode[5][1].item<float>(), 1.0f);
            // Row 6's first 1x128 block needs E4M3 subnormals: 0.01 beside 300 at a scale of 1.
            if (!tile_2d) {
                const auto codes6 = parts.codes[6].narrow(0, 1, 127).to(torch::kFloat32).abs();
                QCOMPARE(codes6.max().item<float>(), 5 * std::ldexp(1.0f, -9)); // 0.01 to the nearest subnormal
            }
        }
        // On the CPU the product is the dequantized FP32 one, and no GPU is there to be native.
        const auto a = quantize_fp8_block_2d(x.narrow(0, 0, 128).nan_to_num(), NumberFormat::E4M3, true, false).values;
        const auto w = quantize_fp8_block_2d(x.narrow(0, 128, 128), NumberFormat::E4M3, true, true).values;
        const auto y = blockwise_fp8_mm(split_fp8_blocks(a), split_fp8_blocks(w));
        QVERIFY(torch::equal(y, at::mm(a, w.t())));
        if (!torch::cuda::is_available()) QVERIFY(!blockwise_fp8_available());
    }

    // Which fp8-block GEMMs may go to cuBLAS's blockwise kernel: power-of-two scales (the codes
    // come back exactly), no outliers kept aside (BF16 values, no E4M3 code times the block's
    // scale), whole 128-blocks, and K of two blocks or more (with one, _scaled_mm reads the
    // scales as row-wise, which on Hopper wants a BF16 output and would throw).
    void blockwiseGemmTakesOnlyWhatItCanSplit_data()
    {
        QTest::addColumn<bool>("power_of_two");
        QTest::addColumn<double>("outliers");
        QTest::addColumn<int>("m");
        QTest::addColumn<int>("k");
        QTest::addColumn<int>("n");
        QTest::addColumn<bool>("eligible");
        QTest::newRow("two K blocks") << true << 0.0 << 128 << 256 << 384 << true;
        QTest::newRow("one K block") << true << 0.0 << 128 << 128 << 384 << false;
        QTest::newRow("FP32 scales") << false << 0.0 << 128 << 256 << 384 << false;
        QTest::newRow("outliers aside") << true << 6.0 << 128 << 256 << 384 << false;
        QTest::newRow("M not whole blocks") << true << 0.0 << 96 << 256 << 384 << false;
        QTest::newRow("N not whole blocks") << true << 0.0 << 128 << 256 << 320 << false;
    }
    void blockwiseGemmTakesOnlyWhatItCanSplit()
    {
        QFETCH(bool, power_of_two);
        QFETCH(double, outliers);
        QFETCH(int, m);
        QFETCH(int, k);
        QFETCH(int, n);
        QFETCH(bool, eligible);
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Block128;
        r.block_power_of_two = power_of_two;
        r.outlier_rms_multiple = outliers;
        const auto e4m3 = NumberFormat::E4M3;
        LayerGemm layer("test.fc", {e4m3, e4m3, e4m3}, r, GemmBackend::Native);
        QCOMPARE(layer.blockwise_fp8_eligible(torch::zeros({m, k}), torch::zeros({k, n})), eligible);
    }

    void dgradUsesTheWeightCastAlongN_data()
    {
        QTest::addColumn<QString>("scaling");
        QTest::addColumn<bool>("weight_2d");
        QTest::addColumn<bool>("square"); // W cast along K equals W cast along N
        QTest::addRow("fp8-block") << "fp8-block" << true << true;
        QTest::addRow("nvfp4 16x16 weights") << "nvfp4" << true << true;
        QTest::addRow("nvfp4 1x16 weights") << "nvfp4" << false << false;
        QTest::addRow("mxfp4") << "mxfp4" << false << false;
    }
    void dgradUsesTheWeightCastAlongN()
    {
        QFETCH(QString, scaling);
        QFETCH(bool, weight_2d);
        QFETCH(bool, square);
        Fp8Recipe r;
        r.scaling = scaling == "fp8-block" ? Fp8Scaling::Block128 : scaling == "nvfp4" ? Fp8Scaling::NvFp4 : Fp8Scaling::MxFp4;
        r.nvfp4_weight_2d = weight_2d;
        const auto e4m3 = NumberFormat::E4M3;
        torch::manual_seed(21);
        const auto x = torch::randn({32, 160}, torch::requires_grad()); // (M, K); 160: a padded 128-block
        const auto w = (torch::randn({48, 160}) * torch::exp2(torch::randint(-6, 6, {48, 160}))).requires_grad_(); // (N, K)
        const auto dy = torch::randn({32, 48}) * 1e-3;                                                          // (M, N)
        const auto along_k = quantize_block_recipe(w.detach(), e4m3, r, 1, TensorRole::Weight);
        const auto along_n = quantize_block_recipe(w.detach(), e4m3, r, 0, TensorRole::Weight);
        QCOMPARE(same_bits(along_k, along_n), square);

        LayerGemm layer("test.fc", {e4m3, e4m3, e4m3}, r, GemmBackend::Emulated);
        layer.linear(x, w, {}).backward(dy);
        const auto dy_q = quantize_block_recipe(dy, e4m3, r, 1, TensorRole::Gradient);
        const auto expected_dx = round_to_format(dy_q.matmul(along_n), gemm_output_format(e4m3), Overflow::Propagate);
        QVERIFY(same_bits(x.grad(), expected_dx));
    }

    // The fused CPU kernels (used on the CPU) and the tensor-op kernels (used elsewhere) agree
    // bit for bit: values, scales and amaxes, with padding, zero, Inf and NaN blocks and SR.
    void fusedAndTensorOpKernelsAgree_data()
    {
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<bool>("variant"); // 2-D tiles / round up / SR
        // Rows of whole 16-blocks (a flat nvfp4 pass) or not, and of whole 128-blocks (fp8-block's
        // 16-blocks-at-a-time pass, its 450 blocks in ranges that start off a multiple of 16).
        QTest::addColumn<int>("cols");
        // nvfp4's variant: 16x16 tiles and stochastic rounding; nvfp4-sr: stochastic rounding
        // of 1x16 blocks, then of tiles.
        for (const char* r : {"nvfp4", "nvfp4-sr", "mxfp4", "fp8-block", "fp8-block-e5m2"})
            for (int cols : {300, 320, 384}) {
                QTest::addRow("%s, %d columns", r, cols) << r << false << cols;
                QTest::addRow("%s variant, %d columns", r, cols) << r << true << cols;
            }
    }
    void fusedAndTensorOpKernelsAgree()
    {
        QFETCH(QString, recipe);
        QFETCH(bool, variant);
        QFETCH(int, cols);
        auto x = test_matrix(150, cols) * 37.0f;
        x[3].narrow(0, 0, 40).zero_();
        x[4].narrow(0, 0, 128).zero_();              // a block of zeros: scale 1
        x[6].narrow(0, 128, 128).fill_(-1e-41f);     // a subnormal block: fp8-block's scale FLT_MAX
        x[5][7] = std::numeric_limits<float>::infinity();
        x[5][8] = 1e30f; // in the Inf's block: not the nvfp4 tensor amax
        x[149][cols - 3] = -std::numeric_limits<float>::infinity(); // the last block: a range's tail
        x[149][cols - 2] = 2e30f;
        x[140][290] = std::numeric_limits<float>::quiet_NaN();
        x[9][100] = 1e-30f;
        const auto run = [&](BlockKernel k) {
            if (recipe.startsWith("nvfp4"))
                return quantize_nvfp4_2d(x, variant, variant || recipe == "nvfp4-sr" ? std::optional<uint64_t>(99) : std::nullopt, k);
            if (recipe == "mxfp4") return quantize_mxfp4_2d(x, variant, k);
            const auto f = recipe == "fp8-block" ? NumberFormat::E4M3 : NumberFormat::E5M2;
            return quantize_fp8_block_2d(x, f, !variant, variant, k);
        };
        const auto fused = run(BlockKernel::FusedCpu);
        const auto ops = run(BlockKernel::TensorOps);
        QVERIFY(same_bits(fused.values, ops.values));
        QVERIFY(same_bits(fused.block_scales, ops.block_scales));
        QVERIFY(same_bits(fused.block_amax, ops.block_amax));
        QCOMPARE(fused.tensor_amax.defined(), recipe.startsWith("nvfp4"));
        QCOMPARE(ops.tensor_amax.defined(), recipe.startsWith("nvfp4"));
        if (recipe.startsWith("nvfp4")) QCOMPARE(bits_of(fused.tensor_amax.item<float>()), bits_of(ops.tensor_amax.item<float>()));
        QVERIFY(torch::isnan(fused.values).any().item<bool>());
    }

    // A seed left to the quantizer (of_content) is content_seed of its operand, which the fused
    // 1x16 pass sums while it reads the operand for its amaxes: the same values as the seed
    // passed in, on each path and thread count (ragged ranges: 18,012 blocks).
    void contentSeedTakenInThePassIsTheSeed_data()
    {
        QTest::addColumn<bool>("tiles");
        QTest::addColumn<int>("cols");
        QTest::addRow("1x16, rows of whole blocks") << false << 16 * 79;
        QTest::addRow("1x16, ragged rows") << false << 16 * 79 - 5;
        QTest::addRow("16x16 tiles") << true << 16 * 79;
    }
    void contentSeedTakenInThePassIsTheSeed()
    {
        QFETCH(bool, tiles);
        QFETCH(int, cols);
        const ThreadCount restore;
        auto x = test_matrix(228, cols) * 3.0f;
        x[7][100] = std::numeric_limits<float>::infinity();
        const auto want = quantize_nvfp4_2d(x, tiles, SrSeed(content_seed(x)), BlockKernel::TensorOps).values;
        QVERIFY(same_bits(quantize_nvfp4_2d(x, tiles, SrSeed::of_content(), BlockKernel::TensorOps).values, want));
        QVERIFY(!same_bits(quantize_nvfp4_2d(x, tiles, SrSeed(content_seed(x) + 1), BlockKernel::TensorOps).values, want));
        for (int threads : {1, 2, 3}) {
            at::set_num_threads(threads);
            QVERIFY2(same_bits(quantize_nvfp4_2d(x, tiles, SrSeed::of_content(), BlockKernel::FusedCpu).values, want),
                     qPrintable(QString("%1 threads").arg(threads)));
        }
    }

    // Grid points and ties, element values exactly (each block's amax is 6, so its scale is 1):
    // with 8 random bits per element, a few hundred elements each meet u = 1/2 and so a sum
    // on a grid point (0.75 + 1/2 * 0.5 = 1, 1.75 -> 2, 3.5 -> 4) or a tie of nearest-even.
    // The fused rounding against the tensor-op one, an independent formula.
    void fusedRoundingAgreesOnGridPointsAndTies_data()
    {
        QTest::addColumn<bool>("tiles");
        QTest::addColumn<bool>("stochastic");
        for (bool tiles : {false, true})
            for (bool stochastic : {false, true})
                QTest::addRow("%s, %s", tiles ? "16x16" : "1x16", stochastic ? "SR" : "RNE") << tiles << stochastic;
    }
    void fusedRoundingAgreesOnGridPointsAndTies()
    {
        QFETCH(bool, tiles);
        QFETCH(bool, stochastic);
        const float values[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 5.5f, 0.1f};
        auto x = torch::empty({192, 320});
        auto a = x.accessor<float, 2>();
        for (int r = 0; r < 192; ++r)
            for (int c = 0; c < 320; ++c) {
                const float v = c % 16 == 0 ? 6.0f : values[(r * 7 + c) % 15];
                a[r][c] = (r + c) % 2 ? -v : v;
            }
        const auto seed = stochastic ? std::optional<uint64_t>(1234) : std::nullopt;
        const auto fused = quantize_nvfp4_2d(x, tiles, seed, BlockKernel::FusedCpu);
        const auto ops = quantize_nvfp4_2d(x, tiles, seed, BlockKernel::TensorOps);
        QVERIFY(same_bits(fused.block_scales, torch::full_like(fused.block_scales, 448.0f))); // scale 1
        QVERIFY(same_bits(fused.values, ops.values));
    }

    // The fused kernels split their blocks over LibTorch's threads; each block is written by one
    // thread from its own inputs, so the bits cannot depend on how many there are.
    void fusedKernelsAreTheSameOnAnyThreadCount_data() { fusedAndTensorOpKernelsAgree_data(); }
    void fusedKernelsAreTheSameOnAnyThreadCount()
    {
        QFETCH(QString, recipe);
        QFETCH(bool, variant);
        QFETCH(int, cols);
        const ThreadCount restore;
        auto x = test_matrix(300, cols * 3) * 37.0f; // 17,100 or 18,000 nvfp4 blocks: many tasks of 256
        x[5][7] = std::numeric_limits<float>::infinity();
        x[240][290] = std::numeric_limits<float>::quiet_NaN();
        const auto run = [&](int threads) {
            at::set_num_threads(threads);
            if (recipe.startsWith("nvfp4"))
                return quantize_nvfp4_2d(x, variant, variant || recipe == "nvfp4-sr" ? std::optional<uint64_t>(7) : std::nullopt);
            if (recipe == "mxfp4") return quantize_mxfp4_2d(x, variant);
            const auto f = recipe == "fp8-block" ? NumberFormat::E4M3 : NumberFormat::E5M2;
            return quantize_fp8_block_2d(x, f, !variant, variant);
        };
        const auto one = run(1);
        for (int threads : {2, 3}) {
            const auto many = run(threads);
            QVERIFY(same_bits(many.values, one.values));
            QVERIFY(same_bits(many.block_scales, one.block_scales));
            QVERIFY(same_bits(many.block_amax, one.block_amax));
        }
    }

    // The block recipes' transposing copy: the same bytes as x.contiguous() for each layout it
    // copies itself (transposed, column-sliced, row-strided, ragged against its 32x32 tiles, 2-
    // and 4-byte elements) and for those it leaves to LibTorch, on any thread count.
    void contiguousOnThreadsIsContiguous_data()
    {
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("cols");
        QTest::addColumn<QString>("layout");
        QTest::addColumn<bool>("bf16");
        for (bool bf16 : {false, true}) {
            const char* t = bf16 ? "bf16" : "fp32";
            QTest::addRow("%s transposed", t) << 512 << 768 << "transposed" << bf16;
            QTest::addRow("%s transposed, ragged tiles", t) << 161 << 333 << "transposed" << bf16;
            QTest::addRow("%s column slice", t) << 300 << 200 << "columns" << bf16;
            QTest::addRow("%s every other row", t) << 400 << 129 << "rows" << bf16;
            QTest::addRow("%s small, left to LibTorch", t) << 40 << 30 << "transposed" << bf16;
            QTest::addRow("%s 3-d, left to LibTorch", t) << 64 << 600 << "3-d" << bf16;
        }
    }
    void contiguousOnThreadsIsContiguous()
    {
        QFETCH(int, rows);
        QFETCH(int, cols);
        QFETCH(QString, layout);
        QFETCH(bool, bf16);
        const ThreadCount restore;
        auto base = test_matrix(rows, cols);
        base[1][2] = -0.0f;
        base[rows - 1][cols - 1] = std::numeric_limits<float>::quiet_NaN();
        if (bf16) base = base.to(torch::kBFloat16);
        torch::Tensor x;
        if (layout == "transposed") x = base.t();
        else if (layout == "columns") x = base.narrow(1, 3, cols - 10);
        else if (layout == "rows") x = base.slice(0, 0, rows, 2);
        else x = base.view({rows / 2, 2, cols}).transpose(0, 2);
        QVERIFY(!x.is_contiguous());
        const auto want = x.contiguous();
        const auto bytes = [](const torch::Tensor& t) { return t.contiguous().view(torch::kUInt8).reshape({-1}); };
        for (int threads : {1, 3}) {
            at::set_num_threads(threads);
            const auto got = contiguous_on_threads(x);
            QVERIFY(got.is_contiguous());
            QCOMPARE(got.sizes(), want.sizes());
            QCOMPARE(got.scalar_type(), want.scalar_type());
            QVERIFY(torch::equal(bytes(got), bytes(want)));
        }
    }

    // fp8-block's cast along a matrix's columns, read in place, against the row cast of its
    // transpose (fused and tensor ops): values, scales and amaxes bit for bit, with ragged
    // blocks and panels, a block of zeros, one with an Inf and one with a NaN, on 1 and 3 threads.
    void fp8BlockColumnsReadInPlace_data()
    {
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("cols");
        QTest::addColumn<bool>("e5m2");
        QTest::addColumn<bool>("powerOfTwo");
        for (bool e5m2 : {false, true})
            for (bool pow2 : {true, false}) {
                const char* f = e5m2 ? "e5m2" : "e4m3";
                const char* k = pow2 ? "power-of-two" : "fp32 scales";
                QTest::addRow("768x512 %s %s", f, k) << 768 << 512 << e5m2 << pow2;
                QTest::addRow("300x200 %s %s", f, k) << 300 << 200 << e5m2 << pow2;
                QTest::addRow("130x17 %s %s", f, k) << 130 << 17 << e5m2 << pow2;
            }
        QTest::addRow("one row") << 1 << 40 << false << true;
    }
    void fp8BlockColumnsReadInPlace()
    {
        QFETCH(int, rows);
        QFETCH(int, cols);
        QFETCH(bool, e5m2);
        QFETCH(bool, powerOfTwo);
        const ThreadCount restore;
        const auto format = e5m2 ? NumberFormat::E5M2 : NumberFormat::E4M3;
        auto x = test_matrix(rows, cols) * 300.0f;
        if (rows > 129 && cols > 16) {
            x.narrow(0, 0, 128).select(1, 3).zero_();                       // a whole block of zeros
            x[129][16] = std::numeric_limits<float>::infinity();            // the second block of column 16
            x[rows - 1][cols - 1] = std::numeric_limits<float>::quiet_NaN(); // the ragged corner
            x[5][0] = 1e30f;                                                 // an outlier
        }
        const auto rows_of_t = quantize_fp8_block_2d(x.t().contiguous(), format, powerOfTwo, false, BlockKernel::FusedCpu);
        const auto ops = quantize_fp8_block_2d(x.t().contiguous(), format, powerOfTwo, false, BlockKernel::TensorOps);
        for (int threads : {1, 3}) {
            at::set_num_threads(threads);
            const auto q = quantize_fp8_block_columns(x, format, powerOfTwo);
            QVERIFY(q.values.is_contiguous());
            QVERIFY(same_bits(q.values, rows_of_t.values.t()));
            QVERIFY(same_bits(q.block_scales, rows_of_t.block_scales));
            QVERIFY(same_bits(q.block_amax, rows_of_t.block_amax));
            QVERIFY(same_bits(q.values, ops.values.t()));
            QVERIFY(same_bits(q.block_scales, ops.block_scales));
        }
        // The recipe takes it for a CPU operand cast along dim 0.
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Block128;
        r.block_power_of_two = powerOfTwo;
        QVERIFY(same_bits(quantize_block_recipe(x, format, r, 0, TensorRole::Activation), rows_of_t.values.t()));
    }

    // ---- Edges: zeros, Inf, NaN, saturation, layout ----------------------------------

    void nonFiniteBlocksBecomeNaN_data()
    {
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<float>("bad");
        for (const char* r : {"nvfp4", "mxfp4", "fp8-block"}) {
            QTest::addRow("%s +inf", r) << r << std::numeric_limits<float>::infinity();
            QTest::addRow("%s -inf", r) << r << -std::numeric_limits<float>::infinity();
            QTest::addRow("%s nan", r) << r << std::numeric_limits<float>::quiet_NaN();
        }
    }
    void nonFiniteBlocksBecomeNaN()
    {
        QFETCH(QString, recipe);
        QFETCH(float, bad);
        const int64_t block = block_of(recipe);
        const auto x = test_matrix(4, 2 * block) * 1000.0f;
        auto poisoned = x.clone();
        poisoned[1][5] = bad;
        auto absent = x.clone();
        absent[1].narrow(0, 0, block).zero_();
        const auto q = quantize_2d(recipe, poisoned).values;
        const auto reference = quantize_2d(recipe, absent).values;
        QVERIFY(torch::isnan(q[1].narrow(0, 0, block)).all().item<bool>());
        // Everything else is what it would be without the block (NVFP4's tensor scale included).
        auto rest = torch::ones_like(x, torch::kBool);
        rest[1].narrow(0, 0, block).fill_(false);
        QVERIFY(same_bits(q.masked_select(rest), reference.masked_select(rest)));
        QVERIFY(torch::isfinite(q.masked_select(rest)).all().item<bool>());
    }

    void zeroBlocksStayZero_data()
    {
        QTest::addColumn<QString>("recipe");
        for (const char* r : {"nvfp4", "mxfp4", "fp8-block"}) QTest::addRow("%s", r) << r;
    }
    void zeroBlocksStayZero()
    {
        QFETCH(QString, recipe);
        const int64_t block = block_of(recipe);
        auto x = test_matrix(3, 2 * block);
        x[2].narrow(0, 0, block).zero_();
        x[2][3] = -0.0f;
        const auto q = quantize_2d(recipe, x).values;
        QVERIFY(same_bits(q[2].narrow(0, 0, block), x[2].narrow(0, 0, block))); // +0 and -0 as given
        const auto all_zero = quantize_2d(recipe, torch::zeros({2, block})).values;
        QVERIFY(same_bits(all_zero, torch::zeros({2, block})));
    }

    void mxfp4ScaleRulesDiffer()
    {
        // amax 7: OCP's floor rule gives 2^(2-2) = 1 and saturates 7 to 6; rounding up gives
        // 2^ceil(log2(7/6)) = 2, so 7 -> 3.5 -> 4 (tie to even) -> 8, and 1 -> 0.5 -> 1.
        auto x = torch::zeros({1, 32});
        x[0][0] = 7.0f;
        x[0][1] = 1.0f;
        const auto floor = quantize_mxfp4_2d(x, false);
        const auto up = quantize_mxfp4_2d(x, true);
        QCOMPARE(floor.values[0][0].item<float>(), 6.0f);
        QCOMPARE(floor.values[0][1].item<float>(), 1.0f);
        QCOMPARE(floor.block_scales.item<float>(), 1.0f);
        QCOMPARE(up.values[0][0].item<float>(), 8.0f);
        QCOMPARE(up.values[0][1].item<float>(), 1.0f);
        QCOMPARE(up.block_scales.item<float>(), 2.0f);
        QCOMPARE(block_format_stats(x, floor, NumberFormat::E2M1).clipped_block_fraction, 1.0);
        QCOMPARE(block_format_stats(x, up, NumberFormat::E2M1).clipped_block_fraction, 0.0);
    }

    void nvfp4UnderflowStats()
    {
        // Block 0 is 10^-12 of the tensor amax: its E4M3 scale rounds to 0 and it vanishes.
        auto x = torch::ones({1, 32});
        x.narrow(1, 0, 16).fill_(1e-12f);
        const auto q = quantize_nvfp4_2d(x, false, std::nullopt);
        QCOMPARE(q.block_scales[0][0].item<float>(), 0.0f);
        QCOMPARE(q.block_scales[0][1].item<float>(), 448.0f);
        QVERIFY(same_bits(q.values.narrow(1, 0, 16), torch::zeros({1, 16})));
        QVERIFY(same_bits(q.values.narrow(1, 16, 16), torch::ones({1, 16})));
        const auto s = block_format_stats(x, q, NumberFormat::E2M1);
        QCOMPARE(s.scale_underflow_fraction, 0.5);
        QCOMPARE(s.zero_fraction, 0.5);
        QCOMPARE(s.clipped_block_fraction, 0.0);
        QVERIFY(s.snr_db > 200.0);
    }

    // An operand with no elements (a batch of no rows, a layer of width 0) has no blocks: every
    // recipe, on both kernels, returns an empty cast of its shape, and telemetry's record of it
    // is empty too. max() of nothing used to throw on the tensor-op path (every GPU's).
    void emptyOperandsQuantizeToNothing_data()
    {
        QTest::addColumn<int>("kernel");
        QTest::addColumn<int>("rows");
        QTest::addColumn<int>("cols");
        for (const auto& [name, kernel] : {std::pair{"fused", BlockKernel::FusedCpu}, std::pair{"ops", BlockKernel::TensorOps}})
            for (const auto& [r, c] : {std::pair{0, 16}, std::pair{3, 0}, std::pair{0, 0}})
                QTest::newRow(qPrintable(QString("%1 %2x%3").arg(name).arg(r).arg(c))) << int(kernel) << r << c;
    }
    void emptyOperandsQuantizeToNothing()
    {
        QFETCH(int, kernel);
        QFETCH(int, rows);
        QFETCH(int, cols);
        const auto k = static_cast<BlockKernel>(kernel);
        const auto x = torch::zeros({rows, cols});
        for (const bool tile_2d : {false, true}) {
            const auto nv = quantize_nvfp4_2d(x, tile_2d, std::nullopt, k);
            QCOMPARE(nv.values.sizes(), x.sizes());
            QCOMPARE(block_cast_record(nv, NumberFormat::E4M3, recipe_of(Fp8Scaling::NvFp4)).used_scales.numel(), int64_t(0));
            const auto fp8 = quantize_fp8_block_2d(x, NumberFormat::E4M3, true, tile_2d, k);
            QCOMPARE(fp8.values.sizes(), x.sizes());
        }
        const auto mx = quantize_mxfp4_2d(x, false, k);
        QCOMPARE(mx.values.sizes(), x.sizes());
        QCOMPARE(block_cast_record(mx, NumberFormat::E4M3, recipe_of(Fp8Scaling::MxFp4)).used_scales.numel(), int64_t(0));
    }

    // The statistics count what the quantizer did, on both kernels:
    // - fp8-block, FP32 scales: amax 2.6745 gets scale fl(448 / amax) = 167.50795, which maps
    //   it onto 448 exactly, but amax / fl(1 / scale) = 448.00003; amax 4.767003 is scaled to
    //   448.00003 by the quantizer itself. Neither is clipped. A row of amax
    //   2e-36 gets a huge scale, not an underflowed one.
    // - nvfp4 below a tensor amax of 2688 / FLT_MAX (7.9e-36), where S is capped: one block of
    //   amax 2^-120 takes E4M3 scale 44 (42.67 rounded) and element scale 2^128 / 44, so its
    //   amax scales to 5.8: not clipped (dividing by the value scale said 61, "all clipped").
    void blockStatsCountWhatTheQuantizerDid_data()
    {
        QTest::addColumn<int>("kernel");
        QTest::newRow("fused CPU") << int(BlockKernel::FusedCpu);
        QTest::newRow("tensor ops") << int(BlockKernel::TensorOps);
    }
    void blockStatsCountWhatTheQuantizerDid()
    {
        QFETCH(int, kernel);
        const auto k = static_cast<BlockKernel>(kernel);
        auto x = torch::full({3, 128}, 0.5f);
        x[0][7] = 2.6745f;
        x[1].fill_(1e-36f);
        x[1][3] = 2e-36f;
        x[2][9] = 4.767003f; // scaled by fl(448 / amax) = 93.979385 it is 448.00003: an ulp, not a clip
        const auto fp8 = quantize_fp8_block_2d(x, NumberFormat::E4M3, /*power_of_two=*/false, false, k);
        QCOMPARE(fp8.block_scales[0].item<float>(), 1.0f / (448.0f / 2.6745f));
        QCOMPARE(fp8.values[0][7].item<float>(), 2.6745f); // 448 exactly, not clamped
        const auto fs = block_format_stats(x, fp8, NumberFormat::E4M3);
        QCOMPARE(fs.clipped_block_fraction, 0.0);
        QCOMPARE(fs.scale_underflow_fraction, 0.0);

        auto tiny = torch::full({1, 16}, std::ldexp(1.0f, -122));
        tiny[0][5] = std::ldexp(1.0f, -120);
        const auto nv = quantize_nvfp4_2d(tiny, false, std::nullopt, k);
        QCOMPARE(nv.block_scales.item<float>(), 44.0f);
        const auto ns = block_format_stats(tiny, nv, NumberFormat::E2M1);
        QCOMPARE(ns.clipped_block_fraction, 0.0);
        QCOMPARE(ns.scale_underflow_fraction, 0.0);
        // At a normal scale a block is clipped where its E4M3 scale rounded down: in a tensor of
        // amax 1, a block of amax 0.9375 asks for 0.9375 * 448 = 420, gets 416, and its amax
        // scales to 0.9375 * 2688 / 416 = 6.06; the block of amax 1 gets 448 and maps onto 6.
        auto normal = torch::full({1, 32}, 0.25f);
        normal[0][0] = 0.9375f;
        normal[0][16] = 1.0f;
        const auto nq = quantize_nvfp4_2d(normal, false, std::nullopt, k);
        QCOMPARE(nq.block_scales[0][0].item<float>(), 416.0f);
        QCOMPARE(nq.block_scales[0][1].item<float>(), 448.0f);
        QCOMPARE(block_format_stats(normal, nq, NumberFormat::E2M1).clipped_block_fraction, 0.5);
    }

    void weightTilesQuantizeTransposeAlike_data()
    {
        QTest::addColumn<int>("scaling");
        QTest::addColumn<bool>("tiles");
        QTest::addColumn<bool>("alike");
        QTest::newRow("nvfp4 16x16") << int(Fp8Scaling::NvFp4) << true << true;
        QTest::newRow("nvfp4 weight_2d off") << int(Fp8Scaling::NvFp4) << false << false;
        QTest::newRow("fp8-block 128x128") << int(Fp8Scaling::Block128) << true << true;
    }
    void weightTilesQuantizeTransposeAlike()
    {
        QFETCH(int, scaling);
        QFETCH(bool, tiles);
        QFETCH(bool, alike);
        auto r = recipe_of(static_cast<Fp8Scaling>(scaling));
        r.nvfp4_weight_2d = tiles;
        const auto w = test_matrix(130, 140); // (N, K), padded on both axes
        const auto forward = quantize_block_recipe(w, NumberFormat::E4M3, r, 1, TensorRole::Weight);
        const auto dgrad = quantize_block_recipe(w, NumberFormat::E4M3, r, 0, TensorRole::Weight);
        QCOMPARE(same_bits(forward, dgrad), alike);
        // Activations quantize along K only: the transpose differs.
        QVERIFY(!same_bits(quantize_block_recipe(w, NumberFormat::E4M3, r, 1, TensorRole::Activation),
                           quantize_block_recipe(w, NumberFormat::E4M3, r, 0, TensorRole::Activation)));
    }

    void blocksRunAlongTheContractionDim()
    {
        const auto x = test_matrix(24, 40);
        const auto r = recipe_of(Fp8Scaling::MxFp4);
        // k_dim 0 is the transpose's rows: the same as quantizing x^T along its last dim.
        QVERIFY(same_bits(quantize_block_recipe(x, NumberFormat::E4M3, r, 0, TensorRole::Activation),
                          quantize_mxfp4_2d(x.t(), false).values.t()));
        const auto x3 = test_matrix(6, 40).view({2, 3, 40});
        QVERIFY(same_bits(quantize_block_recipe(x3, NumberFormat::E4M3, r, -1, TensorRole::Activation),
                          quantize_mxfp4_2d(x3.reshape({6, 40}), false).values.view({2, 3, 40})));
    }

    // ---- Blackwell's FP4 GEMM operands (block_fp4_gemm.h; the GEMM itself is untested) -----

    // mxfp4's rounded values split into codes and a power of two per block from the values
    // alone, and join back bit for bit: both scale rules, a block of zeros, one at E8M0's floor
    // (FP32 subnormals), one holding a NaN (the cast's NaN block), and a -0.
    void mxfp4SplitsExactlyFromItsValues_data()
    {
        QTest::addColumn<bool>("roundUp");
        QTest::addRow("floor") << false;
        QTest::addRow("round up") << true;
    }
    void mxfp4SplitsExactlyFromItsValues()
    {
        QFETCH(bool, roundUp);
        auto x = test_matrix(8, 128);
        x.narrow(0, 1, 1).narrow(1, 0, 32).zero_();
        x.narrow(0, 2, 1).narrow(1, 32, 32).mul_(std::ldexp(1.0f, -120)); // down to 2^-140: E8M0's floor and below
        x[3][5] = std::numeric_limits<float>::quiet_NaN();
        x[4][64] = -0.0f;
        const auto q = quantize_mxfp4_2d(x, roundUp).values;
        const auto op = split_mxfp4_blocks(q);
        QVERIFY(!op.nvfp4 && !op.global.defined());
        QCOMPARE(op.codes.sizes(), q.sizes());
        QCOMPARE(op.scales.sizes(), (c10::IntArrayRef{8, 4}));
        QVERIFY(op.codes.max().item<int>() <= 15);
        QVERIFY(same_bits(join_fp4_blocks(op), q));
        QCOMPARE(op.scales[2][1].item<float>(), std::ldexp(1.0f, -127)); // at the floor
        QVERIFY(std::isnan(op.scales[3][0].item<float>()));
    }

    // nvfp4's: the cast's own E4M3 block scales and tensor amax, as quantize_block_recipe hands
    // them out in the GEMM's rows (K along them), give codes whose products with the cast's
    // multipliers are its values bit for bit, for each operand a linear's GEMMs split: x along
    // K, the weight's 16x16 tiles for the forward and (along N) for dgrad, and a gradient cast
    // along M for wgrad with the Hadamard transform and stochastic rounding. What the tensor
    // cores multiply (codes * s * decode) lies within an FP32 ulp of each value.
    void nvfp4SplitsWithTheCastsScales_data()
    {
        QTest::addColumn<int>("role"); // TensorRole
        QTest::addColumn<int64_t>("kDim");
        QTest::addRow("input along K") << static_cast<int>(TensorRole::Activation) << int64_t(1);
        QTest::addRow("weight tiles, forward") << static_cast<int>(TensorRole::Weight) << int64_t(1);
        QTest::addRow("weight tiles, dgrad") << static_cast<int>(TensorRole::Weight) << int64_t(0);
        QTest::addRow("gradient along M, RHT and SR") << static_cast<int>(TensorRole::Gradient) << int64_t(0);
    }
    void nvfp4SplitsWithTheCastsScales()
    {
        QFETCH(int, role);
        QFETCH(int64_t, kDim);
        auto x = test_matrix(48, 64);
        x.narrow(0, 16, 16).narrow(1, 16, 16).zero_();
        x[40][3] = std::numeric_limits<float>::quiet_NaN();
        const auto r = recipe_of(Fp8Scaling::NvFp4);
        Nvfp4Scales scales;
        const auto values = quantize_block_recipe(x, NumberFormat::E4M3, r, kDim, static_cast<TensorRole>(role), nullptr, &scales);
        const auto rows = (kDim == 1 ? values : values.t()).contiguous(); // the GEMM's operand, K along its rows
        const int64_t n = rows.size(0), k = rows.size(1);
        QCOMPARE(scales.block_scales.sizes(), (c10::IntArrayRef{n, k / 16}));
        const auto op = split_nvfp4_blocks(rows, scales.block_scales, scales.tensor_amax);
        QVERIFY(op.nvfp4 && op.codes.max().item<int>() <= 15);
        const auto multiplier = nvfp4_value_multiplier(scales.block_scales, scales.tensor_amax).unsqueeze(-1);
        QVERIFY(same_bits((e2m1_decode(op.codes).view({n, k / 16, 16}) * multiplier).view({n, k}), rows));
        const auto joined = join_fp4_blocks(op), finite = torch::isfinite(rows);
        QVERIFY(torch::equal(torch::isnan(joined), torch::isnan(rows)));
        const auto off = (joined - rows).abs().masked_select(finite), ulp = (rows.abs() * std::ldexp(1.0f, -23)).masked_select(finite);
        QVERIFY((off <= ulp).all().item<bool>());
    }

    // Blackwell's FP4 GEMM takes a cast's kept scales for an operand whose rows they describe:
    // the cast along K itself, a gradient cast along M as its transpose; not the transpose of a
    // square weight's 16 x 16-tiled cast (the dgrad's operand), whose sizes match but whose
    // blocks are the transposed tiles'. Split with those scales, it left the values: the
    // LayerGemm lookup matched on sizes alone until session 40.
    void nvfp4ScalesFitOnlyTheirRows()
    {
        const auto r = recipe_of(Fp8Scaling::NvFp4);
        const auto w = test_matrix(64, 64);
        Nvfp4Scales tiles;
        const auto v = quantize_block_recipe(w, NumberFormat::E4M3, r, 1, TensorRole::Weight, nullptr, &tiles);
        QVERIFY(nvfp4_scales_fit(tiles.block_scales, v));
        QVERIFY(!nvfp4_scales_fit(tiles.block_scales, v.t()));
        // Split with its own scales, the cast comes back within an FP32 ulp (join_fp4_blocks);
        // the transpose split with them would have been off by whole E2M1 steps.
        const auto off_by = [&](const torch::Tensor& rows) {
            const auto joined = join_fp4_blocks(split_nvfp4_blocks(rows, tiles.block_scales, tiles.tensor_amax));
            return ((joined - rows).abs() / (rows.abs() * std::ldexp(1.0f, -23)).clamp_min(1e-30f)).max().item<float>();
        };
        QVERIFY(off_by(v) <= 1.0f);
        QVERIFY(off_by(v.t().contiguous()) > 1e5f);

        const auto dy = test_matrix(48, 64);
        Nvfp4Scales along_m;
        const auto g = quantize_block_recipe(dy, NumberFormat::E4M3, r, 0, TensorRole::Gradient, nullptr, &along_m);
        QVERIFY(nvfp4_scales_fit(along_m.block_scales, g.t())); // (64, 48): the wgrad's operand
        QVERIFY(!nvfp4_scales_fit(along_m.block_scales, g));
    }

    // The packing and the scale layout LibTorch's FP4 GEMM reads: PyTorch's pack_uint4 (its
    // own test's pair) and to_blocked (the index it places (i, j) at, checked against
    // torch/testing/_internal/common_quantized.py on this 130 x 5 matrix), zero padding.
    void fp4PackingAndScaleLayout()
    {
        QCOMPARE(pack_e2m1_pairs(torch::tensor({0b0010, 0b1011}, torch::kUInt8).view({1, 2}))[0][0].item<int>(), 0b10110010);
        auto bytes = torch::empty({130, 5}, torch::kUInt8);
        for (int64_t i = 0; i < 130; ++i)
            for (int64_t j = 0; j < 5; ++j) bytes[i][j] = static_cast<int>((i * 5 + j) % 251 + 1);
        const auto flat = swizzled_scale_bytes(bytes);
        QCOMPARE(flat.numel(), int64_t(256 * 8));
        QCOMPARE(flat.nonzero().size(0), int64_t(130 * 5));
        const auto* f = flat.data_ptr<uint8_t>();
        const auto* b = bytes.data_ptr<uint8_t>();
        for (int64_t i = 0; i < 130; ++i)
            for (int64_t j = 0; j < 5; ++j)
                QCOMPARE(f[512 * ((i / 128) * 2 + j / 4) + (i % 32) * 16 + ((i % 128) / 32) * 4 + j % 4], b[i * 5 + j]);
    }

    // Off a GPU the FP4 GEMM is the FP32 product of what the tensor cores would multiply,
    // rounded to BF16: for mxfp4 the emulator's product of its own values. No Blackwell here.
    void fp4GemmOnTheCpuIsTheEmulatorsProduct()
    {
        const auto a = quantize_mxfp4_2d(test_matrix(32, 64), false).values;
        const auto b = quantize_mxfp4_2d(test_matrix(16, 64) * 3.0f, false).values;
        const auto y = fp4_block_mm(split_mxfp4_blocks(a), split_mxfp4_blocks(b));
        QCOMPARE(y.scalar_type(), torch::kBFloat16);
        QVERIFY(same_bits(y.to(torch::kFloat32), at::mm(a, b.t()).to(torch::kBFloat16).to(torch::kFloat32)));
        QVERIFY(!fp4_block_mm_available(true) && !fp4_block_mm_available(false));
    }

    // ---- Hadamard transform and stochastic rounding in the recipe ---------------------

    void hadamardMatrixIsTeSignedSylvester()
    {
        const int signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
        const auto t = random_hadamard_transform(torch::eye(16));
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 16; ++j) {
                const float h = (std::popcount(static_cast<unsigned>(i & j)) % 2) ? -1.0f : 1.0f;
                QCOMPARE(t[i][j].item<float>(), 0.25f * signs[i] * h);
            }
        QVERIFY(same_bits(torch::matmul(t, t.t()), torch::eye(16))); // orthogonal, exactly
    }

    // The wgrad transform in one pass (cpu_hadamard.h) against the GEMM it replaces: the same
    // bits through each layout it reads, on any thread count. test_matrix's rows span 2^24 in
    // scale, so every one of the 16 sums rounds, and any other order of them shows; subnormal
    // inputs check that each product of +-1/4 keeps its bits inside the sum (an FMA), as MKL's.
    void hadamardInOnePassIsTheGemmsBits_data()
    {
        QTest::addColumn<QString>("layout");
        QTest::addRow("transposed (a wgrad operand)") << "transposed";
        QTest::addRow("contiguous") << "contiguous";
        QTest::addRow("column slice") << "columns";
        QTest::addRow("subnormal") << "subnormal";
    }
    void hadamardInOnePassIsTheGemmsBits()
    {
        QFETCH(QString, layout);
        const ThreadCount restore;
        auto base = test_matrix(96, 200) * 3.0f; // (M tokens, N features)
        base[0][0] = std::numeric_limits<float>::infinity();
        base[17][3] = std::numeric_limits<float>::quiet_NaN();
        base[40][5] = -std::numeric_limits<float>::infinity();
        base[41][5] = std::numeric_limits<float>::infinity(); // Inf - Inf in one group
        base.narrow(0, 48, 16).select(1, 9).fill_(-0.0f);     // a group of negative zeros
        torch::Tensor x;
        if (layout == "transposed") x = base.t();
        else if (layout == "contiguous") x = base.narrow(1, 0, 192).contiguous();
        else if (layout == "columns") x = base.narrow(1, 4, 176);
        else {
            // Feature 0's first group: x0 / 4 = (2^15 - 1) 2^-149, then x1 / 4 = 1.5 2^-149. Fused,
            // the sum ties at 2^15 2^-149, goes to even (2^15), and that is BF16's midpoint
            // between 0 and 2^-133: 0. A rounded product (2^-148) would make it 2^-133.
            auto tiny = base * 1e-38f;
            tiny.narrow(0, 0, 16).select(1, 0).zero_();
            tiny[0][0] = std::ldexp(131068.0f, -149);
            tiny[1][0] = std::ldexp(6.0f, -149);
            x = tiny.t();
        }
        QVERIFY((layout == "contiguous") == x.is_contiguous());
        const auto want = round_to_format(random_hadamard_transform(x), NumberFormat::BF16, Overflow::Propagate);
        if (layout == "subnormal") QCOMPARE(bits_of(want[0][0].item<float>()), 0u);
        for (int threads : {1, 2, 3}) {
            at::set_num_threads(threads);
            const auto got = hadamard16_bf16_cpu(x);
            QVERIFY(got.is_contiguous());
            QVERIFY2(same_bits(got, want), qPrintable(QString("%1 threads").arg(threads)));
        }
    }

    void nvfp4WgradOperandsAreTransformedTogether()
    {
        const auto dy = test_matrix(32, 8) * 0.01f; // (M, N)
        const auto x = test_matrix(32, 24);        // (M, K)
        auto r = recipe_of(Fp8Scaling::NvFp4);
        r.nvfp4_stochastic_rounding = false;
        const auto xq = quantize_block_recipe(x, NumberFormat::E4M3, r, 0, TensorRole::Activation);
        const auto bf16 = [](const torch::Tensor& t) { return t.to(torch::kBFloat16).to(torch::kFloat32); };
        QVERIFY(same_bits(xq, quantize_nvfp4_2d(bf16(random_hadamard_transform(x.t())), false, std::nullopt).values.t()));
        const auto dyq = quantize_block_recipe(dy, NumberFormat::E5M2, r, 0, TensorRole::Gradient);
        const auto dw = torch::matmul(dyq.t(), xq);
        const auto exact = torch::matmul(dy.t(), x);
        const double rel = ((dw - exact).norm() / exact.norm()).item<double>();
        QVERIFY2(rel < 0.3, qPrintable(QString::number(rel))); // one side alone in the Hadamard basis: ~1.4
        // Rowwise use (K last), weights, and M not a multiple of 16 are never transformed.
        QVERIFY(same_bits(quantize_block_recipe(x, NumberFormat::E4M3, r, 1, TensorRole::Activation),
                          quantize_nvfp4_2d(x, false, std::nullopt).values));
        const auto x30 = test_matrix(30, 24);
        QVERIFY(same_bits(quantize_block_recipe(x30, NumberFormat::E4M3, r, 0, TensorRole::Activation),
                          quantize_nvfp4_2d(x30.t(), false, std::nullopt).values.t()));
        r.nvfp4_rht = false;
        QVERIFY(same_bits(quantize_block_recipe(x, NumberFormat::E4M3, r, 0, TensorRole::Activation),
                          quantize_nvfp4_2d(x.t(), false, std::nullopt).values.t()));
    }

    // TE's transform writes BF16: a token column [1, 2^-8, 0...] becomes 1/4 +- 2^-10, whose
    // ties round to 1/4 (and 1/4 - 2^-10 is BF16 already). The amax is then 1/4, and every
    // value, cast to the top of E2M1's grid, decodes to exactly 1/4 (unrounded: 0.2509765625).
    void nvfp4TransformOutputIsRoundedToBf16()
    {
        auto x = torch::zeros({16, 16});
        x[0][0] = 1.0f;
        x[1][0] = std::ldexp(1.0f, -8);
        auto r = recipe_of(Fp8Scaling::NvFp4);
        r.nvfp4_stochastic_rounding = false;
        const auto xq = quantize_block_recipe(x, NumberFormat::E4M3, r, 0, TensorRole::Activation);
        QVERIFY(same_bits(xq.select(1, 0), torch::full({16}, 0.25f))); // H's first row is all +1/4
        QCOMPARE(xq.narrow(1, 1, 15).abs().sum().item<float>(), 0.0f);
    }

    void nvfp4StochasticRoundingOnGradientsOnly()
    {
        const auto g = test_matrix(16, 64);
        auto r = recipe_of(Fp8Scaling::NvFp4);
        const auto rne = quantize_nvfp4_2d(g, false, std::nullopt).values;
        const auto sr1 = quantize_block_recipe(g, NumberFormat::E5M2, r, 1, TensorRole::Gradient);
        const auto sr2 = quantize_block_recipe(g.clone(), NumberFormat::E5M2, r, 1, TensorRole::Gradient);
        QVERIFY(same_bits(sr1, sr2));  // seeded by the tensor's bits: reproducible
        QVERIFY(!same_bits(sr1, rne)); // and really stochastic
        QVERIFY(same_bits(quantize_block_recipe(g, NumberFormat::E4M3, r, 1, TensorRole::Activation), rne));
        r.nvfp4_stochastic_rounding = false;
        QVERIFY(same_bits(quantize_block_recipe(g, NumberFormat::E5M2, r, 1, TensorRole::Gradient), rne));
    }

    // Stochastic rounding inside the recipe draws a hash of each element's position.
    void hashedUniformsAreUniform()
    {
        constexpr int64_t n = 1000000;
        const auto u = stochastic_uniforms(12345, 1000, 1000);
        QVERIFY(((u >= 0) & (u < 1)).all().item<bool>());
        // 8 bits: k / 256, each k as often as the others (within 5 standard errors).
        QVERIFY(same_bits(torch::floor(u * 256) / 256, u));
        const auto counts = torch::bincount((u * 256).to(torch::kInt64).flatten(), {}, 256).to(torch::kFloat64);
        const double expected = double(n) / 256, sigma = std::sqrt(expected * (1 - 1.0 / 256));
        QVERIFY2(((counts - expected).abs() < 5 * sigma).all().item<bool>(),
                 qPrintable(QString("counts from %1 to %2").arg(counts.min().item<double>()).arg(counts.max().item<double>())));
        const auto flat = u.flatten();
        const auto a = flat.narrow(0, 0, n - 1).to(torch::kFloat64) - 0.5, b = flat.narrow(0, 1, n - 1).to(torch::kFloat64) - 0.5;
        const double lag1 = ((a * b).mean() / (a.square().mean())).item<double>();
        QVERIFY2(std::abs(lag1) < 0.01, qPrintable(QString::number(lag1))); // neighbours independent
        QVERIFY(!same_bits(stochastic_uniforms(1, 4, 4), stochastic_uniforms(2, 4, 4)));
        QVERIFY(same_bits(stochastic_uniforms(1, 4, 4), stochastic_uniforms(1, 4, 4)));
    }

    // On a GPU the content seed stays on the device (no host sync per cast). Computed there, it
    // is the host's 64 bits, sign and wrap-around included, and it draws the same numbers.
    void deviceContentSeedIsTheHostSeed()
    {
        torch::manual_seed(5);
        auto spread = torch::randn({300, 64}) * torch::exp2(torch::randint(-40, 40, {300, 64}).to(torch::kFloat32));
        spread[0][0] = std::numeric_limits<float>::quiet_NaN();
        spread[1][1] = -std::numeric_limits<float>::infinity();
        const auto negative = -torch::rand({64, 32}) - 1.0f; // every bit pattern a negative int32
        const auto huge = torch::full({4096, 16}, std::numeric_limits<float>::max()); // sums past 2^42
        // Several of the host sums' ranges (2^16 values each, on any thread), read through a transpose.
        const auto wide = (torch::randn({320, 1000}) * 1e3f).t();
        for (const auto& x : {spread, negative, huge, torch::zeros({16, 16}), wide}) {
            const uint64_t host = content_seed(x);
            const auto device = content_seed_tensor(x);
            QCOMPARE(device.scalar_type(), torch::kInt64);
            QCOMPARE(device.dim(), int64_t(0));
            QCOMPARE(static_cast<uint64_t>(device.item<int64_t>()), host);
            const auto by_host = quantize_nvfp4_2d(x, false, host, BlockKernel::FusedCpu);
            const auto by_device = quantize_nvfp4_2d(x, false, SrSeed(device), BlockKernel::TensorOps);
            QVERIFY(same_bits(by_host.values, by_device.values));
        }
        // The recipe on the CPU takes the host seed: the same values as the device seed's.
        const auto r = recipe_of(Fp8Scaling::NvFp4);
        const auto g = spread.narrow(0, 2, 298);
        const auto q = quantize_block_recipe(g, NumberFormat::E5M2, r, 1, TensorRole::Gradient);
        QVERIFY(same_bits(q, quantize_nvfp4_2d(g, false, SrSeed(content_seed_tensor(g)), BlockKernel::TensorOps).values));
    }

    void nvfp4StochasticRoundingIsUnbiasedInTheRecipe()
    {
        // Rows [6, 0.7 x 15]: block scale 448, element scale 1 (to an ulp), so 0.7 rounds to 0.5
        // or 1 and the mean of 983,040 draws is 0.7 within 5 standard errors.
        auto x = torch::full({65536, 16}, 0.7f);
        x.select(1, 0).fill_(6.0f);
        const auto q = quantize_nvfp4_2d(x, false, 2024).values.narrow(1, 1, 15);
        QCOMPARE(std::get<0>(torch::_unique(q)).numel(), int64_t(2));
        const double n = static_cast<double>(q.numel());
        const double mean = q.to(torch::kFloat64).mean().item<double>();
        const double tolerance = 5 * 0.5 * std::sqrt(0.4 * 0.6 / n);
        QVERIFY2(std::abs(mean - 0.7) < tolerance, qPrintable(QString("mean %1, tolerance %2").arg(mean).arg(tolerance)));
        const auto rne = quantize_nvfp4_2d(x, false, std::nullopt).values.narrow(1, 1, 15);
        QVERIFY(std::abs(rne.mean().item<double>() - 0.5) < 1e-6); // nearest: always down, biased
    }

    void quantizeFp8DispatchesBlockRecipes()
    {
        const auto x = test_matrix(8, 64);
        for (auto s : {Fp8Scaling::Block128, Fp8Scaling::NvFp4, Fp8Scaling::MxFp4}) {
            const auto q = quantize_fp8(x, NumberFormat::E4M3, recipe_of(s), 1, nullptr, TensorRole::Activation);
            QCOMPARE(q.scale, 0.0f);
            QVERIFY(same_bits(q.values, quantize_block_recipe(x, NumberFormat::E4M3, recipe_of(s), 1, TensorRole::Activation)));
        }
    }

    // ---- Configuration and training --------------------------------------------------

    void projectKeys()
    {
        const auto c = load_project_json(R"({"name": "t", "model": {"n_layer": 4},
            "precision": {"preset": "fp8-e4m3", "keep_last_bf16": 2,
                          "fp8": {"scaling": "nvfp4", "block_scales": "fp32"},
                          "nvfp4": {"rht": false, "stochastic_rounding": false, "weight_2d": false},
                          "layers": [{"match": "blocks.0.*", "scaling": "fp8-block"}]}})",
                                         ".");
        QCOMPARE(c.precision.fp8.scaling, Fp8Scaling::NvFp4);
        QVERIFY(!c.precision.fp8.block_power_of_two);
        QVERIFY(!c.precision.fp8.nvfp4_rht && !c.precision.fp8.nvfp4_stochastic_rounding && !c.precision.fp8.nvfp4_weight_2d);
        QCOMPARE(resolve_layer_recipe(c.precision, "blocks.0.mlp.fc1").scaling, Fp8Scaling::Block128);
        QCOMPARE(resolve_layer_formats(c.precision, "blocks.1.mlp.fc1", 4).describe(), std::string("e4m3/e4m3/e4m3"));
        QCOMPARE(resolve_layer_formats(c.precision, "blocks.1.attn.sdpa", 4).describe(), std::string("bf16/bf16/bf16"));
        QCOMPARE(resolve_layer_formats(c.precision, "blocks.2.attn.qkv", 4).describe(), std::string("bf16/bf16/bf16"));
        QCOMPARE(resolve_layer_formats(c.precision, "blocks.3.mlp.fc2", 4).describe(), std::string("bf16/bf16/bf16"));
        QCOMPARE(resolve_layer_formats(c.precision, "lm_head", 4).describe(), std::string("e4m3/e4m3/e4m3"));
        // Defaults: TE's recipes as shipped.
        const Fp8Recipe d;
        QVERIFY(d.block_power_of_two && d.nvfp4_rht && d.nvfp4_stochastic_rounding && d.nvfp4_weight_2d);
        // Round trip through the file format.
        const auto again = load_project_json(to_json_text(c), ".");
        QCOMPARE(again.precision.keep_last_bf16, int64_t(2));
        QVERIFY(!again.precision.fp8.block_power_of_two && !again.precision.fp8.nvfp4_weight_2d);
        for (auto s : fp8_scalings()) QCOMPARE(parse_fp8_scaling(fp8_scaling_name(s)), std::optional<Fp8Scaling>(s));
    }

    void projectKeyErrors_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("message");
        QTest::newRow("scaling") << R"({"name": "t", "precision": {"fp8": {"scaling": "nvfp8"}}})"
                                 << "precision.fp8.scaling: 'nvfp8' is not one of delayed, current, rowwise, mxfp8, "
                                    "fp8-block, nvfp4, mxfp4";
        QTest::newRow("block_scales") << R"({"name": "t", "precision": {"fp8": {"block_scales": "e8m0"}}})"
                                      << "precision.fp8.block_scales: 'e8m0' is not one of power-of-two, fp32";
        QTest::newRow("keep_last_bf16")
            << R"({"name": "t", "model": {"n_layer": 2}, "precision": {"keep_last_bf16": 3}})"
            << "precision.keep_last_bf16: must be in [0, model.n_layer] (model.n_layer is 2)";
    }
    void projectKeyErrors()
    {
        QFETCH(QString, text);
        QFETCH(QString, message);
        try {
            load_project_json(text.toStdString(), ".");
            QFAIL("accepted");
        } catch (const ConfigError& e) {
            QCOMPARE(QString::fromStdString(e.what()), message);
        }
    }

    void sweepOffersTheBlockRecipes()
    {
        auto base = golden_project();
        base.precision.preset = "fp8-e4m3";
        const auto plans = plan_sweep(base, parse_vary("precision.fp8.scaling=fp8-block,nvfp4,mxfp4"));
        QCOMPARE(plans.size(), size_t(3));
        QCOMPARE(plans[0].config.precision.fp8.scaling, Fp8Scaling::Block128);
        QCOMPARE(plans[1].config.precision.fp8.scaling, Fp8Scaling::NvFp4);
        QCOMPARE(plans[2].config.precision.fp8.scaling, Fp8Scaling::MxFp4);
        // An ablation of nvfp4's parts needs nvfp4: under delayed scaling no layer reads them.
        QVERIFY_THROWS_EXCEPTION(ConfigError, plan_sweep(base, parse_vary("precision.nvfp4.rht=true,false")));
        base.precision.fp8.scaling = Fp8Scaling::NvFp4;
        const auto ablation = plan_sweep(base, parse_vary("precision.nvfp4.rht=true,false"));
        QVERIFY(ablation[0].config.precision.fp8.nvfp4_rht && !ablation[1].config.precision.fp8.nvfp4_rht);
    }

    // ---- Telemetry of the block formats ----------------------------------------------------
    // The scales a cast asked for and the ones it used: the used one is the requested one in
    // the scale format (E4M3 rounding; E8M0's clamp; fp8-block's power-of-2 floor of the
    // encode scale), blocks of zeros are 0 in both, a block holding a NaN asks for NaN.
    void blockCastRecordPairsRequestedAndUsedScales_data()
    {
        QTest::addColumn<QString>("recipe");
        for (const char* r : {"nvfp4", "mxfp4", "fp8-block"}) QTest::addRow("%s", r) << r;
    }
    void blockCastRecordPairsRequestedAndUsedScales()
    {
        QFETCH(QString, recipe);
        const int64_t block = block_of(recipe);
        auto x = test_matrix(6, 2 * block);
        x[1].narrow(0, 0, block).zero_();                                         // a block of zeros
        x[2][3] = std::numeric_limits<float>::quiet_NaN();                        // a poisoned block
        x[3].narrow(0, block, block).mul_(std::ldexp(1.0f, -120));                 // tiny: E4M3 / E8M0 floors
        const auto q = quantize_2d(recipe, x);
        const auto scaling = *parse_fp8_scaling(recipe.toStdString());
        Fp8Recipe r = recipe_of(scaling);
        r.block_power_of_two = true;
        const auto rec = block_cast_record(q, NumberFormat::E4M3, r);
        QCOMPARE(rec.requested_scales.numel(), int64_t(12));
        QCOMPARE(rec.used_scales.numel(), int64_t(12));
        const auto req = rec.requested_scales, used = rec.used_scales;
        QVERIFY(std::isnan(req[4].item<float>()));                                // row 2, block 0
        QCOMPARE(req[2].item<float>(), 0.0f);                                     // row 1, block 0: zeros
        QCOMPARE(used[2].item<float>(), 0.0f);
        const auto finite = torch::isfinite(req) & (req > 0);
        if (recipe == "nvfp4") {
            QCOMPARE(rec.scale_format, NumberFormat::E4M3);
            QCOMPARE(rec.element_format, NumberFormat::E2M1);
            const auto rounded = round_to_format(req, NumberFormat::E4M3, Overflow::Saturate);
            QVERIFY(same_bits(torch::where(finite, rounded, used), used));
            QCOMPARE(used[7].item<float>(), 0.0f); // the tiny block's scale underflows E4M3
            QVERIFY(req[7].item<float>() > 0.0f);
        } else if (recipe == "mxfp4") {
            QCOMPARE(rec.scale_format, NumberFormat::E8M0);
            const auto clamped = req.clamp(std::ldexp(1.0f, -127), std::ldexp(1.0f, 127));
            QVERIFY(same_bits(torch::where(finite, clamped, used), used));
            // A tiny block asks for 2^(floor(log2 amax) - 2), exactly, and gets it above E8M0's floor.
            int e = 0;
            std::frexp(q.block_amax.reshape({-1})[7].item<float>(), &e); // amax = m 2^e, m in [0.5, 1)
            QCOMPARE(req[7].item<float>(), std::ldexp(1.0f, (e - 1) - 2));
        } else {
            QCOMPARE(rec.scale_format, NumberFormat::FP32);
            QCOMPARE(rec.element_format, NumberFormat::E4M3);
            const auto amax = q.block_amax.reshape({-1});
            QVERIFY(same_bits(torch::where(finite, amax / 448.0f, req), req));
            // The power-of-2 floor of the encode scale rounds the decode scale up, by < 2x.
            QVERIFY((torch::where(finite, used / req, torch::ones_like(req)) >= 1).all().item<bool>());
            QVERIFY((torch::where(finite, used / req, torch::ones_like(req)) < 2).all().item<bool>());
        }
    }

    // A block whose scale puts its largest value past the element format's max by half a step
    // or more is saturated by the cast: the scale row's overflow counts it (it counted only
    // scales past the scale format's max, which none of these recipes asks for: always 0).
    // mxfp4's floor rule: amax / 2^(floor(log2 amax) - 2) lies in [4, 8), and from 7 on
    // (E2M1's tie above 6 rounds up) the value is clipped to 6. nvfp4: a block scale in E4M3's
    // subnormals rounds down by up to a third of itself.
    void clippedBlocksAreCounted()
    {
        auto x = torch::full({1, 32 * 6}, 0.5f);
        const float amax[] = {1.0f, 1.75f, 1.74f, 1.9f, 0.0f, std::numeric_limits<float>::infinity()};
        for (int b = 0; b < 6; ++b) x[0][32 * b + 5] = amax[b];
        x[0].narrow(0, 32 * 4, 32).zero_();
        auto floor_rule = recipe_of(Fp8Scaling::MxFp4);
        const auto clipped = [](const BlockQuantized& q, const Fp8Recipe& r) {
            return block_cast_record(q, NumberFormat::E4M3, r).clipped_blocks.item<double>();
        };
        QCOMPARE(clipped(quantize_mxfp4_2d(x, false), floor_rule), 2.0); // 1.75 (the tie, at 7) and 1.9 (7.6); not
                                                                        // 1.74 (6.96), zeros or Inf
        auto round_up = floor_rule;
        round_up.mx_round_scale_up = true;
        QCOMPARE(clipped(quantize_mxfp4_2d(x, true), round_up), 0.0);
        // nvfp4 with the tensor's amax 448 (S = 6: a block asks for its own amax as its E4M3
        // scale): 0.0029 is 1.48 of E4M3's subnormal step 2^-9 and rounds to 1 step, so its
        // largest value is scaled to 6 x 1.48 = 8.9; 0.00215 (1.1 steps) to 6.6, within.
        // 1e-4 asks for a scale under E4M3's smallest subnormal: flushed to zero, an underflow,
        // not a clipped block.
        auto y = torch::full({1, 16 * 5}, 1e-4f);
        const float nv_amax[] = {448.0f, 0.0029f, 0.00215f, 1.0f, 1e-4f};
        for (int b = 0; b < 5; ++b) y[0][16 * b + 3] = nv_amax[b];
        const auto q = quantize_nvfp4_2d(y, false, std::nullopt);
        QCOMPARE(block_cast_record(q, NumberFormat::E4M3, recipe_of(Fp8Scaling::NvFp4)).clipped_blocks.item<double>(),
                 1.0);
        QCOMPARE(q.values[0][16 + 3].item<float>(), std::ldexp(1.0f, -9)); // clipped: 6 x s x 448 / 2688 = s
        QCOMPARE(q.block_scales.reshape({-1})[4].item<float>(), 0.0f);
        QCOMPARE(q.values[0][16 * 4 + 3].item<float>(), 0.0f);
        // mxfp8's floor rule: amax / 2^(floor(log2 amax) - 8) lies in [256, 512), and E4M3
        // clips what lies past 464 (464 itself, the tie, rounds to even 448): mantissas past
        // 1.8125. Rounding the scale up clips nothing. Its scale row had no overflow to say it
        // (no scale rows at all) before 2026-12-07.
        auto m = torch::full({1, 32 * 6}, 0.5f);
        const float mx_amax[] = {1.0f, 1.8125f, 1.82f, 3.9f, 0.0f, std::numeric_limits<float>::infinity()};
        for (int b = 0; b < 6; ++b) m[0][32 * b + 5] = mx_amax[b];
        m[0].narrow(0, 32 * 4, 32).zero_();
        for (const bool up : {false, true}) {
            auto mx = recipe_of(Fp8Scaling::Block32);
            mx.mx_round_scale_up = up;
            BlockCastRecord rec;
            quantize_fp8(m, NumberFormat::E4M3, mx, 1, nullptr, TensorRole::Activation, &rec);
            QCOMPARE(rec.clipped_blocks.item<double>(), up ? 0.0 : 2.0); // 1.82 and 3.9 (1.95 x 2)
            QCOMPARE(rec.scale_format, NumberFormat::E8M0);
            QCOMPARE(rec.used_scales.numel(), int64_t(6));
            QCOMPARE(rec.used_scales[0].item<float>(), std::ldexp(1.0f, -8));
            QCOMPARE(rec.used_scales[3].item<float>(), std::ldexp(1.0f, up ? -6 : -7));
            QCOMPARE(rec.used_scales[4].item<float>(), 0.0f); // a block of zeros has no scale that matters
            QVERIFY(std::isnan(rec.used_scales[5].item<float>()));
        }
        // fp8-block's scales never clip: amax lands on 448 or, rounded to a power of two, below.
        for (const bool pow2 : {true, false}) {
            auto r = recipe_of(Fp8Scaling::Block128);
            r.block_power_of_two = pow2;
            QCOMPARE(block_cast_record(quantize_fp8_block_2d(test_matrix(4, 256), NumberFormat::E4M3, pow2, false),
                                       NumberFormat::E4M3, r)
                         .clipped_blocks.item<double>(),
                     0.0);
        }
    }

    // TE's rounded-up MX exponent of a block whose amax / 6 underflows to 0 is -127 in the
    // quantizer; the recorded request must say the same (one shared mxfp4_exponent).
    void mxfp4RoundUpRequestOfASubnormalBlock()
    {
        auto x = torch::zeros({1, 32});
        x[0][5] = std::ldexp(1.0f, -149); // amax / 6 == 0 in FP32
        const auto q = quantize_mxfp4_2d(x, /*round_scale_up=*/true);
        Fp8Recipe r = recipe_of(Fp8Scaling::MxFp4);
        r.mx_round_scale_up = true;
        const auto rec = block_cast_record(q, NumberFormat::E4M3, r);
        QCOMPARE(rec.used_scales[0].item<float>(), std::ldexp(1.0f, -127));
        QCOMPARE(rec.requested_scales[0].item<float>(), std::ldexp(1.0f, -127));
    }

    // A training step's frame under a block recipe: elements labelled e2m1 (nvfp4, mxfp4), one
    // "<role>_scale" row per operand with one value per block in the scale format, and under
    // nvfp4 the wgrad operands with and without the Hadamard transform (off: no such rows).
    void blockRecipeTelemetryRows_data()
    {
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<bool>("rht");
        QTest::addColumn<QString>("element");
        QTest::addColumn<QString>("scale");
        QTest::addColumn<int64_t>("weightScales"); // fc1: W (128, 32)
        QTest::addColumn<int64_t>("inputScales");  // fc1: x (64, 32)
        // What the scale format costs the scales a block asks for, as their rows' SNR: E4M3
        // rounds them (finite, under 40 dB here); mxfp4 asks for powers of two, which E8M0 holds
        // exactly (+inf); fp8-block's powers of two round FP32 scales down (they said +inf: an
        // FP32 row was never compared), and its FP32 scales differ from amax / 448 by an ulp
        // (1 / (448 / amax), as TE computes the decode scale: over 120 dB).
        QTest::addColumn<QString>("scaleCost"); // rounded | exact | ulp
        QTest::addRow("nvfp4") << "nvfp4" << true << "e2m1" << "e4m3" << int64_t(8 * 2) << int64_t(64 * 2)
                               << "rounded";
        QTest::addRow("nvfp4 without rht") << "nvfp4" << false << "e2m1" << "e4m3" << int64_t(8 * 2) << int64_t(64 * 2)
                                           << "rounded";
        QTest::addRow("mxfp4") << "mxfp4" << true << "e2m1" << "e8m0" << int64_t(128 * 1) << int64_t(64 * 1) << "exact";
        QTest::addRow("mxfp8") << "mxfp8" << true << "e4m3" << "e8m0" << int64_t(128 * 1) << int64_t(64 * 1) << "exact";
        QTest::addRow("fp8-block") << "fp8-block" << true << "e4m3" << "fp32" << int64_t(1) << int64_t(64) << "rounded";
        QTest::addRow("fp8-block, fp32 scales") << "fp8-block" << true << "e4m3" << "fp32" << int64_t(1) << int64_t(64)
                                                << "ulp";
    }
    void blockRecipeTelemetryRows()
    {
        QFETCH(QString, recipe);
        QFETCH(bool, rht);
        QFETCH(QString, element);
        QFETCH(QString, scale);
        QFETCH(int64_t, weightScales);
        QFETCH(int64_t, inputScales);
        QFETCH(QString, scaleCost);
        auto config = golden_project();
        config.training.steps = 1;
        config.eval.interval = 0;
        config.telemetry.interval = 1;
        config.precision.preset = "fp8-e4m3";
        config.precision.fp8.scaling = *parse_fp8_scaling(recipe.toStdString());
        config.precision.fp8.nvfp4_rht = rht;
        config.precision.fp8.block_power_of_two = scaleCost != "ulp";
        struct Frames : Losses {
            std::vector<LayerStatsFrame> frames;
            void on_layer_stats(const LayerStatsFrame& f) override { frames.push_back(f); }
        } sink;
        Trainer(config).run(sink);
        QCOMPARE(sink.frames.size(), size_t(1));
        std::map<std::string, TensorStats> fc1;
        for (const auto& t : sink.frames[0].tensors)
            if (t.layer == "blocks.0.mlp.fc1") fc1[t.role] = t;
        QVERIFY2(!fc1.empty(), "no statistics for blocks.0.mlp.fc1");
        const auto row = [&](const char* role) -> const TensorStats& {
            if (!fc1.count(role)) qFatal("no %s row", role);
            return fc1.at(role);
        };
        QCOMPARE(QString::fromStdString(row("weight").format), element);
        QCOMPARE(QString::fromStdString(row("input").format), element);
        QCOMPARE(QString::fromStdString(row("grad_output").format), element);
        QCOMPARE(QString::fromStdString(row("weight_scale").format), scale);
        QCOMPARE(QString::fromStdString(row("input_scale").format), scale);
        QCOMPARE(row("weight_scale").count, weightScales);
        QCOMPARE(row("input_scale").count, inputScales);
        QCOMPARE(row("grad_output_scale").count, recipe == "fp8-block" ? int64_t(64) : 64 * 128 / block_of(recipe));
        QCOMPARE(row("input").count, int64_t(64 * 32));
        for (const char* role : {"weight_scale", "input_scale", "grad_output_scale"}) {
            const double snr = row(role).quant_snr_db;
            const bool as_said = scaleCost == "rounded" ? snr < 40.0
                                 : scaleCost == "exact" ? snr == std::numeric_limits<double>::infinity()
                                                        : std::isfinite(snr) && snr > 120.0;
            QVERIFY2(as_said, qPrintable(QString("%1: %2 dB").arg(role).arg(snr)));
        }
        const bool wgrad_rows = recipe == "nvfp4" && rht;
        QCOMPARE(fc1.count("grad_output_wgrad"), size_t(wgrad_rows));
        QCOMPARE(fc1.count("grad_output_wgrad_no_rht"), size_t(wgrad_rows));
        QCOMPARE(fc1.count("input_wgrad_no_rht"), size_t(wgrad_rows));
        if (wgrad_rows) {
            QCOMPARE(row("grad_output_wgrad").count, int64_t(64 * 128));
            QCOMPARE(row("grad_output_wgrad_no_rht").count, int64_t(64 * 128));
            QVERIFY(std::isfinite(row("grad_output_wgrad").quant_snr_db));
            QVERIFY(std::isfinite(row("grad_output_wgrad_no_rht").quant_snr_db));
            // The transform is orthogonal: the operand's energy is the same in both bases.
            QCOMPARE(row("input_wgrad").count, row("input_wgrad_no_rht").count);
        }
        // nvfp4's folded multiplier S * (1/6) in FP32 can make the block holding the tensor's
        // amax ask for an ulp above E4M3's 448 (here it does): that rounds to 448, no overflow.
        // mxfp4's floor rule clips 9 of the input's 64 blocks, mxfp8's 7 (clippedBlocksAreCounted).
        const auto& s = row("input_scale");
        QCOMPARE(s.overflow, recipe == "mxfp4" ? 9.0 / 64 : recipe == "mxfp8" ? 7.0 / 64 : 0.0);
        QCOMPARE(s.amax > 448.0, recipe == "nvfp4");
    }

    void recipesTrainReproducibly_data()
    {
        QTest::addColumn<QString>("recipe");
        for (const char* r : {"fp8-block", "nvfp4", "mxfp4"}) QTest::addRow("%s", r) << r;
    }
    void recipesTrainReproducibly()
    {
        QFETCH(QString, recipe);
        auto config = golden_project();
        config.training.steps = 8;
        config.eval.interval = 0;
        Losses fp32;
        Trainer(config).run(fp32);
        config.precision.preset = "fp8-e4m3";
        config.precision.fp8.scaling = *parse_fp8_scaling(recipe.toStdString());
        Losses a, b;
        Trainer first(config);
        first.run(a);
        Trainer(config).run(b);
        QCOMPARE(a.train.size(), size_t(8));
        QCOMPARE(a.train, b.train); // bit-identical, stochastic rounding included
        QVERIFY(a.train[0] != fp32.train[0]);
        for (double l : a.train) QVERIFY(std::isfinite(l));
        QVERIFY(std::abs(a.train.back() - fp32.train.back()) < 0.5);
        for (const auto& layer : first.layers())
            if (layer.formats.any_fp8()) QCOMPARE(layer.recipe, recipe.toStdString());
    }
};

QTEST_GUILESS_MAIN(TestBlockFormats)
#include "test_block_formats.moc"
