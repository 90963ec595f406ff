// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What a Monitor page fed by a RunFollower must hold of a stored run: exactly its loss points,
// evaluations, events and telemetry frames, each once, with the store's histograms.

#include <QString>

#include <map>
#include <set>

#include "models/run_history.h"
#include "run_store.h"

inline bool same_double(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// "" when `history` holds run `id` of `store` exactly, else the first difference.
inline QString compare_history(const mantissa::RunHistory& history, mantissa::RunStore& store, int64_t id)
{
    using namespace mantissa;
    const Series loss = store.series(id, "train/loss");
    const auto& steps = history.steps();
    if (steps.size() != loss.size())
        return QString("%1 loss points in the monitor, %2 in the store").arg(steps.size()).arg(loss.size());
    for (size_t i = 0; i < steps.size(); ++i)
        if (steps[i].step != loss[i].first || !same_double(steps[i].train_loss, loss[i].second))
            return QString("loss point %1: step %2 = %3 in the monitor, step %4 = %5 in the store")
                .arg(i)
                .arg(steps[i].step)
                .arg(steps[i].train_loss, 0, 'g', 17)
                .arg(loss[i].first)
                .arg(loss[i].second, 0, 'g', 17);
    const Series val = store.series(id, "val/loss");
    if (history.evals().size() != val.size())
        return QString("%1 evaluations in the monitor, %2 in the store").arg(history.evals().size()).arg(val.size());
    for (size_t i = 0; i < val.size(); ++i)
        if (history.evals()[i].step != val[i].first || !same_double(history.evals()[i].val_loss, val[i].second))
            return QString("evaluation %1 differs").arg(i);
    if (history.events().size() != store.events(id).size())
        return QString("%1 events in the monitor, %2 in the store").arg(history.events().size()).arg(store.events(id).size());
    // One frame per step with layer statistics, in step order, each tensor's histogram as stored.
    std::map<int64_t, std::vector<TensorStats>> frames;
    for (auto& [step, t] : store.layer_stats_page(id, 0, 100000000).rows) frames[step].push_back(t);
    const auto& memory = history.memory();
    if (memory.size() != frames.size())
        return QString("%1 frames in the monitor, %2 in the store").arg(memory.size()).arg(frames.size());
    size_t i = 0;
    for (const auto& [step, tensors] : frames) {
        if (memory[i++].step != step) return QString("frame %1 is at step %2, not %3").arg(i - 1).arg(memory[i - 1].step).arg(step);
        for (const auto& t : tensors) {
            int64_t at = -1;
            const ExponentHistogram* h = history.histogram(t.layer, t.role, step, &at);
            if (!h || at != step || h->counts != t.exponent_counts || h->first_exponent != t.first_exponent ||
                h->count != t.count)
                return QString("the histogram of %1 %2 at step %3 differs")
                    .arg(QString::fromStdString(t.layer), QString::fromStdString(t.role))
                    .arg(step);
        }
    }
    return {};
}
