// SPDX-License-Identifier: GPL-3.0-or-later
// How much the live monitor costs, measured side by side in one process (this machine is
// noisy, so rounds alternate): a 48-block model with telemetry every step trains
//   headless: Trainer + run store sink on this thread, no Qt event loop, and
//   monitor:  through the workbench window with the Monitor page showing every plot,
// and we compare wall-clock throughput and report the GUI thread's frame times.
//
//   gui_monitor [--steps N] [--rounds R] [--threads T]      (QT_QPA_PLATFORM=offscreen)
//
// Throughput is steps per wall-clock second between step `warmup` and the last step, taken
// from the engine's own step stream in both modes. The frame time is what MonitorPage times
// per rendered frame (refresh every plot + synchronous replot of the changed ones); the
// event-loop lag is how late a 10 ms probe timer fires on the GUI thread, i.e. how long the
// UI could not react to input.

#include <QApplication>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QTemporaryDir>
#include <QTimer>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "frame_stats.h"
#include "main_window.h"
#include "monitor_page.h"
#include "project_config.h"
#include "run_store.h"
#include "trainer.h"
#include "training_controller.h"

using namespace mantissa;

namespace {

constexpr int64_t kWarmupSteps = 10;

ProjectConfig bench_project(int64_t steps, int64_t threads)
{
    ProjectConfig c;
    c.name = "bench-monitor-48";
    c.model.n_layer = 48;
    c.model.n_head = 2;
    c.model.n_embd = 32;
    c.model.context_length = 32;
    c.data.kind = DataKind::SyntheticAddition;
    c.data.examples = 4000;
    c.training.steps = steps;
    c.training.batch_size = 8;
    c.training.threads = threads;
    c.eval.interval = 0; // only at the end: the comparison is about training steps
    c.eval.batches = 2;
    c.telemetry.interval = 1; // every step: the worst case for the monitor
    c.optimizer.warmup_steps = 10;
    return c;
}

// Records when each step arrived, on the training thread.
class TimingSink : public TelemetrySink {
public:
    explicit TimingSink(TelemetrySink& next) : next_(next) {}
    void on_step(const StepMetrics& m) override
    {
        next_.on_step(m);
        if (m.step == kWarmupSteps) start_ = std::chrono::steady_clock::now();
        const auto now = std::chrono::steady_clock::now();
        if (std::getenv("GUI_MONITOR_DEBUG"))
            std::fprintf(stderr, "step %lld +%.1f ms (step_time %.1f)\n", static_cast<long long>(m.step),
                         std::chrono::duration<double, std::milli>(now - last_).count(), m.step_time_ms);
        last_ = now;
        last_step_ = m.step;
    }
    void on_eval(const EvalMetrics& m) override { next_.on_eval(m); }
    void on_event(const RunEvent& e) override { next_.on_event(e); }
    void on_layer_stats(const LayerStatsFrame& f) override { next_.on_layer_stats(f); }
    double steps_per_s() const
    {
        const double s = std::chrono::duration<double>(last_ - start_).count();
        return s > 0 ? static_cast<double>(last_step_ - kWarmupSteps) / s : 0.0;
    }

private:
    TelemetrySink& next_;
    std::chrono::steady_clock::time_point start_, last_;
    int64_t last_step_ = 0;
};

double run_headless(const ProjectConfig& config, const std::string& db)
{
    Trainer trainer(config);
    RunStore store(db);
    const int64_t id = store.create_run(config.name, "", to_json_text(config));
    StoreSink store_sink(store, id);
    TimingSink timing(store_sink);
    trainer.run(timing);
    store.finish_run(id, "finished");
    return timing.steps_per_s();
}

struct MonitorResult {
    double steps_per_s = 0.0;
    double frame_p50_ms = 0.0, frame_p99_ms = 0.0;
    int frames = 0;
    double lag_p50_ms = 0.0, lag_p99_ms = 0.0, lag_max_ms = 0.0;
};

double percentile(std::vector<double> v, double p)
{
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

MonitorResult run_monitor(const ProjectConfig& config, const QString& db)
{
    MainWindow window(db);
    window.resize(1600, 1000);
    window.setProject(config);
    window.show();
    QApplication::processEvents();

    // The step stream as the GUI sees it, timed on arrival (40 ms granularity over a run of
    // many seconds) -- but the engine's own wall time is what we want, so the window's
    // history supplies step times and the drain arrival bounds the interval.
    QElapsedTimer clock;
    clock.start();
    double startS = -1.0, endS = 0.0;
    int64_t startStep = 0, endStep = 0;
    QObject::connect(window.controller(), &TrainingController::drained, &window, [&](const TelemetryBatch& b) {
        if (b.steps.empty()) return;
        const double now = static_cast<double>(clock.nsecsElapsed()) / 1e9;
        if (startS < 0 && b.steps.back().step >= kWarmupSteps) {
            startS = now;
            startStep = b.steps.back().step;
        }
        endS = now;
        endStep = b.steps.back().step;
    });

    std::vector<double> lags;
    QElapsedTimer probeClock;
    QTimer probe;
    probe.setTimerType(Qt::PreciseTimer);
    probe.setInterval(10);
    QObject::connect(&probe, &QTimer::timeout, [&] {
        const double elapsed = static_cast<double>(probeClock.nsecsElapsed()) / 1e6;
        lags.push_back(std::max(0.0, elapsed - 10.0));
        probeClock.restart();
    });

    QEventLoop loop;
    QObject::connect(window.controller(), &TrainingController::finished, &loop, &QEventLoop::quit);
    if (!window.startTraining()) {
        std::fprintf(stderr, "cannot start: %s\n", qPrintable(window.lastError()));
        std::exit(1);
    }
    probeClock.start();
    probe.start();
    loop.exec();
    probe.stop();

    MonitorResult r;
    r.steps_per_s = endS > startS ? static_cast<double>(endStep - startStep) / (endS - startS) : 0.0;
    const FrameStats& frames = window.monitorPage()->frameStats();
    r.frames = window.monitorPage()->framesRendered();
    r.frame_p50_ms = frames.percentile(50);
    r.frame_p99_ms = frames.percentile(99);
    r.lag_p50_ms = percentile(lags, 50);
    r.lag_p99_ms = percentile(lags, 99);
    r.lag_max_ms = lags.empty() ? 0.0 : *std::max_element(lags.begin(), lags.end());
    return r;
}

} // namespace

int main(int argc, char* argv[])
{
    QApplication app(argc, argv);
    int64_t steps = 200, rounds = 3, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string key = argv[i];
        const int64_t value = std::atoll(argv[i + 1]);
        if (key == "--steps") steps = value;
        else if (key == "--rounds") rounds = value;
        else if (key == "--threads") threads = value;
    }
    const ProjectConfig config = bench_project(steps, threads);
    QTemporaryDir dir;
    std::printf("48 blocks (241 GEMM layers), n_embd 32, batch 8 x 32 tokens, telemetry every step, %lld steps, "
                "%lld rounds\n",
                static_cast<long long>(steps), static_cast<long long>(rounds));
    std::printf("%-6s %14s %14s %8s %8s %9s %9s %8s %9s %9s\n", "round", "headless st/s", "monitor st/s", "ratio",
                "frames", "frame p50", "frame p99", "lag p50", "lag p99", "lag max");
    std::vector<double> ratios;
    std::vector<double> p50s, p99s;
    for (int64_t r = 0; r < rounds; ++r) {
        const std::string db = dir.filePath(QStringLiteral("bench-%1.db").arg(r)).toStdString();
        double headless = 0.0;
        MonitorResult monitor;
        // Alternate which goes first so drift (thermal, page cache) does not favour one side.
        if (r % 2 == 0) {
            headless = run_headless(config, db);
            monitor = run_monitor(config, QString::fromStdString(db));
        } else {
            monitor = run_monitor(config, QString::fromStdString(db));
            headless = run_headless(config, db);
        }
        const double ratio = headless > 0 ? monitor.steps_per_s / headless : 0.0;
        ratios.push_back(ratio);
        p50s.push_back(monitor.frame_p50_ms);
        p99s.push_back(monitor.frame_p99_ms);
        std::printf("%-6lld %14.3f %14.3f %8.3f %8d %9.2f %9.2f %8.2f %9.2f %9.2f\n", static_cast<long long>(r + 1),
                    headless, monitor.steps_per_s, ratio, monitor.frames, monitor.frame_p50_ms, monitor.frame_p99_ms,
                    monitor.lag_p50_ms, monitor.lag_p99_ms, monitor.lag_max_ms);
        std::fflush(stdout);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("median throughput ratio monitor/headless: %.3f (target >= 0.97)\n", ratios[ratios.size() / 2]);
    return 0;
}
