// SPDX-License-Identifier: GPL-3.0-or-later
// The GUI layer: item models under QAbstractItemModelTester, the snapshot hand-over, and
// real (tiny) training runs driven through the controller and the main window. Runs with
// QT_QPA_PLATFORM=offscreen.

#include <QAbstractItemModelTester>
#include <QElapsedTimer>
#include <QFile>
#include <QLabel>
#include <limits>
#include <QMessageBox>
#include <QDir>
#include <QMenu>
#include <QMimeData>
#include <QUrl>
#include <QApplication>
#include <QProgressBar>
#include <QTableView>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "checkpoint_file.h"
#include "event_helpers.h"
#include "models/event_log_model.h"
#include "plots/loss_plot.h"
#include "window/main_window.h"
#include "pages/runs_page.h"
#include "project_config.h"
#include "pages/monitor_page.h"
#include "models/precision_table_model.h"
#include "models/project_document.h"
#include "pages/project_page.h"
#include "models/project_settings_model.h"
#include "models/run_list_model.h"
#include "window/run_status_widget.h"
#include "common/run_format.h"
#include "plots/layer_heatmap_plot.h"
#include "plots/loss_scale_plot.h"
#include "plots/memory_plot.h"
#include "plots/exponent_histogram_plot.h"
#include "run_store.h"
#include "controller/snapshot_buffer.h"
#include "controller/training_controller.h"
#include "tiny_project.h"

using namespace mantissa;

namespace {

ProjectConfig tiny_config(int64_t steps) { return tiny_run_config("gui-test", steps, 10); }

// FP8 with statistics every step and an underflow watcher that fires at once, doing `action`.
ProjectConfig underflow_watched(WatchAction action)
{
    ProjectConfig config = tiny_config(100000);
    config.precision.preset = "fp8-hybrid";
    config.telemetry.interval = 1;
    config.telemetry.watchers.fp8_underflow_max = 0.0; // any underflow fires
    config.telemetry.watchers.actions["fp8_underflow"] = action;
    return config;
}

QVector<double> graph_keys(const QCPGraph* graph)
{
    QVector<double> keys;
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it)
        keys.push_back(it->key);
    return keys;
}

QVector<double> graph_values(const QCPGraph* graph)
{
    QVector<double> values;
    for (auto it = graph->data()->constBegin(); it != graph->data()->constEnd(); ++it)
        values.push_back(it->value);
    return values;
}

std::vector<ScalarRow> scalars_tagged(RunStore& store, int64_t run_id, const std::string& tag)
{
    std::vector<ScalarRow> rows;
    for (auto& row : store.scalars(run_id))
        if (row.tag == tag) rows.push_back(row);
    std::sort(rows.begin(), rows.end(), [](const ScalarRow& a, const ScalarRow& b) { return a.step < b.step; });
    return rows;
}

// Counts GUI-thread timer ticks: if training ran on (or blocked) the GUI thread, the timer
// could not fire while it trained.
class TickCounter {
public:
    explicit TickCounter(int interval_ms)
    {
        timer_.setInterval(interval_ms);
        timer_.setTimerType(Qt::PreciseTimer);
        QObject::connect(&timer_, &QTimer::timeout, [this] { ++ticks_; });
    }
    void restart()
    {
        ticks_ = 0;
        clock_.start();
        timer_.start();
    }
    void stop() { timer_.stop(); }
    int ticks() const { return ticks_; }
    qint64 elapsedMs() const { return clock_.elapsed(); }

private:
    QTimer timer_;
    QElapsedTimer clock_;
    int ticks_ = 0;
};

} // namespace

class TestGui : public QObject {
    Q_OBJECT

private slots:
    void snapshotBufferHandsOverAcrossThreads();
    void snapshotBufferRecyclesWithoutStaleData();


    void eventLogModelAppendsAndCaps();

    void lossPlotAppendsBatches();
    void lossPlotSaysWhenTheLossIsNotFinite();

    void controllerReportsConfigErrorFromWorker();
    void controllerReportsUnusableStore();
    void controllerSaysWhenTheFinalCheckpointIsNotKept();
    void windowTrainsTinyRunEndToEnd();
    void stopEndsLongRunPromptly();
    void pauseHoldsTrainingUntilResume();
    void destroyingControllerMidRunStopsAndJoins();

    void precisionChangeDuringRunIsAnEventAndAMarker();
    void watcherSwitchReachesTableAndHeatmap();
    void watcherPauseShowsInTheWindow();
    void runControlsHaveShortcuts();
    void statusWidgetEstimatesTimeLeft();

    void windowOpensDefaultProject();
    void closingKeepsAProjectThatCouldNotBeSaved();
    void precisionEditWhileStartingReachesTheRun();
    void openingAnotherProjectAsksAboutUnsavedEdits();
    void closingDuringARunAsksFirst();
    void windowShowsProjectFileErrors_data();
    void windowShowsProjectFileErrors();
};

void TestGui::snapshotBufferRecyclesWithoutStaleData()
{
    // Recycled objects are overwritten whole: a smaller snapshot after a bigger one must not
    // keep the bigger one's tail (per-layer norms, tensors, histogram bins, names).
    SnapshotBuffer buffer;
    StepMetrics big;
    big.step = 1;
    for (int i = 0; i < 5; ++i) big.layer_grad_norms.emplace_back("blocks.10.mlp.fc" + std::to_string(i), 1.0 + i);
    LayerStatsFrame bigFrame;
    bigFrame.step = 1;
    for (int i = 0; i < 4; ++i) {
        TensorStats t;
        t.layer = "blocks.10.attn.qkv-long-name-" + std::to_string(i);
        t.role = "grad_output";
        t.exponent_counts = {1, 2, 3, 4, 5, 6, 7, 8};
        bigFrame.tensors.push_back(t);
    }
    buffer.on_step(big);
    buffer.on_layer_stats(bigFrame);
    buffer.recycle(buffer.take());

    StepMetrics small;
    small.step = 2;
    small.layer_grad_norms = {{"lm_head", 0.5}};
    LayerStatsFrame smallFrame;
    smallFrame.step = 2;
    TensorStats t;
    t.layer = "lm_head";
    t.role = "weight";
    t.exponent_counts = {9};
    smallFrame.tensors.push_back(t);
    buffer.on_step(small);
    buffer.on_layer_stats(smallFrame);
    const TelemetryBatch batch = buffer.take();
    QCOMPARE(batch.steps.size(), size_t(1));
    QCOMPARE(batch.steps[0].step, int64_t(2));
    QCOMPARE(batch.steps[0].layer_grad_norms, small.layer_grad_norms);
    QCOMPARE(batch.layer_frames.size(), size_t(1));
    QCOMPARE(batch.layer_frames[0].tensors.size(), size_t(1));
    QCOMPARE(batch.layer_frames[0].tensors[0].layer, std::string("lm_head"));
    QCOMPARE(batch.layer_frames[0].tensors[0].role, std::string("weight"));
    QCOMPARE(batch.layer_frames[0].tensors[0].exponent_counts, std::vector<int64_t>{9});
}

void TestGui::snapshotBufferHandsOverAcrossThreads()
{
    SnapshotBuffer buffer;
    constexpr int kSteps = 20000;
    std::thread producer([&] {
        for (int i = 1; i <= kSteps; ++i) {
            StepMetrics m;
            m.step = i;
            m.train_loss = 1.0 / i;
            buffer.on_step(m);
            if (i % 1000 == 0) buffer.on_eval({i, 0.5, 0.4});
            if (i % 5000 == 0) buffer.on_event(text_event(i, "tick", std::to_string(i)));
            if (i % 2500 == 0) {
                LayerStatsFrame frame;
                frame.step = i;
                frame.tensors.resize(3);
                buffer.on_layer_stats(frame);
            }
        }
    });
    std::vector<StepMetrics> steps;
    std::vector<EvalMetrics> evals;
    std::vector<RunEvent> events;
    std::vector<LayerStatsFrame> frames;
    int takes = 0;
    auto drain = [&] {
        TelemetryBatch batch = buffer.take();
        ++takes;
        steps.insert(steps.end(), batch.steps.begin(), batch.steps.end());
        evals.insert(evals.end(), batch.evals.begin(), batch.evals.end());
        events.insert(events.end(), batch.events.begin(), batch.events.end());
        frames.insert(frames.end(), batch.layer_frames.begin(), batch.layer_frames.end());
    };
    while (steps.size() < kSteps)
        drain(); // concurrent takes while the producer runs
    producer.join();
    drain();
    QVERIFY(takes > 1);
    QCOMPARE(steps.size(), size_t(kSteps));
    for (int i = 0; i < kSteps; ++i)
        QCOMPARE(steps[static_cast<size_t>(i)].step, int64_t(i + 1));
    QCOMPARE(evals.size(), size_t(20));
    QCOMPARE(evals.back().step, int64_t(kSteps));
    QCOMPARE(events.size(), size_t(4));
    QCOMPARE(events[1].message(), std::string("10000"));
    QCOMPARE(frames.size(), size_t(8));
    QCOMPARE(frames.back().step, int64_t(kSteps));
    QCOMPARE(frames.back().tensors.size(), size_t(3));
    QVERIFY(buffer.take().empty());
}

void TestGui::eventLogModelAppendsAndCaps()
{
    EventLogModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
    QCOMPARE(model.columnCount(), 3);
    QCOMPARE(model.headerData(EventLogModel::StepColumn, Qt::Horizontal).toString(), QStringLiteral("Step"));
    QCOMPARE(model.headerData(EventLogModel::KindColumn, Qt::Horizontal).toString(), QStringLiteral("Kind"));
    QCOMPARE(model.headerData(EventLogModel::MessageColumn, Qt::Horizontal).toString(), QStringLiteral("Message"));

    QSignalSpy inserted(&model, &QAbstractItemModel::rowsInserted);
    model.appendEvents({text_event(0, "run_started", "1 layers"), text_event(10, "sample", "12+3=15\n4+4=8")});
    model.appendEvents({});
    QCOMPARE(inserted.count(), 1); // one insertion per batch, none for an empty one
    QCOMPARE(model.rowCount(), 2);
    QCOMPARE(model.index(0, EventLogModel::StepColumn).data().toLongLong(), 0LL);
    QCOMPARE(model.index(0, EventLogModel::KindColumn).data().toString(), QStringLiteral("run_started"));
    QCOMPARE(model.index(1, EventLogModel::StepColumn).data().toLongLong(), 10LL);
    // Multi-line samples stay one row high; the tooltip keeps the real text.
    QVERIFY(!model.index(1, EventLogModel::MessageColumn).data().toString().contains(QLatin1Char('\n')));
    QVERIFY(model.index(1, EventLogModel::MessageColumn).data().toString().startsWith(QStringLiteral("12+3=15")));
    QCOMPARE(model.index(1, EventLogModel::MessageColumn).data(Qt::ToolTipRole).toString(),
             QStringLiteral("12+3=15\n4+4=8"));

    model.setMaxRows(4);
    model.appendEvents({text_event(20, "a", ""), text_event(30, "b", ""), text_event(40, "c", "")});
    QCOMPARE(model.rowCount(), 4); // the oldest row went
    QCOMPARE(model.event(0).step, int64_t(10));
    QCOMPARE(model.index(3, EventLogModel::KindColumn).data().toString(), QStringLiteral("c"));
    std::vector<RunEvent> many;
    for (int i = 0; i < 10; ++i)
        many.push_back(text_event(100 + i, "bulk", std::to_string(i)));
    model.appendEvents(many); // a batch larger than the cap keeps its newest rows
    QCOMPARE(model.rowCount(), 4);
    QCOMPARE(model.event(0).step, int64_t(106));
    QCOMPARE(model.event(3).step, int64_t(109));
    model.clear();
    QCOMPARE(model.rowCount(), 0);
}

// A diverged run's curve: one finite loss between NaN gaps draws no line, and the plot was
// empty (read-only audit 'gui-look'). The finite points are dots, the plot says since when the
// loss is NaN, and the x axis spans every step.
void TestGui::lossPlotSaysWhenTheLossIsNotFinite()
{
    const double nan = std::nan("");
    LossPlot plot;
    plot.appendBatch({{1, 2.6}, {2, nan}, {3, nan}}, {});
    QCOMPARE(plot.nonFiniteNote(), QStringLiteral("train loss NaN/Inf since step 2"));
    QCOMPARE(plot.trainGraph()->scatterStyle().shape(), QCPScatterStyle::ssDisc);
    plot.appendBatch({{4, nan}, {40, nan}}, {});
    QCOMPARE(plot.nonFiniteNote(), QStringLiteral("train loss NaN/Inf since step 2"));
    QVERIFY(plot.xAxis->range().contains(40));
    QVERIFY(plot.yAxis->range().contains(2.6));
    plot.appendBatch({{41, 2.5}}, {}); // finite again (a run that recovered)
    QCOMPARE(plot.nonFiniteNote(), QStringLiteral("train loss NaN/Inf at 4 steps, first at step 2"));
    plot.setSmoothing(0.5); // rebuilt whole: the same count
    plot.refresh();
    QCOMPARE(plot.nonFiniteNote(), QStringLiteral("train loss NaN/Inf at 4 steps, first at step 2"));
    plot.clear();
    QCOMPARE(plot.nonFiniteNote(), QString());
}

void TestGui::lossPlotAppendsBatches()
{
    LossPlot plot;
    QCOMPARE(plot.graphCount(), 2);
    // Lines drawn as segments: a long run's curve stroked as one wide polyline took 420 ms a
    // replot (bench/monitor_long_run.cpp).
    QVERIFY(plot.plottingHints().testFlag(QCP::phFastPolylines));
    QCOMPARE(plot.trainGraph()->name(), QStringLiteral("train"));
    QCOMPARE(plot.valGraph()->name(), QStringLiteral("val"));
    plot.appendBatch({{1, 3.0}, {2, 2.5}}, {{0, 3.2, 3.1}});
    plot.appendBatch({{3, 2.0}}, {});
    plot.appendBatch({}, {}); // nothing new: not counted, no replot
    QCOMPARE(plot.batchCount(), 2);
    QCOMPARE(plot.nonFiniteNote(), QString()); // every loss finite: no note, no dots
    QCOMPARE(plot.trainGraph()->scatterStyle().shape(), QCPScatterStyle::ssNone);
    QCOMPARE(graph_keys(plot.trainGraph()), (QVector<double>{1, 2, 3}));
    QCOMPARE(graph_values(plot.trainGraph()), (QVector<double>{3.0, 2.5, 2.0}));
    QCOMPARE(graph_keys(plot.valGraph()), (QVector<double>{0}));
    // Following the data: everything is in view.
    QVERIFY(plot.xAxis->range().contains(0) && plot.xAxis->range().contains(3));
    QVERIFY(plot.yAxis->range().contains(2.0) && plot.yAxis->range().contains(3.2));

    plot.setLogScale(true);
    QCOMPARE(plot.yAxis->scaleType(), QCPAxis::stLogarithmic);
    QVERIFY(plot.yAxis->range().lower > 0);
    QVERIFY(plot.yAxis->range().contains(2.0) && plot.yAxis->range().contains(3.2));

    // Panning by mouse freezes the view; a double-click follows the data again.
    plot.resize(400, 300);
    plot.show();
    QVERIFY(QTest::qWaitForWindowExposed(&plot));
    QVERIFY(plot.following());
    const QPoint centre = plot.axisRect()->rect().center();
    QTest::mouseClick(&plot, Qt::LeftButton, {}, centre);
    QVERIFY(plot.following()); // a click alone is not a pan
    QTest::mousePress(&plot, Qt::LeftButton, {}, centre);
    QTest::mouseMove(&plot, centre + QPoint(40, 10));
    QTest::mouseRelease(&plot, Qt::LeftButton, {}, centre + QPoint(40, 10));
    QVERIFY(!plot.following());
    const QCPRange frozen = plot.xAxis->range();
    plot.appendBatch({{50, 1.5}}, {});
    QVERIFY(plot.xAxis->range() == frozen);
    QTest::mouseDClick(&plot, Qt::LeftButton, {}, centre);
    QVERIFY(plot.following());
    QVERIFY(plot.xAxis->range().contains(50));

    plot.clear();
    QCOMPARE(plot.trainGraph()->dataCount(), 0);
    QCOMPARE(plot.valGraph()->dataCount(), 0);
}

void TestGui::controllerReportsConfigErrorFromWorker()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    TrainingController controller(dir.filePath(QStringLiteral("runs.sqlite")));
    QSignalSpy started(&controller, &TrainingController::started);
    QSignalSpy failed(&controller, &TrainingController::failed);
    QSignalSpy finished(&controller, &TrainingController::finished);

    ProjectConfig config = tiny_config(30);
    config.data.kind = DataKind::Text;
    config.data.path = dir.filePath(QStringLiteral("missing.txt")).toStdString();
    QVERIFY(controller.start(config, {}));
    QVERIFY(controller.isRunning());
    QVERIFY(!controller.start(config, {})); // one job at a time
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 30000);

    QCOMPARE(failed.count(), 1);
    const QString message = failed.at(0).at(0).toString();
    QVERIFY2(message.contains(QStringLiteral("data.path")), qPrintable(message));
    QVERIFY2(message.contains(QStringLiteral("does not exist")), qPrintable(message));
    QVERIFY(finished.at(0).at(0).value<RunStatus>() == RunStatus::Failed);
    QCOMPARE(started.count(), 0); // the model never existed, so no run was recorded
    QCOMPARE(controller.runId(), -1);
    QVERIFY(!controller.isRunning());
    QCOMPARE(controller.lastError(), message);
}

// A run that trained but whose final checkpoint could not be written cannot be resumed from
// its end: the window says so (mantissa-train exits 3), though the run finished.
void TestGui::controllerSaysWhenTheFinalCheckpointIsNotKept()
{
    QTemporaryDir dir;
    TrainingController controller(dir.filePath(QStringLiteral("runs.sqlite")));
    QSignalSpy failed(&controller, &TrainingController::failed);
    QSignalSpy finished(&controller, &TrainingController::finished);
    ProjectConfig config = tiny_config(6);
    config.training.checkpoint_dir = dir.filePath(QStringLiteral("checkpoints")).toStdString();
    QVERIFY(QDir().mkpath(QString::fromStdString(config.training.checkpoint_dir + "/" + checkpoint_file_name(6))));
    QVERIFY(controller.start(config, {}));
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 60000);
    QVERIFY(finished.at(0).at(0).value<RunStatus>() == RunStatus::Finished);
    QCOMPARE(failed.count(), 0);
    QVERIFY2(controller.lastError().startsWith(QStringLiteral("the final checkpoint could not be written (")) &&
                 controller.lastError().endsWith(QStringLiteral("a folder is in its place; not overwritten); this "
                                                                "run saved no checkpoint")),
             qPrintable(controller.lastError()));
}

void TestGui::controllerReportsUnusableStore()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString storePath = dir.filePath(QStringLiteral("notes.txt"));
    QFile file(storePath);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write(QByteArray("not a database, just some text that is long enough to have a header\n").repeated(20));
    file.close();

    TrainingController controller(storePath);
    QSignalSpy failed(&controller, &TrainingController::failed);
    QSignalSpy finished(&controller, &TrainingController::finished);
    QVERIFY(controller.start(tiny_config(30), {}));
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 1, 30000);
    QVERIFY(finished.at(0).at(0).value<RunStatus>() == RunStatus::Failed);
    QCOMPARE(failed.count(), 1);
    const QString message = failed.at(0).at(0).toString();
    QVERIFY2(message.contains(storePath), qPrintable(message));
    QCOMPARE(controller.runId(), -1);
    // The foreign file was left as it was.
    QVERIFY(file.open(QIODevice::ReadOnly));
    QVERIFY(file.readAll().startsWith("not a database"));
}

void TestGui::windowTrainsTinyRunEndToEnd()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString storePath = dir.filePath(QStringLiteral("runs.sqlite"));
    MainWindow window(storePath);
    window.setProject(tiny_config(30), QStringLiteral("in-memory"));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));

    TrainingController* controller = window.controller();
    QSignalSpy started(controller, &TrainingController::started);
    QSignalSpy drained(controller, &TrainingController::drained);
    QSignalSpy finished(controller, &TrainingController::finished);
    int plottableBatches = 0; // drains that carried steps or evaluations, not only events
    size_t layerFrames = 0, layerTensors = 0; // per-layer statistics reach the GUI thread too
    connect(controller, &TrainingController::drained, &window, [&](const TelemetryBatch& batch) {
        if (!batch.steps.empty() || !batch.evals.empty()) ++plottableBatches;
        layerFrames += batch.layer_frames.size();
        for (const auto& frame : batch.layer_frames) layerTensors += frame.tensors.size();
    });
    TickCounter ticker(2);
    ticker.restart();
    QVERIFY(window.startTraining());
    QTRY_VERIFY_WITH_TIMEOUT(!controller->isRunning(), 60000);
    ticker.stop();

    QCOMPARE(finished.count(), 1);
    QVERIFY(finished.at(0).at(0).value<RunStatus>() == RunStatus::Finished);
    QCOMPARE(started.count(), 1);
    // Default cadence (every 50 steps, and step 1): one frame for a 30-step run, 5 roles for
    // each of the tiny model's 5 linear layers (1 block x 4 + lm_head).
    QCOMPARE(layerFrames, size_t(1));
    QCOMPARE(layerTensors, size_t(5 * 5));
    const qint64 runId = started.at(0).at(0).toLongLong();
    QCOMPARE(controller->runId(), runId);
    QCOMPARE(controller->lastSummary().steps_done, int64_t(30));
    QVERIFY(window.lastError().isEmpty());

    // The plot: one point per step, one per evaluation (before training and every 10 steps).
    const LossPlot* plot = window.lossPlot();
    QCOMPARE(plot->trainGraph()->dataCount(), 30);
    QCOMPARE(plot->valGraph()->dataCount(), 4);
    QVector<double> expectedKeys;
    for (int step = 1; step <= 30; ++step)
        expectedKeys.push_back(step);
    QCOMPARE(graph_keys(plot->trainGraph()), expectedKeys);
    QCOMPARE(graph_keys(plot->valGraph()), (QVector<double>{0, 10, 20, 30}));
    for (double loss : graph_values(plot->trainGraph()))
        QVERIFY(std::isfinite(loss) && loss > 0.0);
    // At most one frame per drain (plus the reset at the start, the page being shown and the
    // final one), never one per step.
    const MonitorPage* monitor = window.monitorPage();
    QVERIFY(plottableBatches >= 1);
    QVERIFY2(monitor->framesRendered() >= 1 && monitor->framesRendered() <= drained.count() + 3,
             qPrintable(QStringLiteral("%1 frames for %2 drains").arg(monitor->framesRendered()).arg(drained.count())));
    QVERIFY(drained.count() >= plottableBatches);
    // Every plot got the run: loss scale per step, one telemetry frame (step 1) in the
    // heatmap, the histogram and the memory plot; the heatmap has one row per GEMM layer.
    QCOMPARE(monitor->lossScalePlot()->scaleGraph()->dataCount(), 30);
    // Rows: the GEMM layers in forward order (known at start), then the other parameter
    // owners the gradient norms name (embeddings, LayerNorms).
    const auto& rows = monitor->history().layers();
    QCOMPARE(std::vector<std::string>(rows.begin(), rows.begin() + 6), gemm_layer_names(1));
    // The heatmap draws the rows that hold its statistic (underflow of grad_output): the GEMM
    // layers but attention's sdpa, not wte, wpe and the layer norms, which the history lists too.
    QCOMPARE(rows.size(), size_t(11));
    QStringList drawn;
    for (int r = 0; r < monitor->heatmap()->rowCount(); ++r) drawn << monitor->heatmap()->rowLabel(r);
    QCOMPARE(drawn, (QStringList{"blocks.0.attn.qkv", "blocks.0.attn.proj", "blocks.0.mlp.fc1", "blocks.0.mlp.fc2",
                                 "lm_head"}));
    QVERIFY(monitor->heatmap()->columnCount() >= 1);
    QCOMPARE(monitor->memoryPlot()->residentGraph()->dataCount(), 1);
    QVERIFY(monitor->memoryPlot()->residentGraph()->data()->constBegin()->value > 1.0); // MiB
    QCOMPARE(monitor->histogramPlot()->shownStep(), int64_t(1));
    QVERIFY(monitor->histogramPlot()->bars()->data()->size() > 0);

    // The GUI thread kept serving its event loop while the worker trained (training on the GUI
    // thread would leave zero ticks). Deliberately loose: this is not a timing test.
    QVERIFY2(ticker.ticks() >= 1,
             qPrintable(QStringLiteral("%1 ticks in %2 ms").arg(ticker.ticks()).arg(ticker.elapsedMs())));

    // Events in order, and the status bar shows the last step.
    const EventLogModel* events = window.eventLogModel();
    QVERIFY(events->rowCount() >= 2);
    QCOMPARE(events->event(0).tag(), std::string("run_started"));
    QCOMPARE(events->event(events->rowCount() - 1).tag(), std::string("run_finished"));
    QCOMPARE(window.lastStep(), 30);
    const auto* progress = window.statusWidget()->findChild<QProgressBar*>(QStringLiteral("runProgress"));
    QVERIFY(progress);
    QCOMPARE(progress->value(), 30);
    QCOMPARE(progress->text(), QStringLiteral("step 30 / 30"));
    QCOMPARE(window.statusWidget()->etaText(), QStringLiteral("done"));

    // The store saw the same run: finished, 30 training losses equal to what was plotted.
    RunStore store(storePath.toStdString());
    const auto run = store.find_run(std::to_string(runId));
    QVERIFY(run.has_value());
    QCOMPARE(status_text(run->status), std::string("finished"));
    QCOMPARE(run->name, std::string("gui-test"));
    const auto losses = scalars_tagged(store, runId, "train/loss");
    QCOMPARE(losses.size(), size_t(30));
    const QVector<double> plotted = graph_values(plot->trainGraph());
    for (size_t i = 0; i < losses.size(); ++i) {
        QCOMPARE(losses[i].step, int64_t(i + 1));
        QCOMPARE(losses[i].value, plotted[static_cast<qsizetype>(i)]);
    }
    QCOMPARE(scalars_tagged(store, runId, "val/loss").size(), size_t(4));

    // The window can run again with a fresh plot.
    QVERIFY(window.startTraining());
    QTRY_VERIFY_WITH_TIMEOUT(!controller->isRunning(), 60000);
    QCOMPARE(plot->trainGraph()->dataCount(), 30);
    QVERIFY(controller->lastStatus() == RunStatus::Finished);
    QVERIFY(controller->runId() > runId);
}

void TestGui::stopEndsLongRunPromptly()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString storePath = dir.filePath(QStringLiteral("runs.sqlite"));
    MainWindow window(storePath);
    window.setProject(tiny_config(100000));
    window.show();
    TrainingController* controller = window.controller();
    QSignalSpy drained(controller, &TrainingController::drained);

    QVERIFY(window.startTraining());
    QTRY_VERIFY_WITH_TIMEOUT(window.lossPlot()->trainGraph()->dataCount() >= 3, 60000);

    // Half a second of training: the GUI thread stays live and drains at its own pace.
    TickCounter ticker(5);
    const int drainsBefore = static_cast<int>(drained.count());
    const int pointsBefore = window.lossPlot()->trainGraph()->dataCount();
    ticker.restart();
    QTest::qWait(500);
    ticker.stop();
    const int drains = static_cast<int>(drained.count()) - drainsBefore;
    QVERIFY2(ticker.ticks() >= 5, // of ~100 possible: loose on purpose, a loaded CI machine must pass
             qPrintable(QStringLiteral("%1 ticks in %2 ms").arg(ticker.ticks()).arg(ticker.elapsedMs())));
    QVERIFY2(drains <= ticker.elapsedMs() / TrainingController::kDrainIntervalMs + 3,
             qPrintable(QStringLiteral("%1 drains in %2 ms").arg(drains).arg(ticker.elapsedMs())));
    QVERIFY(window.lossPlot()->trainGraph()->dataCount() > pointsBefore);

    window.stopTraining();
    QTRY_VERIFY_WITH_TIMEOUT(!controller->isRunning(), 30000); // applied at the next step boundary
    QVERIFY(controller->lastStatus() == RunStatus::Stopped);
    QVERIFY(controller->lastSummary().stopped_early);
    const int64_t steps = controller->lastSummary().steps_done;
    QVERIFY(steps >= 3 && steps < 100000);
    QCOMPARE(int64_t(window.lossPlot()->trainGraph()->dataCount()), steps);
    QCOMPARE(window.eventLogModel()->event(window.eventLogModel()->rowCount() - 1).tag(), std::string("run_stopped"));

    RunStore store(storePath.toStdString());
    const auto run = store.find_run(std::to_string(controller->runId()));
    QVERIFY(run.has_value());
    QCOMPARE(status_text(run->status), std::string("stopped"));
    QCOMPARE(scalars_tagged(store, controller->runId(), "train/loss").size(), static_cast<size_t>(steps));
}

void TestGui::pauseHoldsTrainingUntilResume()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    TrainingController controller(dir.filePath(QStringLiteral("runs.sqlite")));
    LossPlot plot;
    EventLogModel events;
    connect(&controller, &TrainingController::drained, &plot, [&](const TelemetryBatch& batch) {
        plot.appendBatch(batch.steps, batch.evals);
        events.appendEvents(batch.events);
    });
    auto sawEvent = [&](const char* kind) {
        for (int row = 0; row < events.rowCount(); ++row)
            if (events.event(row).tag() == kind) return true;
        return false;
    };
    QSignalSpy pausedChanged(&controller, &TrainingController::pausedChanged);

    QVERIFY(controller.start(tiny_config(100000), {}));
    QTRY_VERIFY_WITH_TIMEOUT(plot.trainGraph()->dataCount() >= 3, 60000);
    controller.pause();
    QVERIFY(controller.isPaused());
    QCOMPARE(pausedChanged.count(), 1);
    QTRY_VERIFY_WITH_TIMEOUT(sawEvent("paused"), 30000);
    QTest::qWait(3 * TrainingController::kDrainIntervalMs); // let the last pre-pause step drain
    const int held = plot.trainGraph()->dataCount();
    QTest::qWait(300);
    QCOMPARE(plot.trainGraph()->dataCount(), held);
    QVERIFY(controller.isRunning());

    controller.resume();
    QVERIFY(!controller.isPaused());
    QTRY_VERIFY_WITH_TIMEOUT(plot.trainGraph()->dataCount() > held + 2, 10000);
    QVERIFY(sawEvent("resumed"));

    // Stop while paused must not hang the worker either.
    controller.pause();
    QTRY_VERIFY_WITH_TIMEOUT(events.event(events.rowCount() - 1).tag() == "paused", 30000);
    controller.stop();
    QTRY_VERIFY_WITH_TIMEOUT(!controller.isRunning(), 30000);
    QVERIFY(controller.lastStatus() == RunStatus::Stopped);
    QVERIFY(!controller.isPaused());
}

// A precision edit made right after Start, while the worker still builds the trainer (seconds
// on a large corpus), is handed on once the trainer exists: the table shows it as sent.
void TestGui::precisionEditWhileStartingReachesTheRun()
{
    QTemporaryDir dir;
    const QString storePath = dir.filePath(QStringLiteral("runs.sqlite"));
    // A corpus of some megabytes: the worker reads and tokenizes it before the trainer exists,
    // so the edit below surely comes while the run starts.
    ProjectConfig config = tiny_config(6);
    config.data.kind = DataKind::Text;
    config.data.path = dir.filePath(QStringLiteral("corpus.txt")).toStdString();
    {
        QFile corpus(QString::fromStdString(config.data.path));
        QVERIFY(corpus.open(QIODevice::WriteOnly));
        const QByteArray line("the quick brown fox jumps over the lazy dog 0123456789\n");
        for (int i = 0; i < 200000; ++i) corpus.write(line);
    }
    TrainingController controller(storePath);
    QVERIFY(controller.start(config, {}));
    QString error;
    const GemmFormats bf16{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16};
    QVERIFY2(controller.setLayerFormats(QStringLiteral("lm_head"), bf16, {}, &error), qPrintable(error));
    QTRY_VERIFY_WITH_TIMEOUT(!controller.isRunning(), 60000);
    QVERIFY2(controller.lastStatus() == RunStatus::Finished, qPrintable(controller.lastError()));
    QVERIFY2(!controller.setLayerFormats(QStringLiteral("lm_head"), bf16, {}, &error), "the run is over");
    RunStore store(storePath.toStdString());
    std::vector<RunEvent> changes;
    for (const EventRow& row : store.events(controller.runId()))
        if (row.event.kind == EventKind::PrecisionChanged) changes.push_back(row.event);
    QCOMPARE(changes.size(), size_t(1));
    QCOMPARE(changes[0].layers, std::vector<std::string>{"lm_head"});
    QVERIFY(changes[0].new_formats == bf16);
    QVERIFY(changes[0].step <= 1); // at the first step boundary
}

void TestGui::destroyingControllerMidRunStopsAndJoins()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString storePath = dir.filePath(QStringLiteral("runs.sqlite"));
    auto controller = std::make_unique<TrainingController>(storePath);
    QSignalSpy drained(controller.get(), &TrainingController::drained);
    QVERIFY(controller->start(tiny_config(100000), {}));
    QTRY_VERIFY_WITH_TIMEOUT(drained.count() >= 2, 60000);
    const qint64 runId = controller->runId();
    QVERIFY(runId >= 0);

    QElapsedTimer clock;
    clock.start();
    controller.reset(); // must stop the trainer and join, not hang or crash
    QVERIFY2(clock.elapsed() < 10000, qPrintable(QStringLiteral("%1 ms").arg(clock.elapsed())));
    QTest::qWait(50); // a late queued QThread::finished must not reach the dead controller

    RunStore store(storePath.toStdString());
    const auto run = store.find_run(std::to_string(runId));
    QVERIFY(run.has_value());
    QCOMPARE(status_text(run->status), std::string("stopped"));
}

void TestGui::windowOpensDefaultProject()
{
    MainWindow window(QStringLiteral("unused.sqlite"));
    QVERIFY(!window.hasProject());
    const QString path = QStringLiteral(MANTISSA_SOURCE_DIR "/projects/default.json");
    QVERIFY2(window.openProject(path), qPrintable(window.lastError()));
    QVERIFY(window.hasProject());
    QVERIFY(window.lastError().isEmpty());
    QVERIFY(window.windowTitle().contains(QStringLiteral("addition-default")));
    // The window fits a 1366 x 768 laptop screen, less a panel and the title bar: the
    // Monitor's stacked plots made it at least 785 px high (read-only audit 'gui-look').
    const QSize smallest = window.minimumSizeHint();
    QVERIFY2(smallest.height() <= 700 && smallest.width() <= 1280,
             qPrintable(QStringLiteral("%1 x %2").arg(smallest.width()).arg(smallest.height())));
    const ProjectSettingsModel* tree = window.projectPage()->settingsModel();
    QCOMPARE(tree->valueForKey(QStringLiteral("name")), QStringLiteral("addition-default"));
    QCOMPARE(tree->valueForKey(QStringLiteral("data.kind")), QStringLiteral("synthetic-addition"));
    // Overrides are applied like the CLI's --set.
    QVERIFY(!window.document()->isDirty());
    QVERIFY(window.openProject(path, {{"model.n_layer", "3"}}));
    QCOMPARE(tree->valueForKey(QStringLiteral("model.n_layer")), QStringLiteral("3"));
    // The window holds something the file does not say: unsaved, and the title shows it.
    QVERIFY(window.document()->isDirty());
    QVERIFY2(window.windowTitle().startsWith(QStringLiteral("addition-default *")), qPrintable(window.windowTitle()));
}

// Close, "Save" the unsaved changes, and the save fails (its folder is gone): the window stays
// open with the edits, after saying why; closed, they would be lost.
void TestGui::closingKeepsAProjectThatCouldNotBeSaved()
{
    auto dir = std::make_unique<QTemporaryDir>();
    const QString path = dir->filePath(QStringLiteral("p.json"));
    QVERIFY(QFile::copy(QStringLiteral(MANTISSA_SOURCE_DIR "/projects/default.json"), path));
    MainWindow window(dir->filePath(QStringLiteral("runs.sqlite")));
    QVERIFY2(window.openProject(path), qPrintable(window.lastError()));
    QString error;
    QVERIFY2(window.document()->setValue(QStringLiteral("name"), QStringLiteral("edited"), &error), qPrintable(error));
    QVERIFY(window.document()->isDirty());
    window.show();
    dir.reset(); // the project's folder goes
    QStringList seen; // the message boxes, answered: Save to the question, OK to the warning
    QTimer answer;
    QObject::connect(&answer, &QTimer::timeout, [&] {
        auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
        if (!box) return;
        seen << box->windowTitle();
        QAbstractButton* save = box->button(QMessageBox::Save);
        (save ? save : box->button(QMessageBox::Ok))->click();
    });
    answer.start(20);
    QVERIFY(!window.close());
    answer.stop();
    QCOMPARE(seen, QStringList({QStringLiteral("Unsaved project"), QStringLiteral("Cannot save project")}));
    QVERIFY(window.isVisible());
    QVERIFY(window.document()->isDirty());
    QCOMPARE(window.projectPage()->settingsModel()->valueForKey(QStringLiteral("name")), QStringLiteral("edited"));
    window.hide();
}

// A project dropped on the window (as File > Open and Open Recent) replaces the open one: its
// unsaved edits are asked about first, and Cancel keeps them and the project.
void TestGui::openingAnotherProjectAsksAboutUnsavedEdits()
{
    QTemporaryDir dir;
    const QString first = dir.filePath(QStringLiteral("first.json")), second = dir.filePath(QStringLiteral("second.json"));
    for (const QString& path : {first, second})
        QVERIFY(QFile::copy(QStringLiteral(MANTISSA_SOURCE_DIR "/projects/default.json"), path));
    MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
    QVERIFY2(window.openProject(second), qPrintable(window.lastError())); // in Open Recent from now on
    QVERIFY2(window.openProject(first), qPrintable(window.lastError()));
    QString error;
    QVERIFY2(window.document()->setValue(QStringLiteral("name"), QStringLiteral("edited"), &error), qPrintable(error));
    window.show();
    QStringList seen;
    QMessageBox::StandardButton click = QMessageBox::Cancel;
    QTimer answer;
    QObject::connect(&answer, &QTimer::timeout, [&] {
        auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
        if (!box) return;
        seen << box->windowTitle();
        box->button(click)->click();
    });
    answer.start(20);
    const auto drop = [&](const QString& path) {
        QMimeData mime;
        mime.setUrls({QUrl::fromLocalFile(path)});
        QDropEvent event(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
        // Straight to the window's handler: QApplication delivers a drop only inside a drag.
        static_cast<QObject&>(window).event(&event);
    };
    drop(second);
    QCOMPARE(seen, QStringList{QStringLiteral("Unsaved project")});
    QCOMPARE(window.document()->path(), first);
    QVERIFY(window.document()->isDirty());
    QCOMPARE(window.projectPage()->settingsModel()->valueForKey(QStringLiteral("name")), QStringLiteral("edited"));
    // File > Open Recent asks the same.
    auto* recent = window.findChild<QMenu*>(QStringLiteral("recentMenu"));
    QVERIFY(recent);
    emit recent->aboutToShow();
    QAction* recentSecond = nullptr;
    for (QAction* a : recent->actions())
        if (a->text() == QDir::toNativeSeparators(second)) recentSecond = a;
    QVERIFY(recentSecond);
    recentSecond->trigger();
    QCOMPARE(seen, (QStringList{QStringLiteral("Unsaved project"), QStringLiteral("Unsaved project")}));
    QCOMPARE(window.document()->path(), first);
    QVERIFY(window.document()->isDirty());

    click = QMessageBox::Discard;
    drop(second);
    answer.stop();
    QCOMPARE(seen.size(), 3);
    QCOMPARE(window.document()->path(), second);
    QVERIFY(!window.document()->isDirty());
    QCOMPARE(window.projectPage()->settingsModel()->valueForKey(QStringLiteral("name")), QStringLiteral("addition-default"));
    window.hide();
}

void TestGui::closingDuringARunAsksFirst()
{
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("runs.sqlite"));
    MainWindow window(db);
    window.setProject(tiny_config(100000), QStringLiteral("in-memory"));
    window.show();
    QVERIFY(window.startTraining());
    // A step done: the run is recorded, and the stop below has a step to checkpoint.
    QTRY_VERIFY_WITH_TIMEOUT(window.lastStep() >= 1, 60000);
    QStringList seen;
    QString text, click = QStringLiteral("Cancel");
    QTimer answer;
    QObject::connect(&answer, &QTimer::timeout, [&] {
        auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
        if (!box) return;
        seen << box->windowTitle();
        text = box->text();
        for (QAbstractButton* b : box->buttons())
            if (b->text().remove(QLatin1Char('&')) == click) b->click();
    });
    answer.start(20);
    QVERIFY(!window.close()); // Cancel: the run goes on
    QCOMPARE(seen, QStringList{QStringLiteral("Run in progress")});
    QCOMPARE(text, QStringLiteral("A run is in progress. Quitting stops it: it is recorded as stopped, with a checkpoint "
                                  "of its last step to resume from."));
    QVERIFY(window.isVisible());
    QVERIFY(window.controller()->isRunning());

    // A live precision change is an unsaved edit: the same question asks about it too.
    QString error;
    QVERIFY2(window.document()->setValue(QStringLiteral("name"), QStringLiteral("edited"), &error), qPrintable(error));
    seen.clear();
    QVERIFY(!window.close());
    QCOMPARE(seen, QStringList{QStringLiteral("Run in progress")});
    QVERIFY2(text.endsWith(QStringLiteral("\n\nThe project has unsaved changes. Save them?")), qPrintable(text));
    QVERIFY(window.controller()->isRunning());

    click = QStringLiteral("Discard");
    QVERIFY(window.close());
    answer.stop();
    QTRY_VERIFY_WITH_TIMEOUT(!window.controller()->isRunning(), 30000);
    RunStore store(db.toStdString());
    const auto runs = store.list_runs();
    QCOMPARE(runs.size(), size_t(1));
    QCOMPARE(status_text(runs[0].status), std::string("stopped"));
    QVERIFY(!store.checkpoints(runs[0].id).empty()); // resumable
}

void TestGui::windowShowsProjectFileErrors_data()
{
    QTest::addColumn<QByteArray>("content");
    QTest::addColumn<QString>("expected");
    QTest::newRow("malformed JSON") << QByteArray(R"({"model": {"n_layer": 2,)") << "not valid JSON";
    QTest::newRow("unknown key") << QByteArray(R"({"model": {"n_layers": 2}})") << "model.n_layers";
    QTest::newRow("wrong type") << QByteArray(R"({"training": {"steps": "many"}})") << "training.steps";
    QTest::newRow("invalid value") << QByteArray(R"({"model": {"n_embd": 30, "n_head": 4}})") << "model.n_embd";
    // A key of half a megabyte: named by its start and length (a message that held it all made
    // the window grow to gigabytes, or crash: a read-only audit).
    QTest::newRow("a long key") << "{\"model\": {\"" + QByteArray(1 << 19, 'k') + "\": 1}}"
                               << "model." + QString(54, QLatin1Char('k')) + "... (524294 bytes): unknown key";
}

void TestGui::windowShowsProjectFileErrors()
{
    QFETCH(QByteArray, content);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("bad.json"));
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write(content);
    file.close();

    MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
    window.setProject(tiny_config(10), QStringLiteral("previous"));
    window.show();
    QVERIFY(!window.openProject(path)); // no modal dialog on this path: the test would hang
    QVERIFY2(window.lastError().contains(expected), qPrintable(window.lastError()));
    QVERIFY(window.statusBar()->currentMessage().contains(expected));
    const auto* label = window.findChild<QLabel*>(QStringLiteral("errorLabel"));
    QVERIFY(label);
    QVERIFY(label->isVisible());
    QVERIFY(label->text().contains(expected));
    QVERIFY2(window.width() < 4000 && label->text().size() < 1000, qPrintable(QString::number(window.width())));
    // The previous project is still loaded and usable.
    QCOMPARE(window.projectPath(), QStringLiteral("previous"));
    QCOMPARE(window.projectPage()->settingsModel()->valueForKey(QStringLiteral("name")), QStringLiteral("gui-test"));

    QVERIFY(!window.openProject(dir.filePath(QStringLiteral("missing.json"))));
    QVERIFY(window.lastError().contains(QStringLiteral("cannot be opened")));
}

// A watcher's automatic switch to BF16 is not the user's edit: the project keeps its FP8,
// but the table shows what the engine runs, says who switched it, and the heatmap row too.
void TestGui::watcherSwitchReachesTableAndHeatmap()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
    window.setProject(underflow_watched(WatchAction::SwitchToBf16), QStringLiteral("in-memory"));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    PrecisionTableModel* table = window.projectPage()->precisionModel();
    QAbstractItemModelTester tester(table, QAbstractItemModelTester::FailureReportingMode::Fatal);
    QCOMPARE(table->index(0, PrecisionTableModel::RunningColumn).data().toString(), QString()); // no run yet
    QVERIFY(window.startTraining());

    // Wait for the engine's first switch, then stop and compare what the table showed while
    // the run was live with the engine's own event.
    EventLogModel* events = window.eventLogModel();
    RunEvent change;
    QTRY_VERIFY_WITH_TIMEOUT(
        [&] {
            for (int r = 0; r < events->rowCount(); ++r)
                if (events->event(r).kind == EventKind::PrecisionChanged) {
                    change = events->event(r);
                    return true;
                }
            return false;
        }(),
        60000);
    QCOMPARE(int(change.cause), int(ChangeCause::Watcher));
    QCOMPARE(change.layers.size(), size_t(1));
    const QString layer = QString::fromStdString(change.layers[0]);
    const int row = table->rowForLayer(layer);
    QVERIFY(row >= 0);
    const QModelIndex forward = table->index(row, PrecisionTableModel::ForwardColumn);
    QCOMPARE(forward.data(Qt::DisplayRole).toString(), QStringLiteral("bf16"));   // what runs
    QVERIFY(forward.data(Qt::EditRole).toString().startsWith(QLatin1Char('e')));  // the project's FP8
    QVERIFY(forward.data(Qt::FontRole).value<QFont>().italic());
    QVERIFY(forward.data(Qt::ToolTipRole).toString().contains(QStringLiteral("watcher fp8_underflow")));
    const QModelIndex runningIndex = table->index(row, PrecisionTableModel::RunningColumn);
    QVERIFY2(runningIndex.data().toString().contains(QStringLiteral("step %1: watcher fp8_underflow").arg(change.step)),
             qPrintable(runningIndex.data().toString()));
    // The backend of the new formats is known once a step ran them ("pending" until then).
    QTRY_VERIFY_WITH_TIMEOUT(runningIndex.data().toString().startsWith(QStringLiteral("emulated")), 30000);
    QCOMPARE(table->formatsAt(row).forward, NumberFormat::E4M3); // the project is unchanged

    MonitorPage* monitor = window.monitorPage();
    monitor->renderNow();
    const LayerHeatmapPlot* heatmap = monitor->heatmap();
    int heatRow = -1;
    for (int r = 0; r < heatmap->rowCount(); ++r)
        if (heatmap->rowLabel(r).startsWith(layer + QLatin1Char(' '))) heatRow = r;
    QVERIFY(heatRow >= 0);
    QCOMPARE(heatmap->rowLabel(heatRow), layer + QStringLiteral(" \u2192 bf16/bf16/bf16"));
    QVERIFY(heatmap->liveStateText(layer).contains(QStringLiteral("watcher fp8_underflow")));

    window.stopTraining();
    QTRY_VERIFY_WITH_TIMEOUT(!window.controller()->isRunning(), 30000);
    // After the run the table shows the project again.
    QCOMPARE(forward.data(Qt::DisplayRole).toString(), forward.data(Qt::EditRole).toString());
    QCOMPARE(table->index(row, PrecisionTableModel::RunningColumn).data().toString(), QString());
}

// A watcher that pauses the run: the window says paused, and one press of Resume resumes.
void TestGui::watcherPauseShowsInTheWindow()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
    window.setProject(underflow_watched(WatchAction::Pause), QStringLiteral("in-memory"));
    TrainingController* controller = window.controller();
    EventLogModel* events = window.eventLogModel();
    auto count = [&](const char* kind) {
        int n = 0;
        for (int r = 0; r < events->rowCount(); ++r) n += events->event(r).tag() == kind ? 1 : 0;
        return n;
    };
    QVERIFY(window.startTraining());
    QTRY_VERIFY_WITH_TIMEOUT(count("paused") == 1, 60000);
    QVERIFY(controller->isPaused());
    QCOMPARE(window.statusWidget()->etaText(), QStringLiteral("paused"));
    window.togglePause();
    QVERIFY(!controller->isPaused());
    QTRY_VERIFY_WITH_TIMEOUT(count("resumed") == 1, 10000);
    QVERIFY(!controller->isPaused() || count("paused") == 2); // the watcher may fire again
    window.stopTraining();
    QTRY_VERIFY_WITH_TIMEOUT(!controller->isRunning(), 30000);
}

void TestGui::precisionChangeDuringRunIsAnEventAndAMarker()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
    ProjectConfig config = tiny_config(100000);
    config.model.n_layer = 2;
    window.setProject(config, QStringLiteral("in-memory"));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    TrainingController* controller = window.controller();
    QVERIFY(window.startTraining());
    QCOMPARE(window.currentPage(), MainWindow::Page::Monitor);
    QTRY_VERIFY_WITH_TIMEOUT(window.lastStep() >= 3, 60000);

    // The user edits the forward format of one layer in the precision table mid-run.
    PrecisionTableModel* table = window.projectPage()->precisionModel();
    const QString layer = QStringLiteral("blocks.1.mlp.fc1");
    const int row = table->rowForLayer(layer);
    QVERIFY(row >= 0);
    QVERIFY(table->setData(table->index(row, PrecisionTableModel::ForwardColumn), QStringLiteral("bf16"), Qt::EditRole));
    QCOMPARE(table->formatsAt(row).forward, NumberFormat::BF16);

    // The engine applies it at a step boundary and says so in the event list.
    EventLogModel* events = window.eventLogModel();
    int eventRow = -1;
    QTRY_VERIFY_WITH_TIMEOUT(
        [&] {
            for (int r = 0; r < events->rowCount(); ++r)
                if (events->event(r).tag() == "precision_changed") eventRow = r;
            return eventRow >= 0;
        }(),
        10000);
    const RunEvent change = events->event(eventRow);
    QVERIFY2(change.message().find("blocks.1.mlp.fc1 -> bf16/fp32/fp32") != std::string::npos, change.message().c_str());
    QVERIFY(change.step >= 3);

    // It is marked on the plots at its step.
    MonitorPage* monitor = window.monitorPage();
    monitor->renderNow();
    const auto& markers = monitor->lossPlot()->eventMarkers();
    QVERIFY(std::any_of(markers.begin(), markers.end(), [&](const TimeSeriesPlot::EventMarker& m) {
        return m.kind == QStringLiteral("precision_changed") && m.step == change.step;
    }));

    // Clicking the event moves every cursor to its step and selects its layer everywhere.
    QTableView* view = monitor->eventView();
    const QModelIndex cell = events->index(eventRow, EventLogModel::MessageColumn);
    view->scrollTo(cell);
    QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, view->visualRect(cell).center());
    QCOMPARE(monitor->cursorStep(), change.step);
    QCOMPARE(monitor->lossPlot()->cursorStep(), change.step);
    QCOMPARE(monitor->lossScalePlot()->cursorStep(), change.step);
    QCOMPARE(monitor->selectedLayer(), layer);
    QCOMPARE(monitor->heatmap()->selectedLayer(), layer);
    QCOMPARE(window.projectPage()->precisionView()->currentIndex().row(), row);

    // The heatmap row's menu switches another layer to NVFP4: the run changes, the project
    // does not, and the precision table shows the run's recipe beside the project's.
    const QString other = QStringLiteral("blocks.0.mlp.fc2");
    const auto pick = [&](const QString& choice) { // the menu's entry whose text starts so
        for (QAction* a : monitor->layerMenu(other)->actions())
            if (a->text().startsWith(choice)) return a->trigger();
    };
    const auto logged = [&](const std::string& text) {
        for (int r = 0; r < events->rowCount(); ++r)
            if (events->event(r).message().find(text) != std::string::npos) return true;
        return false;
    };
    pick(QStringLiteral("NVFP4"));
    QTRY_VERIFY_WITH_TIMEOUT(logged("blocks.0.mlp.fc2 -> e2m1/e2m1/e2m1 with nvfp4 scaling"), 10000);
    const ProjectConfig& project = window.document()->config();
    QCOMPARE(resolve_layer_recipe(project.precision, other.toStdString()).scaling, Fp8Scaling::Delayed);
    QVERIFY(resolve_layer_formats(project.precision, other.toStdString(), 2) == GemmFormats::all(NumberFormat::FP32));
    const QModelIndex scaling = table->index(table->rowForLayer(other), PrecisionTableModel::ScalingColumn);
    QTRY_COMPARE_WITH_TIMEOUT(scaling.data().toString(), QStringLiteral("nvfp4"), 10000);
    QCOMPARE(scaling.data(Qt::EditRole).toString(), QStringLiteral("delayed"));
    // Back to BF16 from the menu: the layer takes the project's recipe back with it, so that
    // the recipe the table shows is the one a later FP8 format runs.
    pick(QStringLiteral("BF16"));
    QTRY_VERIFY_WITH_TIMEOUT(logged("blocks.0.mlp.fc2 -> bf16/bf16/bf16 with delayed scaling"), 10000);

    window.stopTraining();
    QTRY_VERIFY_WITH_TIMEOUT(!controller->isRunning(), 10000);
    QVERIFY(controller->lastStatus() == RunStatus::Stopped);
    // A change with no run going is refused with a reason, not silently dropped.
    QVERIFY(!window.changeLayerFormats(layer, GemmFormats{}));
    QVERIFY(!window.lastError().isEmpty());
    QVERIFY(!window.switchLayer(other, GemmFormats::all(NumberFormat::BF16), {}));
    QVERIFY2(window.lastError().startsWith(QStringLiteral("No run is training here")), qPrintable(window.lastError()));
}

void TestGui::runControlsHaveShortcuts()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
    window.setProject(tiny_config(100000), QStringLiteral("in-memory"));
    window.show();
    window.activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    TrainingController* controller = window.controller();
    EventLogModel* events = window.eventLogModel();
    auto sawEvent = [&](const char* kind) {
        for (int r = 0; r < events->rowCount(); ++r)
            if (events->event(r).tag() == kind) return true;
        return false;
    };

    // F5 starts a run from the Runs page too (its Refresh once took F5 as well, and Qt ran neither).
    window.showPage(MainWindow::Page::Runs);
    window.runsPage()->view()->setFocus();
    QTest::keyClick(window.runsPage()->view(), Qt::Key_F5);
    QVERIFY(controller->isRunning());
    QTRY_VERIFY_WITH_TIMEOUT(window.lastStep() >= 2, 60000);
    QTest::keyClick(&window, Qt::Key_F6);
    QVERIFY(controller->isPaused());
    QTRY_VERIFY_WITH_TIMEOUT(sawEvent("paused"), 10000);
    QCOMPARE(window.statusWidget()->etaText(), QStringLiteral("paused"));
    // The Runs page follows the run: it listed it as at step 0 until the run ended.
    RunListModel* runs = window.runsPage()->model();
    const auto cell = [&](int column) { return runs->index(runs->rowOfRun(controller->runId()), column).data(); };
    QCOMPARE(window.currentPage(), MainWindow::Page::Monitor); // Start showed it
    window.showPage(MainWindow::Page::Runs);
    QCOMPARE(cell(RunListModel::Steps).toLongLong(), window.lastStep());
    QVERIFY(window.lastStep() >= 2);
    QCOMPARE(cell(RunListModel::Status).toString(), QStringLiteral("paused"));
    const qint64 pausedAt = cell(RunListModel::Steps).toLongLong();
    QTest::keyClick(&window, Qt::Key_F6);
    QVERIFY(!controller->isPaused());
    // Training again, the shown page reads the run's row each second (that row alone).
    QTRY_VERIFY_WITH_TIMEOUT(cell(RunListModel::Steps).toLongLong() > pausedAt, 10000);
    QCOMPARE(cell(RunListModel::Status).toString(), QStringLiteral("running"));
    QTest::keyClick(&window, Qt::Key_K, Qt::ControlModifier);
    QTRY_VERIFY_WITH_TIMEOUT(sawEvent("checkpoint"), 10000);
    QTest::keyClick(&window, Qt::Key_F5, Qt::ShiftModifier);
    QTRY_VERIFY_WITH_TIMEOUT(!controller->isRunning(), 10000);
    QVERIFY(controller->lastStatus() == RunStatus::Stopped);
    QTRY_COMPARE(window.statusWidget()->etaText(), QStringLiteral("stopped")); // not "done"
    // The checkpoint went beside the store, where mantissa-train resume looks.
    QDir checkpoints(dir.filePath(QStringLiteral("runs.sqlite.checkpoints/run-%1").arg(controller->runId())));
    QVERIFY2(!checkpoints.entryList({QStringLiteral("step-*.pt")}).isEmpty(), qPrintable(checkpoints.path()));
}

void TestGui::statusWidgetEstimatesTimeLeft()
{
    RunStatusWidget status;
    status.reset(1000);
    QCOMPARE(status.etaSeconds(), -1.0); // no rate yet
    QCOMPARE(status.etaText(), QStringLiteral("ETA –"));
    status.addProgressSample(0.0, 0);
    status.addProgressSample(10.0, 100); // 10 steps/s over the window
    QCOMPARE(status.etaSeconds(), 100.0); // 1000 steps left (none reported done yet)
    QCOMPARE(status.etaText(), QStringLiteral("ETA 1 min 40 s"));
    // Samples older than the 30 s window drop out: the rate follows the recent pace.
    status.addProgressSample(50.0, 200);  // 2.5 steps/s since 10 s
    QCOMPARE(status.etaSeconds(), 1000.0 * 40.0 / 100.0);
    QCOMPARE(format_duration(90), QStringLiteral("1 min 30 s"));
    QCOMPARE(format_duration(7260), QStringLiteral("2 h 01 min"));
    QCOMPARE(format_duration(42.4), QStringLiteral("42 s"));
    status.setPaused(true);
    QCOMPARE(status.etaText(), QStringLiteral("paused"));
    QCOMPARE(status.etaSeconds(), -1.0); // the pause restarts the rate window
    status.finish(format_status(RunStatus::Stopped));
    QCOMPARE(status.etaText(), QStringLiteral("stopped")); // not "done"
    status.finish();
    QCOMPARE(status.etaText(), QStringLiteral("done")); // a followed run whose end is not known

    // History read back in a burst (Show in Monitor on a live run at step 20000 of 50000) says
    // how fast the store was read, not how fast the run trains: the rate starts after it.
    RunStatusWidget live;
    live.reset(50000);
    live.addProgressSample(0.0, 1, 1.0);
    live.addProgressSample(0.3, 20000, 19999.0); // 19 999 steps of 1 s each, read in 0.3 s
    QCOMPARE(live.etaSeconds(), -1.0);
    live.addProgressSample(10.3, 20010, 10.0); // then 1 step/s, live
    QCOMPARE(live.etaSeconds(), 50000.0);      // no step reported through update(): 50 000 left

    // A NaN loss is what an FP16 user watches for: shown, not taken for "no value yet".
    const auto label = [&live](const QString& prefix) {
        for (const QLabel* l : live.findChildren<QLabel*>())
            if (l->text().startsWith(prefix)) return l->text();
        return QString();
    };
    QCOMPARE(label(QStringLiteral("loss ")), QStringLiteral("loss \u2013"));
    TelemetryBatch batch;
    StepMetrics nan_step;
    nan_step.step = 3;
    nan_step.train_loss = std::numeric_limits<double>::quiet_NaN();
    batch.steps.push_back(nan_step);
    EvalMetrics eval;
    eval.step = 3;
    eval.val_loss = std::numeric_limits<double>::infinity();
    batch.evals.push_back(eval);
    live.update(batch);
    QTRY_COMPARE(label(QStringLiteral("loss ")), QStringLiteral("loss NaN"));
    QCOMPARE(label(QStringLiteral("val ")), QStringLiteral("val inf"));

    // Speed over a batch with a slow telemetry step: the tokens over the time, as ms/step is.
    // 1,024-token steps of 10, 10 and 1,000 ms: 3,072 tokens in 1.02 s, 3,012 tok/s (the mean
    // of each step's tokens/s said 68,608, against 340 ms/step).
    TelemetryBatch speeds;
    for (const double ms : {10.0, 10.0, 1000.0}) {
        StepMetrics m;
        m.step = 4;
        m.step_time_ms = ms;
        m.tokens_per_s = 1024.0 / (ms / 1000.0);
        speeds.steps.push_back(m);
    }
    live.update(speeds);
    QVERIFY2(std::abs(live.tokensPerS() - 3072.0 / 1.02) < 1e-6, qPrintable(QString::number(live.tokensPerS())));
    const QString speed = QLocale().toString(3012) + QStringLiteral(" tok/s");
    QTRY_COMPARE(label(speed), speed + QStringLiteral(" · 340.0 ms/step"));
}

QTEST_MAIN(TestGui)
#include "test_gui.moc"
