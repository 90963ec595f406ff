// SPDX-License-Identifier: GPL-3.0-or-later
#include "cpu_hadamard.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#include "fp8_rounder.h"
#include "vector_clones.h"

namespace mantissa {
namespace {

// The transform's matrix as random_hadamard_transform builds it: Sylvester's H16,
// (-1)^popcount(k & j), row k times TE's wgrad sign s_k (bit k of kNegativeRows set where
// s_k = -1), times 1/4. Every entry is exactly +-1/4.
constexpr std::array<std::array<float, 16>, 16> transform_matrix()
{
    constexpr uint32_t kNegativeRows = 0b1101011111101000;
    std::array<std::array<float, 16>, 16> t{};
    for (uint32_t k = 0; k < 16; ++k)
        for (uint32_t j = 0; j < 16; ++j) {
            const uint32_t minus = (std::popcount(k & j) + (kNegativeRows >> k)) & 1u;
            t[k][j] = minus ? -0.25f : 0.25f;
        }
    return t;
}
constexpr auto kTransform = transform_matrix();

// Groups [g_begin, g_end) of 16 columns, every row. Element (r, c) of x is x[r * rs + c * cs].
MANTISSA_FMA_CLONES
void hadamard_groups(const float* x, int64_t rs, int64_t cs, int64_t rows, int64_t cols, float* out, int64_t g_begin,
                     int64_t g_end)
{
    for (int64_t g = g_begin; g < g_end; ++g)
        for (int64_t r = 0; r < rows; ++r) {
            const float* in = x + r * rs + 16 * g * cs;
            float* o = out + r * cols + 16 * g;
            // The 16 outputs in vector lanes, each a chain of 16 FMAs: GCC 12 leaves the same
            // loops the other way round (k outside) scalar. (core is compiled with OpenMP; a
            // compiler without it would warn about the pragma, an error under -Werror.)
#ifdef _OPENMP
#pragma omp simd
#endif
            for (int j = 0; j < 16; ++j) {
                float acc = 0.0f;
                for (int k = 0; k < 16; ++k) acc = std::fma(in[k * cs], kTransform[k][j], acc);
                o[j] = rounding::round_bf16(acc);
            }
        }
}

} // namespace

torch::Tensor hadamard16_bf16_cpu(const torch::Tensor& x)
{
    TORCH_CHECK(x.dim() == 2 && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.size(1) % 16 == 0,
                "hadamard16_bf16_cpu: a 2-D FP32 CPU matrix whose rows are a multiple of 16 long");
    if (x.is_neg()) return hadamard16_bf16_cpu(x.resolve_neg());
    const int64_t rows = x.size(0), cols = x.size(1), groups = cols / 16;
    auto out = torch::empty({rows, cols});
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    // About 16k outputs per task: below that a thread barrier costs more than the work.
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, 16 * rows));
    at::parallel_for(0, groups, grain, [&](int64_t begin, int64_t end) {
        hadamard_groups(in, x.stride(0), x.stride(1), rows, cols, o, begin, end);
    });
    return out;
}

} // namespace mantissa
