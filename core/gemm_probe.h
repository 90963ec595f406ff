// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What the start-up probes of the block-scaled GEMMs share (blockwise_fp8.cpp on Hopper,
// block_fp4_gemm.cpp on Blackwell): their operands and the bound they hold a product to.
// Internal: LibTorch.

#include <torch/torch.h>

namespace mantissa {

// A (rows, cols) FP32 operand on the GPU from a formula (a probe draws nothing from any
// generator), with a binade per 1 x `block` block that differs from its neighbours' along both
// dimensions, so that a scale applied to another block shows.
torch::Tensor gemm_probe_operand(int64_t rows, int64_t cols, int64_t block, float frequency, float salt);

// How far a probe's product y of x (M, K) and w (N, K) lies past its bound, against the FP64
// answer (plus `bias`, if defined): `accumulation` of the sum of its products' magnitudes (what
// a tensor core's narrower running sum may lose), plus `output_step` of the answer (an output
// format's rounding). Positive: past it; a layout or scale mistake is off by a good part of
// the answer.
double gemm_excess_past_bound(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& bias, double accumulation, double output_step);

} // namespace mantissa
