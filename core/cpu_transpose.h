// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A contiguous copy of a strided CPU matrix, split over LibTorch's threads.

#include <torch/torch.h>

namespace mantissa {

// x.contiguous(), with the same bits. A 2-D CPU matrix of 2- or 4-byte elements that is not
// contiguous (a transposed view above all) is copied in 32x32 tiles, the tile rows split over
// LibTorch's intra-op threads: LibTorch's own transposing copy (copy_same_type_transpose_) runs
// on one thread, and the block recipes' columnwise casts make two of them per wgrad operand,
// about a sixth of an nvfp4 step of shakespeare-char with two threads (perf, 2026-12-05).
// Anything else is x.contiguous() itself.
torch::Tensor contiguous_on_threads(const torch::Tensor& x);

} // namespace mantissa
