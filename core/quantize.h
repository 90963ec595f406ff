// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Fake quantisation: round FP32 values to a format exactly as the hardware would, and hand
// them back as FP32, so an FP32 GEMM on the result computes what a BF16/FP16/FP8 tensor
// core computes (exact products, FP32 accumulation) up to summation order.

#include <torch/torch.h>

#include "number_format.h"

namespace mantissa {

// What happens to values beyond the format's max finite value.
enum class Overflow {
    Saturate,  // clamp to +-max first, as TransformerEngine and torchao do for FP8
    Propagate, // IEEE: +-inf where the format has it; E4M3 has none and gives NaN (OCP non-saturating)
};

// Rounds to `format` (round-to-nearest-even, subnormals kept; TF32 rounds ties away from zero
// like cvt.rna.tf32.f32) and returns FP32. The casts are LibTorch's own, so emulated and
// native runs round identically; overflow is handled here explicitly because LibTorch
// versions differ (2.13 saturates float->E4M3 casts, older ones gave NaN).
//
// Auto: a contiguous FP32 CPU tensor that needs no gradient (or any under no-grad) takes one
// fused pass for BF16 and for saturated FP8 (fp8_rounder.h: the same bits, NaN payloads
// aside); BF16 also for strided ones, in the layout LibTorch's cast gives; everything else,
// and TensorOps, takes LibTorch's casts.
enum class RoundKernel { Auto, TensorOps };
torch::Tensor round_to_format(const torch::Tensor& x, NumberFormat format, Overflow overflow,
                              RoundKernel kernel = RoundKernel::Auto);

// round_to_format(y, format, Propagate) for a result nothing else refers to (a GEMM's fresh
// output): BF16 rounding of a contiguous FP32 CPU tensor whose storage no other tensor shares
// happens in place, without a second buffer to allocate, fault in and write. The same values.
torch::Tensor round_result_to_format(torch::Tensor y, NumberFormat format);

// The per-tensor FP8 cast the emulator makes, round(x * scale) * (1 / scale) with saturation,
// as round_to_format(x * scale, format, Saturate) * (1 / scale) computes it: one fused pass
// when x is a contiguous FP32 CPU tensor that needs no gradient or runs under no-grad (Auto),
// else tensor ops.
torch::Tensor scaled_round_saturated(const torch::Tensor& x, float scale, NumberFormat format,
                                     RoundKernel kernel = RoundKernel::Auto);

// max |x| with NaN skipped (0 when empty or all NaN), as a () FP32 tensor on x's device; one
// parallel pass on the CPU (Auto).
torch::Tensor amax_ignoring_nan(const torch::Tensor& x, RoundKernel kernel = RoundKernel::Auto);

// TF32 rounding of FP32 bit patterns (ties away from zero), exposed for tests.
torch::Tensor round_to_tf32(const torch::Tensor& x);

} // namespace mantissa
