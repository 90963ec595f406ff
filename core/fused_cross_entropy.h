// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The language model's loss on a GPU over 16-bit logits: Mantissa's own two kernels
// (core/cuda/cross_entropy.h) in place of autocast's widen + log_softmax + nll_loss, once a
// probe has held them to those ops. Internal: LibTorch.

#include <torch/torch.h>

namespace mantissa {

// Whether lm_cross_entropy takes the kernels on this process's GPU: built, a GPU, and its
// probe (the loss to 1e-5, every gradient to a step of its 16-bit format, ignored rows zero)
// passed.
bool fused_cross_entropy_available();

// mean over the rows of -log softmax(logits)[target], in FP32: logits (R, V) contiguous CUDA
// BF16 or FP16, targets (R) int64. Its backward hands back the logits' gradient in their dtype.
// `log_z`, when given, receives each row's log sum exp ((R) FP32), which the loss computes anyway.
torch::Tensor fused_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                  torch::Tensor* log_z = nullptr);

// Whether GptImpl::loss takes fused_cross_entropy for these logits.
inline bool takes_fused_cross_entropy(const torch::Tensor& logits)
{
    const bool half = logits.scalar_type() == torch::kBFloat16 || logits.scalar_type() == torch::kHalf;
    return logits.is_cuda() && half && fused_cross_entropy_available();
}

} // namespace mantissa
