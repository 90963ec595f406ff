// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The hand-over point between the training thread and the GUI thread. The trainer pushes
// value snapshots at step speed; the GUI takes everything at once at its own, slower
// cadence. Neither side waits for the other beyond a short mutex hold, and the trainer
// never touches a widget.

#include <mutex>
#include <vector>

#include "telemetry.h"

namespace mantissa {

// Everything that arrived between two drains, in arrival order per kind.
struct TelemetryBatch {
    std::vector<StepMetrics> steps;
    std::vector<EvalMetrics> evals;
    std::vector<RunEvent> events;
    std::vector<LayerStatsFrame> layer_frames; // per-layer statistics on the telemetry cadence

    bool empty() const { return steps.empty() && evals.empty() && events.empty() && layer_frames.empty(); }
};

class SnapshotBuffer : public TelemetrySink {
public:
    // Called on the training thread.
    void on_step(const StepMetrics& metrics) override;
    void on_eval(const EvalMetrics& metrics) override;
    void on_event(const RunEvent& event) override;
    void on_layer_stats(const LayerStatsFrame& frame) override;

    // Called on the GUI thread: returns what accumulated and leaves the buffer empty.
    TelemetryBatch take();
    // Called on the GUI thread with a batch it is done with: its step and frame objects
    // become the storage the trainer copies the next snapshots into. A copy assigned into a
    // recycled object reuses its strings' and vectors' capacity, so the hand-over allocates
    // nothing in steady state and the GUI thread frees nothing the training thread
    // allocated: with ~1,200 tensor statistics a step, cross-thread frees contended for the
    // training thread's malloc arena and cost the run a few percent (bench/gui_monitor).
    void recycle(TelemetryBatch&& batch);

    static constexpr size_t kMaxSpareSteps = 256;
    static constexpr size_t kMaxSpareFrames = 8;

private:
    std::mutex mutex_;
    TelemetryBatch pending_;
    std::vector<StepMetrics> spareSteps_;
    std::vector<LayerStatsFrame> spareFrames_;
};

} // namespace mantissa
