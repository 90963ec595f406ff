// SPDX-License-Identifier: GPL-3.0-or-later
// The native executor against its two references, on the CPU (CI has no GPU; the same code
// runs on CUDA with _scaled_mm and cuBLAS in place of the CPU fallbacks):
// - PyTorch's own CPU autocast (bench/reference_gpt.py --autocast bf16): the BF16 native path
//   is the same graph of the same kernels, so the losses agree to reduction-order noise;
// - the emulator: the FP8 cast, the device-side delayed scaling and the FP8 GEMM agree bit for
//   bit on crafted tensors; whole runs agree within a tolerance stated below.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

// LibTorch before Qt: Qt's `slots` macro breaks torch's headers.
#include <torch/torch.h>

#include "determinism.h"
#include "exact_fp8_gemm.h"
#include "fp8_scaling.h"
#include "layer_gemm.h"
#include "native_fp8.h"
#include "quantize.h"

#include <QtTest>

#include "run_capture.h"
#include "step_profile.h"
#include "trainer.h"

using namespace mantissa;

namespace {

ProjectConfig golden_project() { return load_project_file(MANTISSA_TEST_DATA_DIR "/golden_project.json"); }

// The golden project under fp8-hybrid, 64 wide, without evaluations: the checkpoint tests'.
ProjectConfig fp8_hybrid_project(int64_t steps, GemmBackend backend)
{
    auto config = golden_project();
    config.training.steps = steps;
    config.eval.interval = 0;
    config.model.n_embd = 64;
    config.precision.preset = "fp8-hybrid";
    config.precision.backend = backend;
    return config;
}

std::vector<double> read_losses(const char* file)
{
    std::ifstream in(std::string(MANTISSA_TEST_DATA_DIR "/") + file);
    std::vector<double> losses;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream fields(line);
        int64_t step = 0;
        double loss = 0, norm = 0;
        fields >> step >> loss >> norm;
        losses.push_back(loss);
    }
    return losses;
}

RunCapture train(ProjectConfig config, GemmBackend backend)
{
    config.precision.backend = backend;
    RunCapture capture;
    Trainer trainer(config);
    trainer.run(capture);
    return capture;
}

// The largest relative difference of two runs' losses, step by step (NaN where one is not
// finite, or they differ in length).
double worst_loss_difference(const RunCapture& a, const RunCapture& b)
{
    if (a.steps.size() != b.steps.size() || a.steps.empty()) return NAN;
    double worst = 0.0;
    for (size_t i = 0; i < a.steps.size(); ++i) {
        if (!std::isfinite(a.steps[i].train_loss)) return NAN;
        worst = std::max(worst, std::abs(a.steps[i].train_loss / b.steps[i].train_loss - 1.0));
    }
    return worst;
}

// An optimizer step for two layers' twin weights: new weight versions, caches refilled.
void sgd_step(std::initializer_list<torch::Tensor*> weights, std::initializer_list<LayerGemm*> layers)
{
    torch::NoGradGuard no_grad;
    for (auto* w : weights) {
        w->sub_(w->grad() * 0.5);
        w->mutable_grad() = torch::Tensor();
    }
    for (auto* layer : layers) layer->invalidate_weight_cache();
}

// Equal as bit patterns (so -0 is not 0), NaN where the other has NaN (its payload may differ:
// an FP8 NaN widens to 0x7FF00000, a filled one is 0x7FC00000).
bool same_values(const torch::Tensor& a, const torch::Tensor& b)
{
    const auto x = a.to(torch::kFloat32).contiguous(), y = b.to(torch::kFloat32).contiguous();
    if (x.sizes() != y.sizes() || !torch::equal(torch::isnan(x), torch::isnan(y))) return false;
    const auto xs = x.masked_fill(torch::isnan(x), 0.0f).contiguous(), ys = y.masked_fill(torch::isnan(y), 0.0f).contiguous();
    return std::memcmp(xs.data_ptr(), ys.data_ptr(), sizeof(float) * xs.numel()) == 0;
}

// Two layers' telemetry rows, role by role: counts, histograms and verdicts exactly, amax, scale
// and error energy bit for bit.
void compare_stats(const std::vector<TensorStats>& got, const std::vector<TensorStats>& want)
{
    QCOMPARE(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
        const auto at = qPrintable(QString::fromStdString(want[i].role));
        QVERIFY2(got[i].role == want[i].role && got[i].format == want[i].format, at);
        QVERIFY2(got[i].exponent_counts == want[i].exponent_counts && got[i].first_exponent == want[i].first_exponent, at);
        QVERIFY2(got[i].count == want[i].count && got[i].zeros == want[i].zeros && got[i].nans == want[i].nans, at);
        QVERIFY2(got[i].underflow == want[i].underflow && got[i].subnormal == want[i].subnormal &&
                     got[i].overflow == want[i].overflow,
                 at);
        // NaN: "not measured" on both sides (a 16-bit output that no row saw cast).
        const bool same_mse = got[i].quant_mse == want[i].quant_mse ||
                              (std::isnan(got[i].quant_mse) && std::isnan(want[i].quant_mse));
        QVERIFY2(got[i].amax == want[i].amax && got[i].scale == want[i].scale && same_mse, at);
    }
}

// Values that sit on every edge the cast has: zeros of both signs, the smallest FP32 subnormal,
// the format's subnormals and their halfway points, values just under and over the format's
// max, infinities and NaN, and an ordinary spread.
torch::Tensor crafted(NumberFormat format)
{
    const auto& info = format_info(format);
    const float max = static_cast<float>(info.max_finite), tiny = static_cast<float>(info.min_subnormal);
    std::vector<float> v = {0.0f, -0.0f, std::ldexp(1.0f, -149), -std::ldexp(1.0f, -149), tiny, tiny * 0.5f,
                            tiny * 1.5f, static_cast<float>(info.min_normal), std::nextafter(max, 0.0f), max,
                            std::nextafter(max, INFINITY), max * 1.04f, -max * 1.1f, 1.0f, -3.25f, 1e-3f};
    for (int i = 0; i < 48; ++i) v.push_back(std::ldexp(1.0f + 0.0625f * static_cast<float>(i % 16), i / 4 - 6));
    return torch::tensor(v);
}

} // namespace

class TestNative : public QObject {
    Q_OBJECT
private slots:
    // BF16 native on the CPU is autocast's graph: cast x, W, b to BF16, torch's linear and
    // fused attention in BF16, LayerNorm, softmax and the loss in FP32. PyTorch ran the same
    // model under torch.autocast("cpu", bfloat16); both sum the same products with the same
    // kernels, so only reduction-order noise may remain (the FP32 golden test allows 2e-5).
    void matchesPyTorchCpuAutocast()
    {
        const auto golden = read_losses("golden_losses_bf16_autocast.txt");
        QCOMPARE(golden.size(), size_t(30));
        auto config = golden_project();
        config.precision.preset = "bf16";
        const auto run = train(config, GemmBackend::Native);
        QCOMPARE(run.steps.size(), golden.size());
        for (size_t i = 0; i < golden.size(); ++i) {
            // Steps 1 and 2 are the same graph of the same kernels: equal to the 9 digits
            // printed. From step 2 on the clip scales the gradients (their norm is above 1),
            // by a coefficient PyTorch computes in FP32 and the engine in FP64 (as it does
            // for the FP32 golden run); a last-bit difference in a weight then flips an
            // occasional BF16 rounding, and the runs drift apart by at most 2.6e-4 over 30
            // steps (measured). Where that starts depends on the CPU's BF16 kernels: on the
            // AVX-512 machine that made the golden file the losses agreed to 1e-7 up to step
            // 5; on an AVX2 machine (2026-12-02) step 3 differs by 8e-6, and PyTorch's own
            // rerun there by 1.8e-5 from its file. A missing cast moves step 1 already.
            const double tolerance = i < 2 ? 1e-7 : 5e-4;
            if (std::abs(run.steps[i].train_loss - golden[i]) > tolerance)
                QFAIL(qPrintable(QString("step %1: loss %2, autocast %3").arg(i + 1)
                                     .arg(run.steps[i].train_loss, 0, 'g', 9).arg(golden[i], 0, 'g', 9)));
        }
        // And it is not the FP32 run: BF16 activations moved the losses (step 2: 3.70563 vs 3.70572).
        QVERIFY(std::abs(run.steps[1].train_loss - 3.70571864) > 5e-5);
    }

    // Whole runs, native against emulated. The native executor rounds activations and their
    // gradients to the compute dtype between ops (BF16: 2^-9 relative per rounding), where the
    // emulator keeps them in FP32 and rounds only GEMM operands and outputs. Over 12 steps of
    // the golden model that moves the loss by 2e-5 (FP16), 6e-5 (BF16) and 5e-4 to 6e-4 (FP8
    // per tensor and per row) relative, measured. Each row's bound is about 3x that; the 1%
    // this test had let every recipe pass for every other (a read-only audit: two recipes'
    // runs differ by as little as 1e-4 to 1.5e-3 here). Where a neighbouring recipe is far
    // enough apart to tell (the FP8 scalings), a control runs it in the emulator, and the
    // executors must agree closer than 0.6 of that (measured 0.37-0.42; a native run of the
    // wrong scaling gives about 1). The losses alone cannot tell the rest apart (FP8 in one
    // GEMM, delayed against rowwise there: 2e-4): the layer tests above hold those bit for bit.
    // Longer or deeper runs are no better: an FP8 loss spike (step 11 with three blocks, 14 with
    // two) turns the executors' 1e-3 into 5%, in either direction.
    // The block recipes (rows added 2026-12-07, after a conformance audit found them untested
    // here): fp8-e4m3 delayed 5.9e-4, mxfp8 3.1e-4, fp8-block 4.2e-4 against controls 1.5e-3 to
    // 2.8e-3; nvfp4 2.7e-3 and mxfp4 6.4e-3 (E2M1's 3 bits per value amplify the BF16
    // activations' rounding) against controls (each other) of 4e-2, so the bound is 8e-3 / 1e-2.
    void agreesWithEmulator_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<QString>("backend"); // what the native run reports for blocks.0.mlp.fc1
        QTest::addColumn<QString>("mlp_forward"); // a format for the MLPs' forward GEMMs, or none
        QTest::addColumn<QString>("control"); // a neighbouring scaling (recipe=), or none
        QTest::addColumn<double>("bound");    // on the worst relative loss difference
        QTest::newRow("bf16") << "bf16" << "delayed" << "native" << "" << "" << 2e-4;
        QTest::newRow("fp16") << "fp16" << "delayed" << "native" << "" << "" << 1e-4;
        // FP8 GEMMs: emulated on a CPU
        QTest::newRow("fp8-hybrid/delayed")
            << "fp8-hybrid" << "delayed" << "emulated" << "" << "recipe=current" << 2e-3;
        QTest::newRow("fp8-hybrid/current")
            << "fp8-hybrid" << "current" << "emulated" << "" << "recipe=delayed" << 2e-3;
        // native codes, FP32 GEMM on a CPU
        QTest::newRow("fp8-hybrid/rowwise")
            << "fp8-hybrid" << "rowwise" << "emulated" << "" << "recipe=delayed" << 2e-3;
        // One layer, two kinds of GEMM: the FP8 forward on codes, the BF16 backward as BF16.
        QTest::newRow("bf16, fp8 mlp forward/delayed") << "bf16" << "delayed" << "native+emulated" << "e4m3" << ""
                                                       << 1e-3;
        QTest::newRow("bf16, fp8 mlp forward/rowwise") << "bf16" << "rowwise" << "native+emulated" << "e4m3" << ""
                                                       << 1e-3;
        // E4M3 throughout, and the block recipes (the native executor hands their activations on
        // in BF16; each neighbour recipe is further away than the executors are).
        QTest::newRow("fp8-e4m3/delayed") << "fp8-e4m3" << "delayed" << "emulated" << "" << "recipe=current" << 2e-3;
        QTest::newRow("fp8-e4m3/mxfp8") << "fp8-e4m3" << "mxfp8" << "emulated" << "" << "recipe=delayed" << 2e-3;
        QTest::newRow("fp8-e4m3/fp8-block") << "fp8-e4m3" << "fp8-block" << "emulated" << "" << "recipe=delayed"
                                            << 2e-3;
        QTest::newRow("fp8-e4m3/nvfp4") << "fp8-e4m3" << "nvfp4" << "emulated" << "" << "recipe=mxfp4" << 8e-3;
        QTest::newRow("fp8-e4m3/mxfp4") << "fp8-e4m3" << "mxfp4" << "emulated" << "" << "recipe=nvfp4" << 1e-2;
    }
    void agreesWithEmulator()
    {
        QFETCH(QString, preset);
        QFETCH(QString, recipe);
        QFETCH(QString, backend);
        QFETCH(QString, mlp_forward);
        QFETCH(QString, control);
        QFETCH(double, bound);
        const auto configured = [&](const QString& scaling) {
            auto config = golden_project();
            config.training.steps = 12;
            config.eval.interval = 0;
            config.model.n_embd = 64; // FP8 GEMM dimensions multiples of 16, as on a GPU
            config.precision.preset = preset.toStdString();
            config.precision.fp8.scaling = *parse_fp8_scaling(scaling.toStdString());
            if (!mlp_forward.isEmpty()) {
                LayerOverride forward;
                forward.match = "*.mlp.*";
                forward.forward = parse_number_format(mlp_forward.toStdString());
                config.precision.layers.push_back(forward);
            }
            return config;
        };
        auto config = configured(recipe);
        const auto emulated = train(config, GemmBackend::Emulated);
        config.precision.backend = GemmBackend::Native;
        Trainer trainer(config);
        RunCapture native;
        trainer.run(native);
        const double executors = worst_loss_difference(native, emulated);
        QVERIFY2(executors < bound, qPrintable(QString("native against emulated %1").arg(executors)));
        if (!control.isEmpty()) {
            const auto neighbour = train(configured(control.section(QLatin1Char('='), 1)), GemmBackend::Emulated);
            const double recipes = worst_loss_difference(neighbour, emulated);
            QVERIFY2(executors < 0.6 * recipes, qPrintable(QString("native against emulated %1, %2 against it %3")
                                                               .arg(executors).arg(control).arg(recipes)));
        }
        QVERIFY(native.steps.back().train_loss < native.steps.front().train_loss - 0.2); // it learns
        for (const auto& layer : trainer.layers())
            if (layer.name == "blocks.0.mlp.fc1") QCOMPARE(QString::fromStdString(layer.backend), backend);
    }

    // fp8-hybrid-keep-ends with three blocks, natively: the ends (blocks 0 and 2) BF16 and
    // multiplied natively, the middle block FP8 (emulated on a CPU), as the emulator resolves
    // them. (agreesWithEmulator had it with two blocks, both ends: no FP8 layer at all.)
    void keepEndsKeepsTheMiddleBlockFp8Natively()
    {
        auto config = golden_project();
        config.training.steps = 1;
        config.eval.interval = 0;
        config.model.n_embd = 64;
        config.model.n_layer = 3;
        config.precision.preset = "fp8-hybrid-keep-ends";
        config.precision.backend = GemmBackend::Native;
        Trainer trainer(config);
        RunCapture run;
        trainer.run(run);
        std::vector<std::string> seen;
        for (const auto& layer : trainer.layers())
            if (layer.name.ends_with(".mlp.fc1") || layer.name == "lm_head")
                seen.push_back(layer.name + " " + layer.formats.describe() + " " + layer.backend);
        QCOMPARE(seen, (std::vector<std::string>{"blocks.0.mlp.fc1 bf16/bf16/bf16 native",
                                                 "blocks.1.mlp.fc1 e4m3/e5m2/e5m2 emulated",
                                                 "blocks.2.mlp.fc1 bf16/bf16/bf16 native",
                                                 "lm_head bf16/bf16/bf16 native"}));
        // run_started says which executor ran: the FP8 layers read "emulated" under both.
        QVERIFY2(trainer.describe().ends_with("; native executor"), trainer.describe().c_str());
        config.precision.backend = GemmBackend::Emulated;
        QVERIFY(Trainer(config).describe().ends_with("; emulated executor"));
    }

    // quantize_fp8_native against the emulator's quantize_fp8 on every edge: the same scale,
    // and codes * inv_scale equal to the emulator's values bit for bit (NaN where it has NaN).
    void fp8CastMatchesEmulator_data()
    {
        QTest::addColumn<int>("format");
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<bool>("saturate");
        for (auto f : {NumberFormat::E4M3, NumberFormat::E5M2})
            for (const char* r : {"delayed", "current"})
                for (bool sat : {true, false})
                    QTest::addRow("%s/%s/%s", format_name(f), r, sat ? "saturate" : "propagate")
                        << static_cast<int>(f) << r << sat;
    }
    void fp8CastMatchesEmulator()
    {
        QFETCH(int, format);
        QFETCH(QString, recipe);
        QFETCH(bool, saturate);
        const auto f = static_cast<NumberFormat>(format);
        Fp8Recipe r;
        r.scaling = *parse_fp8_scaling(recipe.toStdString());
        r.saturate = saturate;
        r.amax_history_length = 4;
        DelayedScaling host(r.amax_history_length);
        DeviceDelayedScaling device;
        device.upload(host, torch::kCPU);
        // A finite tensor, then one with infinities and NaN, then the first again: the delayed
        // scale must follow the same history on both sides.
        const auto edges = crafted(f);
        const auto finite = edges.masked_select(torch::isfinite(edges) & (edges.abs() < 1e30));
        const auto with_nan = torch::cat({finite, torch::tensor({INFINITY, -INFINITY, NAN})});
        for (const auto& x : {finite, finite * 1e-3, with_nan, finite * 7.0, finite}) {
            const auto expected = quantize_fp8(x, f, r, 0, &host);
            const auto got = quantize_fp8_native(x, f, r, &device, /*record=*/true);
            QCOMPARE(got.scale.item<float>(), expected.scale);
            QVERIFY(torch::equal(got.inv_scale, got.scale.reciprocal()));
            QVERIFY2(same_values(got.dequantized(), expected.values), qPrintable(recipe));
            if (r.scaling == Fp8Scaling::Delayed) QCOMPARE(device.scale().item<float>(), host.scale());
        }
        DelayedScaling back(r.amax_history_length);
        device.download(back);
        if (r.scaling == Fp8Scaling::Delayed) QVERIFY(same_values(torch::tensor(back.history()), torch::tensor(host.history())));
    }

    // DeviceDelayedScaling::rescale is DelayedScaling::rescale to the bit (a loss-scale change
    // queues it on the device): an ordinary history, one with NaN and Inf, a scale clamped at
    // FLT_MAX, a window of zeros under an older scale, a state never recorded, a bad ratio.
    void deviceRescaleMatchesHost()
    {
        const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
        const std::vector<std::pair<std::vector<float>, float>> states = {
            {{0.5f, 2.0f, 0.0f}, 224.0f}, {{nan, 3.0f, inf}, 149.33333f}, {{1e-38f, 0.0f, 0.0f}, 3.4028235e38f},
            {{0.0f, 0.0f, 0.0f}, 224.0f}, {{0.0f, 0.0f, 0.0f}, 1.0f},     {{nan, 0.0f, 0.0f}, 1.0f}};
        for (const auto& [history, scale] : states)
            for (float ratio : {65536.0f, 1.0f / 65536.0f, 0.5f, 1000.0f, inf, 0.0f}) {
                DelayedScaling host(3);
                host.restore(history, scale);
                DeviceDelayedScaling device;
                device.upload(host, torch::kCPU);
                host.rescale(ratio);
                device.rescale(ratio);
                DelayedScaling back(3);
                device.download(back);
                QVERIFY2(same_values(torch::tensor(back.history()), torch::tensor(host.history())),
                         qPrintable(QString("ratio %1").arg(ratio)));
                QCOMPARE(std::bit_cast<uint32_t>(back.scale()), std::bit_cast<uint32_t>(host.scale()));
                QVERIFY(torch::equal(device.inv_scale(), device.scale().reciprocal()));
            }
    }

    // The device scale rule against the host's on amaxes that hit each branch: zero, a
    // subnormal (whose scale overflows to FLT_MAX), tiny and huge values, infinity and NaN, with a margin.
    void deviceScaleMatchesHost()
    {
        for (const int64_t margin : {0, 2})
            for (const bool use_max : {true, false}) {
                DelayedScaling host(3);
                DeviceDelayedScaling device;
                device.upload(host, torch::kCPU);
                for (const float amax : {0.0f, 1.5f, std::ldexp(1.0f, -140), 3e-3f, 7e30f, 2.0f, INFINITY, 0.25f, NAN, 1e-38f,
                                         5.0f, 1.0f, 1.0f, 1.0f}) {
                    host.record(amax, 448.0, use_max, margin);
                    device.record(torch::tensor(amax), 448.0, use_max, margin);
                    const float h = host.scale(), d = device.scale().item<float>();
                    QVERIFY2(std::memcmp(&h, &d, sizeof h) == 0,
                             qPrintable(QString("amax %1: host %2, device %3").arg(amax).arg(h).arg(d)));
                    // The inverse that casts take with the scale: made by the same record.
                    const float inv = device.inv_scale().item<float>(), want = 1.0f / h;
                    QVERIFY2(std::memcmp(&inv, &want, sizeof inv) == 0,
                             qPrintable(QString("amax %1: 1 / %2 is %3, the state has %4").arg(amax).arg(h).arg(want).arg(inv)));
                }
            }
    }

    // Data parallel on CUDA: two ranks' device journals reduced with MAX (the element-wise
    // max stands in for NCCL's) and replayed end where one host state ends that recorded the
    // fmax of each pair. A NaN travels as -1: beside a finite amax it loses, on both ranks it
    // comes back as NaN.
    void deviceJournalReplaysTheReducedAmaxes()
    {
        const std::vector<float> rank0 = {1.5f, NAN, 3.0f, NAN, 0.0f};
        const std::vector<float> rank1 = {2.0f, 0.5f, NAN, NAN, 1e-38f};
        const std::vector<float> maxed = {2.0f, 0.5f, 3.0f, NAN, 1e-38f};
        for (const bool use_max : {true, false}) {
            DelayedScaling host(8); // longer than the step's records: the pre-step history stays in the window
            host.record(7.0f, 448.0, use_max, 0); // a history before the step
            DeviceDelayedScaling a, b;
            a.upload(host, torch::kCPU);
            b.upload(host, torch::kCPU);
            a.begin_journal();
            b.begin_journal();
            for (size_t i = 0; i < rank0.size(); ++i) {
                a.record(torch::tensor(rank0[i]), 448.0, use_max, 0);
                b.record(torch::tensor(rank1[i]), 448.0, use_max, 0);
                host.record(maxed[i], 448.0, use_max, 0);
            }
            const auto sent = a.journal_amaxes();
            QVERIFY(torch::equal(sent, torch::tensor({1.5f, -1.0f, 3.0f, -1.0f, 0.0f})));
            const auto reduced = torch::maximum(sent, b.journal_amaxes());
            a.replay(reduced);
            b.replay(reduced);
            QCOMPARE(a.journal_size(), size_t(0));
            QVERIFY(torch::equal(a.inv_scale(), a.scale().reciprocal()));
            for (auto* d : {&a, &b}) {
                DelayedScaling back(8);
                d->download(back);
                const float hs = host.scale(), ds = back.scale();
                QVERIFY2(std::memcmp(&hs, &ds, sizeof hs) == 0, qPrintable(QString("%1 vs %2").arg(ds).arg(hs)));
                QCOMPARE(back.history().size(), host.history().size());
                QVERIFY(std::memcmp(back.history().data(), host.history().data(), 8 * sizeof(float)) == 0);
            }
        }
    }

    // What the native executor still runs through the emulator's autograd (FP8 attention here)
    // casts with its scale and history as tensors: the host state does not move, and the
    // device mirror ends where the emulator's host state ends, with the same values and
    // gradients bit for bit. On a GPU this is what keeps such casts from reading amaxes back.
    void emulatedCastsInTheNativeExecutorKeepTensorState_data()
    {
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<double>("outliers"); // outlier_rms_multiple: the split runs on tensors too
        QTest::newRow("delayed") << "delayed" << 0.0;
        QTest::newRow("current") << "current" << 0.0;
        QTest::newRow("delayed, outliers aside") << "delayed" << 2.5;
        QTest::newRow("current, outliers aside") << "current" << 2.5;
    }
    void emulatedCastsInTheNativeExecutorKeepTensorState()
    {
        QFETCH(QString, recipe);
        QFETCH(double, outliers);
        Fp8Recipe r;
        r.scaling = *parse_fp8_scaling(recipe.toStdString());
        r.amax_history_length = 4;
        r.outlier_rms_multiple = outliers;
        const GemmFormats f{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2};
        LayerGemm emulated("attn", f, r, GemmBackend::Emulated), native("attn", f, r, GemmBackend::Native);
        native.set_native(true);
        torch::manual_seed(11);
        for (int step = 0; step < 5; ++step) {
            // Magnitudes that change from step to step, so that delayed scales lag and clip.
            const double spread = std::ldexp(1.0, 3 * step - 6);
            const auto a = (torch::randn({2, 16, 32}) * spread).requires_grad_(true);
            const auto b = torch::randn({2, 32, 16}).requires_grad_(true);
            const auto a2 = a.detach().clone().requires_grad_(true), b2 = b.detach().clone().requires_grad_(true);
            // BF16 values: the native output travels in BF16, and so does its gradient.
            const auto dy = (torch::randn({2, 16, 16}) * std::ldexp(1.0, -step)).to(torch::kBFloat16).to(torch::kFloat32);
            const auto scores = LayerGemm::AttentionProduct::Scores;
            const auto y = emulated.matmul(a, b, scores), y2 = native.matmul(a2, b2, scores);
            QVERIFY2(same_values(y, y2), qPrintable(QString("step %1: outputs differ").arg(step)));
            y.backward(dy);
            y2.backward(dy);
            QVERIFY2(same_values(a.grad(), a2.grad()), qPrintable(QString("step %1: da differs").arg(step)));
            QVERIFY2(same_values(b.grad(), b2.grad()), qPrintable(QString("step %1: db differs").arg(step)));
        }
        const std::vector<std::pair<OperandRole, NumberFormat>> used = {{OperandRole::Input, NumberFormat::E4M3},
                                                                        {OperandRole::Weight, NumberFormat::E4M3},
                                                                        {OperandRole::GradOutput, NumberFormat::E5M2}};
        for (const auto& [role, format] : used) {
            // Before the write-back the native layer's host state is untouched: it cast on tensors.
            QCOMPARE(native.delayed(role, format).scale(), 1.0f);
            QCOMPARE(native.delayed(role, format).history()[0], 0.0f);
        }
        native.sync_device_scaling_to_host();
        for (const auto& [role, format] : used) {
            const auto& want = emulated.delayed(role, format);
            const auto& got = native.delayed(role, format);
            const float ws = want.scale(), gs = got.scale();
            QVERIFY2(std::memcmp(&ws, &gs, sizeof ws) == 0, qPrintable(QString("scale %1 vs %2").arg(gs).arg(ws)));
            QVERIFY(std::memcmp(want.history().data(), got.history().data(), 4 * sizeof(float)) == 0);
            if (r.scaling == Fp8Scaling::Delayed) QVERIFY(want.scale() != 1.0f); // the history moved the scale
        }
    }

    // An FP8 attention layer's two products scale apart, as TE scales each tensor by its own
    // amax: one history holds q's amax and another P's, K's and V's, dS's and dY's, one record
    // each a step. They shared one history per role, four records a step: V was cast by K's
    // scale (the spec audit measured 73% output error with amax_compute_algo most_recent).
    void attentionProductsScaleApart_data()
    {
        QTest::addColumn<QString>("backend");
        QTest::newRow("emulated") << "emulated";
        QTest::newRow("native") << "native";
    }
    void attentionProductsScaleApart()
    {
        QFETCH(QString, backend);
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Delayed;
        r.amax_history_length = 4;
        const GemmFormats f{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2};
        const bool native = backend == QLatin1String("native");
        LayerGemm layer("blocks.0.attn.sdpa", f, r, native ? GemmBackend::Native : GemmBackend::Emulated);
        layer.set_native(native);
        QCOMPARE(layer.scaling_products(), 2);
        torch::manual_seed(5);
        // Tensors of far apart magnitudes, as q, K, V and the gradients are in a real layer.
        const auto q = (torch::randn({2, 8, 16}) * 3.0).requires_grad_(true);
        const auto k = (torch::randn({2, 8, 16}) * 0.25).requires_grad_(true);
        const auto v = (torch::randn({2, 8, 16}) * 40.0).requires_grad_(true);
        auto scores = layer.matmul(q, k.transpose(-2, -1), LayerGemm::AttentionProduct::Scores); // (2, 8, 8)
        scores.retain_grad();
        const auto probs = torch::softmax(scores, -1);
        const auto y = layer.matmul(probs, v, LayerGemm::AttentionProduct::Values); // (2, 8, 16)
        // BF16 values: the native output travels in BF16, and so does its gradient.
        const auto dy = (torch::randn({2, 8, 16}) * 1e-3).to(torch::kBFloat16).to(torch::kFloat32);
        y.backward(dy);
        layer.sync_device_scaling_to_host();
        const auto amax = [](const torch::Tensor& t) { return t.detach().abs().max().item<float>(); };
        const auto newest = [&](OperandRole role, NumberFormat format, int product) {
            const auto& h = layer.delayed(role, format, product).history();
            return std::vector<float>(h.begin(), h.end());
        };
        const auto once = [](float a) { return std::vector<float>{a, 0.0f, 0.0f, 0.0f}; };
        QCOMPARE(newest(OperandRole::Input, NumberFormat::E4M3, 0), once(amax(q)));
        QCOMPARE(newest(OperandRole::Weight, NumberFormat::E4M3, 0), once(amax(k)));
        QCOMPARE(newest(OperandRole::GradOutput, NumberFormat::E5M2, 0), once(amax(scores.grad())));
        QCOMPARE(newest(OperandRole::Input, NumberFormat::E4M3, 1), once(amax(probs)));
        QCOMPARE(newest(OperandRole::Weight, NumberFormat::E4M3, 1), once(amax(v)));
        QCOMPARE(newest(OperandRole::GradOutput, NumberFormat::E5M2, 1), once(amax(dy)));
        // The backward multiplies the forward's casts: q, K, P and V at the scale their forward cast
        // took (1, a fresh state's), not the scale their record has made since (448 / amax).
        LayerGemm plain("x", f, r, GemmBackend::Emulated);
        const auto e4m3 = [](const torch::Tensor& t) {
            return round_to_format(t.detach(), NumberFormat::E4M3, Overflow::Saturate);
        };
        const auto e5m2 = [](const torch::Tensor& t) {
            return round_to_format(t.detach(), NumberFormat::E5M2, Overflow::Saturate);
        };
        const auto dv = plain.gemm(e4m3(probs).transpose(-1, -2), e5m2(dy), NumberFormat::E5M2);
        const auto dk = plain.gemm(e4m3(q).transpose(-1, -2), e5m2(scores.grad()), NumberFormat::E5M2);
        QVERIFY(torch::equal(v.grad().to(torch::kFloat32), dv));
        QVERIFY(torch::equal(k.grad().to(torch::kFloat32), dk.transpose(-1, -2)));
        const auto dq = plain.gemm(e5m2(scores.grad()), e4m3(k), NumberFormat::E5M2); // K, as the forward cast K^T
        QVERIFY(torch::equal(q.grad().to(torch::kFloat32), dq));
        // A linear layer has one set.
        LayerGemm linear("blocks.0.mlp.fc1", f, r, GemmBackend::Emulated);
        QCOMPARE(linear.scaling_products(), 1);

        // A checkpoint keeps both sets; one from before they were apart (one set, under the
        // layer's key alone) starts the values product from the set both shared.
        QTemporaryDir tmp;
        const std::string file = tmp.filePath("sdpa.pt").toStdString(), old = tmp.filePath("old.pt").toStdString();
        {
            torch::serialize::OutputArchive out;
            layer.save(out);
            out.save_to(file);
            torch::serialize::OutputArchive before;
            const std::string key = "layers/blocks.0.attn.sdpa/";
            before.write(key + "formats", torch::tensor({int64_t(f.forward), int64_t(f.dgrad), int64_t(f.wgrad)}));
            for (auto role : kOperandRoles)
                for (auto format : kFp8Formats) {
                    const auto& d = layer.delayed(role, format, 0);
                    const std::string at = key + std::to_string(int(role)) + "/" + format_info(format).name + "/";
                    before.write(at + "history", torch::tensor(d.history()));
                    before.write(at + "scale", torch::tensor(d.scale()));
                }
            before.save_to(old);
        }
        for (const bool from_old : {false, true}) {
            LayerGemm loaded("blocks.0.attn.sdpa", f, r, GemmBackend::Emulated);
            torch::serialize::InputArchive in;
            in.load_from(from_old ? old : file);
            loaded.load(in);
            for (int product : {0, 1})
                for (auto role : kOperandRoles)
                    for (auto format : kFp8Formats) {
                        const auto& want = layer.delayed(role, format, from_old ? 0 : product);
                        QCOMPARE(loaded.delayed(role, format, product).history(), want.history());
                        QCOMPARE(loaded.delayed(role, format, product).scale(), want.scale());
                    }
        }
    }

    // A bf16/fp16 layer's bias gradient is a 16-bit tensor on the hardware (autocast's linear,
    // the native executor's): the emulator rounds its sum to the format, Inf past FP16's 65504,
    // so that its loss scaler skips the steps that PyTorch's GradScaler skips (the parity
    // audit's emulated FP16 run took a step both skipped). An FP8 layer's is an FP32 sum in both.
    void biasGradientIsRoundedAsAutocastRoundsIt_data()
    {
        QTest::addColumn<QString>("format");
        QTest::addColumn<double>("second");   // the emulator's db[1]: 3 (1 + 2^-10), rounded to the format or not
        QTest::addColumn<bool>("overflows"); // db[0]: 64 x 2048 = 131072
        QTest::newRow("fp16") << "fp16" << 3.00390625 << true;
        QTest::newRow("bf16") << "bf16" << 3.0 << false;
        QTest::newRow("fp8 hybrid") << "e4m3" << 3.0029296875 << false;
    }
    void biasGradientIsRoundedAsAutocastRoundsIt()
    {
        QFETCH(QString, format);
        QFETCH(double, second);
        QFETCH(bool, overflows);
        const auto forward = *parse_number_format(format.toStdString());
        const GemmFormats f = forward == NumberFormat::E4M3
                                  ? GemmFormats{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2}
                                  : GemmFormats{forward, forward, forward};
        LayerGemm emulated("fc", f, Fp8Recipe{}, GemmBackend::Emulated), native("fc", f, Fp8Recipe{}, GemmBackend::Native);
        native.set_native(true);
        auto dy = torch::zeros({64, 4});
        dy.select(1, 0).fill_(2048.0f);
        dy.select(1, 1).narrow(0, 0, 3).fill_(1.0f + std::ldexp(1.0f, -10));
        const auto x = torch::ones({64, 16}) * 0.25, w = torch::ones({4, 16}) * 0.125;
        const bool sixteen = forward != NumberFormat::E4M3;
        for (LayerGemm* layer : {&emulated, &native}) {
            const auto b = torch::zeros({4}).requires_grad_(true);
            const auto y = layer->linear(x.to(layer->output_dtype()), w, b);
            const auto handed = dy.to(y.scalar_type()); // BF16 for a native FP8 layer: 1 + 2^-10 is 1 there
            y.backward(handed);
            const auto db = b.grad();
            QCOMPARE(db.scalar_type(), torch::kFloat32);
            const auto sum = handed.to(torch::kFloat32).sum(0);
            QVERIFY2(torch::equal(db, sixteen ? round_to_format(sum, forward, Overflow::Propagate) : sum),
                     layer->native() ? "native" : "emulated");
            const float first = db[0].item<float>();
            if (overflows) QVERIFY2(std::isinf(first) && first > 0, qPrintable(QString::number(first)));
            else QCOMPARE(first, 131072.0f);
            if (!layer->native()) QCOMPARE(double(db[1].item<float>()), second);
        }
    }

    // A layer whose GEMMs are of different kinds (FP8 and FP32 here, the GEMMs this CPU
    // computes the emulator's way) runs natively GEMM by GEMM, and gives the emulator's values,
    // gradients and delayed-scaling state bit for bit over steps whose weights move, two
    // micro-batches a step: the weight is cast, and records its amax, once a step in each
    // format it is taken in (the forward's and the input gradient's may differ).
    void mixedFormatLayerMatchesEmulator_data()
    {
        QTest::addColumn<QString>("forward");
        QTest::addColumn<QString>("dgrad");
        QTest::addColumn<QString>("wgrad");
        QTest::addColumn<QString>("scaling");
        QTest::newRow("fp8 forward") << "e4m3" << "fp32" << "fp32" << "delayed";
        QTest::newRow("fp8 backward, two grad casts") << "fp32" << "e4m3" << "e5m2" << "delayed";
        QTest::newRow("fp8 wgrad only") << "fp32" << "fp32" << "e5m2" << "delayed";
        QTest::newRow("e5m2 forward, e4m3 dgrad: two weight casts") << "e5m2" << "e4m3" << "fp32" << "delayed";
        // A 16-bit forward with a bias: the bias joins in the output dtype (cuBLAS's epilogue).
        QTest::newRow("bf16 forward, fp8 backward") << "bf16" << "e4m3" << "e5m2" << "delayed";
        QTest::newRow("fp16 forward, fp8 backward") << "fp16" << "e5m2" << "e5m2" << "delayed";
        // All three GEMMs in FP8: the saved transposed codes, the shared dy cast, the cached Wᵀ.
        QTest::newRow("hybrid, delayed") << "e4m3" << "e5m2" << "e5m2" << "delayed";
        QTest::newRow("hybrid, current") << "e4m3" << "e5m2" << "e5m2" << "current";
        QTest::newRow("hybrid, rowwise") << "e4m3" << "e5m2" << "e5m2" << "rowwise";
        QTest::newRow("e4m3 throughout") << "e4m3" << "e4m3" << "e4m3" << "delayed";
    }
    void mixedFormatLayerMatchesEmulator()
    {
        QFETCH(QString, forward);
        QFETCH(QString, dgrad);
        QFETCH(QString, wgrad);
        QFETCH(QString, scaling);
        const GemmFormats f{*parse_number_format(forward.toStdString()), *parse_number_format(dgrad.toStdString()),
                            *parse_number_format(wgrad.toStdString())};
        Fp8Recipe r;
        r.scaling = *parse_fp8_scaling(scaling.toStdString());
        r.amax_history_length = 8; // room for twice the steps: a cast per micro-batch would show
        LayerGemm emulated("fc", f, r, GemmBackend::Emulated), native("fc", f, r, GemmBackend::Native);
        native.set_native(true);
        torch::manual_seed(5);
        const auto w0 = torch::randn({16, 48}) * 0.1, bias = torch::randn({16});
        auto w = w0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
        for (int step = 0; step < 4; ++step) {
            for (int micro = 0; micro < 2; ++micro) {
                const auto x = (torch::randn({32, 48}) * std::ldexp(1.0, 2 * step - 3 + micro)).requires_grad_(true);
                const auto x2 = x.detach().clone().requires_grad_(true);
                const auto y = emulated.linear(x, w, bias), y2 = native.linear(x2, w2, bias);
                QCOMPARE(y2.scalar_type(), native.output_dtype());
                QVERIFY2(same_values(y, y2), qPrintable(QString("step %1.%2: outputs differ").arg(step).arg(micro)));
                const auto dy = torch::randn({32, 16}).to(y2.scalar_type());
                y.backward(dy.to(torch::kFloat32));
                y2.backward(dy);
                QVERIFY2(same_values(x.grad(), x2.grad()), qPrintable(QString("step %1.%2: dx differs").arg(step).arg(micro)));
            }
            QVERIFY2(same_values(w.grad(), w2.grad()), qPrintable(QString("step %1: dW differs").arg(step)));
            torch::NoGradGuard no_grad; // an optimizer step: new weight versions, caches refilled
            sgd_step({&w, &w2}, {&emulated, &native});
        }
        for (auto format : {NumberFormat::E4M3, NumberFormat::E5M2})
            QCOMPARE(native.delayed(OperandRole::Input, format).scale(), 1.0f); // it cast on tensors
        native.sync_device_scaling_to_host();
        for (auto role : {OperandRole::Input, OperandRole::Weight, OperandRole::GradOutput})
            for (auto format : {NumberFormat::E4M3, NumberFormat::E5M2}) {
                const auto& want = emulated.delayed(role, format).history();
                QVERIFY(std::memcmp(want.data(), native.delayed(role, format).history().data(), 8 * sizeof(float)) == 0);
                QCOMPARE(native.delayed(role, format).scale(), emulated.delayed(role, format).scale());
            }
        if (r.scaling != Fp8Scaling::Delayed) return; // no amax history: each cast scales on its own tensor
        if (format_info(f.dgrad).is_fp8) QVERIFY(emulated.delayed(OperandRole::GradOutput, f.dgrad).history()[0] > 0.0f);
        // The weight records one amax a step in each format it is cast in: 4, not 8.
        for (auto format : {NumberFormat::E4M3, NumberFormat::E5M2}) {
            const bool cast = format == f.forward || (format_info(f.dgrad).is_fp8 && format == saved_operand_format(f.dgrad));
            const auto& h = emulated.delayed(OperandRole::Weight, format).history();
            const auto records = std::count_if(h.begin(), h.end(), [](float a) { return a > 0.0f; });
            QCOMPARE(records, cast ? 4 : 0);
        }
    }

    // A backward that casts a tensor apart from the forward and the dgrad GEMM (per-GEMM formats
    // under a per-tensor recipe) records each such cast under its own role, in both executors
    // alike. The audit's case: fc1 with a bf16 forward, an e5m2 dgrad and an e4m3 wgrad at its
    // first step (delayed scales still 1) flushed all of dy in the wgrad's E4M3 cast, and no
    // row said so: weight_grad read zeros and "exact". Shared casts (HYBRID) and per-row copies
    // add no row.
    void unsharedCastsHaveRows_data()
    {
        QTest::addColumn<QString>("forward");
        QTest::addColumn<QString>("dgrad");
        QTest::addColumn<QString>("wgrad");
        QTest::addColumn<QString>("scaling");
        QTest::addColumn<QStringList>("roles");
        const QStringList all{"weight_dgrad", "grad_output_wgrad", "input_wgrad"};
        QTest::newRow("bf16 forward, e5m2 dgrad, e4m3 wgrad") << "bf16" << "e5m2" << "e4m3" << "delayed" << all;
        QTest::newRow("fp32 forward, e4m3 dgrad, e5m2 wgrad") << "fp32" << "e4m3" << "e5m2" << "current" << all;
        QTest::newRow("e4m3 forward, fp32 dgrad, bf16 wgrad") << "e4m3" << "fp32" << "bf16" << "delayed"
                                                              << QStringList{"grad_output_wgrad", "input_wgrad"};
        QTest::newRow("hybrid") << "e4m3" << "e5m2" << "e5m2" << "delayed" << QStringList{};
        QTest::newRow("rowwise, not yet recorded") << "bf16" << "e5m2" << "e4m3" << "rowwise" << QStringList{};
    }
    void unsharedCastsHaveRows()
    {
        QFETCH(QString, forward);
        QFETCH(QString, dgrad);
        QFETCH(QString, wgrad);
        QFETCH(QString, scaling);
        QFETCH(QStringList, roles);
        const GemmFormats f{*parse_number_format(forward.toStdString()), *parse_number_format(dgrad.toStdString()),
                            *parse_number_format(wgrad.toStdString())};
        Fp8Recipe r;
        r.scaling = *parse_fp8_scaling(scaling.toStdString());
        LayerGemm emulated("fc1", f, r, GemmBackend::Emulated), native("fc1", f, r, GemmBackend::Native);
        native.set_native(true);
        torch::manual_seed(12);
        const auto w0 = torch::randn({16, 48}) * 0.1;
        auto w = w0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
        const auto x = torch::randn({32, 48});
        emulated.arm_telemetry(true);
        native.arm_telemetry(true);
        const auto y = emulated.linear(x, w, {}), y2 = native.linear(x, w2, {});
        // Gradients under 2^-11, half E4M3's smallest subnormal: all flushed at a scale of 1.
        const auto dy = (torch::randn({32, 16}) * 1e-4).clamp(-4.8e-4, 4.8e-4).to(y2.scalar_type());
        y.backward(dy.to(torch::kFloat32));
        y2.backward(dy);
        emulated.arm_telemetry(false);
        native.arm_telemetry(false);
        const auto backward_casts = [](const std::vector<TensorStats>& rows) {
            std::vector<TensorStats> out;
            for (const auto& t : rows)
                if (t.role == "grad_output" || t.role == "weight_dgrad" || t.role == "grad_output_wgrad" ||
                    t.role == "input_wgrad")
                    out.push_back(t);
            return out;
        };
        const auto want = backward_casts(emulated.take_stats()), got = backward_casts(native.take_stats());
        QStringList seen;
        for (size_t i = 1; i < want.size(); ++i) seen << QString::fromStdString(want[i].role);
        QCOMPARE(seen, roles);
        QCOMPARE(want[0].role, std::string("grad_output"));
        // The native executor's dy comes in BF16 where its forward's output is BF16: a BF16 cast
        // of it is its own values (underflow "not measured"), the rest as the emulator's.
        QCOMPARE(got.size(), want.size());
        std::vector<TensorStats> got_cast, want_cast;
        for (size_t i = 0; i < got.size(); ++i) {
            if (got[i].underflow >= 0) {
                got_cast.push_back(got[i]);
                want_cast.push_back(want[i]);
                continue;
            }
            const auto at = qPrintable(QString::fromStdString(want[i].role));
            QVERIFY2(got[i].role == want[i].role && got[i].format == want[i].format, at);
            QVERIFY2(got[i].exponent_counts == want[i].exponent_counts && got[i].subnormal == want[i].subnormal, at);
        }
        compare_stats(got_cast, want_cast);
        if (QTest::currentTestFailed()) return;
        for (const auto& t : want) {
            const auto at = qPrintable(QString::fromStdString(t.role));
            if (t.role == "weight_dgrad") QCOMPARE(t.format, std::string(format_name(saved_operand_format(f.dgrad))));
            if (t.role == "input_wgrad") QCOMPARE(t.format, std::string(format_name(saved_operand_format(f.wgrad))));
            if (t.role != "grad_output_wgrad") continue;
            QCOMPARE(t.format, wgrad.toStdString());
            if (f.wgrad == NumberFormat::E4M3) QVERIFY2(t.underflow == 1.0, at); // every value of dy flushed
            else QVERIFY2(t.underflow == 0.0, at);
        }
    }

    // linear_of_gelu (fc2 after the MLP's GELU): where an FP8 layer casts gelu(u) from u and
    // takes the GELU's gradient itself (casts_from_gelu_input), the outputs, u's gradient, the
    // weight's and the bias's, the delayed-scaling state and the telemetry rows are those of
    // linear(torch::gelu(u)) bit for bit, over steps, two micro-batches each and an evaluation;
    // elsewhere it is that very call. u in BF16 as fc1 hands it on, with values whose GELU is
    // exactly 0 and a NaN.
    void linearOfGeluIsGeluThenLinear_data()
    {
        QTest::addColumn<QString>("forward");
        QTest::addColumn<QString>("dgrad");
        QTest::addColumn<QString>("wgrad");
        QTest::addColumn<QString>("scaling");
        QTest::addColumn<bool>("fromGeluInput");
        QTest::newRow("hybrid, delayed") << "e4m3" << "e5m2" << "e5m2" << "delayed" << true;
        QTest::newRow("e4m3 throughout, delayed") << "e4m3" << "e4m3" << "e4m3" << "delayed" << true;
        QTest::newRow("fp8 forward, fp32 backward") << "e4m3" << "fp32" << "fp32" << "delayed" << false;
        // The input gradient in FP32: handed to the GELU's gradient in u's dtype, as autograd does.
        QTest::newRow("fp8 forward and wgrad, fp32 dgrad") << "e4m3" << "fp32" << "e4m3" << "delayed" << true;
        QTest::newRow("hybrid, current") << "e4m3" << "e5m2" << "e5m2" << "current" << false;
        QTest::newRow("bf16") << "bf16" << "bf16" << "bf16" << "delayed" << false;
    }
    void linearOfGeluIsGeluThenLinear()
    {
        QFETCH(QString, forward);
        QFETCH(QString, dgrad);
        QFETCH(QString, wgrad);
        QFETCH(QString, scaling);
        QFETCH(bool, fromGeluInput);
        const GemmFormats f{*parse_number_format(forward.toStdString()), *parse_number_format(dgrad.toStdString()),
                            *parse_number_format(wgrad.toStdString())};
        Fp8Recipe r;
        r.scaling = *parse_fp8_scaling(scaling.toStdString());
        LayerGemm fused("fc2", f, r, GemmBackend::Native), plain("fc2", f, r, GemmBackend::Native);
        fused.set_native(true);
        plain.set_native(true);
        torch::manual_seed(8);
        const int64_t M = 64, K = 128, N = 32;
        const auto w0 = torch::randn({N, K}) * 0.05, bias = torch::randn({N}) * 0.1;
        auto w = w0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
        auto b = bias.clone().requires_grad_(true), b2 = bias.clone().requires_grad_(true);
        for (int step = 0; step < 3; ++step) {
            const bool armed = step == 1;
            fused.arm_telemetry(armed);
            plain.arm_telemetry(armed);
            for (int micro = 0; micro < 2; ++micro) {
                auto u0 = (torch::randn({2, M / 2, K}) * std::ldexp(1.0, step)).to(torch::kBFloat16);
                u0[0][3][7] = -20.0f; // GELU exactly -0 in BF16
                if (step == 2 && micro == 1) u0[1][5][9] = std::numeric_limits<float>::quiet_NaN();
                const auto u = u0.clone().requires_grad_(true), u2 = u0.clone().requires_grad_(true);
                const char* off = std::getenv("MANTISSA_GELU_CAST"); // "0": kept apart everywhere
                QCOMPARE(fused.casts_from_gelu_input(u), fromGeluInput && !(off && std::string(off) == "0"));
                const auto y = fused.linear_of_gelu(u, w, b), y2 = plain.linear(torch::gelu(u2), w2, b2);
                QCOMPARE(y.sizes(), y2.sizes());
                QVERIFY2(same_values(y, y2), qPrintable(QString("step %1.%2: outputs differ").arg(step).arg(micro)));
                const auto dy = (torch::randn(y.sizes()) * 1e-2).to(y.scalar_type());
                y.backward(dy);
                y2.backward(dy);
                QCOMPARE(u.grad().scalar_type(), u2.grad().scalar_type());
                QVERIFY2(same_values(u.grad(), u2.grad()), qPrintable(QString("step %1.%2: du differs").arg(step).arg(micro)));
            }
            QVERIFY2(same_values(w.grad(), w2.grad()), qPrintable(QString("step %1: dW differs").arg(step)));
            QVERIFY2(same_values(b.grad(), b2.grad()), qPrintable(QString("step %1: db differs").arg(step)));
            if (armed) {
                fused.arm_telemetry(false);
                plain.arm_telemetry(false);
                const auto want = plain.take_stats(), got = fused.take_stats();
                QVERIFY(!want.empty());
                compare_stats(got, want);
                if (QTest::currentTestFailed()) return;
            }
            torch::NoGradGuard no_grad;
            {
                // An evaluation: no cast from u (no wgrad to share it with), the same outputs.
                fused.set_training(false);
                plain.set_training(false);
                const auto u = torch::randn({M, K}).to(torch::kBFloat16);
                QVERIFY(!fused.casts_from_gelu_input(u));
                QVERIFY(same_values(fused.linear_of_gelu(u, w, b), plain.linear(torch::gelu(u), w2, b2)));
                fused.set_training(true);
                plain.set_training(true);
            }
            sgd_step({&w, &w2, &b, &b2}, {&fused, &plain});
        }
        if (r.scaling != Fp8Scaling::Delayed) return;
        fused.sync_device_scaling_to_host();
        plain.sync_device_scaling_to_host();
        for (auto role : {OperandRole::Input, OperandRole::Weight, OperandRole::GradOutput})
            for (auto format : {NumberFormat::E4M3, NumberFormat::E5M2}) {
                QVERIFY(fused.delayed(role, format).history() == plain.delayed(role, format).history());
                QCOMPARE(fused.delayed(role, format).scale(), plain.delayed(role, format).scale());
            }
    }

    // The native executor's 16-bit layer: its gradients arrive in the 16-bit dtype, rounded by
    // the op that made them, and its GEMMs round their own outputs, so no row sees those casts.
    // Their rows count where the values lie (the subnormal share, counted here independently)
    // and say "not measured" for what only the cast could tell; an FP32 input's cast is seen
    // and judged as before. Before 2026-12-07 grad_output read "underflow 0, subnormal 0, SNR
    // exact" over values 80% in FP16's subnormal range, and weight_grad was labelled fp32.
    void sixteenBitRowsSayWhatTheirValuesShow_data()
    {
        QTest::addColumn<QString>("format");
        QTest::addColumn<bool>("inputIn16Bit");
        QTest::newRow("fp16, FP32 input") << "fp16" << false;
        QTest::newRow("fp16, FP16 input") << "fp16" << true;
        QTest::newRow("bf16, FP32 input") << "bf16" << false;
    }
    void sixteenBitRowsSayWhatTheirValuesShow()
    {
        QFETCH(QString, format);
        QFETCH(bool, inputIn16Bit);
        const NumberFormat f = *parse_number_format(format.toStdString());
        const auto dtype = f == NumberFormat::FP16 ? torch::kHalf : torch::kBFloat16;
        const double min_normal = format_info(f).min_normal;
        LayerGemm layer("fc", GemmFormats{f, f, f}, Fp8Recipe{}, GemmBackend::Native);
        layer.set_native(true);
        torch::manual_seed(5);
        const int64_t M = 48, K = 64, N = 32;
        auto w = (torch::randn({N, K}) * 0.05).requires_grad_(true);
        const auto x32 = torch::randn({M, K});
        const auto x = inputIn16Bit ? x32.to(dtype) : x32;
        layer.arm_telemetry(true);
        const auto y = layer.linear(x, w, {});
        QCOMPARE(y.scalar_type(), dtype);
        // Gradients uniform in +-2^-12: a quarter below FP16's 2^-14 (its subnormals).
        const auto dy = (torch::rand({M, N}) * 2 - 1).mul(std::ldexp(1.0, -12)).to(dtype);
        y.backward(dy);
        layer.arm_telemetry(false);
        const auto rows = layer.take_stats();
        const auto row = [&](const char* role) {
            const auto it =
                std::find_if(rows.begin(), rows.end(), [&](const TensorStats& t) { return t.role == role; });
            return it == rows.end() ? TensorStats{} : *it;
        };
        const auto subnormal_share = [&](const torch::Tensor& t) {
            const auto a = t.to(torch::kFloat64).abs();
            return ((a > 0) & (a < min_normal)).sum().item<double>() / static_cast<double>(t.numel());
        };
        const auto values_only = [&](const TensorStats& t, const torch::Tensor& values, const char* role) {
            QVERIFY2(t.format == format.toStdString(), role);
            QCOMPARE(t.count, values.numel());
            QCOMPARE(t.subnormal, subnormal_share(values));
            QCOMPARE(t.underflow, -1.0);
            QCOMPARE(t.overflow, -1.0);
            QVERIFY2(std::isnan(t.quant_snr_db) && std::isnan(t.quant_mse), role);
        };
        values_only(row("grad_output"), dy, "grad_output");
        if (QTest::currentTestFailed()) return;
        values_only(row("weight_grad"), w.grad(), "weight_grad");
        if (QTest::currentTestFailed()) return;
        values_only(row("output"), y, "output");
        if (QTest::currentTestFailed()) return;
        if (f == NumberFormat::FP16) QVERIFY(row("grad_output").subnormal > 0.2); // the case that read 0
        const auto input = row("input");
        if (inputIn16Bit) {
            values_only(input, x, "input");
        } else {
            QCOMPARE(input.format, format.toStdString()); // the cast from FP32, seen and judged
            QVERIFY(input.underflow >= 0.0 && input.overflow >= 0.0);
            QVERIFY(std::isfinite(input.quant_snr_db));
        }
        // A weight gradient that never came (the loss did not reach the layer): not measured
        // either, rather than "underflow 0%, SNR 0 dB".
        const TensorStats none = tensor_stats_from_row(nullptr, f, 1.0f, 0, true, /*values_only=*/true);
        QCOMPARE(none.underflow, -1.0);
        QCOMPARE(none.overflow, -1.0);
        QVERIFY(std::isnan(none.quant_snr_db));
    }

    // fp8-block in the native executor multiplies the codes its casts write with their block
    // scales (layer_gemm_blockwise.cpp; cuBLAS's blockwise GEMM on a GPU): on the CPU the same
    // path gives the emulator's outputs, gradients and telemetry bit for bit, over steps whose
    // weights move, two micro-batches a step, both kinds of scale, with and without a bias,
    // blocks of zeros, one holding a NaN, one past E4M3's range, and shapes it must refuse.
    void blockwiseLayerMatchesEmulator_data()
    {
        QTest::addColumn<bool>("powerOfTwo");
        QTest::addColumn<bool>("withBias");
        QTest::newRow("power-of-two scales, bias") << true << true;
        QTest::newRow("power-of-two scales, no bias") << true << false;
        QTest::newRow("FP32 scales, bias") << false << true;
    }
    void blockwiseLayerMatchesEmulator()
    {
        QFETCH(bool, powerOfTwo);
        QFETCH(bool, withBias);
        const GemmFormats f{NumberFormat::E4M3, NumberFormat::E4M3, NumberFormat::E4M3};
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Block128;
        r.block_power_of_two = powerOfTwo;
        LayerGemm emulated("fc", f, r, GemmBackend::Emulated), native("fc", f, r, GemmBackend::Native);
        native.set_native(true);
        const int64_t M = 256, K = 384, N = 256;
        torch::manual_seed(11);
        const auto w0 = torch::randn({N, K}) * 0.05;
        const auto bias = withBias ? torch::randn({N}) : torch::Tensor();
        QVERIFY(native.blockwise_codes_eligible(torch::zeros({M, K}), w0));
        QVERIFY(!native.blockwise_codes_eligible(torch::zeros({128, K}), w0));     // one block along M (wgrad's K)
        QVERIFY(!native.blockwise_codes_eligible(torch::zeros({M, 320}), w0));     // K not whole blocks
        QVERIFY(!native.blockwise_codes_eligible(torch::zeros({M, K}), w0.narrow(0, 0, 128)));
        LayerGemm hybrid("fc", {NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2}, r, GemmBackend::Native);
        QVERIFY(!hybrid.blockwise_codes_eligible(torch::zeros({M, K}), w0)); // E5M2 gradients: the emulator's path
        auto w = w0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
        for (int step = 0; step < 3; ++step) {
            for (int micro = 0; micro < 2; ++micro) {
                // Telemetry as the trainer takes it: the first micro-batch of a step, read
                // before the next one adds to the weight's gradient.
                const bool armed = step == 1 && micro == 0;
                emulated.arm_telemetry(armed);
                native.arm_telemetry(armed);
                auto x0 = torch::randn({M, K}) * std::ldexp(1.0, 2 * step - 3 + micro);
                x0.narrow(0, 3, 1).narrow(1, 128, 128).zero_();
                x0[7][200] = 1.0e6f; // its block's scale below 1
                if (step == 2 && micro == 1) x0[9][5] = std::numeric_limits<float>::quiet_NaN();
                const auto x = x0.clone().requires_grad_(true), x2 = x0.clone().requires_grad_(true);
                const auto y = emulated.linear(x, w, bias), y2 = native.linear(x2, w2, bias);
                QCOMPARE(y2.scalar_type(), torch::kBFloat16);
                QVERIFY2(same_values(y, y2), qPrintable(QString("step %1.%2: outputs differ").arg(step).arg(micro)));
                const auto dy = (torch::randn({M, N}) * 1e-3).to(torch::kBFloat16);
                y.backward(dy.to(torch::kFloat32));
                y2.backward(dy);
                QVERIFY2(same_values(x.grad(), x2.grad()), qPrintable(QString("step %1.%2: dx differs").arg(step).arg(micro)));
                if (!armed) continue;
                emulated.arm_telemetry(false);
                native.arm_telemetry(false);
                const auto want = emulated.take_stats(), got = native.take_stats();
                // output, weight and its block scales, input and its, grad_output and its, weight_grad
                QCOMPARE(want.size(), size_t(8));
                compare_stats(got, want);
                if (QTest::currentTestFailed()) return;
            }
            QVERIFY2(same_values(w.grad(), w2.grad()), qPrintable(QString("step %1: dW differs").arg(step)));
            torch::NoGradGuard no_grad; // an optimizer step: new weight versions, caches refilled
            {
                // An evaluation between steps (no gradient, no weight cache, no cast along M):
                // the same outputs, and the training that follows is untouched.
                emulated.set_training(false);
                native.set_training(false);
                const auto x = torch::randn({M, K});
                QVERIFY(same_values(emulated.linear(x, w, bias), native.linear(x, w2, bias)));
                emulated.set_training(true);
                native.set_training(true);
            }
            sgd_step({&w, &w2}, {&emulated, &native});
        }
        QCOMPARE(QString::fromStdString(native.backend_used()), QString("emulated")); // on a CPU: the dequantized codes
    }

    // The backend a layer reports (the layer_backends event, the precision table) is what its
    // training GEMMs ran: an evaluation or a sample (single rows, which fp8-block's blockwise
    // GEMM and _scaled_mm cannot take) ran others, which read as "native+emulated" on a GPU.
    void evaluationLeavesTheReportedBackend()
    {
        Fp8Recipe r;
        LayerGemm layer("fc", {NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2}, r, GemmBackend::Emulated);
        const auto w = torch::randn({16, 32}), x = torch::randn({8, 32});
        layer.set_training(false);
        {
            torch::NoGradGuard no_grad;
            layer.linear(x, w, {});
        }
        QCOMPARE(QString::fromStdString(layer.backend_used()), QString("none"));
        layer.set_training(true);
        layer.linear(x, w, {});
        QCOMPARE(QString::fromStdString(layer.backend_used()), QString("emulated"));
    }

    // On a GPU the native executor hands an fp8-block layer's 16-bit input to the emulator's
    // linear as it is (fp8_block_reads_as_is), and the blockwise GEMM's BF16 output comes back
    // as a BF16 dy: a GEMM of the layer left in FP32 must widen its operand, not multiply BF16
    // by FP32 (which threw "mat1 and mat2 must have the same dtype" in every such layer). Here
    // on the CPU: a BF16 input gives the outputs and gradients of the same values in FP32. A
    // BF16 dy cannot reach the layer on the CPU (autograd widens it first), so the FP32 dgrad
    // row checks the cast that dy goes through instead.
    void fp8BlockLayerWithAnFp32GemmTakesA16BitInput_data()
    {
        QTest::addColumn<QString>("forward");
        QTest::addColumn<QString>("dgrad");
        QTest::addColumn<QString>("wgrad");
        QTest::newRow("fp32 forward") << "fp32" << "e4m3" << "e4m3";
        QTest::newRow("fp32 dgrad") << "e4m3" << "fp32" << "e4m3";
        QTest::newRow("fp32 wgrad") << "e4m3" << "e4m3" << "fp32";
    }
    void fp8BlockLayerWithAnFp32GemmTakesA16BitInput()
    {
        QFETCH(QString, forward);
        QFETCH(QString, dgrad);
        QFETCH(QString, wgrad);
        const GemmFormats f{*parse_number_format(forward.toStdString()), *parse_number_format(dgrad.toStdString()),
                            *parse_number_format(wgrad.toStdString())};
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Block128;
        LayerGemm wide("fc", f, r, GemmBackend::Emulated), narrow("fc", f, r, GemmBackend::Emulated);
        torch::manual_seed(13);
        const auto w0 = torch::randn({128, 256}) * 0.05, bias = torch::randn({128});
        const auto x0 = torch::randn({64, 256}).to(torch::kBFloat16);
        auto w = w0.clone().requires_grad_(true), w2 = w0.clone().requires_grad_(true);
        const auto x = x0.to(torch::kFloat32).requires_grad_(true), x2 = x0.clone().requires_grad_(true);
        const auto y = wide.linear(x, w, bias), y2 = narrow.linear(x2, w2, bias);
        QVERIFY(same_values(y, y2));
        const auto dy = torch::randn({64, 128});
        y.backward(dy);
        y2.backward(dy);
        QCOMPARE(x2.grad().scalar_type(), torch::kBFloat16);
        QVERIFY(same_values(x.grad().to(torch::kBFloat16), x2.grad()));
        QVERIFY(same_values(w.grad(), w2.grad()));
        if (f.dgrad == NumberFormat::FP32) {
            const auto dy16 = dy.to(torch::kBFloat16);
            const auto cast = narrow.round_operand(dy16, f.dgrad, OperandRole::GradOutput, 1, nullptr);
            QCOMPARE(cast.scalar_type(), torch::kFloat32);
            QVERIFY(same_values(cast, dy16));
        }
    }

    // A whole run of fp8-block (E4M3 throughout) in the native executor, whose linears all take
    // the blockwise path above (every dimension whole 128-blocks, at least two): the same
    // losses and telemetry, bit for bit, as the native executor with that path turned off
    // (each linear then runs the emulator's autograd); and against the emulator itself within
    // 1e-2 (the native executor hands activations on in BF16).
    void blockwiseRunAgreesWithEmulator()
    {
        auto config = golden_project();
        config.training.steps = 8;
        config.eval.interval = 0;
        config.model.n_embd = 256;
        config.model.n_head = 4;
        config.model.n_layer = 1;
        config.model.context_length = 64; // 4 x 64 = 256 rows a micro-batch
        config.precision.preset = "fp8-e4m3";
        config.precision.fp8.scaling = Fp8Scaling::Block128;
        config.telemetry.interval = 3;
        const auto emulated = train(config, GemmBackend::Emulated);
        const auto native = train(config, GemmBackend::Native);
        LayerGemm::set_blockwise_codes_enabled(false);
        const auto split = train(config, GemmBackend::Native);
        LayerGemm::set_blockwise_codes_enabled(true);
        QCOMPARE(native.steps.size(), split.steps.size());
        for (size_t i = 0; i < native.steps.size(); ++i) {
            QCOMPARE(native.steps[i].train_loss, split.steps[i].train_loss);
            QCOMPARE(native.steps[i].grad_norm, split.steps[i].grad_norm);
        }
        QCOMPARE(native.frames.size(), split.frames.size());
        QVERIFY(!native.frames.empty());
        for (size_t i = 0; i < native.frames.size(); ++i) {
            const auto &a = native.frames[i].tensors, &b = split.frames[i].tensors;
            QCOMPARE(a.size(), b.size());
            for (size_t j = 0; j < a.size(); ++j) {
                const auto at = qPrintable(QString::fromStdString(a[j].layer + " " + a[j].role));
                QVERIFY2(a[j].role == b[j].role && a[j].exponent_counts == b[j].exponent_counts, at);
                QVERIFY2(a[j].underflow == b[j].underflow && a[j].quant_mse == b[j].quant_mse, at);
                QVERIFY2(a[j].update_ratio == b[j].update_ratio && a[j].amax == b[j].amax, at);
            }
        }
        // 7e-3 measured (256 wide): the bit-exact comparison above is this test's check.
        const double executors = worst_loss_difference(native, emulated);
        QVERIFY2(executors < 1e-2, qPrintable(QString("native against emulated %1").arg(executors)));
        QVERIFY(native.steps.back().train_loss < native.steps.front().train_loss - 0.2);
    }

    // Which FP8 products go to _scaled_mm on a GPU (the rest multiply the dequantised codes):
    // Hopper has no E5M2 x E5M2, which an E5M2 forward GEMM would ask for.
    void scaledMmTakesWhatHopperMultiplies()
    {
        const auto e4m3 = [](int64_t r, int64_t c) { return torch::zeros({r, c}).to(torch::kFloat8_e4m3fn); };
        const auto e5m2 = [](int64_t r, int64_t c) { return torch::zeros({r, c}).to(torch::kFloat8_e5m2); };
        const auto one = torch::ones({});
        const auto bf16 = torch::kBFloat16;
        QVERIFY(scaled_mm_takes(e4m3(32, 64), one, e4m3(64, 16), one, bf16));
        QVERIFY(scaled_mm_takes(e5m2(32, 64), one, e4m3(64, 16), one, bf16)); // HYBRID's dgrad
        QVERIFY(scaled_mm_takes(e4m3(32, 64), one, e5m2(64, 16), one, torch::kFloat32));
        QVERIFY(!scaled_mm_takes(e5m2(32, 64), one, e5m2(64, 16), one, bf16));
        // K or N not a multiple of 16 is padded (scaled_mm_padded); M may be any.
        QVERIFY(scaled_mm_takes(e4m3(32, 72), one, e4m3(72, 16), one, bf16));
        QVERIFY(scaled_mm_takes(e4m3(24, 64), one, e4m3(64, 16), one, bf16));
        // Row-wise: (M, 1) and (1, N) scales, E4M3 both sides, BF16 out.
        const auto rows = torch::ones({32, 1}), cols = torch::ones({1, 16});
        QVERIFY(scaled_mm_takes(e4m3(32, 64), rows, e4m3(64, 16), cols, bf16));
        QVERIFY(!scaled_mm_takes(e4m3(32, 64), rows, e4m3(64, 16), cols, torch::kFloat32));
        QVERIFY(!scaled_mm_takes(e5m2(32, 64), rows, e4m3(64, 16), cols, bf16));
        QVERIFY(!scaled_mm_takes(e4m3(32, 64), cols, e4m3(64, 16), rows, bf16));
    }

    // A role cast in two formats keeps a delayed-scaling state per format. An E5M2 forward's
    // input goes to the wgrad GEMM as E4M3 (saved_operand_format): scaled by the E5M2 state's
    // 57344 / amax, every value past amax / 128 would clip at 448 (or become NaN) and the
    // weight gradient would be wrong by orders of magnitude. Both executors, several steps.
    void eachFormatOfARoleHasItsOwnScale_data()
    {
        QTest::addColumn<bool>("native");
        QTest::newRow("emulated") << false;
        QTest::newRow("native") << true;
    }
    void eachFormatOfARoleHasItsOwnScale()
    {
        QFETCH(bool, native);
        const GemmFormats f{NumberFormat::E5M2, NumberFormat::E5M2, NumberFormat::E5M2};
        Fp8Recipe r;
        r.amax_history_length = 4;
        LayerGemm layer("fc", f, r, native ? GemmBackend::Native : GemmBackend::Emulated);
        layer.set_native(native);
        torch::manual_seed(9);
        const auto w = torch::randn({16, 48}).requires_grad_(true);
        for (int step = 0; step < 3; ++step) {
            const auto x = torch::randn({32, 48}).requires_grad_(true);
            const auto dy = torch::randn({32, 16}).to(layer.output_dtype());
            layer.linear(x, w, {}).backward(dy);
            const auto exact = at::matmul(dy.to(torch::kFloat32).t(), x.detach()); // (N, K), FP32
            const double error = ((w.grad() - exact).norm() / exact.norm()).item<double>();
            // E5M2 and E4M3 operands: a few percent at most.
            QVERIFY2(error < 0.1, qPrintable(QString("step %1: relative error of dW %2").arg(step).arg(error)));
            w.mutable_grad() = torch::Tensor();
            layer.invalidate_weight_cache();
        }
        layer.sync_device_scaling_to_host();
        // The input was measured in both formats, each with its own range.
        const float e5m2 = layer.delayed(OperandRole::Input, NumberFormat::E5M2).scale();
        const float e4m3 = layer.delayed(OperandRole::Input, NumberFormat::E4M3).scale();
        QVERIFY2(std::abs(e5m2 / e4m3 - 57344.0f / 448.0f) < 1e-3f * (57344.0f / 448.0f),
                 qPrintable(QString("scales %1 (e5m2) and %2 (e4m3)").arg(e5m2).arg(e4m3)));
    }

    // Checkpoints written before the per-format states (one state per role) still load: each
    // role's state goes to the format it is cast in first (HYBRID: input and weight E4M3,
    // gradients E5M2), the other format starts fresh.
    void checkpointWithOneStatePerRoleLoads()
    {
        const GemmFormats hybrid{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2};
        torch::serialize::OutputArchive old;
        old.write("layers/fc/formats", torch::tensor({static_cast<int64_t>(hybrid.forward),
                                                      static_cast<int64_t>(hybrid.dgrad),
                                                      static_cast<int64_t>(hybrid.wgrad)}));
        for (int role = 0; role < 3; ++role) {
            old.write("layers/fc/" + std::to_string(role) + "/history", torch::tensor({1.0f + role, 0.5f, 0.0f, 0.0f}));
            old.write("layers/fc/" + std::to_string(role) + "/scale", torch::tensor(10.0f + role));
        }
        std::ostringstream bytes;
        old.save_to(bytes);
        torch::serialize::InputArchive in;
        std::istringstream from(bytes.str());
        in.load_from(from);
        Fp8Recipe r;
        r.amax_history_length = 4;
        LayerGemm layer("fc", {NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16}, r, GemmBackend::Emulated);
        layer.load(in);
        QCOMPARE(layer.formats().dgrad, NumberFormat::E5M2);
        QCOMPARE(layer.delayed(OperandRole::Input, NumberFormat::E4M3).scale(), 10.0f);
        QCOMPARE(layer.delayed(OperandRole::Weight, NumberFormat::E4M3).scale(), 11.0f);
        QCOMPARE(layer.delayed(OperandRole::GradOutput, NumberFormat::E5M2).scale(), 12.0f);
        QCOMPARE(layer.delayed(OperandRole::GradOutput, NumberFormat::E5M2).history()[0], 3.0f);
        QCOMPARE(layer.delayed(OperandRole::Input, NumberFormat::E5M2).scale(), 1.0f); // fresh
        QCOMPARE(layer.delayed(OperandRole::GradOutput, NumberFormat::E4M3).history()[0], 0.0f);
    }

    // An E5M2 forward GEMM (both operands E5M2): the native layer multiplies the dequantised
    // codes (the route a GPU takes too, per scaledMmTakesWhatHopperMultiplies) and gives the
    // emulator's output bit for bit.
    void e5m2ForwardMatchesEmulator()
    {
        const GemmFormats f{NumberFormat::E5M2, NumberFormat::E5M2, NumberFormat::E5M2};
        Fp8Recipe r;
        r.amax_history_length = 4;
        LayerGemm emulated("fc", f, r, GemmBackend::Emulated), native("fc", f, r, GemmBackend::Native);
        native.set_native(true);
        torch::manual_seed(3);
        const auto w = torch::randn({16, 48}), x = torch::randn({32, 48}) * 100.0, bias = torch::randn({16});
        for (int step = 0; step < 3; ++step) {
            const auto y = emulated.linear(x, w, bias), y2 = native.linear(x, w, bias);
            QVERIFY2(same_values(y, y2), qPrintable(QString("step %1").arg(step)));
            QVERIFY(torch::isfinite(y).all().item<bool>());
        }
    }

    // The FP8 GEMM's CPU fallback computes what the emulated GEMM computes: exact products of
    // the dequantised codes, FP32 accumulation, one rounding to BF16 (bias before it).
    void fp8GemmMatchesEmulator()
    {
        torch::manual_seed(7);
        const auto x = torch::randn({32, 48}), w = torch::randn({16, 48}) * 0.1, bias = torch::randn({16});
        Fp8Recipe r;
        r.scaling = Fp8Scaling::Current;
        const auto x8 = quantize_fp8_native(x, NumberFormat::E4M3, r, nullptr, false);
        const auto w8 = quantize_fp8_native(w, NumberFormat::E4M3, r, nullptr, false);
        bool native = true;
        const auto y = fp8_gemm(x8.codes, x8.inv_scale, w8.codes.t(), w8.inv_scale, bias, torch::kBFloat16, true, &native);
        QVERIFY(!native);
        QCOMPARE(y.scalar_type(), torch::kBFloat16);
        LayerGemm layer("l", {NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2}, r, GemmBackend::Emulated);
        const auto expected = layer.gemm(x8.dequantized(), w8.dequantized().t(), NumberFormat::E4M3, bias);
        QVERIFY(same_values(y, expected));
    }

    // fp8_gemm's own _scaled_mm call, run by the CPU's _scaled_mm: with and without a bias (no
    // bias must reach it as no bias at all), per tensor and per row, E5M2 x E4M3 as the dgrad
    // and wgrad GEMMs call it. Codes of small integers and power-of-two scales make every
    // product and sum exact, so the answer is known to the bit.
    void scaledMmCallTakesEveryGemmsArguments_data()
    {
        QTest::addColumn<bool>("bias");
        QTest::addColumn<bool>("rowwise");
        QTest::addColumn<bool>("e5m2_a");
        QTest::addColumn<bool>("fast_accum");
        QTest::addColumn<bool>("transposed_a_scale");
        QTest::newRow("forward, bias") << true << false << false << true << false;
        QTest::newRow("forward, no bias") << false << false << false << true << false;
        QTest::newRow("dgrad e5m2 x e4m3") << false << false << true << false << false;
        QTest::newRow("rowwise forward, bias") << true << true << false << true << false;
        QTest::newRow("rowwise, no bias") << false << true << false << false << false;
        // The per-row wgrad hands over dy's (1, M) scale transposed: (M, 1) with strides (1, M),
        // contiguous to LibTorch, and refused by _scaled_mm's stride check ("expected
        // scale_a.stride(1) to be 1") on the CPU and on some of its CUDA routes (audit
        // 'cudareview').
        QTest::newRow("rowwise wgrad, transposed a scale") << false << true << true << false << true;
    }
    void scaledMmCallTakesEveryGemmsArguments()
    {
        QFETCH(bool, bias);
        QFETCH(bool, rowwise);
        QFETCH(bool, e5m2_a);
        QFETCH(bool, fast_accum);
        QFETCH(bool, transposed_a_scale);
        const int64_t M = 16, K = 32, N = 32;
        const auto values = [](int64_t rows, int64_t cols, int64_t seed) {
            return (torch::arange(rows * cols).reshape({rows, cols}) * seed % 5 - 2).to(torch::kFloat32);
        };
        const auto a = values(M, K, 3), b = values(N, K, 7); // b as the weight (N, K)
        const auto a_codes = a.to(e5m2_a ? torch::kFloat8_e5m2 : torch::kFloat8_e4m3fn);
        const auto b_codes = b.to(torch::kFloat8_e4m3fn).t(); // (K, N), column-major
        torch::Tensor a_inv = torch::full({}, 0.5f), b_inv = torch::full({}, 4.0f);
        if (rowwise) {
            a_inv = torch::pow(2.0f, torch::arange(M).remainder(4).to(torch::kFloat32) - 2).unsqueeze(1); // (M, 1)
            b_inv = torch::pow(2.0f, torch::arange(N).remainder(3).to(torch::kFloat32)).unsqueeze(0);      // (1, N)
            if (transposed_a_scale) a_inv = a_inv.reshape({1, M}).t(); // (M, 1), strides (1, M)
            QCOMPARE(a_inv.stride(1), transposed_a_scale ? M : int64_t(1));
        }
        const auto bias_values = bias ? torch::arange(N).to(torch::kFloat32) * 0.25 : torch::Tensor();
        const auto y = scaled_mm_call(a_codes, a_inv, b_codes, b_inv, bias_values, torch::kBFloat16, fast_accum);
        auto expected = torch::mm(a * a_inv, b.t() * b_inv);
        if (bias) expected = expected + bias_values;
        QCOMPARE(y.scalar_type(), torch::kBFloat16);
        QCOMPARE(y.sizes(), (torch::IntArrayRef{M, N}));
        QVERIFY(torch::equal(y, expected.to(torch::kBFloat16)));
    }

    // _scaled_mm wants every dimension a multiple of 16 (on CUDA): fp8_gemm pads the codes with
    // zeros, row-wise scales with ones and the bias with zeros, and cuts the product back.
    void scaledMmPaddedIsTheUnpaddedProduct_data()
    {
        QTest::addColumn<int>("M");
        QTest::addColumn<int>("K");
        QTest::addColumn<int>("N");
        QTest::addColumn<bool>("rowwise");
        QTest::addColumn<bool>("bias");
        QTest::newRow("a vocabulary of 65, bias") << 32 << 64 << 65 << false << true;
        QTest::newRow("odd tokens and K, row-wise") << 20 << 40 << 32 << true << false;
        QTest::newRow("all three odd, row-wise, bias") << 33 << 24 << 30 << true << true;
        QTest::newRow("aligned: the plain call") << 16 << 32 << 16 << false << false;
        QTest::newRow("one row (sampling), row-wise") << 1 << 32 << 16 << true << false;
    }
    void scaledMmPaddedIsTheUnpaddedProduct()
    {
        QFETCH(int, M);
        QFETCH(int, K);
        QFETCH(int, N);
        QFETCH(bool, rowwise);
        QFETCH(bool, bias);
        const auto g = exact_fp8_gemm(M, K, N, rowwise, bias);
        const auto a_codes = g.a.to(torch::kFloat8_e4m3fn);
        const auto b_codes = g.b.to(torch::kFloat8_e4m3fn).t(); // (K, N), column-major
        const auto y = scaled_mm_padded(a_codes, g.a_inv, b_codes, g.b_inv, g.bias, torch::kBFloat16, false);
        QCOMPARE(y.sizes(), (torch::IntArrayRef{M, N}));
        QVERIFY(y.is_contiguous());
        QVERIFY(torch::equal(y, g.expected.to(torch::kBFloat16)));
    }

    // The per-row cast against the emulator's, along either dimension: scales one per slice
    // (the contraction dimension kept as size 1), and codes * inv_scale equal to the
    // emulator's values bit for bit, zero rows, NaN and Inf included.
    void rowwiseCastMatchesEmulator_data()
    {
        QTest::addColumn<int>("format");
        QTest::addColumn<bool>("saturate");
        QTest::addColumn<bool>("powerOfTwo");
        for (auto f : {NumberFormat::E4M3, NumberFormat::E5M2})
            for (bool sat : {true, false})
                for (bool pow2 : {false, true})
                    QTest::addRow("%s/%s/%s", format_name(f), sat ? "saturate" : "propagate", pow2 ? "pow2" : "fp32")
                        << static_cast<int>(f) << sat << pow2;
    }
    void rowwiseCastMatchesEmulator()
    {
        QFETCH(int, format);
        QFETCH(bool, saturate);
        QFETCH(bool, powerOfTwo);
        const auto f = static_cast<NumberFormat>(format);
        Fp8Recipe r;
        r.scaling = Fp8Scaling::PerRow;
        r.saturate = saturate;
        r.rowwise_power_of_two = powerOfTwo;
        torch::manual_seed(3);
        auto x = torch::randn({24, 40}) * torch::exp2(torch::arange(24).to(torch::kFloat32) - 12).unsqueeze(1);
        x[2].zero_();                 // a row of zeros: torchao's amax floor 1e-12
        x[5][7] = NAN;                // a row holding NaN comes out NaN (torchao) ...
        x[9][1] = INFINITY;           // ... and one holding Inf
        x[11] *= std::ldexp(1.0f, -130); // a tiny amax: the floor again, values flush to zero
        for (int64_t k_dim : {1, 0}) {
            const auto expected = quantize_fp8(x, f, r, k_dim, nullptr);
            const auto got = quantize_fp8_rowwise_native(x, f, r, k_dim);
            const std::vector<int64_t> scale_shape = k_dim == 1 ? std::vector<int64_t>({24, 1}) : std::vector<int64_t>({1, 40});
            QCOMPARE(got.scale.sizes().vec(), scale_shape);
            QVERIFY(per_row(got));
            QVERIFY2(same_values(got.dequantized(), expected.values), qPrintable(QString("k_dim %1").arg(k_dim)));
        }
    }

    // A per-row FP8 GEMM's CPU route is the emulated GEMM of the dequantized operands, with
    // (M, 1) and (1, N) scales; on CUDA the same scales go to _scaled_mm's row-wise mode.
    void rowwiseGemmMatchesEmulator()
    {
        torch::manual_seed(9);
        const auto x = torch::randn({32, 48}), w = torch::randn({16, 48}) * 0.1, bias = torch::randn({16});
        Fp8Recipe r;
        r.scaling = Fp8Scaling::PerRow;
        const auto x8 = quantize_fp8_rowwise_native(x, NumberFormat::E4M3, r, 1); // (32, 1)
        const auto w8 = quantize_fp8_rowwise_native(w, NumberFormat::E4M3, r, 1); // (16, 1)
        bool native = true;
        const auto y = fp8_gemm(x8.codes, x8.inv_scale, w8.codes.t(), w8.inv_scale.t(), bias, torch::kBFloat16, true, &native);
        QVERIFY(!native);
        LayerGemm layer("l", {NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2}, r, GemmBackend::Emulated);
        const auto expected = layer.gemm(x8.dequantized(), w8.dequantized().t(), NumberFormat::E4M3, bias);
        QVERIFY(same_values(y, expected));
        QVERIFY(!same_values(y, layer.gemm(x, w.t(), NumberFormat::E4M3, bias))); // the cast mattered
    }

    // The delayed-scaling state crosses executors through a checkpoint: an emulated run's
    // histories are what the native run continues from, and what it writes back.
    void checkpointCrossesExecutors()
    {
        QTemporaryDir dir;
        auto config = fp8_hybrid_project(4, GemmBackend::Emulated);
        const std::string emulated = dir.filePath("emulated.pt").toStdString();
        const std::string native = dir.filePath("native.pt").toStdString();
        {
            Trainer trainer(config);
            RunCapture c;
            trainer.run(c);
            trainer.save_checkpoint(emulated);
        }
        config.precision.backend = GemmBackend::Native;
        config.training.steps = 6;
        Trainer trainer(config);
        trainer.load_checkpoint(emulated);
        trainer.save_checkpoint(native); // before any step: the state must round-trip unchanged
        torch::serialize::InputArchive a, b;
        a.load_from(emulated);
        b.load_from(native);
        for (const char* key : {"layers/blocks.0.attn.qkv/0/e4m3/history", "layers/blocks.1.mlp.fc2/2/e5m2/history",
                                "layers/lm_head/1/e4m3/scale"}) {
            torch::Tensor ta, tb;
            a.read(key, ta);
            b.read(key, tb);
            QVERIFY2(same_values(ta, tb), key);
            QVERIFY2(ta.abs().sum().item<double>() > 0.0, key); // four steps recorded something
        }
        RunCapture rest;
        trainer.run(rest);
        QCOMPARE(rest.steps.size(), size_t(2));
        QVERIFY(std::isfinite(rest.steps.back().train_loss));
    }

    // And the other way: the native executor's device-side histories, written back into the
    // checkpoint, are what the emulator continues from. (On an H200 the GPU's checkpoint,
    // resumed on the CPU, drifted 4% from the CPU's run within 4 steps: bench/cuda_checks'
    // "resume across devices (fp8-hybrid)". This holds the CPU's half of that path.)
    void nativeCheckpointResumesEmulated()
    {
        QTemporaryDir dir;
        auto config = fp8_hybrid_project(8, GemmBackend::Emulated);
        const auto losses = [](const RunCapture& c) {
            std::vector<double> v;
            for (const auto& s : c.steps) v.push_back(s.train_loss);
            return v;
        };
        std::vector<double> straight;
        {
            Trainer t(config);
            RunCapture r;
            t.run(r);
            straight = losses(r);
        }
        const std::string path = dir.filePath("native.pt").toStdString();
        std::vector<double> resumed;
        {
            auto c = config;
            c.precision.backend = GemmBackend::Native;
            c.training.steps = 4;
            Trainer t(c);
            RunCapture r;
            t.run(r);
            t.save_checkpoint(path);
            resumed = losses(r);
        }
        // The four steps' amaxes are in the file, for every role the recipe casts: one per
        // micro-batch (grad_accum 2) for inputs and output gradients, one per step for weights.
        torch::serialize::InputArchive archive;
        archive.load_from(path);
        QCOMPARE(config.training.grad_accum, int64_t(2));
        for (const auto& [key, records] : std::vector<std::pair<std::string, int64_t>>{
                 {"layers/blocks.0.attn.qkv/0/e4m3/history", 8},
                 {"layers/blocks.0.attn.qkv/1/e4m3/history", 4},
                 {"layers/blocks.1.mlp.fc2/2/e5m2/history", 8},
                 {"layers/lm_head/2/e5m2/history", 8}}) {
            torch::Tensor history;
            archive.read(key, history);
            QVERIFY2(history.narrow(0, 0, records).gt(0).all().item<bool>(), key.c_str());
            QVERIFY2(history.narrow(0, records, history.size(0) - records).eq(0).all().item<bool>(), key.c_str());
        }
        Trainer t(config);
        t.load_checkpoint(path);
        RunCapture r;
        t.run(r);
        for (double l : losses(r)) resumed.push_back(l);
        QCOMPARE(resumed.size(), straight.size());
        // The two executors differ by their GEMMs' rounding (2e-4 relative here, at every step);
        // a history lost in the checkpoint (scale 1 for E5M2 gradients) costs 1e-3 and more
        // within four steps.
        for (size_t i = 0; i < straight.size(); ++i)
            QVERIFY2(std::abs(resumed[i] - straight[i]) <= 5e-4 * straight[i],
                     qPrintable(QStringLiteral("step %1: %2 against %3").arg(i + 1).arg(resumed[i]).arg(straight[i])));
    }

    // training.deterministic on a GPU turns on LibTorch's deterministic mode, which refuses an
    // op with no deterministic kernel; the run then adds how to train without the guarantee.
    // put_ without accumulation is refused on every device, so this LibTorch's own wording is
    // checked here, on the CPU. A CPU run leaves the mode off whatever the setting says.
    void determinismRefusalsAreRecognised()
    {
        auto config = golden_project();
        config.training.deterministic = true;
        config.training.device = "cpu";
        {
            Trainer trainer(config);
            QVERIFY(!at::globalContext().deterministicAlgorithms()); // the CPU's kernels already are
            // Another Trainer built meanwhile set the process's mode for itself: a run takes its
            // own setting again when it starts.
            set_deterministic_kernels(true);
            RunCapture capture;
            trainer.run(capture);
            QVERIFY(!at::globalContext().deterministicAlgorithms());
        }
        const QByteArray users_workspace = qgetenv("CUBLAS_WORKSPACE_CONFIG"); // kept when set
        set_deterministic_kernels(true);
        QVERIFY(at::globalContext().deterministicAlgorithms() && !at::globalContext().deterministicAlgorithmsWarnOnly());
        QVERIFY(!at::globalContext().deterministicFillUninitializedMemory()); // no NaN fill pass per allocation
        QCOMPARE(qgetenv("CUBLAS_WORKSPACE_CONFIG"), users_workspace.isEmpty() ? QByteArray(":4096:8") : users_workspace);
        std::string refusal;
        try {
            auto t = torch::zeros({4});
            t.put_(torch::tensor({int64_t(1)}), torch::ones({1}), /*accumulate=*/false);
        } catch (const std::exception& e) {
            refusal = e.what();
        }
        set_deterministic_kernels(false);
        QVERIFY2(!refusal.empty(), "put_ was not refused in deterministic mode");
        QVERIFY2(is_determinism_refusal(refusal.c_str()), refusal.c_str());
        QVERIFY(!is_determinism_refusal("shape '[2, 3]' is invalid for input of size 5"));
        QVERIFY(!at::globalContext().deterministicAlgorithms());
    }

    // No host syncs in the step (issue 11): on a GPU every item() waits for the queue to drain.
    // The native executor's step, profiled whole on the CPU, calls item() nowhere but inside
    // fused and foreach ops, whose CPU kernels read scalars (the fused AdamW its step counters;
    // their CUDA kernels do not). Every recipe, and telemetry every step (on a GPU its frame is
    // read a step later). What the CPU cannot show: a copy to the host (the step's one read of
    // the norms and the loss is one; on the CPU it is a no-op) and CUDA-only branches;
    // bench/cuda_checks counts the real syncs on a GPU.
    void aNativeStepReadsNoScalar_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<QString>("scaling");
        QTest::addColumn<int>("telemetryInterval");
        QTest::addColumn<bool>("wide"); // 256 wide, 256 rows a micro-batch: fp8-block's codes path takes every linear
        for (const char* preset : {"fp32", "bf16", "fp16"}) QTest::addRow("%s", preset) << preset << "delayed" << 0 << false;
        for (const char* scaling : {"delayed", "current", "rowwise", "mxfp8", "fp8-block", "nvfp4", "mxfp4"})
            QTest::addRow("fp8-hybrid %s", scaling) << "fp8-hybrid" << scaling << 0 << false;
        QTest::newRow("bf16, telemetry every step") << "bf16" << "delayed" << 1 << false;
        QTest::newRow("fp8-hybrid delayed, telemetry every step") << "fp8-hybrid" << "delayed" << 1 << false;
        QTest::newRow("fp8-e4m3 fp8-block from codes, telemetry every step") << "fp8-e4m3" << "fp8-block" << 1 << true;
    }

    void aNativeStepReadsNoScalar()
    {
        QFETCH(QString, preset);
        QFETCH(QString, scaling);
        QFETCH(int, telemetryInterval);
        QFETCH(bool, wide);
        std::vector<std::pair<std::string, std::string>> sets = {
            {"training.device", "cpu"}, // the CPU's ops, whatever this machine has
            {"precision.preset", preset.toStdString()},
            {"precision.fp8.scaling", scaling.toStdString()},
            {"precision.backend", "native"},
            {"telemetry.interval", std::to_string(telemetryInterval)},
            {"training.steps", "5"}};
        if (wide)
            sets.insert(sets.end(), {{"model.n_embd", "256"}, {"model.n_layer", "1"}, {"model.context_length", "64"},
                                     {"training.batch_size", "4"}});
        const auto config = load_project_json("{}", ".", sets);
        Trainer trainer(config);
        OneStepProfile profile(trainer, 2); // step 3, after the first steps' one-time work
        trainer.run(profile);
        QVERIFY(profile.profiled());
        // Ops inside a fused or foreach op, by interval on the same thread.
        std::vector<const ProfiledOp*> fused;
        for (const auto& op : profile.ops())
            if (op.name.starts_with("aten::_fused_") || op.name.starts_with("aten::_foreach_")) fused.push_back(&op);
        const auto inside_fused = [&](const ProfiledOp& op) {
            for (const auto* f : fused)
                if (f->thread == op.thread && f->start_ns <= op.start_ns && op.end_ns <= f->end_ns) return true;
            return false;
        };
        int reads = 0, adamw = 0, matmuls = 0;
        std::string where;
        for (const auto& op : profile.ops()) {
            adamw += op.name == "aten::_fused_adamw_";
            matmuls += op.name == "aten::mm" || op.name == "aten::addmm" || op.name == "aten::bmm";
            if ((op.name == "aten::_local_scalar_dense" || op.name == "aten::item") && !inside_fused(op)) {
                ++reads;
                // The ops around it, so that a failure says where.
                for (const auto& around : profile.ops())
                    if (around.thread == op.thread && around.start_ns <= op.start_ns && op.end_ns <= around.end_ns)
                        where += " " + around.name;
                where += ";";
            }
        }
        QCOMPARE(adamw, 2); // a whole step was seen: the decayed and the undecayed group
        QVERIFY(matmuls >= 6);
        QVERIFY2(reads == 0, qPrintable(QString("%1 scalar reads:%2").arg(reads).arg(QString::fromStdString(where))));
    }
};

QTEST_GUILESS_MAIN(TestNative)
#include "test_native.moc"
