// SPDX-License-Identifier: GPL-3.0-or-later
#include "cpu_transpose.h"

#include <algorithm>
#include <cstdint>

#include <ATen/Parallel.h>

namespace mantissa {
namespace {

constexpr int64_t kTile = 32;          // 32 x 4 bytes: two cache lines of a row, 32 rows at a time
constexpr int64_t kSmall = 1 << 14;    // below this, a thread barrier costs more than the copy

// dst (rows, cols) contiguous from src with strides (s0, s1), in elements.
template <typename T>
void copy_tiles(const T* src, T* dst, int64_t rows, int64_t cols, int64_t s0, int64_t s1)
{
    const int64_t tile_rows = (rows + kTile - 1) / kTile;
    at::parallel_for(0, tile_rows, 1, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
            const int64_t r0 = t * kTile, r1 = std::min(rows, r0 + kTile);
            for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
                const int64_t c1 = std::min(cols, c0 + kTile);
                for (int64_t r = r0; r < r1; ++r)
                    for (int64_t c = c0; c < c1; ++c) dst[r * cols + c] = src[r * s0 + c * s1];
            }
        }
    });
}

} // namespace

torch::Tensor contiguous_on_threads(const torch::Tensor& x)
{
    const auto size = x.element_size();
    if (!x.device().is_cpu() || x.dim() != 2 || x.is_contiguous() || x.numel() < kSmall || (size != 2 && size != 4) ||
        x.is_neg() || x.is_conj())
        return x.contiguous();
    auto out = torch::empty(x.sizes(), x.options().memory_format(torch::MemoryFormat::Contiguous));
    const int64_t rows = x.size(0), cols = x.size(1), s0 = x.stride(0), s1 = x.stride(1);
    // Bit patterns only: no value is converted, so NaN payloads and signed zeros travel as they are.
    const void* src = x.const_data_ptr();
    void* dst = out.data_ptr();
    if (size == 4)
        copy_tiles(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), rows, cols, s0, s1);
    else
        copy_tiles(static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst), rows, cols, s0, s1);
    return out;
}

} // namespace mantissa
