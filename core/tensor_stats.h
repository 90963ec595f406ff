// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Numerics of one tensor against one format: the exponent histogram, what the format does
// to it (underflow, subnormals, overflow), and the error of the cast. Computed on the
// telemetry cadence only.

#include <torch/torch.h>

#include "number_format.h"
#include "telemetry.h"

namespace mantissa {

// FP32 exponents of finite non-zero values: floor(log2|x|) from -149 (smallest subnormal)
// to 127, one bin each.
constexpr int kMinExponent = -149;
constexpr int kMaxExponent = 127;

// `x` is the FP32 tensor before the cast, `scale` what it was multiplied by before rounding
// (1 for 16-bit formats), `dequantized` the value the GEMM used (undefined: not cast, e.g.
// FP32 layers, where every fraction is then 0 and the error is 0).
TensorStats compute_tensor_stats(const torch::Tensor& x, NumberFormat format, float scale,
                                 const torch::Tensor& dequantized);

} // namespace mantissa
