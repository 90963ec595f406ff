// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The unfused attention's scaling and causal mask in one pass, forward and backward.

#include <torch/torch.h>

namespace mantissa {

// (scores * scale).masked_fill(triu(ones(T, T), 1), -inf) for scores (..., T, T), and its
// gradient g * scale with the future set to 0, with the same bits as those ops (the scale is
// applied as the FP32 value the ops use). On an FP32 CPU tensor one pass each way instead of
// three (the product, then masked_fill's copy and its fill; in the backward masked_fill's copy
// and fill, then the product); elsewhere the ops themselves.
torch::Tensor scaled_causal_mask(const torch::Tensor& scores, double scale);

} // namespace mantissa
