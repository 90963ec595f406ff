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

private:
    std::mutex mutex_;
    TelemetryBatch pending_;
};

} // namespace mantissa
