// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// DeviceDelayedScaling::record as one CUDA launch: roll the amax history into a new tensor
// with `amax` in slot 0, reduce it, and compute the next scale (core/scale_rule.h, the host's
// rule), where the LibTorch ops take about fifteen launches per recorded cast. A step of
// GPT-2 small records a few hundred casts, and the launches alone would cost the host more
// time than the GPU's step. Built only with MANTISSA_CUDA_KERNELS.

#include <torch/torch.h>

namespace mantissa::cuda_kernels {

struct RecordedAmax {
    torch::Tensor history; // (length) FP32, new
    torch::Tensor scale;   // () FP32, new
    torch::Tensor inv_scale; // () FP32, new: 1 / scale, as scale.reciprocal() (one launch fewer per cast)
};

// amax: () FP32 on the history's device; history: (length >= 1) FP32 contiguous; previous: ()
// FP32 (the scale kept where the reduced amax is not a positive finite number).
RecordedAmax record_amax(const torch::Tensor& amax, const torch::Tensor& history, const torch::Tensor& previous,
                         float scaled_max, bool use_max);

} // namespace mantissa::cuda_kernels
