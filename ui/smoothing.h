// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Curve helpers for the monitor's plots: TensorBoard's smoothing, so a curve here reads the
// same as the same run in TensorBoard, and min/max decimation, so a long run costs the plot
// a few points per pixel without hiding a single spike. No Qt here.

#include <cstddef>
#include <vector>

namespace mantissa {

// TensorBoard's scalar-dashboard smoothing: an exponential moving average over the finite
// values, debiased by 1 - weight^n after n finite values so the start is not pulled toward 0.
// Non-finite values pass through unchanged (and do not move the average); a constant series
// is returned as is; weight 0 is the identity. `weight` is in [0, 1).
std::vector<double> debiased_ema(const std::vector<double>& values, double weight);

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
