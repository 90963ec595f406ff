// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The language-model loss over 16-bit logits in two kernels, one per direction, each reading
// the logits once: autocast's route widens them to FP32 (a copy the size of the logits, 3.3 GB
// for GPT-2 small at batch 16), runs log_softmax over it, keeps that for the backward, and
// there zero-fills, scatters, runs log_softmax's backward and narrows again: eight passes
// over FP32 logits. The arithmetic is autocast's (FP32 throughout, the gradient rounded once
// to the logits' dtype), the sums in another order: a row's reduction is a fixed tree, so a
// run repeats to the bit. Built only with MANTISSA_CUDA_KERNELS.

#include <torch/torch.h>

namespace mantissa::cuda_kernels {

struct CrossEntropyRows {
    torch::Tensor row_loss; // (R) FP32: log sum - (logit of the target - max); 0 where the target is ignored
    torch::Tensor row_max;  // (R) FP32: the row's largest logit
    torch::Tensor log_sum;  // (R) FP32: log sum exp(logit - max)
    torch::Tensor log_z;    // (R) FP32: max + log sum, for telemetry
};

// logits: (R, V) contiguous CUDA BF16 or FP16; targets: (R) int64 on the same device. A target
// equal to `ignore_index` counts for nothing; one outside [0, V) gives NaN.
CrossEntropyRows cross_entropy_rows(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index);

// d loss / d logits of mean(row_loss over the targets not ignored), times grad_loss: (softmax -
// one_hot(target)) * grad_loss / count, rounded to the logits' dtype; rows whose target is
// ignored get zeros, rows whose target is outside [0, V) NaN. row_max and log_sum: the
// forward's; grad_loss and count: () FP32 on the device (no host sync).
torch::Tensor cross_entropy_backward(const torch::Tensor& logits, const torch::Tensor& targets,
                                     const torch::Tensor& row_max, const torch::Tensor& log_sum,
                                     const torch::Tensor& grad_loss, const torch::Tensor& count, int64_t ignore_index);

} // namespace mantissa::cuda_kernels
