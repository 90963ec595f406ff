// SPDX-License-Identifier: GPL-3.0-or-later
#include "cpu_log_z.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "vector_clones.h"

namespace mantissa {
namespace {

using F8 = float __attribute__((vector_size(32)));
using I8 = int32_t __attribute__((vector_size(32)));

// exp(d) for d <= 0 in FP32, Cephes' expf: d = k ln2 + r with |r| <= ln2 / 2 (ln2 in two parts),
// a degree-7 polynomial in r, times 2^k from the exponent bits; below -87 (where the result would
// be subnormal, and beside the row's max, whose term is 1, nothing) it is 0. n a multiple of 8,
// eight values a step in GCC's vector types (GCC's vectorizer left the same loop scalar, with a
// branch a value); each operation rounds once (core has -ffp-contract=off), so every clone gives
// the same bits. Within about two ulps of exp (tests/test_telemetry.cpp, logZRowsOnTheCpu).
MANTISSA_VECTOR_CLONES
void exp_of_nonpositive(const float* d, float* out, int64_t n)
{
    for (int64_t j = 0; j < n; j += 8) {
        F8 x;
        std::memcpy(&x, d + j, sizeof x);
        const I8 tiny = x < -87.0f; // -1 where the result is 0
        const I8 floor_bits = __builtin_bit_cast(I8, F8{} - 87.0f);
        x = __builtin_bit_cast(F8, (__builtin_bit_cast(I8, x) & ~tiny) | (floor_bits & tiny));
        const F8 fx = x * 1.44269504088896341f + 0.5f;
        I8 ki = __builtin_convertvector(fx, I8); // toward 0: fx <= 0.5
        const I8 above = __builtin_convertvector(ki, F8) > fx;
        ki += above; // floor
        const F8 k = __builtin_convertvector(ki, F8);
        const F8 r = (x - k * 0.693359375f) - k * -2.12194440e-4f;
        F8 y = F8{} + 1.9875691500e-4f;
        y = y * r + 1.3981999507e-3f;
        y = y * r + 8.3334519073e-3f;
        y = y * r + 4.1665795894e-2f;
        y = y * r + 1.6666665459e-1f;
        y = y * r + 5.0000001201e-1f;
        y = y * (r * r) + r + 1.0f;
        const F8 scale = __builtin_bit_cast(F8, (ki + 127) << 23);
        const F8 e = __builtin_bit_cast(F8, __builtin_bit_cast(I8, y * scale) & ~tiny);
        std::memcpy(out + j, &e, sizeof e);
    }
}

} // namespace

torch::Tensor log_z_rows_cpu(const torch::Tensor& rows_in)
{
    TORCH_CHECK(rows_in.dim() == 2 && rows_in.is_cpu() && rows_in.scalar_type() == torch::kFloat32,
                "log_z_rows_cpu: (rows, V) FP32 on the CPU");
    const auto rows = rows_in.contiguous();
    const int64_t n = rows.size(0), V = rows.size(1);
    auto out = torch::empty({n}, torch::kFloat64);
    const float* x = rows.data_ptr<float>();
    double* o = out.data_ptr<double>();
    constexpr int64_t kPiece = 256; // values of a row at a time (a multiple of 8)
    // About 16 K values a task: below that a thread barrier costs more than the work.
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, V));
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
        float shifted[kPiece], e[kPiece];
        for (int64_t r = begin; r < end; ++r) {
            const float* row = x + r * V;
            float m = -std::numeric_limits<float>::infinity();
            bool nan = false;
            for (int64_t j = 0; j < V; ++j) {
                nan |= std::isnan(row[j]);
                m = std::max(m, row[j]);
            }
            if (nan || V == 0) {
                o[r] = V == 0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
                continue;
            }
            if (std::isinf(m)) { // logsumexp's: a row of -Inf is -Inf, a row with +Inf is +Inf
                o[r] = m;
                continue;
            }
            // Four FP64 sums in a fixed order: the same bits on any thread and in every clone.
            double sums[4] = {0.0, 0.0, 0.0, 0.0};
            for (int64_t first = 0; first < V; first += kPiece) {
                const int64_t count = std::min(kPiece, V - first), whole = (count + 7) / 8 * 8;
                for (int64_t j = 0; j < count; ++j) shifted[j] = row[first + j] - m; // <= 0
                for (int64_t j = count; j < whole; ++j) shifted[j] = 0.0f;             // not summed
                exp_of_nonpositive(shifted, e, whole);
                for (int64_t j = 0; j < count; ++j) sums[(first + j) % 4] += e[j];
            }
            o[r] = std::log((sums[0] + sums[1]) + (sums[2] + sums[3])) + static_cast<double>(m);
        }
    });
    return out;
}

} // namespace mantissa
