// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Loss scaling with PyTorch GradScaler's rule (ATen _amp_update_scale_), plus Megatron's
// minimum scale and hysteresis. No LibTorch: the caller reports whether the unscaled
// gradients held an inf or NaN.

#include <cstdint>
#include <string>

namespace mantissa {

enum class LossScalingMode { Off, Static, Dynamic };

struct LossScalingConfig {
    LossScalingMode mode = LossScalingMode::Off;
    double init_scale = 65536.0; // 2^16
    double growth_factor = 2.0;
    double backoff_factor = 0.5;
    int64_t growth_interval = 2000;
    double min_scale = 0.0; // 0: none, as in PyTorch
    int64_t hysteresis = 1; // overflows tolerated before backing off, refilled on growth (1 = PyTorch)
};

class LossScaler {
public:
    enum class Outcome { Clean, Skipped, SkippedAndBackedOff, Grew };

    explicit LossScaler(const LossScalingConfig& config = {});

    double scale() const { return mode_ == LossScalingMode::Off ? 1.0 : scale_; }
    int64_t growth_tracker() const { return growth_tracker_; }
    bool enabled() const { return mode_ != LossScalingMode::Off; }
    LossScalingMode mode() const { return mode_; }

    // After each backward: updates the scale. The optimizer step must be skipped unless the
    // outcome is Clean or Grew. With scaling off or static a non-finite gradient still skips.
    Outcome update(bool found_inf);

    struct State {
        double scale;
        int64_t growth_tracker;
        int64_t overflows_left;
    };
    State state() const { return {scale_, growth_tracker_, overflows_left_}; }
    void restore(const State& s)
    {
        scale_ = s.scale;
        growth_tracker_ = s.growth_tracker;
        overflows_left_ = s.overflows_left;
    }

private:
    LossScalingMode mode_;
    LossScalingConfig config_;
    double scale_;
    int64_t growth_tracker_ = 0;
    int64_t overflows_left_; // Megatron's hysteresis tracker
};

} // namespace mantissa
