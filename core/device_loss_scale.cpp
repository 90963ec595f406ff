// SPDX-License-Identifier: GPL-3.0-or-later
#include "device_loss_scale.h"

#include <cstdio>
#include <stdexcept>

namespace mantissa {

void DeviceLossScale::follow(const LossScaler& host, const torch::Device& device)
{
    if (!host.enabled()) {
        scale_ = growth_tracker_ = overflows_left_ = torch::Tensor();
        known_.reset();
        device_.reset();
        return;
    }
    const auto now = host.state();
    if (known_ && *known_ == now && config_ == host.config() && device_ == device) return;
    // Filled on the device from Scalars: no copy from the host, so no sync even here. The
    // scale is a float32 value, which the double holds exactly.
    const auto on = torch::TensorOptions().device(device);
    scale_ = torch::full({}, now.scale, on.dtype(torch::kFloat32));
    growth_tracker_ = torch::full({}, static_cast<double>(now.growth_tracker), on.dtype(torch::kFloat64));
    overflows_left_ = torch::full({}, static_cast<double>(now.overflows_left), on.dtype(torch::kFloat64));
    config_ = host.config();
    device_ = device;
    known_ = now;
}

torch::Tensor DeviceLossScale::inverse() const { return scale_.to(torch::kFloat64).reciprocal().to(torch::kFloat32); }

void DeviceLossScale::update(const torch::Tensor& found_inf)
{
    if (!scale_.defined()) return;
    known_.reset(); // until expect(): a step that never got that far reloads the host's state
    if (config_.mode != LossScalingMode::Dynamic) return;
    // LossScaler::update, branch for branch. The products are taken in double and rounded
    // once to float32, as ATen's kernel and to_float32 do (beyond FLT_MAX: inf).
    const auto found = found_inf.to(torch::kFloat32) != 0;
    const auto scale64 = scale_.to(torch::kFloat64);
    const auto overflows = torch::where(found, overflows_left_ - 1, overflows_left_);
    const auto backs_off = found & (overflows <= 0);
    auto backed = (scale64 * config_.backoff_factor).to(torch::kFloat32);
    if (config_.min_scale > 0.0)
        backed = torch::where(backed.to(torch::kFloat64) < config_.min_scale,
                              torch::full({}, static_cast<double>(to_float32(config_.min_scale)), backed.options()), backed);
    const auto tracked = growth_tracker_ + 1;
    const auto growth_due = ~found & (tracked == static_cast<double>(config_.growth_interval));
    const auto grown = (scale64 * config_.growth_factor).to(torch::kFloat32);
    const auto grows = growth_due & torch::isfinite(grown); // ATen grows only to a finite scale
    scale_ = torch::where(backs_off, backed, torch::where(grows, grown, scale_));
    growth_tracker_ = torch::where(found | growth_due, torch::zeros_like(tracked), tracked);
    overflows_left_ = torch::where(growth_due, torch::full_like(overflows, static_cast<double>(config_.hysteresis)), overflows);
}

torch::Tensor DeviceLossScale::state_tensor() const
{
    return torch::stack({scale_.to(torch::kFloat64), growth_tracker_, overflows_left_});
}

void DeviceLossScale::check(const LossScaler& host, const double* read) const
{
    const auto s = host.state();
    const LossScaler::State device{read[0], static_cast<int64_t>(read[1]), static_cast<int64_t>(read[2])};
    if (device == s) return;
    char text[256];
    std::snprintf(text, sizeof text,
                  "the loss scale on the device (%a, tracker %lld, overflows left %lld) parted from the host's "
                  "(%a, %lld, %lld): a bug in Mantissa, please report it",
                  device.scale, static_cast<long long>(device.growth_tracker),
                  static_cast<long long>(device.overflows_left), s.scale, static_cast<long long>(s.growth_tracker),
                  static_cast<long long>(s.overflows_left));
    throw std::logic_error(text);
}

void DeviceLossScale::expect(const LossScaler& host)
{
    if (scale_.defined()) known_ = host.state();
}

} // namespace mantissa
