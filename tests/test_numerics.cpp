// SPDX-License-Identifier: GPL-3.0-or-later
// Number formats, FP8 scaling recipes and the loss scaler, against hand-computed bit
// patterns and PyTorch's own rules.

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include <torch/torch.h>

#include "adamw.h"
#include "checkpoint_archive.h"
#include "device_loss_scale.h"
#include "edge_values.h"
#include "loss_scale_replay.h"
#include "fp8_scaling.h"
#include "loss_scaler.h"
#include "quantize.h"
#include "scale_rule.h"

// Qt after LibTorch: Qt's `slots` macro would break torch's IValue::slots().
#include <QtTest>

using namespace mantissa;

namespace {

// Bit-identical FP32 tensors (signed zeros told apart).
bool same_bits(const torch::Tensor& a, const torch::Tensor& b)
{
    return a.sizes() == b.sizes() && torch::equal(a.contiguous().view(torch::kInt32), b.contiguous().view(torch::kInt32));
}

// Bits of the value `round_to_format` produced, re-encoded in the format.
int64_t bits_of(float v, NumberFormat f)
{
    auto t = torch::tensor({v});
    switch (f) {
    case NumberFormat::FP16: return t.to(torch::kHalf).view(torch::kShort).item<int16_t>() & 0xFFFF;
    case NumberFormat::BF16: return t.to(torch::kBFloat16).view(torch::kShort).item<int16_t>() & 0xFFFF;
    case NumberFormat::E4M3: return t.to(torch::kFloat8_e4m3fn).view(torch::kByte).item<uint8_t>();
    case NumberFormat::E5M2: return t.to(torch::kFloat8_e5m2).view(torch::kByte).item<uint8_t>();
    default: return t.view(torch::kInt32).item<int32_t>();
    }
}

float round1(float v, NumberFormat f, Overflow o = Overflow::Propagate)
{
    return round_to_format(torch::tensor({v}), f, o).item<float>();
}

} // namespace

Q_DECLARE_METATYPE(mantissa::NumberFormat)
Q_DECLARE_METATYPE(mantissa::Overflow)

class TestNumerics : public QObject {
    Q_OBJECT
private slots:
    void formatTable()
    {
        // docs/NUMERICS.md, shared/design/numerics.md
        QCOMPARE(format_info(NumberFormat::E4M3).max_finite, 448.0);
        QCOMPARE(format_info(NumberFormat::E5M2).max_finite, 57344.0);
        QCOMPARE(format_info(NumberFormat::FP16).max_finite, 65504.0);
        QCOMPARE(format_info(NumberFormat::FP16).min_subnormal, std::ldexp(1.0, -24));
        QCOMPARE(format_info(NumberFormat::E4M3).min_subnormal, std::ldexp(1.0, -9));
        QCOMPARE(format_info(NumberFormat::E5M2).min_subnormal, std::ldexp(1.0, -16));
        QCOMPARE(format_info(NumberFormat::BF16).min_subnormal, std::ldexp(1.0, -133));
        QCOMPARE(float(format_info(NumberFormat::BF16).max_finite), 3.3895314e38f);
        // Bit-exact, not QCOMPARE's fuzzy double compare: the largest value of each format.
        const auto largest = [](int mantissa_bits, int exponent) {
            return std::ldexp(2.0 - std::ldexp(1.0, -mantissa_bits), exponent);
        };
        QCOMPARE(std::bit_cast<uint64_t>(format_info(NumberFormat::TF32).max_finite), std::bit_cast<uint64_t>(largest(10, 127)));
        QCOMPARE(std::bit_cast<uint64_t>(format_info(NumberFormat::BF16).max_finite), std::bit_cast<uint64_t>(largest(7, 127)));
        QCOMPARE(std::bit_cast<uint64_t>(format_info(NumberFormat::FP32).max_finite), std::bit_cast<uint64_t>(largest(23, 127)));
        QCOMPARE(format_info(NumberFormat::TF32).min_normal, std::ldexp(1.0, -126));
        QCOMPARE(format_info(NumberFormat::E4M3).min_normal, std::ldexp(1.0, -6));
        QCOMPARE(format_info(NumberFormat::E5M2).min_normal, std::ldexp(1.0, -14));
        QCOMPARE(format_info(NumberFormat::FP16).min_normal, std::ldexp(1.0, -14));
        QVERIFY(!format_info(NumberFormat::E4M3).has_infinity);
        QCOMPARE(parse_number_format("e5m2").value(), NumberFormat::E5M2);
        QVERIFY(!parse_number_format("fp8").has_value());
    }

    void rounding_data()
    {
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<Overflow>("overflow");
        QTest::addColumn<double>("input");
        QTest::addColumn<double>("expected");
        QTest::addColumn<qlonglong>("bits"); // -1: NaN, bits not checked
        const auto S = Overflow::Saturate, P = Overflow::Propagate;
        const double inf = std::numeric_limits<double>::infinity();
        const auto E4 = NumberFormat::E4M3, E5 = NumberFormat::E5M2, H = NumberFormat::FP16, B = NumberFormat::BF16;
        // E4M3: S.EEEE.MMM, bias 7, no infinity
        QTest::newRow("e4m3 one") << E4 << P << 1.0 << 1.0 << 0x38LL;
        QTest::newRow("e4m3 max") << E4 << P << 448.0 << 448.0 << 0x7ELL;
        QTest::newRow("e4m3 -max") << E4 << P << -448.0 << -448.0 << 0xFELL;
        QTest::newRow("e4m3 min normal") << E4 << P << std::ldexp(1.0, -6) << std::ldexp(1.0, -6) << 0x08LL;
        QTest::newRow("e4m3 min subnormal") << E4 << P << std::ldexp(1.0, -9) << std::ldexp(1.0, -9) << 0x01LL;
        QTest::newRow("e4m3 half min subnormal ties to zero") << E4 << P << std::ldexp(1.0, -10) << 0.0 << 0x00LL;
        QTest::newRow("e4m3 above half min subnormal") << E4 << P << 1.5 * std::ldexp(1.0, -10) << std::ldexp(1.0, -9) << 0x01LL;
        QTest::newRow("e4m3 tie to even down") << E4 << P << 1.0625 << 1.0 << 0x38LL;
        QTest::newRow("e4m3 tie to even up") << E4 << P << 1.1875 << 1.25 << 0x3ALL;
        QTest::newRow("e4m3 464 ties to 448") << E4 << P << 464.0 << 448.0 << 0x7ELL;
        QTest::newRow("e4m3 overflow is NaN") << E4 << P << 464.5 << qQNaN() << -1LL;
        QTest::newRow("e4m3 inf is NaN") << E4 << P << inf << qQNaN() << -1LL;
        QTest::newRow("e4m3 saturates") << E4 << S << 1000.0 << 448.0 << 0x7ELL;
        QTest::newRow("e4m3 saturates inf") << E4 << S << -inf << -448.0 << 0xFELL;
        QTest::newRow("e4m3 NaN stays NaN") << E4 << S << qQNaN() << qQNaN() << -1LL;
        // E5M2: S.EEEEE.MM, bias 15
        QTest::newRow("e5m2 one") << E5 << P << 1.0 << 1.0 << 0x3CLL;
        QTest::newRow("e5m2 max") << E5 << P << 57344.0 << 57344.0 << 0x7BLL;
        QTest::newRow("e5m2 min normal") << E5 << P << std::ldexp(1.0, -14) << std::ldexp(1.0, -14) << 0x04LL;
        QTest::newRow("e5m2 min subnormal") << E5 << P << std::ldexp(1.0, -16) << std::ldexp(1.0, -16) << 0x01LL;
        QTest::newRow("e5m2 underflow tie") << E5 << P << std::ldexp(1.0, -17) << 0.0 << 0x00LL;
        QTest::newRow("e5m2 overflow tie to inf") << E5 << P << 61440.0 << inf << 0x7CLL;
        QTest::newRow("e5m2 saturates") << E5 << S << 61440.0 << 57344.0 << 0x7BLL;
        // FP16
        QTest::newRow("fp16 max") << H << P << 65504.0 << 65504.0 << 0x7BFFLL;
        QTest::newRow("fp16 below overflow tie") << H << P << 65519.0 << 65504.0 << 0x7BFFLL;
        QTest::newRow("fp16 overflow") << H << P << 65520.0 << inf << 0x7C00LL;
        QTest::newRow("fp16 saturate") << H << S << 1e6 << 65504.0 << 0x7BFFLL;
        QTest::newRow("fp16 min normal") << H << P << std::ldexp(1.0, -14) << std::ldexp(1.0, -14) << 0x0400LL;
        QTest::newRow("fp16 min subnormal") << H << P << std::ldexp(1.0, -24) << std::ldexp(1.0, -24) << 0x0001LL;
        QTest::newRow("fp16 half min subnormal") << H << P << std::ldexp(1.0, -25) << 0.0 << 0x0000LL;
        QTest::newRow("fp16 1.5 half min subnormal") << H << P << 1.5 * std::ldexp(1.0, -25) << std::ldexp(1.0, -24) << 0x0001LL;
        // BF16
        QTest::newRow("bf16 tie to even down") << B << P << 1.0 + std::ldexp(1.0, -8) << 1.0 << 0x3F80LL;
        QTest::newRow("bf16 tie to even up") << B << P << 1.0 + 3 * std::ldexp(1.0, -8) << 1.0 + std::ldexp(1.0, -6) << 0x3F82LL;
        QTest::newRow("bf16 max") << B << P << 3.3895313892515355e38 << 3.3895313892515355e38 << 0x7F7FLL;
        QTest::newRow("bf16 min subnormal") << B << P << std::ldexp(1.0, -133) << std::ldexp(1.0, -133) << 0x0001LL;
        QTest::newRow("bf16 half min subnormal") << B << P << std::ldexp(1.0, -134) << 0.0 << 0x0000LL;
    }
    void rounding()
    {
        QFETCH(NumberFormat, format);
        QFETCH(Overflow, overflow);
        QFETCH(double, input);
        QFETCH(double, expected);
        QFETCH(qlonglong, bits);
        const float got = round1(static_cast<float>(input), format, overflow);
        if (std::isnan(expected)) {
            QVERIFY2(std::isnan(got), qPrintable(QString::number(got)));
            return;
        }
        QCOMPARE(got, static_cast<float>(expected));
        QCOMPARE(bits_of(got, format), bits);
    }

    // Where our rounding and LibTorch's plain cast must agree: everything in range.
    void matchesLibTorchCastsInRange_data()
    {
        QTest::addColumn<NumberFormat>("format");
        QTest::newRow("bf16") << NumberFormat::BF16;
        QTest::newRow("fp16") << NumberFormat::FP16;
        QTest::newRow("e4m3") << NumberFormat::E4M3;
        QTest::newRow("e5m2") << NumberFormat::E5M2;
    }
    void matchesLibTorchCastsInRange()
    {
        QFETCH(NumberFormat, format);
        torch::manual_seed(0);
        const double max = format_info(format).max_finite;
        // Log-uniform magnitudes from deep subnormal to the max, both signs.
        auto lo = std::log2(format_info(format).min_subnormal) - 2, hi = std::log2(max) - 0.01;
        auto x = torch::exp2(torch::rand({200000}) * (hi - lo) + lo) * (torch::randint(0, 2, {200000}) * 2 - 1);
        const auto dtype = format == NumberFormat::BF16 ? torch::kBFloat16
                         : format == NumberFormat::FP16 ? torch::kHalf
                         : format == NumberFormat::E4M3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2;
        const auto ours = round_to_format(x, format, Overflow::Propagate);
        const auto torch_cast = x.to(dtype).to(torch::kFloat32);
        QVERIFY(torch::equal(ours, torch_cast));
        QVERIFY(ours.eq(0).sum().item<int64_t>() > 0); // the range reached underflow
    }

    // The fused CPU passes (one loop, vectorized) against LibTorch's casts, on every edge a
    // format has, at scales that move values across its ends, the threaded split included
    // (100,033 values): the same bits, with NaN where the casts give NaN (payloads may differ).
    void fusedCpuRoundingMatchesTensorOps_data()
    {
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<float>("scale");
        QTest::newRow("bf16") << NumberFormat::BF16 << 1.0f;
        QTest::newRow("e4m3") << NumberFormat::E4M3 << 1.0f;
        QTest::newRow("e4m3 scale 2^7") << NumberFormat::E4M3 << 128.0f;
        QTest::newRow("e4m3 scale 0.3") << NumberFormat::E4M3 << 0.3f;
        QTest::newRow("e5m2") << NumberFormat::E5M2 << 1.0f;
        QTest::newRow("e5m2 scale 2^-3") << NumberFormat::E5M2 << 0.125f;
        QTest::newRow("e5m2 scale 3e4") << NumberFormat::E5M2 << 3e4f;
    }
    void fusedCpuRoundingMatchesTensorOps()
    {
        QFETCH(NumberFormat, format);
        QFETCH(float, scale);
        const auto x = edge_values(format, scale);
        const auto same = [](const torch::Tensor& a, const torch::Tensor& b) {
            const auto nan = torch::isnan(a);
            QVERIFY(torch::equal(nan, torch::isnan(b)));
            const auto bits = [&](const torch::Tensor& t) { return t.masked_fill(nan, 0.0f).view(torch::kInt32); };
            const int64_t differ = bits(a).ne(bits(b)).sum().item<int64_t>();
            QVERIFY2(differ == 0, qPrintable(QString("%1 values differ").arg(differ)));
        };
        if (format == NumberFormat::BF16) {
            same(round_to_format(x, format, Overflow::Propagate),
                 round_to_format(x, format, Overflow::Propagate, RoundKernel::TensorOps));
            // Saturated, the fast path gave +-inf for what the tensor ops (and CUDA) clamp to
            // +-max (a read-only audit against ml_dtypes).
            const auto saturated = round_to_format(x, format, Overflow::Saturate);
            same(saturated, round_to_format(x, format, Overflow::Saturate, RoundKernel::TensorOps));
            const float max = std::bit_cast<float>(0x7f7f0000u); // 3.3895314e38
            const auto edges = round_to_format(torch::tensor({INFINITY, -INFINITY, 3.3961775e38f, FLT_MAX}), format,
                                               Overflow::Saturate);
            QVERIFY(torch::equal(edges, torch::tensor({max, -max, max, max})));
            return;
        }
        same(round_to_format(x, format, Overflow::Saturate), round_to_format(x, format, Overflow::Saturate, RoundKernel::TensorOps));
        const auto fused = scaled_round_saturated(x, scale, format);
        same(fused, scaled_round_saturated(x, scale, format, RoundKernel::TensorOps));
        // As the per-tensor recipes computed it before the fused pass: () tensor scale, reciprocal.
        const auto s = torch::tensor(scale);
        same(fused, round_to_format(x * s, format, Overflow::Saturate, RoundKernel::TensorOps) * s.reciprocal());
    }

    // BF16 rounding of layouts that are not contiguous, in one pass: the values and the layout
    // of LibTorch's casts (a dense view keeps its strides, others come back contiguous), and a
    // tensor that requires a gradient under no-grad (as in a custom Function's backward).
    void fusedBf16RoundingOfStridedLayouts_data()
    {
        QTest::addColumn<QString>("layout");
        QTest::newRow("dense, permuted") << "permuted";
        QTest::newRow("dense, transposed") << "transposed";
        QTest::newRow("rows of a column slice (attention's q)") << "qkv slice";
        QTest::newRow("rows, a stride in the middle dimension") << "every other";
        QTest::newRow("last dimension strided (tensor ops)") << "strided last";
        QTest::newRow("needs a gradient, under no-grad") << "requires grad";
    }
    void fusedBf16RoundingOfStridedLayouts()
    {
        QFETCH(QString, layout);
        auto base = edge_values(NumberFormat::BF16, 1.0f).narrow(0, 0, 2 * 3 * 64 * 96).reshape({2, 3 * 64, 96});
        // The edge cases again inside the slices below (columns 32-71 of row 5, a NaN at column 45).
        base[0][5].narrow(0, 32, 40).copy_(base.view(-1).narrow(0, 0, 40));
        base[0][7][45] = std::numeric_limits<float>::quiet_NaN();
        torch::Tensor x;
        if (layout == "permuted") x = base.permute({2, 0, 1});
        else if (layout == "transposed") x = base.transpose(1, 2);
        else if (layout == "qkv slice") x = base.narrow(2, 32, 32).view({2, 3, 64, 32}).transpose(1, 2);
        else if (layout == "every other") x = base.slice(1, 0, 192, 2);
        else if (layout == "strided last") x = base.slice(2, 0, 96, 3);
        else x = base.clone().requires_grad_(true);
        const torch::NoGradGuard no_grad;
        const auto ours = round_to_format(x, NumberFormat::BF16, Overflow::Propagate);
        const auto ops = round_to_format(x.detach(), NumberFormat::BF16, Overflow::Propagate, RoundKernel::TensorOps);
        QCOMPARE(ours.strides().vec(), ops.strides().vec());
        const auto nan = torch::isnan(ops);
        QVERIFY(torch::equal(torch::isnan(ours), nan));
        QVERIFY(nan.any().item<bool>());
        const auto bits = [&](const torch::Tensor& t) { return t.masked_fill(nan, 0.0f).contiguous().view(torch::kInt32); };
        QVERIFY(torch::equal(bits(ours), bits(ops)));
    }

    // A GEMM's fresh output is rounded where it lies; a tensor that another one shares is not
    // touched. The values are round_to_format's either way.
    void resultRoundingIsInPlaceOnlyWhenUnshared()
    {
        const auto x = edge_values(NumberFormat::BF16, 1.0f);
        const auto want = round_to_format(x, NumberFormat::BF16, Overflow::Propagate);
        const auto same = [&](const torch::Tensor& t) {
            return torch::equal(t.masked_fill(torch::isnan(want), 0.0f).view(torch::kInt32),
                                want.masked_fill(torch::isnan(want), 0.0f).view(torch::kInt32)) &&
                   torch::equal(torch::isnan(t), torch::isnan(want));
        };
        auto fresh = x.clone();
        const void* where = fresh.data_ptr();
        const auto rounded = round_result_to_format(std::move(fresh), NumberFormat::BF16);
        QCOMPARE(rounded.data_ptr(), where);
        QVERIFY(same(rounded));
        const auto kept = x.clone();
        auto view = kept.view({-1}); // shares kept's storage
        const auto copy = round_result_to_format(std::move(view), NumberFormat::BF16);
        QVERIFY(copy.data_ptr() != kept.data_ptr());
        QVERIFY(same(copy));
        QVERIFY(torch::equal(kept.masked_fill(torch::isnan(x), 0.0f), x.masked_fill(torch::isnan(x), 0.0f)));
    }

    void fusedCpuAmaxSkipsNan()
    {
        const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
        for (const auto& [values, expected] : std::vector<std::pair<std::vector<float>, float>>{
                 {{1.0f, -3.0f, nan, 2.0f}, 3.0f},
                 {{nan, nan}, 0.0f},
                 {{-0.0f}, 0.0f},
                 {{1.0f, -inf, nan}, inf},
                 {{std::ldexp(1.0f, -149)}, std::ldexp(1.0f, -149)}}) {
            const auto x = torch::tensor(values);
            QCOMPARE(amax_ignoring_nan(x).item<float>(), expected);
            QCOMPARE(amax_ignoring_nan(x, RoundKernel::TensorOps).item<float>(), expected);
        }
        QCOMPARE(amax_ignoring_nan(torch::empty({0})).item<float>(), 0.0f);
        // Threaded: the largest value in the last task's range.
        auto big = torch::rand({300000});
        big[299999] = -7.5f;
        big[5] = nan;
        QCOMPARE(amax_ignoring_nan(big).item<float>(), 7.5f);
        const auto x = edge_values(NumberFormat::E4M3, 1.0f);
        QCOMPARE(amax_ignoring_nan(x).item<float>(), amax_ignoring_nan(x, RoundKernel::TensorOps).item<float>());
    }

    // LibTorch 2.13 saturates float->E4M3 casts (older releases gave NaN); our Propagate mode
    // is explicit so emulation does not depend on the LibTorch version.
    void libTorchE4m3CastBehaviourIsKnown()
    {
        const auto cast = torch::tensor({500.0f}).to(torch::kFloat8_e4m3fn).to(torch::kFloat32).item<float>();
        QVERIFY2(cast == 448.0f || std::isnan(cast), qPrintable(QString::number(cast)));
        QVERIFY(std::isnan(round1(500.0f, NumberFormat::E4M3, Overflow::Propagate)));
        QCOMPARE(round1(500.0f, NumberFormat::E4M3, Overflow::Saturate), 448.0f);
    }

    void tf32RoundsTiesAwayFromZero_data()
    {
        QTest::addColumn<double>("input");
        QTest::addColumn<double>("expected");
        const double ulp = std::ldexp(1.0, -10);
        QTest::newRow("exact") << 1.0 + ulp << 1.0 + ulp;
        QTest::newRow("below half") << 1.0 + std::ldexp(1.0, -12) << 1.0;
        QTest::newRow("tie away (even would go down)") << 1.0 + ulp / 2 << 1.0 + ulp;
        QTest::newRow("tie away (odd)") << 1.0 + 1.5 * ulp << 1.0 + 2 * ulp;
        QTest::newRow("negative tie") << -(1.0 + ulp / 2) << -(1.0 + ulp);
        QTest::newRow("carry into exponent") << 2.0 - ulp / 2 << 2.0;
    }
    void tf32RoundsTiesAwayFromZero()
    {
        QFETCH(double, input);
        QFETCH(double, expected);
        QCOMPARE(round1(static_cast<float>(input), NumberFormat::TF32), static_cast<float>(expected));
    }

    void tf32KeepsSpecials()
    {
        auto x = torch::tensor({std::numeric_limits<float>::infinity(), -0.0f, std::numeric_limits<float>::quiet_NaN()});
        auto r = round_to_tf32(x);
        QVERIFY(std::isinf(r[0].item<float>()));
        QVERIFY(std::signbit(r[1].item<float>()));
        QVERIFY(std::isnan(r[2].item<float>()));
    }

    void gemmOutputFormats()
    {
        QCOMPARE(gemm_output_format(NumberFormat::E4M3), NumberFormat::BF16);
        QCOMPARE(gemm_output_format(NumberFormat::FP16), NumberFormat::FP16);
        QCOMPARE(gemm_output_format(NumberFormat::TF32), NumberFormat::FP32);
    }

    // --- FP8 scaling -------------------------------------------------------------------

    void delayedScalingSequence_data()
    {
        QTest::addColumn<bool>("useMax");
        QTest::addColumn<int>("margin");
        QTest::addColumn<QList<double>>("expected"); // scale after each record
        // amax stream 2, 4, 1, 0.5, 0.25, 0, 8, NaN with a history of 4
        QTest::newRow("max") << true << 0 << QList<double>{224, 112, 112, 112, 112, 448, 56, 56};
        QTest::newRow("most_recent") << false << 0 << QList<double>{224, 112, 448, 896, 1792, 1792, 56, 56};
        QTest::newRow("max, margin 1") << true << 1 << QList<double>{112, 56, 56, 56, 56, 224, 28, 28};
    }
    void delayedScalingSequence()
    {
        QFETCH(bool, useMax);
        QFETCH(int, margin);
        QFETCH(QList<double>, expected);
        DelayedScaling s(4);
        QCOMPARE(s.scale(), 1.0f); // TE starts at 1
        const float stream[] = {2, 4, 1, 0.5f, 0.25f, 0, 8, std::numeric_limits<float>::quiet_NaN()};
        for (int i = 0; i < 8; ++i) {
            s.record(stream[i], 448.0, useMax, margin);
            QVERIFY2(s.scale() == static_cast<float>(expected[i]),
                     qPrintable(QString("record %1: scale %2, expected %3").arg(i).arg(s.scale()).arg(expected[i])));
        }
        QCOMPARE(s.history().size(), size_t(4));
        s.reset();
        QCOMPARE(s.scale(), 1.0f);
        QCOMPARE(s.history()[0], 0.0f);
    }

    // A loss scale that changed by `ratio` (test_precision: lossScalingTurnedOnRescalesGradientAmaxes):
    // the history as if it had measured the scaled gradients, the scale as if made from it; a
    // state that never recorded stays at 1, as a fresh one.
    void delayedScalingRescales()
    {
        DelayedScaling s(3);
        s.rescale(65536.0f);
        QCOMPARE(s.scale(), 1.0f);
        QCOMPARE(s.history(), (std::vector<float>{0, 0, 0}));
        s.record(2.0f, 448.0, true, 0);
        s.record(0.5f, 448.0, true, 0);
        QCOMPARE(s.scale(), 224.0f);
        s.rescale(65536.0f);
        QCOMPARE(s.history(), (std::vector<float>{32768, 131072, 0}));
        QCOMPARE(s.scale(), 224.0f / 65536.0f);
        s.record(65536.0f, 448.0, true, 0); // the scaled run goes on from there
        QCOMPARE(s.scale(), 448.0f / 131072.0f);
        s.rescale(0.25f);
        QCOMPARE(s.history(), (std::vector<float>{16384, 8192, 32768}));
        QCOMPARE(s.scale(), 448.0f / 32768.0f);
        // A ratio from a loss scale that collapsed to 0 (or past float's range) changes nothing.
        for (float bad : {std::numeric_limits<float>::infinity(), 0.0f, std::numeric_limits<float>::quiet_NaN()}) {
            s.rescale(bad);
            QCOMPARE(s.history(), (std::vector<float>{16384, 8192, 32768}));
            QCOMPARE(s.scale(), 448.0f / 32768.0f);
        }
        // A scale clamped at FLT_MAX (a tiny amax) stays finite when scaling turns off: an Inf
        // scale casts every zero gradient to NaN.
        DelayedScaling tiny(2);
        tiny.record(1e-38f, 57344.0, true, 0);
        QCOMPARE(tiny.scale(), std::numeric_limits<float>::max());
        tiny.rescale(1.0f / 65536.0f);
        QCOMPARE(tiny.scale(), std::numeric_limits<float>::max());
        // A scale some amax made, whose window holds zeros now, follows; one that only NaN ever
        // reached (never made) stays 1.
        DelayedScaling old(2);
        old.restore({0.0f, 0.0f}, 224.0f);
        old.rescale(2.0f);
        QCOMPARE(old.scale(), 112.0f);
        DelayedScaling nan_only(2);
        nan_only.record(std::numeric_limits<float>::quiet_NaN(), 448.0, true, 0);
        nan_only.rescale(65536.0f);
        QCOMPARE(nan_only.scale(), 1.0f);
    }

    void delayedQuantisationUsesThePreviousScale()
    {
        Fp8Recipe r; // delayed, max, margin 0, saturate
        DelayedScaling state(16);
        auto x = torch::tensor({1.0f, -2.0f, 0.5f});
        // Step 1: scale 1 (nothing recorded yet): plain E4M3 values.
        auto q1 = quantize_fp8(x, NumberFormat::E4M3, r, -1, &state);
        QCOMPARE(q1.scale, 1.0f);
        QCOMPARE(q1.amax, 2.0f);
        QVERIFY(torch::equal(q1.values, x));
        // Step 2: scale from step 1's amax: 448 / 2 = 224. 3.0 * 224 = 672 saturates to 448.
        auto q2 = quantize_fp8(torch::tensor({3.0f, 1.0f}), NumberFormat::E4M3, r, -1, &state);
        QCOMPARE(q2.scale, 224.0f);
        QCOMPARE(q2.values[0].item<float>(), 448.0f * (1.0f / 224.0f));
        QCOMPARE(q2.values[1].item<float>(), 1.0f);
        QCOMPARE(state.scale(), 448.0f / 3.0f);
    }

    void currentScaling()
    {
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Current;
        auto q = quantize_fp8(torch::tensor({3.0f, 1e-3f}), NumberFormat::E4M3, r, -1, nullptr);
        const float scale = 448.0f / 3.0f;
        QCOMPARE(q.scale, scale);
        // 1e-3 * 149.33 = 0.1493 -> E4M3 step 2^-6 in [0.125, 0.25): 0.15625
        QCOMPARE(q.values[1].item<float>(), 0.15625f * (1.0f / scale));
        QCOMPARE(q.values[0].item<float>(), 448.0f * (1.0f / scale));
    }

    void rowwiseScalingUsesPowersOfTwo()
    {
        Fp8Recipe r;
        r.scaling = Fp8Scaling::PerRow;
        auto x = torch::tensor({1.0f, 2.0f, 100.0f, 0.5f}).view({2, 2});
        auto q = quantize_fp8(x, NumberFormat::E4M3, r, /*contraction_dim=*/1, nullptr).values;
        // Row 0: scale 2^floor(log2(224)) = 128, exact. Row 1: scale 4; 400 is a tie between
        // 384 and 416 and goes to even (384), so 100 -> 96.
        QCOMPARE(q[0][0].item<float>(), 1.0f);
        QCOMPARE(q[0][1].item<float>(), 2.0f);
        QCOMPARE(q[1][0].item<float>(), 96.0f);
        QCOMPARE(q[1][1].item<float>(), 0.5f);
        // Contracting over dim 0 groups by column instead: column 0 has amax 100.
        auto qc = quantize_fp8(x, NumberFormat::E4M3, r, 0, nullptr).values;
        QCOMPARE(qc[1][0].item<float>(), 96.0f);
        QCOMPARE(qc[0][1].item<float>(), 2.0f); // column 1: amax 2, scale 128
    }

    // The per-row scales are torchao's amax_to_scale (float8_utils.py): fp8_max / clamp(amax,
    // min=1e-12) in FP64, to FP32, floored to a power of two; a row holding NaN or Inf comes out
    // NaN, as torchao's amax propagates them. Expected bits computed with torch 2.13 from
    // torchao's formula.
    void rowwiseScaleFollowsTorchao_data()
    {
        QTest::addColumn<bool>("powerOfTwo");
        QTest::addColumn<uint32_t>("tinyRowScale"); // rows 0, 1 and 4: amax below 1e-12, or 0
        QTest::addColumn<uint32_t>("row5Scale");
        QTest::newRow("power of two") << true << 0x57800000u << 0x43000000u;  // 2^48; 448/3 -> 128
        QTest::newRow("fp32 scales") << false << 0x57cbba10u << 0x43155555u; // 448/1e-12; 448/3
    }
    void rowwiseScaleFollowsTorchao()
    {
        QFETCH(bool, powerOfTwo);
        QFETCH(uint32_t, tinyRowScale);
        QFETCH(uint32_t, row5Scale);
        Fp8Recipe r;
        r.scaling = Fp8Scaling::PerRow;
        r.rowwise_power_of_two = powerOfTwo;
        const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
        const auto x = torch::tensor({1e-14f, 1e-17f, 3e-18f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 3.0f, nan, 1e-3f, 0.5f,
                                      3.0f, inf, 1e-3f, 0.5f, 1e-13f, 3e-14f, 0.0f, 1e-15f, 3.0f, -1.0f, 1e-3f, 0.5f})
                           .view({6, 4});
        const auto scale = rowwise_scale(x, NumberFormat::E4M3, r, 1);
        QCOMPARE(scale.sizes().vec(), (std::vector<int64_t>{6, 1}));
        for (int row : {0, 1, 4}) QCOMPARE(std::bit_cast<uint32_t>(scale[row][0].item<float>()), tinyRowScale);
        QVERIFY(std::isnan(scale[2][0].item<float>()) && std::isnan(scale[3][0].item<float>()));
        QCOMPARE(std::bit_cast<uint32_t>(scale[5][0].item<float>()), row5Scale);
        const auto q = quantize_fp8(x, NumberFormat::E4M3, r, 1, nullptr).values;
        QVERIFY(torch::isnan(q.narrow(0, 2, 2)).all().item<bool>()); // the NaN row and the Inf row, whole
        QVERIFY(same_bits(q[1], torch::zeros({4})));
        if (powerOfTwo) { // torchao: [2.75 * 2^-48, 2^-9 * 2^-48 (an E4M3 subnormal), 0, 0]
            QCOMPARE(std::bit_cast<uint32_t>(q[0][0].item<float>()), 0x28300000u);
            QCOMPARE(std::bit_cast<uint32_t>(q[0][1].item<float>()), 0x23000000u);
            QCOMPARE(q[0][2].item<float>(), 0.0f);
        }
    }

    void mxfp8Blocks_data()
    {
        QTest::addColumn<bool>("roundUp");
        QTest::addColumn<double>("expectedMax");
        // Block amax 1.9: floor rule gives 2^(0-8); 1.9 * 256 = 486 saturates to 448 -> 1.75.
        // Rounding the exponent up gives 2^-7: 1.9 * 128 = 243.2 -> 240 -> 1.875.
        QTest::newRow("OCP floor") << false << 1.75;
        QTest::newRow("round up") << true << 1.875;
    }
    void mxfp8Blocks()
    {
        QFETCH(bool, roundUp);
        QFETCH(double, expectedMax);
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Block32;
        r.mx_round_scale_up = roundUp;
        // Two rows of 40 values: blocks [0, 32) and [32, 40) (padded) per row.
        auto x = torch::full({2, 40}, 0.3f);
        x[0][0] = 1.9f;
        x[0][35] = 1e-3f; // alone in its block with 0.3s: its own scale
        auto q = quantize_fp8(x, NumberFormat::E4M3, r, 1, nullptr).values;
        QCOMPARE(q.sizes(), x.sizes());
        QCOMPARE(q[0][0].item<float>(), static_cast<float>(expectedMax));
        if (!roundUp) {
            // First block exponent -8: 0.3 * 256 = 76.8 -> 80 -> 0.3125.
            QCOMPARE(q[0][1].item<float>(), 0.3125f);
            // Second block amax 0.3: floor(log2 0.3) - 8 = -10: 0.3 * 1024 = 307.2 -> 320 -> 0.3125;
            // 1e-3 * 1024 = 1.024 -> 1.0 -> 2^-10.
            QCOMPARE(q[0][35].item<float>(), std::ldexp(1.0f, -10));
        }
        QCOMPARE(q[1][0].item<float>(), q[1][39].item<float>()); // rows are independent
    }

    void outliersBypassFp8()
    {
        auto x = torch::full({100}, 0.01f);
        x[99] = 100.0f;
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Current;
        const auto plain = quantize_fp8(x, NumberFormat::E4M3, r, -1, nullptr).values;
        r.outlier_rms_multiple = 3.0;
        const auto split = quantize_fp8(x, NumberFormat::E4M3, r, -1, nullptr).values;
        // Without: the 100 sets the scale and 0.01 lands at 0.0096 (4% off).
        QVERIFY(std::abs(plain[0].item<float>() - 0.01f) > 3e-4f);
        // With: 0.01 gets its own scale (exact), 100 travels in BF16 (exact).
        QVERIFY(std::abs(split[0].item<float>() - 0.01f) < 1e-8f);
        QCOMPARE(split[99].item<float>(), 100.0f);
    }

    // The split picks outliers by magnitude, |x| > k rms: a large negative value is as much an
    // outlier as a positive one and must not set the FP8 scale. Outliers travel in BF16, not
    // FP32: 100.1 comes back as BF16's 100.0 (8 significant bits: steps of 0.5 in [64, 128)).
    // What an exception while a checkpoint loads means, for resume and export alike: running out
    // of memory is the machine's, not the file's (taken for damage, an older checkpoint would be
    // loaded, and the good one called damaged); anything else is the file's.
    void outOfMemoryWhileLoadingIsNoDamage()
    {
        const auto meaning = [](const std::function<void()>& fail) -> std::string {
            try {
                try {
                    fail();
                } catch (const std::exception&) {
                    rethrow_checkpoint_load_failure("c.pt");
                }
            } catch (const mantissa::ConfigError& e) {
                return std::string("damage: ") + e.what();
            } catch (const std::exception& e) {
                return std::string("other: ") + e.what();
            }
            return "returned";
        };
        QCOMPARE(meaning([] { throw std::bad_alloc(); }),
                 std::string("other: checkpoint 'c.pt' could not be loaded: out of memory"));
        QCOMPARE(meaning([] { throw std::runtime_error("[enforce fail at alloc_cpu.cpp:118] DefaultCPUAllocator: "
                                                       "can't allocate memory: you tried to allocate 8 bytes"); }),
                 std::string("other: checkpoint 'c.pt' could not be loaded: out of memory: [enforce fail at "
                             "alloc_cpu.cpp:118] DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"));
        QCOMPARE(meaning([] { throw std::runtime_error("PytorchStreamReader failed reading zip archive"); }),
                 std::string("damage: checkpoint 'c.pt' cannot be read: PytorchStreamReader failed reading zip archive"));
        QCOMPARE(meaning([] { throw mantissa::ConfigError("checkpoint 'c.pt' cannot be read: no step"); }),
                 std::string("damage: checkpoint 'c.pt' cannot be read: no step"));
    }

    // A newer Mantissa's checkpoint is refused as not this build's (CheckpointMismatch), not
    // taken for damage: a resume fell back past it, dropped the steps after the older one and
    // wrote over the newer file when it trained that step again.
    void aCheckpointOfAnotherFormatVersionIsRefusedNotDamaged()
    {
        QTemporaryDir dir;
        const auto header_of = [&](int64_t version) {
            const std::string path = dir.filePath(QString("v%1.pt").arg(version)).toStdString();
            torch::serialize::OutputArchive out;
            out.write("format_version", torch::tensor(version));
            out.save_to(path);
            torch::serialize::InputArchive in;
            open_checkpoint_archive(path, in);
            return read_checkpoint_header(path, in);
        };
        QVERIFY(header_of(mantissa::kCheckpointFormatVersion).run_uuid.empty());
        const std::string path = dir.filePath("v2.pt").toStdString();
        QVERIFY_THROWS_EXCEPTION(mantissa::CheckpointMismatch, header_of(2));
        try {
            header_of(2);
        } catch (const mantissa::CheckpointMismatch& e) {
            QCOMPARE(std::string(e.what()), "checkpoint '" + path + "' is format version 2, written by a newer "
                                            "Mantissa; this build reads version 1; nothing was changed");
        }
    }

    void outlierSplitIsByMagnitudeAndRejoinsInBf16()
    {
        auto x = torch::full({100}, 0.01f);
        x[98] = -100.0f;
        x[99] = 100.1f;
        // rms = sqrt((98 * 1e-4 + 100^2 + 100.1^2) / 100) = 14.15: 3 rms = 42.4.
        // Compared as doubles: QCOMPARE is fuzzy on floats (1e-5), and far finer than a float's ulp on doubles.
        const OutlierSplit split = split_outliers(x, 3.0);
        QCOMPARE(split.outliers[98].item<double>(), double(-100.0f));
        QCOMPARE(split.outliers[99].item<double>(), double(100.1f));
        QCOMPARE(split.outliers[0].item<double>(), double(0.0f));
        QCOMPARE(split.inliers[98].item<double>(), double(0.0f));
        QCOMPARE(split.inliers[99].item<double>(), double(0.0f));
        QCOMPARE(split.inliers[0].item<double>(), double(0.01f));
        const auto rejoined = split.rejoin(split.inliers);
        QCOMPARE(rejoined[98].item<double>(), double(-100.0f));
        QCOMPARE(rejoined[99].item<double>(), double(100.0f));
        QCOMPARE(rejoined[0].item<double>(), double(0.01f));
        // Through the cast: the inliers get a scale of their own (0.01 exact in E4M3 under it),
        // the outliers come back in BF16.
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Current;
        r.outlier_rms_multiple = 3.0;
        const auto q = quantize_fp8(x, NumberFormat::E4M3, r, -1, nullptr);
        QCOMPARE(double(q.amax), double(0.01f)); // of the inliers only: -100 is not among them
        QCOMPARE(q.values[98].item<double>(), double(-100.0f));
        QCOMPARE(q.values[99].item<double>(), double(100.0f));
        QVERIFY(std::abs(q.values[0].item<float>() - 0.01f) < 1e-8f);
    }


    // --- FP8 scaling at the edges (docs/NUMERICS.md) -------------------------------------

    void scaleFromAmaxEdges()
    {
        constexpr float kMax = std::numeric_limits<float>::max();
        const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
        // Nothing to measure: the previous scale.
        for (float amax : {0.0f, -0.0f, -1.0f, nan, inf, -inf}) QCOMPARE(scale_from_amax(amax, 448.0, 0, 7.0f), 7.0f);
        QCOMPARE(scale_from_amax(0.0f, 448.0, 0, inf), kMax); // a scale is never inf
        // Tiny amax: 448 / amax overflows float -> FLT_MAX (TE), also for the smallest subnormal.
        QCOMPARE(scale_from_amax(1e-37f, 448.0, 0, 1.0f), kMax);
        QCOMPARE(scale_from_amax(std::numeric_limits<float>::denorm_min(), 57344.0, 0, 1.0f), kMax);
        // The edge: 448 / FLT_MAX = 1.3166e-36 (a float: 448 is 1.75 * 2^8). At it the scale
        // is FLT_MAX exactly; one ulp below, the quotient overflows and is clamped to FLT_MAX.
        const float edge = 448.0f / kMax;
        QCOMPARE(scale_from_amax(std::nextafter(edge, 1.0f), 448.0, 0, 1.0f), 448.0f / std::nextafter(edge, 1.0f));
        QVERIFY(std::isfinite(448.0f / std::nextafter(edge, 1.0f)));
        QVERIFY(std::isinf(448.0f / std::nextafter(edge, 0.0f)));
        // The other end: FLT_MAX is finite, so it is measured (448 / FLT_MAX, a normal float).
        QCOMPARE(scale_from_amax(kMax, 448.0, 0, 7.0f), 448.0f / kMax);
        QCOMPARE(scale_from_amax(kMax, 448.0, 2, 7.0f), 112.0f / kMax); // margin 2: 448 / 2^2
        // The window's reduction (shared with the CUDA kernel): a NaN on either side gives the
        // other side, as fmaxf; two NaNs stay NaN; an inf wins.
        QCOMPARE(scale_rule::fmax_skipping_nan(nan, 2.0f), 2.0f);
        QCOMPARE(scale_rule::fmax_skipping_nan(2.0f, nan), 2.0f);
        QVERIFY(std::isnan(scale_rule::fmax_skipping_nan(nan, nan)));
        QCOMPARE(scale_rule::fmax_skipping_nan(inf, 3.0f), inf);
        QCOMPARE(scale_rule::fmax_skipping_nan(-0.0f, 1e-45f), 1e-45f);
        QCOMPARE(scale_from_amax(std::nextafter(edge, 0.0f), 448.0, 0, 1.0f), kMax);
        // Margin halves the scale, in float: 448 / 2^16 / 3.
        QCOMPARE(scale_from_amax(3.0f, 448.0, 16, 1.0f), (448.0f / 65536.0f) / 3.0f);
        // Ordinary amaxes: bit-identical to the double formula rounded once (the old code), so
        // no recorded run changes.
        torch::manual_seed(15);
        const auto amaxes = torch::exp(torch::randn({20000}) * 20.0); // e^±60 and more
        const auto* a = amaxes.data_ptr<float>();
        int compared = 0;
        for (int64_t i = 0; i < amaxes.numel(); ++i) {
            for (int margin : {0, 1, 3}) {
                for (double fp8_max : {448.0, 57344.0}) {
                    const double reference = (fp8_max / static_cast<double>(a[i])) / std::ldexp(1.0, margin);
                    if (!(a[i] > 0) || reference > kMax || reference < std::numeric_limits<float>::min()) continue;
                    QCOMPARE(scale_from_amax(a[i], fp8_max, margin, 1.0f), static_cast<float>(reference));
                    ++compared;
                }
            }
        }
        QVERIFY(compared > 100000);
    }

    // A tensor of tiny values: finite, zeros stay zero (before: scale inf, zeros -> NaN).
    void tinyAmaxQuantisesToFiniteValues()
    {
        for (auto scaling : {Fp8Scaling::Current, Fp8Scaling::Delayed, Fp8Scaling::PerRow}) {
            Fp8Recipe r;
            r.scaling = scaling;
            DelayedScaling state(4);
            const auto x = torch::tensor({1e-37f, 0.0f, -5e-38f, 1e-38f}).view({1, 4});
            quantize_fp8(x, NumberFormat::E4M3, r, 1, &state); // delayed: records the tiny amax
            const auto q = quantize_fp8(x, NumberFormat::E4M3, r, 1, &state);
            QVERIFY2(torch::isfinite(q.values).all().item<bool>(), fp8_scaling_name(scaling));
            QCOMPARE(q.values[0][1].item<float>(), 0.0f);
            if (scaling == Fp8Scaling::PerRow) { // torchao's amax floor 1e-12: 2^48, and they flush to zero
                QVERIFY(same_bits(q.values, torch::tensor({0.0f, 0.0f, -0.0f, 0.0f}).view({1, 4})));
                continue;
            }
            QVERIFY(q.values[0][0].item<float>() > 0.0f && q.values[0][2].item<float>() < 0.0f);
            QCOMPARE(q.scale, std::numeric_limits<float>::max());
        }
    }

    // Current scaling skips NaN in the amax, as TE's amax kernel: the other elements are
    // quantised exactly as without the NaN, the NaN stays NaN.
    void currentScalingSkipsNan()
    {
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Current;
        const float nan = std::numeric_limits<float>::quiet_NaN();
        const auto with_nan = quantize_fp8(torch::tensor({3.0f, nan, 1e-3f}), NumberFormat::E4M3, r, -1, nullptr);
        const auto without = quantize_fp8(torch::tensor({3.0f, 1e-3f}), NumberFormat::E4M3, r, -1, nullptr);
        QCOMPARE(with_nan.amax, 3.0f);
        QCOMPARE(with_nan.scale, 448.0f / 3.0f);
        QCOMPARE(with_nan.values[0].item<float>(), without.values[0].item<float>());
        QCOMPARE(with_nan.values[2].item<float>(), without.values[1].item<float>());
        QVERIFY(std::isnan(with_nan.values[1].item<float>()));
        // All NaN: amax 0, scale 1 (nothing measured).
        const auto all_nan = quantize_fp8(torch::full({4}, nan), NumberFormat::E4M3, r, -1, nullptr);
        QCOMPARE(all_nan.amax, 0.0f);
        QCOMPARE(all_nan.scale, 1.0f);
        // Per row follows torchao instead: the NaN takes its whole row (rowwiseScaleFollowsTorchao).
        Fp8Recipe rows;
        rows.scaling = Fp8Scaling::PerRow;
        rows.rowwise_power_of_two = false;
        const auto q = quantize_fp8(torch::tensor({3.0f, nan, 1e-3f}).view({1, 3}), NumberFormat::E4M3, rows, 1, nullptr);
        QVERIFY(torch::isnan(q.values).all().item<bool>());
    }

    // Delayed scaling: a NaN amax is stored in the history but skipped by the max, so it does
    // not freeze the scale; an inf amax does, for exactly the history window (as TE's fmaxf);
    // zero amaxes enter the history (TE's unfused/Python path) and change nothing else.
    void delayedScalingNanInfAndZeroAmaxes()
    {
        const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
        DelayedScaling s(4);
        s.record(2.0f, 448.0, true, 0);
        QCOMPARE(s.scale(), 224.0f);
        s.record(nan, 448.0, true, 0);
        QVERIFY(std::isnan(s.history()[0]));
        QCOMPARE(s.scale(), 224.0f); // max over {NaN, 2}: 2
        s.record(1.0f, 448.0, true, 0);
        s.record(1.0f, 448.0, true, 0);
        QCOMPARE(s.scale(), 224.0f); // 2 is still in the window of 4
        s.record(1.0f, 448.0, true, 0);
        QCOMPARE(s.scale(), 448.0f); // 2 left the window; the NaN left before it changed anything
        // most_recent: a NaN keeps the previous scale for that one step only.
        DelayedScaling recent(4);
        recent.record(2.0f, 448.0, false, 0);
        recent.record(nan, 448.0, false, 0);
        QCOMPARE(recent.scale(), 224.0f);
        recent.record(4.0f, 448.0, false, 0);
        QCOMPARE(recent.scale(), 112.0f);
        // inf: the scale is kept while the inf is in the window (4 records), then recomputed.
        DelayedScaling frozen(4);
        frozen.record(2.0f, 448.0, true, 0);
        frozen.record(inf, 448.0, true, 0);
        QCOMPARE(frozen.scale(), 224.0f);
        for (int i = 0; i < 3; ++i) {
            frozen.record(1.0f, 448.0, true, 0);
            QCOMPARE(frozen.scale(), 224.0f); // the inf is still among the last 4 amaxes
        }
        frozen.record(1.0f, 448.0, true, 0);
        QCOMPARE(frozen.scale(), 448.0f); // the inf rolled out on the 4th record after it
        // Zeros: entered at slot 0, the rest shifts; the max ignores them; all zero -> kept.
        DelayedScaling zeros(3);
        zeros.record(4.0f, 448.0, true, 0);
        zeros.record(0.0f, 448.0, true, 0);
        QCOMPARE(zeros.history(), (std::vector<float>{0.0f, 4.0f, 0.0f}));
        QCOMPARE(zeros.scale(), 112.0f);
        zeros.record(0.0f, 448.0, true, 0);
        zeros.record(0.0f, 448.0, true, 0); // 4 has left: all zero
        QCOMPARE(zeros.history(), (std::vector<float>{0.0f, 0.0f, 0.0f}));
        QCOMPARE(zeros.scale(), 112.0f);
        // A tiny amax through the history: FLT_MAX, not inf.
        zeros.record(1e-38f, 448.0, true, 0);
        QCOMPARE(zeros.scale(), std::numeric_limits<float>::max());
    }

    // MXFP8's shared exponent comes from the bits: for every 2^k - j ulps (j = 1..4) across
    // the float range, E4M3 and E5M2, floor and round-up rules, against OCP MX v1.0 computed
    // here independently with frexp in double.
    void mxfp8ExponentFromBits_data()
    {
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<bool>("roundUp");
        QTest::newRow("e4m3 floor") << NumberFormat::E4M3 << false;
        QTest::newRow("e5m2 floor") << NumberFormat::E5M2 << false;
        QTest::newRow("e4m3 up") << NumberFormat::E4M3 << true;
        QTest::newRow("e5m2 up") << NumberFormat::E5M2 << true;
    }
    void mxfp8ExponentFromBits()
    {
        QFETCH(NumberFormat, format);
        QFETCH(bool, roundUp);
        const int emax = format == NumberFormat::E4M3 ? 8 : 15;
        const double max_finite = format == NumberFormat::E4M3 ? 448.0 : 57344.0;
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Block32;
        r.mx_round_scale_up = roundUp;
        std::vector<float> amaxes;
        for (int k = -149; k <= 128; ++k) {
            float v = std::ldexp(1.0f, std::min(k, 127)) * (k == 128 ? 2.0f : 1.0f); // 2^128 = inf
            for (int j = 1; j <= 4; ++j) {
                v = std::nextafter(v, 0.0f);
                if (v > 0) amaxes.push_back(v);
            }
            if (k <= 127) amaxes.push_back(std::ldexp(1.0f, k)); // the power itself
        }
        // One block per amax: the amax first, then smaller values that share its scale.
        const auto n = static_cast<int64_t>(amaxes.size());
        auto x = torch::zeros({n, 32});
        for (int64_t i = 0; i < n; ++i) {
            x[i][0] = amaxes[i];
            x[i][1] = amaxes[i] * 0.3f;
            x[i][2] = -amaxes[i] * 0.7f;
        }
        const auto q = quantize_fp8(x, format, r, 1, nullptr).values;
        const auto floor_bits = floor_log2_from_bits(torch::tensor(amaxes));
        int checked = 0;
        for (int64_t i = 0; i < n; ++i) {
            int e2 = 0;
            std::frexp(static_cast<double>(amaxes[i]), &e2); // amax = m * 2^e2, m in [0.5, 1)
            QCOMPARE(floor_bits[i].item<int>(), e2 - 1);
            int shared = e2 - 1 - emax; // OCP: floor(log2 amax) - emax_elem
            if (roundUp && amaxes[i] > max_finite * std::ldexp(1.0, shared)) ++shared;
            shared = std::clamp(shared, -127, 127);
            const double block_scale = std::ldexp(1.0, shared);
            for (int c = 0; c < 3; ++c) {
                const float v = x[i][c].item<float>();
                const double scaled = std::clamp(static_cast<double>(v) / block_scale, -max_finite, max_finite);
                const float expected = static_cast<float>(round1(static_cast<float>(scaled), format) * block_scale);
                const float got = q[i][c].item<float>();
                QVERIFY2(got == expected, qPrintable(QString("amax %1 (%2), element %3: got %4, expected %5")
                                                         .arg(amaxes[i], 0, 'g', 9)
                                                         .arg(QString::asprintf("%a", static_cast<double>(amaxes[i])))
                                                         .arg(c)
                                                         .arg(got, 0, 'g', 9)
                                                         .arg(expected, 0, 'g', 9)));
                ++checked;
            }
        }
        QCOMPARE(checked, static_cast<int>(3 * n));
        // The case: 127.99999237 (2^7 - 1 ulp) is in binade 6; E4M3 saturates it to 112.
        if (format == NumberFormat::E4M3 && !roundUp) {
            auto block = torch::zeros({32});
            block[0] = std::nextafter(128.0f, 0.0f);
            QCOMPARE(quantize_fp8(block, format, r, 0, nullptr).values[0].item<float>(), 112.0f);
        }
    }

    // OCP MX v1.0: a block holding Inf or NaN gets a NaN scale, so all of it is NaN; the
    // other blocks of the tensor are untouched.
    void mxfp8NonFiniteBlocks()
    {
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Block32;
        for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
            auto x = torch::full({96}, 0.5f);
            x[40] = bad;
            const auto q = quantize_fp8(x, NumberFormat::E4M3, r, 0, nullptr).values;
            QVERIFY(torch::isnan(q.narrow(0, 32, 32)).all().item<bool>());
            QVERIFY(torch::equal(q.narrow(0, 0, 32), torch::full({32}, 0.5f)));
            QVERIFY(torch::equal(q.narrow(0, 64, 32), torch::full({32}, 0.5f)));
        }
    }

    // --- loss scaling -------------------------------------------------------------------

    void dynamicScalerMatchesPyTorch()
    {
        // Expected from torch._amp_update_scale_(scale, tracker, found_inf, 2.0, 0.5, 3) on
        // PyTorch 2.13 with this found_inf sequence.
        const int found[] = {0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0};
        const double scale[] = {65536, 65536, 131072, 131072, 65536, 65536, 65536, 131072,
                                65536, 32768, 32768, 32768, 65536, 65536, 65536, 131072};
        const int tracker[] = {1, 2, 0, 1, 0, 1, 2, 0, 0, 0, 1, 2, 0, 1, 2, 0};
        LossScalingConfig c;
        c.mode = LossScalingMode::Dynamic;
        c.growth_interval = 3;
        LossScaler s(c);
        QCOMPARE(s.scale(), 65536.0);
        for (int i = 0; i < 16; ++i) {
            const auto outcome = s.update(found[i] != 0);
            QCOMPARE(s.scale(), scale[i]);
            QCOMPARE(s.growth_tracker(), int64_t(tracker[i]));
            if (found[i]) QCOMPARE(outcome, LossScaler::Outcome::SkippedAndBackedOff);
        }
    }

    // A checkpoint's counters within the resumed run's settings: restored past a shorter
    // growth_interval, the tracker never met it again (==), and the scale froze; a larger
    // overflow budget than the new hysteresis tolerated more overflows than asked for.
    void restoredCountersFitTheNewSettings()
    {
        LossScalingConfig c;
        c.mode = LossScalingMode::Dynamic;
        c.growth_interval = 5;
        c.hysteresis = 1;
        LossScaler s(c);
        s.restore({1024.0, 9, 3}); // a run with growth_interval 2000 and hysteresis 3, 9 clean steps in
        QCOMPARE(s.state(), (LossScaler::State{1024.0, 4, 1}));
        QCOMPARE(s.update(false), LossScaler::Outcome::Grew);
        QCOMPARE(s.scale(), 2048.0);
        QCOMPARE(s.update(true), LossScaler::Outcome::SkippedAndBackedOff);
        // Within the settings, a state comes back as it was.
        s.restore({512.0, 3, 1});
        QCOMPARE(s.state(), (LossScaler::State{512.0, 3, 1}));
    }

    // The ends of the float32 range, against torch._amp_update_scale_ (PyTorch 2.13, CPU).
    void lossScaleIsFloat32AtTheEnds()
    {
        LossScalingConfig c;
        c.mode = LossScalingMode::Dynamic;
        c.growth_interval = 1;
        // Growth stops at 2^127: 2^128 is not a float; the tracker still resets.
        c.init_scale = std::ldexp(1.0, 126);
        LossScaler up(c);
        QCOMPARE(up.update(false), LossScaler::Outcome::Grew);
        QCOMPARE(up.scale(), std::ldexp(1.0, 127));
        QCOMPARE(up.update(false), LossScaler::Outcome::Clean);
        QCOMPARE(up.scale(), std::ldexp(1.0, 127));
        QCOMPARE(up.growth_tracker(), int64_t(0));
        // From FLT_MAX: x (1 + 2^-26) rounds back to FLT_MAX (finite: taken), x (1 + 2^-24)
        // rounds to inf (refused). Either way FLT_MAX, as PyTorch.
        const double flt_max = std::numeric_limits<float>::max();
        c.init_scale = flt_max;
        c.growth_factor = 1.0 + std::ldexp(1.0, -26);
        LossScaler edge(c);
        QCOMPARE(edge.update(false), LossScaler::Outcome::Grew);
        QCOMPARE(edge.scale(), flt_max);
        c.growth_factor = 1.0 + std::ldexp(1.0, -24);
        LossScaler over(c);
        QCOMPARE(over.update(false), LossScaler::Outcome::Clean);
        QCOMPARE(over.scale(), flt_max);
        // Backoff goes through the subnormals to 0, rounding to nearest even.
        c.growth_factor = 2.0;
        c.init_scale = std::ldexp(1.0, -148);
        LossScaler down(c);
        down.update(true);
        QCOMPARE(down.scale(), std::ldexp(1.0, -149));
        down.update(true);
        QCOMPARE(down.scale(), 0.0); // 2^-150 is the tie between 0 and 2^-149: even is 0
        down.update(false);
        QCOMPARE(down.scale(), 0.0); // 0 x 2 = 0: it stays there, as PyTorch's
        c.init_scale = 3 * std::ldexp(1.0, -149);
        LossScaler tie(c);
        tie.update(true);
        QCOMPARE(tie.scale(), std::ldexp(1.0, -148)); // 1.5 ulp -> 2 ulp (even)
        tie.update(true);
        QCOMPARE(tie.scale(), std::ldexp(1.0, -149));
        // A backoff factor that is not a power of two rounds each step to float32.
        c.init_scale = 1e-38;
        c.backoff_factor = 0.3;
        LossScaler third(c);
        const double expected[] = {0x1.05563800p-128, 0x1.399aa000p-130, 0x1.78530000p-132};
        for (double e : expected) {
            third.update(true);
            QCOMPARE(third.scale(), e);
        }
        // From the default 2^16, the 165th backoff reaches 2^-149 and the 166th 0.
        c.init_scale = 65536.0;
        c.backoff_factor = 0.5;
        LossScaler many(c);
        for (int i = 0; i < 165; ++i) many.update(true);
        QCOMPARE(many.scale(), std::ldexp(1.0, -149));
        many.update(true);
        QCOMPARE(many.scale(), 0.0);
        // The float32 conversion itself.
        QCOMPARE(to_float32(0x1.fffffep127), std::numeric_limits<float>::max());
        QCOMPARE(to_float32(0x1.ffffffp127), std::numeric_limits<float>::infinity()); // the tie
        QCOMPARE(to_float32(std::nextafter(0x1.ffffffp127, 0.0)), std::numeric_limits<float>::max());
        QCOMPARE(to_float32(-1e300), -std::numeric_limits<float>::infinity());
    }

    // The step's loss scale lives on the device (issue 11): DeviceLossScale must make the host
    // rule's every move, to the bit, from the same found_inf sequence (loss_scale_replay.h:
    // configurations that reach every branch; bench/cuda_checks replays them on a GPU).
    void theDeviceLossScaleMakesTheHostRulesMoves_data()
    {
        QTest::addColumn<int>("index");
        const auto cases = loss_scale_cases();
        for (size_t i = 0; i < cases.size(); ++i) QTest::newRow(cases[i].name) << int(i);
    }

    void theDeviceLossScaleMakesTheHostRulesMoves()
    {
        QFETCH(int, index);
        const auto c = loss_scale_cases().at(size_t(index));
        const auto r = replay_loss_scale(c, torch::kCPU);
        QVERIFY2(r.differing == 0, r.first_difference.c_str());
        QCOMPARE(r.reloads, int64_t(0)); // the state is the device's own from step to step
        if (c.config.mode == LossScalingMode::Dynamic) QVERIFY(r.moves > 3);
        else QCOMPARE(r.moves, int64_t(0));
        QVERIFY(r.skips > 0);
    }

    // A device that parted from the host is a bug the step refuses to hide; a host that was
    // changed (a checkpoint, a change of mode) is followed.
    void theDeviceLossScaleFollowsTheHostAndRefusesToPart()
    {
        LossScalingConfig c;
        c.mode = LossScalingMode::Dynamic;
        c.growth_interval = 1;
        LossScaler host(c);
        DeviceLossScale device;
        device.follow(host, torch::kCPU);
        device.update(torch::tensor(0.0f)); // grows on the device only
        const auto state = device.state_tensor();
        QVERIFY_THROWS_EXCEPTION(std::logic_error, device.check(host, state.data_ptr<double>()));
        host.restore({1024.0, 0, 1});
        device.follow(host, torch::kCPU);
        QCOMPARE(device.scale().item<float>(), 1024.0f);
        LossScaler off;
        device.follow(off, torch::kCPU);
        QVERIFY(!device.scale().defined());
        // A static scale is the one its settings give, whatever a checkpoint held (a resume
        // that sets another init_scale, or leaves dynamic scaling, trained with the old one).
        LossScalingConfig fixed;
        fixed.mode = LossScalingMode::Static;
        fixed.init_scale = 1024.0;
        LossScaler fixed_scale(fixed);
        fixed_scale.restore({524288.0, 3, 1});
        QCOMPARE(fixed_scale.scale(), 1024.0);
        QCOMPARE(fixed_scale.state().growth_tracker, int64_t(3));
    }

    // torch.optim.AdamW(fused=True) under a GradScaler: found_inf 1 leaves weights, moments
    // and step counters as they were (the next clean step equals a first step), 0 is a plain step.
    void aSkippedAdamWStepChangesNothing()
    {
        OptimizerConfig oc;
        oc.weight_decay = 0.1;
        const auto make = [] {
            torch::manual_seed(3);
            return std::vector<torch::Tensor>{torch::randn({4, 3}), torch::randn({3})};
        };
        auto a = make(), b = make();
        AdamW skipping({a[0]}, {a[1]}, oc), plain({b[0]}, {b[1]}, oc);
        const auto grads = [](std::vector<torch::Tensor>& ps, float value) {
            for (auto& p : ps) p.mutable_grad() = torch::full_like(p, value);
        };
        const auto first = a[0].clone();
        grads(a, std::numeric_limits<float>::infinity());
        skipping.step(1e-2, torch::tensor(1.0f));
        QVERIFY(torch::equal(a[0], first));
        grads(a, 0.5f);
        grads(b, 0.5f);
        skipping.step(1e-2, torch::tensor(0.0f));
        plain.step(1e-2);
        QVERIFY(!torch::equal(a[0], first));
        QVERIFY(torch::equal(a[0], b[0]) && torch::equal(a[1], b[1])); // the skipped step left step 0
        grads(a, -0.25f);
        grads(b, -0.25f);
        skipping.step(1e-2, torch::tensor(0.0f));
        plain.step(1e-2);
        QVERIFY(torch::equal(a[0], b[0]) && torch::equal(a[1], b[1]));
    }

    void pytorchDefaults()
    {
        LossScalingConfig c;
        QCOMPARE(c.init_scale, 65536.0);
        QCOMPARE(c.growth_factor, 2.0);
        QCOMPARE(c.backoff_factor, 0.5);
        QCOMPARE(c.growth_interval, int64_t(2000));
    }

    void minimumScaleAndHysteresis()
    {
        LossScalingConfig c;
        c.mode = LossScalingMode::Dynamic;
        c.init_scale = 4.0;
        c.min_scale = 1.0;
        c.hysteresis = 2;
        c.growth_interval = 2;
        LossScaler s(c);
        QCOMPARE(s.update(true), LossScaler::Outcome::Skipped); // first overflow tolerated
        QCOMPARE(s.scale(), 4.0);
        QCOMPARE(s.update(true), LossScaler::Outcome::SkippedAndBackedOff);
        QCOMPARE(s.scale(), 2.0);
        QCOMPARE(s.update(false), LossScaler::Outcome::Clean);
        QCOMPARE(s.update(true), LossScaler::Outcome::SkippedAndBackedOff); // not refilled until growth
        QCOMPARE(s.scale(), 1.0);
        QCOMPARE(s.update(true), LossScaler::Outcome::SkippedAndBackedOff);
        QCOMPARE(s.scale(), 1.0); // the floor
        QCOMPARE(s.update(false), LossScaler::Outcome::Clean);
        QCOMPARE(s.update(false), LossScaler::Outcome::Grew);
        QCOMPARE(s.scale(), 2.0);
        QCOMPARE(s.update(true), LossScaler::Outcome::Skipped); // refilled by the growth
    }

    void offAndStatic()
    {
        LossScalingConfig c;
        LossScaler off(c);
        QCOMPARE(off.scale(), 1.0);
        QCOMPARE(off.update(true), LossScaler::Outcome::Skipped);
        c.mode = LossScalingMode::Static;
        c.init_scale = 1024.0;
        LossScaler fixed(c);
        fixed.update(true);
        fixed.update(false);
        QCOMPARE(fixed.scale(), 1024.0);
    }
};

QTEST_GUILESS_MAIN(TestNumerics)
#include "test_numerics.moc"
