// SPDX-License-Identifier: GPL-3.0-or-later
// Observing a step never changes it: with telemetry off, every 50 steps or every step, the
// per-step losses and the final weights are bit-identical, for every precision preset and
// every FP8 scaling recipe. Dropout is on, so random-number use must not differ either.

#include <QtTest>

#include "run_capture.h"

using namespace mantissa;

namespace {

struct Observed {
    RunCapture capture;
    QByteArray weights;
};

Observed train(ProjectConfig config, int64_t telemetry_interval)
{
    config.telemetry.interval = telemetry_interval;
    Observed out;
    Trainer trainer(config);
    trainer.run(out.capture);
    out.weights = exported_weights(trainer);
    return out;
}

} // namespace

class TestNeutrality : public QObject {
    Q_OBJECT
private slots:
    void telemetryNeverChangesAStep_data()
    {
        QTest::addColumn<QString>("preset");
        QTest::addColumn<QString>("recipe");
        QTest::addColumn<bool>("native");
        QTest::addColumn<bool>("fp8Attention"); // the attention layers' GEMMs E4M3 / E5M2
        for (const char* preset : {"fp32", "bf16", "fp16"})
            QTest::newRow(preset) << preset << "delayed" << false << false;
        for (const char* preset : {"fp8-hybrid", "fp8-hybrid-keep-ends"})
            for (const char* recipe : {"delayed", "current", "rowwise", "mxfp8", "fp8-block", "nvfp4", "mxfp4"})
                QTest::addRow("%s/%s", preset, recipe) << preset << recipe << false << false;
        // The native executor observes through hooks and side computations too.
        for (const char* preset : {"bf16", "fp16", "fp8-hybrid"})
            QTest::addRow("native/%s", preset) << preset << "delayed" << true << false;
        QTest::newRow("native/fp8-hybrid/current") << "fp8-hybrid" << "current" << true << false;
        QTest::newRow("native/fp8-hybrid/rowwise") << "fp8-hybrid" << "rowwise" << true << false;
        QTest::newRow("bf16, fp8 attention") << "bf16" << "delayed" << false << true;
        QTest::newRow("native/bf16, fp8 attention") << "bf16" << "delayed" << true << true;
    }
    void telemetryNeverChangesAStep()
    {
        QFETCH(QString, preset);
        QFETCH(QString, recipe);
        QFETCH(bool, native);
        QFETCH(bool, fp8Attention);
        auto config = load_project_file(MANTISSA_TEST_DATA_DIR "/golden_project.json");
        config.training.steps = 10;
        config.model.n_embd = 64; // at 32 wide torch's linear and the spelled-out GEMMs happen to round alike
        config.eval.interval = 5;      // evaluations in between must not disturb training either
        config.model.dropout = 0.1;    // random numbers: telemetry must not consume any
        config.precision.preset = preset.toStdString();
        config.precision.fp8.scaling = *parse_fp8_scaling(recipe.toStdString());
        config.precision.backend = native ? GemmBackend::Native : GemmBackend::Emulated;
        if (fp8Attention)
            config.precision.layers.push_back(
                {"*.attn.sdpa", NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2, {}});
        // Attention runs unfused, and records its probabilities and dS, unless it is FP32 or
        // uniform 16-bit on the native executor (the fused kernel).
        const bool unfused_attention = fp8Attention || (!native && preset != "fp32");

        const Observed off = train(config, 0);
        QCOMPARE(off.capture.steps.size(), size_t(10));
        QVERIFY(off.capture.frames.empty());
        QVERIFY(!off.weights.isEmpty());
        // Armed: the first step and every interval-th; frames every 50, 2 and 1 steps.
        const std::vector<std::pair<int64_t, std::vector<int64_t>>> schedules = {
            {50, {1}}, {2, {1, 2, 4, 6, 8, 10}}, {1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}}};
        for (const auto& [interval, frame_steps] : schedules) {
            const Observed on = train(config, interval);
            QCOMPARE(on.capture.frame_steps(), frame_steps);
            for (const auto& frame : on.capture.frames) {
                // output, weight, input, grad_output, weight_grad of 2 x (qkv, proj, fc1, fc2) + lm_head;
                // block recipes add their scales and wgrad rows (test_block_formats counts those).
                const auto base_role = [](const TensorStats& t) {
                    return t.role == "output" || t.role == "weight" || t.role == "input" || t.role == "grad_output" ||
                           t.role == "weight_grad";
                };
                QCOMPARE(std::count_if(frame.tensors.begin(), frame.tensors.end(), base_role), std::ptrdiff_t(5 * 9));
                const auto attention_role = [](const TensorStats& t) {
                    return t.role == "probs" || t.role == "grad_scores";
                };
                QCOMPARE(std::count_if(frame.tensors.begin(), frame.tensors.end(), attention_role),
                         std::ptrdiff_t(unfused_attention ? 2 * 2 : 0));
            }
            QCOMPARE(on.capture.steps.size(), off.capture.steps.size());
            for (size_t i = 0; i < off.capture.steps.size(); ++i) {
                const QString diff = step_difference(on.capture.steps[i], off.capture.steps[i]);
                QVERIFY2(diff.isEmpty(), qPrintable(QString("telemetry every %1: ").arg(interval) + diff));
            }
            QVERIFY2(on.weights == off.weights, qPrintable(QString("telemetry every %1: final weights differ").arg(interval)));
        }
    }
};

QTEST_GUILESS_MAIN(TestNeutrality)
#include "test_neutrality.moc"
