// SPDX-License-Identifier: GPL-3.0-or-later
#include "snapshot_buffer.h"

#include <utility>

namespace mantissa {

void SnapshotBuffer::on_step(const StepMetrics& metrics)
{
    std::lock_guard lock(mutex_);
    pending_.steps.push_back(metrics);
}

void SnapshotBuffer::on_eval(const EvalMetrics& metrics)
{
    std::lock_guard lock(mutex_);
    pending_.evals.push_back(metrics);
}

void SnapshotBuffer::on_event(const RunEvent& event)
{
    std::lock_guard lock(mutex_);
    pending_.events.push_back(event);
}

void SnapshotBuffer::on_layer_stats(const LayerStatsFrame& frame)
{
    std::lock_guard lock(mutex_);
    pending_.layer_frames.push_back(frame);
}

TelemetryBatch SnapshotBuffer::take()
{
    // Swap under the lock so the trainer is blocked for a pointer exchange, not a copy.
    TelemetryBatch out;
    {
        std::lock_guard lock(mutex_);
        std::swap(out, pending_);
    }
    return out;
}

} // namespace mantissa
