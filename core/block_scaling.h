// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Block-scaled recipes of TransformerEngine 2.x and OCP MX (docs/NUMERICS.md, "Block
// recipes"): fp8-block (Float8BlockScaling, DeepSeek-V3), nvfp4 (NVFP4BlockScaling) and
// mxfp4. Each returns the FP32 values the GEMM multiplies: codes times their decoded scales,
// rounded exactly as the hardware rounds them.
//
// Layout: the 2-D entry points take a matrix whose rows are independent and whose columns run
// along the GEMM's contraction dimension K; blocks lie along K (1xB) or are BxB tiles. A
// dimension that is not a multiple of the block is padded with zeros for the amaxes and cut
// off again (TE pads the same way; zeros never change an amax).
//
// Non-finite rule (all three recipes): a block that holds an Inf or a NaN dequantizes to NaN in
// every element and has a NaN scale, so the overflow reaches the loss scaler's and the
// watchers' finite checks; every other block is quantized as though it were absent (NVFP4's
// per-tensor amax is taken over the finite blocks). A block of zeros gives zeros, signs kept.

#include <cstdint>
#include <optional>
#include <string>

#include <torch/torch.h>

#include "number_format.h"
#include "precision_policy.h"

namespace mantissa {

// What a GEMM operand is, as far as the block recipes care: weights get 2-D tiles (and no
// Hadamard transform), gradients get stochastic rounding under nvfp4.
enum class TensorRole { Activation, Weight, Gradient };

struct BlockQuantized {
    torch::Tensor values;       // dequantized FP32, shape of the input
    // Decode scale of each block (rows/tile_rows, cols/tile_cols), FP32; NaN for a block holding
    // Inf or NaN. nvfp4: the E4M3 block scale s, to be combined with tensor_amax.
    torch::Tensor block_scales;
    torch::Tensor block_amax; // amax of each block, same shape (NaN/Inf for non-finite blocks)
    // nvfp4: the per-tensor amax over the finite blocks, () FP32 on the values' device (read only
    // by telemetry, so nothing waits for it). A block's values are E2M1 codes times
    // (s * amax) * fl(1/2688), as TE's dequantize kernel computes them. Undefined otherwise.
    torch::Tensor tensor_amax;
};

// Stochastic rounding's seed: none (round to nearest even), a host number, a () int64 tensor
// on the operand's device (content_seed_tensor: on a GPU nothing waits for it), or the
// operand's own content_seed, left to the quantizer (of_content: the CPU's fused pass takes
// the sums while it reads the operand for its amaxes). The same 64 bits give the same draws
// on every path.
struct SrSeed {
    SrSeed() = default;
    SrSeed(std::nullopt_t) {}
    SrSeed(uint64_t seed) : host(seed) {}
    SrSeed(std::optional<uint64_t> seed) : host(seed) {}
    explicit SrSeed(torch::Tensor seed) : on_device(std::move(seed)) {}
    static SrSeed of_content()
    {
        SrSeed s;
        s.content = true;
        return s;
    }
    bool stochastic() const { return host.has_value() || on_device.defined() || content; }
    std::optional<uint64_t> host;
    torch::Tensor on_device;
    bool content = false;
};

// How the block quantizers compute. Auto: one fused pass per block on the CPU (the tensor-op
// version costs a dozen kernel launches per operand, which dominates small models), tensor
// ops elsewhere. Both give the same bits (tests/test_block_formats.cpp holds them together).
enum class BlockKernel { Auto, TensorOps, FusedCpu };

// fp8-block. tile_2d: 128x128 tiles (weights), else 1x128. scale = fp8_max / amax (FLT_MAX when
// that overflows), floored to a power of two when `power_of_two`; 1 for a block of zeros.
BlockQuantized quantize_fp8_block_2d(const torch::Tensor& x, NumberFormat format, bool power_of_two, bool tile_2d,
                                     BlockKernel kernel = BlockKernel::Auto);

// fp8-block's 1x128 cast along x's columns (blocks of 128 rows of one column: the wgrad GEMM's
// operands, cast along M), read in place on the CPU. The values are in x's layout and equal
// quantize_fp8_block_2d(x.t(), ...).values.t() bit for bit; block_scales and block_amax are in
// x^T's grid, (cols, ceil(rows / 128)), as that call gives them.
BlockQuantized quantize_fp8_block_columns(const torch::Tensor& x, NumberFormat format, bool power_of_two);

// fp8-block's cast written as its codes rather than its values, for a GEMM that multiplies
// codes with their block scales (cuBLAS's blockwise FP8 GEMM, layer_gemm_blockwise.cpp).
// codes * decode (per block) are quantize_fp8_block_2d's values bit for bit, NaN blocks
// included (their codes are NaN, 0x7F).
struct Fp8BlockCodes {
    torch::Tensor codes;  // (R, C) Float8_e4m3fn or Float8_e5m2
    torch::Tensor decode; // (R, ceil(C / 128)) FP32, or (ceil(R / 128), ceil(C / 128)) for tiles: 1 / scale, NaN
                          // for a block holding Inf or NaN
    torch::Tensor amax;   // same shape: the block's amax (NaN where it holds a NaN)
};
// On a GPU Mantissa's cast kernel writes the codes in one pass (the same probe holds them to
// the ops); elsewhere the tensor ops, stopped before their multiplication by 1 / scale.
Fp8BlockCodes cast_fp8_block_codes(const torch::Tensor& x, NumberFormat format, bool power_of_two, bool tile_2d);
// Both 1x128 casts of x (R, C) as codes: `rows` along C, and `cols` along R, the cast of x^T
// (codes (C, R)), which a wgrad GEMM takes. On a GPU with R and C multiples of 128, one kernel
// reading x once (the same bits, held so by its own probe); elsewhere the two casts above, the
// second of a transposed copy.
struct Fp8BlockCodesBoth {
    Fp8BlockCodes rows, cols;
};
Fp8BlockCodesBoth cast_fp8_block_codes_both(const torch::Tensor& x, NumberFormat format, bool power_of_two);
// "yes (paired conversion)", "yes (c10 conversion)", "NO", "not built" or "no GPU": whether
// cast_fp8_block_codes_both takes its kernel on this process's GPU.
std::string fp8_block_rows_cols_kernel_report();

// The values the fp8-block cast kernels' start-up probes cast, FP32 on the CPU; the CPU tests run
// the kernels on them too (tests/test_cuda_kernels_on_cpu.cpp). Rows: 12 x 300 (two whole 1x128
// blocks and a short one) across the FP32 range, with a block of zeros, one holding a NaN, one
// an Inf, one of subnormals, one reaching FLT_MAX, one whose amax makes 448 / amax overflow,
// ties at E4M3's and E5M2's rounding midpoints. Tiles: 300 x 260 in 3 x 3 128x128 tiles, the
// last row and column short, with a tile of zeros, one holding a NaN, one an Inf, one of
// subnormals, one reaching FLT_MAX, one whose amax is 464 (a scale just under 1), one of
// E5M2's midpoints, and two whose amax lies in a row that the kernel's last warps hold.
torch::Tensor fp8_block_probe_rows();
torch::Tensor fp8_block_probe_tiles();
// 384 x 384 (3 x 3 tiles, every dimension whole blocks, as the rows-and-columns cast takes):
// the tiles' probe and the rows' probe laid in, with column blocks of the smallest subnormal,
// of zeros and of amax 464 besides.
torch::Tensor fp8_block_probe_square();

// Whether quantize_fp8_block_2d's 1x128 casts (or with `tiles` the weights' 128x128 tiles) on
// this process's GPU take Mantissa's own CUDA kernel (core/cuda/fp8_block.h), and how it
// rounds, as its probe against the tensor ops found: "yes (paired conversion)", "yes (c10
// conversion)", "NO"; "not built" or "no GPU".
std::string fp8_block_cast_kernel_report(bool tiles);

// nvfp4. tile_2d: 16x16 tiles, else 1x16. Per-tensor encode scale S = 448*6 / amax; block
// decode scale s = E4M3(amax_block * (S * fl(1/6))); elements E2M1(x * 1 / (s * (1/S))) after a
// clamp to +-6, round-to-nearest-even, or stochastic from a generator seeded with `sr_seed`;
// values E2M1 * ((s * amax) * fl(1/2688)) (TE's dequantize kernel; where s * amax overflows,
// s * (amax * fl(1/2688))).
BlockQuantized quantize_nvfp4_2d(const torch::Tensor& x, bool tile_2d, const SrSeed& sr_seed,
                                 BlockKernel kernel = BlockKernel::Auto);

// What an nvfp4 block's E2M1 codes are multiplied by to give its values, from its E4M3 scale
// s and the tensor amax: (s * amax) * fl(1/2688), or s * (amax * fl(1/2688)) where s * amax
// overflows, in FP32 (the casts' own rule, as tensor ops; shapes broadcast).
torch::Tensor nvfp4_value_multiplier(const torch::Tensor& block_scale, const torch::Tensor& tensor_amax);
// The per-tensor factor of that product as Blackwell's NVFP4 GEMM takes it: amax * fl(1/2688).
torch::Tensor nvfp4_tensor_decode(const torch::Tensor& tensor_amax);

// mxfp4: 1x32 blocks, E8M0 scale 2^e with e = floor(log2 amax) - 2 (OCP MX v1.0, elements
// saturate) or, with `round_scale_up`, e = ceil(log2(amax / 6)) with FP32 arithmetic (TE's
// reference rule: nothing saturates, except where FP32's log2 rounds down onto an integer);
// e clamped to [-127, 127]; a block of zeros gets -127 (2^-127, E8M0 code 0), as TE and torchao.
BlockQuantized quantize_mxfp4_2d(const torch::Tensor& x, bool round_scale_up, BlockKernel kernel = BlockKernel::Auto);

// The 16-point random Hadamard transform along the last dimension (a multiple of 16):
// each run of 16 becomes x . diag(s) . H16 / 4, with TE's fixed sign vector s. Orthogonal:
// applied to both wgrad operands along their common K it leaves dW = dy^T x unchanged.
torch::Tensor random_hadamard_transform(const torch::Tensor& x);

// The uniforms [0, 1) stochastic rounding uses for a padded (rows, cols) operand under `seed`:
// a hash of each element's position (exposed for the tests).
torch::Tensor stochastic_uniforms(uint64_t seed, int64_t rows, int64_t cols);

// A deterministic seed from the tensor's bits: stochastic rounding is then a pure function of
// its input, identical across resumes and executors, with no generator state to checkpoint.
uint64_t content_seed(const torch::Tensor& x);
// The same 64 bits as a () int64 tensor on x's device, computed there: no host sync on a GPU.
torch::Tensor content_seed_tensor(const torch::Tensor& x);

// What telemetry reads from one block-recipe cast (docs/TELEMETRY.md, "Block formats"). Only
// filled on telemetry steps; building it reads the cast's results and changes none of them.
struct BlockCastRecord {
    NumberFormat element_format = NumberFormat::E4M3; // e4m3/e5m2 (fp8-block, mxfp8) or e2m1 (nvfp4, mxfp4)
    NumberFormat scale_format = NumberFormat::FP32;   // e4m3 (nvfp4), e8m0 (mxfp4, mxfp8), fp32 (fp8-block)
    // One per block, FP32. `requested`: the decode scale the block's amax asked for, before the
    // scale format's rounding and limits; `used`: the one it got. A block of zeros is 0 in both
    // (it has no scale that matters), a block holding Inf/NaN is NaN in both.
    torch::Tensor requested_scales, used_scales;
    // () float64, on the operand's device: the blocks whose largest value their scale put past
    // the element format's max by more than half a step, so that the cast saturated it (mxfp4's
    // floor rule: amax / 2^e in [4, 8), from 7 on; mxfp8's: amax / 2^e in [256, 512), past
    // 464 for E4M3; nvfp4 where a block scale in E4M3's subnormals rounded far down). The
    // "_scale" row's overflow (layer_gemm.cpp).
    torch::Tensor clipped_blocks;
    // An nvfp4 wgrad operand that went through the Hadamard transform: the operand as it was
    // quantized (Hadamard basis) and its cast, and the same operand quantized without the
    // transform, so that the two quantization SNRs can be set side by side.
    torch::Tensor transformed, transformed_cast, plain, plain_cast;
};
// `format`: the GEMM's FP8 format (fp8-block's and mxfp8's element format).
BlockCastRecord block_cast_record(const BlockQuantized& q, NumberFormat format, const Fp8Recipe& recipe);

// Whether fp8-block's cast takes `x` as it is rather than widened to FP32: a BF16 or FP16
// operand on a GPU without the outlier split, which its kernel widens value by value, exactly.
// The native executor's linear, quantize_fp8 and quantize_block_recipe all ask this, so that a
// 16-bit activation or gradient reaches the kernel unwidened.
inline bool fp8_block_reads_as_is(const torch::Tensor& x, const Fp8Recipe& recipe)
{
    return fp8_block_reads_16bit(recipe) && x.is_cuda() &&
           (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf);
}

// The dispatch quantize_fp8 uses for Block128, NvFp4 and MxFp4: moves `k_dim` last, flattens
// the rest into rows, picks tiles, Hadamard transform and rounding from the recipe and role.
// An nvfp4 activation or gradient quantized along a K that is not its last dimension is a
// wgrad operand (TE's "columnwise" copy): with recipe.nvfp4_rht and K a multiple of 16 it is
// transformed and handed back *in the Hadamard basis*, as the hardware multiplies it; both
// wgrad operands always share K, so they are transformed together and the product is dW.
// `record` (telemetry steps only) receives what the cast did to the blocks. `nvfp4_scales`,
// where given under nvfp4: the block scales s as the GEMM's rows take them, (x's elements / K,
// K / 16) for the rows of x moved so that K is last (16x16 weight tiles repeated over their
// rows), and the tensor amax (block_fp4_gemm.h splits the values with them).
struct Nvfp4Scales {
    torch::Tensor block_scales; // (rows, K / 16) FP32
    torch::Tensor tensor_amax;  // () FP32
};
torch::Tensor quantize_block_recipe(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe,
                                    int64_t k_dim, TensorRole role, BlockCastRecord* record = nullptr,
                                    Nvfp4Scales* nvfp4_scales = nullptr);

// Block-format health of one quantized tensor, for telemetry and the tests.
struct BlockFormatStats {
    double clipped_block_fraction = 0.0;   // blocks whose largest element exceeded the element maximum after scaling
    double scale_underflow_fraction = 0.0; // non-zero blocks whose scale is 0 (nvfp4's E4M3) or at E8M0's floor 2^-127 (mxfp4)
    double zero_fraction = 0.0;            // non-zero finite values that quantized to zero
    double snr_db = 0.0;                   // 10 log10(sum x^2 / sum (x - q)^2) over finite values; inf when exact
};
// `element`: the format the scaled values are cast to: E2M1 for nvfp4 and mxfp4, the FP8
// format for fp8-block.
BlockFormatStats block_format_stats(const torch::Tensor& x, const BlockQuantized& q, NumberFormat element);

} // namespace mantissa
