// SPDX-License-Identifier: GPL-3.0-or-later
#include "controller/snapshot_buffer.h"

#include <utility>

namespace mantissa {

namespace {

// Takes a spare object (or a fresh one) out of `spares`; the caller holds the lock.
template <typename T> T take_spare(std::vector<T>& spares)
{
    if (spares.empty()) return T{};
    T spare = std::move(spares.back());
    spares.pop_back();
    return spare;
}

} // namespace

void SnapshotBuffer::on_step(const StepMetrics& metrics)
{
    StepMetrics slot;
    {
        std::lock_guard lock(mutex_);
        slot = take_spare(spareSteps_);
    }
    slot = metrics; // outside the lock: the GUI's take() never waits for this copy
    std::lock_guard lock(mutex_);
    pending_.steps.push_back(std::move(slot));
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
    LayerStatsFrame slot;
    {
        std::lock_guard lock(mutex_);
        slot = take_spare(spareFrames_);
    }
    slot = frame;
    std::lock_guard lock(mutex_);
    pending_.layer_frames.push_back(std::move(slot));
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

void SnapshotBuffer::recycle(TelemetryBatch&& batch)
{
    std::lock_guard lock(mutex_);
    for (auto& step : batch.steps) {
        if (spareSteps_.size() >= kMaxSpareSteps) break;
        spareSteps_.push_back(std::move(step));
    }
    for (auto& frame : batch.layer_frames) {
        if (spareFrames_.size() >= kMaxSpareFrames) break;
        spareFrames_.push_back(std::move(frame));
    }
    // Whatever did not fit is freed here, on the GUI thread, when `batch` goes out of scope
    // at the caller; that only happens when the GUI falls behind by more than the caps.
}

} // namespace mantissa
