// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A fused FP8 cast for CUDA tensors: codes = cast(x * scale) and amax = max |x| (NaN skipped)
// in one pass over x, where LibTorch's ops take several (the amax, then the scaled cast), and
// the amax alone in one pass for current scaling, whose scale must be known before the cast. Built
// only when CMake finds a CUDA compiler and a CUDA LibTorch (MANTISSA_CUDA_KERNELS); the
// conversion is c10's own, so the codes are those of x.mul(scale).to(fp8) bit for bit.

#include <torch/torch.h>

namespace mantissa::cuda_kernels {

// x: CUDA, contiguous, FP32/BF16/FP16. scale: () FP32 on x's device. `e4m3` else E5M2;
// `saturate` clamps to +-max first, otherwise E4M3 values past 464 become NaN (as
// to_fp8_codes). Returns the codes (x's shape) and writes the amax (() FP32) to `amax`.
// `paired`: convert two values at once with the hardware's instruction (sm_89 and newer,
// fp8_pair.h), else, and on older devices, with c10's conversion: the same bits, which the
// start-up probe confirms before the paired conversion is used.
torch::Tensor fused_scale_cast_amax(const torch::Tensor& x, const torch::Tensor& scale, bool e4m3, bool saturate,
                                    torch::Tensor& amax, bool paired = true);

// fused_scale_cast_amax of a 2-D x (rows, cols) that also writes codes_t = codes.t().contiguous()
// (cols, rows) in the same pass (TransformerEngine's cast-transpose). `tiles_64`: whether x may
// take the 64 x 64 kernel (sides multiples of 64, 16-byte aligned data; its own probe, since it
// converts with the hardware's paired instruction), else the general 32 x 32 one, which converts
// as `paired` says (as fused_scale_cast_amax).
// `column_sums`, where given: where the 64 x 64 kernel runs, x summed over its rows, (cols)
// FP32 in a fixed order (each tile's rows r and r + 32 added, the 32 pairs in row order, then
// the tiles summed by a LibTorch reduction), from the same read of x (a bias's gradient);
// left undefined where the general kernel runs.
torch::Tensor fused_scale_cast_amax_transpose(const torch::Tensor& x, const torch::Tensor& scale, bool e4m3,
                                              bool saturate, torch::Tensor& amax, torch::Tensor& codes_t,
                                              bool tiles_64 = true, bool paired = true,
                                              torch::Tensor* column_sums = nullptr);

// Whether u takes fused_gelu_scale_cast_amax_transpose: 2-D, contiguous, BF16 or FP16, sides
// multiples of 64, data 16-byte aligned, on the kernels' device.
bool gelu_cast_transpose_takes(const torch::Tensor& u);

// fused_scale_cast_amax_transpose of at::gelu(u) (the exact, erf GELU) through the 64 x 64
// kernel, from one read of u: each value's GELU is computed in FP32 as ATen computes it and
// rounded to u's dtype as at::gelu stores it, then cast; the amax is that of those values.
// gelu(u) itself is never written (TransformerEngine's fused activation cast, for the input of
// the linear after a GELU). u as gelu_cast_transpose_takes says; whether the device's GELU is
// at::gelu's to the bit is for the caller's probe to know.
torch::Tensor fused_gelu_scale_cast_amax_transpose(const torch::Tensor& u, const torch::Tensor& scale, bool e4m3,
                                                   bool saturate, torch::Tensor& amax, torch::Tensor& codes_t);

// max |x| over the non-NaN elements (0 for an empty or all-NaN x), () FP32 on x's device, in
// one pass: current scaling's amax, read before its cast. x as above.
torch::Tensor amax_ignoring_nan(const torch::Tensor& x);

} // namespace mantissa::cuda_kernels
