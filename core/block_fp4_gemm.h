// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// NVFP4 and MXFP4 on Blackwell's FP4 tensor cores (sm_100): LibTorch's block-scaled FP4 GEMM
// multiplying the E2M1 codes and block scales of operands the emulator has already rounded, as
// blockwise_fp8.h does for fp8-block on Hopper. Internal: LibTorch.
//
// UNTESTED ON HARDWARE: no Blackwell GPU has run this. It follows LibTorch 2.11's conventions as
// read from PyTorch's sources and tests (docs/EXECUTORS.md), a start-up probe with a known
// answer decides whether a process uses it, and the backend table says "untested". On Hopper
// and on a CPU it is never taken; the CPU tests hold the split, the packing and the scale
// layout to the emulator and to PyTorch's own reference (tests/data/block_formats).

#include <torch/torch.h>

namespace mantissa {

// Rows of E2M1 codes, each `block` along the row (K) sharing a scale.
struct Fp4BlockOperand {
    torch::Tensor codes;  // (R, K) uint8 E2M1 codes (bit 3 the sign), one a value
    torch::Tensor scales; // (R, K / block) FP32: nvfp4 the E4M3 block scales, mxfp4 powers of two;
                          // NaN for a block holding Inf or NaN
    torch::Tensor global; // () FP32, nvfp4: the tensor's decode, amax * fl(1/2688); mxfp4: undefined
    bool nvfp4 = true;
    int64_t block() const { return nvfp4 ? 16 : 32; }
};

// mxfp4's values (R, K), K a multiple of 32: per block, codes times 2^e with e the largest
// exponent that keeps the block's codes on E2M1's grid (its largest |value| / 2^e in [4, 8),
// at least 2^-127). Exact, from the values alone: with a power of two per block any such e
// decomposes them, whatever e the cast chose.
Fp4BlockOperand split_mxfp4_blocks(const torch::Tensor& values);

// nvfp4's values (R, K), K a multiple of 16, with the cast's E4M3 block scales (R, K / 16) and
// its tensor amax: codes = the E2M1 value nearest values / nvfp4_value_multiplier(scales,
// amax), whose products with the multipliers are the values bit for bit. A block of zeros
// (scale 0) keeps its signed zeros as codes.
Fp4BlockOperand split_nvfp4_blocks(const torch::Tensor& values, const torch::Tensor& block_scales,
                                   const torch::Tensor& tensor_amax);

// Whether a cast's kept block scales (R, K / 16) describe `operand`, a GEMM operand that views
// the cast's data, as split_nvfp4_blocks reads it: R rows of 16-blocks along a contiguous K.
// A square weight's transpose has the sizes but not the rows (its blocks run down the cast's
// columns), so the scales would be other tiles'.
bool nvfp4_scales_fit(const torch::Tensor& block_scales, const torch::Tensor& operand);

// The FP32 values the tensor cores multiply: codes * scale (* global). mxfp4: the emulator's
// values bit for bit. nvfp4: codes * s * (amax * fl(1/2688)), within 2 FP32 ulps of the
// emulator's codes * ((s * amax) * fl(1/2688)) (each rounds twice; more where amax < ~1e-36
// makes the multipliers subnormal: 24 ulps at 1e-37).
torch::Tensor join_fp4_blocks(const Fp4BlockOperand& operand);

// (R, K) codes as LibTorch's float4_e2m1fn_x2 bytes (R, K / 2): the lower index in the low nibble.
torch::Tensor pack_e2m1_pairs(const torch::Tensor& codes);

// A (R, C) matrix of scale bytes (uint8) in cuBLAS's block-scaling layout, flat: zero-padded
// to (a multiple of 128, a multiple of 4), then 128 x 4 tiles each written as 32 x 16
// (to_blocked in PyTorch's torch/testing/_internal/common_quantized.py).
torch::Tensor swizzled_scale_bytes(const torch::Tensor& bytes);

// a (M, K) times bt (N, K)^T: (M, N) BF16. CUDA: LibTorch's block-scaled FP4 GEMM (nvfp4 through
// _scaled_mm_v2 with the two tensor decodes, mxfp4 through _scaled_mm). Elsewhere the FP32
// product of the joined operands rounded to BF16 (what the CPU tests run).
torch::Tensor fp4_block_mm(const Fp4BlockOperand& a, const Fp4BlockOperand& bt);

// Whether this process's GPU runs fp4_block_mm for nvfp4 (or mxfp4): compute capability 10.x
// and a probe's products within their bound of the FP64 answer (false without CUDA, or with
// MANTISSA_FP4_GEMM=0 in the environment).
bool fp4_block_mm_available(bool nvfp4);

} // namespace mantissa
