// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// fp8-block on Hopper's tensor cores: cuBLAS's blockwise-scaled FP8 GEMM (at::_scaled_mm with
// FP32 scales per 1x128 block, CUDA 12.9+, sm_90) multiplying the operands the emulator has
// already rounded. Internal: LibTorch.
//
// Why from the rounded values: with power-of-two block scales (fp8-block's default, TE's) every
// value the emulator hands the GEMM is an E4M3 code times a power of two shared by its block, so
// the codes and scales come back exactly, and 1x128 blocks along K serve every GEMM: a 128x128
// weight tile is 128 such blocks with one scale. The emulator's telemetry, caches and rounding
// stay as they are; only the product runs on the tensor cores (no fast accumulation: each
// 128-block's sum is promoted to FP32 with its scales, as the recipe's split accumulation
// asks). It differs from the emulator's FP32 product by the order of the additions and by the
// tensor cores' narrower accumulator within a block (about 14 bits, DeepSeek-V3 section 3.3.2).

#include <string>

#include <torch/torch.h>

namespace mantissa {

// FP32 rows of E4M3 codes, each 128 along the row (K) sharing a power-of-two scale.
struct Fp8BlockOperand {
    torch::Tensor codes;  // (R, K) Float8_e4m3fn
    torch::Tensor decode; // (R, K / 128) FP32 powers of two: values = codes * decode
};

// Splits `values` (R, K), K a multiple of 128, into codes and the smallest power-of-two scale
// per block that holds them. Exact (codes * decode == values, bit for bit) for values that are
// E4M3 codes times a power of two per block of at least 2^-140; a block of zeros gets scale 1,
// a block with a NaN stays NaN.
Fp8BlockOperand split_fp8_blocks(const torch::Tensor& values);
torch::Tensor join_fp8_blocks(const Fp8BlockOperand& operand); // the FP32 values again

// a (M, K) times b^T, b given as its rows bt (N, K): the (M, N) FP32 product. On CUDA the
// blockwise _scaled_mm; elsewhere the dequantized FP32 product (what the tests can run).
// `bias` (N) FP32, added to the FP32 product (on a CPU inside the product, as the emulator's
// addmm adds it).
torch::Tensor blockwise_fp8_mm(const Fp8BlockOperand& a, const Fp8BlockOperand& bt, const torch::Tensor& bias = {});

// The same product with cuBLAS's epilogue adding `bias` (N, taken as BF16) to the FP32 sums and
// rounding to BF16 itself: (M, N) BF16, one 2-byte write where the FP32 product, the bias and the
// rounding took three passes. CUDA only, where blockwise_fp8_bf16_output_available().
torch::Tensor blockwise_fp8_mm_bf16(const Fp8BlockOperand& a, const Fp8BlockOperand& bt, const torch::Tensor& bias = {});
// Whether this process's GPU takes that call: the probe's products with a bias, within the
// FP32 product's bound plus half a BF16 step (false without CUDA or if cuBLAS refuses the call).
bool blockwise_fp8_bf16_output_available();

// A weight's 128x128 tile scales (R/128, K/128) as the 1x128 scales of its rows (R, K/128):
// each tile is 128 blocks of one row that share its scale.
torch::Tensor tile_decode_as_rows(const torch::Tensor& tile_decode, int64_t rows);

// Whether this process's GPU runs blockwise_fp8_mm natively: a product with a known answer,
// tried once (false without CUDA, before CUDA 12.9, off sm_90, or if the answer is wrong).
bool blockwise_fp8_available();

// Which of Mantissa's own fp8-block CUDA kernels this process uses, after their probes:
// "block cast: yes, tile cast: yes, block split: yes"; "not built" without them, "no GPU" without one.
std::string fp8_block_kernels_report();

} // namespace mantissa
