// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Comparing the metric series of saved runs: smoothing, alignment on steps or on another
// x-axis (tokens, seconds), and the first step at which two runs part ways. No LibTorch.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mantissa {

// (step, value), ascending step: one metric of one run, as RunStore::series returns it.
using Series = std::vector<std::pair<int64_t, double>>;

// TensorBoard's scalar-dashboard smoothing, so a curve here reads the same as the run in
// TensorBoard: an exponential moving average over the finite values, debiased by
// 1 - weight^n after n finite values so the start is not pulled toward 0. Non-finite values
// pass through unchanged (and do not move the average); a constant series is returned as
// is; weight 0 is the identity; `weight` is clamped to [0, 1). The monitor, the Compare page
// and the CLI all smooth with this one function.
std::vector<double> debiased_ema(const std::vector<double>& values, double weight);
// The same over a (step, value) series.
Series ema_smooth(const Series& series, double weight);

struct AlignedPoint {
    int64_t step = 0;
    double a = 0.0, b = 0.0;
};

// The steps both series have, with both values (an inner join on step).
std::vector<AlignedPoint> align_on_steps(const Series& a, const Series& b);

// A point on a continuous x-axis (tokens trained on, seconds of training).
struct XYPoint {
    double x = 0.0, y = 0.0;
};
struct AlignedXY {
    double x = 0.0, a = 0.0, b = 0.0;
};

// x = tokens after each step: step * tokens_per_step.
std::vector<XYPoint> series_by_tokens(const Series& series, double tokens_per_step);
// x = tokens trained after each step, from the run's own per-step record: tokens_per_s times
// step_time_ms is that step's tokens (to rounding), so a run resumed with another batch size
// or accumulation is placed right. The steps between two records (telemetry.log_interval) take
// the later record's tokens per step; steps past the last record, and a run without records,
// `fallback_tokens_per_step` (the stored config's).
std::vector<XYPoint> series_by_recorded_tokens(const Series& series, const Series& tokens_per_s,
                                               const Series& step_time_ms, double fallback_tokens_per_step);
// x = training seconds after each step: the running sum of step_time_ms (every step of the
// run, not just the steps `series` has); steps without a time get the time of the last known one.
std::vector<XYPoint> series_by_seconds(const Series& series, const Series& step_time_ms);
// Tokens per optimizer step of a stored config (load_run_config: missing keys take their
// defaults): batch_size * context_length * grad_accum. Throws ConfigError on text that is
// not a readable project.
double tokens_per_step(const std::string& config_json);

// b linearly interpolated at each x of a, over the range both cover (x ascending in both).
std::vector<AlignedXY> align_on_x(const std::vector<XYPoint>& a, const std::vector<XYPoint>& b);

// The first step, among the steps both series have, where they differ by more than
// `tolerance`: |a - b| > tolerance, or with `relative` |a - b| > tolerance * max(|a|, |b|).
// A value that is finite in one run and not in the other counts as diverged; two non-finite
// values count as agreeing. std::nullopt when they never diverge (or share no step).
// To compare trends rather than step noise, pass ema_smooth()ed series.
std::optional<int64_t> first_divergence_step(const Series& a, const Series& b, double tolerance, bool relative);

// The train-loss difference that counts as divergence unless the user says otherwise, in the
// CLI's compare and on the Compare page alike: they gave opposite verdicts on the same runs
// (1e-3 flagged a BF16 run's step noise, 2.5202 against 2.5212, as divergence).
inline constexpr double kDefaultDivergenceTolerance = 0.05;

} // namespace mantissa
