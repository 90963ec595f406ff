// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// fp8-block's two per-operand passes on CUDA, one launch each, where LibTorch's ops take about
// seven full-size FP32 passes (the cast) and five (the split into codes): on an H200 on
// 2026-12-04 a step of fp8-block took 4.4x one of FP8 delayed scaling, almost all of it in
// these ops around cuBLAS's blockwise GEMM. Each kernel follows its ops' arithmetic to the bit
// (block_scaling.cpp's fp8_block_tensor_ops, blockwise_fp8.cpp's split_fp8_blocks), and is
// used only after a probe has held it to them. Built only with MANTISSA_CUDA_KERNELS.

#include <torch/torch.h>

namespace mantissa::cuda_kernels {

struct Fp8BlockRows {
    torch::Tensor values;    // (R, C) FP32: the E4M3/E5M2 codes times their block's decode scale
    torch::Tensor codes;     // with `codes` asked for, instead of values: (R, C) Float8_e4m3fn/e5m2, NaN
                             // (0x7F) throughout a block holding Inf or NaN; codes * scale_inv are the values
    torch::Tensor scale_inv; // (R, ceil(C / 128)) FP32: 1 / scale; NaN for a block holding Inf or NaN
    torch::Tensor amax;      // (R, ceil(C / 128)) FP32: NaN where the block holds a NaN, else max |x|
};

// fp8-block's 1x128 cast of a contiguous FP32, BF16 or FP16 (R, C) CUDA tensor, the values
// FP32 (C need not be a multiple of 128: the last block is short, as though padded with zeros).
// A 16-bit operand is read as it arrives: widening it first was a pass for nothing. `fp8_max` 448 (E4M3) or 57344
// (E5M2), saturating. `paired_conversion`: round with the hardware's conversion of two values
// at once (sm_89 and newer; elsewhere, or false, c10's conversion): the same bits, which the
// start-up probe confirms before it is used.
// `codes`: write the codes (Fp8BlockRows::codes) instead of the values, for a GEMM that takes
// them with their scales as they are (layer_gemm_blockwise.cpp).
Fp8BlockRows fp8_block_rows(const torch::Tensor& x, bool e4m3, bool power_of_two, bool paired_conversion = true,
                            bool codes = false);

// fp8-block's 128x128 cast of a weight, as fp8_block_rows with one scale per tile: scale_inv
// and amax are (ceil(R / 128), ceil(C / 128)); short edge tiles as though padded with zeros.
Fp8BlockRows fp8_block_tiles(const torch::Tensor& x, bool e4m3, bool power_of_two, bool paired_conversion = true,
                             bool codes = false);

// Both of fp8-block's 1x128 casts of a contiguous FP32, BF16 or FP16 (R, C) CUDA tensor, R and C
// multiples of 128, as codes, from one read: `rows` is fp8_block_rows(x, ..., codes = true)
// and `cols` is fp8_block_rows(x^T, ..., codes = true), codes (C, R) and scales (C, R / 128):
// the wgrad GEMM's operand, without a transposing copy of x.
struct Fp8BlockRowsCols {
    Fp8BlockRows rows, cols;
};
Fp8BlockRowsCols fp8_block_rows_cols(const torch::Tensor& x, bool e4m3, bool power_of_two, bool paired_conversion = true);

// split_fp8_blocks: codes (R, K) Float8_e4m3fn and decode (R, K / 128) FP32 of a contiguous
// FP32 (R, K) CUDA tensor, K a multiple of 128.
// `paired_conversion` as for the casts: the codes from the hardware's paired conversion.
std::pair<torch::Tensor, torch::Tensor> split_fp8_blocks(const torch::Tensor& values, bool paired_conversion = true);

} // namespace mantissa::cuda_kernels
