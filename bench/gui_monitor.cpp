// SPDX-License-Identifier: GPL-3.0-or-later
// How much the live monitor costs, measured side by side in one process (this machine is
// noisy, so rounds alternate): a 48-block model with telemetry every step trains
//   headless: Trainer + run store sink on this thread, no Qt event loop, and
//   monitor:  through the workbench window with the Monitor page showing every plot,
// and we compare wall-clock throughput and report the GUI thread's frame times.
//
//   gui_monitor [--steps N] [--rounds R] [--threads T] [--budget F] [--hide-monitor]
//                                                            (QT_QPA_PLATFORM=offscreen)
// --budget overrides the frame budget the window picks; --hide-monitor keeps the window on
// the Project page (telemetry still ingested, nothing drawn).
//
// Throughput is steps per wall-clock second between step `warmup` and the last step, taken
// from the engine's own step stream in both modes. The frame time is what MonitorPage times
// per rendered frame (refresh every plot + synchronous replot of the changed ones); the
// event-loop lag is how late a 25 ms probe timer fires on the GUI thread, i.e. how long the
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
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "plots/frame_stats.h"
#include "plots/exponent_histogram_plot.h"
#include "plots/layer_heatmap_plot.h"
#include "plots/loss_plot.h"
#include "plots/loss_scale_plot.h"
#include "window/main_window.h"
#include "plots/memory_plot.h"
#include "pages/monitor_page.h"
#include "project_config.h"
#include "run_store.h"
#include "trainer.h"
#include "controller/training_controller.h"

using namespace mantissa;

namespace {

constexpr int64_t kWarmupSteps = 10;
// The lag probe wakes the GUI thread itself, so it is kept at the drain's own order of
// magnitude (a 10 ms probe cost the monitor ~0.5% throughput here).
constexpr int kProbeMs = 25;

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
        last_ = std::chrono::steady_clock::now();
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
    store.finish_run(id, RunStatus::Finished);
    return timing.steps_per_s();
}

struct MonitorResult {
    double steps_per_s = 0.0;
    double frame_p50_ms = 0.0, frame_p99_ms = 0.0;
    int frames = 0;
    double lag_p50_ms = 0.0, lag_p99_ms = 0.0, lag_max_ms = 0.0;
    double gui_cpu_percent = 0.0; // the GUI thread's CPU time over the run's wall time
};

// CPU time of the calling thread: the GUI thread's whole bill (ingest, frames, event loop).
double thread_cpu_seconds()
{
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

struct MonitorOptions {
    bool hide_monitor = false;  // window open on the Project page: ingest only, no drawing
    double frame_budget = 0.0;  // > 0: overrides the window's choice
};

double percentile(std::vector<double> v, double p)
{
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const auto rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

MonitorResult run_monitor(const ProjectConfig& config, const QString& db, const MonitorOptions& options)
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
    probe.setInterval(kProbeMs);
    QObject::connect(&probe, &QTimer::timeout, [&] {
        const double elapsed = static_cast<double>(probeClock.nsecsElapsed()) / 1e6;
        lags.push_back(std::max(0.0, elapsed - kProbeMs));
        probeClock.restart();
    });

    QEventLoop loop;
    QObject::connect(window.controller(), &TrainingController::finished, &loop, &QEventLoop::quit);
    if (!window.startTraining()) {
        std::fprintf(stderr, "cannot start: %s\n", qPrintable(window.lastError()));
        std::exit(1);
    }
    if (options.hide_monitor) window.showPage(MainWindow::Page::Project);
    if (options.frame_budget > 0) window.monitorPage()->setFrameBudget(options.frame_budget);
    probeClock.start();
    probe.start();
    const double cpuBefore = thread_cpu_seconds();
    QElapsedTimer wall;
    wall.start();
    loop.exec();
    const double guiCpu = (thread_cpu_seconds() - cpuBefore) / (static_cast<double>(wall.nsecsElapsed()) / 1e9);
    probe.stop();

    // Where a frame's time goes: each plot's own average replot time (QCustomPlot measures it).
    MonitorPage* page = window.monitorPage();
    std::fprintf(stderr, "replot ms (average): loss %.2f, loss scale %.2f, memory %.2f, heatmap %.2f, histogram %.2f\n",
                 page->lossPlot()->replotTime(true), page->lossScalePlot()->replotTime(true),
                 page->memoryPlot()->replotTime(true), page->heatmap()->replotTime(true),
                 page->histogramPlot()->replotTime(true));
    std::fprintf(stderr, "ingest: %zu batches, p50 %.2f ms, p99 %.2f ms\n", page->ingestStats().count(),
                 page->ingestStats().percentile(50), page->ingestStats().percentile(99));
    MonitorResult r;
    r.gui_cpu_percent = 100.0 * guiCpu;
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

// One measurement in this process; prints "RESULT <fields>" for the parent.
int measure(const std::string& mode, const ProjectConfig& config, const MonitorOptions& options)
{
    QTemporaryDir dir;
    const QString db = dir.filePath(QStringLiteral("bench.db"));
    if (mode == "headless") {
        std::printf("RESULT %.4f 0 0 0 0 0 0 0\n", run_headless(config, db.toStdString()));
        return 0;
    }
    const MonitorResult m = run_monitor(config, db, options);
    std::printf("RESULT %.4f %d %.3f %.3f %.3f %.3f %.3f %.3f\n", m.steps_per_s, m.frames, m.frame_p50_ms,
                m.frame_p99_ms, m.lag_p50_ms, m.lag_p99_ms, m.lag_max_ms, m.gui_cpu_percent);
    return 0;
}

MonitorResult spawn(const char* self, const std::string& mode, int64_t steps, int64_t threads, const std::string& extra)
{
    const std::string command = std::string(self) + " --mode " + mode + " --steps " + std::to_string(steps) +
                                " --threads " + std::to_string(threads) + extra;
    FILE* pipe = popen(command.c_str(), "r");
    MonitorResult r;
    if (!pipe) return r;
    char line[512];
    while (std::fgets(line, sizeof line, pipe)) {
        if (std::strncmp(line, "RESULT ", 7) != 0) continue;
        std::sscanf(line + 7, "%lf %d %lf %lf %lf %lf %lf %lf", &r.steps_per_s, &r.frames, &r.frame_p50_ms,
                    &r.frame_p99_ms, &r.lag_p50_ms, &r.lag_p99_ms, &r.lag_max_ms, &r.gui_cpu_percent);
    }
    pclose(pipe);
    return r;
}

} // namespace

int main(int argc, char* argv[])
{
    QApplication app(argc, argv);
    int64_t steps = 200, rounds = 3, threads = 0;
    std::string mode, extra;
    MonitorOptions options;
    for (int i = 1; i < argc; ++i) {
        const std::string key = argv[i];
        if (key == "--hide-monitor") {
            options.hide_monitor = true;
            extra += " --hide-monitor";
            continue;
        }
        if (i + 1 >= argc) break;
        if (key == "--mode") {
            mode = argv[++i];
            continue;
        }
        if (key == "--budget") {
            options.frame_budget = std::atof(argv[++i]);
            extra += " --budget " + std::string(argv[i]);
            continue;
        }
        const int64_t value = std::atoll(argv[++i]);
        if (key == "--steps") steps = value;
        else if (key == "--rounds") rounds = value;
        else if (key == "--threads") threads = value;
    }
    const ProjectConfig config = bench_project(steps, threads);
    if (!mode.empty()) return measure(mode, config, options);

    // Each measurement in a fresh process: LibTorch's thread pools belong to the thread that
    // first trains, so training on the main thread and then on a worker in one process
    // would measure that, not the monitor.
    std::printf("48 blocks (241 GEMM layers), n_embd 32, batch 8 x 32 tokens, telemetry every step, %lld steps, "
                "%lld rounds, one process per measurement\n",
                static_cast<long long>(steps), static_cast<long long>(rounds));
    std::printf("%-6s %14s %14s %8s %8s %9s %9s %8s %9s %9s %8s\n", "round", "headless st/s", "monitor st/s", "ratio",
                "frames", "frame p50", "frame p99", "lag p50", "lag p99", "lag max", "GUI CPU");
    std::vector<double> ratios;
    for (int64_t r = 0; r < rounds; ++r) {
        MonitorResult headless, monitor;
        // Alternate which goes first so drift (thermal, page cache) does not favour one side.
        if (r % 2 == 0) {
            headless = spawn(argv[0], "headless", steps, threads, extra);
            monitor = spawn(argv[0], "monitor", steps, threads, extra);
        } else {
            monitor = spawn(argv[0], "monitor", steps, threads, extra);
            headless = spawn(argv[0], "headless", steps, threads, extra);
        }
        const double ratio = headless.steps_per_s > 0 ? monitor.steps_per_s / headless.steps_per_s : 0.0;
        ratios.push_back(ratio);
        std::printf("%-6lld %14.3f %14.3f %8.3f %8d %9.2f %9.2f %8.2f %9.2f %9.2f %7.1f%%\n",
                    static_cast<long long>(r + 1), headless.steps_per_s, monitor.steps_per_s, ratio, monitor.frames,
                    monitor.frame_p50_ms, monitor.frame_p99_ms, monitor.lag_p50_ms, monitor.lag_p99_ms,
                    monitor.lag_max_ms, monitor.gui_cpu_percent);
        std::fflush(stdout);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("median throughput ratio monitor/headless: %.3f (target >= 0.97)\n", ratios[ratios.size() / 2]);
    return 0;
}
