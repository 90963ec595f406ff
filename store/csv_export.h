// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A run's tables as CSV (RFC 4180), handed to a sink in pieces as the rows are read: an export
// of a long run holds a few rows, not the run (900,000 layer rows took 676 MB when the whole
// text was built first).

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "run_store.h"

namespace mantissa {

// Takes the next piece of the text; what it throws (a full disk) ends the export.
using TextSink = std::function<void(std::string_view)>;

// Metrics pivoted to one row per step: step, then one column per tag, the known ones first in a
// fixed order and any other after them alphabetically. Empty: the step has no value of that
// tag; "nan": a NaN was recorded.
void write_metrics_csv(RunStore& store, int64_t run_id, const TextSink& sink);
// The per-layer statistics, a row per step, layer and tensor role, without the exponent
// histograms (the TensorBoard export has those).
void write_layer_stats_csv(RunStore& store, int64_t run_id, const TextSink& sink);
void write_events_csv(RunStore& store, int64_t run_id, const TextSink& sink);

// Each of them whole, as one string.
std::string metrics_csv(RunStore& store, int64_t run_id);
std::string layer_stats_csv(RunStore& store, int64_t run_id);
std::string events_csv(RunStore& store, int64_t run_id);

} // namespace mantissa
