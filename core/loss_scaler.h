// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Loss scaling with PyTorch GradScaler's rule (ATen _amp_update_scale_), plus Megatron's
// minimum scale and hysteresis. No LibTorch: the caller reports whether the unscaled
// gradients held an inf or NaN.

#include <algorithm>
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
    bool operator==(const LossScalingConfig&) const = default;
};

// double -> float32 rounded to nearest even, ±inf beyond the float range (a plain cast of an
// out-of-range double is undefined behaviour in C++).
float to_float32(double value);

class LossScaler {
public:
    enum class Outcome { Clean, Skipped, SkippedAndBackedOff, Grew };

    explicit LossScaler(const LossScalingConfig& config = {});

    // The scale is a float32, as GradScaler's `_scale` tensor: it stops growing at the largest
    // power of two a float holds (2^127 with factor 2) and backs off through the subnormals to 0.
    double scale() const { return mode_ == LossScalingMode::Off ? 1.0 : static_cast<double>(scale_); }
    int64_t growth_tracker() const { return growth_tracker_; }
    bool enabled() const { return mode_ != LossScalingMode::Off; }
    LossScalingMode mode() const { return mode_; }
    const LossScalingConfig& config() const { return config_; }

    // After each backward: updates the scale. The optimizer step must be skipped unless the
    // outcome is Clean or Grew. Static scaling skips a non-finite gradient too. With scaling
    // off the trainer never asks (nor checks the gradients): a non-finite gradient reaches the
    // optimizer, as in PyTorch without a GradScaler, and the watchers report the divergence.
    // Dynamic mode is ATen's _amp_update_scale_ (AmpGradScalerKernels.cpp) to the bit:
    //   found_inf: scale = float(double(scale) * backoff_factor), rounded to nearest even, so
    //              2^-149 * 0.5 becomes 0; growth_tracker = 0;
    //   else after growth_interval clean steps: grown = float(double(scale) * growth_factor);
    //              the scale takes it only if it is finite (2^127 * 2 stays 2^127, outcome Clean);
    //              growth_tracker = 0 either way.
    // Mantissa's additions, both off by default: a backed-off scale below min_scale is raised to
    // float(min_scale); hysteresis > 1 tolerates that many overflows before backing off.
    Outcome update(bool found_inf);

    struct State {
        double scale;
        int64_t growth_tracker;
        int64_t overflows_left;
        bool operator==(const State&) const = default;
    };
    State state() const { return {static_cast<double>(scale_), growth_tracker_, overflows_left_}; }
    void restore(const State& s)
    {
        // A static scale is its init_scale, whatever the state held: a checkpoint of a run whose
        // resume sets another init_scale, or another mode, trains with the one it asks for.
        if (mode_ != LossScalingMode::Static) scale_ = static_cast<float>(s.scale); // float32 in a checkpoint: exact
        // Within this run's settings: a resume that shortens growth_interval (or hysteresis)
        // left the counter past it, and the growth test (==) never fired again. A counter past
        // the new interval grows at the next clean step.
        growth_tracker_ = std::min(s.growth_tracker, config_.growth_interval - 1);
        overflows_left_ = std::min(s.overflows_left, config_.hysteresis);
    }

private:
    LossScalingMode mode_;
    LossScalingConfig config_;
    float scale_;
    int64_t growth_tracker_ = 0;
    int64_t overflows_left_; // Megatron's hysteresis tracker
};

} // namespace mantissa
