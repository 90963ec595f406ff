// SPDX-License-Identifier: GPL-3.0-or-later
// Per-layer numerics telemetry: exact histogram counts, format fractions, watchers on
// scripted trajectories, attribution of non-finite values, the analytic memory model, and
// the frames reaching the run store.

#include <array>
#include <barrier>
#include <bit>
#include <cmath>
#include <limits>
#include <thread>

#include <torch/torch.h>

#include "cpu_attention_scores.h"
#include "cpu_log_z.h"
#include "cpu_parallel.h"
#include "cpu_update_norms.h"
#include "dataset.h"
#include "edge_values.h"
#include "gpt_model.h"
#include "memory_model.h"
#include "quantize.h"
#include "run_store.h"
#include "telemetry_frame.h"
#include "tensor_stats.h"
#include "thread_count.h"
#include "trainer.h"
#include "watchers.h"

// Qt after LibTorch: Qt's `slots` macro would break torch's IValue::slots().
#include <QtTest>

#include "run_capture.h"

#include <set>

#include <QTemporaryDir>

#include <sqlite3.h>

using namespace mantissa;

namespace {

// A GPT small enough for a test to run its forward and backward in milliseconds.
ModelConfig tiny_model(int64_t layers)
{
    ModelConfig m;
    m.n_layer = layers;
    m.n_head = 2;
    m.n_embd = 16;
    m.context_length = 8;
    return m;
}

// The row's kernels on the CPU: the tensor ops, and the fused scan with each set of its passes
// (AVX-512, where this CPU has it, and portable).
const std::vector<StatsKernel> kCpuStatsKernels = {StatsKernel::TensorOps, StatsKernel::FusedCpu,
                                                   StatsKernel::FusedCpuPortable};
const std::vector<StatsKernel> kFusedCpuKernels = {StatsKernel::FusedCpu, StatsKernel::FusedCpuPortable};

const char* kernel_name(StatsKernel k)
{
    if (k == StatsKernel::TensorOps) return "tensor ops";
    return k == StatsKernel::FusedCpu ? "fused cpu" : "fused cpu, portable";
}

StepMetrics step_metrics(int64_t step, double loss, double grad_norm)
{
    StepMetrics m;
    m.step = step;
    m.train_loss = loss;
    m.grad_norm = grad_norm;
    return m;
}

// Sixty steps' worth: quiet grad norms (1.00 .. 1.02) and one spike of 40 at step 50, for a
// grad-spike watcher over a window of 20.
StepMetrics quiet_then_spike_at_50(int64_t step)
{
    return step_metrics(step, 2.0, step == 50 ? 40.0 : 1.0 + 0.01 * static_cast<double>(step % 3));
}

int count_watcher(const std::vector<WatchAlert>& alerts, const std::string& name)
{
    return static_cast<int>(std::count_if(alerts.begin(), alerts.end(), [&](const auto& a) { return a.watcher == name; }));
}

struct Recorder : TelemetrySink {
    std::vector<StepMetrics> steps;
    std::vector<RunEvent> events;
    std::vector<LayerStatsFrame> frames;
    void on_step(const StepMetrics& m) override { steps.push_back(m); }
    void on_eval(const EvalMetrics&) override {}
    void on_event(const RunEvent& e) override { events.push_back(e); }
    void on_layer_stats(const LayerStatsFrame& f) override { frames.push_back(f); }
};


// The golden project in FP8 HYBRID: `steps` steps, statistics every `telemetry_interval` steps,
// an evaluation every `eval_interval` (0: at the end only).
ProjectConfig golden_fp8(int64_t steps, int64_t eval_interval, int64_t telemetry_interval = 1)
{
    auto config = load_project_file(MANTISSA_TEST_DATA_DIR "/golden_project.json");
    config.training.steps = steps;
    config.eval.interval = eval_interval;
    config.telemetry.interval = telemetry_interval;
    config.precision.preset = "fp8-hybrid";
    return config;
}

// Any FP8 value flushed to zero fires the underflow watcher, and its layer goes to BF16.
void switch_on_any_underflow(ProjectConfig& config)
{
    config.telemetry.watchers.fp8_underflow_max = 0.0;
    config.telemetry.watchers.actions["fp8_underflow"] = WatchAction::SwitchToBf16;
}
} // namespace

Q_DECLARE_METATYPE(mantissa::NumberFormat)
Q_DECLARE_METATYPE(mantissa::Fp8Scaling)

class TestTelemetry : public QObject {
    Q_OBJECT
private slots:
    // An unfused attention layer records what its casts do to the probabilities (the values
    // product's input) and to the gradient of the scores (the scores product's dS), in the
    // formats of its GEMMs: here FP8 attention, E4M3 forward and E5M2 backward. The golden
    // model: 2 blocks, 2 heads, T = 16, micro-batches of 4 (a frame holds one micro-batch's
    // casts). Exact counts: the causal mask's zeros, and in dS also each head's first query,
    // whose one probability is exactly 1 and whose dS is exactly 0.
    void attentionRecordsItsProbabilitiesAndScoreGradients()
    {
        auto config = load_project_file(MANTISSA_TEST_DATA_DIR "/golden_project.json");
        config.training.steps = 3;
        config.telemetry.interval = 1;
        config.precision.preset = "bf16";
        config.precision.layers.push_back(
            {"*.attn.sdpa", NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2, {}});
        RunCapture capture;
        Trainer trainer(config);
        trainer.run(capture);
        QCOMPARE(capture.frames.size(), size_t(3));
        const int64_t maps = 4 * 2, t = 16, masked = maps * t * (t - 1) / 2; // batch x heads T x T maps
        for (const auto& frame : capture.frames) {
            int probs = 0, grads = 0;
            for (const auto& s : frame.tensors) {
                if (s.role != "probs" && s.role != "grad_scores") continue;
                QVERIFY2(s.layer == "blocks.0.attn.sdpa" || s.layer == "blocks.1.attn.sdpa", s.layer.c_str());
                QCOMPARE(s.count, maps * t * t);
                QCOMPARE(s.infs + s.nans, int64_t(0));
                if (s.role == "probs") {
                    ++probs;
                    QCOMPARE(s.format, std::string("e4m3"));
                    QCOMPARE(s.zeros, masked);
                    QCOMPARE(s.amax, 1.0); // each head's first query
                } else {
                    ++grads;
                    QCOMPARE(s.format, std::string("e5m2"));
                    QVERIFY2(s.zeros >= masked + maps, qPrintable(QString::number(s.zeros)));
                    QVERIFY(s.amax > 0.0);
                }
            }
            QCOMPARE(probs, 2);
            QCOMPARE(grads, 2);
        }
    }

    // Every role the engine records is one of tensor_roles(), the list the GUI's role menus
    // and the watchers rank by; and between them, these runs record every role of that list.
    // A block recipe on every GEMM, attention included, records the most: each operand with
    // its block scales, and under nvfp4 the wgrad operands with and without the Hadamard
    // transform.
    void everyRecordedRoleIsAListedRole()
    {
        std::set<std::string> recorded;
        auto run = [&](const std::string& preset, std::optional<Fp8Scaling> scaling, bool per_gemm = false) {
            auto config = load_project_file(MANTISSA_TEST_DATA_DIR "/golden_project.json");
            config.training.steps = 1;
            config.telemetry.interval = 1;
            config.precision.preset = preset;
            if (scaling) {
                config.precision.fp8.scaling = *scaling;
                config.precision.layers.push_back(
                    {"*.attn.sdpa", NumberFormat::E4M3, NumberFormat::E4M3, NumberFormat::E4M3, scaling});
            }
            // A format per GEMM: the backward casts W, dy and x once more (weight_dgrad, ...).
            if (per_gemm)
                config.precision.layers.push_back(
                    {"*.mlp.fc1", NumberFormat::BF16, NumberFormat::E5M2, NumberFormat::E4M3, Fp8Scaling::Delayed});
            RunCapture capture;
            Trainer trainer(config);
            trainer.run(capture);
            QCOMPARE(capture.frames.size(), size_t(1));
            // One row per layer and role: the store keeps one, and a second replaced the first
            // (attention's two products both recorded input_wgrad under nvfp4).
            std::set<std::pair<std::string, std::string>> rows;
            for (const auto& t : capture.frames[0].tensors)
                QVERIFY2(rows.emplace(t.layer, t.role).second,
                         (preset + ": " + t.layer + " " + t.role + " twice").c_str());
            for (const auto& t : capture.frames[0].tensors) {
                const auto& listed = tensor_roles();
                QVERIFY2(std::find(listed.begin(), listed.end(), t.role) != listed.end(), (preset + ": " + t.role).c_str());
                recorded.insert(t.role);
            }
        };
        run("fp32", std::nullopt);
        run("bf16", std::nullopt);
        run("fp8-hybrid", std::nullopt);
        run("bf16", std::nullopt, /*per_gemm=*/true);
        for (auto s : {Fp8Scaling::Block128, Fp8Scaling::NvFp4, Fp8Scaling::MxFp4}) run("fp8-e4m3", s);
        QCOMPARE(recorded, std::set<std::string>(tensor_roles().begin(), tensor_roles().end()));
    }

    // The CUDA schedule on the CPU: a frame is handed on after the next step (its copy lands
    // during that step's sync), except before an evaluation, a checkpoint or the end. The
    // frames, their step numbers, the losses and the final weights are those of the
    // immediate schedule, bit for bit.
    void deferredFramesAreTheSameFrames()
    {
        auto config = golden_fp8(9, 4);
        struct Order : RunCapture {
            std::vector<std::string> calls;
            void on_step(const StepMetrics& m) override
            {
                RunCapture::on_step(m);
                calls.push_back("step " + std::to_string(m.step));
            }
            void on_layer_stats(const LayerStatsFrame& f) override
            {
                RunCapture::on_layer_stats(f);
                calls.push_back("frame " + std::to_string(f.step));
            }
        };
        Order now, later;
        const auto w_now = train_and_export(config, now, false), w_later = train_and_export(config, later, true);
        QCOMPARE(now.calls[0], std::string("step 1"));
        QCOMPARE(now.calls[1], std::string("frame 1"));
        // Frame 1 after step 2; frame 4 at once (an evaluation follows step 4); frame 9 at the end.
        const std::vector<std::string> expected_later = {"step 1", "step 2", "frame 1", "step 3", "frame 2", "step 4",
                                                         "frame 3", "frame 4", "step 5", "step 6", "frame 5", "step 7",
                                                         "frame 6", "step 8", "frame 7", "frame 8", "step 9", "frame 9"};
        QCOMPARE(later.calls, expected_later);
        QCOMPARE(later.frame_steps(), now.frame_steps());
        for (size_t i = 0; i < now.frames.size(); ++i) {
            const QString diff = frame_difference(later.frames[i], now.frames[i]);
            QVERIFY2(diff.isEmpty(), qPrintable(diff));
        }
        for (size_t i = 0; i < now.steps.size(); ++i) {
            const QString diff = step_difference(later.steps[i], now.steps[i]);
            QVERIFY2(diff.isEmpty(), qPrintable(diff));
        }
        QVERIFY(!w_now.isEmpty());
        QVERIFY(w_now == w_later);
    }

    // A sink that fails (a full disk) at step 3, with step 2's frame deferred as on CUDA: the
    // frame is handed on before the failure goes up (it was lost with the unwinding, and it may
    // be the one that shows why a step failed).
    void aFailingStepStillHandsOnItsFrameInFlight()
    {
        auto config = golden_fp8(6, 0);
        struct FailsAtStep3 : RunCapture {
            void on_step(const StepMetrics& m) override
            {
                RunCapture::on_step(m);
                if (m.step == 3) throw std::runtime_error("disk full");
            }
        };
        FailsAtStep3 sink;
        Trainer trainer(config);
        trainer.set_deferred_frames(true);
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, trainer.run(sink));
        QCOMPARE(sink.frame_steps(), (std::vector<int64_t>{1, 2}));
    }

    // A watcher whose action changes the run (a layer switched to BF16) acts at the boundary
    // after the step its frame measured, whether frames are handed on at once (CPU) or a step
    // later (CUDA), and whatever the evaluation schedule: with such an action frames are not
    // deferred. Deferred, frame 1 landed after step 2 (the switch a step later) but frame 4 at
    // once (an evaluation follows step 4), so the run depended on eval.interval.
    void watcherActionsActAtTheSameStepWhenFramesAreDeferred_data()
    {
        QTest::addColumn<int64_t>("eval_interval");
        QTest::newRow("no evaluation until the end") << int64_t(0);
        QTest::newRow("evaluation after step 1") << int64_t(1);
    }
    void watcherActionsActAtTheSameStepWhenFramesAreDeferred()
    {
        QFETCH(int64_t, eval_interval);
        auto config = golden_fp8(4, eval_interval);
        switch_on_any_underflow(config);
        struct Actions : RunCapture {
            std::vector<int64_t> switch_steps;
            void on_event(const RunEvent& e) override
            {
                if (e.kind == EventKind::PrecisionChanged) switch_steps.push_back(e.step);
            }
        };
        Actions now, later;
        const auto w_now = train_and_export(config, now, false), w_later = train_and_export(config, later, true);
        QVERIFY2(!now.switch_steps.empty(), "the watcher never acted: the test shows nothing");
        QCOMPARE(later.switch_steps, now.switch_steps);
        QCOMPARE(later.steps.size(), now.steps.size());
        for (size_t i = 0; i < now.steps.size(); ++i) {
            const QString diff = step_difference(later.steps[i], now.steps[i]);
            QVERIFY2(diff.isEmpty(), qPrintable(diff));
        }
        QVERIFY(w_now == w_later);
    }

    // Without a cooldown every layer with an FP8 tensor over the threshold alerts at every
    // frame: the watcher's switch to BF16 is still one precision change per layer, one watch
    // action, and the run's live-switch count is the number of layers switched.
    void aWatcherSwitchesALayerOnce()
    {
        auto config = golden_fp8(3, 0);
        switch_on_any_underflow(config);
        config.telemetry.watchers.cooldown_steps = 0; // a layer alerts at every frame
        struct Switches : RunCapture {
            std::map<std::string, int> alerts, changes, actions; // per layer
            void on_event(const RunEvent& e) override
            {
                for (const auto& layer : e.layers) {
                    if (e.kind == EventKind::Alert) ++alerts[layer];
                    if (e.kind == EventKind::PrecisionChanged) ++changes[layer];
                    if (e.kind == EventKind::WatchAction) ++actions[layer];
                }
            }
        } run;
        Trainer(config).run(run);
        QVERIFY2(!run.alerts.empty(), "no layer alerted: the test shows nothing");
        QCOMPARE(run.changes.size(), run.alerts.size());
        for (const auto& [layer, n] : run.changes) {
            QVERIFY2(n == 1, qPrintable(QString::fromStdString(layer) + " switched " + QString::number(n) + " times"));
            QCOMPARE(run.actions[layer], 1);
        }
    }

    void exponentHistogramIsExact()
    {
        const float inf = std::numeric_limits<float>::infinity();
        auto x = torch::tensor({0.0f, 1.0f, 1.5f, 2.0f, -3.0f, 0.25f, inf, std::nanf(""), std::ldexp(1.0f, -149),
                                1.5f * std::ldexp(1.0f, 127), -0.0f});
        const auto s = compute_tensor_stats(x, NumberFormat::FP32, 1.0f, {});
        QCOMPARE(s.count, int64_t(11));
        QCOMPARE(s.zeros, int64_t(2));
        QCOMPARE(s.infs, int64_t(1));
        QCOMPARE(s.nans, int64_t(1));
        QCOMPARE(s.first_exponent, -149);
        QCOMPARE(s.exponent_counts.size(), size_t(127 + 149 + 1));
        auto bin = [&](int e) { return s.exponent_counts[static_cast<size_t>(e - s.first_exponent)]; };
        QCOMPARE(bin(-149), int64_t(1));
        QCOMPARE(bin(-2), int64_t(1));
        QCOMPARE(bin(0), int64_t(2)); // 1 and 1.5
        QCOMPARE(bin(1), int64_t(2)); // 2 and -3
        QCOMPARE(bin(127), int64_t(1));
        int64_t total = 0;
        for (auto c : s.exponent_counts) total += c;
        QCOMPARE(total, int64_t(7)); // the finite non-zero values
        QCOMPARE(s.amax, 1.5 * std::ldexp(1.0, 127));
    }

    void formatFractions_data()
    {
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<QList<double>>("values"); // one underflow, one subnormal, one overflow, one normal
        QTest::newRow("fp16") << NumberFormat::FP16 << QList<double>{1e-8, 1e-6, 7e4, 1.0};
        QTest::newRow("bf16") << NumberFormat::BF16 << QList<double>{1e-41, 1e-39, 3.4e38, 1.0};
        QTest::newRow("e4m3") << NumberFormat::E4M3 << QList<double>{std::ldexp(1.0, -11), std::ldexp(1.0, -8), 500.0, 1.0};
        QTest::newRow("e5m2") << NumberFormat::E5M2 << QList<double>{std::ldexp(1.0, -18), std::ldexp(1.0, -15), 1e5, 1.0};
    }
    void formatFractions()
    {
        QFETCH(NumberFormat, format);
        QFETCH(QList<double>, values);
        std::vector<float> v;
        for (double d : values) v.push_back(static_cast<float>(d));
        v.push_back(2.0f); // 5 values: fractions are multiples of 0.2
        const auto x = torch::tensor(v);
        // As the engine casts: FP8 saturated, 16-bit formats as autocast does (past max is Inf).
        const bool fp8 = format_info(format).is_fp8;
        const auto q = round_to_format(x, format, fp8 ? Overflow::Saturate : Overflow::Propagate);
        const auto s = compute_tensor_stats(x, format, 1.0f, q);
        QCOMPARE(s.underflow, 0.2);
        QCOMPARE(s.subnormal, 0.2);
        QCOMPARE(s.overflow, 0.2);
        // A 16-bit cast rounds past max to Inf: the value is lost, with no finite error. Its SNR
        // read +inf-like before, as the rest was compared.
        if (fp8) {
            QVERIFY(torch::isfinite(q).all().item<bool>());
            QVERIFY(s.quant_mse > 0);
            QVERIFY(std::isfinite(s.quant_snr_db));
        } else {
            QVERIFY(!torch::isfinite(q).all().item<bool>());
            QCOMPARE(s.quant_mse, std::numeric_limits<double>::infinity());
            QCOMPARE(s.quant_snr_db, -std::numeric_limits<double>::infinity());
        }
    }

    void quantisationErrorInDecibels()
    {
        const auto x = torch::tensor({1.0f, 1.0f + std::ldexp(1.0f, -9)}); // second rounds to 1 in bf16
        const auto q = round_to_format(x, NumberFormat::BF16, Overflow::Propagate);
        const auto s = compute_tensor_stats(x, NumberFormat::BF16, 1.0f, q);
        const double err2 = std::pow(std::ldexp(1.0, -9), 2);
        QCOMPARE(s.quant_mse, err2 / 2);
        const double signal = 1.0 + std::pow(1.0 + std::ldexp(1.0, -9), 2);
        QVERIFY(std::abs(s.quant_snr_db - 10 * std::log10(signal / err2)) < 1e-9);
    }

    // A tensor with no finite value (a diverged run's gradients) has no cast error to tell:
    // NaN on every path, where the empty sums made it +inf dB, the best cast of all.
    void aTensorWithNoFiniteValueHasNoCastError()
    {
        const float inf = std::numeric_limits<float>::infinity();
        const auto x = torch::tensor({std::nanf(""), inf, -inf, std::nanf("")});
        for (const auto format : {NumberFormat::BF16, NumberFormat::E4M3}) {
            const bool fp8 = format_info(format).is_fp8;
            const auto q = round_to_format(x, format, fp8 ? Overflow::Saturate : Overflow::Propagate);
            for (auto kernel : kCpuStatsKernels) {
                const auto s = compute_tensor_stats(x, format, 1.0f, q, kernel);
                const QByteArray what = QByteArray(kernel_name(kernel)) + " " + format_info(format).name;
                QVERIFY2(s.nans == 2 && s.infs == 2, what);
                QVERIFY2(std::isnan(s.quant_snr_db) && std::isnan(s.quant_mse), what);
            }
        }
        // One finite value among them is compared as before.
        const auto y = torch::tensor({std::nanf(""), 1.0f + std::ldexp(1.0f, -9)});
        const auto y_bf16 = round_to_format(y, NumberFormat::BF16, Overflow::Propagate);
        const auto s = compute_tensor_stats(y, NumberFormat::BF16, 1.0f, y_bf16);
        QVERIFY(std::isfinite(s.quant_snr_db) && s.quant_mse > 0);
    }

    // --- the device path against the reference host scan --------------------------------

    // Crafted values for one format and scale: every edge the statistics branch on, then a
    // block of random values over the whole FP32 range, long enough to be split into chunks.
    // A scale that is not a power of two (current scaling, scale = 448 / amax): the verdicts
    // are the cast's own. It multiplies in FP32, so 0.1f at scale fl(448/0.1f) lands exactly on
    // 448 (the exact product is 448.0000067); its code 2^-6 is E4M3's min normal although
    // |r| * scale comes back as 0.0156249996. Values and expectations checked with torch's
    // float8_e4m3fn.
    void scaledVerdictsAreTheCastsOwn_data()
    {
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<float>("a");
        QTest::addColumn<float>("b");
        QTest::addColumn<float>("scale");
        QTest::addColumn<double>("overflow");
        QTest::addColumn<double>("subnormal");
        const auto e4m3 = NumberFormat::E4M3, e5m2 = NumberFormat::E5M2, fp16 = NumberFormat::FP16;
        QTest::newRow("amax lands on 448") << e4m3 << 0.1f << 0.05f << 448.0f / 0.1f << 0.0 << 0.0;
        QTest::newRow("a code of 2^-6") << e4m3 << 3.0f << 1.0463169746799394e-4f << 448.0f / 3.0f << 0.0 << 0.0;
        QTest::newRow("a subnormal code") << e4m3 << 3.0f << 5e-5f << 448.0f / 3.0f << 0.0 << 0.5;
        QTest::newRow("a true overflow") << e4m3 << 1.0f << 2.0f << 300.0f << 0.5 << 0.0;
        // Overflow is rounding past max (IEEE), not lying above it: what saturation clamps.
        QTest::newRow("e4m3 449 rounds to 448") << e4m3 << 449.0f << 1.0f << 1.0f << 0.0 << 0.0;
        QTest::newRow("e4m3 464 ties to even 448") << e4m3 << 464.0f << 1.0f << 1.0f << 0.0 << 0.0;
        QTest::newRow("e4m3 464.5 saturates") << e4m3 << 464.5f << 1.0f << 1.0f << 0.5 << 0.0;
        QTest::newRow("e5m2 61439 rounds to max") << e5m2 << 61439.0f << 1.0f << 1.0f << 0.0 << 0.0;
        QTest::newRow("e5m2 61440 ties past max") << e5m2 << 61440.0f << 1.0f << 1.0f << 0.5 << 0.0;
        QTest::newRow("fp16 65519 rounds to max") << fp16 << 65505.0f << 65519.0f << 1.0f << 0.0 << 0.0;
        QTest::newRow("fp16 65520 becomes inf") << fp16 << 65519.0f << 65520.0f << 1.0f << 0.5 << 0.0;
    }
    void scaledVerdictsAreTheCastsOwn()
    {
        QFETCH(NumberFormat, format);
        QFETCH(float, a);
        QFETCH(float, b);
        QFETCH(float, scale);
        QFETCH(double, overflow);
        QFETCH(double, subnormal);
        const auto x = torch::tensor({a, b});
        const auto q = format_info(format).is_fp8 ? scaled_round_saturated(x, scale, format) // the cast training makes
                                                  : round_to_format(x, format, Overflow::Propagate);
        const auto ref = compute_tensor_stats_reference(x, format, scale, q);
        QCOMPARE(ref.overflow, overflow);
        QCOMPARE(ref.subnormal, subnormal);
        for (auto kernel : kCpuStatsKernels) {
            const auto d = compute_tensor_stats(x, format, scale, q, kernel);
            QCOMPARE(d.overflow, overflow);
            QCOMPARE(d.subnormal, subnormal);
        }
    }

    // A per-row or block cast turns a whole row or block NaN when it holds an Inf or NaN: its
    // finite values were not beyond the format, and are neither compared nor an overflow (-1:
    // not measured, as no single scale says where the format ends). Under a per-tensor scale,
    // a finite value whose cast is not finite did overflow, and was lost: MSE +inf, SNR -inf.
    void valuesPoisonedByTheirBlockAreNoOverflow()
    {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        const double inf = std::numeric_limits<double>::infinity();
        const auto x = torch::tensor({1.0f, 2.0f, nan, 3.0f});
        const auto q = torch::tensor({nan, nan, nan, 3.0f});
        for (const float scale : {0.0f, 1.0f}) {
            const double overflow = scale > 0.0f ? 0.5 : -1.0;
            const double mse = scale > 0.0f ? inf : 0.0; // per block: only 3 is compared, and its cast is exact
            const double snr = scale > 0.0f ? -inf : inf;
            const auto ref = compute_tensor_stats_reference(x, NumberFormat::E4M3, scale, q);
            QCOMPARE(ref.overflow, overflow);
            QCOMPARE(ref.quant_mse, mse);
            QCOMPARE(ref.quant_snr_db, snr);
            for (auto kernel : kCpuStatsKernels) {
                const auto d = compute_tensor_stats(x, NumberFormat::E4M3, scale, q, kernel);
                QCOMPARE(d.overflow, overflow);
                QCOMPARE(d.quant_mse, mse);
                QCOMPARE(d.quant_snr_db, snr);
            }
        }
    }

    void deviceStatsMatchReference_data()
    {
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<float>("scale");
        QTest::newRow("fp32") << NumberFormat::FP32 << 1.0f;
        QTest::newRow("fp16") << NumberFormat::FP16 << 1.0f;
        QTest::newRow("bf16") << NumberFormat::BF16 << 1.0f;
        QTest::newRow("e4m3 scale 1") << NumberFormat::E4M3 << 1.0f;
        QTest::newRow("e4m3 scale 2^7") << NumberFormat::E4M3 << 128.0f;
        QTest::newRow("e4m3 per-row") << NumberFormat::E4M3 << 0.0f;
        QTest::newRow("e5m2 scale 1") << NumberFormat::E5M2 << 1.0f;
        QTest::newRow("e5m2 scale 2^-3") << NumberFormat::E5M2 << 0.125f;
    }
    void deviceStatsMatchReference()
    {
        QFETCH(NumberFormat, format);
        QFETCH(float, scale);
        const FormatInfo& info = format_info(format);
        const float s = scale > 0.0f ? scale : 1.0f; // per-row: the values are in the format's own domain
        const auto x = edge_values(format, scale);
        torch::Tensor q;
        if (format == NumberFormat::FP32) q = torch::Tensor();
        else if (info.is_fp8) q = round_to_format(x * s, format, Overflow::Saturate) / s;
        else q = round_to_format(x, format, Overflow::Propagate);
        const auto ref = compute_tensor_stats_reference(x, format, scale, q);
        QVERIFY(ref.nans == 2 && ref.infs >= 2 && ref.zeros >= 2); // the edges are there
        for (auto kernel : kCpuStatsKernels) {
            const auto d = compute_tensor_stats(x, format, scale, q, kernel);
            const char* name = kernel_name(kernel);
            QVERIFY2(d.format == ref.format && d.scale == ref.scale, name);
            QVERIFY2(d.count == ref.count && d.zeros == ref.zeros && d.infs == ref.infs && d.nans == ref.nans, name);
            QVERIFY2(d.first_exponent == ref.first_exponent && d.exponent_counts == ref.exponent_counts, name);
            // Fractions are count / n on both sides: equal counts give equal doubles.
            QVERIFY2(d.underflow == ref.underflow && d.subnormal == ref.subnormal && d.overflow == ref.overflow, name);
            QVERIFY2(d.amax == ref.amax, name);
            // Energies are FP64 sums in a different order: equal to double rounding.
            const auto close = [](double a, double b) { return a == b || std::abs(a - b) <= 1e-12 * std::abs(b); };
            QVERIFY2(close(d.quant_mse, ref.quant_mse), name);
            QVERIFY2(close(d.quant_snr_db, ref.quant_snr_db), name);
        }
        if (format != NumberFormat::FP32) QVERIFY(ref.quant_mse > 0 && ref.underflow > 0 && ref.subnormal != 0);
        if (format != NumberFormat::FP32 && scale > 0.0f) QVERIFY(ref.overflow > 0);
    }

    // Each edge value alone in its chunk of the fused scan (chunks are 2^14 values): the
    // vectorized count decides whether a chunk needs its subnormal pass, so a lone subnormal,
    // the largest one included, must still be binned.
    void fusedScanOfLoneEdgeValues()
    {
        const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
        for (float v : {std::ldexp(1.0f, -149), std::bit_cast<float>(0x007FFFFFu), -std::bit_cast<float>(0x00400000u),
                        std::ldexp(1.0f, -126), 0.0f, -0.0f, inf, -nan, std::numeric_limits<float>::max()}) {
            for (int64_t n : {int64_t(1), int64_t(40000)}) {
                auto x = torch::full({n}, 1.0f);
                x[n - 1] = v; // in the last chunk, away from the others
                const auto ref = compute_tensor_stats_reference(x, NumberFormat::FP32, 1.0f, {});
                for (const auto kernel : kFusedCpuKernels) {
                    const auto d = compute_tensor_stats(x, NumberFormat::FP32, 1.0f, {}, kernel);
                    const QByteArray what = QByteArray::number(double(v)) + " in " + QByteArray::number(qlonglong(n)) +
                                            ", " + kernel_name(kernel);
                    QVERIFY2(d.exponent_counts == ref.exponent_counts && d.first_exponent == ref.first_exponent, what);
                    QVERIFY2(d.zeros == ref.zeros && d.infs == ref.infs && d.nans == ref.nans, what);
                    QVERIFY2(d.amax == ref.amax, what);
                }
            }
        }
    }

    // Both counts of the fused scan count the binades within 16 of the largest finite one seen so
    // far in the chunk in vector lanes, and bin the rest one by one: each side of that edge (15
    // and 16 binades down), a top near the bottom of FP32's binades (so that zeros and
    // subnormals, byte 0, fall inside the window's span: the AVX-512 count's window never goes
    // below binade 16, and counts byte 0 apart), nothing but Inf and NaN, and one value repeated
    // (a lane's count reaches the portable count's strip, and every adder of the AVX-512 count
    // carries).
    void fusedScanCountsEveryBinade_data()
    {
        QTest::addColumn<std::vector<float>>("pattern"); // repeated over 70,000 values
        const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
        const auto p2 = [](int e) { return std::ldexp(1.0f, e); };
        QTest::newRow("one value") << std::vector<float>{1.0f};
        QTest::newRow("15 binades down") << std::vector<float>{1.5f, -p2(-15), 1.0f, -p2(-14)};
        QTest::newRow("16 binades down") << std::vector<float>{1.5f, p2(-16) * 1.25f, 1.0f};
        QTest::newRow("15, 16 and 17 down")
            << std::vector<float>{1.5f, -p2(-15), p2(-16), 1.0f, p2(-17) * 1.75f, -p2(-14)};
        QTest::newRow("far below, then the top") << std::vector<float>{p2(-40), p2(-60), -p2(-100), p2(20), p2(-126)};
        QTest::newRow("top near the bottom")
            << std::vector<float>{p2(-120), 0.0f, p2(-149), p2(-126), -p2(-125) * 1.5f, -0.0f, p2(-133)};
        // One zero in every strip, and a top (2^-120) below 16: byte 0 is counted in the window, so
        // the strip that also holds the planted value above the top has as many zeros as values
        // outside, and must still be found to have one.
        std::vector<float> one_zero(240, p2(-120));
        one_zero[7] = 0.0f;
        QTest::newRow("one zero a strip, top near the bottom") << one_zero;
        QTest::newRow("inf and nan only") << std::vector<float>{inf, nan, -inf};
        // Byte 255 under a low top: top - 255 wraps in a narrow lane (in bytes it would fall in the window).
        QTest::newRow("nan under a top near the bottom") << std::vector<float>{p2(-120), nan, -p2(-130), inf, p2(-126)};
        QTest::newRow("finite beside inf") << std::vector<float>{2.0f, inf, p2(-14), nan, 0.75f, p2(-30)};
        QTest::newRow("fp32 max") << std::vector<float>{std::numeric_limits<float>::max(), 1.0f, p2(112), p2(113)};
    }
    void fusedScanCountsEveryBinade()
    {
        QFETCH(std::vector<float>, pattern);
        // Four chunks of 2^14 and a ragged fifth, strips of 240; the last strip holds 147 values, so
        // that its last word of flags is ragged too, beside flags the strip before it left there.
        const int64_t n = 70003;
        std::vector<float> v(static_cast<size_t>(n));
        for (size_t i = 0; i < v.size(); ++i) v[i] = pattern[i % pattern.size()];
        // A new top in a later strip of a chunk (its values above the window are left out of the
        // count), after which the window starts far above every value that follows.
        for (size_t i = 2047; i < v.size(); i += 4096) v[i] = std::ldexp(1.0f, 100);
        const auto x = torch::from_blob(v.data(), {n}, torch::kFloat32).clone();
        const auto ref = compute_tensor_stats_reference(x, NumberFormat::FP32, 1.0f, {});
        for (const auto kernel : kFusedCpuKernels) {
            const auto d = compute_tensor_stats(x, NumberFormat::FP32, 1.0f, {}, kernel);
            const char* name = kernel_name(kernel);
            QVERIFY2(d.first_exponent == ref.first_exponent && d.exponent_counts == ref.exponent_counts, name);
            QVERIFY2(d.zeros == ref.zeros && d.infs == ref.infs && d.nans == ref.nans, name);
            QVERIFY2(d.amax == ref.amax, name);
        }
    }

    // The fused scan skips the scaled verdicts (subnormal codes, overflows) of a chunk whose
    // extremes show that none can occur: one value that takes a verdict, amid ordinary ones and
    // away from the chunk's scalar tail, must still be counted, and the verdict's edge itself
    // (a cast at the smallest normal, a value that rounds to max) must not be.
    void fusedScanFindsALoneScaledVerdict_data()
    {
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<float>("scale");
        QTest::addColumn<float>("planted");
        QTest::addColumn<int>("subnormals");
        QTest::addColumn<int>("overflows");
        QTest::addColumn<bool>("castNaN"); // the planted value's cast replaced by NaN
        const auto bf16 = NumberFormat::BF16, fp16 = NumberFormat::FP16;
        const auto e4m3 = NumberFormat::E4M3, e5m2 = NumberFormat::E5M2;
        QTest::newRow("bf16 subnormal cast") << bf16 << 1.0f << std::ldexp(1.0f, -130) << 1 << 0 << false;
        QTest::newRow("bf16 smallest normal") << bf16 << 1.0f << std::ldexp(1.0f, -126) << 0 << 0 << false;
        QTest::newRow("fp16 subnormal cast") << fp16 << 1.0f << std::ldexp(1.0f, -15) << 1 << 0 << false;
        QTest::newRow("fp16 smallest normal") << fp16 << 1.0f << std::ldexp(1.0f, -14) << 0 << 0 << false;
        QTest::newRow("fp16 rounds to max") << fp16 << 1.0f << 65519.0f << 0 << 0 << false;
        QTest::newRow("fp16 overflows to inf") << fp16 << 1.0f << 65520.0f << 0 << 1 << false;
        QTest::newRow("e4m3 saturates, finite cast") << e4m3 << 1.0f << 464.5f << 0 << 1 << false;
        QTest::newRow("e4m3 ties to max") << e4m3 << 1.0f << 464.0f << 0 << 0 << false;
        QTest::newRow("e4m3 subnormal code, scale 2^7") << e4m3 << 128.0f << std::ldexp(1.0f, -15) << 1 << 0 << false;
        QTest::newRow("e5m2 ties past max, scale 2^-3") << e5m2 << 0.125f << 61440.0f * 8.0f << 0 << 1 << false;
        // Under a per-tensor scale a finite value whose cast is not finite overflowed, whatever its size.
        QTest::newRow("a NaN cast of an ordinary value") << e4m3 << 1.0f << 1.0f << 0 << 1 << true;
    }
    void fusedScanFindsALoneScaledVerdict()
    {
        QFETCH(NumberFormat, format);
        QFETCH(float, scale);
        QFETCH(float, planted);
        QFETCH(int, subnormals);
        QFETCH(int, overflows);
        QFETCH(bool, castNaN);
        const int64_t n = 40000; // two chunks of 2^14 and a ragged third
        const auto i = torch::arange(n, torch::kFloat32);
        auto x = (0.75f + 0.5f * torch::sin(i * 0.37f)) / scale; // codes between 0.25 and 1.25: no verdicts
        x[20001] = planted; // inside the second chunk, far from its tail
        x[n - 3000] = -planted; // and in the third
        const auto q = format_info(format).is_fp8 ? round_to_format(x * scale, format, Overflow::Saturate) / scale
                                                  : round_to_format(x, format, Overflow::Propagate);
        if (castNaN) {
            q[20001] = std::numeric_limits<float>::quiet_NaN();
            q[n - 3000] = std::numeric_limits<float>::quiet_NaN();
        }
        const auto ref = compute_tensor_stats_reference(x, format, scale, q);
        QCOMPARE(ref.subnormal, 2.0 * subnormals / n);
        QCOMPARE(ref.overflow, 2.0 * overflows / n);
        for (const auto kernel : kFusedCpuKernels) {
            const auto d = compute_tensor_stats(x, format, scale, q, kernel);
            QCOMPARE(d.subnormal, ref.subnormal);
            QCOMPARE(d.overflow, ref.overflow);
            QCOMPARE(d.underflow, ref.underflow);
            if (std::isinf(ref.quant_mse)) QCOMPARE(d.quant_mse, ref.quant_mse); // a value lost to Inf or NaN
            else QVERIFY(std::abs(d.quant_mse - ref.quant_mse) <= 1e-12 * ref.quant_mse);
        }
        QCOMPARE(std::isinf(ref.quant_mse), castNaN || !torch::isfinite(q).all().item<bool>());
    }

    // The comparison's energies are sixteen FP64 lane sums (lane l: values l, l + 16, ...) added
    // in lane order, in AVX-512 and in the portable pass alike. Here lanes 8..15 each sum to 2^-8
    // (1024 errors of 2^-9) and lanes 0..7 to 2^-58 (errors of 2^-34): in lane order the small
    // ones add up to 2^-55 first and survive, 2^-5 + 2^-55; the large ones first would leave a
    // sum of 2^-5 that each 2^-58, half its last place, leaves as it is.
    void castComparisonLanesAddInOneOrder()
    {
        std::vector<float> v(16384); // one chunk of the scan
        for (size_t i = 0; i < v.size(); ++i)
            v[i] = (i % 16 < 8 ? std::ldexp(1.0f, -25) : 1.0f) * (1.0f + std::ldexp(1.0f, -9));
        const auto x = torch::from_blob(v.data(), {int64_t(v.size())}, torch::kFloat32).clone();
        const auto bf16 = round_to_format(x, NumberFormat::BF16, Overflow::Propagate);
        QCOMPARE(bf16[8].item<float>(), 1.0f); // the cast drops the 2^-9
        for (const auto kernel : kFusedCpuKernels) {
            const auto row = tensor_stats_rows_cpu({{x, NumberFormat::BF16, 1.0f, bf16}}, kernel).front();
            QVERIFY2(row[stats_row::kErrorEnergy].item<double>() == std::ldexp(1.0, -5) + std::ldexp(1.0, -55),
                     kernel_name(kernel));
        }
    }

    // The engine's CPU kernels run on LibTorch's intra-op threads. at::parallel_for splits
    // nothing in a file compiled without OpenMP, and nothing else would show it: every fused
    // kernel of ours would quietly run on one thread (core/cpu_parallel.h).
    void cpuKernelsShareTorchsThreads()
    {
        const ThreadCount restore;
        for (int n : {1, 2, 3}) {
            at::set_num_threads(n);
            QCOMPARE(cpu_kernel_threads(64), n);
            QCOMPARE(cpu_kernel_threads(1), 1);
        }
    }

    // A row depends on the scan's chunks, never on how many threads scanned them: each chunk
    // sums on its own and the chunks merge in their order. Counts, amax and both energies are
    // held bit for bit.
    void statsRowsAreTheSameOnAnyThreadCount()
    {
        const ThreadCount restore;
        const int64_t n = 5 * 32768 + 123; // ten chunks of 2^14 and a ragged eleventh
        const auto i = torch::arange(n, torch::kFloat32);
        auto x = torch::sin(i * 0.37f) * torch::exp2(torch::remainder(i * 7.0f, 40.0f) - 20.0f);
        x[777] = 0.0f;
        x[100000] = std::ldexp(1.0f, -140);
        x[n - 5] = std::numeric_limits<float>::quiet_NaN();
        const auto bf16 = round_to_format(x, NumberFormat::BF16, Overflow::Propagate);
        const auto e4m3 = round_to_format(x * 4.0f, NumberFormat::E4M3, Overflow::Saturate) / 4.0f;
        const std::vector<StatsSource> sources = {{x, NumberFormat::FP32, 1.0f, {}},
                                                  {x, NumberFormat::BF16, 1.0f, bf16},
                                                  {x, NumberFormat::E4M3, 4.0f, e4m3}};
        at::set_num_threads(1);
        const auto one = tensor_stats_rows_cpu(sources);
        QVERIFY(one[2][stats_row::kOverflow].item<double>() > 0.0); // the scaled verdicts' pass ran
        for (int threads : {1, 2, 3}) {
            at::set_num_threads(threads);
            for (const auto kernel : kFusedCpuKernels) {
                const auto many = tensor_stats_rows_cpu(sources, kernel); // either count: the same row
                for (size_t r = 0; r < sources.size(); ++r)
                    QVERIFY2(torch::equal(many[r], one[r]),
                             qPrintable(QString::number(r) + ", " + kernel_name(kernel)));
            }
        }
    }

    // The CPU's attention max logit (causal_max_abs_score_cpu: groups of 4 queries, blocks of 16
    // keys) against the ops' route it replaced: on integer heads, whose sums are exact in any
    // order, bit for bit; on Gaussian heads to FP32 rounding. Heads of every size around the
    // kernel's groups and blocks, ragged ones, heads read in place from a qkv-like output, and
    // a last dimension that is not contiguous (copied first).
    void attentionMaxLogitKernelIsTheOpsRoute_data()
    {
        QTest::addColumn<QList<int>>("shape"); // B, H, T, D
        QTest::addColumn<QString>("layout");    // contiguous, qkv, strided
        QTest::newRow("one query, one value") << QList<int>{1, 1, 1, 1} << "contiguous";
        QTest::newRow("a group and one") << QList<int>{1, 2, 5, 3} << "contiguous";
        QTest::newRow("a block of keys") << QList<int>{2, 1, 16, 8} << "contiguous";
        QTest::newRow("a block and one") << QList<int>{1, 3, 17, 5} << "contiguous";
        QTest::newRow("ragged") << QList<int>{2, 3, 37, 8} << "contiguous";
        QTest::newRow("shakespeare-char, qkv") << QList<int>{3, 4, 64, 32} << "qkv";
        QTest::newRow("ragged, qkv") << QList<int>{2, 2, 50, 24} << "qkv";
        QTest::newRow("strided last dimension") << QList<int>{2, 2, 21, 6} << "strided";
    }
    void attentionMaxLogitKernelIsTheOpsRoute()
    {
        QFETCH(QList<int>, shape);
        QFETCH(QString, layout);
        const int64_t B = shape[0], H = shape[1], T = shape[2], D = shape[3];
        const auto read = [&](const torch::Tensor& q, const torch::Tensor& k) -> std::pair<torch::Tensor, torch::Tensor> {
            if (layout == "qkv") {
                const auto rows = [&](const torch::Tensor& t) { return t.transpose(1, 2).reshape({B, T, H * D}); };
                const auto qkv = torch::cat({rows(q), rows(k), torch::zeros({B, T, H * D})}, 2);
                const auto heads = [&](int64_t part) { return qkv.narrow(2, part * H * D, H * D).view({B, T, H, D}).transpose(1, 2); };
                return {heads(0), heads(1)};
            }
            if (layout == "strided") return {q.transpose(2, 3).contiguous().transpose(2, 3), k.transpose(2, 3).contiguous().transpose(2, 3)};
            return {q, k};
        };
        const auto i = torch::arange(B * H * T * D, torch::kFloat32).view({B, H, T, D});
        const auto integer_q = torch::remainder(i * 7.0f, 23.0f) - 11.0f, integer_k = torch::remainder(i * 5.0f, 19.0f) - 9.0f;
        const auto [iq, ik] = read(integer_q, integer_k);
        if (layout == "strided") QVERIFY(iq.stride(3) != 1);
        const double exact = causal_max_abs_score_of_ops(integer_q, integer_k).item<double>();
        QCOMPARE(causal_max_abs_score_cpu(iq, ik).item<double>(), exact);
        torch::manual_seed(3);
        const auto gq = torch::randn({B, H, T, D}), gk = torch::randn({B, H, T, D});
        const auto [q, k] = read(gq, gk);
        const double ops = causal_max_abs_score_of_ops(gq, gk).item<double>();
        const double ours = causal_max_abs_score_cpu(q, k).item<double>();
        QVERIFY2(std::abs(ours - ops) <= 1e-6 * ops, qPrintable(QString("%1 against %2").arg(ours).arg(ops)));
    }

    // A NaN product wins, as through amax; Inf times a zero is one. The largest product wins on
    // any thread count, to the bit.
    void attentionMaxLogitKernelNonFiniteAndThreads()
    {
        const ThreadCount restore;
        const int64_t B = 2, H = 3, T = 40, D = 8;
        torch::manual_seed(4);
        auto q = torch::randn({B, H, T, D}), k = torch::randn({B, H, T, D});
        at::set_num_threads(1);
        const auto one = causal_max_abs_score_cpu(q, k);
        for (int threads : {2, 3}) {
            at::set_num_threads(threads);
            QVERIFY(torch::equal(causal_max_abs_score_cpu(q, k), one));
        }
        auto nan_q = q.clone();
        nan_q.index_put_({1, 2, T - 1, 5}, std::numeric_limits<float>::quiet_NaN()); // the last query of the last head
        QVERIFY(std::isnan(causal_max_abs_score_cpu(nan_q, k).item<float>()));
        auto inf_q = q.clone(), zero_k = k.clone();
        inf_q.index_put_({0, 0, 3, 0}, std::numeric_limits<float>::infinity());
        zero_k.index_put_({0, 0, torch::indexing::Slice(), 0}, 0.0f); // Inf times 0: NaN
        QVERIFY(std::isnan(causal_max_abs_score_cpu(inf_q, zero_k).item<float>()));
        // An Inf key: each query that sees it (all of them positive) gives +Inf. A ragged last
        // group (39 queries) must not read a query past the last as 0 * Inf, a NaN.
        auto inf_k = k.narrow(2, 0, T - 1).clone();
        inf_k.index_put_({0, 0, 5, 0}, std::numeric_limits<float>::infinity());
        const auto positive_q = q.narrow(2, 0, T - 1).abs() + 0.5f;
        QCOMPARE(causal_max_abs_score_cpu(positive_q, inf_k).item<float>(), std::numeric_limits<float>::infinity());
        // A future key inside the last group's block of keys (computed for the group, then left
        // out for the queries before it): query T - 2 against key T - 1.
        auto big_q = q.clone(), big_k = k.clone();
        big_q.index_put_({1, 1, T - 2, 0}, 1e4f); // 1e8 against key T - 1; below 1e6 against any it sees
        big_k.index_put_({1, 1, T - 1, 0}, 1e4f);
        QVERIFY(causal_max_abs_score_cpu(big_q, big_k).item<float>() < 1e6f);
        QCOMPARE(causal_max_abs_score_cpu(big_q, big_k).item<float>(), causal_max_abs_score_of_ops(big_q, big_k).item<float>());
    }

    // The update ratio's norms in one CPU pass: FP64 sums of sixteen lanes over chunks of 2^14,
    // merged in order: each against an FP64 reference to FP64 rounding (a difference taken in
    // FP32 first, or lanes dropped at a chunk's tail, would fail), and the same bits on any
    // thread count.
    void updateNormsInOnePass()
    {
        const ThreadCount restore;
        const auto i = torch::arange(40003, torch::kFloat32); // two chunks and a ragged third, a ragged tail of 16
        const std::vector<torch::Tensor> befores = {torch::sin(i * 0.37f) * 3.0f, torch::cos(i.narrow(0, 0, 21) * 0.11f)};
        const std::vector<torch::Tensor> afters = {befores[0] + torch::cos(i * 0.73f) * 1e-3f + 1e-7f,
                                                   befores[1] * 1.25f};
        QVERIFY(update_norms_cpu_takes(befores, afters));
        QVERIFY(!update_norms_cpu_takes(befores, {afters[0], afters[1].to(torch::kFloat64)}));
        const auto transposed = [](const torch::Tensor& t) { return t.narrow(0, 0, 40000).view({200, 200}).t(); };
        QVERIFY(!update_norms_cpu_takes({transposed(befores[0])}, {transposed(afters[0])}));
        at::set_num_threads(1);
        const auto norms = update_norms_cpu(befores, afters);
        for (size_t p = 0; p < befores.size(); ++p) {
            const auto b = befores[p].to(torch::kFloat64), a = afters[p].to(torch::kFloat64);
            const double w = b.norm().item<double>(), u = (a - b).norm().item<double>();
            const auto row = static_cast<int64_t>(p);
            QVERIFY2(std::abs(norms[row][0].item<double>() - w) <= 1e-13 * w, qPrintable(QString::number(p)));
            QVERIFY2(std::abs(norms[row][1].item<double>() - u) <= 1e-13 * u, qPrintable(QString::number(p)));
        }
        for (int threads : {2, 3}) {
            at::set_num_threads(threads);
            QVERIFY(torch::equal(update_norms_cpu(befores, afters), norms));
        }
    }

    void deviceStatsOfEmptyTensors()
    {
        const auto x = torch::empty({0, 4});
        for (auto format : {NumberFormat::FP32, NumberFormat::BF16, NumberFormat::E4M3}) {
            const auto q = format == NumberFormat::FP32 ? torch::Tensor() : x.clone();
            const auto ref = compute_tensor_stats_reference(x, format, 1.0f, q);
            for (auto kernel : kCpuStatsKernels) {
                const auto d = compute_tensor_stats(x, format, 1.0f, q, kernel);
                QCOMPARE(d.count, int64_t(0));
                QCOMPARE(d.exponent_counts, ref.exponent_counts);
                QCOMPARE(d.quant_snr_db, ref.quant_snr_db);
                QCOMPARE(d.underflow, ref.underflow);
                QCOMPARE(d.subnormal, ref.subnormal);
                QCOMPARE(d.amax, ref.amax);
            }
        }
    }

    // The CUDA kernel is only ever chosen on a GPU: without one, Auto never picks it, and asking
    // for it by name on a CPU tensor is an error, not a silent fallback.
    void fusedCudaKernelOnlyOnAGpu()
    {
        if (torch::cuda::is_available()) QSKIP("a GPU is present: bench/cuda_checks holds the kernel to the tensor ops");
        QVERIFY(!fused_cuda_stats_available());
        const auto x = torch::tensor({1.0f, 0.0f, 3.0f});
        QVERIFY_THROWS_EXCEPTION(std::exception, compute_tensor_stats(x, NumberFormat::FP32, 1.0f, {}, StatsKernel::FusedCuda));
        QCOMPARE(compute_tensor_stats(x, NumberFormat::FP32, 1.0f, {}).zeros, int64_t(1));
    }

    // The attention max logit is taken over the scores causal attention computes: a future
    // key, however large its product, is not one of them. Small blocks of queries (ragged at
    // the end) must give the one-block answer, which must be the brute-force one.
    void attentionMaxLogitIsCausal()
    {
        torch::manual_seed(11);
        const int64_t B = 2, H = 3, T = 37, D = 8;
        auto q = torch::randn({B, H, T, D}), k = torch::randn({B, H, T, D});
        q[1][2][3].fill_(40.0f); // query 3 against key 20 (the future): 40 * 40 * 8 = 12800
        k[1][2][20].fill_(40.0f);
        q[1][0][10].fill_(10.0f); // query 10 against key 11, the nearest future: 800
        k[1][0][11].fill_(10.0f);
        q[0][1][30].fill_(-6.0f); // query 30 against its own key: -288
        k[0][1][30].fill_(6.0f);
        q[0][2][33].fill_(-7.0f); // query 33 against key 4, long past: -392, the largest |causal product|
        k[0][2][4].fill_(7.0f);
        q[1][1][35][0] = 50.0f; // query 35 against key 36, the future inside a ragged last block of 2: 2500
        k[1][1][36][0] = 50.0f;
        const auto scores = torch::matmul(q.to(torch::kFloat64), k.to(torch::kFloat64).transpose(-2, -1)).abs();
        const auto causal = torch::ones({T, T}, torch::kBool).tril();
        const double expected = torch::where(causal, scores, torch::zeros_like(scores)).max().item<double>();
        QCOMPARE(expected, 392.0); // negative, and past every block's own keys but the largest's
        // Every block's own keys, the diagonal among them, must be read too.
        QCOMPARE(torch::where(causal, scores, torch::zeros_like(scores))[0][1].max().item<double>(), 288.0);
        // FP32 products in another order than the FP64 reference's: equal to a few ulps.
        for (int64_t rows : {int64_t(1), int64_t(5), int64_t(36), int64_t(37), int64_t(1) << 24}) { // queries per block
            const double blocked = causal_max_abs_score(q, k, B * H * T * rows).item<double>();
            QVERIFY2(std::abs(blocked - expected) <= 1e-5 * expected, qPrintable(QString("%1 rows: %2").arg(rows).arg(blocked)));
            const auto head = torch::indexing::Slice(0, 1), second = torch::indexing::Slice(1, 2);
            const double diagonal = causal_max_abs_score(q.index({head, second}), k.index({head, second}), H * T * rows)
                                        .item<double>();
            QVERIFY2(std::abs(diagonal - 288.0) <= 1e-5 * 288.0, qPrintable(QString("%1 rows: %2").arg(rows).arg(diagonal)));
        }
    }

    // telemetry.reduce_ranks with two ranks that measured the same tensors (the stand-in
    // allreduce doubles a SUM and leaves a MAX alone): every count of a rank-local tensor
    // doubles, so its fractions, amax, SNR and log Z's mean are unchanged; the weight's rows
    // are one tensor, not two, and stay as they are; logits are maxima.
    // "max doubles": a stand-in whose MAX doubles too, so that a value reduced as a MAX and one
    // reduced as a SUM (or a mean) come out different: amax, log Z's max and the logits double;
    // log Z's mean (every rank's is over as many tokens) is the mean of the ranks', unchanged.
    // With a MAX that leaves equal values alone, a mean reduced as a MAX would pass unseen.
    // A maximum is NaN where any rank's value is, whatever the allreduce's MAX makes of a NaN:
    // NCCL's is fmaxf, which drops it; Gloo's std::max keeps or drops it by the ranks' order.
    // One rank's NaN attention logit (or log Z) then reaches the frame, as a single process's
    // would. Two ranks in two threads, with a stand-in allreduce that applies the rule given.
    void aRanksNanSurvivesTheMax_data()
    {
        QTest::addColumn<QString>("rule");
        QTest::newRow("fmax (NCCL)") << "fmax";
        QTest::newRow("std::max, rank 0 first (Gloo)") << "rank 0 first";
        QTest::newRow("std::max, rank 1 first") << "rank 1 first";
    }
    void aRanksNanSurvivesTheMax()
    {
        QFETCH(QString, rule);
        const double nan = std::numeric_limits<double>::quiet_NaN();
        const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
        const std::array<torch::Tensor, 2> buffers{torch::tensor({2.0, nan, 5.0, nan, 3.0, 4.0, nan}, opts),
                                                   torch::tensor({7.0, 5.0, nan, nan, 1.0, 6.0, 2.0}, opts)};
        const std::vector<int8_t> how{kRankMax, kRankMax, kRankMax, kRankMax, kRankSum, kRankMean, kRankSum};
        std::barrier<> sync(2);
        std::array<torch::Tensor, 2> posted; // each rank's part (not `slots`: Qt's keyword)
        const auto allreduce = [&](int rank, torch::Tensor& t, bool max) {
            posted[static_cast<size_t>(rank)] = t.clone();
            sync.arrive_and_wait();
            const auto &a = posted[0], &b = posted[1];
            torch::Tensor out = a + b;
            if (max && rule == "fmax") out = torch::fmax(a, b);
            else if (max && rule == "rank 0 first") out = torch::where(a < b, b, a); // std::max(a, b)
            else if (max) out = torch::where(b < a, a, b);                              // std::max(b, a)
            sync.arrive_and_wait();
            t.copy_(out);
        };
        std::array<torch::Tensor, 2> combined;
        const auto rank = [&](int r) {
            TelemetryStep::RankReduction ranks;
            ranks.world_size = 2;
            ranks.sum = [&, r](torch::Tensor& t) { allreduce(r, t, false); };
            ranks.max = [&, r](torch::Tensor& t) { allreduce(r, t, true); };
            combined[static_cast<size_t>(r)] = combine_across_ranks(buffers[static_cast<size_t>(r)], how, ranks);
        };
        std::thread other(rank, 1);
        rank(0);
        other.join();
        const std::vector<double> want{7.0, nan, nan, nan, 4.0, 5.0, nan};
        for (const auto& c : combined) {
            QCOMPARE(c.numel(), int64_t(want.size()));
            for (size_t i = 0; i < want.size(); ++i) {
                const double got = c[static_cast<int64_t>(i)].item<double>();
                QVERIFY2(std::bit_cast<uint64_t>(got) == std::bit_cast<uint64_t>(want[i]) ||
                             (std::isnan(got) && std::isnan(want[i])),
                         qPrintable(QString("value %1: %2, expected %3").arg(i).arg(got).arg(want[i])));
            }
        }
    }

    void rankReductionCombinesEachValueAsItMeans_data()
    {
        QTest::addColumn<Fp8Scaling>("scaling");
        QTest::addColumn<bool>("maxDoubles");
        QTest::newRow("delayed") << Fp8Scaling::Delayed << false;
        QTest::newRow("mxfp4") << Fp8Scaling::MxFp4 << false; // weight_scale rows: the weight's, shared
        QTest::newRow("delayed, max doubles") << Fp8Scaling::Delayed << true;
    }
    void rankReductionCombinesEachValueAsItMeans()
    {
        QFETCH(Fp8Scaling, scaling);
        QFETCH(bool, maxDoubles);
        ModelConfig m = tiny_model(1);
        PrecisionConfig precision;
        precision.preset = "fp8-hybrid"; // casts, so the fractions and energies are not trivial
        precision.fp8.scaling = scaling;
        auto frame_of = [&](const TelemetryStep::RankReduction* ranks) {
            torch::manual_seed(3);
            Gpt model(m, 11, precision);
            TelemetryStep telemetry;
            telemetry.arm(model);
            const auto idx = torch::randint(0, 11, {2, 8}, torch::kLong);
            model->loss(model->forward(idx), idx).backward();
            telemetry.disarm(model);
            return TelemetryStep::complete(*telemetry.launch(model, 1, /*skipped=*/true, -1, ranks));
        };
        TelemetryStep::RankReduction twins;
        twins.world_size = 2;
        twins.sum = [](torch::Tensor& t) { t.mul_(2); };
        twins.max = [maxDoubles](torch::Tensor& t) {
            if (maxDoubles) t.mul_(2);
        };
        const double by_max = maxDoubles ? 2.0 : 1.0; // what the stand-in MAX does to a value
        const LayerStatsFrame one = frame_of(nullptr), two = frame_of(&twins);
        QCOMPARE(two.tensors.size(), one.tensors.size());
        QVERIFY(one.tensors.size() >= 20);
        int weight_scales = 0;
        for (size_t i = 0; i < one.tensors.size(); ++i) {
            const TensorStats &a = one.tensors[i], &b = two.tensors[i];
            weight_scales += a.role == "weight_scale" ? 1 : 0;
            const bool shared = a.role == "weight" || a.role == "weight_scale";
            const int64_t k = shared ? 1 : 2;
            const QString what = QString::fromStdString(a.layer + " " + a.role);
            QCOMPARE(b.count, k * a.count);
            if (maxDoubles && shared) { // every value of the weight's rows is a MAX: all doubled
                QVERIFY2(b.amax == 2.0 * a.amax, qPrintable(what));
                continue;
            }
            QCOMPARE(b.zeros, k * a.zeros);
            QCOMPARE(b.first_exponent, a.first_exponent);
            QCOMPARE(b.exponent_counts.size(), a.exponent_counts.size());
            for (size_t j = 0; j < a.exponent_counts.size(); ++j) QCOMPARE(b.exponent_counts[j], k * a.exponent_counts[j]);
            QVERIFY2(b.amax == by_max * a.amax && b.underflow == a.underflow && b.overflow == a.overflow &&
                         b.subnormal == a.subnormal && b.scale == a.scale,
                     qPrintable(what));
            QVERIFY2(b.quant_snr_db == a.quant_snr_db && b.quant_mse == a.quant_mse, qPrintable(what));
        }
        QCOMPARE(weight_scales > 0, scaling == Fp8Scaling::MxFp4);
        QVERIFY(one.log_z_mean != 0.0 && one.log_z_max != 0.0); // measured: doubling would show
        // Exactly: the twins' values are the rank's own times a power of two.
        const auto pair = [](double a, double b) {
            return QString("%1 vs %2").arg(a, 0, 'g', 17).arg(b, 0, 'g', 17).toUtf8();
        };
        QVERIFY2(two.log_z_mean == one.log_z_mean, pair(two.log_z_mean, one.log_z_mean).constData());
        QVERIFY2(two.log_z_max == by_max * one.log_z_max, pair(two.log_z_max, one.log_z_max).constData());
        QCOMPARE(two.attention_max_logit.size(), one.attention_max_logit.size());
        for (size_t i = 0; i < one.attention_max_logit.size(); ++i) {
            const auto &a = one.attention_max_logit[i], &b = two.attention_max_logit[i];
            QCOMPARE(b.first, a.first);
            QVERIFY2(b.second == by_max * a.second, pair(b.second, a.second).constData());
        }
    }

    // FP32 layers: each tensor is read when it is recorded, and the weight gradient from the
    // weight's .grad after the backward (a second product only for the tied LM head). Each must
    // be the statistics of the tensor it names, as it was when the GEMM used it.
    void fp32StatsAreReadAfterTheBackward()
    {
        ModelConfig m = tiny_model(2);
        torch::manual_seed(3);
        Gpt model(m, 11);
        for (const auto& g : model->gemm_layers()) g->arm_telemetry(true);
        const auto idx = torch::randint(0, 11, {2, 8}, torch::kLong);
        model->loss(model->forward(idx), idx).backward();
        int checked = 0;
        for (const auto& g : model->gemm_layers()) {
            g->arm_telemetry(false);
            const auto stats = g->take_stats();
            if (g->name().find(".sdpa") != std::string::npos) continue;
            std::vector<std::string> roles;
            for (const auto& t : stats) roles.push_back(t.role);
            QCOMPARE(roles, (std::vector<std::string>{"output", "weight", "input", "grad_output", "weight_grad"}));
            const auto& w = g->last_weight();
            const auto expect_w = compute_tensor_stats_reference(w, NumberFormat::FP32, 1.0f, {});
            QCOMPARE(stats[1].exponent_counts, expect_w.exponent_counts);
            QCOMPARE(stats[1].amax, expect_w.amax);
            if (g->name() == "lm_head") continue; // wte's .grad also holds the embedding's gradient
            const auto expect_dw = compute_tensor_stats_reference(w.grad(), NumberFormat::FP32, 1.0f, {});
            QCOMPARE(stats[4].count, w.numel());
            QCOMPARE(stats[4].first_exponent, expect_dw.first_exponent);
            QCOMPARE(stats[4].exponent_counts, expect_dw.exponent_counts);
            QCOMPARE(stats[4].amax, expect_dw.amax);
            ++checked;
        }
        QCOMPARE(checked, 2 * 4); // qkv, proj, fc1, fc2 of both blocks
    }

    // --- watchers on scripted trajectories ----------------------------------------------

    void lossSpikeFiresOnlyOnTheSpike()
    {
        WatcherConfig c;
        c.spike_window = 20;
        Watchers w(c);
        int fired = 0;
        int64_t at = -1;
        for (int64_t step = 1; step <= 200; ++step) {
            const double loss = 3.0 - 0.005 * static_cast<double>(step) + 0.01 * std::sin(static_cast<double>(step));
            const double spiked = step == 150 ? loss + 1.0 : loss;
            for (const auto& a : w.on_step(step_metrics(step, spiked, 1.0)))
                if (a.watcher == "loss_spike") {
                    ++fired;
                    at = a.step;
                }
        }
        QCOMPARE(fired, 1);
        QCOMPARE(at, int64_t(150));

        // The message gives the bar the loss was compared with, before it was folded in: the
        // mean after it (1 + 4 * 2/3 here) understated the bar.
        WatcherConfig flat;
        flat.spike_window = 2;
        Watchers ones(flat);
        for (int64_t step = 1; step <= 10; ++step) QVERIFY(ones.on_step(step_metrics(step, 1.0, 1.0)).empty());
        const auto spike = ones.on_step(step_metrics(11, 5.0, 1.0));
        QCOMPARE(spike.size(), size_t(1));
        QCOMPARE(spike[0].message, std::string("loss 5 > 1 (running mean 1 + 6 sigma of 0)"));
    }

    // A checkpoint keeps what the watchers learnt: restored into fresh watchers after step
    // 130, the rest of the run alerts exactly as the straight run does (the spike at 150 falls
    // in the cooldown of the one at 120; fresh watchers would still be warming up there).
    void watcherStateSurvivesACheckpoint()
    {
        WatcherConfig c;
        c.spike_window = 20;
        c.cooldown_steps = 100;
        auto loss_at = [](int64_t step) {
            const double loss = 3.0 - 0.005 * static_cast<double>(step) + 0.01 * std::sin(static_cast<double>(step));
            return step == 120 || step == 150 || step == 230 ? loss + 1.0 : loss;
        };
        using Fired = std::vector<std::pair<int64_t, std::string>>;
        auto feed = [&](Watchers& w, int64_t from, int64_t to, Fired& out) {
            for (int64_t step = from; step <= to; ++step)
                for (const auto& a : w.on_step(step_metrics(step, loss_at(step), 1.0))) out.emplace_back(a.step, a.watcher);
        };
        Watchers straight(c);
        Fired expected;
        feed(straight, 1, 300, expected);
        QCOMPARE(expected, (Fired{{120, "loss_spike"}, {230, "loss_spike"}}));

        Watchers before(c);
        Fired resumed;
        feed(before, 1, 130, resumed);
        Watchers after(c);
        after.restore_state(before.state_text());
        QCOMPARE(after.state_text(), before.state_text()); // doubles round-trip exactly
        feed(after, 131, 300, resumed);
        QCOMPARE(resumed, expected);
        QVERIFY_THROWS_EXCEPTION(std::invalid_argument, after.restore_state("not json"));
    }

    void cleanTrajectoryIsQuiet()
    {
        WatcherConfig c;
        c.spike_window = 20;
        Watchers w(c);
        std::vector<WatchAlert> all;
        for (int64_t step = 1; step <= 500; ++step) {
            const double t = static_cast<double>(step);
            auto a = w.on_step(step_metrics(step, 4.0 * std::exp(-t / 200) + 0.02 * std::sin(t), 1.0 + 0.05 * std::cos(t)));
            all.insert(all.end(), a.begin(), a.end());
            a = w.on_loss_scale(step, 65536.0, false);
            all.insert(all.end(), a.begin(), a.end());
        }
        LayerStatsFrame f;
        f.step = 500;
        TensorStats t;
        t.layer = "blocks.0.mlp.fc1";
        t.role = "input";
        t.format = "e4m3";
        t.underflow = 0.01;
        f.tensors.push_back(t);
        f.attention_max_logit = {{"blocks.0.attn", 12.0}};
        f.log_z_mean = 4.2;
        auto a = w.on_frame(f, {"blocks.0.mlp.fc1"});
        all.insert(all.end(), a.begin(), a.end());
        QVERIFY2(all.empty(), all.empty() ? "" : all.front().message.c_str());
    }

    void gradNormSpikeNamesTheLargestLayer()
    {
        WatcherConfig c;
        c.spike_window = 20;
        Watchers w(c);
        std::vector<WatchAlert> alerts;
        for (int64_t step = 1; step <= 60; ++step) {
            auto m = quiet_then_spike_at_50(step);
            m.layer_grad_norms = {{"blocks.0.attn.qkv", 0.5}, {"blocks.1.mlp.fc2", step == 50 ? 39.0 : 0.5}};
            for (auto& a : w.on_step(m)) alerts.push_back(a);
        }
        QCOMPARE(count_watcher(alerts, "grad_spike"), 1);
        QCOMPARE(alerts[0].layer, std::string("blocks.1.mlp.fc2"));
        QCOMPARE(alerts[0].step, int64_t(50));
    }

    // The step's gradients name the layer the backward reached first: lm_head (whose weight
    // gradient the tied embedding, wte, holds), then the blocks in reverse. A non-finite loss
    // came from the forward, which left every gradient NaN: they name no layer then. (Forward
    // order named wte for every NaN loss, and its bf16 action switched nothing.)
    void nonFiniteStepsNameTheLayerTheBackwardReachedFirst()
    {
        const auto layer_named = [](double loss, std::vector<std::pair<std::string, double>> norms) {
            WatcherConfig c;
            c.cooldown_steps = 0;
            Watchers w(c);
            auto m = step_metrics(7, loss, INFINITY);
            m.layer_grad_norms = std::move(norms);
            const auto alerts = w.on_step(m);
            if (alerts.size() != 1 || alerts[0].watcher != "nonfinite") return std::string("?");
            return alerts[0].layer;
        };
        QCOMPARE(layer_named(2.0, {{"wte", 1.0}, {"blocks.0.attn.qkv", INFINITY}, {"blocks.0.mlp.fc1", NAN},
                                   {"blocks.0.ln2", NAN}, {"ln_f", 1.0}}),
                 std::string("blocks.0.ln2"));
        QCOMPARE(layer_named(2.0, {{"wte", NAN}, {"blocks.0.attn.qkv", INFINITY}, {"ln_f", NAN}}), std::string("wte"));
        QCOMPARE(layer_named(NAN, {{"wte", NAN}, {"blocks.0.attn.qkv", NAN}, {"ln_f", NAN}}), std::string());
        QCOMPARE(layer_named(INFINITY, {{"wte", 1.0}, {"ln_f", 1.0}}), std::string());
        // A negative NaN (what 0 * inf and most NaN arithmetic give on x86) reads "nan" too.
        Watchers w(WatcherConfig{});
        const auto alerts = w.on_step(step_metrics(7, -std::numeric_limits<double>::quiet_NaN(), -NAN));
        QCOMPARE(alerts.size(), size_t(1));
        QCOMPARE(alerts[0].message, std::string("loss nan, grad norm nan"));
    }

    // A skipped step's gradients overflowed, and the loss scaler backed off: on a telemetry
    // step the frame's NaN gradients fired nonfinite, and its action switched a layer a step.
    // The forward's values are the model's own, skipped or not.
    void aSkippedFramesGradientsAreTheLossScalersBusiness()
    {
        LayerStatsFrame f;
        f.step = 1;
        f.skipped = true;
        TensorStats grad;
        grad.layer = "lm_head";
        grad.role = "weight_grad";
        grad.count = 208;
        grad.nans = 208;
        f.tensors.push_back(grad);
        WatcherConfig c;
        c.actions["nonfinite"] = WatchAction::SwitchToBf16;
        QVERIFY(Watchers(c).on_frame(f, {"lm_head"}).empty());
        TensorStats out = grad;
        out.role = "output";
        out.nans = 0;
        out.infs = 3;
        f.tensors.push_back(out);
        const auto alerts = Watchers(c).on_frame(f, {"lm_head"});
        QCOMPARE(alerts.size(), size_t(1));
        QCOMPARE(alerts[0].role, std::string("output"));
        f.skipped = false;
        QCOMPARE(Watchers(c).on_frame(f, {"lm_head"}).at(0).role, std::string("output"));
        f.tensors.pop_back();
        QCOMPARE(Watchers(c).on_frame(f, {"lm_head"}).at(0).role, std::string("weight_grad"));
    }

    void lossScaleCollapse()
    {
        WatcherConfig c;
        c.backoff_limit = 3;
        c.backoff_window = 10;
        c.loss_scale_floor = 1.0;
        Watchers w(c);
        // Two backoffs far apart: quiet. Three within 10 steps: collapse.
        QVERIFY(w.on_loss_scale(5, 32768, true).empty());
        QVERIFY(w.on_loss_scale(30, 16384, true).empty());
        QVERIFY(w.on_loss_scale(34, 8192, true).empty());
        const auto a = w.on_loss_scale(36, 4096, true);
        QCOMPARE(a.size(), size_t(1));
        QCOMPARE(a[0].watcher, std::string("loss_scale_collapse"));
        Watchers floor(c);
        QCOMPARE(floor.on_loss_scale(1, 0.5, false).size(), size_t(1));
    }

    void frameWatchersAndActions()
    {
        WatcherConfig c;
        c.actions["fp8_underflow"] = WatchAction::SwitchToBf16;
        c.actions["attention_logit"] = WatchAction::Pause;
        c.cooldown_steps = 100;
        Watchers w(c);
        LayerStatsFrame f;
        f.step = 10;
        TensorStats t;
        t.layer = "blocks.1.mlp.fc2";
        t.role = "grad_output";
        t.format = "e5m2";
        t.underflow = 0.2;
        f.tensors.push_back(t);
        f.attention_max_logit = {{"blocks.0.attn", 150.0}, {"blocks.1.attn", 20.0}};
        f.log_z_mean = 35.0;
        auto a = w.on_frame(f, {"blocks.1.mlp.fc2"});
        QCOMPARE(count_watcher(a, "fp8_underflow"), 1);
        QCOMPARE(count_watcher(a, "attention_logit"), 1);
        QCOMPARE(count_watcher(a, "log_z"), 1);
        for (const auto& alert : a) {
            if (alert.watcher == "fp8_underflow") QCOMPARE(alert.action, WatchAction::SwitchToBf16);
            if (alert.watcher == "attention_logit") {
                QCOMPARE(alert.layer, std::string("blocks.0.attn"));
                QCOMPARE(alert.action, WatchAction::Pause);
            }
            if (alert.watcher == "log_z") QCOMPARE(alert.action, WatchAction::None);
        }
        f.step = 50; // within the cooldown: quiet
        QVERIFY(w.on_frame(f, {"blocks.1.mlp.fc2"}).empty());
        f.step = 110; // the 100th step after: still quiet
        QVERIFY(w.on_frame(f, {"blocks.1.mlp.fc2"}).empty());
        f.step = 111;
        QCOMPARE(w.on_frame(f, {"blocks.1.mlp.fc2"}).size(), size_t(3));
    }

    // A layer alerts for its worst tensor over the threshold, not its first in the frame: a
    // weight's 5% flush named lm_head at the step its gradient flushed whole. The cooldown is the
    // layer's: its action is taken once, not once a role.
    void underflowAlertNamesTheWorstTensor()
    {
        WatcherConfig c;
        c.cooldown_steps = 100;
        Watchers w(c);
        LayerStatsFrame f;
        f.step = 1;
        for (const auto& [role, share] : {std::pair{"input", 0.01}, {"weight", 0.053}, {"grad_output", 1.0}}) {
            TensorStats t;
            t.layer = "lm_head";
            t.role = role;
            t.format = "e4m3";
            t.underflow = share;
            f.tensors.push_back(t);
        }
        const auto first = w.on_frame(f, {"lm_head"});
        QCOMPARE(first.size(), size_t(1));
        QCOMPARE(first[0].role, std::string("grad_output"));
        QCOMPARE(first[0].message, std::string("grad_output of lm_head: 100% of values flush to zero in e4m3 (threshold 5%)"));
        f.step = 2;
        QVERIFY(w.on_frame(f, {"lm_head"}).empty());
    }

    // Non-finite gradients in two layers: the backward pass runs the layers in reverse, so the
    // later layer's grad_output went non-finite first and is the one to blame; the earlier one
    // only inherited it. Ranking backward rows in forward order would blame blocks.0.
    void nonFiniteGradientsBlameTheLayerTheBackwardReachesFirst()
    {
        Watchers w(WatcherConfig{});
        LayerStatsFrame f;
        f.step = 4;
        for (const char* layer : {"blocks.0.mlp.fc1", "blocks.1.mlp.fc1"}) {
            TensorStats t;
            t.layer = layer;
            t.role = "grad_output";
            t.count = 10;
            t.nans = 3;
            f.tensors.push_back(t);
        }
        const auto alerts = w.on_frame(f, {"blocks.0.mlp.fc1", "blocks.1.mlp.fc1"});
        QCOMPARE(alerts.size(), size_t(1));
        QCOMPARE(alerts[0].watcher, std::string("nonfinite"));
        QCOMPARE(alerts[0].step, int64_t(4));
        QCOMPARE(alerts[0].layer, std::string("blocks.1.mlp.fc1"));
        QCOMPARE(alerts[0].role, std::string("grad_output"));
        QCOMPARE(alerts[0].message, std::string("grad_output of blocks.1.mlp.fc1 has 3 NaN and 0 inf of 10 values"));
    }

    // Attention's probabilities and the forward casts' block scales are forward tensors: a NaN
    // in block 0's probabilities comes before one in block 1's input, and before any gradient.
    // Ranked with the gradients, the probabilities would have been blamed last.
    void nonFiniteAttentionProbabilitiesRankInTheForward_data()
    {
        QTest::addColumn<QString>("role");
        QTest::addColumn<QString>("blamed");
        QTest::newRow("probs") << "probs" << "blocks.0.attn.sdpa";
        QTest::newRow("probs_scale") << "probs_scale" << "blocks.0.attn.sdpa";
        QTest::newRow("input_scale") << "input_scale" << "blocks.0.attn.sdpa";
        QTest::newRow("grad_scores") << "grad_scores" << "blocks.1.attn.qkv";
        QTest::newRow("grad_scores_scale") << "grad_scores_scale" << "blocks.1.attn.qkv";
        QTest::newRow("input_wgrad") << "input_wgrad" << "blocks.1.attn.qkv";
    }
    void nonFiniteAttentionProbabilitiesRankInTheForward()
    {
        QFETCH(QString, role);
        QFETCH(QString, blamed);
        Watchers w(WatcherConfig{});
        LayerStatsFrame f;
        f.step = 3;
        auto row = [](const char* layer, const std::string& r) {
            TensorStats t;
            t.layer = layer;
            t.role = r;
            t.count = 8;
            t.nans = 1;
            return t;
        };
        f.tensors = {row("blocks.0.attn.sdpa", role.toStdString()), row("blocks.1.attn.qkv", "input")};
        const auto alerts = w.on_frame(f, {"blocks.0.attn.qkv", "blocks.0.attn.sdpa", "blocks.1.attn.qkv"});
        QCOMPARE(alerts.size(), size_t(1));
        QCOMPARE(QString::fromStdString(alerts[0].layer), blamed);
    }

    // A step skipped by dynamic loss scaling has a non-finite gradient norm by design: it is the
    // loss scaler's business, not a divergence, and folding its NaN into the running mean would
    // blind the grad-spike watcher for the rest of the run. The spike at 50 must still fire.
    void skippedStepsFeedNeitherDivergenceNorGradSpikes()
    {
        WatcherConfig c;
        c.spike_window = 20;
        Watchers w(c);
        std::vector<WatchAlert> alerts;
        for (int64_t step = 1; step <= 60; ++step) {
            auto m = quiet_then_spike_at_50(step);
            if (step == 31) {
                m.skipped = true;
                m.grad_norm = std::nan("");
            }
            const auto a = w.on_step(m);
            if (step == 31) QVERIFY2(a.empty(), a.empty() ? "" : a.front().message.c_str());
            alerts.insert(alerts.end(), a.begin(), a.end());
        }
        QCOMPARE(alerts.size(), size_t(1));
        QCOMPARE(alerts[0].watcher, std::string("grad_spike"));
        QCOMPARE(alerts[0].step, int64_t(50));
    }

    // log Z widened a block of rows at a time gives exactly the values of one whole widening,
    // every row once, 16-bit logits included (blocks of 2, 2, 2 and 1 rows here). On the CPU they
    // are FP64 (log_z_rows_cpu), within a few 1e-8 of LibTorch's logsumexp in FP64.
    void logZInBlocksIsLogZOfEveryRow()
    {
        torch::manual_seed(3);
        const auto logits = (torch::randn({7, 4}) * 8).to(torch::kBFloat16).view({1, 7, 4});
        const auto whole = log_z_in_blocks(logits, 1 << 24); // one block
        QCOMPARE(whole.scalar_type(), torch::kFloat64);
        const auto reference = logits.to(torch::kFloat64).logsumexp(-1).reshape({-1});
        QCOMPARE(whole.sizes(), reference.sizes());
        QVERIFY(torch::allclose(whole, reference, 0.0, 4e-8));
        QVERIFY(torch::equal(log_z_in_blocks(logits, 9), whole));
        QVERIFY(torch::equal(log_z_in_blocks(logits, 1), whole)); // a row a block
    }

    // The CPU's log Z rows: logsumexp's rules for rows with an infinite max (-Inf: -Inf; +Inf: +Inf)
    // and with a NaN, large logits without overflow, and the same bits on 1, 2 and 3 threads
    // (rows spread over the threads' tasks: 3000 rows of 65).
    void logZRowsOnTheCpu()
    {
        const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
        const auto special = torch::tensor({-inf, -inf, -inf, 1.0f, inf, 2.0f, 3.0f, nan, 0.0f, 1000.0f, 1000.0f, -inf})
                                 .view({4, 3});
        const auto z = log_z_rows_cpu(special);
        QCOMPARE(z[0].item<double>(), -std::numeric_limits<double>::infinity());
        QCOMPARE(z[1].item<double>(), std::numeric_limits<double>::infinity());
        QVERIFY(std::isnan(z[2].item<double>()));
        QCOMPARE(z[3].item<double>(), 1000.0 + std::log(2.0));
        const ThreadCount restore;
        const auto i = torch::arange(3000 * 65, torch::kFloat32);
        const auto logits = (torch::sin(i * 0.37f) * 9.0f).view({3000, 65});
        at::set_num_threads(1);
        const auto one = log_z_rows_cpu(logits);
        // FP32 exponentials within about two ulps, summed in FP64: log Z to a few 1e-8 of FP64's.
        QVERIFY(torch::allclose(one, logits.to(torch::kFloat64).logsumexp(-1), 0.0, 4e-8));
        for (int threads : {2, 3}) {
            at::set_num_threads(threads);
            QVERIFY(torch::equal(log_z_rows_cpu(logits), one));
        }
    }

    // The log Z watcher bounds |mean log Z|: a softmax normaliser drifting far below zero is as
    // unhealthy as one drifting above (the z-loss penalises log Z squared). At the bound: quiet.
    void logZWatcherBoundsBothSigns_data()
    {
        QTest::addColumn<double>("logZ");
        QTest::addColumn<QString>("message"); // empty: no alert
        QTest::newRow("-35") << -35.0 << QStringLiteral("mean log Z -35 beyond +-20");
        QTest::newRow("+35") << 35.0 << QStringLiteral("mean log Z 35 beyond +-20");
        QTest::newRow("-20") << -20.0 << QString();
        QTest::newRow("+20") << 20.0 << QString();
    }
    void logZWatcherBoundsBothSigns()
    {
        QFETCH(double, logZ);
        QFETCH(QString, message);
        Watchers w(WatcherConfig{}); // log_z_max 20
        LayerStatsFrame f;
        f.step = 9;
        f.log_z_mean = logZ;
        const auto a = w.on_frame(f, {});
        QCOMPARE(a.size(), size_t(message.isEmpty() ? 0 : 1));
        if (message.isEmpty()) return;
        QCOMPARE(a[0].watcher, std::string("log_z"));
        QCOMPARE(a[0].layer, std::string("lm_head"));
        QCOMPARE(QString::fromStdString(a[0].message), message);
    }

    // backoff_window = 10: a backoff counts at its own step and the 9 after it, so the window
    // holds exactly 10 steps. Backoffs at 5 and 15 are 10 steps apart: never two in one window.
    // At 5 and 14 they are: the second one makes 2 = backoff_limit and the scale has collapsed.
    void lossScaleBackoffWindowBoundary_data()
    {
        QTest::addColumn<int64_t>("second");
        QTest::addColumn<QString>("message"); // empty: no alert
        QTest::newRow("5 and 15") << int64_t(15) << QString();
        QTest::newRow("5 and 14") << int64_t(14) << QStringLiteral("2 backoffs within 10 steps (scale 16384)");
    }
    void lossScaleBackoffWindowBoundary()
    {
        QFETCH(int64_t, second);
        QFETCH(QString, message);
        WatcherConfig c;
        c.backoff_window = 10;
        c.backoff_limit = 2;
        Watchers w(c);
        QVERIFY(w.on_loss_scale(5, 32768, true).empty());
        for (int64_t step = 6; step < second; ++step) QVERIFY(w.on_loss_scale(step, 32768, false).empty());
        const auto a = w.on_loss_scale(second, 16384, true);
        QCOMPARE(a.size(), size_t(message.isEmpty() ? 0 : 1));
        if (message.isEmpty()) return;
        QCOMPARE(a[0].watcher, std::string("loss_scale_collapse"));
        QCOMPARE(a[0].step, second);
        QCOMPARE(QString::fromStdString(a[0].message), message);
    }

    // The underflow watcher reads the block recipes' rows too: nvfp4/mxfp4 elements (e2m1,
    // against fp4_underflow_max: a healthy nvfp4 layer flushes ~7%), and nvfp4's block scales
    // (e4m3), whose underflow counts blocks, not values. fp8-block's FP32 scale rows are not
    // FP8, and the "_no_rht" rows are no GEMM's cast.
    void underflowWatcherReadsBlockRecipeRows()
    {
        WatcherConfig c;
        c.fp8_underflow_max = 0.05;
        QCOMPARE(c.fp4_underflow_max, 0.25);
        Watchers w(c);
        LayerStatsFrame f;
        f.step = 3;
        const auto row = [&](const char* layer, const char* role, const char* format, double underflow) {
            TensorStats t;
            t.layer = layer;
            t.role = role;
            t.format = format;
            t.underflow = underflow;
            f.tensors.push_back(t);
        };
        row("blocks.0.mlp.fc1", "grad_output", "e2m1", 0.26);
        row("blocks.0.mlp.fc2", "input_scale", "e4m3", 0.125);
        row("blocks.1.mlp.fc1", "weight_scale", "fp32", 0.5);
        row("blocks.1.mlp.fc2", "input", "e2m1", 0.25); // at the threshold: quiet
        row("blocks.1.attn.qkv", "input_wgrad_no_rht", "e2m1", 0.9);
        row("blocks.1.attn.proj", "input", "e2m1", 0.07); // a healthy nvfp4 operand
        const auto a = w.on_frame(f, {"blocks.0.mlp.fc1", "blocks.0.mlp.fc2", "blocks.1.mlp.fc1", "blocks.1.mlp.fc2",
                                      "blocks.1.attn.qkv", "blocks.1.attn.proj"});
        QCOMPARE(a.size(), size_t(2));
        QCOMPARE(a[0].message, std::string("grad_output of blocks.0.mlp.fc1: 26% of values flush to zero in e2m1 (threshold 25%)"));
        QCOMPARE(a[1].message, std::string("input_scale of blocks.0.mlp.fc2: 12.5% of blocks have a scale that flushes to zero "
                                        "in e4m3 (threshold 5%)"));
    }

    // --- attribution inside a real model -------------------------------------------------

    void nonFiniteIsAttributedToTheRightLayer()
    {
        ModelConfig m = tiny_model(3);
        torch::manual_seed(0);
        Gpt model(m, 11);
        const auto layers = model->gemm_layers();
        std::vector<std::string> order;
        for (const auto& g : layers) order.push_back(g->name());
        {
            torch::NoGradGuard no_grad;
            model->block(1)->mlp->fc1->weight()[3][5] = std::numeric_limits<float>::infinity();
        }
        for (const auto& g : layers) g->arm_telemetry(true);
        const auto idx = torch::randint(0, 11, {2, 8}, torch::kLong);
        model->loss(model->forward(idx), idx).backward();
        LayerStatsFrame f;
        f.step = 1;
        for (const auto& g : layers)
            for (auto& t : g->take_stats()) f.tensors.push_back(t);
        Watchers w(WatcherConfig{});
        const auto alerts = w.on_frame(f, order);
        QCOMPARE(count_watcher(alerts, "nonfinite"), 1);
        QCOMPARE(alerts[0].layer, std::string("blocks.1.mlp.fc1"));
        QVERIFY2(alerts[0].message.rfind("weight of blocks.1.mlp.fc1", 0) == 0, alerts[0].message.c_str());
        // Upstream layers saw only finite values going forward.
        for (const auto& t : f.tensors)
            if (t.layer.rfind("blocks.0.", 0) == 0 && t.role != "grad_output" && t.role != "weight_grad")
                QCOMPARE(t.nans + t.infs, int64_t(0));
    }

    // The update ratio of each weight is ||w_after - w_before|| / ||w_before||, every value of the
    // change counted (the last one, the largest, included).
    void updateRatioIsEachWeightsRelativeChange()
    {
        ModelConfig m = tiny_model(1);
        m.n_embd = 6; // weights of 108, 36, 144 and 66 values
        torch::manual_seed(5);
        Gpt model(m, 11);
        TelemetryStep telemetry;
        telemetry.arm(model);
        const auto idx = torch::randint(0, 11, {2, 8}, torch::kLong);
        model->loss(model->forward(idx), idx).backward();
        telemetry.disarm(model);
        telemetry.remember_weights(model);
        std::map<std::string, torch::Tensor> before, after;
        {
            torch::NoGradGuard no_grad;
            for (const auto& g : model->gemm_layers()) {
                if (!g->last_weight().defined()) continue;
                auto w = g->last_weight();
                before[g->name()] = w.detach().clone();
                // A change that differs value by value, largest at the last one.
                const auto i = torch::arange(w.numel(), torch::kFloat32).view_as(w);
                w.add_(torch::sin(i * 0.37f) * 0.01f + (i == w.numel() - 1).to(torch::kFloat32) * 0.5f);
                after[g->name()] = w.detach().clone();
            }
        }
        QCOMPARE(before.size(), size_t(5)); // qkv, proj, fc1, fc2, lm_head
        const auto frame = TelemetryStep::complete(*telemetry.launch(model, 1, /*skipped=*/false, -1, nullptr));
        int checked = 0;
        for (const auto& t : frame.tensors) {
            if (t.role != "weight") continue;
            const auto& b = before.at(t.layer);
            const double expected = (after.at(t.layer).to(torch::kFloat64) - b.to(torch::kFloat64)).norm().item<double>() /
                                    b.to(torch::kFloat64).norm().item<double>();
            // FP64 sums on the CPU (update_norms_cpu); a GPU's multi-tensor norms are FP32's.
            QVERIFY2(std::abs(t.update_ratio - expected) <= 1e-12 * expected,
                     qPrintable(QString("%1: %2 against %3").arg(t.layer.c_str()).arg(t.update_ratio).arg(expected)));
            ++checked;
        }
        QCOMPARE(checked, 5);
    }

    void trainerEmitsFramesOnCadence()
    {
        auto config = golden_fp8(12, 0, 5);
        Trainer trainer(config);
        Recorder rec;
        trainer.run(rec);
        QCOMPARE(rec.frames.size(), size_t(3)); // steps 1, 5, 10
        QCOMPARE(rec.frames[0].step, int64_t(1));
        QCOMPARE(rec.frames[2].step, int64_t(10));
        const auto& f = rec.frames[1];
        // 2 blocks x 4 linear layers + lm_head, 5 roles each; the 2 attention layers (BF16,
        // unfused on the CPU) their probabilities and dS.
        QCOMPARE(f.tensors.size(), size_t(9 * 5 + 2 * 2));
        QCOMPARE(f.attention_max_logit.size(), size_t(2));
        QVERIFY(f.log_z_mean > 0);
        QVERIFY(f.memory.resident_bytes > 0);
        int weights_with_ratio = 0;
        std::set<double> ratios;
        for (const auto& t : f.tensors) {
            if (t.role == "input") QCOMPARE(t.format, std::string("e4m3"));
            if (t.role == "grad_output") QCOMPARE(t.format, std::string("e5m2"));
            if (t.role == "output") QCOMPARE(t.format, std::string("bf16"));
            if (t.role == "weight" && t.update_ratio > 1e-3 && t.update_ratio < 1.0) ++weights_with_ratio; // Adam: ~lr / rms(w)
            if (t.role == "weight") ratios.insert(t.update_ratio);
        }
        QCOMPARE(weights_with_ratio, 9);
        QCOMPARE(ratios.size(), size_t(9)); // each weight its own ratio (they are computed together)
        // Per-layer gradient norms every step, forward order, consistent with the total.
        QCOMPARE(rec.steps.size(), size_t(12));
        double sum_sq = 0.0;
        for (const auto& [layer, norm] : rec.steps[3].layer_grad_norms) sum_sq += norm * norm;
        QVERIFY(std::abs(std::sqrt(sum_sq) - rec.steps[3].grad_norm) < 1e-4 * rec.steps[3].grad_norm);
        QCOMPARE(rec.steps[3].layer_grad_norms.front().first, std::string("wte"));
    }

    void watcherActionSwitchesLayerToBf16()
    {
        auto config = golden_fp8(3, 0);
        switch_on_any_underflow(config);
        Trainer trainer(config);
        Recorder rec;
        trainer.run(rec);
        int actions = 0;
        std::set<std::string> switched; // by the watcher's precision_changed events
        for (const auto& e : rec.events) {
            actions += e.kind == EventKind::WatchAction;
            if (e.kind != EventKind::PrecisionChanged) continue;
            // The switch is a typed precision change that names its cause and carries the
            // engine's state of the layer, so the precision table can show it.
            QCOMPARE(int(e.cause), int(ChangeCause::Watcher));
            QCOMPARE(e.watcher, std::string("fp8_underflow"));
            QCOMPARE(e.layers.size(), size_t(1));
            QCOMPARE(e.layer_states.size(), size_t(1));
            QCOMPARE(e.layer_states[0].name, e.layers[0]);
            QVERIFY(e.layer_states[0].formats == (GemmFormats{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16}));
            QVERIFY(e.old_formats && e.old_formats->any_fp8());
            switched.insert(e.layers[0]);
        }
        QVERIFY(actions >= 1);
        QCOMPARE(size_t(actions), switched.size()); // one change per action, one action per layer
        // Exactly the switched layers run BF16 now; every other layer keeps the preset's formats.
        for (const auto& l : trainer.layers()) {
            const GemmFormats expected = switched.count(l.name)
                                             ? GemmFormats{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16}
                                             : resolve_layer_formats(config.precision, l.name, config.model.n_layer);
            QVERIFY2(l.formats == expected, l.name.c_str());
        }
    }

    // attention_logit names a block's attention (blocks.N.attn), no one GEMM layer: its bf16
    // action switches the three layers of it, once. It switched none, saying nothing (a
    // read-only audit).
    void attentionLogitActionSwitchesTheBlocksAttention()
    {
        auto config = golden_fp8(3, 0);
        config.telemetry.watchers.attention_logit_max = 0.0; // every block's logits exceed it
        config.telemetry.watchers.actions["attention_logit"] = WatchAction::SwitchToBf16;
        Trainer trainer(config);
        Recorder rec;
        trainer.run(rec);
        std::vector<std::string> actions, changes;
        for (const auto& e : rec.events) {
            if (e.kind == EventKind::WatchAction) actions.push_back(e.message());
            if (e.kind == EventKind::PrecisionChanged) changes.push_back(e.message());
        }
        QCOMPARE(actions, (std::vector<std::string>{"attention_logit: switched blocks.0.attn to bf16",
                                                    "attention_logit: switched blocks.1.attn to bf16"}));
        const std::string b0 = "blocks.0.attn.* -> bf16/bf16/bf16 (blocks.0.attn.qkv, blocks.0.attn.sdpa, "
                               "blocks.0.attn.proj) by watcher attention_logit";
        QCOMPARE(changes.size(), size_t(2));
        QCOMPARE(changes[0], b0);
        const GemmFormats bf16 = GemmFormats::all(NumberFormat::BF16);
        for (const auto& l : trainer.layers())
            QVERIFY2((l.formats == bf16) == (l.name.find(".attn.") != std::string::npos), l.name.c_str());
    }

    // The watchers' actions on a trainer, each as the events say it. An fp16 step that
    // overflows is the loss scaler's (skipped, backed off): nonfinite used to switch a layer
    // to BF16 on each such telemetry step.
    void aSkippedStepSwitchesNoLayer()
    {
        auto config = golden_fp8(4, 0);
        config.precision.preset = "fp16";
        config.precision.loss_scaling.mode = LossScalingMode::Dynamic;
        config.precision.loss_scaling.init_scale = 1e30; // every step overflows until it backs off far enough
        config.telemetry.watchers.actions["nonfinite"] = WatchAction::SwitchToBf16;
        Trainer trainer(config);
        Recorder rec;
        trainer.run(rec);
        int backoffs = 0, actions = 0;
        for (const auto& e : rec.events) {
            backoffs += e.kind == EventKind::LossScaleBackoff;
            actions += e.kind == EventKind::WatchAction || e.kind == EventKind::PrecisionChanged;
        }
        QCOMPARE(backoffs, 4);
        QCOMPARE(actions, 0);
    }

    // A pause that fires at the last step cannot be taken: the run ends there. It was
    // recorded as "pausing training", and the run finished.
    void aPauseAtTheLastStepSaysItIsNotTaken()
    {
        auto config = golden_fp8(1, 0);
        config.telemetry.watchers.attention_logit_max = 0.0;
        config.telemetry.watchers.actions["attention_logit"] = WatchAction::Pause;
        Trainer trainer(config);
        Recorder rec;
        trainer.run(rec);
        std::vector<std::string> actions;
        for (const auto& e : rec.events)
            if (e.kind == EventKind::WatchAction) actions.push_back(e.message());
        QCOMPARE(actions, (std::vector<std::string>{"attention_logit: not paused: the run ends at this step",
                                                    "attention_logit: not paused: the run ends at this step"}));
        QCOMPARE(trainer.step(), int64_t(1));
    }

    // grad_spike names the parameter group with the largest gradient: the tied embedding (wte)
    // holds lm_head's, whose GEMM its bf16 action switches. It switched nothing, and said
    // nothing (a read-only audit).
    void gradSpikeActionsSwitchTheGemmTheyName()
    {
        auto config = golden_fp8(20, 0, 0);
        config.telemetry.watchers.spike_window = 2;
        config.telemetry.watchers.grad_spike_sigma = 1e-6;
        config.telemetry.watchers.cooldown_steps = 0;
        config.telemetry.watchers.actions["grad_spike"] = WatchAction::SwitchToBf16;
        Trainer trainer(config);
        Recorder rec;
        trainer.run(rec);
        std::vector<std::string> alerts, actions;
        for (const auto& e : rec.events) {
            if (e.kind == EventKind::Alert) alerts.push_back(e.layers.at(0));
            if (e.kind == EventKind::WatchAction) actions.push_back(e.message());
        }
        QCOMPARE(alerts, std::vector<std::string>(4, "wte"));
        // Once: the later alerts find lm_head in BF16 already.
        QCOMPARE(actions, std::vector<std::string>{"grad_spike: switched lm_head to bf16"});
        for (const auto& l : trainer.layers())
            QVERIFY2(l.formats == (l.name == "lm_head" ? GemmFormats::all(NumberFormat::BF16)
                                                       : resolve_layer_formats(config.precision, l.name, 2)),
                     l.name.c_str());
    }

    // --- memory ------------------------------------------------------------------------

    void analyticMemoryMatchesHandComputation()
    {
        ProjectConfig c;
        c.model.n_layer = 1;
        c.model.n_head = 2;
        c.model.n_embd = 8;
        c.model.context_length = 4;
        c.model.bias = false;
        c.training.batch_size = 2;
        // V=10, C=8, T=4, B=2, one block, no biases.
        // params: wte 80 + wpe 32 + ln1 8 + qkv 192 + proj 64 + ln2 8 + fc1 256 + fc2 256 + ln_f 8 = 904
        auto fp32 = estimate_memory(c, 10);
        QCOMPARE(fp32.parameters, int64_t(904));
        QCOMPARE(fp32.master_weights_bytes, int64_t(3616));
        QCOMPARE(fp32.gradients_bytes, int64_t(3616));
        QCOMPARE(fp32.optimizer_state_bytes, int64_t(7232));
        QCOMPARE(fp32.low_precision_weights_bytes, int64_t(0));
        // sbh = 64. FP32 block, fused attention (no T x T scores kept): ln1 4*64 + qkv 4*64 + qkv out
        // 4*192 + its output 4*64 and log-sum-exp 4*(2*2*4) + proj 4*64 + ln2 4*64 + fc1 4*64 + gelu
        // 4*256 + fc2 4*256 = 256+256+768+320+256+256+256+1024+1024 = 4416
        QCOMPARE(fp32.activations_by_layer[0].second, int64_t(4416));
        // logits: ln_f 4*64 + lm_head input 4*64 + FP32 logits 4*4*2*10 = 256 + 256 + 320 = 832
        QCOMPARE(fp32.activations_by_layer[1].second, int64_t(832));

        c.precision.preset = "fp8-hybrid";
        auto fp8 = estimate_memory(c, 10);
        // Weight copies: 1 B each + a 4 B scale: lm_head 80+4, qkv 192+4, proj 64+4, fc1 256+4, fc2 256+4
        // = 868, twice: the dgrad GEMM (E5M2 x E4M3) reads the weight transposed, a second copy.
        QCOMPARE(fp8.low_precision_weights_bytes, int64_t(2 * 868));
        // Block: ln1 4*64 (the residual stream stays FP32) + qkv in 1*64 + q,k,v (bf16 attention,
        // fused on the native executor) 2*192 + its output 2*64 and log-sum-exp 64 + proj in 64 +
        // ln2 4*64 + fc1 in 64 + gelu 2*256 + fc2 in 256 = 256+64+384+192+64+256+64+512+256 = 2048
        QCOMPARE(fp8.activations_by_layer[0].second, int64_t(2048));
        // logits: ln_f 4*64 + lm_head input 1*64 + the BF16 logits the fused loss keeps 2*4*2*10
        // = 256 + 64 + 160 = 480 (on a GPU; FP32 logits and log_softmax's FP32 output elsewhere).
        QCOMPARE(fp8.activations_by_layer[1].second, int64_t(480));
        QCOMPARE(fp8.total_bytes(), fp8.master_weights_bytes + fp8.low_precision_weights_bytes + fp8.gradients_bytes +
                                        fp8.optimizer_state_bytes + fp8.activations_bytes);
        // Each recipe as its route keeps it (linear_route). Weights: lm_head 10x8, qkv 24x8,
        // proj 8x8, fc1 32x8, fc2 8x32: 848 values.
        const auto copies_under = [&](Fp8Scaling scaling) {
            c.precision.fp8.scaling = scaling;
            return estimate_memory(c, 10).low_precision_weights_bytes;
        };
        // rowwise runs natively: codes and an FP32 per row, the forward copy's along the weight's
        // rows (out features), the transposed copy's along its columns: 120+288+96+384+288 = 1176;
        // 112+224+96+288+384 = 1104.
        QCOMPARE(copies_under(Fp8Scaling::PerRow), int64_t(1176 + 1104));
        // nvfp4, mxfp4 and mxfp8 are emulated on a Hopper GPU, in FP32 values: one cast where it
        // serves both GEMMs (nvfp4's 16x16 tiles: 4 x 848), two where the blocks run along K
        // (1x16, 1x32: 2 x 4 x 848). fp8-block off whole 128-blocks (8 tokens here) likewise: its
        // square tiles serve both.
        QCOMPARE(copies_under(Fp8Scaling::NvFp4), int64_t(3392));
        QCOMPARE(copies_under(Fp8Scaling::MxFp4), int64_t(6784));
        QCOMPARE(copies_under(Fp8Scaling::Block32), int64_t(6784));
        QCOMPARE(copies_under(Fp8Scaling::Block128), int64_t(3392));
        c.precision.fp8.nvfp4_weight_2d = false;
        QCOMPARE(copies_under(Fp8Scaling::NvFp4), int64_t(6784));
        c.precision.fp8.nvfp4_weight_2d = true;
        // The emulator's saved inputs under a block recipe: the inputs widened to FP32 (ln1's
        // output is FP32 already). qkv, proj and fc1 in 4*64 where delayed scaling kept 1*64 of
        // codes, fc2 in 4*256 where it kept 256: 2048 + 3*192 + 3*256 = 3392.
        QCOMPARE(estimate_memory(c, 10).activations_by_layer[0].second, int64_t(3392));

        // fp8-block on whole blocks (E4M3 everywhere, 256 tokens, 256 wide) multiplies codes:
        // 1 B a value and an FP32 per 128x128 tile. Tiles: qkv 768x256 6x2, proj 2x2, fc1
        // 1024x256 8x2, fc2 2x8: 786432 values and 4 x 48 B, the same transposed; lm_head's 10
        // rows are no whole block: one FP32 cast, 4 x 2560.
        c.precision.preset = "fp8-e4m3";
        c.model.n_embd = 256;
        c.model.context_length = 128;
        QCOMPARE(copies_under(Fp8Scaling::Block128), int64_t(2 * (786432 + 192) + 10240));
        // sbh = 65536. ln1 in 4 sbh + qkv in (codes sbh + an FP32 per 128 tokens, 4*2*256) + q,k,v
        // 2*3 sbh + BF16 attention's output 2 sbh and log-sum-exp 4*2*2*128 + proj in 67584 + ln2
        // 4 sbh + fc1 in 67584 + gelu 2*4 sbh + fc2 in (4 sbh + 4*2*1024) = 262144 + 67584 +
        // 393216 + 131072 + 2048 + 67584 + 262144 + 67584 + 524288 + 270336 = 2048000.
        QCOMPARE(estimate_memory(c, 10).activations_by_layer[0].second, int64_t(2048000));
        c.model.n_embd = 8;
        c.model.context_length = 4;
        c.precision.preset = "fp8-hybrid";
        c.precision.fp8.scaling = Fp8Scaling::Delayed;

        // BF16 on the emulator, on a GPU as on a CPU: every saved tensor in FP32, and the scores
        // written out: ln1 256 + qkv in 4*64 + q,k,v 4*192 + softmax 4*(2*4*4*2) + proj in 256 +
        // ln2 256 + fc1 in 256 + gelu 4*256 + fc2 in 4*256 = 4352; its weights as one FP32 cast
        // each (4 x 848). The emulator's loss keeps log_softmax's FP32 output: ln_f 256 + lm_head
        // in 4*64 + 320 = 832.
        c.precision.preset = "bf16";
        c.precision.backend = GemmBackend::Emulated;
        QCOMPARE(estimate_memory(c, 10).activations_by_layer[0].second, int64_t(4352));
        QCOMPARE(estimate_memory(c, 10).low_precision_weights_bytes, int64_t(3392));
        QCOMPARE(estimate_memory(c, 10).activations_by_layer[1].second, int64_t(832));
        // On a CPU the emulator keeps every saved tensor in FP32 (the FP32 block's figure, with
        // the scores written out: 4352), and the lm_head input too (832, as FP32).
        c.precision.backend = GemmBackend::Auto;
        const auto cpu = estimate_memory(c, 10, MemoryTarget::CpuEmulator);
        QCOMPARE(cpu.activations_by_layer[0].second, int64_t(4352));
        QCOMPARE(cpu.activations_by_layer[1].second, int64_t(832));
        // Dropout on the unfused path: a mask and a dropped copy of the scores, in FP32, and two
        // 1 B residual masks: 4352 + 2*256 + 2*64 = 4992.
        c.model.dropout = 0.1;
        QCOMPARE(estimate_memory(c, 10, MemoryTarget::CpuEmulator).activations_by_layer[0].second, int64_t(4992));
    }

    void layerShapesAddUpToTheModel()
    {
        ProjectConfig c;
        c.model.n_layer = 2;
        c.model.n_embd = 16;
        c.model.n_head = 2;
        c.model.context_length = 8;
        c.data.examples = 200;
        Trainer trainer(c);
        const auto shapes = gemm_layer_shapes(c.model, trainer.vocab_size());
        QCOMPARE(project_vocab_size(c), trainer.vocab_size());
        const auto layers = trainer.layers();
        QCOMPARE(shapes.size(), layers.size());
        int64_t gemm_params = 0;
        for (size_t i = 0; i < shapes.size(); ++i) {
            QCOMPARE(shapes[i].name, layers[i].name);
            gemm_params += shapes[i].parameters;
        }
        QCOMPARE(shapes[0].parameters, int64_t(3 * 16 * 16 + 3 * 16)); // qkv with bias
        QCOMPARE(shapes[1].parameters, int64_t(0));                    // sdpa
        // The rest of the model: positions, 2 LayerNorms per block and the final one (weight + bias).
        const int64_t rest = 8 * 16 + (2 * 2 + 1) * 2 * 16;
        QCOMPARE(gemm_params + rest, trainer.parameter_count());
    }

    // Biases: the analytic count must include every Linear's and LayerNorm's bias, each of its
    // own width (fc1's is 4C, fc2's C), or a default project (bias on) is mis-sized. The hand
    // computation mirrors analyticMemoryMatchesHandComputation's with biases on.
    void analyticMemoryCountsBiases()
    {
        ProjectConfig c;
        c.model.n_layer = 1;
        c.model.n_head = 2;
        c.model.n_embd = 8;
        c.model.context_length = 4;
        c.model.bias = true;
        // V=10, C=8, T=4: wte 80 + wpe 32 + ln1 8+8 + qkv 192+24 + proj 64+8 + ln2 8+8
        // + fc1 256+32 + fc2 256+8 + ln_f 8+8 = 1000
        const auto m = estimate_memory(c, 10);
        QCOMPARE(m.parameters, int64_t(1000));
        QCOMPARE(m.master_weights_bytes, int64_t(4000));
        QCOMPARE(m.optimizer_state_bytes, int64_t(8000));
    }

    // The analytic count against the model the trainer really builds, with and without biases.
    void analyticParametersMatchTheBuiltModel_data()
    {
        QTest::addColumn<bool>("bias");
        QTest::newRow("bias") << true;
        QTest::newRow("no bias") << false;
    }
    void analyticParametersMatchTheBuiltModel()
    {
        QFETCH(bool, bias);
        ProjectConfig c;
        c.model.n_layer = 2;
        c.model.n_embd = 16;
        c.model.n_head = 2;
        c.model.context_length = 8;
        c.model.bias = bias;
        c.data.examples = 200;
        Trainer trainer(c);
        QCOMPARE(estimate_memory(c, trainer.vocab_size()).parameters, trainer.parameter_count());
    }

    void residentMemoryIsReported() { QVERIFY(resident_memory_bytes() > 1024 * 1024); }

    // --- store -------------------------------------------------------------------------

    void layerStatsRoundTripThroughTheStore()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("r.sqlite").toStdString());
        const auto id = store.create_run("t", "", "{}");
        StoreSink sink(store, id);
        LayerStatsFrame f;
        f.step = 20;
        TensorStats t = compute_tensor_stats(torch::tensor({1.0f, 3.0f, 0.0f, 1e-3f}), NumberFormat::FP32, 1.0f, {});
        t.layer = "blocks.0.attn.qkv";
        t.role = "input";
        f.tensors.push_back(t);
        f.attention_max_logit = {{"blocks.0.attn", 7.5}};
        sink.on_layer_stats(f);
        const auto rows = store.layer_stats(id);
        QCOMPARE(rows.size(), size_t(1));
        QCOMPARE(rows[0].first, int64_t(20));
        QCOMPARE(rows[0].second.layer, t.layer);
        QCOMPARE(rows[0].second.zeros, int64_t(1));
        QCOMPARE(rows[0].second.first_exponent, -10);
        QVERIFY(rows[0].second.exponent_counts == t.exponent_counts);
        QCOMPARE(rows[0].second.quant_snr_db, std::numeric_limits<double>::infinity());
        bool logit_found = false;
        for (const auto& s : store.scalars(id)) logit_found |= s.tag == "attn_max_logit/blocks.0.attn" && s.value == 7.5;
        QVERIFY(logit_found);
    }

    void versionOneStoreIsUpgradedInPlace()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("v1.sqlite").toStdString();
        sqlite3* db = nullptr;
        sqlite3_open(path.c_str(), &db);
        // The version-1 schema, as the first release wrote it, kept as a fixture.
        QFile fixture(MANTISSA_TEST_DATA_DIR "/run_store_v1.sql");
        QVERIFY(fixture.open(QIODevice::ReadOnly));
        QCOMPARE(sqlite3_exec(db, fixture.readAll().constData(), nullptr, nullptr, nullptr), SQLITE_OK);
        sqlite3_close(db);
        RunStore store(path);
        QCOMPARE(store.schema_version(), RunStore::kSchemaVersion);
        const auto run = store.find_run("old run");
        QVERIFY(run.has_value());
        QCOMPARE(store.scalars(run->id).size(), size_t(1));
        QVERIFY(store.layer_stats(run->id).empty()); // the new table exists and is usable
    }
};

QTEST_GUILESS_MAIN(TestTelemetry)
#include "test_telemetry.moc"
