// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The attention max logit on the CPU without the scores: each head's causal products in one
// pass, read through the heads' strides, on all of LibTorch's threads.

#include <torch/torch.h>

namespace mantissa {

// max |q_i . k_j| over key j <= query i, every head: a () FP32 CPU tensor, NaN if a product is
// NaN. q, k: FP32 CPU (B, H, T, D) in any layout whose last dimension is contiguous (the heads
// of the qkv projection's output are read in place). Each product is summed in FP32, d = 0, 1,
// ... in order from +0, without fused multiply-adds: the same bits on any thread count and CPU.
torch::Tensor causal_max_abs_score_cpu(const torch::Tensor& q, const torch::Tensor& k);

} // namespace mantissa
