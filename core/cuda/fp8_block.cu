// SPDX-License-Identifier: GPL-3.0-or-later
#include "fp8_block.h"
#include "fp8_pair.h"
#include "grid_walk.h"
#include "launch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>

#include <algorithm>
#include <cfloat>
#include <type_traits>

namespace mantissa::cuda_kernels {
namespace {

constexpr int kBlock = 128;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPerLane = kBlock / 32; // lane l holds values l, l + 32, l + 64, l + 96 of its block

// A warp per 128-value block: the four loads of a lane are each one coalesced read of the warp.
__device__ __forceinline__ float warp_max(float m)
{
    for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    return m;
}

// A block's scale from its amax (fmaxf over |x|, NaN skipped) and whether it holds a NaN:
// fp8_block_tensor_ops' rule, shared by the 1x128 and the 128x128 casts.
struct BlockScale {
    float amax, scale, inv;
    bool finite;
};
__device__ __forceinline__ BlockScale block_scale(float m, bool nan, float fp8_max, bool power_of_two)
{
    BlockScale b;
    b.amax = nan ? __int_as_float(0x7fc00000) : m;
    b.finite = !nan && !isinf(m);
    float scale = fp8_max / b.amax;
    if (isinf(scale)) scale = FLT_MAX;
    if (power_of_two) scale = __int_as_float(__float_as_int(scale) & 0x7f800000); // finite blocks: a normal scale
    if (b.amax == 0.0f) scale = 1.0f;
    b.scale = scale;
    b.inv = 1.0f / scale;
    return b;
}

// A value's magnitude as its bits. Their unsigned order is the magnitudes' order, with Inf above
// every finite value and NaN above Inf, so one integer max per value gives a block's amax and
// whether it holds a NaN (where fmaxf skips NaN and a flag has to be kept beside it).
__device__ __forceinline__ uint32_t magnitude_bits(float v) { return __float_as_uint(v) & 0x7fffffffu; }
__device__ __forceinline__ uint32_t max_bits(uint32_t a, uint32_t b) { return a > b ? a : b; }
__device__ __forceinline__ uint32_t warp_max_bits(uint32_t m)
{
    for (int offset = 16; offset > 0; offset /= 2) m = max_bits(m, __shfl_xor_sync(0xffffffffu, m, offset));
    return m;
}
// block_scale of a block whose largest magnitude bits are m.
__device__ __forceinline__ BlockScale block_scale_of_bits(uint32_t m, float fp8_max, bool power_of_two)
{
    const bool nan = m > 0x7f800000u;
    return block_scale(__uint_as_float(nan ? 0u : m), nan, fp8_max, power_of_two);
}

// Two finite values within the format's range rounded to its grid (to nearest even) and read
// back, as Code(v) read as a float. `paired`: on sm_89 and newer with the hardware's paired
// conversion (fp8_pair.h), a few instructions for two values where c10's two conversions take
// about forty for one; elsewhere, and when the probe finds the two differ, c10's.
template <typename Code>
__device__ __forceinline__ void round_pair(float& a, float& b, bool paired)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    if (paired) return round_pair_in_range<Code>(a, b);
#else
    (void)paired;
#endif
    a = static_cast<float>(Code(a));
    b = static_cast<float>(Code(b));
}

// Two values' codes times 1 / scale: clamp(x * scale) cast to the code; NaN throughout a block
// holding Inf or NaN (whose values alone could be NaN: a finite block's are finite).
template <typename Code>
__device__ __forceinline__ void block_values(float& a, float& b, const BlockScale& s, float fp8_max, bool paired)
{
    if (!s.finite) {
        a = b = __int_as_float(0x7fc00000);
        return;
    }
    const auto clamped = [&](float v) {
        v *= s.scale;
        return v > fp8_max ? fp8_max : (v < -fp8_max ? -fp8_max : v);
    };
    a = clamped(a), b = clamped(b);
    round_pair<Code>(a, b, paired);
    a *= s.inv, b *= s.inv;
}

// The codes of two values of a block, a in the low byte: what block_values rounds them to,
// before its multiplication by 1 / scale (so codes * scale_inv are its values, bit for bit).
// NaN (0x7F) throughout a block holding Inf or NaN.
template <typename Code>
__device__ __forceinline__ uint32_t block_codes(float a, float b, const BlockScale& s, float fp8_max, bool paired)
{
    a *= s.scale, b *= s.scale;
    uint32_t pair;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    // satfinite saturates what the clamp would have clamped (to the same largest code), and a
    // finite block's values are finite: the hardware's own codes, c10's bits.
    if (paired) pair = code_pair_saturated<Code>(a, b);
    else
#endif
    {
        (void)paired;
        const auto clamped = [&](float v) { return v > fp8_max ? fp8_max : (v < -fp8_max ? -fp8_max : v); };
        pair = pack_codes(Code(clamped(a)), Code(clamped(b)));
    }
    return s.finite ? pair : 0x7F7Fu; // a select: a block's finiteness is the same for its whole warp
}

// Where a cast writes: its values (FP32), or with kCodes the codes themselves, one byte each,
// which the blockwise GEMM takes with scale_inv as they are (no split of the values). A
// template flag, so that each kernel's loop holds one of the two stores.
template <typename Code, bool kCodes>
__device__ __forceinline__ void store_block_row(float* v, float* values, uint8_t* codes, int64_t row_start, int64_t c0,
                                                int lane, int64_t cols, const BlockScale& s, float fp8_max, bool paired)
{
    if constexpr (kCodes) {
#pragma unroll
        for (int j = 0; j < kPerLane; j += 2) {
            const uint32_t pair = block_codes<Code>(v[j], v[j + 1], s, fp8_max, paired);
            const int64_t c = c0 + lane + 32 * j;
            if (c < cols) codes[row_start + c] = static_cast<uint8_t>(pair & 0xFFu);
            if (c + 32 < cols) codes[row_start + c + 32] = static_cast<uint8_t>(pair >> 8);
        }
    } else {
#pragma unroll
        for (int j = 0; j < kPerLane; j += 2) block_values<Code>(v[j], v[j + 1], s, fp8_max, paired);
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const int64_t c = c0 + lane + 32 * j;
            if (c < cols) values[row_start + c] = v[j];
        }
    }
}

// fp8_block_tensor_ops, one block per warp: amax (NaN propagates, as amax()'s), the scale
// fp8_max / amax (FLT_MAX where that overflows; floored to a power of two by its exponent bits,
// floor_log2 and pow2_exact of a normal float; 1 for a block of zeros), then
// clamp(x * scale) cast to the code, times 1 / scale (block_scale, block_value). A block
// holding Inf or NaN is NaN throughout, scale_inv included.
template <typename Code, typename In, bool kCodes>
__global__ void __launch_bounds__(kThreads)
    block_rows(const In* __restrict__ x, float* __restrict__ values, uint8_t* __restrict__ codes,
               float* __restrict__ scale_inv, float* __restrict__ amax_out, int64_t rows, int64_t cols,
               int64_t blocks_per_row, float fp8_max,
               bool power_of_two, bool paired)
{
    const int lane = threadIdx.x % 32;
    const int64_t total = rows * blocks_per_row;
    for (BlockWalk w(static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32, static_cast<int64_t>(gridDim.x) * kWarps,
                     blocks_per_row);
         w.b < total; w.next()) {
        const int64_t b = w.b, r = w.r, c0 = w.cb * kBlock;
        const In* in = x + r * cols;
        float v[kPerLane];
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const int64_t c = c0 + lane + 32 * j;
            v[j] = c < cols ? static_cast<float>(in[c]) : 0.0f; // the zero padding of the ops; 16-bit widens exactly
        }
        uint32_t m = 0;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) m = max_bits(m, magnitude_bits(v[j]));
        const BlockScale s = block_scale_of_bits(warp_max_bits(m), fp8_max, power_of_two);
        store_block_row<Code, kCodes>(v, values, codes, r * cols, c0, lane, cols, s, fp8_max, paired);
        if (lane == 0) {
            scale_inv[b] = s.finite ? s.inv : __int_as_float(0x7fc00000);
            amax_out[b] = s.amax;
        }
    }
}

// The same cast with one scale per 128 x 128 tile (a weight's), one CUDA block per tile: warp w
// holds rows w, w + 8, ... of the tile (16 of them), lane l columns l, l + 32, l + 64, l + 96,
// all 64 values in registers, so that x is read once; the amax and the NaN flag are reduced
// over the warps through shared memory, then every thread takes the scale block_rows takes.
constexpr int kTileRowsPerWarp = kBlock / kWarps; // 16

template <typename Code, bool kCodes>
__global__ void __launch_bounds__(kThreads)
    block_tiles(const float* __restrict__ x, float* __restrict__ values, uint8_t* __restrict__ codes,
                float* __restrict__ scale_inv, float* __restrict__ amax_out, int64_t rows, int64_t cols,
                int64_t tile_cols, int64_t tiles,
                float fp8_max, bool power_of_two, bool paired)
{
    __shared__ float warp_amax[kWarps];
    __shared__ int warp_nan[kWarps];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (BlockWalk w(blockIdx.x, gridDim.x, tile_cols); w.b < tiles; w.next()) {
        const int64_t t = w.b, r0 = w.r * kBlock, c0 = w.cb * kBlock;
        float v[kTileRowsPerWarp][kPerLane];
#pragma unroll
        for (int i = 0; i < kTileRowsPerWarp; ++i) {
            const int64_t r = r0 + warp + kWarps * i;
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) {
                const int64_t c = c0 + lane + 32 * j;
                v[i][j] = r < rows && c < cols ? x[r * cols + c] : 0.0f; // the zero padding of the ops
            }
        }
        bool nan = false;
        float m = 0.0f;
#pragma unroll
        for (int i = 0; i < kTileRowsPerWarp; ++i)
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) {
                nan |= isnan(v[i][j]);
                m = fmaxf(m, fabsf(v[i][j])); // fmaxf skips NaN; the flag keeps it
            }
        nan = __any_sync(0xffffffffu, nan);
        m = warp_max(m);
        if (lane == 0) {
            warp_amax[warp] = m;
            warp_nan[warp] = nan ? 1 : 0;
        }
        __syncthreads();
        for (int w = 0; w < kWarps; ++w) {
            m = fmaxf(m, warp_amax[w]);
            nan = nan || warp_nan[w] != 0;
        }
        __syncthreads(); // the next tile refills the shared slots
        const BlockScale s = block_scale(m, nan, fp8_max, power_of_two);
#pragma unroll
        for (int i = 0; i < kTileRowsPerWarp; ++i) {
            const int64_t r = r0 + warp + kWarps * i;
            if (r >= rows) continue;
            store_block_row<Code, kCodes>(v[i], values, codes, r * cols, c0, lane, cols, s, fp8_max, paired);
        }
        if (threadIdx.x == 0) {
            scale_inv[t] = s.finite ? s.inv : __int_as_float(0x7fc00000);
            amax_out[t] = s.amax;
        }
    }
}

// fp8-block's two casts of one operand x (R, C), both multiples of 128, from one read: its
// 1x128 blocks along C (block_rows' codes) and its blocks along R, written transposed (C, R) as
// block_rows would write them for x^T: what a wgrad GEMM takes, R innermost. Where the two
// casts and a transposing copy of x read it three times and wrote it once more. One CUDA block
// per 128 x 128 tile, held as block_tiles holds it (warp w rows w, w + 8, ..., lane l columns
// l, l + 32, l + 64, l + 96): each row of the tile is one row block, each column one column
// block. The column codes are gathered in shared memory, so that each column leaves as 128
// consecutive bytes, a 4-byte store per lane.
// A column's codes in the shared tile, padded by a word: column c starts at word 33 c, so the 32
// columns a warp writes at once fall in 32 different banks, and a column is read back as 32 words.
constexpr int kCodeColumnBytes = kBlock + 4;

template <typename Code, typename In>
__global__ void __launch_bounds__(kThreads)
    block_rows_cols(const In* __restrict__ x, uint8_t* __restrict__ codes, float* __restrict__ scale_inv,
                    float* __restrict__ amax_out, uint8_t* __restrict__ codes_t, float* __restrict__ scale_inv_t,
                    float* __restrict__ amax_t, int64_t rows, int64_t cols, int64_t tile_cols, int64_t tiles,
                    float fp8_max, bool power_of_two, bool paired)
{
    __shared__ uint32_t column_max[kWarps][kBlock]; // magnitude bits
    __shared__ uint32_t column_codes[kBlock * kCodeColumnBytes / 4];
    uint8_t* column_bytes = reinterpret_cast<uint8_t*>(column_codes);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t row_blocks = cols / kBlock, column_blocks = rows / kBlock;
    for (BlockWalk w(blockIdx.x, gridDim.x, tile_cols); w.b < tiles; w.next()) {
        const int64_t tr = w.r, tc = w.cb, r0 = tr * kBlock, c0 = tc * kBlock;
        float v[kTileRowsPerWarp][kPerLane];
#pragma unroll
        for (int i = 0; i < kTileRowsPerWarp; ++i) {
            const In* in = x + (r0 + warp + kWarps * i) * cols + c0;
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) v[i][j] = static_cast<float>(in[lane + 32 * j]); // 16-bit widens exactly
        }
        // Rows: each of the warp's 16 is a block of its own; the columns' partial maxima on the way.
        uint32_t cm[kPerLane] = {0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < kTileRowsPerWarp; ++i) {
            uint32_t m = 0;
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) {
                const uint32_t a = magnitude_bits(v[i][j]);
                m = max_bits(m, a);
                cm[j] = max_bits(cm[j], a);
            }
            const BlockScale s = block_scale_of_bits(warp_max_bits(m), fp8_max, power_of_two);
            const int64_t r = r0 + warp + kWarps * i;
            uint8_t* out = codes + r * cols + c0 + lane; // whole tiles: no bounds to check
#pragma unroll
            for (int j = 0; j < kPerLane; j += 2) {
                const uint32_t pair = block_codes<Code>(v[i][j], v[i][j + 1], s, fp8_max, paired);
                out[32 * j] = static_cast<uint8_t>(pair & 0xFFu);
                out[32 * (j + 1)] = static_cast<uint8_t>(pair >> 8);
            }
            if (lane == 0) {
                scale_inv[r * row_blocks + tc] = s.finite ? s.inv : __int_as_float(0x7fc00000);
                amax_out[r * row_blocks + tc] = s.amax;
            }
        }
        // Columns: the maxima of the 8 warps' rows.
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) column_max[warp][lane + 32 * j] = cm[j];
        __syncthreads();
        BlockScale cs[kPerLane];
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            uint32_t m = 0;
#pragma unroll
            for (int w = 0; w < kWarps; ++w) m = max_bits(m, column_max[w][lane + 32 * j]);
            cs[j] = block_scale_of_bits(m, fp8_max, power_of_two);
        }
        // Column c's code of row r at byte c * kCodeColumnBytes + r: a warp's 32 lanes write 32
        // columns, 33 words apart, each in a bank of its own. Rows i and i + 1 of a lane (8
        // apart in the tile) share their column's scale, so they convert as a pair.
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            const int c = lane + 32 * j;
#pragma unroll
            for (int i = 0; i < kTileRowsPerWarp; i += 2) {
                const uint32_t pair = block_codes<Code>(v[i][j], v[i + 1][j], cs[j], fp8_max, paired);
                column_bytes[c * kCodeColumnBytes + warp + kWarps * i] = static_cast<uint8_t>(pair & 0xFFu);
                column_bytes[c * kCodeColumnBytes + warp + kWarps * (i + 1)] = static_cast<uint8_t>(pair >> 8);
            }
        }
        __syncthreads();
        // Out: warp w writes columns w, w + 8, ..., lane l bytes 4 l to 4 l + 3 of each.
        for (int k = 0; k < kBlock / kWarps; ++k) {
            const int c = warp + kWarps * k;
            const uint32_t word = column_codes[c * (kCodeColumnBytes / 4) + lane];
            reinterpret_cast<uint32_t*>(codes_t + (c0 + c) * rows + r0)[lane] = word;
        }
        if (warp == 0) {
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) {
                const int64_t at = (c0 + lane + 32 * j) * column_blocks + tr;
                scale_inv_t[at] = cs[j].finite ? cs[j].inv : __int_as_float(0x7fc00000);
                amax_t[at] = cs[j].amax;
            }
        }
        // No barrier before the next tile: its column maxima are written where nothing has read
        // since the barrier above, and its codes only after its own first barrier, which every
        // thread reaches once done with this tile's.
    }
}

// split_fp8_blocks, one block per warp: d = 2^ceil_log2(amax / 448) (frexp's: 0, Inf and NaN
// give exponent 0), clamped to [2^-149, 2^127], doubled once if amax / d > 448, halved once if
// amax / (d / 2) <= 448 and d > 2^-149, 1 unless amax > 0; codes = E4M3(values / d), unsaturated.
__device__ __forceinline__ float pow2_of(int e)
{
    return e >= -126 ? __int_as_float((e + 127) << 23) : __int_as_float(1 << (e + 149)); // subnormals too
}

__global__ void __launch_bounds__(kThreads)
    split_blocks(const float* __restrict__ values, c10::Float8_e4m3fn* __restrict__ codes, float* __restrict__ decode,
                 int64_t rows, int64_t blocks_per_row, bool paired)
{
    const int lane = threadIdx.x % 32;
    const int64_t total = rows * blocks_per_row, cols = blocks_per_row * kBlock;
    for (BlockWalk w(static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32, static_cast<int64_t>(gridDim.x) * kWarps,
                     blocks_per_row);
         w.b < total; w.next()) {
        const int64_t b = w.b, r = w.r, c0 = w.cb * kBlock;
        const float* in = values + r * cols + c0;
        float v[kPerLane];
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) v[j] = in[lane + 32 * j];
        bool nan = false;
        float m = 0.0f;
#pragma unroll
        for (int j = 0; j < kPerLane; ++j) {
            nan |= isnan(v[j]);
            m = fmaxf(m, fabsf(v[j]));
        }
        nan = __any_sync(0xffffffffu, nan);
        m = warp_max(m);
        const float amax = nan ? __int_as_float(0x7fc00000) : m;
        const float ratio = amax / 448.0f;
        int e = 0;
        if (ratio != 0.0f && isfinite(ratio)) {
            int ex = 0;
            const float mant = frexpf(ratio, &ex); // ratio = mant 2^ex, mant in [0.5, 1)
            e = mant == 0.5f ? ex - 1 : ex;
        }
        e = e < -149 ? -149 : (e > 127 ? 127 : e);
        float d = pow2_of(e);
        if (amax / d > 448.0f) d = d * 2.0f;
        if (amax / (d * 0.5f) <= 448.0f && d > 1.40129846e-45f) d = d * 0.5f;
        if (!(amax > 0.0f)) d = 1.0f;
        // values / d, through 1 / d where that is exact (d from 2^-127 on: a power of two whose
        // inverse is an FP32 number, so the product is the quotient correctly rounded, as the
        // division's); a d below 2^-127 divides.
        if (d >= 5.87747175e-39f) {
            const float inv_d = 1.0f / d;
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) v[j] *= inv_d;
        } else {
#pragma unroll
            for (int j = 0; j < kPerLane; ++j) v[j] /= d;
        }
        // Past 464 (an Inf) E4M3 has no code but NaN, signed, whatever c10's conversion does
        // (it saturates from LibTorch 2.13 on, and wrote NaN in 2.11, as the paired path does).
#pragma unroll
        for (int j = 0; j < kPerLane; ++j)
            if (fabsf(v[j]) > 464.0f) v[j] = copysignf(__int_as_float(0x7fc00000), v[j]);
        uint8_t* out = reinterpret_cast<uint8_t*>(codes + r * cols + c0);
#pragma unroll
        for (int j = 0; j < kPerLane; j += 2) {
            uint32_t pair;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
            if (paired) pair = code_pair_as_c10<c10::Float8_e4m3fn>(v[j], v[j + 1], Past::AsC10);
            else
#endif
                pair = pack_codes(c10::Float8_e4m3fn(v[j]), c10::Float8_e4m3fn(v[j + 1]));
            out[lane + 32 * j] = static_cast<uint8_t>(pair & 0xFFu);
            out[lane + 32 * (j + 1)] = static_cast<uint8_t>(pair >> 8);
        }
        (void)paired;
        if (lane == 0) decode[b] = d;
    }
}

// At most 32 thread blocks per multiprocessor (several waves of a full GPU, 4,224 on an H200):
// larger operands are walked grid-stride. The cap follows the device, so that the simulated
// one-multiprocessor device of tests/test_cuda_kernels_on_cpu walks its tensors too, with a
// few dozen blocks where 65,535 could only be reached by a tensor too big to simulate.
int64_t grid_cap() { return std::min<int64_t>(65535, 32 * at::cuda::getCurrentDeviceProperties()->multiProcessorCount); }

int blocks_for(int64_t block_count)
{
    return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((block_count + kWarps - 1) / kWarps, grid_cap())));
}

} // namespace

namespace {

float* values_or_null(const Fp8BlockRows& out) { return out.values.defined() ? out.values.data_ptr<float>() : nullptr; }
uint8_t* codes_or_null(const Fp8BlockRows& out)
{
    return out.codes.defined() ? reinterpret_cast<uint8_t*>(out.codes.data_ptr()) : nullptr;
}

template <typename Code, typename In, bool kCodes>
void launch_rows_as(const torch::Tensor& x, Fp8BlockRows& out, float fp8_max, bool power_of_two, bool paired)
{
    const int64_t rows = x.size(0), cols = x.size(1), per_row = (cols + kBlock - 1) / kBlock;
    MANTISSA_LAUNCH(blocks_for(rows * per_row), kThreads, at::cuda::getCurrentCUDAStream(), block_rows<Code, In, kCodes>)(
        reinterpret_cast<const In*>(x.data_ptr()), values_or_null(out), codes_or_null(out),
        out.scale_inv.data_ptr<float>(), out.amax.data_ptr<float>(), rows, cols, per_row, fp8_max, power_of_two, paired);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename In>
void launch_rows(const torch::Tensor& x, Fp8BlockRows& out, bool e4m3, bool power_of_two, bool paired)
{
    const bool codes = out.codes.defined();
    if (e4m3 && codes) launch_rows_as<c10::Float8_e4m3fn, In, true>(x, out, 448.0f, power_of_two, paired);
    else if (e4m3) launch_rows_as<c10::Float8_e4m3fn, In, false>(x, out, 448.0f, power_of_two, paired);
    else if (codes) launch_rows_as<c10::Float8_e5m2, In, true>(x, out, 57344.0f, power_of_two, paired);
    else launch_rows_as<c10::Float8_e5m2, In, false>(x, out, 57344.0f, power_of_two, paired);
}

template <typename Code, bool kCodes>
void launch_tiles_as(const torch::Tensor& x, Fp8BlockRows& out, int64_t tile_cols, int64_t tiles, float fp8_max,
                     bool power_of_two, bool paired)
{
    const int blocks = static_cast<int>(std::min<int64_t>(tiles, grid_cap()));
    MANTISSA_LAUNCH(blocks, kThreads, at::cuda::getCurrentCUDAStream(), block_tiles<Code, kCodes>)(
        x.data_ptr<float>(), values_or_null(out), codes_or_null(out), out.scale_inv.data_ptr<float>(),
        out.amax.data_ptr<float>(), x.size(0), x.size(1), tile_cols, tiles, fp8_max, power_of_two, paired);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The cast's output: FP32 values, or the codes in the format's own dtype.
void allocate_output(Fp8BlockRows& out, const torch::Tensor& x, bool e4m3, bool codes)
{
    const auto shape = x.sizes();
    if (codes) out.codes = torch::empty(shape, x.options().dtype(e4m3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2));
    else out.values = torch::empty(shape, x.options().dtype(torch::kFloat32));
}

} // namespace

Fp8BlockRows fp8_block_rows(const torch::Tensor& x, bool e4m3, bool power_of_two, bool paired_conversion, bool codes)
{
    const auto dtype = x.scalar_type();
    TORCH_CHECK(on_kernel_device(x) && x.is_contiguous() && x.dim() == 2 &&
                    (dtype == torch::kFloat32 || dtype == torch::kBFloat16 || dtype == torch::kHalf),
                "cuda_kernels::fp8_block_rows: a contiguous 2-D FP32, BF16 or FP16 CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0), cols = x.size(1), per_row = (cols + kBlock - 1) / kBlock;
    const auto f32 = x.options().dtype(torch::kFloat32);
    Fp8BlockRows out;
    allocate_output(out, x, e4m3, codes);
    out.scale_inv = torch::empty({rows, per_row}, f32);
    out.amax = torch::empty({rows, per_row}, f32);
    if (rows * per_row == 0) return out;
    if (dtype == torch::kFloat32) launch_rows<float>(x, out, e4m3, power_of_two, paired_conversion);
    else if (dtype == torch::kBFloat16) launch_rows<c10::BFloat16>(x, out, e4m3, power_of_two, paired_conversion);
    else launch_rows<c10::Half>(x, out, e4m3, power_of_two, paired_conversion);
    return out;
}

Fp8BlockRows fp8_block_tiles(const torch::Tensor& x, bool e4m3, bool power_of_two, bool paired_conversion, bool codes)
{
    TORCH_CHECK(on_kernel_device(x) && x.is_contiguous() && x.dim() == 2 && x.scalar_type() == torch::kFloat32,
                "cuda_kernels::fp8_block_tiles: a contiguous 2-D FP32 CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0), cols = x.size(1);
    const int64_t tile_rows = (rows + kBlock - 1) / kBlock, tile_cols = (cols + kBlock - 1) / kBlock;
    Fp8BlockRows out;
    allocate_output(out, x, e4m3, codes);
    out.scale_inv = torch::empty({tile_rows, tile_cols}, x.options());
    out.amax = torch::empty({tile_rows, tile_cols}, x.options());
    const int64_t tiles = tile_rows * tile_cols;
    if (tiles == 0) return out;
    if (e4m3 && codes)
        launch_tiles_as<c10::Float8_e4m3fn, true>(x, out, tile_cols, tiles, 448.0f, power_of_two, paired_conversion);
    else if (e4m3)
        launch_tiles_as<c10::Float8_e4m3fn, false>(x, out, tile_cols, tiles, 448.0f, power_of_two, paired_conversion);
    else if (codes)
        launch_tiles_as<c10::Float8_e5m2, true>(x, out, tile_cols, tiles, 57344.0f, power_of_two, paired_conversion);
    else
        launch_tiles_as<c10::Float8_e5m2, false>(x, out, tile_cols, tiles, 57344.0f, power_of_two, paired_conversion);
    return out;
}

namespace {

template <typename Code, typename In>
void launch_rows_cols(const torch::Tensor& x, Fp8BlockRowsCols& out, float fp8_max, bool power_of_two, bool paired)
{
    const int64_t rows = x.size(0), cols = x.size(1), tile_cols = cols / kBlock, tiles = (rows / kBlock) * tile_cols;
    const int blocks = static_cast<int>(std::min<int64_t>(tiles, grid_cap()));
    MANTISSA_LAUNCH(blocks, kThreads, at::cuda::getCurrentCUDAStream(), block_rows_cols<Code, In>)(
        reinterpret_cast<const In*>(x.data_ptr()), codes_or_null(out.rows), out.rows.scale_inv.data_ptr<float>(),
        out.rows.amax.data_ptr<float>(), codes_or_null(out.cols), out.cols.scale_inv.data_ptr<float>(),
        out.cols.amax.data_ptr<float>(), rows, cols, tile_cols, tiles, fp8_max, power_of_two, paired);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename In>
void launch_rows_cols(const torch::Tensor& x, Fp8BlockRowsCols& out, bool e4m3, bool power_of_two, bool paired)
{
    if (e4m3) launch_rows_cols<c10::Float8_e4m3fn, In>(x, out, 448.0f, power_of_two, paired);
    else launch_rows_cols<c10::Float8_e5m2, In>(x, out, 57344.0f, power_of_two, paired);
}

} // namespace

Fp8BlockRowsCols fp8_block_rows_cols(const torch::Tensor& x, bool e4m3, bool power_of_two, bool paired_conversion)
{
    const auto dtype = x.scalar_type();
    TORCH_CHECK(on_kernel_device(x) && x.is_contiguous() && x.dim() == 2 && x.size(0) % kBlock == 0 &&
                    x.size(1) % kBlock == 0 &&
                    (dtype == torch::kFloat32 || dtype == torch::kBFloat16 || dtype == torch::kHalf),
                "cuda_kernels::fp8_block_rows_cols: a contiguous (R, C) FP32, BF16 or FP16 CUDA tensor, R and C "
                "multiples of 128");
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0), cols = x.size(1);
    const auto f32 = x.options().dtype(torch::kFloat32);
    const auto code_dtype = x.options().dtype(e4m3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2);
    Fp8BlockRowsCols out;
    out.rows.codes = torch::empty({rows, cols}, code_dtype);
    out.rows.scale_inv = torch::empty({rows, cols / kBlock}, f32);
    out.rows.amax = torch::empty({rows, cols / kBlock}, f32);
    out.cols.codes = torch::empty({cols, rows}, code_dtype);
    out.cols.scale_inv = torch::empty({cols, rows / kBlock}, f32);
    out.cols.amax = torch::empty({cols, rows / kBlock}, f32);
    if (rows * cols == 0) return out;
    if (dtype == torch::kFloat32) launch_rows_cols<float>(x, out, e4m3, power_of_two, paired_conversion);
    else if (dtype == torch::kBFloat16) launch_rows_cols<c10::BFloat16>(x, out, e4m3, power_of_two, paired_conversion);
    else launch_rows_cols<c10::Half>(x, out, e4m3, power_of_two, paired_conversion);
    return out;
}

std::pair<torch::Tensor, torch::Tensor> split_fp8_blocks(const torch::Tensor& values, bool paired_conversion)
{
    TORCH_CHECK(on_kernel_device(values) && values.is_contiguous() && values.dim() == 2 &&
                    values.scalar_type() == torch::kFloat32 && values.size(1) % kBlock == 0,
                "cuda_kernels::split_fp8_blocks: a contiguous (R, K) FP32 CUDA tensor, K a multiple of 128");
    const c10::cuda::CUDAGuard guard(values.device());
    const int64_t rows = values.size(0), per_row = values.size(1) / kBlock;
    auto codes = torch::empty(values.sizes(), values.options().dtype(torch::kFloat8_e4m3fn));
    auto decode = torch::empty({rows, per_row}, values.options());
    if (rows * per_row == 0) return {codes, decode};
    MANTISSA_LAUNCH(blocks_for(rows * per_row), kThreads, at::cuda::getCurrentCUDAStream(), split_blocks)(
        values.data_ptr<float>(), reinterpret_cast<c10::Float8_e4m3fn*>(codes.data_ptr()), decode.data_ptr<float>(),
        rows, per_row, paired_conversion);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {codes, decode};
}

} // namespace mantissa::cuda_kernels
