// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Curve helpers for the plots: TensorBoard's smoothing (debiased_ema, from the engine's
// run_compare.h so the monitor, the Compare page and the CLI smooth alike), and min/max
// decimation, so a long run costs the plot a few points per pixel without hiding a single
// spike. No Qt here.

#include <cstddef>
#include <vector>

#include "run_compare.h"

namespace mantissa {

struct DecimatedSeries {
    std::vector<double> xs;
    std::vector<double> ys;
};

// Splits [xs.front(), xs.back()] into `buckets` equal x ranges and keeps, per bucket, its
// first, lowest, highest and last point (and its first non-finite one), in x order: at most
// 4 points per bucket (5 with a NaN), so the envelope and every spike survive. `xs` must be
// ascending. Series with at most 4 x buckets points come back unchanged.
DecimatedSeries decimate_min_max(const std::vector<double>& xs, const std::vector<double>& ys, size_t buckets);

} // namespace mantissa
