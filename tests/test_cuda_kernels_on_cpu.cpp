// SPDX-License-Identifier: GPL-3.0-or-later
// Mantissa's own CUDA kernels (core/cuda/*.cu), run on this CPU by the thread-block simulator
// (tests/cuda_sim) and held to the CPU paths that they replace on a GPU: the statistics row, the
// FP8 casts and cast-transposes, the delayed-scaling record, fp8-block's casts and split, the
// fused cross entropy and the attention max score. Until these tests, a kernel's index
// arithmetic, tile walks and reductions were first executed by a start-up probe on a lent GPU;
// here every launch geometry the host code picks runs, including grids whose blocks walk
// several tiles.
//
// What only a GPU shows stays with bench/cuda_checks there: the device's own expf/logf (the
// host's libm stands in), timing, and blocks running at once.
#include <torch/torch.h>

#include "../core/block_scaling.h"
#include "../core/blockwise_fp8.h"
#include "../core/cuda/attention_scores.h"
#include "../core/cuda/cross_entropy.h"
#include "../core/cuda/delayed_scaling.h"
#include "../core/cuda/fp8_block.h"
#include "../core/cuda/fp8_cast.h"
#include "../core/cuda/tensor_stats_row.h"
#include "../core/fp8_scaling.h"
#include "../core/gpt_model.h"
#include "../core/kernel_probe.h"
#include "../core/native_fp8.h"
#include "../core/quantize.h"
#include "../core/tensor_stats.h"
#include "cuda_sim/cuda_sim_control.h"
#include "cuda_sim/self_check_kernels.h"
#include "edge_values.h"

#include <QtTest>

#include <cmath>
#include <limits>
#include <stdexcept>

using namespace mantissa;
namespace kernels = mantissa::cuda_kernels;

Q_DECLARE_METATYPE(NumberFormat)
Q_DECLARE_METATYPE(c10::ScalarType)

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Equal bit for bit, where NaN equals any NaN (the ops keep an input NaN's payload).
bool same_bits(const torch::Tensor& a, const torch::Tensor& b)
{
    if (a.sizes() != b.sizes()) return false;
    const auto x = a.contiguous(), y = b.contiguous();
    const auto nx = x.isnan(), ny = y.isnan();
    return torch::equal(nx, ny) &&
           torch::equal(x.masked_fill(nx, 0.0f).view(torch::kInt32), y.masked_fill(ny, 0.0f).view(torch::kInt32));
}

bool same_codes(const torch::Tensor& a, const torch::Tensor& b)
{
    return a.sizes() == b.sizes() && torch::equal(a.contiguous().view(torch::kUInt8), b.contiguous().view(torch::kUInt8));
}

// The 64 x 64 cast-transpose's column sums, in its order: rows r and r + 32 of each 64-row tile
// added, the 32 pairs added in row order from zero, then the tiles' rows summed by LibTorch.
torch::Tensor column_sums_in_tile_order(const torch::Tensor& x)
{
    const int64_t rows = x.size(0), cols = x.size(1);
    const auto v = x.to(torch::kFloat32).reshape({rows / 64, 2, 32, cols});
    const auto pairs = v.select(1, 0) + v.select(1, 1); // (tiles, 32, cols)
    auto tile_sums = torch::zeros({rows / 64, cols});
    for (int64_t r = 0; r < 32; ++r) tile_sums = tile_sums + pairs.select(1, r);
    return tile_sums.sum(0);
}

// A row slot by slot: counts and amax exactly, the two FP64 energies to 1e-12 (summed in
// another order than the tensor ops).
void compare_rows(const torch::Tensor& kernel_row, const torch::Tensor& ops_row)
{
    const auto k = kernel_row.contiguous(), o = ops_row.contiguous();
    QCOMPARE(k.numel(), stats_row::kSize);
    const double* p = k.data_ptr<double>();
    const double* q = o.data_ptr<double>();
    for (int64_t s = 0; s < stats_row::kSize; ++s) {
        const bool energy = s == stats_row::kErrorEnergy || s == stats_row::kSignalEnergy;
        if (energy) {
            if (!(std::abs(p[s] - q[s]) <= 1e-12 * std::abs(q[s])))
                QFAIL(qPrintable(QStringLiteral("slot %1: energy %2, the ops' %3").arg(s).arg(p[s], 0, 'g', 17).arg(q[s], 0, 'g', 17)));
        } else if (p[s] != q[s]) {
            QFAIL(qPrintable(QStringLiteral("slot %1: %2, the ops' %3").arg(s).arg(p[s], 0, 'g', 17).arg(q[s], 0, 'g', 17)));
        }
    }
}

// max |x| over the non-NaN values, as the kernels' fmaxf.
torch::Tensor amax_skipping_nan(const torch::Tensor& x)
{
    const auto a = x.to(torch::kFloat32).abs();
    return a.numel() == 0 ? torch::zeros({}) : a.masked_fill(a.isnan(), 0.0f).max();
}

// Integer-valued heads (B, H, T, D), values in [-4, 4] and column 0 zero: every product and
// every sum of up to 128 of them is exact in FP32, so the maximum is the same in any order.
std::pair<torch::Tensor, torch::Tensor> integer_heads(int64_t B, int64_t H, int64_t T, int64_t D)
{
    const auto i = torch::arange(B * H * T * D, torch::kFloat32).reshape({B, H, T, D});
    auto q = torch::remainder(i * 7.0f, 9.0f) - 4.0f, k = torch::remainder(i * 5.0f + 3.0f, 9.0f) - 4.0f;
    using torch::indexing::Slice;
    q.index_put_({Slice(), Slice(), Slice(), 0}, 0.0f);
    k.index_put_({Slice(), Slice(), Slice(), 0}, 0.0f);
    return {q, k};
}

// Runs body with the simulated device reporting `sms` multiprocessors, then an H200's again.
template <typename Body>
void with_multiprocessors(int sms, Body&& body)
{
    cuda_sim::set_multiprocessors(sms);
    try {
        body();
    } catch (...) {
        cuda_sim::set_multiprocessors(132);
        throw;
    }
    cuda_sim::set_multiprocessors(132);
}

// A block cast's scales (R, ceil(C / 128)), or a tile cast's (ceil(R / 128), ceil(C / 128)),
// one per value of the (R, C) operand.
torch::Tensor per_value(const torch::Tensor& scales, c10::IntArrayRef shape, bool tiles)
{
    auto s = scales.repeat_interleave(128, 1).narrow(1, 0, shape[1]);
    if (tiles) s = s.repeat_interleave(128, 0).narrow(0, 0, shape[0]);
    return s;
}

} // namespace

class TestCudaKernelsOnCpu : public QObject {
    Q_OBJECT
private slots:
    // The simulator first: its reductions add up, and what it must refuse, it refuses.
    void simulatorReducesAndRefuses()
    {
        const int64_t n = 3 * 256;
        QCOMPARE(cuda_sim::self_check::block_sums(3, 256), n * (n - 1) / 2);
        QCOMPARE(cuda_sim::self_check::odd_lanes_ballot(), 0xAAAAAAAAu);
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, cuda_sim::self_check::divergent_barrier());
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, cuda_sim::self_check::early_return());
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, cuda_sim::self_check::partial_mask());
        // A refused launch leaves the simulator usable.
        QCOMPARE(cuda_sim::self_check::block_sums(1, 64), int64_t(64 * 63 / 2));
    }

    // The statistics kernel against the tensor ops, on the edge values of each format (every
    // edge the statistics name, then 100,000 values over every binade), as the native executor
    // hands it tensors: FP32 or 16-bit operands, compared with their cast or not, with the cast
    // read once where it is the operand itself, read as FP8 codes times 1 / scale, a host or a
    // device scale. With 132
    // multiprocessors the grid has a block per 16 K values; with one, four blocks walk the tensor.
    // The probes on a GPU none of these kernels ran on yet: MANTISSA_CUDA_KERNELS=0 tries none,
    // a kernel that faults on the device stops the run naming it (the context is unusable after
    // it, and every later call failed far from the cause), and any other failure keeps the ops.
    void probesCanBeSwitchedOffAndAFaultStops()
    {
        int tried = 0;
        const auto agrees = [&] { return ++tried > 0; };
        ::setenv("MANTISSA_CUDA_KERNELS", "0", 1);
        QVERIFY(!kernel_agrees("test", agrees));
        QCOMPARE(probe_paired_then_plain("test", [&](bool) { return agrees(); }), ProbedKernel::Unavailable);
        QCOMPARE(tried, 0);
        ::setenv("MANTISSA_CUDA_KERNELS", "1", 1);
        QVERIFY(kernel_agrees("test", agrees));
        ::unsetenv("MANTISSA_CUDA_KERNELS");
        QCOMPARE(probe_paired_then_plain("test", [&](bool paired) { return paired && agrees(); }),
                 ProbedKernel::Paired);
        QCOMPARE(tried, 2);
        QVERIFY(!kernel_agrees("test", [&]() -> bool { throw std::runtime_error("takes no such width"); }));
        // CUDA errors that leave the context working keep the ops, as before (read-only audit
        // 'diff-review'): a cuBLAS status, a GPU the build did not target, a launch too big.
        for (const char* usable : {"CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling cublasLtMatmul",
                                   "CUDA error: no kernel image is available for execution on the device",
                                   "CUDA error: too many resources requested for launch"})
            QVERIFY2(!kernel_agrees("test", [&]() -> bool { throw std::runtime_error(usable); }), usable);
        QString error = "no error";
        try {
            kernel_agrees("test", [&]() -> bool {
                throw std::runtime_error("CUDA error: an illegal memory access was encountered\nmore");
            });
        } catch (const std::runtime_error& e) {
            error = QString::fromStdString(e.what());
        }
        QCOMPARE(error, QStringLiteral("the test kernel faulted in its probe on this GPU (CUDA error: an illegal "
                                       "memory access was encountered), which leaves CUDA unusable in this process: "
                                       "run with MANTISSA_CUDA_KERNELS=0 to use LibTorch's ops only, and please "
                                       "report it"));
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, probe_paired_then_plain("test", [&](bool) -> bool {
            throw std::runtime_error("CUDA error: misaligned address");
        }));
    }

    void statsRowAgrees_data()
    {
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<float>("scale"); // 0: per-row FP8
        QTest::addColumn<bool>("deviceScale");
        QTest::addColumn<bool>("codes"); // the cast handed over as FP8 codes and 1 / scale
        QTest::addColumn<int>("sms");
        for (const int sms : {132, 1}) {
            const auto row = [&](const char* name, c10::ScalarType dtype, NumberFormat format, float scale, bool device_scale,
                                 bool codes = false) {
                QTest::addRow("%s, %d SMs", name, sms) << dtype << format << scale << device_scale << codes << sms;
            };
            row("fp32 uncompared", torch::kFloat32, NumberFormat::FP32, 1.0f, false);
            row("bf16 uncompared", torch::kBFloat16, NumberFormat::FP32, 1.0f, false);
            row("fp16 uncompared", torch::kHalf, NumberFormat::FP32, 1.0f, false);
            row("fp32 to bf16", torch::kFloat32, NumberFormat::BF16, 1.0f, false);
            row("fp32 to fp16", torch::kFloat32, NumberFormat::FP16, 1.0f, false);
            row("fp32 to e5m2 x64", torch::kFloat32, NumberFormat::E5M2, 64.0f, false);
            row("fp32 to e5m2 x64 on the device", torch::kFloat32, NumberFormat::E5M2, 64.0f, true);
            row("fp32 to e4m3 per row", torch::kFloat32, NumberFormat::E4M3, 0.0f, false);
            row("bf16 to e4m3 x0.75 on the device", torch::kBFloat16, NumberFormat::E4M3, 0.75f, true);
            row("bf16 read once", torch::kBFloat16, NumberFormat::BF16, 1.0f, false);
            row("fp16 read once", torch::kHalf, NumberFormat::FP16, 1.0f, false);
            row("bf16 to e4m3 codes x0.75 on the device", torch::kBFloat16, NumberFormat::E4M3, 0.75f, true, true);
            row("fp32 to e5m2 codes x64", torch::kFloat32, NumberFormat::E5M2, 64.0f, false, true);
            row("fp32 to tf32", torch::kFloat32, NumberFormat::TF32, 1.0f, false); // subnormal bound among FP32's subnormals
            row("fp32 to e2m1 per block", torch::kFloat32, NumberFormat::E2M1, 0.0f, false);
            row("fp32 to e2m1 x0.5", torch::kFloat32, NumberFormat::E2M1, 0.5f, false);
            // A block recipe's scales, FP32 compared with their power-of-two rounding: FP32's
            // subnormal bound 2^-126 - 2^-150 is no FP32 number, and the kernel refused the row,
            // so every fp8-block run with telemetry stopped at step 1 on a GPU (audit 'cudareview').
            row("fp32 to fp32 (block scales)", torch::kFloat32, NumberFormat::FP32, 1.0f, false);
        }
    }
    void statsRowAgrees()
    {
        QFETCH(c10::ScalarType, dtype);
        QFETCH(NumberFormat, format);
        QFETCH(float, scale);
        QFETCH(bool, deviceScale);
        QFETCH(bool, codes);
        QFETCH(int, sms);
        const auto x = edge_values(format, scale).to(dtype);
        const auto x32 = x.to(torch::kFloat32);
        torch::Tensor q;                // the value the GEMM used
        torch::Tensor q_codes, q_scale; // the same as the native executor holds it: codes * (1 / scale)
        if (format == NumberFormat::BF16 || format == NumberFormat::FP16)
            q = x.scalar_type() == (format == NumberFormat::BF16 ? torch::kBFloat16 : torch::kHalf)
                    ? x // the operand is its own cast: the kernel reads it once
                    : x.to(format == NumberFormat::BF16 ? torch::kBFloat16 : torch::kHalf);
        else if (format == NumberFormat::FP32 && QByteArray(QTest::currentDataTag()).startsWith("fp32 to fp32"))
            q = torch::where(torch::isfinite(x32) & (x32 != 0),
                             torch::sign(x32) * torch::exp2(torch::floor(torch::log2(x32.abs()))), x32);
        else if (format == NumberFormat::TF32 || format == NumberFormat::E2M1)
            q = scale > 0.0f ? round_to_format(x32 * scale, format, Overflow::Saturate) / scale
                             : round_to_format(x32, format, Overflow::Saturate);
        else if (format == NumberFormat::E4M3 || format == NumberFormat::E5M2) {
            const auto fp8 = format == NumberFormat::E4M3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2;
            q = scale > 0.0f ? (x32 * scale).to(fp8).to(torch::kFloat32) / scale : x.to(fp8);
            if (codes) {
                q_codes = (x32 * scale).to(fp8);
                q_scale = torch::full({}, 1.0f / scale);
                q = q_codes.to(torch::kFloat32) * q_scale; // Fp8Tensor::dequantized()
            }
        }
        const auto scale_t = torch::full({}, static_cast<double>(scale), torch::kFloat64);
        const auto ops = tensor_stats_row(x, format, scale, q, StatsKernel::TensorOps);
        const bool compared = stats_compared(q);
        const auto comparison = cast_comparison(format, deviceScale || scale > 0.0f, deviceScale ? 1.0 : scale);
        const int64_t before = cuda_sim::launches();
        with_multiprocessors(sms, [&] {
            const auto row = kernels::tensor_stats_row(x, codes ? q_codes : compared ? q : torch::Tensor(), comparison,
                                                       deviceScale ? scale_t : torch::Tensor(), q_scale);
            QCOMPARE(cuda_sim::launches() - before, int64_t(2)); // the partial rows, then the finish
            compare_rows(row, ops);
        });
    }

    // Sizes around the kernel's spans: nothing, one value, a partial warp span, a block's span
    // and one past it, and 40 blocks' worth (the finishing warps take blocks 32 apart).
    void statsRowAcrossSizes()
    {
        QCOMPARE(kernels::tensor_stats_row(torch::empty({0}), {}, {}, {}).abs().sum().item<double>(), 0.0);
        for (const int64_t n : {int64_t(1), int64_t(257), int64_t(16384), int64_t(16385), int64_t(40 * 16384)}) {
            const auto x = torch::randn({n}) * 1e-3;
            compare_rows(kernels::tensor_stats_row(x, {}, cast_comparison(NumberFormat::FP32, false, 1.0), {}),
                         tensor_stats_row(x, NumberFormat::FP32, 1.0f, {}, StatsKernel::TensorOps));
        }
    }

    // Whole spans of an aligned tensor are read in 16-byte runs, the rest value by value: a
    // compared operand and its cast, each aligned or starting one value into its storage (the
    // runs are then off for the whole launch), at sizes with and without a partial last span.
    void statsRowRunsAndSingles_data()
    {
        QTest::addColumn<bool>("xAligned");
        QTest::addColumn<bool>("qAligned");
        QTest::addColumn<int64_t>("n");
        for (const int64_t n : {int64_t(2048), int64_t(2048 + 77), int64_t(65536 + 255)})
            for (const bool xa : {true, false})
                for (const bool qa : {true, false}) QTest::addRow("n %lld, x %s, q %s", static_cast<long long>(n), xa ? "aligned" : "offset", qa ? "aligned" : "offset") << xa << qa << n;
    }
    void statsRowRunsAndSingles()
    {
        QFETCH(bool, xAligned);
        QFETCH(bool, qAligned);
        QFETCH(int64_t, n);
        const auto placed = [&](const torch::Tensor& t, bool aligned) {
            if (aligned) return t;
            auto storage = torch::empty({t.numel() + 1}, t.options());
            auto view = storage.narrow(0, 1, t.numel());
            view.copy_(t);
            return view;
        };
        // Every binade and tie of E4M3 scaled by 64 among ordinary values, an Inf and a NaN.
        torch::manual_seed(static_cast<uint64_t>(n));
        auto base = torch::randn({n}) * torch::exp2(torch::randint(-30, 30, {n}).to(torch::kFloat32));
        const auto edges = edge_values(NumberFormat::E4M3, 64.0f);
        base.narrow(0, 0, std::min(n, edges.numel())).copy_(edges.narrow(0, 0, std::min(n, edges.numel())));
        const auto x = placed(base.to(torch::kBFloat16), xAligned);
        const auto codes = placed((x.to(torch::kFloat32) * 64.0f).to(torch::kFloat8_e4m3fn), qAligned);
        const auto q_scale = torch::full({}, 1.0f / 64.0f);
        const auto q = codes.to(torch::kFloat32) * q_scale;
        const auto ops = tensor_stats_row(x, NumberFormat::E4M3, 64.0f, q, StatsKernel::TensorOps);
        compare_rows(kernels::tensor_stats_row(x, codes, cast_comparison(NumberFormat::E4M3, true, 64.0), {}, q_scale), ops);
        compare_rows(kernels::tensor_stats_row(x, placed(q, qAligned), cast_comparison(NumberFormat::E4M3, true, 64.0), {}), ops);
        // A 16-bit cast, unscaled (per-row FP8 rules) and read once where it is the operand.
        const auto bf = placed(base.to(torch::kBFloat16), qAligned);
        compare_rows(kernels::tensor_stats_row(x.to(torch::kFloat32), bf, cast_comparison(NumberFormat::E4M3, false, 1.0), {}),
                     tensor_stats_row(x.to(torch::kFloat32), NumberFormat::E4M3, 0.0f, bf.to(torch::kFloat32), StatsKernel::TensorOps));
        compare_rows(kernels::tensor_stats_row(x, x, cast_comparison(NumberFormat::BF16, true, 1.0), {}),
                     tensor_stats_row(x, NumberFormat::BF16, 1.0f, x, StatsKernel::TensorOps));
    }

    // The fused cast and its amax against x.mul(scale) cast by the ops, on each format's edge
    // values, from each input dtype, saturating or not; the scale 0.75 is not a power of two.
    void fp8CastAgrees_data()
    {
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<bool>("saturate");
        for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kHalf})
            for (const auto format : {NumberFormat::E4M3, NumberFormat::E5M2})
                for (const bool saturate : {true, false})
                    QTest::addRow("%s %s%s", c10::toString(dtype), format == NumberFormat::E4M3 ? "e4m3" : "e5m2",
                                  saturate ? " saturating" : "")
                        << dtype << format << saturate;
    }
    void fp8CastAgrees()
    {
        QFETCH(c10::ScalarType, dtype);
        QFETCH(NumberFormat, format);
        QFETCH(bool, saturate);
        const float s = 0.75f;
        const auto x = edge_values(format, s).to(dtype);
        const auto overflow = saturate ? Overflow::Saturate : Overflow::Propagate;
        const auto expected = to_fp8_codes(x.to(torch::kFloat32) * s, format, overflow);
        torch::Tensor amax;
        const auto codes = kernels::fused_scale_cast_amax(x, torch::full({}, s), format == NumberFormat::E4M3, saturate, amax);
        QVERIFY(same_codes(codes, expected));
        QVERIFY(same_bits(amax, amax_skipping_nan(x)));
        QVERIFY(same_bits(kernels::amax_ignoring_nan(x), amax_skipping_nan(x)));
    }

    void amaxOfEdgeCases()
    {
        QCOMPARE(kernels::amax_ignoring_nan(torch::empty({0})).item<float>(), 0.0f);
        QCOMPARE(kernels::amax_ignoring_nan(torch::full({1000}, kNan)).item<float>(), 0.0f);
        auto x = torch::linspace(-5.0, 3.0, 5000);
        x[17] = kNan;
        QCOMPARE(kernels::amax_ignoring_nan(x).item<float>(), 5.0f);
        x[4000] = -kInf;
        QCOMPARE(kernels::amax_ignoring_nan(x).item<float>(), kInf);
    }

    // The cast-transpose in both of its kernels: sides that are multiples of 64 and aligned
    // data take the 64 x 64 tiles (64 x 131136 is 2,049 tiles, so one block walks two); others,
    // and an aligned shape whose data starts 4 bytes in, take the 32 x 32 tiles.
    void fp8CastTransposeAgrees_data()
    {
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::addColumn<int64_t>("rows");
        QTest::addColumn<int64_t>("cols");
        QTest::addColumn<bool>("unaligned");
        for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kHalf}) {
            const auto row = [&](int64_t r, int64_t c, bool unaligned) {
                QTest::addRow("%s %lldx%lld%s", c10::toString(dtype), static_cast<long long>(r), static_cast<long long>(c),
                              unaligned ? " unaligned" : "")
                    << dtype << r << c << unaligned;
            };
            row(64, 64, false);
            row(64, 128, false);
            row(192, 64, false);
            row(64, 64, true);
            row(96, 160, false);
            row(33, 65, false);
            row(1, 1, false);
        }
        QTest::addRow("bf16 64x131136, two tiles per block") << torch::kBFloat16 << int64_t(64) << int64_t(64 * 2049) << false;
    }
    void fp8CastTransposeAgrees()
    {
        QFETCH(c10::ScalarType, dtype);
        QFETCH(int64_t, rows);
        QFETCH(int64_t, cols);
        QFETCH(bool, unaligned);
        const auto i = torch::arange(rows * cols, torch::kFloat32);
        auto values = torch::sin(i * 0.37f) * torch::exp2(torch::remainder(i, 29.0f) - 14.0f);
        if (values.numel() > 700) {
            values[3] = kNan;
            values[300] = -kInf;
            values[600] = 600.0f; // past E4M3's 448 at any scale >= 1
        }
        const auto storage = torch::empty({rows * cols + 1}, dtype);
        const auto x = (unaligned ? storage.narrow(0, 1, rows * cols) : storage.narrow(0, 0, rows * cols)).view({rows, cols});
        x.copy_(values.view({rows, cols}));
        QCOMPARE(reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 != 0, unaligned);
        for (const bool e4m3 : {true, false})
            for (const bool saturate : {true, false}) {
                // The 2,049-tile walk once (2,048 simulated blocks a launch); the formats and
                // overflow rules on every other shape.
                if (cols > 4096 && !(e4m3 && saturate)) continue;
                const float s = 2.0f;
                const auto format = e4m3 ? NumberFormat::E4M3 : NumberFormat::E5M2;
                const auto expected = to_fp8_codes(x.to(torch::kFloat32) * s, format,
                                                   saturate ? Overflow::Saturate : Overflow::Propagate);
                torch::Tensor amax, codes_t;
                const auto codes = kernels::fused_scale_cast_amax_transpose(x, torch::full({}, s), e4m3, saturate, amax, codes_t);
                QVERIFY(same_codes(codes, expected));
                QVERIFY(same_codes(codes_t, expected.t().contiguous()));
                QVERIFY(same_bits(amax, amax_skipping_nan(x)));
                // Asked for the column sums too (a bias's gradient): the same codes, and the
                // 64 x 64 kernel's sums in its own order; the general kernel makes none.
                torch::Tensor amax2, codes_t2, sums;
                const auto codes2 = kernels::fused_scale_cast_amax_transpose(x, torch::full({}, s), e4m3, saturate, amax2,
                                                                             codes_t2, true, true, &sums);
                QVERIFY(same_codes(codes2, expected) && same_codes(codes_t2, codes_t) && same_bits(amax2, amax));
                const bool tiles_64 = rows % 64 == 0 && cols % 64 == 0 && !unaligned;
                QCOMPARE(sums.defined(), tiles_64);
                if (tiles_64) QVERIFY(same_bits(sums, column_sums_in_tile_order(x)));
            }
    }

    // The GELU cast-transpose (fc2's input cast from fc1's output u, gelu(u) never written)
    // against gelu(u) made by the kernel's formula (ATen's GeluErfFunctor in FP32 with the host's
    // erff standing in for the device's, stored in u's dtype) and then cast by the 64 x 64
    // kernel: codes, transposed codes and amax bit for bit. Values through erf's saturation on
    // both sides (GELU of -20 is -0, of -5 a tiny negative), Inf (GELU(-Inf) is NaN), NaN, and
    // values whose GELU the scale pushes past the format. What u it refuses, it refuses.
    void geluCastTransposeAgrees_data()
    {
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::addColumn<bool>("e4m3");
        QTest::addColumn<bool>("saturate");
        for (const auto dtype : {torch::kBFloat16, torch::kHalf})
            for (const bool e4m3 : {true, false})
                for (const bool saturate : {true, false})
                    QTest::addRow("%s %s%s", c10::toString(dtype), e4m3 ? "e4m3" : "e5m2", saturate ? " saturating" : "")
                        << dtype << e4m3 << saturate;
    }
    void geluCastTransposeAgrees()
    {
        QFETCH(c10::ScalarType, dtype);
        QFETCH(bool, e4m3);
        QFETCH(bool, saturate);
        const int64_t rows = 128, cols = 192;
        auto u32 = torch::linspace(-24.0, 24.0, rows * cols);
        u32[5] = kNan;
        u32[77] = kInf;
        u32[78] = -kInf;
        u32[200] = 1000.0f; // GELU 1000: past E4M3 (and E5M2's 57344 at the scale below)
        u32[4000] = 1e-30f; // GELU about 5e-31 in BF16 (FP16 holds no such u: 0)
        const auto u = u32.view({rows, cols}).to(dtype);
        QVERIFY(kernels::gelu_cast_transpose_takes(u));
        // Stored as c10's conversion stores it, as the kernel (and ATen's functor) does: a NaN
        // becomes the positive canonical NaN, where LibTorch's vectorized CPU conversion keeps
        // the sign of -Inf * 0.
        const auto h32 = u.to(torch::kFloat32).contiguous();
        auto h = torch::empty_like(u);
        for (int64_t i = 0; i < h32.numel(); ++i) {
            const float x = h32.data_ptr<float>()[i];
            const float g = x * 0.5f * (1.0f + std::erf(x * static_cast<float>(0.70710678118654752440)));
            if (dtype == torch::kBFloat16) h.data_ptr<c10::BFloat16>()[i] = c10::BFloat16(g);
            else h.data_ptr<c10::Half>()[i] = c10::Half(g);
        }
        const auto scale = torch::full({}, 60.0f);
        torch::Tensor amax, codes_t, want_amax, want_t;
        const auto codes = kernels::fused_gelu_scale_cast_amax_transpose(u, scale, e4m3, saturate, amax, codes_t);
        const auto want = kernels::fused_scale_cast_amax_transpose(h, scale, e4m3, saturate, want_amax, want_t);
        QVERIFY(same_codes(codes, want));
        QVERIFY(same_codes(codes_t, want_t));
        QVERIFY(same_bits(amax, want_amax));
        QVERIFY(same_bits(amax, amax_skipping_nan(h)));
        // The kernel takes 16-bit tensors whose sides are multiples of 64, aligned: nothing else.
        const auto storage = torch::empty({64 * 64 + 1}, dtype);
        for (const auto& refused : {u.to(torch::kFloat32), u.narrow(1, 0, 96).contiguous(), storage.narrow(0, 1, 64 * 64).view({64, 64}),
                                    u.t()}) {
            QVERIFY(!kernels::gelu_cast_transpose_takes(refused));
            QVERIFY_THROWS_EXCEPTION(c10::Error,
                                     kernels::fused_gelu_scale_cast_amax_transpose(refused, scale, e4m3, saturate, amax, codes_t));
        }
    }

    // The record in one launch against DeviceDelayedScaling's ops (upload, record, download):
    // windows of zeros, NaN, Inf and a full 1,024, every branch of the scale rule.
    void delayedRecordAgrees()
    {
        std::vector<std::vector<float>> windows = {{0.0f}, {3.0f, kNan, 0.0f, 1e-38f, 7.5f, 0.0f, kNan, 2.0f},
                                                   {kNan, kNan, kNan}, {0.0f, kInf, 5.0f, 0.0f}};
        const auto long_window = torch::exp2(torch::linspace(-130.0, 20.0, 1024));
        windows.emplace_back(long_window.data_ptr<float>(), long_window.data_ptr<float>() + 1024);
        int compared = 0;
        for (const auto& window : windows)
            for (const float a : {kNan, kInf, 0.0f, 1e-38f, 3.0f, 448.0f, 6e4f})
                for (const float previous : {1.0f, kInf, 2.5f})
                    for (const bool use_max : {true, false})
                        for (const double fp8_max : {448.0, 57344.0})
                            for (const int64_t margin : {0, 2}) {
                                DelayedScaling host(static_cast<int64_t>(window.size()));
                                host.restore(window, previous);
                                DeviceDelayedScaling ops;
                                ops.upload(host, torch::kCPU);
                                const auto amax = torch::full({}, a);
                                const auto own = kernels::record_amax(amax, torch::tensor(window), torch::full({}, previous),
                                                                      std::ldexp(static_cast<float>(fp8_max), -static_cast<int>(margin)),
                                                                      use_max);
                                ops.record(amax, fp8_max, use_max, margin);
                                DelayedScaling back;
                                ops.download(back);
                                QVERIFY(same_bits(own.history, torch::tensor(back.history())));
                                QVERIFY(same_bits(own.scale, ops.scale()));
                                QVERIFY(same_bits(own.inv_scale, ops.inv_scale()));
                                ++compared;
                            }
        QCOMPARE(compared, 5 * 7 * 3 * 2 * 2 * 2);
    }

    // fp8-block's 1x128 cast on its probe's rows (and the same rows 16-bit, as gradients and
    // 16-bit activations reach it), and the 128x128 tile cast on its probe's tiles, against the
    // tensor ops: values, scales and amaxes bit for bit, both formats, both kinds of scale.
    void fp8BlockCastsAgree_data()
    {
        QTest::addColumn<bool>("tiles");
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::newRow("rows fp32") << false << torch::kFloat32;
        QTest::newRow("rows bf16") << false << torch::kBFloat16;
        QTest::newRow("rows fp16") << false << torch::kHalf;
        QTest::newRow("tiles fp32") << true << torch::kFloat32;
    }
    void fp8BlockCastsAgree()
    {
        QFETCH(bool, tiles);
        QFETCH(c10::ScalarType, dtype);
        const auto x = (tiles ? fp8_block_probe_tiles() : fp8_block_probe_rows()).to(dtype);
        for (const auto format : {NumberFormat::E4M3, NumberFormat::E5M2})
            for (const bool power_of_two : {true, false}) {
                const auto ops = quantize_fp8_block_2d(x, format, power_of_two, tiles, BlockKernel::TensorOps);
                const bool e4m3 = format == NumberFormat::E4M3;
                const auto own = tiles ? kernels::fp8_block_tiles(x, e4m3, power_of_two) : kernels::fp8_block_rows(x, e4m3, power_of_two);
                QVERIFY(same_bits(own.values, ops.values));
                QVERIFY(same_bits(own.scale_inv, ops.block_scales));
                QVERIFY(same_bits(own.amax, ops.block_amax));
                // Written as codes (the native executor's blockwise GEMM takes them): the ops'
                // codes byte for byte, NaN blocks 0x7F throughout, and codes times their block's
                // scale are the values above.
                const auto codes_ops = cast_fp8_block_codes(x, format, power_of_two, tiles);
                const auto codes = tiles ? kernels::fp8_block_tiles(x, e4m3, power_of_two, true, true)
                                         : kernels::fp8_block_rows(x, e4m3, power_of_two, true, true);
                QVERIFY(!codes.values.defined());
                QVERIFY(same_codes(codes.codes, codes_ops.codes));
                QVERIFY(same_bits(codes.scale_inv, codes_ops.decode));
                QVERIFY(same_bits(codes.amax, codes_ops.amax));
                QVERIFY(same_bits(codes.codes.to(torch::kFloat32) * per_value(codes.scale_inv, x.sizes(), tiles), ops.values));
            }
    }

    // fp8-block's rows-and-columns cast (one read of x for the forward's or dgrad's operand and
    // the wgrad's) against the tensor ops' casts of x and of x^T: codes byte for byte, scales and
    // amaxes bit for bit, FP32 and 16-bit inputs, both formats and both kinds of scale, on its
    // probe's 3 x 3 tiles (NaN, Inf, zero, subnormal and FLT_MAX blocks both ways); then 54
    // tiles on one simulated multiprocessor, whose 32 thread blocks walk them.
    // An operand compared with itself is read once and its overflow verdict left out only where
    // none is possible (scale 1, its own format); under another scale or a device scale some
    // values overflow, and the kernel counts them as the ops do.
    void statsRowAgainstItselfUnderAScale_data()
    {
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::addColumn<double>("scale");
        QTest::addColumn<bool>("deviceScale");
        for (const auto dtype : {torch::kBFloat16, torch::kHalf})
            for (const double scale : {1.0, 4.0})
                for (const bool device : {false, true})
                    QTest::addRow("%s x%g%s", dtype == torch::kHalf ? "fp16" : "bf16", scale, device ? " on the device" : "")
                        << dtype << scale << device;
    }
    void statsRowAgainstItselfUnderAScale()
    {
        QFETCH(c10::ScalarType, dtype);
        QFETCH(double, scale);
        QFETCH(bool, deviceScale);
        const auto format = dtype == torch::kHalf ? NumberFormat::FP16 : NumberFormat::BF16;
        const auto x = edge_values(format, 1.0f).to(dtype);
        const auto ops = tensor_stats_row(x, format, static_cast<float>(scale), x, StatsKernel::TensorOps);
        const double overflows = ops[stats_row::kOverflow].item<double>();
        QVERIFY(scale == 1.0 ? overflows == 0.0 : overflows > 0.0);
        const auto row = kernels::tensor_stats_row(x, x, cast_comparison(format, true, deviceScale ? 1.0 : scale),
                                                   deviceScale ? torch::full({}, scale, torch::kFloat64) : torch::Tensor());
        compare_rows(row, ops);
    }

    // The whole-span path's short tally of plain runs (x normal and finite; its cast finite,
    // non-zero, below the overflow bound and above the subnormal one) against its full one, at
    // the edges of "plain": runs of ordinary values with one edge value each, so that every
    // other run stays plain. Each edge is the run's largest or smallest: FLT_MAX and the min
    // normal (plain), the largest subnormal (not); an FP16 subnormal against itself (an FP32
    // normal, so a plain run: the epilogue counts it from the histogram); under a saturating
    // E5M2 or E4M3 cast, values scaled onto the overflow tie (E5M2 overflows there, E4M3 does
    // not), just under it, past it, and down to a zero or subnormal code.
    void statsRowPlainRunsAtTheirEdges_data()
    {
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<float>("scale");
        QTest::addColumn<QVector<float>>("edges");
        QTest::addColumn<int>("subnormals"); // what the ops must count, so that the edges are met
        QTest::addColumn<int>("overflows");
        const float tiny = std::ldexp(1.0f, -126);
        QTest::addRow("fp32 uncompared") << torch::kFloat32 << NumberFormat::FP32 << 1.0f
                                         << QVector<float>{std::numeric_limits<float>::max(), tiny, std::nextafter(tiny, 0.0f)} << 0 << 0;
        QTest::addRow("fp16 against itself") << torch::kHalf << NumberFormat::FP16 << 1.0f
                                             << QVector<float>{std::ldexp(1.0f, -20), std::ldexp(1.0f, -14), 65504.0f} << 1 << 0;
        QTest::addRow("bf16 against itself") << torch::kBFloat16 << NumberFormat::BF16 << 1.0f
                                             << QVector<float>{std::ldexp(1.0f, -127), tiny, 3.3895314e38f} << 1 << 0;
        // E5M2 x 0.5: 61440 is the tie past 57344 that overflows; E4M3 x 2: 464 the tie that does not.
        QTest::addRow("fp32 to e5m2 x0.5") << torch::kFloat32 << NumberFormat::E5M2 << 0.5f
                                           << QVector<float>{122880.0f, std::nextafter(122880.0f, 0.0f), 131072.0f,
                                                             std::ldexp(1.0f, -15), std::ldexp(1.0f, -30)}
                                           << 1 << 2;
        QTest::addRow("bf16 to e4m3 x2") << torch::kBFloat16 << NumberFormat::E4M3 << 2.0f
                                         << QVector<float>{232.0f, 240.0f, 224.0f, std::ldexp(1.0f, -9), std::ldexp(1.0f, -14)}
                                         << 1 << 1;
    }
    void statsRowPlainRunsAtTheirEdges()
    {
        QFETCH(c10::ScalarType, dtype);
        QFETCH(NumberFormat, format);
        QFETCH(float, scale);
        QFETCH(QVector<float>, edges);
        QFETCH(int, subnormals);
        QFETCH(int, overflows);
        // 16 spans of ordinary values (magnitudes 1 to 8, both signs), then one edge value in each
        // of a few runs, at another lane and place in the run each time.
        const int64_t n = 16 * 256;
        const auto i = torch::arange(n, torch::kFloat32);
        auto x32 = (1.0f + torch::remainder(i * 0.37f, 7.0f)) * torch::where(torch::remainder(i, 3.0f) < 1.0f, -1.0f, 1.0f);
        for (int e = 0; e < edges.size(); ++e) x32[(37 * e + 5) * 8 + e % 8] = edges[e];
        const auto x = x32.to(dtype);
        torch::Tensor q, codes, q_scale;
        if (format == NumberFormat::E4M3 || format == NumberFormat::E5M2) {
            codes = to_fp8_codes(x.to(torch::kFloat32) * scale, format, Overflow::Saturate);
            q_scale = torch::full({}, 1.0f / scale);
            q = codes.to(torch::kFloat32) * q_scale;
        } else if (format != NumberFormat::FP32) {
            q = x; // its own cast: read once
        }
        const auto ops = tensor_stats_row(x, format, scale, q, StatsKernel::TensorOps);
        QCOMPARE(ops[stats_row::kSubnormal].item<double>(), double(subnormals));
        QCOMPARE(ops[stats_row::kOverflow].item<double>(), double(overflows));
        const auto comparison = cast_comparison(format, format != NumberFormat::FP32, scale);
        if (codes.defined()) {
            compare_rows(kernels::tensor_stats_row(x, codes, comparison, {}, q_scale), ops);
            if (QTest::currentTestFailed()) return;
        }
        compare_rows(kernels::tensor_stats_row(x, q, comparison, {}), ops);
    }

    // fp8-block's casts as the native executor records them: E4M3 codes (R, C) and the inverse
    // scale of each 1x128 block of their rows (R, C / 128). The kernel reads the codes and
    // their block's scale, and its row is that of the FP32 values join_fp8_blocks makes (the
    // probe square's blocks of zeros, NaN and Inf, subnormals, FLT_MAX; both scale kinds), read
    // in runs and, with the codes one byte into their storage, value by value.
    void statsRowOfBlockCodes_data()
    {
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::addColumn<bool>("powerOfTwo");
        QTest::addColumn<bool>("aligned");
        for (const auto dtype : {torch::kFloat32, torch::kBFloat16})
            for (const bool pow2 : {true, false})
                for (const bool aligned : {true, false})
                    QTest::addRow("%s, %s scales, codes %s", dtype == torch::kFloat32 ? "fp32" : "bf16", pow2 ? "pow2" : "fp32",
                                  aligned ? "aligned" : "offset")
                        << dtype << pow2 << aligned;
    }
    void statsRowOfBlockCodes()
    {
        QFETCH(c10::ScalarType, dtype);
        QFETCH(bool, powerOfTwo);
        QFETCH(bool, aligned);
        const auto x = fp8_block_probe_square().to(dtype); // (384, 384)
        const auto cast = cast_fp8_block_codes(x.to(torch::kFloat32), NumberFormat::E4M3, powerOfTwo, /*tile_2d=*/false);
        QCOMPARE(cast.decode.sizes(), (c10::IntArrayRef{384, 3}));
        auto codes = cast.codes;
        if (!aligned) {
            auto storage = torch::empty({codes.numel() + 1}, codes.options());
            codes = storage.narrow(0, 1, codes.numel()).view(codes.sizes());
            codes.copy_(cast.codes);
        }
        const auto values = join_fp8_blocks({cast.codes, cast.decode});
        QVERIFY(values.isnan().any().item<bool>()); // the probe's NaN and Inf blocks
        const auto ops = tensor_stats_row(x, NumberFormat::E4M3, 0.0f, values, StatsKernel::TensorOps);
        const int64_t before = cuda_sim::launches();
        compare_rows(kernels::tensor_stats_row(x, codes, cast_comparison(NumberFormat::E4M3, false, 0.0), {}, cast.decode), ops);
        QCOMPARE(cuda_sim::launches() - before, int64_t(2)); // no dequantized tensor made first
        compare_rows(tensor_stats_row_of_block_codes(x, NumberFormat::E4M3, codes, cast.decode), ops); // the CPU's way
        QCOMPARE(dequantize_codes(codes, cast.decode).sizes(), values.sizes());
        QVERIFY(same_bits(dequantize_codes(codes, cast.decode), values));
        // One scale per 128 codes along a row, or one scale: nothing else is taken.
        QVERIFY_THROWS_EXCEPTION(c10::Error, kernels::tensor_stats_row(x, codes, cast_comparison(NumberFormat::E4M3, false, 0.0), {},
                                                                       cast.decode.narrow(1, 0, 2)));
    }

    void fp8BlockRowsColsAgree_data()
    {
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::newRow("fp32") << torch::kFloat32;
        QTest::newRow("bf16") << torch::kBFloat16;
        QTest::newRow("fp16") << torch::kHalf;
    }
    void fp8BlockRowsColsAgree()
    {
        QFETCH(c10::ScalarType, dtype);
        const auto x = fp8_block_probe_square().to(dtype);
        const auto check = [](const kernels::Fp8BlockRows& own, const Fp8BlockCodes& ops) {
            QVERIFY(same_codes(own.codes, ops.codes));
            QVERIFY(same_bits(own.scale_inv, ops.decode));
            QVERIFY(same_bits(own.amax, ops.amax));
        };
        for (const auto format : {NumberFormat::E4M3, NumberFormat::E5M2})
            for (const bool power_of_two : {true, false}) {
                const auto own = kernels::fp8_block_rows_cols(x, format == NumberFormat::E4M3, power_of_two);
                check(own.rows, cast_fp8_block_codes(x, format, power_of_two, false));
                check(own.cols, cast_fp8_block_codes(x.t().contiguous(), format, power_of_two, false));
                // What the layer takes on a CPU: the same two casts.
                const auto both = cast_fp8_block_codes_both(x, format, power_of_two);
                check(own.cols, both.cols);
            }
        const auto many = fp8_block_probe_square().repeat({2, 3}).to(dtype); // (768, 1152): 54 tiles
        with_multiprocessors(1, [&] {
            const int64_t before = cuda_sim::launches();
            const auto own = kernels::fp8_block_rows_cols(many, true, true);
            QCOMPARE(cuda_sim::launches() - before, int64_t(1));
            check(own.rows, cast_fp8_block_codes(many, NumberFormat::E4M3, true, false));
            check(own.cols, cast_fp8_block_codes(many.t().contiguous(), NumberFormat::E4M3, true, false));
        });
    }

    // The three fp8-block kernels walking their operand grid-stride: with one multiprocessor the
    // grid is capped at 32 thread blocks (256 row blocks a pass for the 1x128 cast and the split,
    // 32 tiles for the tile cast), and the probes' values repeated make 900 row blocks and 72 tiles.
    void fp8BlockKernelsWalk()
    {
        const auto rows = fp8_block_probe_rows().repeat({25, 1});  // (300, 300): 900 row blocks
        const auto tiles = fp8_block_probe_tiles().repeat({3, 4}); // (900, 1040): 8 x 9 tiles
        with_multiprocessors(1, [&] {
            for (const bool tile_2d : {false, true}) {
                const auto& x = tile_2d ? tiles : rows;
                const auto ops = quantize_fp8_block_2d(x, NumberFormat::E4M3, true, tile_2d, BlockKernel::TensorOps);
                const int64_t before = cuda_sim::launches();
                const auto own = tile_2d ? kernels::fp8_block_tiles(x, true, true) : kernels::fp8_block_rows(x, true, true);
                QCOMPARE(cuda_sim::launches() - before, int64_t(1));
                QVERIFY(same_bits(own.values, ops.values));
                QVERIFY(same_bits(own.scale_inv, ops.block_scales));
                QVERIFY(same_bits(own.amax, ops.block_amax));
                const auto codes = tile_2d ? kernels::fp8_block_tiles(x, true, true, true, true)
                                           : kernels::fp8_block_rows(x, true, true, true, true);
                QVERIFY(same_codes(codes.codes, cast_fp8_block_codes(x, NumberFormat::E4M3, true, tile_2d).codes));
            }
            const auto values = quantize_fp8_block_2d(rows.narrow(1, 0, 256).contiguous(), NumberFormat::E4M3, true, false,
                                                      BlockKernel::TensorOps)
                                    .values; // (300, 256): 600 blocks
            const auto ops = split_fp8_blocks(values);
            const auto own = kernels::split_fp8_blocks(values);
            QVERIFY(same_codes(own.first, ops.codes));
            QVERIFY(same_bits(own.second, ops.decode));
        });
    }

    // The split of cast values into E4M3 codes and a power-of-two decode per 128 against the ops,
    // on values that are codes times a power of two (what the cast hands the GEMM), with a block
    // of zeros, one holding a NaN, subnormal decodes, and blocks whose amax is 448 times a power
    // of two (the decode on the boundary).
    void fp8BlockSplitAgrees()
    {
        auto x = fp8_block_probe_rows().narrow(1, 0, 256).contiguous();
        auto values = quantize_fp8_block_2d(x, NumberFormat::E4M3, true, false, BlockKernel::TensorOps).values;
        const auto codes = torch::linspace(-448.0, 448.0, 128).to(torch::kFloat8_e4m3fn).to(torch::kFloat32);
        values[10].narrow(0, 0, 128).copy_(codes * std::ldexp(1.0f, -3));
        values[11].narrow(0, 128, 128).copy_(codes * std::ldexp(1.0f, -140));
        values[11].narrow(0, 0, 128).copy_(codes * std::ldexp(1.0f, 100));
        // An Inf past every decode: no E4M3 code but NaN, signed, in both, whatever the LibTorch
        // (c10's conversion saturates to 448 from 2.13 on, and wrote NaN in 2.11, the GPU's).
        values[9][5].fill_(std::numeric_limits<float>::infinity());
        values[9][6].fill_(-std::numeric_limits<float>::infinity());
        const auto ops = split_fp8_blocks(values);
        const auto own = kernels::split_fp8_blocks(values);
        QVERIFY(same_codes(own.first, ops.codes));
        QVERIFY(same_bits(own.second, ops.decode));
        const auto bytes = ops.codes.view(torch::kUInt8);
        QCOMPARE(int(bytes[9][5].item<uint8_t>()), 0x7F);
        QCOMPARE(int(bytes[9][6].item<uint8_t>()), 0xFF);
        QVERIFY(same_bits(join_fp8_blocks({own.first, own.second}), join_fp8_blocks(ops)));
    }

    // The attention max score without the scores, against the FP32 route it replaces
    // (max_abs_over_blocks), on integer heads where both are exact: a pair of query i and key j
    // planted in the last head through column 0 (64 x 64, far above the rest) counts when j <= i
    // and not when j > i; the pairs sit at the kernel's edges: inside the diagonal tile, across
    // a 16-key tile, across a block of 64 queries, in the ragged last block, on the last row.
    // Then a NaN or an Inf query, heads read in place from a qkv-like tensor, and a contiguous
    // view at an unaligned offset (copied first).
    void causalMaxScoreAgrees_data()
    {
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::addColumn<QList<int>>("shape"); // B, H, T, D
        QTest::addColumn<int>("query");        // -1: nothing planted
        QTest::addColumn<int>("key");
        QTest::addColumn<QString>("layout"); // contiguous, qkv, mixed (qkv queries), unaligned; nan, inf
        const auto bf16 = torch::kBFloat16, fp16 = torch::kHalf;
        const QList<int> one{1, 1, 16, 16}, small{2, 3, 80, 64}, wide{1, 2, 128, 128}, narrow{2, 2, 48, 32};
        QTest::newRow("bf16, nothing planted") << bf16 << small << -1 << -1 << "contiguous";
        QTest::newRow("bf16, one tile, diagonal") << bf16 << one << 3 << 3 << "contiguous";
        QTest::newRow("bf16, one tile, above the diagonal") << bf16 << one << 3 << 4 << "contiguous";
        QTest::newRow("bf16, one tile, below the diagonal") << bf16 << one << 4 << 3 << "contiguous";
        QTest::newRow("bf16, across a key tile, future") << bf16 << small << 15 << 16 << "contiguous";
        QTest::newRow("bf16, across a key tile, past") << bf16 << small << 16 << 15 << "contiguous";
        QTest::newRow("bf16, ragged last block, diagonal") << bf16 << small << 79 << 79 << "contiguous";
        QTest::newRow("bf16, ragged last block, first key") << bf16 << small << 64 << 0 << "contiguous";
        QTest::newRow("fp16, across a block of queries, future") << fp16 << wide << 63 << 64 << "contiguous";
        QTest::newRow("fp16, across a block of queries, past") << fp16 << wide << 64 << 63 << "contiguous";
        QTest::newRow("fp16, last row, first key") << fp16 << narrow << 47 << 0 << "contiguous";
        QTest::newRow("fp16, last key, the query before it") << fp16 << narrow << 46 << 47 << "contiguous";
        QTest::newRow("bf16, qkv view, diagonal") << bf16 << small << 40 << 40 << "qkv";
        QTest::newRow("bf16, qkv view, future") << bf16 << small << 40 << 41 << "qkv";
        QTest::newRow("bf16, qkv view of the queries, keys contiguous") << bf16 << small << 40 << 40 << "mixed";
        QTest::newRow("fp16, unaligned view, past") << fp16 << narrow << 30 << 2 << "unaligned";
        QTest::newRow("bf16, NaN query") << bf16 << narrow << -1 << -1 << "nan";
        QTest::newRow("fp16, Inf query") << fp16 << narrow << -1 << -1 << "inf";
    }
    void causalMaxScoreAgrees()
    {
        QFETCH(c10::ScalarType, dtype);
        QFETCH(QList<int>, shape);
        QFETCH(int, query);
        QFETCH(int, key);
        QFETCH(QString, layout);
        const int64_t B = shape[0], H = shape[1], T = shape[2], D = shape[3];
        auto [q, k] = integer_heads(B, H, T, D);
        if (query >= 0) {
            q.index_put_({B - 1, H - 1, query, 0}, 64.0f);
            k.index_put_({B - 1, H - 1, key, 0}, 64.0f);
        }
        if (layout == "nan") q.index_put_({B - 1, 0, T - 1, 5}, kNan);
        if (layout == "inf") {
            using torch::indexing::Slice;
            k.index_put_({Slice(), Slice(), Slice(), 0}, 1.0f); // Inf times 1 in every key: no Inf * 0
            q.index_put_({0, H - 1, 20, 0}, kInf);
        }
        q = q.to(dtype);
        k = k.to(dtype);
        torch::Tensor q_read = q, k_read = k;
        if (layout == "qkv" || layout == "mixed") {
            // (B, T, 3·H·D) as the qkv projection's output; the heads are views with a row
            // stride of 3·H·D, which the kernel reads in place.
            const auto rows = [&](const torch::Tensor& t) { return t.transpose(1, 2).reshape({B, T, H * D}); };
            const auto qkv = torch::cat({rows(q), rows(k), torch::zeros({B, T, H * D}, q.options())}, 2);
            auto heads = [&](int64_t part) { return qkv.narrow(2, part * H * D, H * D).view({B, T, H, D}).transpose(1, 2); };
            q_read = heads(0);
            if (layout == "qkv") k_read = heads(1);
            QCOMPARE(q_read.stride(2), 3 * H * D);
        } else if (layout == "unaligned") {
            // Contiguous views one value into their storage: 2 bytes off wmma's 32-byte alignment.
            auto shifted = [](const torch::Tensor& t) {
                auto storage = torch::zeros({t.numel() + 1}, t.options());
                storage.narrow(0, 1, t.numel()).copy_(t.flatten());
                return storage.narrow(0, 1, t.numel()).view(t.sizes());
            };
            q_read = shifted(q);
            k_read = shifted(k);
            QVERIFY(q_read.is_contiguous());
        }
        QVERIFY(kernels::causal_max_abs_score_takes(q_read, k_read));
        const int64_t launches = cuda_sim::launches();
        const auto ours = kernels::causal_max_abs_score(q_read, k_read);
        QCOMPARE(cuda_sim::launches(), launches + 1);
        const auto reference = causal_max_abs_score(q.to(torch::kFloat32), k.to(torch::kFloat32));
        QVERIFY2(same_bits(ours, reference),
                 qPrintable(QStringLiteral("%1, the FP32 route's %2").arg(ours.item<float>()).arg(reference.item<float>())));
        // The case is what it says: the planted 4096 decides the maximum exactly when it counts.
        if (query >= 0) QCOMPARE(reference.item<float>() > 4000.0f, key <= query);
        if (layout == "nan") QVERIFY(std::isnan(ours.item<float>()));
        if (layout == "inf") QCOMPARE(ours.item<float>(), kInf);
    }

    // Heads the kernel does not take stay with the ops' routes.
    void causalMaxScoreTakes()
    {
        const auto heads = [](int64_t T, int64_t D, c10::ScalarType dtype) { return torch::zeros({1, 2, T, D}, dtype); };
        QVERIFY(kernels::causal_max_abs_score_takes(heads(32, 64, torch::kBFloat16), heads(32, 64, torch::kBFloat16)));
        QVERIFY(!kernels::causal_max_abs_score_takes(heads(40, 64, torch::kBFloat16), heads(40, 64, torch::kBFloat16)));
        QVERIFY(!kernels::causal_max_abs_score_takes(heads(32, 96, torch::kBFloat16), heads(32, 96, torch::kBFloat16)));
        QVERIFY(!kernels::causal_max_abs_score_takes(heads(32, 64, torch::kFloat32), heads(32, 64, torch::kFloat32)));
        QVERIFY(!kernels::causal_max_abs_score_takes(heads(32, 64, torch::kBFloat16), heads(32, 64, torch::kHalf)));
        QVERIFY(!kernels::causal_max_abs_score_takes(heads(32, 64, torch::kHalf), heads(48, 64, torch::kHalf)));
    }

    // The loss kernels against cross_entropy over the widened logits, forward and backward, as
    // their probe holds them on a GPU: rows at a few scales, a target logit of 60 (p = 1), a
    // confident row, an ignored row, vocabularies that are no multiple of the kernels' strides;
    // then a NaN logit. Bounds as the probe's (the host's expf/logf stand in for the GPU's), the
    // reference in FP64.
    void crossEntropyAgrees_data()
    {
        QTest::addColumn<c10::ScalarType>("dtype");
        QTest::addColumn<int64_t>("vocab");
        for (const auto dtype : {torch::kBFloat16, torch::kHalf})
            for (const int64_t vocab : {int64_t(1000), int64_t(50304)})
                QTest::addRow("%s, vocabulary %lld", c10::toString(dtype), static_cast<long long>(vocab)) << dtype << vocab;
    }
    void crossEntropyAgrees()
    {
        QFETCH(c10::ScalarType, dtype);
        QFETCH(int64_t, vocab);
        const int64_t rows = 24, ignore = -100;
        const auto i = torch::arange(rows * vocab, torch::kFloat32).view({rows, vocab});
        auto base = torch::sin(i * 0.37f) * torch::exp2(torch::remainder(torch::floor(i / vocab), 7.0f) - 1.0f);
        auto targets = torch::remainder(torch::arange(rows, torch::kInt64) * 7919, vocab);
        base[3][targets[3].item<int64_t>()] = 60.0f;
        base[7][targets[7].item<int64_t>()] = std::log(static_cast<double>(vocab)) + 7.0;
        targets[5] = ignore;
        const auto logits = base.to(dtype);

        const auto own = kernels::cross_entropy_rows(logits, targets, ignore);
        QVERIFY(torch::equal(own.row_max, std::get<0>(logits.to(torch::kFloat32).max(-1))));
        const auto count = targets.ne(ignore).sum().to(torch::kFloat32);
        const auto loss = own.row_loss.sum() / count;
        // In FP64: the CPU's FP32 log_softmax sums a row lane by lane, and the lane holding row 7's
        // target (p = 1 - 9e-4) drops its share of the 50,303 other terms (each 2e-8, under half
        // an ulp of 1): 6 % of its gradient, where the kernels' per-thread sums keep them.
        auto theirs = logits.to(torch::kFloat64).requires_grad_(true);
        const auto reference = torch::nn::functional::cross_entropy(theirs, targets);
        (reference * 1024.0f).backward();
        const double a = loss.item<double>(), b = reference.item<double>();
        QVERIFY2(std::abs(a - b) <= 1e-5 * std::abs(b), qPrintable(QStringLiteral("loss %1, the ops' %2").arg(a).arg(b)));
        const auto expected_log_z = logits.to(torch::kFloat64).logsumexp(-1);
        QVERIFY((own.log_z - expected_log_z).abs().le(1e-5 * expected_log_z.abs() + 1e-6).all().item<bool>());

        const auto g = kernels::cross_entropy_backward(logits, targets, own.row_max, own.log_sum, torch::full({}, 1024.0f),
                                                       count, ignore)
                           .to(torch::kFloat32);
        const auto r = theirs.grad().to(dtype).to(torch::kFloat32);
        // A step of the 16-bit format, or a millionth of the largest gradient (the probe's bound).
        const double step = dtype == torch::kBFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
        const double subnormal_step = dtype == torch::kHalf ? std::ldexp(1.0, -24) : 0.0;
        QVERIFY((g - r).abs().le(r.abs() * step + 1e-6 * r.abs().max() + subnormal_step).all().item<bool>());
        QVERIFY(g[5].eq(0).all().item<bool>());

        auto poisoned = logits.clone();
        poisoned[2][11] = kNan;
        const auto nan_rows = kernels::cross_entropy_rows(poisoned, targets, ignore);
        QVERIFY(std::isnan(nan_rows.row_loss[2].item<float>()));
        QVERIFY(!std::isnan(nan_rows.row_loss[1].item<float>()));
        const auto nan_grad = kernels::cross_entropy_backward(poisoned, targets, nan_rows.row_max, nan_rows.log_sum,
                                                              torch::full({}, 1.0f), count, ignore);
        QVERIFY(nan_grad[2].isnan().all().item<bool>());
        QVERIFY(!nan_grad[1].isnan().any().item<bool>());
    }
};

QTEST_APPLESS_MAIN(TestCudaKernelsOnCpu)
#include "test_cuda_kernels_on_cpu.moc"
