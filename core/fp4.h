// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// FP4 E2M1 elements and E8M0 scales, the element and scale formats of NVFP4 and MXFP4
// (OCP Microscaling v1.0; docs/NUMERICS.md "Block formats"). E2M1 holds
// +-{0, 0.5, 1, 1.5, 2, 3, 4, 6} and has neither Inf nor NaN; E8M0 holds 2^-127..2^127 and
// NaN (0xFF) and has no zero. Values are handed back as FP32, like round_to_format.

#include <cstdint>

#include <torch/torch.h>

namespace mantissa {

inline constexpr double kE2M1Max = 6.0;
inline constexpr int kE2M1EmaxElem = 2; // exponent of E2M1's largest binade (4..6)

// Round-to-nearest-even onto the E2M1 grid, saturating at +-6 (+-inf become +-6). NaN stays
// NaN in the FP32 result: the emulator keeps the evidence instead of inventing a code. The
// sign of zero is kept.
torch::Tensor round_to_e2m1(const torch::Tensor& x);

// Stochastic rounding onto the E2M1 grid as Blackwell's cvt.rs does it: |x| + u (hi - lo),
// floored on the grid, for `uniform` u in [0, 1) (same shape). |x| between neighbours lo < hi
// rounds to hi with probability (|x| - lo) / (hi - lo) for a continuous u; the training casts
// draw u = k / 256 (8 random bits, the hardware's), which rounds up with probability
// floor(256 (|x| - lo) / (hi - lo)) / 256. Saturates at +-6 first, as TE clamps before the
// cast; grid values are exact.
torch::Tensor round_to_e2m1_stochastic(const torch::Tensor& x, const torch::Tensor& uniform);

// The 4-bit codes (uint8, 0..15: sign bit 3, exponent bits 2..1, mantissa bit 0) of values
// already on the E2M1 grid, and back. NaN has no code; encode maps it to 0x8 (-0), as
// ml_dtypes does.
torch::Tensor e2m1_encode(const torch::Tensor& on_grid);
torch::Tensor e2m1_decode(const torch::Tensor& codes);

// E8M0: code = exponent + 127 for 2^exponent, exponent in [-127, 127]; 0xFF is NaN.
torch::Tensor e8m0_decode(const torch::Tensor& codes);                   // uint8 -> FP32
torch::Tensor e8m0_encode_exponent(const torch::Tensor& exponent);       // integral FP32 -> uint8
// floor(log2(|x|)) and ceil(log2(|x|)) of positive finite FP32 values, read from the bits
// (exact, unlike log2 near powers of two); subnormals included.
torch::Tensor floor_log2(const torch::Tensor& x);
torch::Tensor ceil_log2(const torch::Tensor& x);
// 2^e for integral e in [-149, 127] (FP32 subnormals included), exact.
torch::Tensor pow2_exact(const torch::Tensor& exponent);

} // namespace mantissa
