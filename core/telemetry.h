// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Plain value snapshots that the engine pushes out while it trains. No LibTorch,
// no Qt: the run store, the CLI and the GUI all consume these.

#include <cstdint>
#include <string>
#include <vector>

namespace mantissa {

// One optimizer step. `step` counts completed updates, starting at 1.
struct StepMetrics {
    int64_t step = 0;
    double train_loss = 0.0;    // mean over the micro-batches of this step
    double learning_rate = 0.0; // lr used for this update
    double grad_norm = 0.0;     // global L2 norm before clipping
    double step_time_ms = 0.0;  // wall time of forward+backward+update
    double tokens_per_s = 0.0;
    double loss_scale = 1.0;    // the scale this step's backward used (1 when scaling is off)
    bool skipped = false;       // optimizer step skipped: non-finite gradients
};

// A periodic evaluation. `step` is the number of updates done when it ran (0 = before training).
struct EvalMetrics {
    int64_t step = 0;
    double val_loss = 0.0;
    double train_loss = 0.0; // same estimator on the training split, for the gap
};

// Something that happened: run started/stopped, a sample, a paused state, ...
struct RunEvent {
    int64_t step = 0;
    std::string kind;    // short machine-readable tag, e.g. "run_started", "sample"
    std::string message; // human-readable text
};

// Receives snapshots from the training thread. Implementations must return fast and
// must not throw: the training step waits for them.
class TelemetrySink {
public:
    virtual ~TelemetrySink() = default;
    virtual void on_step(const StepMetrics& metrics) = 0;
    virtual void on_eval(const EvalMetrics& metrics) = 0;
    virtual void on_event(const RunEvent& event) = 0;
};

// Forwards every snapshot to several sinks (store, GUI buffer, console).
class FanOutSink : public TelemetrySink {
public:
    explicit FanOutSink(std::vector<TelemetrySink*> sinks) : sinks_(std::move(sinks)) {}
    void on_step(const StepMetrics& m) override { for (auto* s : sinks_) s->on_step(m); }
    void on_eval(const EvalMetrics& m) override { for (auto* s : sinks_) s->on_eval(m); }
    void on_event(const RunEvent& e) override { for (auto* s : sinks_) s->on_event(e); }

private:
    std::vector<TelemetrySink*> sinks_;
};

} // namespace mantissa
