// SPDX-License-Identifier: GPL-3.0-or-later
// The live Monitor page and its plots, driven by crafted telemetry (no training): smoothing
// and decimation numbers, what each plot holds after ingesting a run, cursor and layer
// linking, and the frame scheduler's rate cap. Runs with QT_QPA_PLATFORM=offscreen. Set
// MANTISSA_SCREENSHOT_DIR to also save a picture of a realistic page.

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QElapsedTimer>
#include <QMenu>
#include <QSignalSpy>
#include <QSlider>
#include <QTableView>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "legacy_events.h"
#include "models/event_log_model.h"
#include "plots/communication_plot.h"
#include "plots/exponent_histogram_plot.h"
#include "plots/frame_stats.h"
#include "plots/layer_heatmap_plot.h"
#include "plots/loss_plot.h"
#include "plots/loss_scale_plot.h"
#include "plots/memory_plot.h"
#include "pages/layer_switch_menu.h"
#include "pages/monitor_page.h"
#include "plots/smoothing.h"

using namespace mantissa;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const std::vector<std::string> kLayers{"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc1",
                                       "blocks.0.mlp.fc2",  "blocks.1.attn.qkv",  "blocks.1.attn.proj",
                                       "blocks.1.mlp.fc1",  "blocks.1.mlp.fc2",   "lm_head"};

QVector<double> graph_keys(const QCPGraph* graph)
{
    QVector<double> keys;
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) keys.push_back(it->key);
    return keys;
}

QVector<double> graph_values(const QCPGraph* graph)
{
    QVector<double> values;
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it) values.push_back(it->value);
    return values;
}

StepMetrics step_at(int64_t step, double loss, double scale = 1.0, bool skipped = false)
{
    StepMetrics m;
    m.step = step;
    m.train_loss = loss;
    m.loss_scale = scale;
    m.skipped = skipped;
    m.step_time_ms = 100.0; // 0.1 s a step
    m.tokens_per_s = 1000.0;
    return m;
}

double loss_of(int64_t step) { return 3.0 + 1.0 / double(step); }

// A telemetry frame: every layer x role with a small histogram, and memory.
LayerStatsFrame frame_at(int64_t step, bool cuda)
{
    LayerStatsFrame f;
    f.step = step;
    for (const std::string& layer : kLayers)
        for (const std::string& role : RunHistory::roles()) {
            TensorStats t;
            t.layer = layer;
            t.role = role;
            t.format = "bf16";
            t.first_exponent = -12;
            t.exponent_counts = {1, 4, 9, 4, 1};
            t.count = 20;
            t.underflow = 0.01;
            t.amax = 0.5;
            f.tensors.push_back(t);
        }
    f.attention_max_logit = {{"blocks.0.attn", 4.0}, {"blocks.1.attn", 5.0}};
    f.memory.resident_bytes = (512 + step) * 1024 * 1024;
    if (cuda) {
        f.memory.cuda_allocated_bytes = 2048LL * 1024 * 1024;
        f.memory.cuda_reserved_bytes = 3072LL * 1024 * 1024;
    }
    return f;
}

// 30 steps in 3 batches, an evaluation closing each, frames at 1, 10, 20, 30.
std::vector<TelemetryBatch> thirty_steps()
{
    std::vector<TelemetryBatch> batches(3);
    for (int64_t step = 1; step <= 30; ++step) {
        TelemetryBatch& b = batches[size_t((step - 1) / 10)];
        b.steps.push_back(step_at(step, loss_of(step)));
        if (step == 1 || step % 10 == 0) b.layer_frames.push_back(frame_at(step, false));
        if (step % 10 == 0) b.evals.push_back({step, 3.5 - double(step) / 100.0, 3.4});
    }
    batches[0].events.push_back(legacy_event(0, "run_started", "run 1"));
    batches[1].events.push_back(legacy_event(12, "precision_changed",
                                 "blocks.*.mlp.* -> e4m3/e5m2/e5m2 (4 layers); FP8 scale history restarted"));
    batches[1].events.push_back(legacy_event(17, "alert_nonfinite", "blocks.1.mlp.fc1: non-finite values in grad_output"));
    batches[2].events.push_back(legacy_event(25, "checkpoint", "saved checkpoint at step 25"));
    return batches;
}

int row_of_kind(const EventLogModel& model, const std::string& kind)
{
    for (int row = 0; row < model.rowCount(); ++row)
        if (model.event(row).tag() == kind) return row;
    return -1;
}

// A run that looks like a real one, for the screenshot.
void feed_realistic_run(MonitorPage& page, int64_t steps)
{
    page.reset(4096, kLayers);
    double scale = 65536.0;
    uint32_t seed = 12345;
    auto noise = [&seed] {
        seed = seed * 1664525u + 1013904223u;
        return double(seed >> 8) / double(1u << 24) - 0.5;
    };
    TelemetryBatch batch;
    batch.events.push_back(legacy_event(0, "run_started", "run 7: gpt 2x128, fp16 mixed precision, 500 steps"));
    for (int64_t step = 1; step <= steps; ++step) {
        double loss = 2.1 + 8.7 * std::exp(-double(step) / 60.0) + 0.12 * noise();
        if (step == 312) loss += 1.6;
        const bool overflow = step == 3 || step == 4 || step == 187 || step == 390;
        StepMetrics m = step_at(step, loss, scale, overflow);
        m.step_time_ms = 38.0 + 6.0 * noise() + (step > 200 ? -9.0 : 0.0);
        for (const std::string& layer : kLayers) m.layer_grad_norms.push_back({layer, 0.3 + 0.2 * noise()});
        batch.steps.push_back(m);
        if (overflow) {
            const double next = scale / 2;
            const std::string blamed = step == 187 ? "blocks.1.mlp.fc1, lm_head" : "lm_head";
            batch.events.push_back(legacy_event(step, "loss_scale_backoff",
                                    "scale " + std::to_string(int64_t(scale)) + " -> " + std::to_string(int64_t(next)) +
                                        "; non-finite gradients in " + blamed));
            batch.events.push_back(legacy_event(step, "step_skipped", "non-finite gradients in " + blamed));
            scale = next;
        } else if (step % 100 == 0) {
            batch.events.push_back(legacy_event(step, "loss_scale_growth",
                                    "scale " + std::to_string(int64_t(scale)) + " -> " +
                                        std::to_string(int64_t(scale * 2))));
            scale *= 2;
        }
        if (step == 1 || step % 10 == 0) {
            LayerStatsFrame f = frame_at(step, true);
            for (TensorStats& t : f.tensors) {
                const double late = step > 200 && t.layer.find("mlp") != std::string::npos ? 1.0 : 0.0;
                t.underflow = std::max(0.0, 0.002 + 0.01 * late + 0.004 * noise() +
                                                (t.layer == "blocks.1.mlp.fc1" && step > 300 ? 0.04 : 0.0));
                t.first_exponent = -24;
                t.exponent_counts.clear();
                for (int e = -24; e <= 2; ++e)
                    t.exponent_counts.push_back(int64_t(4000.0 * std::exp(-0.5 * std::pow((e + 9.0) / 3.5, 2))));
            }
            f.memory.resident_bytes = int64_t((1400.0 + 30.0 * std::log(double(step))) * 1024 * 1024);
            f.memory.cuda_allocated_bytes = int64_t((2200.0 + (step > 1 ? 600.0 : 0.0) + 20 * noise()) * 1024 * 1024);
            f.memory.cuda_reserved_bytes = int64_t(3400.0 * 1024 * 1024);
            f.memory.nvml_used_bytes = int64_t(3900.0 * 1024 * 1024);
            batch.layer_frames.push_back(f);
        }
        if (step % 50 == 0)
            batch.evals.push_back({step, 2.25 + 8.4 * std::exp(-double(step) / 60.0) + 0.05, loss});
        if (step == 200)
            batch.events.push_back(legacy_event(step, "precision_changed",
                                    "blocks.*.mlp.* -> e4m3/e5m2/e5m2 (4 layers); FP8 scale history restarted"));
        if (step == 312)
            batch.events.push_back(legacy_event(step, "alert_loss_spike", "loss 3.86 is 4.1 sigma above its EMA 2.31"));
        if (step == 313)
            batch.events.push_back(legacy_event(step, "watch_action", "loss_spike: pausing training"));
        if (step == 340)
            batch.events.push_back(legacy_event(step, "alert_fp8_underflow", "blocks.1.mlp.fc1: 4.2% of grad_output underflows in e5m2"));
        if (step % 250 == 0) batch.events.push_back(legacy_event(step, "checkpoint", "checkpoint step " + std::to_string(step)));
        if (step % 20 == 0) {
            page.ingest(batch);
            batch = {};
        }
    }
    batch.events.push_back(legacy_event(steps, "run_finished", "finished after " + std::to_string(steps) + " steps"));
    page.ingest(batch);
}

} // namespace

class TestMonitor : public QObject {
    Q_OBJECT

private slots:
    void emaMatchesTensorBoard();
    void decimationKeepsSpikes();
    void frameStatsPercentiles();
    void lossPlotShowsIngestedRun();
    void lossPlotDecimatesLongRuns();
    void lossPlotAppendBatchStillWorks();
    void lossScalePlotMarksBackoffsGrowthsAndSkips();
    void lossScalePlotSaysWhenScalingIsOff();
    void aLongRunsHistoryIsBounded();
    void memoryPlotShowsOnlyMeasuredLines();
    void communicationPlotOnlyForDataParallelRuns();
    void precisionChangeMarksLossPlot();
    void layerMenuAsksForASwitch();
    void eventActivationMovesCursorAndSelectsLayer();
    void heatmapClickActivatesToo();
    void attentionRowsWithTensorsJoinTheHistogram();
    void frameSchedulerCapsRate();
    void framesOfAHiddenPageAreNotTimed();
    void realisticRunRenders();
};

// What a long run repeats is bounded in the window (read-only audit 'longrun'): the loss-scale
// events of a run that backs off every step, thinned evenly over the run; the memory points,
// as the frames; the frames and histograms by the bytes they take, every slot counted.
void TestMonitor::aLongRunsHistoryIsBounded()
{
    RunHistory history(64);
    history.setMaxRepeatedEvents(8);
    history.setMaxColumns(4);
    for (int64_t step = 1; step <= 100; ++step) { // a drain a step
        TelemetryBatch batch;
        batch.steps.push_back(step_at(step, 3.0, 1e30, true));
        batch.events.push_back(
            legacy_event(step, "loss_scale_backoff", "scale 1e+30 -> 1e+30; non-finite gradients in lm_head"));
        batch.events.push_back(legacy_event(step, "step_skipped", "non-finite gradients in lm_head"));
        if (step == 50) batch.events.push_back(legacy_event(step, "sample", "once"));
        LayerStatsFrame frame;
        frame.step = step;
        frame.memory.resident_bytes = step;
        TensorStats t;
        t.layer = "blocks.3.mlp.fc2"; // one tensor, in the 4th block: the slots before it are empty
        t.role = "grad_output";
        t.first_exponent = -3;
        t.exponent_counts = {1, 2, 3};
        frame.tensors.push_back(t);
        batch.layer_frames.push_back(frame);
        history.append(batch);
    }
    std::map<std::string, std::vector<int64_t>> kept;
    for (const RunEvent& e : history.events()) kept[e.tag()].push_back(e.step);
    // Arrivals 1..100 at strides 1, 2, 4, 8, 16: steps 1, 17, 33, ..., 97; and the newest.
    const std::vector<int64_t> every16{1, 17, 33, 49, 65, 81, 97, 100};
    QCOMPARE(kept["loss_scale_backoff"], every16);
    QCOMPARE(kept["step_skipped"], every16);
    QCOMPARE(kept["sample"], std::vector<int64_t>{50});
    // Plots rebuild their markers on eventsRevision(): the count of events alone can come back
    // to an earlier value after thinning.
    const uint64_t revision = history.eventsRevision();
    history.append(TelemetryBatch{});
    QCOMPARE(history.eventsRevision(), revision);
    TelemetryBatch more;
    for (int64_t step = 101; step <= 116; ++step) // arrivals 100..115 at stride 16: step 113, and the newest
        more.events.push_back(legacy_event(step, "loss_scale_backoff", "scale 1e+30 -> 1e+30"));
    history.append(more);
    QVERIFY(history.eventsRevision() > revision);
    std::vector<int64_t> backoffs;
    for (const RunEvent& e : history.events())
        if (e.kind == EventKind::LossScaleBackoff) backoffs.push_back(e.step);
    QCOMPARE(backoffs, (std::vector<int64_t>{1, 17, 33, 49, 65, 81, 97, 113, 116}));

    // One batch of 1,000 (a window catching up on a run) is brought under the cap at once.
    RunHistory caughtUp(64);
    caughtUp.setMaxRepeatedEvents(8);
    TelemetryBatch thousand;
    for (int64_t step = 1; step <= 1000; ++step)
        thousand.events.push_back(legacy_event(step, "loss_scale_backoff", "scale 1e+30 -> 1e+30"));
    caughtUp.append(thousand);
    QVERIFY2(caughtUp.events().size() <= 9, qPrintable(QString::number(caughtUp.events().size())));
    QCOMPARE(caughtUp.events().front().step, int64_t(1));
    QCOMPARE(caughtUp.events().back().step, int64_t(1000));
    QVERIFY(history.memory().size() <= 16);
    QCOMPARE(history.memory().back().step, int64_t(100));
    QVERIFY(history.frameBytes() > 0);
    // A frame's histogram slots run to the tensor's: every slot is counted, not only its 3 bins.
    const size_t slotCount = size_t(history.layerIndex("blocks.3.mlp.fc2") + 1) * RunHistory::roles().size();
    QVERIFY2(history.histogramBytes() >= history.histogramSteps().size() * (slotCount - RunHistory::roles().size()) *
                                             sizeof(ExponentHistogram),
             qPrintable(QString::number(history.histogramBytes())));

    RunHistory small(64);
    small.setMaxHistogramBytes(4 * 1024);
    small.setMaxFrameBytes(4 * 1024);
    for (int64_t step = 1; step <= 64; ++step) {
        TelemetryBatch batch;
        LayerStatsFrame frame;
        frame.step = step;
        TensorStats t;
        t.layer = "blocks.3.mlp.fc2";
        t.role = "grad_output";
        t.exponent_counts = {1};
        frame.tensors.push_back(t);
        batch.layer_frames.push_back(frame);
        small.append(batch);
    }
    QVERIFY2(small.histogramBytes() <= 4 * 1024 + small.histogramBytes() / small.histogramSteps().size(),
             qPrintable(QString::number(small.histogramBytes())));
    QVERIFY(small.histogramSteps().size() < 64);
    QCOMPARE(small.histogramSteps().back(), int64_t(64));
    QVERIFY(small.frameBytes() <= 4 * 1024 + 1024);

    // A run that skips every step: a cross a few pixels apart, not one for each of 10,000 steps.
    RunHistory skipping(64);
    TelemetryBatch steps;
    for (int64_t step = 1; step <= 10000; ++step) steps.steps.push_back(step_at(step, 3.0, 65536.0, true));
    skipping.append(steps);
    LossScalePlot plot;
    plot.resize(400, 200);
    plot.setHistory(&skipping);
    plot.refresh();
    QCOMPARE(plot.scaleGraph()->dataCount() > 0, true);
    const QVector<double> crosses = graph_keys(plot.skippedGraph());
    QVERIFY2(crosses.size() <= 2048 && crosses.size() >= 1024, qPrintable(QString::number(crosses.size())));
    QCOMPARE(crosses.back(), 10000.0); // the newest skip is always drawn
    // A lone skip among thousands keeps its cross.
    RunHistory lone(64);
    TelemetryBatch mostly;
    for (int64_t step = 1; step <= 10000; ++step)
        mostly.steps.push_back(step_at(step, 3.0, 65536.0, step <= 5000 || step == 7777));
    lone.append(mostly);
    plot.setHistory(&lone);
    plot.refresh();
    const QVector<double> some = graph_keys(plot.skippedGraph());
    QVERIFY2(some.size() <= 2048, qPrintable(QString::number(some.size())));
    QCOMPARE(some.back(), 7777.0);
    QVERIFY(some.contains(5000.0)); // the newest of its column
}

void TestMonitor::emaMatchesTensorBoard()
{
    // TensorBoard: last = last*w + (1-w)*v, shown as last / (1 - w^n).
    const std::vector<double> s = debiased_ema({1, 2, 3}, 0.6);
    QCOMPARE(s.size(), size_t(3));
    QCOMPARE(s[0], 1.0);
    QVERIFY(std::abs(s[1] - 1.04 / 0.64) < 1e-12);   // 1.625
    QVERIFY(std::abs(s[2] - 1.824 / 0.784) < 1e-12); // 2.3265306...
    QVERIFY(std::abs(s[1] - 1.625) < 1e-12);

    QCOMPARE(debiased_ema({1, 5, 2}, 0.0), (std::vector<double>{1, 5, 2})); // weight 0: identity
    QCOMPARE(debiased_ema({4, 4, 4}, 0.9), (std::vector<double>{4, 4, 4})); // constant: unchanged
    QVERIFY(debiased_ema({}, 0.5).empty());

    // Non-finite values pass through and do not count as seen.
    const std::vector<double> gap = debiased_ema({1, kNaN, 3, INFINITY}, 0.5);
    QCOMPARE(gap[0], 1.0);
    QVERIFY(std::isnan(gap[1]));
    QVERIFY(std::abs(gap[2] - 1.75 / 0.75) < 1e-12); // (0.5*0.5 + 0.5*3) / (1 - 0.25)
    QVERIFY(std::isinf(gap[3]));
}

void TestMonitor::decimationKeepsSpikes()
{
    std::vector<double> xs, ys;
    for (int i = 0; i < 10000; ++i) {
        xs.push_back(i + 1);
        ys.push_back(2.0 + 0.001 * (i % 7));
    }
    ys[4321] = 50.0; // one spike
    ys[777] = -5.0;  // one dip
    const DecimatedSeries d = decimate_min_max(xs, ys, 100);
    QVERIFY(d.xs.size() <= 400);
    QVERIFY(d.xs.size() >= 200); // first and last of every bucket at least
    QCOMPARE(d.xs.size(), d.ys.size());
    QCOMPARE(d.xs.front(), 1.0);
    QCOMPARE(d.xs.back(), 10000.0);
    QCOMPARE(d.ys.back(), ys.back());
    QCOMPARE(std::count(d.ys.begin(), d.ys.end(), 50.0), 1);
    QCOMPARE(std::count(d.ys.begin(), d.ys.end(), -5.0), 1);
    QCOMPARE(d.xs[size_t(std::find(d.ys.begin(), d.ys.end(), 50.0) - d.ys.begin())], 4322.0);
    QVERIFY(std::is_sorted(d.xs.begin(), d.xs.end()));
    QVERIFY(std::adjacent_find(d.xs.begin(), d.xs.end()) == d.xs.end()); // no point twice

    // Already small: unchanged.
    const std::vector<double> sx(xs.begin(), xs.begin() + 400), sy(ys.begin(), ys.begin() + 400);
    const DecimatedSeries same = decimate_min_max(sx, sy, 100);
    QCOMPARE(same.xs, sx);
    QCOMPARE(same.ys, sy);
}

void TestMonitor::frameStatsPercentiles()
{
    FrameStats stats;
    QCOMPARE(stats.count(), size_t(0));
    QCOMPARE(stats.percentile(50), 0.0);
    for (int i = 100; i >= 1; --i) stats.record(i);
    QCOMPARE(stats.count(), size_t(100));
    QCOMPARE(stats.percentile(0), 1.0);
    QCOMPARE(stats.percentile(50), 50.0);
    QCOMPARE(stats.percentile(95), 95.0);
    QCOMPARE(stats.percentile(95.5), 96.0); // nearest rank: ceil(0.955 * 100)
    QCOMPARE(stats.percentile(100), 100.0);
    QCOMPARE(stats.last(), 1.0);

    FrameStats bounded(10);
    for (int i = 1; i <= 25; ++i) bounded.record(i);
    QCOMPARE(bounded.count(), size_t(10)); // 16..25 kept
    QCOMPARE(bounded.total(), uint64_t(25));
    QCOMPARE(bounded.percentile(0), 16.0);
    QCOMPARE(bounded.percentile(100), 25.0);
    bounded.reset();
    QCOMPARE(bounded.count(), size_t(0));
    QCOMPARE(bounded.percentile(90), 0.0);
}

void TestMonitor::lossPlotShowsIngestedRun()
{
    MonitorPage page;
    page.reset(256, kLayers);
    for (const TelemetryBatch& b : thirty_steps()) page.ingest(b);
    page.renderNow();

    const LossPlot* plot = page.lossPlot();
    QVector<double> keys, values;
    for (int step = 1; step <= 30; ++step) {
        keys.push_back(step);
        values.push_back(loss_of(step));
    }
    QCOMPARE(graph_keys(plot->trainGraph()), keys);
    QCOMPARE(graph_values(plot->trainGraph()), values);
    QCOMPARE(graph_keys(plot->valGraph()), (QVector<double>{10, 20, 30}));
    QCOMPARE(graph_values(plot->valGraph()), (QVector<double>{3.4, 3.3, 3.2}));
    QCOMPARE(plot->xAxis->label(), QStringLiteral("step"));
    QVERIFY(plot->xAxis->range().contains(1) && plot->xAxis->range().contains(30));
    QVERIFY(plot->yAxis->range().contains(loss_of(1)) && plot->yAxis->range().contains(loss_of(30)));

    page.setXAxisMode(XAxisMode::Tokens);
    page.renderNow();
    QCOMPARE(plot->xAxis->label(), QStringLiteral("tokens"));
    QCOMPARE(graph_keys(plot->trainGraph()).front(), 256.0);
    QCOMPARE(graph_keys(plot->trainGraph()).back(), 30.0 * 256.0);
    QCOMPARE(graph_keys(plot->valGraph()), (QVector<double>{2560, 5120, 7680}));
    // The plots stacked under it follow the mode, without the title (the loss plot says it).
    QCOMPARE(page.lossScalePlot()->xAxis->label(), QString());
    QCOMPARE(page.lossScalePlot()->xAxisMode(), XAxisMode::Tokens);
    QVERIFY(page.lossScalePlot()->xAxis->range().contains(30.0 * 256.0));

    page.setXAxisMode(XAxisMode::Seconds); // 0.1 s per step
    page.renderNow();
    QCOMPARE(plot->xAxis->label(), QStringLiteral("training time (s)"));
    QVERIFY(std::abs(graph_keys(plot->trainGraph()).back() - 3.0) < 1e-9);
    QVERIFY(std::abs(graph_keys(plot->valGraph()).front() - 1.0) < 1e-9);

    // Smoothing adds the TensorBoard curve over the unchanged raw one.
    page.setXAxisMode(XAxisMode::Step);
    page.setSmoothing(0.6);
    page.renderNow();
    QCOMPARE(page.smoothingSlider()->value(), 60);
    QVERIFY(plot->smoothedGraph() && plot->smoothedGraph()->visible());
    QCOMPARE(graph_values(plot->trainGraph()), values);
    const std::vector<double> expected = debiased_ema(std::vector<double>(values.begin(), values.end()), 0.6);
    QCOMPARE(graph_values(plot->smoothedGraph()), QVector<double>(expected.begin(), expected.end()));

    page.setLogScale(true);
    page.renderNow();
    QVERIFY(page.logScaleBox()->isChecked());
    QCOMPARE(plot->yAxis->scaleType(), QCPAxis::stLogarithmic);

    // A new run starts empty.
    page.reset(256, kLayers);
    page.renderNow();
    QCOMPARE(plot->trainGraph()->dataCount(), 0);
    QCOMPARE(page.eventModel()->rowCount(), 0);
}

void TestMonitor::lossPlotDecimatesLongRuns()
{
    MonitorPage page;
    page.reset(1, {});
    TelemetryBatch batch;
    for (int64_t step = 1; step <= 100000; ++step) batch.steps.push_back(step_at(step, step == 61234 ? 40.0 : 2.0));
    page.ingest(batch);
    page.renderNow();
    const QCPGraph* raw = page.lossPlot()->trainGraph();
    QVERIFY(raw->dataCount() <= page.lossPlot()->pointBudget());
    QVERIFY(raw->dataCount() > 100);
    const QVector<double> values = graph_values(raw);
    QCOMPARE(std::count(values.begin(), values.end(), 40.0), qsizetype(1));
    QCOMPARE(graph_keys(raw).back(), 100000.0);
}

void TestMonitor::lossPlotAppendBatchStillWorks()
{
    // The main window's older path: no external history.
    LossPlot plot;
    QCOMPARE(plot.graphCount(), 2);
    plot.appendBatch({{1, 3.0}, {2, 2.5}}, {{0, 3.2, 3.1}});
    plot.appendBatch({{3, 2.0}}, {});
    plot.appendBatch({}, {});
    QCOMPARE(plot.batchCount(), 2);
    QCOMPARE(graph_keys(plot.trainGraph()), (QVector<double>{1, 2, 3}));
    QCOMPARE(graph_values(plot.trainGraph()), (QVector<double>{3.0, 2.5, 2.0}));
    QCOMPARE(graph_keys(plot.valGraph()), (QVector<double>{0}));
    plot.clear();
    QCOMPARE(plot.trainGraph()->dataCount(), 0);
    plot.appendBatch({{1, 1.0}}, {});
    QCOMPARE(plot.trainGraph()->dataCount(), 1);
}

void TestMonitor::lossScalePlotMarksBackoffsGrowthsAndSkips()
{
    MonitorPage page;
    page.reset(1, kLayers);
    TelemetryBatch batch;
    for (int64_t step = 1; step <= 30; ++step) {
        const double scale = step <= 10 ? 65536.0 : step <= 20 ? 32768.0 : 65536.0;
        batch.steps.push_back(step_at(step, 3.0, scale, step == 10 || step == 15));
    }
    batch.events.push_back(legacy_event(10, "loss_scale_backoff", "scale 65536 -> 32768; non-finite gradients in blocks.1.mlp.fc1, lm_head"));
    batch.events.push_back(legacy_event(10, "step_skipped", "non-finite gradients in blocks.1.mlp.fc1, lm_head"));
    batch.events.push_back(legacy_event(15, "step_skipped", "non-finite gradients in lm_head"));
    batch.events.push_back(legacy_event(20, "loss_scale_growth", "scale 32768 -> 65536"));
    page.ingest(batch);
    page.renderNow();

    const LossScalePlot* plot = page.lossScalePlot();
    QCOMPARE(plot->scaleGraph()->dataCount(), 30);
    QCOMPARE(plot->yAxis->scaleType(), QCPAxis::stLogarithmic);
    QCOMPARE(plot->backoffs().size(), size_t(1));
    QCOMPARE(plot->backoffs()[0].step, int64_t(10));
    QCOMPARE(plot->backoffs()[0].layers, QStringLiteral("blocks.1.mlp.fc1, lm_head"));
    QVERIFY(plot->backoffs()[0].label.contains(QStringLiteral("blocks.1.mlp.fc1")));
    QCOMPARE(graph_keys(plot->backoffGraph()), (QVector<double>{10}));
    QCOMPARE(graph_values(plot->backoffGraph()), (QVector<double>{65536}));
    QCOMPARE(plot->growths().size(), size_t(1));
    QCOMPARE(graph_keys(plot->growthGraph()), (QVector<double>{20}));
    QCOMPARE(graph_keys(plot->skippedGraph()), (QVector<double>{10, 15}));
    QVERIFY(!plot->scalingOff());
    QVERIFY(plot->noticeText().isEmpty());
    QVERIFY(plot->yAxis->range().contains(32768) && plot->yAxis->range().contains(65536));

    // A label that would cover another marker is moved above its own marker, then to its left,
    // and hidden only where markers sit on every side; one with room keeps its text.
    for (const int crowding : {0, 1, 2}) {
        RunHistory crowded(64);
        TelemetryBatch b;
        // Skip crosses just under (step 11) and over (12) step 10's marker to the right, and
        // then to the left too (8, 9).
        const std::set<int64_t> skipped = crowding == 0   ? std::set<int64_t>{11}
                                          : crowding == 1 ? std::set<int64_t>{11, 12}
                                                          : std::set<int64_t>{8, 9, 11, 12};
        for (int64_t step = 1; step <= 60; ++step)
            b.steps.push_back(step_at(step, 3.0, step <= 10 ? 65536.0 : step <= 40 ? 32768.0 : 16384.0,
                                      skipped.count(step) > 0));
        b.events.push_back(legacy_event(10, "loss_scale_backoff", "scale 65536 -> 32768; non-finite gradients in wte"));
        b.events.push_back(legacy_event(40, "loss_scale_backoff", "scale 32768 -> 16384; non-finite gradients in wpe"));
        b.steps[7].loss_scale = b.steps[10].loss_scale = 60000.0;
        b.steps[8].loss_scale = b.steps[11].loss_scale = 72000.0;
        crowded.append(b);
        LossScalePlot alone;
        alone.resize(900, 200);
        alone.setHistory(&crowded);
        alone.refresh();
        alone.replot(QCustomPlot::rpImmediateRefresh);
        QCOMPARE(alone.backoffs().size(), size_t(2));
        QCOMPARE(alone.shownLabels(), crowding == 2 ? QStringList{QStringLiteral("wpe")}
                                                    : (QStringList{QStringLiteral("wte"), QStringLiteral("wpe")}));
    }

    // The y axis ticks are powers of two.
    QVector<double> ticks;
    QVector<QString> labels;
    plot->yAxis->ticker()->generate(plot->yAxis->range(), QLocale::c(), QLatin1Char('g'), 6, ticks, nullptr, &labels);
    QVERIFY(!ticks.isEmpty());
    for (double t : ticks) QCOMPARE(std::exp2(std::round(std::log2(t))), t);
    QVERIFY(labels.contains(QStringLiteral("2\u00b9\u2075")) || labels.contains(QStringLiteral("2\u00b9\u2076")));

    // Hovering a marker shows its event's text, made from the history then (not every frame).
    page.resize(1200, 900);
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    page.renderNow();
    auto* hovered = page.lossScalePlot();
    hovered->replot(QCustomPlot::rpImmediateRefresh);
    const QPoint at(int(hovered->xAxis->coordToPixel(10)), int(hovered->yAxis->coordToPixel(65536)));
    QTest::mouseMove(hovered, at);
    QTRY_VERIFY(QToolTip::isVisible());
    QVERIFY2(QToolTip::text().contains("step 10: scale 65536 -> 32768; non-finite gradients in blocks.1.mlp.fc1"),
             qPrintable(QToolTip::text()));
}

void TestMonitor::lossScalePlotSaysWhenScalingIsOff()
{
    MonitorPage page;
    page.reset(1, kLayers);
    TelemetryBatch batch;
    for (int64_t step = 1; step <= 5; ++step) batch.steps.push_back(step_at(step, 3.0));
    page.ingest(batch);
    page.renderNow();
    const LossScalePlot* plot = page.lossScalePlot();
    QVERIFY(plot->scalingOff());
    QCOMPARE(plot->noticeText(), QStringLiteral("loss scaling off"));
    QCOMPARE(graph_values(plot->scaleGraph()), (QVector<double>{1, 1, 1, 1, 1}));
    QVERIFY(plot->yAxis->range().contains(1.0));
}

void TestMonitor::memoryPlotShowsOnlyMeasuredLines()
{
    MonitorPage page;
    page.reset(1, kLayers);
    for (const TelemetryBatch& b : thirty_steps()) page.ingest(b);
    page.renderNow();
    const MemoryPlot* plot = page.memoryPlot();
    QVERIFY(plot->residentGraph()->visible());
    QCOMPARE(graph_keys(plot->residentGraph()), (QVector<double>{1, 10, 20, 30}));
    QCOMPARE(graph_values(plot->residentGraph()), (QVector<double>{513, 522, 532, 542}));
    QVERIFY(!plot->cudaAllocatedGraph()->visible());
    QVERIFY(!plot->cudaReservedGraph()->visible());
    QVERIFY(!plot->nvmlGraph()->visible());
    QCOMPARE(plot->legend->itemCount(), 1);
    // The stacked curves share their steps: memory, measured at step 30 last, runs to the last
    // step like the loss (read-only audit 'gui-look': step 10 sat 100 px apart on the two).
    TelemetryBatch more;
    for (int64_t s = 31; s <= 38; ++s) more.steps.push_back(step_at(s, 3.0));
    page.ingest(more);
    page.renderNow();
    QCOMPARE(plot->xAxis->range(), page.lossPlot()->xAxis->range());
    QCOMPARE(plot->xAxis->range(), page.lossScalePlot()->xAxis->range());
    QVERIFY(plot->xAxis->range().contains(38));

    TelemetryBatch cuda;
    cuda.steps.push_back(step_at(39, 3.0));
    cuda.layer_frames.push_back(frame_at(39, true));
    page.ingest(cuda);
    page.renderNow();
    QVERIFY(plot->cudaAllocatedGraph()->visible());
    QCOMPARE(graph_values(plot->cudaAllocatedGraph()), (QVector<double>{2048}));
    QCOMPARE(graph_values(plot->cudaReservedGraph()), (QVector<double>{3072}));
    QVERIFY(!plot->nvmlGraph()->visible());
    QCOMPARE(plot->legend->itemCount(), 3);
}

// Rank 0's step of 100 ms split into compute and the allreduce wait; a single-process run
// (no dp/allreduce_ms) never shows the plot, and a reset hides it again.
void TestMonitor::communicationPlotOnlyForDataParallelRuns()
{
    MonitorPage page;
    page.reset(1, kLayers);
    for (const TelemetryBatch& b : thirty_steps()) page.ingest(b);
    page.renderNow();
    const CommunicationPlot* plot = page.communicationPlot();
    QVERIFY(plot->isHidden());

    TelemetryBatch dp;
    for (const int64_t step : {31, 32, 33}) {
        StepMetrics m = step_at(step, 3.0);
        m.extra_scalars = {{"dp/step_ms/rank_1", 99.0}, {"dp/allreduce_ms", 5.0 * double(step - 30)},
                           {"dp/allreduce_share", 0.05}};
        dp.steps.push_back(m);
    }
    page.ingest(dp);
    page.renderNow();
    QVERIFY(!plot->isHidden());
    QCOMPARE(graph_keys(plot->allreduceGraph()), (QVector<double>{31, 32, 33}));
    QCOMPARE(graph_values(plot->allreduceGraph()), (QVector<double>{5, 10, 15}));
    QCOMPARE(graph_values(plot->computeGraph()), (QVector<double>{95, 90, 85}));

    page.reset(1, kLayers);
    for (const TelemetryBatch& b : thirty_steps()) page.ingest(b);
    page.renderNow();
    QVERIFY(plot->isHidden());
}

void TestMonitor::precisionChangeMarksLossPlot()
{
    MonitorPage page;
    page.reset(100, kLayers);
    for (const TelemetryBatch& b : thirty_steps()) page.ingest(b);
    page.renderNow();
    const auto& markers = page.lossPlot()->eventMarkers();
    QCOMPARE(markers.size(), size_t(1)); // the alert and the checkpoint are not markers
    QCOMPARE(markers[0].step, int64_t(12));
    QCOMPARE(markers[0].x, 12.0);
    QCOMPARE(markers[0].kind, QStringLiteral("precision_changed"));
    QCOMPARE(markers[0].label, QStringLiteral("blocks.*.mlp.* \u2192 e4m3/e5m2/e5m2"));
    QCOMPARE(page.lossScalePlot()->eventMarkers().size(), size_t(1));

    page.setXAxisMode(XAxisMode::Tokens);
    page.renderNow();
    QCOMPARE(page.lossPlot()->eventMarkers()[0].x, 1200.0);

    TelemetryBatch action;
    action.events.push_back(legacy_event(31, "watch_action", "loss_spike: pausing training"));
    page.ingest(action);
    page.renderNow();
    QCOMPARE(page.lossPlot()->eventMarkers().size(), size_t(2));
    QCOMPARE(page.lossPlot()->eventMarkers()[1].kind, QStringLiteral("watch_action"));

    // A change of the scaling recipe too names it.
    TelemetryBatch recipe;
    RunEvent change;
    change.step = 32;
    change.kind = EventKind::PrecisionChanged;
    change.pattern = "lm_head";
    change.layers = {"lm_head"};
    change.new_formats = GemmFormats::all(NumberFormat::E4M3);
    change.new_scaling = Fp8Scaling::NvFp4;
    recipe.events.push_back(change);
    page.ingest(recipe);
    page.renderNow();
    QCOMPARE(page.lossPlot()->eventMarkers().size(), size_t(3));
    // The formats the recipe computes in, as the event's message says (it read e4m3 beside a
    // precision table that said e2m1).
    QCOMPARE(page.lossPlot()->eventMarkers()[2].label, QStringLiteral("lm_head \u2192 e2m1/e2m1/e2m1 nvfp4"));
}

// A heatmap row's menu offers whole recipes for its layer; a pick asks the window to switch
// it (formats of the three GEMMs, and the scaling recipe where the choice has one).
void TestMonitor::layerMenuAsksForASwitch()
{
    MonitorPage page;
    page.reset(1, kLayers);
    QSignalSpy asked(&page, &MonitorPage::layerSwitchRequested);
    emit page.heatmap()->layerMenuRequested(QStringLiteral("blocks.0.mlp.fc1"), QPoint());
    QMenu* menu = page.layerMenu(QStringLiteral("blocks.0.mlp.fc1"));
    QList<QAction*> actions;
    for (QAction* a : menu->actions())
        if (!a->isSeparator()) actions << a;
    const auto choices = layer_switch_choices();
    QCOMPARE(actions.size(), qsizetype(choices.size()));
    const auto pick = [&](const QString& text) {
        for (QAction* a : actions)
            if (a->text().startsWith(text)) {
                a->trigger();
                return;
            }
        QFAIL(qPrintable("no choice " + text));
    };
    pick(QStringLiteral("NVFP4"));
    pick(QStringLiteral("BF16"));
    pick(QStringLiteral("FP8 hybrid (E4M3 forward"));
    QCOMPARE(asked.count(), 3);
    QCOMPARE(asked.at(0).at(0).toString(), QStringLiteral("blocks.0.mlp.fc1"));
    const auto formats = [&](int i) { return asked.at(i).at(1).value<GemmFormats>(); };
    QVERIFY(formats(0) == GemmFormats::all(NumberFormat::E4M3));
    QCOMPARE(asked.at(0).at(2).toString(), QStringLiteral("nvfp4"));
    QVERIFY(formats(1) == GemmFormats::all(NumberFormat::BF16));
    QCOMPARE(asked.at(1).at(2).toString(), QString()); // keeps the layer's recipe
    QVERIFY((formats(2) == GemmFormats{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2}));
    QCOMPARE(asked.at(2).at(2).toString(), QStringLiteral("delayed"));
    // Rows without a GEMM (every gradient norm has a row) offer no menu: each pick failed with
    // "no layer matches 'wpe'". The tied wte switches lm_head, as its watchers do.
    QCOMPARE(page.switchableLayer(QStringLiteral("wpe")), QStringLiteral("wpe")); // layers not known yet
    page.setInitialLayerStates({{"blocks.0.mlp.fc1", GemmFormats{}, "", ""}, {"lm_head", GemmFormats{}, "", ""}});
    QCOMPARE(page.switchableLayer(QStringLiteral("blocks.0.mlp.fc1")), QStringLiteral("blocks.0.mlp.fc1"));
    QCOMPARE(page.switchableLayer(QStringLiteral("wte")), QStringLiteral("lm_head"));
    QCOMPARE(page.switchableLayer(QStringLiteral("wpe")), QString());
    QCOMPARE(page.switchableLayer(QStringLiteral("blocks.0.ln1")), QString());
}

void TestMonitor::eventActivationMovesCursorAndSelectsLayer()
{
    MonitorPage page;
    page.reset(1, kLayers);
    for (const TelemetryBatch& b : thirty_steps()) page.ingest(b);
    page.renderNow();
    QSignalSpy activated(&page, &MonitorPage::eventActivated);
    QSignalSpy selected(&page, &MonitorPage::layerSelected);

    const int row = row_of_kind(*page.eventModel(), "alert_nonfinite");
    QVERIFY(row >= 0);
    // The view shows the model itself; alerts stand out in it.
    QCOMPARE(page.eventView()->model(), static_cast<QAbstractItemModel*>(page.eventModel()));
    QCOMPARE(MonitorPage::eventKindColor(EventKind::Alert), QColor(190, 30, 30));
    QVERIFY(!MonitorPage::eventKindColor(EventKind::Checkpoint).isValid());
    emit page.eventView()->activated(page.eventView()->model()->index(row, EventLogModel::MessageColumn));
    page.renderNow();

    QCOMPARE(activated.count(), 1);
    QCOMPARE(activated.at(0).at(0).toLongLong(), qint64(17));
    QCOMPARE(activated.at(0).at(1).toString(), QStringLiteral("blocks.1.mlp.fc1"));
    QCOMPARE(selected.count(), 1);
    QCOMPARE(selected.at(0).at(0).toString(), QStringLiteral("blocks.1.mlp.fc1"));
    QCOMPARE(page.cursorStep(), int64_t(17));
    QCOMPARE(page.lossPlot()->cursorStep(), int64_t(17));
    QCOMPARE(page.lossScalePlot()->cursorStep(), int64_t(17));
    QCOMPARE(page.memoryPlot()->cursorStep(), int64_t(17));
    QVERIFY(page.lossPlot()->cursorLine()->visible());
    QCOMPARE(page.lossPlot()->cursorLine()->start->coords().x(), 17.0);
    QCOMPARE(page.selectedLayer(), QStringLiteral("blocks.1.mlp.fc1"));
    QCOMPARE(page.heatmap()->selectedLayer(), QStringLiteral("blocks.1.mlp.fc1"));
    QCOMPARE(page.histogramLayerCombo()->currentText(), QStringLiteral("blocks.1.mlp.fc1"));
    // Frames at 1, 10, 20, 30: step 17 is nearest to 20.
    QCOMPARE(page.histogramPlot()->shownStep(), int64_t(20));
    QCOMPARE(page.histogramStepSlider()->value(), 2);

    // An event that names no layer moves the cursor and keeps the selection.
    const int started = row_of_kind(*page.eventModel(), "checkpoint");
    emit page.eventView()->clicked(page.eventView()->model()->index(started, EventLogModel::StepColumn));
    QCOMPARE(activated.count(), 2);
    QCOMPARE(activated.at(1).at(1).toString(), QString());
    QCOMPARE(page.cursorStep(), int64_t(25));
    QCOMPARE(page.selectedLayer(), QStringLiteral("blocks.1.mlp.fc1"));
    QCOMPARE(selected.count(), 1);

    // Moving the histogram's frame slider moves the cursor everywhere.
    page.histogramStepSlider()->setValue(1);
    QCOMPARE(page.cursorStep(), int64_t(10));
    QCOMPARE(page.lossScalePlot()->cursorStep(), int64_t(10));

    page.setCursorStep(-1);
    page.renderNow();
    QVERIFY(!page.lossPlot()->cursorLine()->visible());
    QCOMPARE(page.histogramPlot()->shownStep(), int64_t(30)); // the newest frame again
}

// An unfused attention layer's probabilities and dS (roles "probs", "grad_scores") make its
// row a histogram layer like any other; before them it holds only its max logit and is not one.
void TestMonitor::attentionRowsWithTensorsJoinTheHistogram()
{
    MonitorPage page;
    page.reset(1, kLayers);
    for (const TelemetryBatch& b : thirty_steps()) page.ingest(b);
    page.renderNow();
    const QString sdpa = QStringLiteral("blocks.1.attn.sdpa");
    QCOMPARE(page.histogramLayerCombo()->findText(sdpa), -1);
    QVERIFY(!page.history().hasTensors("blocks.1.attn.sdpa"));
    const size_t before = page.history().layersWithTensors();

    TelemetryBatch batch;
    batch.steps.push_back(step_at(31, loss_of(31)));
    LayerStatsFrame f = frame_at(31, false);
    TensorStats probs;
    probs.layer = "blocks.1.attn.sdpa";
    probs.role = "probs";
    probs.format = "e4m3";
    probs.first_exponent = -9;
    probs.exponent_counts = {2, 0, 5, 7};
    probs.count = 20;
    probs.zeros = 6;
    probs.underflow = 0.05;
    probs.amax = 1.0;
    f.tensors.push_back(probs);
    batch.layer_frames.push_back(f);
    page.ingest(batch);
    page.renderNow();

    QVERIFY(page.history().hasTensors("blocks.1.attn.sdpa"));
    QCOMPARE(page.history().layersWithTensors(), before + 1);
    QVERIFY(page.histogramLayerCombo()->findText(sdpa) >= 0);
    QCOMPARE(page.histogramLayerCombo()->findText(QStringLiteral("blocks.0.attn.sdpa")), -1); // still none
    page.setHistogramRole(QStringLiteral("probs"));
    page.selectLayer(sdpa);
    QCOMPARE(page.histogramLayerCombo()->currentText(), sdpa);
    const ExponentHistogram* h = page.history().histogram("blocks.1.attn.sdpa", "probs", 31);
    QVERIFY(h != nullptr);
    QCOMPARE(h->zeros, int64_t(6));
    QCOMPARE(h->counts, (std::vector<int64_t>{2, 0, 5, 7}));
    // The heatmap's underflow row of "probs" has the attention layer's 5 %.
    page.setHeatmapStatistic(LayerStat::UnderflowPercent, QStringLiteral("probs"));
    const auto columns = page.history().columns(LayerStat::UnderflowPercent, "probs");
    QVERIFY(!columns.empty());
    const int row = page.history().layerIndex("blocks.1.attn.sdpa");
    QVERIFY(row >= 0 && size_t(row) < columns.back().values.size());
    QCOMPARE(columns.back().values[size_t(row)], 5.0f);
}

void TestMonitor::heatmapClickActivatesToo()
{
    MonitorPage page;
    page.reset(1, kLayers);
    for (const TelemetryBatch& b : thirty_steps()) page.ingest(b);
    page.renderNow();
    QSignalSpy activated(&page, &MonitorPage::eventActivated);
    QSignalSpy selected(&page, &MonitorPage::layerSelected);
    emit page.heatmap()->cellClicked(20, QStringLiteral("blocks.0.attn.qkv"));
    QCOMPARE(activated.count(), 1);
    QCOMPARE(activated.at(0).at(0).toLongLong(), qint64(20));
    QCOMPARE(page.cursorStep(), int64_t(20));
    QCOMPARE(page.selectedLayer(), QStringLiteral("blocks.0.attn.qkv"));
    QCOMPARE(selected.count(), 1);
    QCOMPARE(page.histogramLayerCombo()->currentText(), QStringLiteral("blocks.0.attn.qkv"));

    // Picking a layer in the histogram's combo selects it too.
    page.histogramLayerCombo()->setCurrentIndex(page.histogramLayerCombo()->findText(QStringLiteral("lm_head")));
    QCOMPARE(page.selectedLayer(), QStringLiteral("lm_head"));
    QCOMPARE(page.heatmap()->selectedLayer(), QStringLiteral("lm_head"));
    QCOMPARE(selected.count(), 2);
    // The attention rows have no tensors to histogram.
    QCOMPARE(page.histogramLayerCombo()->findText(QStringLiteral("blocks.0.attn.sdpa")), -1);

    // A cell of "underflow % of input" opens the histogram of that very tensor, whatever role it
    // showed before; a per-layer statistic's cell leaves the role alone.
    page.setHistogramRole(QStringLiteral("grad_output"));
    page.setHeatmapStatistic(LayerStat::UnderflowPercent, QStringLiteral("input"));
    emit page.heatmap()->cellClicked(20, QStringLiteral("blocks.0.mlp.fc1"));
    QCOMPARE(page.histogramRoleCombo()->currentText(), QStringLiteral("input"));
    page.setHeatmapStatistic(LayerStat::GradNorm, QStringLiteral("weight"));
    emit page.heatmap()->cellClicked(20, QStringLiteral("lm_head"));
    QCOMPARE(page.histogramRoleCombo()->currentText(), QStringLiteral("input"));
}

void TestMonitor::frameSchedulerCapsRate()
{
    MonitorPage page;
    page.resize(1200, 800);
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    page.setMaxFrameRateHz(25.0);
    QCOMPARE(page.frameBudget(), MonitorPage::kDefaultFrameBudget);
    page.reset(1, kLayers);
    QTest::qWait(100); // let the reset's frame pass
    const int before = page.framesRendered();

    QElapsedTimer clock;
    clock.start();
    int64_t step = 0;
    for (int b = 0; b < 100; ++b) {
        TelemetryBatch batch;
        for (int i = 0; i < 10; ++i) {
            ++step;
            batch.steps.push_back(step_at(step, loss_of(step)));
        }
        page.ingest(batch);
    }
    const qint64 elapsed = clock.elapsed();
    const int inLoop = page.framesRendered() - before;
    // One frame may start at once, then at most one per 40 ms.
    QVERIFY2(inLoop <= 1 + int(elapsed / 40),
             qPrintable(QStringLiteral("%1 frames in %2 ms").arg(inLoop).arg(elapsed)));
    QVERIFY(page.frameStats().count() >= size_t(page.framesRendered() > 0 ? 1 : 0));

    // What arrived after the last frame is drawn by the single shot.
    QTRY_COMPARE_WITH_TIMEOUT(page.lossPlot()->trainGraph()->dataCount(), 1000, 10000);
    QVERIFY(page.framesRendered() > before);
    QCOMPARE(graph_keys(page.lossPlot()->trainGraph()).back(), 1000.0);
    QCOMPARE(page.frameStats().total(), uint64_t(page.framesRendered()));
}

// A hidden page's frames draw nothing: timed, they read "frame 0.0 ms" once it showed.
void TestMonitor::framesOfAHiddenPageAreNotTimed()
{
    MonitorPage page;
    page.resize(1200, 800);
    page.reset(1, kLayers);
    TelemetryBatch batch;
    for (int64_t step = 1; step <= 50; ++step) batch.steps.push_back(step_at(step, loss_of(step)));
    page.ingest(batch);
    QTRY_VERIFY(page.framesRendered() > 0);
    QCOMPARE(page.frameStats().count(), size_t(0));

    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    QTRY_COMPARE(page.lossPlot()->trainGraph()->dataCount(), 50);
    QVERIFY(page.frameStats().count() >= 1);
    QVERIFY(page.frameStats().count() < size_t(page.framesRendered()));
    QVERIFY(page.frameStats().last() > 0.0);
}

void TestMonitor::realisticRunRenders()
{
    MonitorPage page;
    page.resize(1600, 1000);
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    feed_realistic_run(page, 500);
    page.setSmoothing(0.6);
    page.selectLayer(QStringLiteral("blocks.1.mlp.fc1"));
    page.renderNow();
    QCOMPARE(page.lossPlot()->trainGraph()->dataCount(), 500);
    QCOMPARE(page.lossScalePlot()->backoffs().size(), size_t(4));
    QCOMPARE(page.lossScalePlot()->backoffs()[2].layers, QStringLiteral("blocks.1.mlp.fc1, lm_head"));
    QVERIFY(page.memoryPlot()->nvmlGraph()->visible());
    QCOMPARE(page.histogramPlot()->shownStep(), int64_t(500));

    const QString dir = qEnvironmentVariable("MANTISSA_SCREENSHOT_DIR");
    if (!dir.isEmpty()) {
        const int row = row_of_kind(*page.eventModel(), "alert_fp8_underflow");
        page.eventView()->selectRow(row);
        emit page.eventView()->activated(page.eventView()->model()->index(row, 0));
        page.renderNow();
        QVERIFY(page.grab().save(QDir(dir).filePath(QStringLiteral("monitor_page.png"))));
        page.setXAxisMode(XAxisMode::Tokens);
        page.setLogScale(true);
        page.renderNow();
        QVERIFY(page.grab().save(QDir(dir).filePath(QStringLiteral("monitor_page_tokens_log.png"))));
    }
}

QTEST_MAIN(TestMonitor)
#include "test_monitor.moc"
