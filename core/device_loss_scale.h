// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The loss scaler's state on the training device, so that no part of a step waits for the
// host: the backward multiplies by the device scale, the unscaling divides by it, the fused
// AdamW skips on the device's found_inf, and the scale is updated by LossScaler's rule
// (PyTorch's _amp_update_scale_, plus Megatron's hysteresis and minimum) as tensor ops queued
// after the finite check. The host's LossScaler stays the policy that the run reports and
// checkpoints: it replays each step's found_inf from the step's one read, and the two must
// agree to the bit: each step's read holds the device's state from the step before against
// the host's, and test_numerics and bench/cuda_checks replay random sequences on both.
// Internal: includes LibTorch.

#include <optional>

#include <torch/torch.h>

#include "loss_scaler.h"

namespace mantissa {

class DeviceLossScale {
public:
    // Loads the host scaler's state onto `device` when it is not what the device holds: the
    // first step, a checkpoint, a change of mode, data-parallel ranks taking rank 0's state.
    // Filled on the device, only then; otherwise nothing.
    void follow(const LossScaler& host, const torch::Device& device);

    // () FP32: the scale of this step's backward. Undefined while scaling is off.
    const torch::Tensor& scale() const { return scale_; }
    // () FP32: 1 / scale, rounded once from double (as GradScaler's unscale_).
    torch::Tensor inverse() const;
    // Queued: the state after a step whose gradients held an inf or NaN when `found_inf`
    // (() FP32, 1 or 0) is 1. Static and off modes never move.
    void update(const torch::Tensor& found_inf);
    // (3) FP64 on the device: scale, growth tracker, overflows left. The step reads it with
    // its norms, before its own update is queued: the state the step used.
    torch::Tensor state_tensor() const;
    // `read`: state_tensor()'s values, read before this step's update; `host`: the host's
    // scaler before its replay of this step. Equal unless the device parted from the host's
    // rule in the step before (a bug, never data): then throws std::logic_error.
    void check(const LossScaler& host, const double* read) const;
    // After the host replayed the step: the device made the same move (check() holds it to
    // that at the next step's read), so follow() need not load the state again.
    void expect(const LossScaler& host);

private:
    LossScalingConfig config_;            // the rule loaded with the state, which update() follows
    std::optional<torch::Device> device_; // where the state was loaded, as the trainer names it
    std::optional<LossScaler::State> known_; // what the device holds, as of the last load or expect()
    torch::Tensor scale_;          // () FP32
    torch::Tensor growth_tracker_; // () FP64, an integer
    torch::Tensor overflows_left_; // () FP64, an integer
};

} // namespace mantissa
