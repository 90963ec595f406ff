// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// nvfp4's wgrad transform on the CPU in one pass: the 16-point random Hadamard transform of a
// matrix's rows, rounded to BF16 (as TE's kernel writes it), read through any strides.

#include <torch/torch.h>

namespace mantissa {

// round_to_format(random_hadamard_transform(x), BF16, Propagate), with the same bits, for a
// 2-D FP32 CPU matrix whose row length is a multiple of 16. x may be a view in any layout (the
// wgrad operand is a transposed one): each output element reads its 16 inputs where they lie,
// so there is no transposing copy, no GEMM call and no second pass for the rounding.
//
// Its sums are the GEMM's: sixteen fused multiply-adds from +0 in index order, which is what
// MKL's sgemm computes for a 16-deep product (tested against torch::matmul). A product of a
// subnormal and +-1/4 keeps its bits there too.
torch::Tensor hadamard16_bf16_cpu(const torch::Tensor& x);

} // namespace mantissa
