// SPDX-License-Identifier: GPL-3.0-or-later
// What a frame of the Monitor costs as the run grows: the real MonitorPage (1600×900,
// offscreen) takes synthetic drains shaped like a small run's (24 steps a drain, a noisy
// loss, 19 per-layer gradient norms a step, a telemetry frame every --interval steps: 2 layers'
// 45 tensors of 16 exponent bins), and at each length the loss plot's replot is timed with the
// plotting hints the plots ship with and with QCustomPlot's default (each plot's line drawn as
// one stroked polyline), side by side, then a whole frame (renderNow).
// Then an FP16 run at its scale floor, which backs off at every step naming every layer: the
// loss-scale plot redrawn (refresh + replot) from a RunHistory as shipped, which keeps at most
// 2,048 events of a repeating kind, and from one that keeps them all, side by side.
//
//   monitor_long_run [--steps 50000] [--interval 50] [--smoothing 0] [--repeats 5]
//                                                            (QT_QPA_PLATFORM=offscreen)
// Written from a read-only audit's harness (2026-12-07, "longrun"), which found the loss plot
// at 420 ms a replot past ~8,000 steps.

#include <QApplication>
#include <QElapsedTimer>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pages/monitor_page.h"
#include "plots/loss_plot.h"
#include "plots/loss_scale_plot.h"
#include "precision_policy.h"

using namespace mantissa;

namespace {

struct Options {
    int64_t steps = 50000;
    int64_t interval = 50;
    double smoothing = 0.0;
    int repeats = 5;
};

Options parse(int argc, char* argv[])
{
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--steps")) o.steps = std::atoll(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--interval")) o.interval = std::atoll(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--smoothing")) o.smoothing = std::atof(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--repeats")) o.repeats = std::max(1, std::atoi(argv[i + 1]));
    }
    return o;
}

// Drains as the controller hands them over, for a 2-layer model.
class SyntheticRun {
public:
    explicit SyntheticRun(int64_t interval, bool backoffs = false) : interval_(interval), backoffs_(backoffs)
    {
        constexpr int kLayers = 2;
        for (const auto& g : gemm_layer_names(kLayers))
            if (!g.ends_with(".sdpa")) tensorLayers_.push_back(g);
        normLayers_ = {"wte", "wpe"};
        for (int b = 0; b < kLayers; ++b)
            for (const char* s : {".ln1", ".attn.qkv", ".attn.proj", ".ln2", ".mlp.fc1", ".mlp.fc2"})
                normLayers_.push_back("blocks." + std::to_string(b) + s);
        normLayers_.push_back("ln_f");
    }
    int64_t step() const { return step_; }

    TelemetryBatch next(int64_t steps)
    {
        TelemetryBatch b;
        for (int64_t k = 0; k < steps; ++k) {
            ++step_;
            StepMetrics m;
            m.step = step_;
            m.train_loss = 1.3 + 0.3 * std::sin(double(step_) * 0.37) + 1.0 / (1.0 + double(step_) * 0.01);
            m.learning_rate = 1e-3;
            m.grad_norm = 1.0;
            m.step_time_ms = 1.7;
            m.tokens_per_s = 38000;
            m.loss_scale = backoffs_ ? 65536.0 : 1.0;
            m.skipped = backoffs_;
            for (const auto& l : normLayers_) m.layer_grad_norms.emplace_back(l, 0.1 + 0.01 * double(step_ % 7));
            b.steps.push_back(std::move(m));
            if (step_ % 1000 == 0) b.evals.push_back({step_, 1.25, 1.2});
            if (backoffs_) {
                RunEvent e;
                e.kind = EventKind::LossScaleBackoff;
                e.step = step_;
                e.old_scale = e.new_scale = 65536.0;
                e.layers = normLayers_;
                b.events.push_back(std::move(e));
            }
            if (interval_ > 0 && (step_ % interval_ == 0 || step_ == 1)) b.layer_frames.push_back(frame());
        }
        return b;
    }

private:
    LayerStatsFrame frame() const
    {
        LayerStatsFrame f;
        f.step = step_;
        f.memory.resident_bytes = 190000000 + step_ * 1000;
        for (const auto& l : tensorLayers_)
            for (const char* r : {"weight", "input", "output", "grad_output", "weight_grad"}) {
                TensorStats t;
                t.layer = l;
                t.role = r;
                t.format = "fp32";
                t.first_exponent = -40;
                t.exponent_counts.assign(16, 100);
                t.count = 1600;
                t.amax = 1.0;
                f.tensors.push_back(std::move(t));
            }
        return f;
    }
    int64_t interval_;
    bool backoffs_;
    int64_t step_ = 0;
    std::vector<std::string> tensorLayers_, normLayers_;
};

// Median of `repeats` immediate replots of `plot`, in ms.
double replot_ms(QCustomPlot* plot, int repeats)
{
    std::vector<double> ms;
    QElapsedTimer t;
    for (int i = 0; i < repeats; ++i) {
        t.start();
        plot->replot(QCustomPlot::rpImmediateRefresh);
        ms.push_back(double(t.nsecsElapsed()) / 1e6);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

} // namespace

int main(int argc, char* argv[])
{
    QApplication app(argc, argv);
    const Options o = parse(argc, argv);
    MonitorPage page;
    page.resize(1600, 900);
    page.show();
    SyntheticRun run(o.interval);
    page.reset(4 * 16, gemm_layer_names(2));
    page.setSmoothing(o.smoothing);
    LossPlot* loss = page.lossPlot();
    const bool shipped = loss->plottingHints().testFlag(QCP::phFastPolylines);

    std::printf("%8s %18s %18s %8s %15s\n", "steps", "loss replot (ms)", "as one polyline", "ratio", "frame p50 (ms)");
    constexpr int64_t kPerDrain = 24;
    for (const int64_t length : {int64_t(1000), int64_t(5000), int64_t(20000), int64_t(50000), int64_t(200000)}) {
        if (length > o.steps) break;
        while (run.step() < length) page.ingest(run.next(std::min(kPerDrain, length - run.step())));
        loss->refresh();
        const double as_shipped = replot_ms(loss, o.repeats);
        loss->setPlottingHint(QCP::phFastPolylines, false);
        const double polyline = replot_ms(loss, o.repeats);
        loss->setPlottingHint(QCP::phFastPolylines, shipped);
        // A frame as the page draws it live: every plot has something new (one more step).
        std::vector<double> frames;
        QElapsedTimer t;
        for (int i = 0; i < o.repeats; ++i) {
            page.ingest(run.next(1));
            t.start();
            page.renderNow();
            frames.push_back(double(t.nsecsElapsed()) / 1e6);
        }
        std::sort(frames.begin(), frames.end());
        const double frame = frames[frames.size() / 2];
        std::printf("%8lld %18.2f %18.2f %7.1fx %15.2f\n", static_cast<long long>(run.step()), as_shipped, polyline,
                    polyline / std::max(as_shipped, 1e-3), frame);
        std::fflush(stdout);
    }

    // A backoff every step: the loss-scale plot from a capped and an uncapped history.
    RunHistory capped(64), whole(64);
    whole.setMaxRepeatedEvents(SIZE_MAX);
    LossScalePlot cappedPlot, wholePlot;
    for (auto [plot, history] : {std::pair{&cappedPlot, &capped}, std::pair{&wholePlot, &whole}}) {
        plot->resize(1600, 250);
        plot->show();
        plot->setHistory(history);
    }
    SyntheticRun backoffs(0, /*backoffs=*/true);
    const auto redraw_ms = [&](LossScalePlot& plot) {
        std::vector<double> ms;
        QElapsedTimer t;
        for (int i = 0; i < o.repeats; ++i) {
            const TelemetryBatch one = backoffs.next(1); // something new to rebuild from
            capped.append(one);
            whole.append(one);
            t.start();
            plot.refresh();
            plot.replot(QCustomPlot::rpImmediateRefresh);
            ms.push_back(double(t.nsecsElapsed()) / 1e6);
        }
        std::sort(ms.begin(), ms.end());
        return ms[ms.size() / 2];
    };
    std::printf("\n%8s %18s %18s %8s   (a backoff every step; loss-scale plot, refresh + replot)\n", "steps",
                "capped (ms)", "every event (ms)", "ratio");
    for (const int64_t length : {int64_t(1000), int64_t(5000), int64_t(20000), int64_t(50000)}) {
        if (length > o.steps) break;
        while (backoffs.step() < length) {
            const TelemetryBatch b = backoffs.next(std::min(kPerDrain, length - backoffs.step()));
            capped.append(b);
            whole.append(b);
        }
        const double c = redraw_ms(cappedPlot), w = redraw_ms(wholePlot);
        std::printf("%8lld %18.2f %18.2f %7.1fx\n", static_cast<long long>(backoffs.step()), c, w,
                    w / std::max(c, 1e-3));
        std::fflush(stdout);
    }
    return 0;
}
