// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A tensor's statistics row (stats_row.h) on its CUDA device in one pass over the data, where
// the LibTorch ops of tensor_stats.cpp take a dozen passes, an int64 bin index per element and
// a scatter_add that every element of a binade contends on. Built only with
// MANTISSA_CUDA_KERNELS. The per-value rules are stats_row.h's, shared with the fused CPU pass;
// the sums are made in a fixed order (a partial per block, then a fixed tree over the blocks),
// so one tensor gives the same row on every run on the same GPU. Before it is used, a probe
// holds it to the tensor ops (tensor_stats.cpp, fused_cuda_stats_available).

#include <torch/torch.h>

#include "../stats_row.h"

namespace mantissa::cuda_kernels {

// x: CUDA, any float dtype (FP32/BF16/FP16 are read as they are). dequantized: undefined (not
// compared), or x's cast with x's numel on x's device. `comparison` as the CPU pass takes it;
// device_scale, when defined, is a () tensor on x's device that replaces comparison.scale
// (native FP8 keeps its per-tensor scale there). Returns stats_row::kSize doubles on x's
// device, queued on the current stream without a host sync.
// dequantized may also be FP8 codes (read as 1 byte each): their values are code * codes_scale
// (a () FP32 tensor on x's device, as Fp8Tensor::dequantized() multiplies them), or
// code * codes_scale[its 1x128 block] for codes (R, C) and codes_scale (R, C / 128) (fp8-block's
// casts, as join_fp8_blocks multiplies them), or the codes themselves where codes_scale is
// undefined.
torch::Tensor tensor_stats_row(const torch::Tensor& x, const torch::Tensor& dequantized,
                               const stats_value::CastComparison& comparison, const torch::Tensor& device_scale,
                               const torch::Tensor& codes_scale = {});

} // namespace mantissa::cuda_kernels
