// SPDX-License-Identifier: GPL-3.0-or-later
#include "loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mantissa {

float to_float32(double value)
{
    // FLT_MAX + half an ulp (2^103) is the tie that rounds to even, i.e. to infinity.
    constexpr double kOverflow = 0x1.ffffffp127;
    if (std::isnan(value)) return std::numeric_limits<float>::quiet_NaN();
    constexpr float kInf = std::numeric_limits<float>::infinity();
    if (std::fabs(value) >= kOverflow) return value > 0 ? kInf : -kInf;
    return static_cast<float>(value);
}

LossScaler::LossScaler(const LossScalingConfig& config)
    : mode_(config.mode), config_(config), scale_(to_float32(config.init_scale)), overflows_left_(config.hysteresis)
{
}

LossScaler::Outcome LossScaler::update(bool found_inf)
{
    if (mode_ != LossScalingMode::Dynamic) return found_inf ? Outcome::Skipped : Outcome::Clean;
    // Megatron's DynamicGradScaler: the hysteresis budget is refilled only when the scale
    // grows, so after it is spent every overflow backs off. hysteresis 1 is PyTorch's rule.
    if (found_inf) {
        growth_tracker_ = 0;
        if (--overflows_left_ > 0) return Outcome::Skipped;
        scale_ = to_float32(static_cast<double>(scale_) * config_.backoff_factor);
        if (static_cast<double>(scale_) < config_.min_scale) scale_ = to_float32(config_.min_scale);
        return Outcome::SkippedAndBackedOff;
    }
    if (++growth_tracker_ == config_.growth_interval) {
        growth_tracker_ = 0;
        overflows_left_ = config_.hysteresis;
        const float grown = to_float32(static_cast<double>(scale_) * config_.growth_factor);
        if (std::isfinite(grown)) { // ATen grows only to a finite scale
            scale_ = grown;
            return Outcome::Grew;
        }
    }
    return Outcome::Clean;
}

} // namespace mantissa
