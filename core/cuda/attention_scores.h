// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The attention max logit of a telemetry step (Wortsman et al. 2023) without the scores: the
// largest |q.k| over the causal pairs of 16-bit heads, from one kernel that multiplies 16x16
// tiles on the tensor cores (wmma, FP32 sums) and keeps only each lane's largest magnitude.
// The route it replaces (gpt_model.cpp, max_abs_over_blocks) writes the FP32 scores a block of
// queries at a time and reads them back: about 0.8 GB and a hundred launches a layer of
// GPT-2 small, a dozen of them ATen ops with their host-side dispatch. Built only with
// MANTISSA_CUDA_KERNELS; a probe holds it to that route before use (gpt_model.cpp).

#include <torch/torch.h>

namespace mantissa::cuda_kernels {

// Whether the kernel takes these heads: q and k (B, H, T, D) of one 16-bit dtype on the
// kernels' device, the same shape, D one of 16, 32, 64 or 128, T a multiple of 16, and at
// most 65535 heads in all.
bool causal_max_abs_score_takes(const torch::Tensor& q, const torch::Tensor& k);
// The head widths it takes (16, 32, 64, 128): a probe of another width would only fail.
bool causal_max_abs_score_takes_width(int64_t width);

// () FP32 on q's device, queued without a host sync: the largest |q_i . k_j| over j <= i, NaN
// if any of them is NaN. Views whose rows the tensor cores can load in place (an innermost
// stride of 1, the others 16-byte multiples, 32-byte aligned: a split of the qkv projection
// is one) are read where they are; others are made contiguous first.
torch::Tensor causal_max_abs_score(const torch::Tensor& q, const torch::Tensor& k);

} // namespace mantissa::cuda_kernels
