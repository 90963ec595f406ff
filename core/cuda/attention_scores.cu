// SPDX-License-Identifier: GPL-3.0-or-later
#include "attention_scores.h"
#include "launch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#if !defined(MANTISSA_CUDA_SIM)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
#include <mma.h> // under the simulator, tests/cuda_sim's stand-in

#include <cstdint>
#include <type_traits>

namespace mantissa::cuda_kernels {
namespace {

using namespace nvcuda;

constexpr int kTile = 16;                     // wmma's 16x16x16
constexpr int kWarps = 4;                     // a warp per 16 queries
constexpr int kRowsPerBlock = kTile * kWarps; // 64 queries a block, sharing their keys in L1

// Strides in elements of one (B, H, T, D) operand, whose innermost stride is 1.
struct HeadStrides {
    int64_t batch, head, row;
};

// One partial per block: the largest |q_i . k_j| (j <= i) of its 64 queries of one head, as
// FP32 (NaN if one of them is NaN).
//
// Each warp keeps its 16 queries' fragments in registers and walks the keys 16 at a time up to
// its diagonal: a tile wholly in the past is reduced straight from the accumulator's elements
// (whose order the API leaves open, which a maximum does not need); only the diagonal tile,
// where key j must not pass query i, goes through shared memory to learn positions.
// |score| is compared as bits: non-negative floats order like their bit patterns, Inf below
// every NaN, so one integer max keeps NaN where fmaxf would drop it.
template <typename E, int kD>
__global__ void __launch_bounds__(kWarps * 32)
    causal_max_abs_score_kernel(const E* q, const E* k, int heads, int64_t rows, HeadStrides qs, HeadStrides ks,
                                float* partial)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    // wmma::store_matrix_sync needs a 256-bit aligned pointer, which the placement gave by chance.
    __shared__ __align__(32) float diagonal[kWarps][kTile * kTile];
    __shared__ unsigned warp_largest[kWarps];
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int64_t head_index = blockIdx.y, b = head_index / heads, h = head_index % heads;
    // The last queries see the most keys: their blocks start first.
    const int64_t first_row = (static_cast<int64_t>(gridDim.x) - 1 - blockIdx.x) * kRowsPerBlock + warp * kTile;
    unsigned largest = 0;
    if (first_row < rows) { // the same for the whole warp
        const E* q_tile = q + b * qs.batch + h * qs.head + first_row * qs.row;
        const E* keys = k + b * ks.batch + h * ks.head;
        wmma::fragment<wmma::matrix_a, kTile, kTile, kTile, E, wmma::row_major> query[kD / kTile];
#pragma unroll
        for (int d = 0; d < kD / kTile; ++d)
            wmma::load_matrix_sync(query[d], q_tile + d * kTile, static_cast<unsigned>(qs.row));
        wmma::fragment<wmma::matrix_b, kTile, kTile, kTile, E, wmma::col_major> key; // k_tile^T
        wmma::fragment<wmma::accumulator, kTile, kTile, kTile, float> scores;
        for (int64_t first_key = 0; first_key <= first_row; first_key += kTile) {
            wmma::fill_fragment(scores, 0.0f);
#pragma unroll
            for (int d = 0; d < kD / kTile; ++d) {
                wmma::load_matrix_sync(key, keys + first_key * ks.row + d * kTile, static_cast<unsigned>(ks.row));
                wmma::mma_sync(scores, query[d], key, scores);
            }
            if (first_key < first_row) {
                for (int e = 0; e < scores.num_elements; ++e) largest = max(largest, __float_as_uint(fabsf(scores.x[e])));
            } else {
                // The diagonal tile: row i (query first_row + i) sees columns j <= i.
                wmma::store_matrix_sync(diagonal[warp], scores, kTile, wmma::mem_row_major);
                __syncwarp();
                for (int e = lane; e < kTile * kTile; e += 32)
                    if (e % kTile <= e / kTile) largest = max(largest, __float_as_uint(fabsf(diagonal[warp][e])));
            }
        }
    }
    for (int offset = 16; offset > 0; offset /= 2) largest = max(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    if (lane == 0) warp_largest[warp] = largest;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned m = 0;
        for (int w = 0; w < kWarps; ++w) m = max(m, warp_largest[w]);
        partial[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = __uint_as_float(m);
    }
#else
    // No BF16 tensor cores before sm_80: a negative maximum, which the probe refuses, so the
    // ops' route stays.
    if (threadIdx.x == 0) partial[static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x] = -1.0f;
#endif
}

bool is_16bit(const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf; }

// wmma loads a tile from a 32-byte aligned address with a row pitch of a multiple of 16 bytes;
// every tile's address is the base plus whole batches, heads, 16-row steps and 16-value steps.
bool tiles_load_in_place(const torch::Tensor& t)
{
    const int64_t bytes = static_cast<int64_t>(t.element_size());
    auto aligned = [&](int d, int64_t to) { return t.size(d) == 1 || t.stride(d) * bytes % to == 0; };
    return t.stride(3) == 1 && reinterpret_cast<uintptr_t>(t.data_ptr()) % 32 == 0 && aligned(0, 32) && aligned(1, 32) &&
           t.stride(2) * bytes % 16 == 0 && t.stride(2) <= INT32_MAX;
}

// The tensor itself where its tiles load in place, else a contiguous copy (a contiguous view
// at an unaligned offset included, which contiguous() would hand back as it is).
torch::Tensor tile_readable(const torch::Tensor& t)
{
    if (tiles_load_in_place(t)) return t;
    const auto c = t.contiguous();
    return c.data_ptr() != t.data_ptr() ? c : t.clone(at::MemoryFormat::Contiguous);
}

HeadStrides strides_of(const torch::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

template <typename E, int kD>
void launch(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& partial, dim3 grid)
{
    MANTISSA_LAUNCH(grid, kWarps * 32, at::cuda::getCurrentCUDAStream(), causal_max_abs_score_kernel<E, kD>)(
        reinterpret_cast<const E*>(q.data_ptr()), reinterpret_cast<const E*>(k.data_ptr()),
        static_cast<int>(q.size(1)), q.size(2), strides_of(q), strides_of(k), partial.data_ptr<float>());
}

template <typename E>
void launch_for_width(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& partial, dim3 grid)
{
    switch (q.size(3)) {
    case 16: launch<E, 16>(q, k, partial, grid); break;
    case 32: launch<E, 32>(q, k, partial, grid); break;
    case 64: launch<E, 64>(q, k, partial, grid); break;
    default: launch<E, 128>(q, k, partial, grid); break;
    }
}

} // namespace

bool causal_max_abs_score_takes_width(int64_t width)
{
    return width == 16 || width == 32 || width == 64 || width == 128;
}

bool causal_max_abs_score_takes(const torch::Tensor& q, const torch::Tensor& k)
{
    if (!on_kernel_device(q) || q.dim() != 4 || k.sizes() != q.sizes() || k.device() != q.device() ||
        k.scalar_type() != q.scalar_type() || !is_16bit(q))
        return false;
    const int64_t heads = q.size(0) * q.size(1), rows = q.size(2), width = q.size(3);
    return heads >= 1 && heads <= 65535 && rows >= kTile && rows % kTile == 0 && rows / kRowsPerBlock < 65535 &&
           causal_max_abs_score_takes_width(width);
}

torch::Tensor causal_max_abs_score(const torch::Tensor& q_in, const torch::Tensor& k_in)
{
    TORCH_CHECK(causal_max_abs_score_takes(q_in, k_in),
                "cuda_kernels: the causal max score takes (B, H, T, D) 16-bit heads, T a multiple of 16, D of 16 to 128");
    const c10::cuda::CUDAGuard guard(q_in.device());
    const auto q = tile_readable(q_in), k = tile_readable(k_in);
    const dim3 grid(static_cast<unsigned>((q.size(2) + kRowsPerBlock - 1) / kRowsPerBlock),
                    static_cast<unsigned>(q.size(0) * q.size(1)));
    const auto partial = torch::empty({int64_t(grid.x) * grid.y}, q.options().dtype(torch::kFloat32));
    if (q.scalar_type() == torch::kBFloat16) launch_for_width<__nv_bfloat16>(q, k, partial, grid);
    else launch_for_width<__half>(q, k, partial, grid);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return partial.amax(); // NaN propagates, as through the ops' route
}

} // namespace mantissa::cuda_kernels
