// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Stands in for CUDA's <mma.h> under tests/cuda_sim: the warp-wide 16x16x16 matrix fragments
// (nvcuda::wmma) in BF16 and FP16 with FP32 accumulators, the only shape Mantissa's kernels use.
//
// On a GPU a fragment is spread over the warp's 32 lanes in an order the API does not state;
// here every lane holds the whole tile, row by row. So a kernel may only do with `x[]` what
// does not depend on that order (a maximum over it), and anything positional goes through
// store_matrix_sync. What the stand-in checks, as a GPU would require or fail on:
// - every call is made by the whole warp (a call under a divergent branch fails the launch);
// - the pointer is 32-byte aligned and ldm a multiple of 16 bytes;
// - store_matrix_sync writes only the calling lane's share of the tile (8 elements, where the
//   tensor cores' accumulator layout has them), so that a lane reading another lane's share
//   before a __syncwarp reads stale memory in one of the simulator's two thread orders.
// mma_sync adds the products in k order, each rounded to FP32: exact where the products and
// their sums are (the tests' integer-valued tiles), within FP32 rounding elsewhere, as the
// tensor cores' own order is not the API's to state either.

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "cuda_sim.h"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

using __nv_bfloat16 = c10::BFloat16;

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the simulator has the 16x16x16 shape only");
    static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                   : std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>,
                  "BF16 or FP16 operands, FP32 accumulators");

public:
    static constexpr int num_elements = 16 * 16;
    T x[num_elements]; // element (row, column) at x[row * 16 + column], in every lane
};

namespace detail {

inline void whole_warp()
{
    uint64_t all[32];
    ::cuda_sim::warp_gather(0xffffffffu, 0, all);
}

inline void check_operand(const void* p, unsigned ldm, size_t element_bytes)
{
    if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
        throw std::runtime_error("cuda_sim: a wmma pointer that is not 32-byte aligned");
    if (ldm * element_bytes % 16 != 0)
        throw std::runtime_error("cuda_sim: a wmma ldm of " + std::to_string(ldm) + " elements, not a multiple of 16 bytes");
}

} // namespace detail

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm)
{
    static_assert(!std::is_same_v<Use, accumulator>, "operands only");
    detail::whole_warp();
    detail::check_operand(p, ldm, sizeof(T));
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c)
            f.x[r * 16 + c] = std::is_same_v<Layout, row_major> ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
}

inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v)
{
    for (float& e : f.x) e = v;
}

template <typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const fragment<matrix_a, 16, 16, 16, T, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, T, LayoutB>& b, const fragment<accumulator, 16, 16, 16, float>& c)
{
    detail::whole_warp();
    fragment<accumulator, 16, 16, 16, float> out;
    for (int r = 0; r < 16; ++r)
        for (int col = 0; col < 16; ++col) {
            float sum = c.x[r * 16 + col];
            for (int k = 0; k < 16; ++k) sum += static_cast<float>(a.x[r * 16 + k]) * static_cast<float>(b.x[k * 16 + col]);
            out.x[r * 16 + col] = sum;
        }
    d = out;
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f, unsigned ldm, layout_t layout)
{
    detail::whole_warp();
    detail::check_operand(p, ldm, sizeof(float));
    // The lane's share as mma.sync's m16n8k16 accumulators place it (PTX ISA), twice across:
    // rows g and g + 8, columns 2t, 2t + 1 and those + 8, for g = lane / 4, t = lane % 4.
    const int g = ::cuda_sim::lane_id() / 4, t = ::cuda_sim::lane_id() % 4;
    for (const int r : {g, g + 8})
        for (const int c : {2 * t, 2 * t + 1, 2 * t + 8, 2 * t + 9})
            p[layout == mem_row_major ? size_t(r) * ldm + c : size_t(c) * ldm + r] = f.x[r * 16 + c];
}

} // namespace nvcuda::wmma
