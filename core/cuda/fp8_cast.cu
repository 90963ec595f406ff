// SPDX-License-Identifier: GPL-3.0-or-later
#include "fp8_cast.h"
#include "fp8_pair.h"
#include "grid_walk.h"
#include "launch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>

#include <cstdint>
#include <type_traits>

namespace mantissa::cuda_kernels {
namespace {

constexpr int kThreads = 256;

// Folds each thread's `local` max into *amax (zeroed by the caller). Non-negative floats (inf
// included) order like their bit patterns, so one atomicMax per block gives the same result in
// any order. Every thread of the block calls it; blocks of kThreads threads, 1D or 2D (warps
// are formed from the linear thread index).
__device__ void block_amax_into(float local, float* amax)
{
    __shared__ float block_max[kThreads / 32];
    const unsigned tid = threadIdx.y * blockDim.x + threadIdx.x;
    for (int offset = 16; offset > 0; offset /= 2) local = fmaxf(local, __shfl_down_sync(0xffffffffu, local, offset));
    if (tid % 32 == 0) block_max[tid / 32] = local;
    __syncthreads();
    if (tid == 0) {
        float m = 0.0f;
        for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, block_max[w]);
        atomicMax(reinterpret_cast<int*>(amax), __float_as_int(m));
    }
}

// The code of one value: v * scale, saturated or not, as to_fp8_codes.
template <typename Code>
__device__ __forceinline__ Code code_of(float v, float s, float max_finite, bool saturate, bool nan_past_464)
{
    float scaled = v * s;
    // Comparisons keep NaN as NaN (fminf/fmaxf would drop it).
    if (saturate) scaled = scaled > max_finite ? max_finite : (scaled < -max_finite ? -max_finite : scaled);
    else if (nan_past_464 && fabsf(scaled) > 464.0f) scaled = __int_as_float(0x7fc00000);
    return Code(scaled);
}

// Two codes, the first in the low byte: code_of's, bit for bit, from one instruction on sm_89
// and newer (fp8_pair.h); c10's conversion elsewhere, the CPU's simulator included. The
// cast-transpose probe holds the device's to the fused cast's.
// `paired` false (the probe found the two differ) keeps c10's conversion on any device.
template <typename Code>
__device__ __forceinline__ uint32_t code_pair(float a, float b, float s, float max_finite, bool saturate,
                                              bool nan_past_464, bool paired)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    // satfinite is the saturating cast; without saturation E4M3 past 464 is code_of's positive
    // NaN, E5M2 past its range c10's Inf.
    const Past past = saturate ? Past::Clamped
                      : std::is_same_v<Code, c10::Float8_e4m3fn> && nan_past_464 ? Past::PositiveNan
                                                                                  : Past::AsC10;
    if (paired) return code_pair_as_c10<Code>(a * s, b * s, past);
#else
    (void)paired;
#endif
    return pack_codes(code_of<Code>(a, s, max_finite, saturate, nan_past_464),
                      code_of<Code>(b, s, max_finite, saturate, nan_past_464));
}

// Values a thread loads before it uses any: one load at a time left these kernels waiting on
// memory (2026-12-04, H200: current scaling's extra read of every operand cost about 2 TB/s'
// worth). Thread t of a block takes values t, t + kThreads, ... of its block's span, so each
// of the loads is one coalesced read per warp and the codes' stores stay coalesced too.
constexpr int kUnroll = 4;
constexpr int64_t kBlockSpan = static_cast<int64_t>(kThreads) * kUnroll;

template <typename In, typename Code>
__global__ void __launch_bounds__(kThreads)
    scale_cast_amax(const In* __restrict__ x, const float* __restrict__ scale, Code* __restrict__ codes,
                    float* __restrict__ amax, int64_t n, float max_finite, bool saturate, bool nan_past_464,
                    bool paired)
{
    const float s = *scale;
    float local = 0.0f;
    for (int64_t base = blockIdx.x * kBlockSpan + threadIdx.x; base < n; base += gridDim.x * kBlockSpan) {
        float v[kUnroll];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            const int64_t i = base + j * kThreads;
            v[j] = i < n ? static_cast<float>(x[i]) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) local = fmaxf(local, fabsf(v[j])); // fmaxf skips NaN (and the zero padding)
        uint8_t* out = reinterpret_cast<uint8_t*>(codes);
#pragma unroll
        for (int j = 0; j < kUnroll; j += 2) { // two codes from one conversion (code_pair)
            const uint32_t pair = code_pair<Code>(v[j], v[j + 1], s, max_finite, saturate, nan_past_464, paired);
            const int64_t i = base + j * kThreads;
            if (i < n) out[i] = static_cast<uint8_t>(pair & 0xFFu);
            if (i + kThreads < n) out[i + kThreads] = static_cast<uint8_t>(pair >> 8);
        }
    }
    block_amax_into(local, amax);
}

// TransformerEngine's cast-transpose: the same codes, written both as x's layout (rows, cols)
// and transposed (cols, rows), from one read of x. The wgrad GEMM wants both of its FP8
// operands with M innermost, which the forward and dgrad GEMMs lay out the other way; without
// this each would be copied once more. Blocks of 32 x 8 threads walk 32 x 32 tiles: the tile's
// codes go through shared memory so that both writes are along rows.
constexpr int kTile = 32;
constexpr int kTileRowsPerPass = kThreads / kTile; // 8

template <typename In, typename Code>
__global__ void __launch_bounds__(kThreads)
    scale_cast_amax_transpose(const In* __restrict__ x, const float* __restrict__ scale, Code* __restrict__ codes,
                              Code* __restrict__ codes_t, float* __restrict__ amax, int64_t rows, int64_t cols,
                              float max_finite, bool saturate, bool nan_past_464, bool paired)
{
    __shared__ uint8_t tile[kTile][kTile + 1]; // the codes' bits
    const float s = *scale;
    float local = 0.0f;
    const int64_t col_tiles = (cols + kTile - 1) / kTile, tiles = ((rows + kTile - 1) / kTile) * col_tiles;
    // Every thread of a block walks the same tiles, so the barriers below are reached by all.
    for (BlockWalk w(blockIdx.x, gridDim.x, col_tiles); w.b < tiles; w.next()) {
        const int64_t r0 = w.r * kTile, c0 = w.cb * kTile;
        // Rows i and i + 8 of a thread's column convert as a pair (code_pair); the zero padding
        // of a short tile is converted and left unstored.
        uint8_t* out = reinterpret_cast<uint8_t*>(codes);
        for (int i = threadIdx.y; i < kTile; i += 2 * kTileRowsPerPass) {
            const int64_t r = r0 + i, c = c0 + threadIdx.x;
            const bool first = r < rows && c < cols, second = r + kTileRowsPerPass < rows && c < cols;
            const float a = first ? static_cast<float>(x[r * cols + c]) : 0.0f;
            const float b = second ? static_cast<float>(x[(r + kTileRowsPerPass) * cols + c]) : 0.0f;
            local = fmaxf(local, fmaxf(fabsf(a), fabsf(b)));
            const uint32_t pair = code_pair<Code>(a, b, s, max_finite, saturate, nan_past_464, paired);
            if (first) {
                out[r * cols + c] = static_cast<uint8_t>(pair & 0xFFu);
                tile[i][threadIdx.x] = static_cast<uint8_t>(pair & 0xFFu);
            }
            if (second) {
                out[(r + kTileRowsPerPass) * cols + c] = static_cast<uint8_t>(pair >> 8);
                tile[i + kTileRowsPerPass][threadIdx.x] = static_cast<uint8_t>(pair >> 8);
            }
        }
        __syncthreads();
        // Row c of codes_t is column c of codes.
        for (int i = threadIdx.y; i < kTile; i += kTileRowsPerPass) {
            const int64_t c = c0 + i, r = r0 + threadIdx.x;
            if (r < rows && c < cols) codes_t[c * rows + r] = Code(tile[threadIdx.x][i], Code::from_bits());
        }
        __syncthreads(); // the tile is refilled next
    }
    block_amax_into(local, amax);
}

// The same cast-transpose for tensors whose both sides are multiples of 64 and whose data is
// 16-byte aligned (every GEMM operand of GPT-2 small and of the wide shape): blocks of 256
// threads walk 64 x 64 tiles, each thread loading its 16 values as two 8-value vectors before
// using any, and writing 8 codes, then 16 transposed codes, per store. The kernel above loads
// one 2-byte value at a time behind a bounds check, about one load in flight per thread
// (read from its PTX): about 1.1-1.5 TB/s by Little's law, and fp8-hybrid moves about 14 GB
// through it per step of GPT-2 small. Each code is code_of's, as above, and the amax is
// order-free, so the two kernels agree bit for bit (the start-up probe holds them together).
constexpr int kWide = 64;
constexpr int kVec = 8;                                  // values per vector load
constexpr int kWideRowsPerPass = kThreads / (kWide / kVec); // 32
constexpr int kWidePasses = kWide / kWideRowsPerPass;       // 2
constexpr int kTileStride = kWide + 4; // bytes per shared row: 4-byte aligned, column reads spread over banks
constexpr int kWideBlocks = 2048;

__device__ __forceinline__ void load8(const float* p, float v[kVec])
{
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load8(const c10::BFloat16* p, float v[kVec])
{
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int k = 0; k < 4; ++k) { // little-endian: the lower half is the first value; BF16 -> FP32 is exact
        v[2 * k] = __uint_as_float(w[k] << 16);
        v[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
    }
}
__device__ __forceinline__ void load8(const c10::Half* p, float v[kVec])
{
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
    for (int k = 0; k < 4; ++k) {
        v[2 * k] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[k] & 0xFFFFu)));
        v[2 * k + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[k] >> 16)));
    }
}

// ATen's exact GELU (its GeluErfFunctor: x * 0.5 * (1 + erf(x * M_SQRT1_2)) in FP32, multiplied
// left to right) stored in `In`, as at::gelu leaves it, and read back as FP32. The
// gelu-cast-transpose probe holds the device's erff and rounding to at::gelu's bits; on the
// CPU's simulator the host's erff stands in.
template <typename In>
__device__ __forceinline__ float gelu_as_stored(float x)
{
    constexpr float kAlpha = static_cast<float>(0.70710678118654752440); // M_SQRT1_2
    const float g = x * 0.5f * (1.0f + erff(x * kAlpha));
    return static_cast<float>(static_cast<In>(g));
}

//
// `kGelu`: the tile casts gelu(x) as gelu_as_stored makes it (its amax that of those values),
// where at::gelu would write gelu(x) and the cast read it again (TransformerEngine's fused
// activation cast: the input of the linear after a GELU).
// `kSums`: each tile also writes the FP32 sums of its 64 columns over its 64 rows to row
// (tile row) of `sums` (rows / 64, cols), in a fixed order: each thread adds its two rows (r and
// r + 32), then one thread per column adds the 32 pairs in row order. A bias's gradient is
// these partials summed over the tile rows (TransformerEngine's cast-transpose-dbias), where a
// separate reduction read the output gradient once more.
template <typename In, typename Code, bool kSums, bool kGelu = false>
__global__ void __launch_bounds__(kThreads)
    scale_cast_amax_transpose_64(const In* __restrict__ x, const float* __restrict__ scale, uint8_t* __restrict__ codes,
                                 uint8_t* __restrict__ codes_t, float* __restrict__ amax, float* __restrict__ sums,
                                 int64_t rows, int64_t cols, float max_finite, bool saturate, bool nan_past_464)
{
    static_assert(kWidePasses == 2, "a thread's column sum adds its two rows");
    __shared__ uint32_t tile_words[kWide * kTileStride / 4];
    __shared__ float pair_sums[kSums ? kWideRowsPerPass : 1][kWide];
    auto* tile = reinterpret_cast<uint8_t*>(tile_words);
    const float s = *scale;
    float local = 0.0f;
    const int64_t col_tiles = cols / kWide, tiles = (rows / kWide) * col_tiles;
    const int row_in_pass = threadIdx.x / (kWide / kVec), first_col = (threadIdx.x % (kWide / kVec)) * kVec;
    const int t_col = threadIdx.x / 4, t_rows = (threadIdx.x % 4) * 16; // the transposed store's share
    // Every thread of a block walks the same tiles, so the barriers below are reached by all.
    for (BlockWalk w(blockIdx.x, gridDim.x, col_tiles); w.b < tiles; w.next()) {
        const int64_t r0 = w.r * kWide, c0 = w.cb * kWide;
        float v[kWidePasses][kVec];
#pragma unroll
        for (int p = 0; p < kWidePasses; ++p)
            load8(x + (r0 + row_in_pass + p * kWideRowsPerPass) * cols + c0 + first_col, v[p]);
        if constexpr (kGelu) {
#pragma unroll
            for (int p = 0; p < kWidePasses; ++p)
#pragma unroll
                for (int j = 0; j < kVec; ++j) v[p][j] = gelu_as_stored<In>(v[p][j]);
        }
#pragma unroll
        for (int p = 0; p < kWidePasses; ++p) {
            uint32_t packed[2] = {0u, 0u};
#pragma unroll
            for (int j = 0; j < kVec; j += 2) {
                local = fmaxf(local, fmaxf(fabsf(v[p][j]), fabsf(v[p][j + 1]))); // fmaxf skips NaN, as the host's amax
                const uint32_t bits = code_pair<Code>(v[p][j], v[p][j + 1], s, max_finite, saturate, nan_past_464,
                                                      /*paired=*/true); // its own probe decides whether it runs
                packed[j / 4] |= bits << (8 * (j % 4));
            }
            const int tile_row = row_in_pass + p * kWideRowsPerPass;
            *reinterpret_cast<uint2*>(codes + (r0 + tile_row) * cols + c0 + first_col) = make_uint2(packed[0], packed[1]);
            tile_words[(tile_row * kTileStride + first_col) / 4] = packed[0];
            tile_words[(tile_row * kTileStride + first_col) / 4 + 1] = packed[1];
        }
        if constexpr (kSums) {
#pragma unroll
            for (int j = 0; j < kVec; ++j) pair_sums[row_in_pass][first_col + j] = v[0][j] + v[1][j];
        }
        __syncthreads();
        if constexpr (kSums) {
            if (threadIdx.x < kWide) {
                float total = 0.0f;
                for (int r = 0; r < kWideRowsPerPass; ++r) total += pair_sums[r][threadIdx.x];
                sums[w.r * cols + c0 + threadIdx.x] = total;
            }
        }
        // Row c of codes_t is column c of codes: 16 of its codes per thread, one 16-byte store.
        uint32_t out[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int k = 0; k < 16; ++k) out[k / 4] |= static_cast<uint32_t>(tile[(t_rows + k) * kTileStride + t_col]) << (8 * (k % 4));
        *reinterpret_cast<uint4*>(codes_t + (c0 + t_col) * rows + r0 + t_rows) = make_uint4(out[0], out[1], out[2], out[3]);
        __syncthreads(); // the tile is refilled next
    }
    block_amax_into(local, amax);
}

// The amax alone: what current scaling needs before it can cast.
template <typename In>
__global__ void __launch_bounds__(kThreads) abs_max(const In* __restrict__ x, float* __restrict__ amax, int64_t n)
{
    float local = 0.0f;
    for (int64_t base = blockIdx.x * kBlockSpan + threadIdx.x; base < n; base += gridDim.x * kBlockSpan) {
        float v[kUnroll];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            const int64_t i = base + j * kThreads;
            v[j] = i < n ? fabsf(static_cast<float>(x[i])) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) local = fmaxf(local, v[j]);
    }
    block_amax_into(local, amax);
}

// Blocks of kBlockSpan values each, at most 4096 (a grid-stride loop takes the rest).
int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kBlockSpan - 1) / kBlockSpan, 4096)); }

// The element type of the `const In*` that with_input hands its launch.
template <typename Pointer>
using element_of = std::remove_cv_t<std::remove_pointer_t<Pointer>>;

// Calls launch(const In*) with x's data as the element type it is stored in, then checks the
// launch. `what` names the caller in the error for any other dtype.
template <typename Launch>
void with_input(const torch::Tensor& x, const char* what, Launch&& launch)
{
    switch (x.scalar_type()) {
    case torch::kFloat32: launch(x.data_ptr<float>()); break;
    case torch::kBFloat16: launch(x.data_ptr<c10::BFloat16>()); break;
    case torch::kHalf: launch(x.data_ptr<c10::Half>()); break;
    default: TORCH_CHECK(false, what, ": FP32, BF16 or FP16 input");
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename Code>
void launch(const torch::Tensor& x, const torch::Tensor& scale, torch::Tensor& codes, torch::Tensor& amax,
            float max_finite, bool saturate, bool nan_past_464, bool paired)
{
    const int64_t n = x.numel();
    if (n == 0) return;
    const int blocks = blocks_for(n);
    const auto stream = at::cuda::getCurrentCUDAStream();
    auto* out = reinterpret_cast<Code*>(codes.data_ptr());
    with_input(x, "fused_scale_cast_amax", [&](const auto* in) {
        MANTISSA_LAUNCH(blocks, kThreads, stream, scale_cast_amax<element_of<decltype(in)>, Code>)(
            in, scale.data_ptr<float>(), out, amax.data_ptr<float>(), n, max_finite, saturate, nan_past_464, paired);
    });
}

} // namespace

torch::Tensor amax_ignoring_nan(const torch::Tensor& x)
{
    TORCH_CHECK(on_kernel_device(x) && x.is_contiguous(), "cuda_kernels::amax_ignoring_nan: a contiguous CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    auto amax = torch::zeros({}, x.options().dtype(torch::kFloat32));
    const int64_t n = x.numel();
    if (n == 0) return amax;
    const auto stream = at::cuda::getCurrentCUDAStream();
    with_input(x, "cuda_kernels::amax_ignoring_nan", [&](const auto* in) {
        MANTISSA_LAUNCH(blocks_for(n), kThreads, stream, abs_max<element_of<decltype(in)>>)(in, amax.data_ptr<float>(), n);
    });
    return amax;
}

namespace {

// The 64 x 64 kernel over x (sides multiples of 64, 16-byte aligned data): `sums` (rows / 64,
// cols) with kSums, the GELU taken first with kGelu (16-bit x only).
template <typename Code, bool kSums, bool kGelu>
void launch_64(const torch::Tensor& x, const torch::Tensor& scale, torch::Tensor& codes, torch::Tensor& codes_t,
               torch::Tensor& amax, float* sums, float max_finite, bool saturate, bool nan_past_464)
{
    const int64_t rows = x.size(0), cols = x.size(1);
    // At most kWideBlocks blocks: a larger tensor is walked by the grid-stride loop (the probe
    // makes blocks walk several tiles too).
    const int blocks = static_cast<int>(std::min<int64_t>((rows / kWide) * (cols / kWide), kWideBlocks));
    const auto stream = at::cuda::getCurrentCUDAStream();
    auto* out = reinterpret_cast<uint8_t*>(codes.data_ptr());
    auto* out_t = reinterpret_cast<uint8_t*>(codes_t.data_ptr());
    with_input(x, "fused_scale_cast_amax_transpose", [&](const auto* in) {
        using In = element_of<decltype(in)>;
        if constexpr (kGelu && std::is_same_v<In, float>) {
            TORCH_CHECK(false, "the GELU cast-transpose reads BF16 or FP16"); // gelu_cast_transpose_takes
        } else {
            MANTISSA_LAUNCH(blocks, kThreads, stream, scale_cast_amax_transpose_64<In, Code, kSums, kGelu>)(
                in, scale.data_ptr<float>(), out, out_t, amax.data_ptr<float>(), sums, rows, cols, max_finite, saturate,
                nan_past_464);
        }
    });
}

template <typename Code>
void launch_transpose(const torch::Tensor& x, const torch::Tensor& scale, torch::Tensor& codes, torch::Tensor& codes_t,
                      torch::Tensor& amax, float max_finite, bool saturate, bool nan_past_464, bool tiles_64,
                      bool paired, torch::Tensor* column_sums, bool gelu_first)
{
    const int64_t rows = x.size(0), cols = x.size(1);
    if (rows == 0 || cols == 0) return;
    if (gelu_first) return launch_64<Code, false, true>(x, scale, codes, codes_t, amax, nullptr, max_finite, saturate, nan_past_464);
    if (tiles_64 && rows % kWide == 0 && cols % kWide == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0) {
        if (!column_sums)
            return launch_64<Code, false, false>(x, scale, codes, codes_t, amax, nullptr, max_finite, saturate, nan_past_464);
        auto partials = torch::empty({rows / kWide, cols}, x.options().dtype(torch::kFloat32)); // every tile writes its row
        launch_64<Code, true, false>(x, scale, codes, codes_t, amax, partials.data_ptr<float>(), max_finite, saturate,
                                     nan_past_464);
        *column_sums = partials.sum(0); // a reduction in a fixed order: the same sums on every run
        return;
    }
    const int64_t tiles = ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
    const int blocks = static_cast<int>(std::min<int64_t>(tiles, 8192));
    const dim3 threads(kTile, kTileRowsPerPass);
    auto* out = reinterpret_cast<Code*>(codes.data_ptr());
    auto* out_t = reinterpret_cast<Code*>(codes_t.data_ptr());
    with_input(x, "fused_scale_cast_amax_transpose", [&](const auto* in) {
        MANTISSA_LAUNCH(blocks, threads, at::cuda::getCurrentCUDAStream(), scale_cast_amax_transpose<element_of<decltype(in)>, Code>)(
            in, scale.data_ptr<float>(), out, out_t, amax.data_ptr<float>(), rows, cols, max_finite, saturate,
            nan_past_464, paired);
    });
}

// fused_scale_cast_amax_transpose's body, and with `gelu_first` (x as gelu_cast_transpose_takes
// says) fused_gelu_scale_cast_amax_transpose's.
torch::Tensor cast_transpose(const torch::Tensor& x, const torch::Tensor& scale, bool e4m3, bool saturate,
                             torch::Tensor& amax, torch::Tensor& codes_t, bool tiles_64, bool paired,
                             torch::Tensor* column_sums, bool gelu_first)
{
    const c10::cuda::CUDAGuard guard(x.device());
    const auto s = scale.to(x.device(), torch::kFloat32).contiguous();
    amax = torch::zeros({}, x.options().dtype(torch::kFloat32));
    const auto dtype = e4m3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2;
    auto codes = torch::empty(x.sizes(), x.options().dtype(dtype));
    codes_t = torch::empty({x.size(1), x.size(0)}, x.options().dtype(dtype));
    if (column_sums) *column_sums = torch::Tensor(); // made only by the 64 x 64 kernel
    if (e4m3)
        launch_transpose<c10::Float8_e4m3fn>(x, s, codes, codes_t, amax, 448.0f, saturate, /*nan_past_464=*/true, tiles_64,
                                             paired, column_sums, gelu_first);
    else
        launch_transpose<c10::Float8_e5m2>(x, s, codes, codes_t, amax, 57344.0f, saturate, false, tiles_64, paired,
                                           column_sums, gelu_first);
    return codes;
}

} // namespace

bool gelu_cast_transpose_takes(const torch::Tensor& u)
{
    return on_kernel_device(u) && u.dim() == 2 && u.is_contiguous() &&
           (u.scalar_type() == torch::kBFloat16 || u.scalar_type() == torch::kHalf) && u.size(0) % kWide == 0 &&
           u.size(1) % kWide == 0 && reinterpret_cast<uintptr_t>(u.data_ptr()) % 16 == 0;
}

torch::Tensor fused_gelu_scale_cast_amax_transpose(const torch::Tensor& u, const torch::Tensor& scale, bool e4m3,
                                                   bool saturate, torch::Tensor& amax, torch::Tensor& codes_t)
{
    TORCH_CHECK(gelu_cast_transpose_takes(u),
                "fused_gelu_scale_cast_amax_transpose: a contiguous 2-D BF16 or FP16 tensor on the kernels' device, "
                "sides multiples of 64, 16-byte aligned");
    return cast_transpose(u, scale, e4m3, saturate, amax, codes_t, /*tiles_64=*/true, /*paired=*/true, nullptr,
                          /*gelu_first=*/true);
}

torch::Tensor fused_scale_cast_amax_transpose(const torch::Tensor& x, const torch::Tensor& scale, bool e4m3,
                                              bool saturate, torch::Tensor& amax, torch::Tensor& codes_t, bool tiles_64,
                                              bool paired, torch::Tensor* column_sums)
{
    TORCH_CHECK(on_kernel_device(x) && x.is_contiguous() && x.dim() == 2,
                "fused_scale_cast_amax_transpose: a contiguous 2-D CUDA tensor");
    return cast_transpose(x, scale, e4m3, saturate, amax, codes_t, tiles_64, paired, column_sums, /*gelu_first=*/false);
}

torch::Tensor fused_scale_cast_amax(const torch::Tensor& x, const torch::Tensor& scale, bool e4m3, bool saturate,
                                    torch::Tensor& amax, bool paired)
{
    TORCH_CHECK(on_kernel_device(x) && x.is_contiguous(), "fused_scale_cast_amax: a contiguous CUDA tensor");
    const c10::cuda::CUDAGuard guard(x.device());
    const auto s = scale.to(x.device(), torch::kFloat32).contiguous(); // the kernel dereferences it
    amax = torch::zeros({}, x.options().dtype(torch::kFloat32));
    auto codes = torch::empty(x.sizes(), x.options().dtype(e4m3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2));
    if (e4m3) launch<c10::Float8_e4m3fn>(x, s, codes, amax, 448.0f, saturate, /*nan_past_464=*/true, paired);
    else launch<c10::Float8_e5m2>(x, s, codes, amax, 57344.0f, saturate, false, paired);
    return codes;
}

} // namespace mantissa::cuda_kernels
