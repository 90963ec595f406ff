// SPDX-License-Identifier: GPL-3.0-or-later
// The precision engine end to end: per-layer policies, emulated GEMMs against an FP64
// reference, gradient underflow and loss scaling, and a policy change mid-run.

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>

#include <torch/torch.h>

#include "cpu_causal_mask.h"
#include "layer_gemm.h"
#include "precision_policy.h"
#include "project_config.h"
#include "trainer.h"

// Qt after LibTorch: Qt's `slots` macro would break torch's IValue::slots().
#include <QtTest>

#include <QDir>
#include <QFile>

using namespace mantissa;

namespace {

struct Recorder : TelemetrySink {
    std::vector<StepMetrics> steps;
    std::vector<RunEvent> events;
    std::function<void(const StepMetrics&)> hook;
    void on_step(const StepMetrics& m) override
    {
        steps.push_back(m);
        if (hook) hook(m);
    }
    void on_eval(const EvalMetrics&) override {}
    void on_event(const RunEvent& e) override { events.push_back(e); }
    const RunEvent* find(const std::string& kind) const
    {
        for (const auto& e : events)
            if (e.tag() == kind) return &e;
        return nullptr;
    }
};

ProjectConfig golden_project() { return load_project_file(MANTISSA_TEST_DATA_DIR "/golden_project.json"); }

// By step, the largest fraction over the FP8 gradient casts: saturated, and flushed to zero.
struct GradientCasts : Recorder {
    std::map<int64_t, double> worst_dy_overflow, worst_dy_underflow;
    void on_layer_stats(const LayerStatsFrame& f) override
    {
        for (const auto& t : f.tensors)
            if (t.role == "grad_output" && (t.format == "e5m2" || t.format == "e4m3")) {
                worst_dy_overflow[f.step] = std::max(worst_dy_overflow[f.step], t.overflow);
                worst_dy_underflow[f.step] = std::max(worst_dy_underflow[f.step], t.underflow);
            }
    }
    // Every step's casts under 1% saturated. Delayed scaling saturates a few values where a
    // gradient's amax grew (up to 0.07% of a cast in these tests).
    void verify_unsaturated(size_t steps) const
    {
        QCOMPARE(worst_dy_overflow.size(), steps);
        for (const auto& [step, overflow] : worst_dy_overflow)
            QVERIFY2(overflow < 0.01,
                     qPrintable(QString("step %1: %2 of a gradient saturated").arg(step).arg(overflow)));
    }
};

// fp8-hybrid on `backend` ("emulated", "native"), statistics every step, no evaluation.
ProjectConfig fp8_observed(int64_t steps, const QString& backend)
{
    auto config = load_project_file(MANTISSA_TEST_DATA_DIR "/golden_project.json");
    config.training.steps = steps;
    config.eval.interval = 0;
    config.telemetry.interval = 1;
    config.precision.preset = "fp8-hybrid";
    config.precision.backend = backend == QLatin1String("native") ? GemmBackend::Native : GemmBackend::Emulated;
    return config;
}

// Trains `config` (loss scaling off) and writes its checkpoint to `path`.
void save_unscaled_run(const ProjectConfig& config, const std::string& path)
{
    Trainer unscaled(config);
    Recorder r;
    unscaled.run(r);
    QCOMPARE(unscaled.loss_scale(), 1.0);
    unscaled.save_checkpoint(path);
}

double relative_rms_error(const torch::Tensor& got, const torch::Tensor& reference)
{
    const auto diff = got.to(torch::kFloat64) - reference;
    return (diff.square().mean().sqrt() / reference.square().mean().sqrt()).item<double>();
}


} // namespace

Q_DECLARE_METATYPE(mantissa::NumberFormat)

class TestPrecision : public QObject {
    Q_OBJECT
private slots:
    void globMatching_data()
    {
        QTest::addColumn<QString>("pattern");
        QTest::addColumn<QString>("name");
        QTest::addColumn<bool>("matches");
        QTest::newRow("mlp of any block") << "blocks.*.mlp.*" << "blocks.12.mlp.fc1" << true;
        QTest::newRow("not attention") << "blocks.*.mlp.*" << "blocks.1.attn.qkv" << false;
        QTest::newRow("exact") << "lm_head" << "lm_head" << true;
        QTest::newRow("exact mismatch") << "lm_head" << "lm_head2" << false;
        QTest::newRow("star everything") << "*" << "blocks.0.attn.sdpa" << true;
        QTest::newRow("suffix") << "*.fc2" << "blocks.3.mlp.fc2" << true;
        QTest::newRow("backtracking") << "b*s.*.a*" << "blocks.0.attn.qkv" << true;
    }
    void globMatching()
    {
        QFETCH(QString, pattern);
        QFETCH(QString, name);
        QFETCH(bool, matches);
        QCOMPARE(glob_match(pattern.toStdString(), name.toStdString()), matches);
    }

    void presetsAndOverrides_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<QString>("layer");
        QTest::addColumn<QString>("expected");
        QTest::newRow("fp32") << "fp32" << "blocks.1.mlp.fc1" << "fp32/fp32/fp32";
        QTest::newRow("bf16") << "bf16" << "blocks.1.attn.sdpa" << "bf16/bf16/bf16";
        QTest::newRow("hybrid linear") << "fp8-hybrid" << "blocks.1.mlp.fc1" << "e4m3/e5m2/e5m2";
        QTest::newRow("hybrid attention in bf16") << "fp8-hybrid" << "blocks.1.attn.sdpa" << "bf16/bf16/bf16";
        QTest::newRow("hybrid lm_head") << "fp8-hybrid" << "lm_head" << "e4m3/e5m2/e5m2";
        QTest::newRow("keep-ends first") << "fp8-hybrid-keep-ends" << "blocks.0.attn.qkv" << "bf16/bf16/bf16";
        QTest::newRow("keep-ends middle") << "fp8-hybrid-keep-ends" << "blocks.2.mlp.fc2" << "e4m3/e5m2/e5m2";
        QTest::newRow("keep-ends last") << "fp8-hybrid-keep-ends" << "blocks.3.mlp.fc2" << "bf16/bf16/bf16";
        QTest::newRow("keep-ends head") << "fp8-hybrid-keep-ends" << "lm_head" << "bf16/bf16/bf16";
        QTest::newRow("override mlp wgrad") << "bf16" << "blocks.2.mlp.fc1" << "bf16/bf16/fp32";
        QTest::newRow("override later wins") << "bf16" << "lm_head" << "fp16/fp16/fp16";
    }
    void presetsAndOverrides()
    {
        QFETCH(QString, preset);
        QFETCH(QString, layer);
        QFETCH(QString, expected);
        PrecisionConfig c;
        c.preset = preset.toStdString();
        if (preset == "bf16") {
            c.layers.push_back({"blocks.*.mlp.*", std::nullopt, std::nullopt, NumberFormat::FP32});
            c.layers.push_back({"lm_*", NumberFormat::FP32, NumberFormat::FP32, NumberFormat::FP32});
            c.layers.push_back({"lm_head", NumberFormat::FP16, NumberFormat::FP16, NumberFormat::FP16});
        }
        QCOMPARE(QString::fromStdString(resolve_layer_formats(c, layer.toStdString(), 4).describe()), expected);
    }

    void projectFileOverridesAreValidated()
    {
        auto c = load_project_json(
            R"({"precision": {"preset": "fp8-hybrid", "layers": [{"match": "lm_head", "format": "bf16"}],
                "fp8": {"scaling": "mxfp8"}}})", "");
        QCOMPARE(c.precision.layers.size(), size_t(1));
        QCOMPARE(resolve_layer_formats(c.precision, "lm_head", 2).describe(), std::string("bf16/bf16/bf16"));
        QCOMPARE(c.precision.fp8.scaling, Fp8Scaling::Block32);
        const std::pair<const char*, const char*> bad[] = {
            {R"({"precision": {"layers": [{"match": "x", "forward": "fp12"}]}})",
             "precision.layers[0].forward: 'fp12' is not one of fp32, tf32, bf16, fp16, e4m3, e5m2"},
            // e2m1/e8m0 label telemetry (nvfp4/mxfp4 elements, MX scales); a GEMM cannot choose them.
            {R"({"precision": {"layers": [{"match": "x", "wgrad": "e2m1"}]}})",
             "precision.layers[0].wgrad: 'e2m1' is not one of fp32, tf32, bf16, fp16, e4m3, e5m2"},
            {R"({"precision": {"layers": [{"forward": "bf16"}]}})", "precision.layers[0].match: is required"},
            {R"({"precision": {"layers": [{"match": "x", "fwd": "bf16"}]}})", "precision.layers[0].fwd: unknown key"},
            {R"({"precision": {"fp8": {"scaling": "tensorwise"}}})", "precision.fp8.scaling: 'tensorwise'"},
            {R"({"precision": {"loss_scaling": {"backoff_factor": 2.0}}})", "precision.loss_scaling.backoff_factor"},
            {R"({"precision": {"preset": "int8"}})", "precision.preset: 'int8' is not one of fp32, bf16"},
        };
        for (const auto& [json, message] : bad) {
            try {
                load_project_json(json, "");
                QFAIL(json);
            } catch (const ConfigError& e) {
                QVERIFY2(std::string(e.what()).find(message) != std::string::npos, e.what());
            }
        }
    }

    // Emulated BF16 / FP16 linear, forward and backward, against FP64. The error must be
    // the format's (operand rounding, FP32 accumulation, output rounding), not zero and not more.
    void emulatedLinearAgainstFp64_data()
    {
        QTest::addColumn<NumberFormat>("format");
        QTest::addColumn<double>("minError");
        QTest::addColumn<double>("maxError");
        // unit roundoff u = 2^-8 (bf16), 2^-11 (fp16); three roundings of ~u/sqrt(3) RMS each
        QTest::newRow("bf16") << NumberFormat::BF16 << 5e-4 << 6e-3;
        QTest::newRow("fp16") << NumberFormat::FP16 << 6e-5 << 8e-4;
        QTest::newRow("fp32") << NumberFormat::FP32 << 0.0 << 1e-6;
    }
    void emulatedLinearAgainstFp64()
    {
        QFETCH(NumberFormat, format);
        QFETCH(double, minError);
        QFETCH(double, maxError);
        torch::manual_seed(3);
        auto x = torch::randn({64, 256}, torch::requires_grad());
        auto w = (torch::randn({128, 256}) * 0.05).requires_grad_();
        auto b = (torch::randn({128}) * 0.1).requires_grad_();
        auto dy = torch::randn({64, 128});
        LayerGemm layer("test.fc", GemmFormats::all(format), Fp8Recipe{}, GemmBackend::Emulated);
        auto y = layer.linear(x, w, b);
        y.backward(dy);

        const auto x64 = x.detach().to(torch::kFloat64), w64 = w.detach().to(torch::kFloat64);
        const auto dy64 = dy.to(torch::kFloat64);
        const auto y_ref = x64.matmul(w64.t()) + b.detach().to(torch::kFloat64);
        const auto dx_ref = dy64.matmul(w64);
        const auto dw_ref = dy64.t().matmul(x64);
        for (const auto& [got, ref, what] : {std::tuple{y.detach(), y_ref, "y"}, std::tuple{x.grad(), dx_ref, "dx"},
                                             std::tuple{w.grad(), dw_ref, "dW"}}) {
            const double err = relative_rms_error(got, ref);
            QVERIFY2(err >= minError && err <= maxError, qPrintable(QString("%1: relative RMS error %2").arg(what).arg(err)));
        }
        // The bias gradient is the FP32 sum rounded to the format, as autocast's 16-bit linear makes it.
        QVERIFY(torch::equal(b.grad(), round_to_format(dy.sum(0), format, Overflow::Propagate)));
        if (format == NumberFormat::FP32) return;
        // Bit-level: the output is exactly representable in the format...
        QVERIFY(torch::equal(y.detach(), round_to_format(y.detach(), format, Overflow::Propagate)));
        // ...and equals an FP32 GEMM on rounded operands, the bias rounded to the format too (as
        // cuBLAS's epilogue takes it), the sum rounded once (addmm = the same kernel).
        const auto expected = round_to_format(
            at::addmm(round_to_format(b.detach(), format, Overflow::Propagate),
                      round_to_format(x.detach(), format, Overflow::Propagate),
                      round_to_format(w.detach(), format, Overflow::Propagate).t()),
            format, Overflow::Propagate);
        QVERIFY(torch::equal(y.detach(), expected));
    }

    // The unfused attention's scale and causal mask in one pass (cpu_causal_mask.h) against
    // the ops it replaces, bit for bit both ways: NaN and Inf on both sides of the diagonal,
    // -0, subnormals and values the scale takes to FLT_MAX's neighbourhood; an odd T, so that
    // rows split over the threads mid-head; T = 1; a transposed (strided) input.
    void scaledCausalMaskIsTheOps_data()
    {
        QTest::addColumn<int>("t");
        QTest::addColumn<bool>("transposed");
        QTest::newRow("T 37") << 37 << false;
        QTest::newRow("T 37, transposed input") << 37 << true;
        QTest::newRow("T 1") << 1 << false;
    }
    void scaledCausalMaskIsTheOps()
    {
        QFETCH(int, t);
        QFETCH(bool, transposed);
        const double scale = 1.0 / std::sqrt(32.0); // not a float: the ops round it to one
        torch::manual_seed(11);
        auto base = torch::randn({2, 3, t, t}) * 4.0f;
        auto grad = torch::randn({2, 3, t, t});
        const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
        if (t > 5) {
            base[0][0][4][2] = nan;  // seen
            base[0][0][2][4] = nan;  // future
            base[0][1][5][5] = -inf; // the diagonal
            base[1][2][3][30] = inf; // future
            base[1][0][6][1] = -0.0f;
            base[1][1][7][0] = 1e-40f;                                        // subnormal
            base[1][1][8][3] = std::numeric_limits<float>::max();             // scaled down, finite
            grad[0][2][3][9] = nan;                                           // future: becomes 0
            grad[0][2][9][3] = nan;                                           // seen: stays NaN
            grad[1][0][10][2] = -0.0f;
        }
        const auto bits = [](const torch::Tensor& a) { return a.contiguous().view(torch::kInt32); };
        const auto input = [&] { return (transposed ? base.transpose(-1, -2) : base).detach().requires_grad_(); };
        auto x_ops = input();
        const auto future = torch::ones({t, t}, torch::kBool).triu(1);
        const auto y_ops = (x_ops * scale).masked_fill(future, -inf);
        y_ops.backward(grad);
        for (const int threads : {1, 2}) {
            const int before = at::get_num_threads();
            at::set_num_threads(threads);
            auto x = input();
            const auto y = scaled_causal_mask(x, scale);
            y.backward(grad);
            at::set_num_threads(before);
            QVERIFY(torch::equal(bits(y), bits(y_ops)));
            QVERIFY(torch::equal(bits(x.grad()), bits(x_ops.grad())));
        }
        if (t > 5) { // the crafted cases went where the ops take them
            QVERIFY(std::isnan(y_ops[0][0][4][2].item<float>()));
            QCOMPARE(y_ops[0][0][2][4].item<float>(), -inf);
            QCOMPARE(x_ops.grad()[0][2][3][9].item<float>(), 0.0f);
        }
    }

    void fp8HybridLinearIsCloseButLossy()
    {
        torch::manual_seed(4);
        auto x = torch::randn({64, 256}, torch::requires_grad());
        auto w = (torch::randn({128, 256}) * 0.05).requires_grad_();
        Fp8Recipe recipe;
        recipe.scaling = Fp8Scaling::Current;
        LayerGemm layer("test.fc", {NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2}, recipe,
                        GemmBackend::Emulated);
        auto y = layer.linear(x, w, {});
        y.backward(torch::randn({64, 128}));
        const double err = relative_rms_error(y.detach(), x.detach().to(torch::kFloat64).matmul(w.detach().to(torch::kFloat64).t()));
        QVERIFY2(err > 0.01 && err < 0.08, qPrintable(QString::number(err))); // E4M3: u = 2^-4
        QVERIFY(torch::isfinite(w.grad()).all().item<bool>());
        QCOMPARE(layer.backend_used(), std::string("emulated"));
    }

    // Micikevicius et al. 2017: gradients below FP16's smallest subnormal (2^-24) vanish
    // without loss scaling; multiplying the loss by 2^16 brings them back.
    void fp16GradientUnderflowAndLossScaling()
    {
        torch::manual_seed(5);
        const auto x = torch::randn({32, 64});
        const auto w0 = torch::randn({16, 64}) * 0.1;
        const auto dy = torch::randn({32, 16}) * 1e-8; // tiny gradients: ~ 2^-27
        auto weight_grad = [&](double loss_scale) {
            auto w = w0.clone().requires_grad_();
            auto xi = x.clone().requires_grad_();
            LayerGemm layer("test.fc", GemmFormats::all(NumberFormat::FP16), Fp8Recipe{}, GemmBackend::Emulated);
            layer.linear(xi, w, {}).backward(dy * loss_scale);
            return std::pair{w.grad() / loss_scale, xi.grad() / loss_scale};
        };
        const auto [dw_plain, dx_plain] = weight_grad(1.0);
        const double zero_fraction = dx_plain.eq(0).to(torch::kFloat64).mean().item<double>();
        QVERIFY2(zero_fraction > 0.9, qPrintable(QString::number(zero_fraction))); // underflow: exact zeros
        const auto [dw_scaled, dx_scaled] = weight_grad(65536.0);
        QCOMPARE(dx_scaled.eq(0).sum().item<int64_t>(), int64_t(0));
        const auto dx_ref = dy.to(torch::kFloat64).matmul(w0.to(torch::kFloat64));
        QVERIFY(relative_rms_error(dx_scaled, dx_ref) < 2e-3);
        QVERIFY(relative_rms_error(dw_scaled, dy.t().to(torch::kFloat64).matmul(x.to(torch::kFloat64))) < 2e-3);
    }

    void presetsTrainAndTrackFp32_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<double>("tolerance");
        QTest::newRow("bf16") << "bf16" << 0.02;
        QTest::newRow("fp16") << "fp16" << 0.02;
        QTest::newRow("fp8-hybrid") << "fp8-hybrid" << 0.08;
    }
    void presetsTrainAndTrackFp32()
    {
        QFETCH(QString, preset);
        QFETCH(double, tolerance);
        auto config = golden_project();
        config.eval.interval = 0;
        Recorder fp32;
        Trainer(config).run(fp32);
        config.precision.preset = preset.toStdString();
        Trainer trainer(config);
        Recorder low;
        trainer.run(low);
        QCOMPARE(low.steps.size(), size_t(30));
        QVERIFY(low.steps[0].train_loss != fp32.steps[0].train_loss); // really rounded
        const double gap = std::abs(low.steps.back().train_loss - fp32.steps.back().train_loss);
        QVERIFY2(gap < tolerance, qPrintable(QString("final loss gap %1").arg(gap)));
        QVERIFY(low.find("layer_backends") != nullptr);
        for (const auto& layer : trainer.layers()) QCOMPARE(layer.backend, std::string("emulated"));
        if (preset == "fp16") QCOMPARE(low.steps[0].loss_scale, 65536.0); // auto: dynamic for FP16
        else QCOMPARE(low.steps[0].loss_scale, 1.0);
    }

    void nonFiniteGradientsAreSkippedAndAttributed()
    {
        // A static scale of 1e30 overflows FP16 in the first backward GEMM (lm_head) and
        // everything downstream of it.
        auto config = golden_project();
        config.training.steps = 3;
        config.eval.interval = 0;
        config.precision.layers.push_back({"lm_head", NumberFormat::FP16, NumberFormat::FP16, NumberFormat::FP16});
        config.precision.loss_scaling_mode = "static";
        config.precision.loss_scaling.init_scale = 1e30;
        Trainer trainer(config);
        const auto untrained = trainer.state_digest();
        Recorder rec;
        const auto summary = trainer.run(rec);
        QCOMPARE(summary.skipped_steps, int64_t(3));
        QVERIFY(rec.steps[0].skipped);
        // The skip is the fused AdamW's, on the device's found_inf: not a weight moved.
        QCOMPARE(trainer.state_digest(), untrained);
        QVERIFY(std::isnan(rec.steps[0].grad_norm));
        const RunEvent* skipped = rec.find("step_skipped");
        QVERIFY(skipped != nullptr);
        // The layers with non-finite gradients, in registration order, as fields.
        QVERIFY(skipped->layers.size() >= 2);
        QCOMPARE(skipped->layers[0], std::string("wte"));
        QVERIFY(std::find(skipped->layers.begin(), skipped->layers.end(), "blocks.0.attn.qkv") != skipped->layers.end());
    }

    void dynamicScalingBacksOffOnOverflow()
    {
        auto config = golden_project();
        config.training.steps = 6;
        config.eval.interval = 0;
        config.precision.preset = "fp16";
        config.precision.loss_scaling.init_scale = 1e30; // absurd start: must back off to finite grads
        config.precision.loss_scaling.backoff_factor = 1e-10;
        Trainer trainer(config);
        Recorder rec;
        trainer.run(rec);
        QVERIFY(rec.find("loss_scale_backoff") != nullptr);
        QVERIFY(rec.steps[0].skipped);
        // The scale is a float32 as in PyTorch: float(1e30) * 1e-10, rounded to float32
        // (torch._amp_update_scale_ gives the same).
        QCOMPARE(rec.steps[1].loss_scale, 0x1.5af1d8p+66);
        QVERIFY(!rec.steps.back().skipped);
        QVERIFY(rec.steps.back().loss_scale <= 1e10);
    }

    void policyChangesMidRun()
    {
        auto config = golden_project();
        config.training.steps = 10;
        config.eval.interval = 0;
        Recorder fp32;
        Trainer(config).run(fp32);

        Trainer trainer(config);
        Recorder rec;
        std::vector<int> queued; // per step: whether a command then has a boundary left to apply it
        rec.hook = [&](const StepMetrics& m) {
            const auto bf16 = GemmFormats::all(NumberFormat::BF16), fp32 = GemmFormats::all(NumberFormat::FP32);
            if (m.step == 5) QVERIFY(trainer.request_layer_formats("blocks.*.mlp.*", bf16));
            if (m.step >= 8) queued.push_back(trainer.request_layer_formats("lm_head", fp32));
        };
        trainer.run(rec);
        // Step 9's command is applied at the last boundary; from step 10 on there is none, and
        // the command is refused rather than taken for nothing. After the run, too.
        QCOMPARE(queued, (std::vector<int>{1, 1, 0}));
        QVERIFY(!trainer.request_checkpoint());
        QVERIFY(!trainer.request_stop());
        for (int i = 0; i < 5; ++i) QCOMPARE(rec.steps[size_t(i)].train_loss, fp32.steps[size_t(i)].train_loss);
        QVERIFY(rec.steps[5].train_loss != fp32.steps[5].train_loss);
        QVERIFY(std::abs(rec.steps[9].train_loss - fp32.steps[9].train_loss) < 0.02);
        const RunEvent* changed = rec.find("precision_changed");
        QVERIFY(changed != nullptr);
        QCOMPARE(changed->step, int64_t(5));
        QVERIFY(std::find(changed->layers.begin(), changed->layers.end(), "blocks.1.mlp.fc2") != changed->layers.end());
        QCOMPARE(int(changed->cause), int(ChangeCause::User));
        for (const auto& layer : trainer.layers()) {
            const bool mlp = layer.name.find(".mlp.") != std::string::npos;
            QCOMPARE(layer.formats, mlp ? GemmFormats::all(NumberFormat::BF16) : GemmFormats::all(NumberFormat::FP32));
        }
        try {
            trainer.request_layer_formats("blocks.*.moe.*", GemmFormats::all(NumberFormat::BF16));
            QFAIL("accepted a pattern that matches nothing");
        } catch (const ConfigError& e) {
            QCOMPARE(std::string(e.what()), std::string("no layer matches 'blocks.*.moe.*'"));
        }
        // A block recipe's element and scale formats are no GEMM operand's.
        for (const auto f : {NumberFormat::E8M0, NumberFormat::E2M1})
            try {
                trainer.request_layer_formats("lm_head", {NumberFormat::BF16, f, NumberFormat::BF16});
                QFAIL("accepted a format no GEMM takes");
            } catch (const ConfigError& e) {
                QCOMPARE(std::string(e.what()), "'" + std::string(format_name(f)) +
                                                    "' is no GEMM operand's format (a block recipe's element or "
                                                    "scale format); one of fp32, tf32, bf16, fp16, e4m3, e5m2");
            }
    }

    // A resume's replay of the interrupted run's change at a boundary goes before a change the
    // user asked for since: the user's is the later one, in the run as in the store's order,
    // which is the order a later resume replays them in.
    void aReplayGoesBeforeAChangeAskedForSince()
    {
        auto config = golden_project();
        config.training.steps = 1;
        config.eval.interval = 0;
        Trainer trainer(config);
        // Asked for before step 0's boundary.
        trainer.request_layer_formats("lm_head", GemmFormats::all(NumberFormat::FP32));
        trainer.replay_layer_formats(0, "*", GemmFormats::all(NumberFormat::BF16));
        Recorder rec;
        trainer.run(rec);
        std::vector<std::string> changes;
        for (const auto& e : rec.events)
            if (e.kind == EventKind::PrecisionChanged) changes.push_back(e.pattern + " " + std::string(change_cause_name(e.cause)));
        QCOMPARE(changes, (std::vector<std::string>{"* resume", "lm_head user"}));
        for (const auto& layer : trainer.layers()) {
            const NumberFormat want = layer.name == "lm_head" ? NumberFormat::FP32 : NumberFormat::BF16;
            QCOMPARE(layer.formats, GemmFormats::all(want));
        }
    }

    // loss_scaling.mode "auto" follows the formats as they are: a live change to FP16 turns
    // dynamic loss scaling on (from init_scale) at the step it takes effect, a change away from
    // FP16 turns it off, and a checkpoint taken in between resumes with its scale, its
    // counters, and scaling on, though the project's preset is FP32.
    void autoLossScalingFollowsLiveChanges()
    {
        auto config = golden_project();
        config.training.steps = 8;
        config.eval.interval = 0;
        config.precision.loss_scaling.growth_interval = 2; // the scale moves within the run
        QTemporaryDir tmp;
        const QString checkpoint = tmp.filePath("mantissa-test-auto-scaling.pt");
        Trainer trainer(config);
        Recorder rec;
        double scale_at_checkpoint = 0;
        rec.hook = [&](const StepMetrics& m) {
            if (m.step == 2) trainer.request_layer_formats("*", GemmFormats::all(NumberFormat::FP16));
            if (m.step == 4) {
                trainer.save_checkpoint(checkpoint.toStdString());
                scale_at_checkpoint = trainer.loss_scale();
            }
            if (m.step == 6) trainer.request_layer_formats("*", GemmFormats::all(NumberFormat::BF16));
        };
        trainer.run(rec);
        QCOMPARE(rec.steps.size(), size_t(8));
        const std::vector<double> expected{1, 1, 65536, 65536, 131072, 131072, 1, 1};
        for (size_t i = 0; i < expected.size(); ++i)
            QVERIFY2(rec.steps[i].loss_scale == expected[i],
                     qPrintable(QString("step %1: scale %2").arg(i + 1).arg(rec.steps[i].loss_scale)));
        QCOMPARE(scale_at_checkpoint, 131072.0); // grown after steps 3 and 4, used from step 5

        Trainer resumed(config); // preset fp32: scaling off until the checkpoint's formats say FP16
        QCOMPARE(resumed.loss_scale(), 1.0);
        resumed.load_checkpoint(checkpoint.toStdString());
        QCOMPARE(resumed.loss_scale(), 131072.0);
        // The resume event gives the layers' formats; where they run is known after a step: the
        // GUI showed backend "none" for every FP16 layer until then.
        Recorder after;
        resumed.run(after);
        const RunEvent* again = after.find("resumed_from_checkpoint");
        QVERIFY(again && !again->layer_states.empty());
        QVERIFY(again->layer_states[0].formats == GemmFormats::all(NumberFormat::FP16));
        for (const auto& l : again->layer_states) QVERIFY2(l.backend.empty(), l.backend.c_str());
        QFile::remove(checkpoint);
    }

    // A live change that turns loss scaling on scales every later gradient by init_scale (2^16);
    // the FP8 gradient casts' amax histories follow it, or their scales, made for the unscaled
    // gradients, saturate every value of lm_head's E5M2 dy: the step's gradient norm fell by
    // 4,700 times, with nothing skipped (a read-only GUI audit, 2026-12-07). The change away
    // from FP16 scales them back.
    void lossScalingTurnedOnRescalesGradientAmaxes_data()
    {
        QTest::addColumn<QString>("backend");
        QTest::newRow("emulated") << "emulated";
        QTest::newRow("native") << "native";
    }
    void lossScalingTurnedOnRescalesGradientAmaxes()
    {
        QFETCH(QString, backend);
        Trainer trainer(fp8_observed(8, backend));
        GradientCasts rec;
        rec.hook = [&](const StepMetrics& m) {
            if (m.step == 3) trainer.request_layer_formats("blocks.0.attn.proj", GemmFormats::all(NumberFormat::FP16));
            if (m.step == 6) trainer.request_layer_formats("blocks.0.attn.proj", GemmFormats::all(NumberFormat::BF16));
        };
        trainer.run(rec);
        QCOMPARE(rec.steps.size(), size_t(8));
        QCOMPARE(rec.steps[3].loss_scale, 65536.0);
        QCOMPARE(rec.steps[6].loss_scale, 1.0);
        // Each switch says what it did to the loss scale (before 2026-12-07, nothing said why it jumped).
        std::vector<std::string> changes;
        for (const auto& e : rec.events)
            if (e.kind == EventKind::PrecisionChanged) changes.push_back(e.message());
        QCOMPARE(changes.size(), size_t(2));
        QVERIFY2(changes[0].ends_with("; loss scaling on (scale 1 -> 65536)"), changes[0].c_str());
        QVERIFY2(changes[1].ends_with("; loss scaling off (scale 65536 -> 1)"), changes[1].c_str());
        // Steps 4 and 7 cast with the rescaled histories; unrescaled, step 4 saturated all of
        // lm_head's gradient and 17% of fc2's, and step 7 flushed 13% of a qkv's to zero.
        rec.verify_unsaturated(8);
        QCOMPARE(rec.worst_dy_underflow.size(), size_t(8));
        for (const auto& [step, underflow] : rec.worst_dy_underflow) // step 1 casts at scale 1, before any amax
            QVERIFY2(step == 1 || underflow < 0.01,
                     qPrintable(QString("step %1: %2 of a gradient underflowed").arg(step).arg(underflow)));
    }

    // A loss scale that grows (or backs off) takes the FP8 gradient histories with it: the
    // step after each growth saturated the largest gradients (7.7% of lm_head's at a growth
    // every 4 steps; a read-only review, 2026-12-07). One FP16 layer turns scaling on.
    void lossScaleGrowthRescalesGradientAmaxes_data()
    {
        QTest::addColumn<QString>("backend");
        QTest::newRow("emulated") << "emulated";
        QTest::newRow("native") << "native";
    }
    void lossScaleGrowthRescalesGradientAmaxes()
    {
        QFETCH(QString, backend);
        auto config = fp8_observed(10, backend);
        config.precision.loss_scaling.growth_interval = 2;
        LayerOverride fp16;
        fp16.match = "blocks.0.attn.proj";
        fp16.forward = fp16.dgrad = fp16.wgrad = NumberFormat::FP16;
        config.precision.layers.push_back(fp16);
        Trainer trainer(config);
        GradientCasts rec;
        trainer.run(rec);
        QCOMPARE(rec.steps.size(), size_t(10));
        QCOMPARE(rec.steps.back().loss_scale, 65536.0 * 16); // grown four times
        rec.verify_unsaturated(10);
    }

    // A resume that scales the gradients otherwise than the checkpoint's run did (loss_scaling.mode
    // set to dynamic over an FP8 run that trained unscaled) rescales the FP8 gradient histories as
    // a live change does: it did not, and the first resumed step saturated all of lm_head's
    // gradient (a read-only audit, 2026-12-07). A checkpoint says the scale in effect.
    void aResumeUnderAnotherLossScaleRescalesGradientAmaxes()
    {
        auto config = fp8_observed(4, QStringLiteral("emulated"));
        QTemporaryDir tmp;
        const std::string checkpoint = tmp.filePath("unscaled.pt").toStdString();
        save_unscaled_run(config, checkpoint);
        if (QTest::currentTestFailed()) return;
        config.training.steps = 8;
        config.precision.loss_scaling_mode = "dynamic";
        Trainer scaled(config);
        scaled.load_checkpoint(checkpoint);
        QCOMPARE(scaled.loss_scale(), 65536.0);
        GradientCasts rec;
        scaled.run(rec);
        rec.verify_unsaturated(4);
    }

    // An unscaled run's checkpoint holds a scaler state it never used (the init_scale of its
    // own settings). A resume that turns scaling on starts from its own init_scale, as a live
    // change does, also in a trainer whose scale has moved already.
    void aResumeThatTurnsScalingOnStartsFromItsInitScale()
    {
        auto config = golden_project();
        config.training.steps = 2;
        config.eval.interval = 0;
        QTemporaryDir tmp;
        const std::string checkpoint = tmp.filePath("unscaled.pt").toStdString();
        save_unscaled_run(config, checkpoint);
        if (QTest::currentTestFailed()) return;
        config.training.steps = 4;
        config.precision.loss_scaling_mode = "dynamic";
        config.precision.loss_scaling.init_scale = 1024;
        config.precision.loss_scaling.growth_interval = 1; // the scale doubles every clean step
        Trainer scaled(config);
        Recorder moved, resumed;
        scaled.run(moved);
        QCOMPARE(scaled.loss_scale(), 16384.0);
        scaled.load_checkpoint(checkpoint);
        QCOMPARE(scaled.loss_scale(), 1024.0);
        scaled.run(resumed);
        QCOMPARE(resumed.steps.size(), size_t(2));
        QCOMPARE(resumed.steps[0].loss_scale, 1024.0); // the scale the step multiplied by
        QCOMPARE(resumed.steps[1].loss_scale, 2048.0);
    }

    // The loss scale a step uses lives on the device and follows the host's when the host's
    // changes under it: a checkpoint loaded into a trainer that has already moved its scale
    // further trains on as the run that wrote the checkpoint did, to the bit.
    void aCheckpointLoadedIntoATrainedTrainerTakesItsScale()
    {
        auto config = golden_project();
        config.training.steps = 6;
        config.eval.interval = 0;
        config.precision.preset = "fp16";
        config.precision.loss_scaling.growth_interval = 1; // the scale doubles every step
        QTemporaryDir tmp;
        const std::string checkpoint = tmp.filePath("at-3.pt").toStdString();
        Trainer straight(config);
        Recorder a;
        double scale_at_3 = 0;
        a.hook = [&](const StepMetrics& m) {
            if (m.step != 3) return;
            straight.save_checkpoint(checkpoint);
            scale_at_3 = straight.loss_scale();
        };
        straight.run(a);
        Trainer again(config);
        Recorder first, b;
        again.run(first); // six steps: its scale has moved on from the checkpoint's
        QVERIFY(again.loss_scale() > scale_at_3);
        again.load_checkpoint(checkpoint);
        QCOMPARE(again.loss_scale(), scale_at_3);
        again.run(b);
        QCOMPARE(b.steps.size(), size_t(3));
        for (size_t i = 0; i < 3; ++i) {
            QCOMPARE(b.steps[i].step, a.steps[i + 3].step);
            QCOMPARE(b.steps[i].loss_scale, a.steps[i + 3].loss_scale);
            QCOMPARE(std::bit_cast<uint64_t>(b.steps[i].train_loss), std::bit_cast<uint64_t>(a.steps[i + 3].train_loss));
        }
        QCOMPARE(again.state_digest(), straight.state_digest());
    }

    // The backend a layer reports is what ran since its formats were set: after a live change
    // from BF16 (native) to FP8 (emulated on a CPU), "emulated", not "native+emulated", sent
    // in a layer_backends event after the first step with the new formats.
    void backendAfterALiveChangeIsTheNewFormats()
    {
        auto config = golden_project();
        config.training.steps = 6;
        config.eval.interval = 0;
        config.precision.preset = "bf16";
        config.precision.backend = GemmBackend::Native;
        Trainer trainer(config);
        Recorder rec;
        rec.hook = [&](const StepMetrics& m) {
            if (m.step == 3) trainer.request_layer_formats("blocks.0.mlp.fc1", GemmFormats::all(NumberFormat::E4M3));
        };
        trainer.run(rec);
        std::vector<const RunEvent*> backends;
        for (const auto& e : rec.events)
            if (e.kind == EventKind::LayerBackends) backends.push_back(&e);
        QCOMPARE(backends.size(), size_t(2));
        QCOMPARE(backends[0]->step, int64_t(1));
        QCOMPARE(backends[1]->step, int64_t(4));
        for (const RunEvent* e : backends)
            for (const auto& s : e->layer_states)
                if (s.name == "blocks.0.mlp.fc1")
                    QCOMPARE(QString::fromStdString(s.backend), QString(e == backends[0] ? "native" : "emulated"));
        for (const auto& layer : trainer.layers())
            if (layer.name == "blocks.0.mlp.fc2") QCOMPARE(QString::fromStdString(layer.backend), QString("native"));
    }

    // A live change restarts the delayed-scaling states the new formats stop or start using,
    // and keeps those both use: one tensor's amax history in one format, whichever GEMM casts it.
    void fp8HistoryRestartsOnPolicyChange_data()
    {
        QTest::addColumn<QString>("to");   // the new formats, forward/dgrad/wgrad
        QTest::addColumn<QString>("kept"); // the states that go on, role:format
        // From HYBRID (E4M3 forward, E5M2 gradients; the wgrad GEMM takes x as E4M3):
        QTest::newRow("wgrad to bf16") << "e4m3/e5m2/bf16" << "input:e4m3 weight:e4m3 grad_output:e5m2";
        QTest::newRow("all e4m3") << "e4m3/e4m3/e4m3" << "input:e4m3 weight:e4m3";
        QTest::newRow("forward to bf16") << "bf16/e5m2/e5m2" << "input:e4m3 weight:e4m3 grad_output:e5m2";
        QTest::newRow("all bf16") << "bf16/bf16/bf16" << "";
        QTest::newRow("unchanged") << "e4m3/e5m2/e5m2" << "input:e4m3 weight:e4m3 grad_output:e5m2";
    }
    void fp8HistoryRestartsOnPolicyChange()
    {
        QFETCH(QString, to);
        QFETCH(QString, kept);
        LayerGemm layer("test.fc", {NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2}, Fp8Recipe{},
                        GemmBackend::Emulated);
        auto x = torch::randn({16, 32}, torch::requires_grad());
        auto w = torch::randn({8, 32}, torch::requires_grad());
        layer.linear(x, w, {}).sum().backward();
        const std::map<QString, OperandRole> roles{
            {"input", OperandRole::Input}, {"weight", OperandRole::Weight}, {"grad_output", OperandRole::GradOutput}};
        std::map<QString, std::pair<float, float>> was; // role:format -> (scale, newest amax)
        for (const auto& [name, role] : roles)
            for (auto format : {NumberFormat::E4M3, NumberFormat::E5M2}) {
                const auto& d = layer.delayed(role, format);
                was[name + ":" + format_info(format).name] = {d.scale(), d.history()[0]};
            }
        for (const char* used : {"input:e4m3", "weight:e4m3", "grad_output:e5m2"})
            QVERIFY2(was[used].second > 0.0f && was[used].first != 1.0f, used);
        const auto parts = to.split('/');
        layer.set_formats({*parse_number_format(parts[0].toStdString()), *parse_number_format(parts[1].toStdString()),
                           *parse_number_format(parts[2].toStdString())});
        const auto keep = kept.split(' ', Qt::SkipEmptyParts);
        for (const auto& [name, role] : roles)
            for (auto format : {NumberFormat::E4M3, NumberFormat::E5M2}) {
                const QString key = name + ":" + format_info(format).name;
                const auto& d = layer.delayed(role, format);
                if (keep.contains(key)) {
                    QVERIFY2(d.scale() == was[key].first && d.history()[0] == was[key].second, qPrintable(key));
                } else {
                    QVERIFY2(d.scale() == 1.0f, qPrintable(key));
                    QVERIFY2(std::all_of(d.history().begin(), d.history().end(), [](float a) { return a == 0.0f; }),
                             qPrintable(key));
                }
            }
    }

    // A live recipe switch trains as a project that gave the layer that recipe from the start:
    // both runs hold fc1 in BF16 (where no recipe matters) until step 3, then switch it to E4M3,
    // one naming the recipe, the other keeping its project's. Bit for bit, and unlike a switch
    // to E4M3 under the first run's own recipe.
    void aLiveRecipeSwitchTrainsAsTheRecipeFromTheStart_data()
    {
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<QString>("from"); // the project's recipe of the run that switches
        QTest::addColumn<bool>("native");  // the native executor (its FP8 state on the device side)
        QTest::newRow("delayed -> nvfp4") << "nvfp4" << "delayed" << false;
        QTest::newRow("delayed -> fp8-block") << "fp8-block" << "delayed" << false;
        QTest::newRow("nvfp4 -> mxfp4") << "mxfp4" << "nvfp4" << false;
        QTest::newRow("mxfp4 -> delayed") << "delayed" << "mxfp4" << false;
        QTest::newRow("native, delayed -> fp8-block") << "fp8-block" << "delayed" << true;
        QTest::newRow("native, nvfp4 -> current") << "current" << "nvfp4" << true;
    }
    void aLiveRecipeSwitchTrainsAsTheRecipeFromTheStart()
    {
        QFETCH(QString, recipe);
        QFETCH(QString, from);
        QFETCH(bool, native);
        const Fp8Scaling to = *parse_fp8_scaling(recipe.toStdString());
        const Fp8Scaling before = *parse_fp8_scaling(from.toStdString());
        const std::string layer = "blocks.0.mlp.fc1";
        auto config = golden_project();
        config.training.steps = 8;
        config.eval.interval = 0;
        config.telemetry.interval = 0;
        config.precision.preset = "bf16";
        config.precision.backend = native ? GemmBackend::Native : GemmBackend::Emulated;
        struct Outcome {
            std::vector<uint64_t> losses; // bits
            std::string digest;
            Fp8Scaling scaling;
            std::vector<RunEvent> changes;
        };
        const auto run = [&](Fp8Scaling project, std::optional<Fp8Scaling> asked) {
            auto c = config;
            c.precision.fp8.scaling = project;
            Trainer trainer(c);
            Recorder rec;
            rec.hook = [&](const StepMetrics& m) {
                if (m.step == 3) trainer.request_layer_formats(layer, GemmFormats::all(NumberFormat::E4M3), asked);
            };
            trainer.run(rec);
            Outcome out{{}, trainer.state_digest(), trainer.layer_scaling(layer), {}};
            for (const auto& e : rec.events)
                if (e.kind == EventKind::PrecisionChanged) out.changes.push_back(e);
            for (const auto& m : rec.steps) out.losses.push_back(std::bit_cast<uint64_t>(m.train_loss));
            return out;
        };
        const Outcome switched = run(before, to);
        const Outcome from_the_start = run(to, std::nullopt);
        const Outcome without = run(before, std::nullopt);
        QVERIFY(switched.scaling == to);
        QVERIFY(without.scaling == before);
        QCOMPARE(switched.losses.size(), size_t(8));
        QCOMPARE(switched.losses, from_the_start.losses);
        QCOMPARE(switched.digest, from_the_start.digest);
        QCOMPARE(std::vector<uint64_t>(without.losses.begin(), without.losses.begin() + 3),
                 std::vector<uint64_t>(switched.losses.begin(), switched.losses.begin() + 3));
        QVERIFY(without.losses[3] != switched.losses[3]);
        const auto& changes = switched.changes;
        // The event says what the layer ran before and what it runs now.
        QCOMPARE(changes.size(), size_t(1));
        QCOMPARE(changes[0].step, int64_t(3));
        QVERIFY(changes[0].old_scaling == before);
        QVERIFY(changes[0].new_scaling == to);
        QCOMPARE(changes[0].layer_states.size(), size_t(1));
        QCOMPARE(QString::fromStdString(changes[0].layer_states[0].recipe), recipe);
        QVERIFY2(changes[0].message().find("with " + recipe.toStdString() + " scaling") != std::string::npos,
                 changes[0].message().c_str());
    }

    // Back on delayed scaling after another recipe, a layer starts its amax histories afresh:
    // nothing recorded under the first stint survives the switch.
    void aRecipeSwitchRestartsTheDelayedHistories()
    {
        LayerGemm layer("test.fc", GemmFormats::all(NumberFormat::E4M3), Fp8Recipe{}, GemmBackend::Emulated);
        auto x = torch::randn({16, 32}, torch::requires_grad());
        auto w = torch::randn({8, 32}, torch::requires_grad());
        layer.linear(x, w, {}).sum().backward();
        QVERIFY(layer.delayed(OperandRole::Input, NumberFormat::E4M3).history()[0] > 0.0f);
        layer.set_scaling(Fp8Scaling::Delayed); // the same recipe: nothing changes
        QVERIFY(layer.delayed(OperandRole::Input, NumberFormat::E4M3).history()[0] > 0.0f);
        layer.set_scaling(Fp8Scaling::Current);
        layer.linear(x, w, {}).sum().backward();
        layer.set_scaling(Fp8Scaling::Delayed);
        for (auto role : {OperandRole::Input, OperandRole::Weight, OperandRole::GradOutput}) {
            const auto& d = layer.delayed(role, NumberFormat::E4M3);
            QCOMPARE(d.scale(), 1.0f);
            QVERIFY(std::all_of(d.history().begin(), d.history().end(), [](float a) { return a == 0.0f; }));
        }
        QCOMPARE(QString::fromStdString(layer.backend_used()), QString("none"));
    }

    // A checkpoint keeps a recipe switched live: the resumed run goes on under it, bit for bit,
    // though its project still names the old one.
    void aCheckpointKeepsALiveRecipe()
    {
        QTemporaryDir dir;
        auto config = golden_project();
        config.training.steps = 8;
        config.eval.interval = 0;
        config.precision.preset = "fp8-hybrid";
        config.training.checkpoint_dir = dir.path().toStdString();
        config.training.checkpoint_interval = 5;
        const auto switch_at_2 = [](Trainer& t, Recorder& rec) {
            rec.hook = [&t](const StepMetrics& m) {
                if (m.step == 2)
                    t.request_layer_formats("blocks.*.mlp.*", GemmFormats::all(NumberFormat::E4M3), Fp8Scaling::NvFp4);
            };
        };
        Trainer straight(config);
        Recorder a;
        switch_at_2(straight, a);
        straight.run(a);
        const QString checkpoint = dir.filePath("step-00000005.pt");
        QVERIFY(QFile::exists(checkpoint));
        Trainer resumed(config);
        resumed.load_checkpoint(checkpoint.toStdString());
        QCOMPARE(resumed.layer_scaling("blocks.1.mlp.fc2"), Fp8Scaling::NvFp4);
        QCOMPARE(resumed.layer_scaling("blocks.1.attn.qkv"), Fp8Scaling::Delayed);
        Recorder b;
        resumed.run(b);
        QCOMPARE(b.steps.size(), size_t(3));
        for (size_t i = 0; i < 3; ++i)
            QCOMPARE(std::bit_cast<uint64_t>(b.steps[i].train_loss), std::bit_cast<uint64_t>(a.steps[i + 5].train_loss));
        QCOMPARE(resumed.state_digest(), straight.state_digest());
    }

    // A resume may change precision.fp8.amax_history_length: the restored histories take the
    // new length, their newest entries first, and their scales as saved.
    void restoredHistoryTakesTheConfiguredLength()
    {
        Fp8Recipe eight;
        eight.amax_history_length = 8;
        LayerGemm saved("fc", {NumberFormat::E4M3, NumberFormat::E4M3, NumberFormat::E4M3}, eight, GemmBackend::Emulated);
        auto w = torch::randn({8, 32}, torch::requires_grad());
        for (int step = 0; step < 6; ++step) {
            auto x = (torch::randn({16, 32}) * double(step + 1)).requires_grad_(true);
            saved.linear(x, w, {}).sum().backward();
        }
        const auto before = saved.delayed(OperandRole::Input, NumberFormat::E4M3);
        QTemporaryDir tmp;
        const QString file = tmp.filePath("mantissa-test-history-length.pt");
        {
            torch::serialize::OutputArchive out;
            saved.save(out);
            out.save_to(file.toStdString());
        }
        for (const int64_t length : {4, 16}) {
            Fp8Recipe r = eight;
            r.amax_history_length = length;
            LayerGemm loaded("fc", {NumberFormat::E4M3, NumberFormat::E4M3, NumberFormat::E4M3}, r, GemmBackend::Emulated);
            torch::serialize::InputArchive in;
            in.load_from(file.toStdString());
            loaded.load(in);
            const auto& h = loaded.delayed(OperandRole::Input, NumberFormat::E4M3).history();
            QCOMPARE(h.size(), size_t(length));
            for (size_t i = 0; i < h.size(); ++i) QCOMPARE(h[i], i < 8 ? before.history()[i] : 0.0f);
            QCOMPARE(loaded.delayed(OperandRole::Input, NumberFormat::E4M3).scale(), before.scale());
        }
        QFile::remove(file);
    }
};

QTEST_GUILESS_MAIN(TestPrecision)
#include "test_precision.moc"
