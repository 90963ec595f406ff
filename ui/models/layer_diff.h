// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The per-layer comparison of two runs: one statistic, layer x step, as run A minus run B on
// the steps both recorded. No Qt.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "run_compare.h"
#include "telemetry.h"

namespace mantissa {

enum class LayerDiffStat {
    UnderflowPercent, // A - B, in percentage points (per tensor role)
    OverflowPercent,  // A - B, in percentage points (per tensor role)
    AmaxLog10Ratio,   // log10(amax A / amax B) (per tensor role); NaN unless both > 0
    GradNorm          // A - B of the per-layer gradient norm (scalars grad_norm/<layer>)
};

struct LayerDiffGrid {
    std::vector<std::string> layers; // rows, in the order given (then unknown ones, sorted)
    std::vector<int64_t> steps;      // columns, ascending
    std::vector<double> values;      // [column * layers + row]; NaN where either run lacks it

    bool empty() const { return layers.empty() || steps.empty(); }
    double at(int64_t step, const std::string& layer) const; // NaN if not a cell
};

// At most this many columns: a longer common step range is thinned to evenly spaced steps.
constexpr size_t kMaxLayerDiffColumns = 1000;

// From RunStore::layer_stats of both runs, for one tensor role. `layerOrder`: rows known in
// advance (forward order); layers only the stats name are appended.
LayerDiffGrid layer_stat_difference(const std::vector<std::pair<int64_t, TensorStats>>& a,
                                    const std::vector<std::pair<int64_t, TensorStats>>& b, LayerDiffStat stat,
                                    const std::string& role, const std::vector<std::string>& layerOrder);

// From per-layer scalar series of both runs (layer -> series), for GradNorm.
LayerDiffGrid layer_series_difference(const std::map<std::string, Series>& a, const std::map<std::string, Series>& b,
                                      const std::vector<std::string>& layerOrder);

} // namespace mantissa
