// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The weights' update ratio on the CPU in one pass: ||w_before|| and ||w_after - w_before|| of
// every weight, with no tensor of differences, on all of LibTorch's threads.

#include <vector>

#include <torch/torch.h>

namespace mantissa {

// Whether update_norms_cpu takes these pairs: FP32 CPU tensors, contiguous, of equal sizes.
bool update_norms_cpu_takes(const std::vector<torch::Tensor>& befores, const std::vector<torch::Tensor>& afters);

// (weights, 2) FP64: sqrt(sum before^2) and sqrt(sum (after - before)^2) of each pair, summed in
// FP64 (each difference of two floats is exact there). The sums go by fixed chunks merged in
// order, so the result does not depend on the thread count.
torch::Tensor update_norms_cpu(const std::vector<torch::Tensor>& befores, const std::vector<torch::Tensor>& afters);

} // namespace mantissa
