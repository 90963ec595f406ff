// SPDX-License-Identifier: GPL-3.0-or-later
#include "cpu_attention_scores.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <vector>

#include "vector_clones.h"

namespace mantissa {
namespace {

constexpr int64_t kQueries = 4; // a group of queries shares each load of the keys
constexpr int64_t kKeys = 16;   // keys a step: one AVX-512 register of sums per query

using F16 = float __attribute__((vector_size(64)));
using U16 = uint32_t __attribute__((vector_size(64)));

// The largest |product| bits of one head. Scratch: k_t (D, Tp) for the keys' transpose, zero
// past T (Tp: T rounded up to kKeys), so that consecutive keys lie in consecutive lanes; q_g
// (kQueries, D) for a group's queries. A group of queries takes the products of its last
// query's keys, a block of kKeys at a time with the sums in vector registers, and each query
// then keeps only its own causal ones. GCC's vector types, not loops left to the vectorizer:
// it turned the loops into shuffles of 4-lane registers, slower than the ops' route.
MANTISSA_VECTOR_CLONES
uint32_t head_max_bits(const float* q, int64_t q_row, const float* k, int64_t k_row, int64_t T, int64_t D, float* k_t,
                       float* q_g)
{
    const int64_t Tp = (T + kKeys - 1) / kKeys * kKeys;
    for (int64_t d = 0; d < D; ++d) {
        for (int64_t j = 0; j < T; ++j) k_t[d * Tp + j] = k[j * k_row + d];
        for (int64_t j = T; j < Tp; ++j) k_t[d * Tp + j] = 0.0f;
    }
    const U16 lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    U16 m{};
    for (int64_t i0 = 0; i0 < T; i0 += kQueries) {
        const int64_t queries = std::min(kQueries, T - i0);
        for (int64_t g = 0; g < kQueries; ++g)
            for (int64_t d = 0; d < D; ++d) q_g[g * D + d] = g < queries ? q[(i0 + g) * q_row + d] : 0.0f;
        for (int64_t j0 = 0; j0 < i0 + queries; j0 += kKeys) { // keys j0 .. j0 + 15
            F16 acc[kQueries] = {};
            for (int64_t d = 0; d < D; ++d) {
                F16 kd;
                std::memcpy(&kd, k_t + d * Tp + j0, sizeof kd);
                for (int64_t g = 0; g < kQueries; ++g) acc[g] += q_g[g * D + d] * kd;
            }
            for (int64_t g = 0; g < queries; ++g) {
                // Query i0 + g sees keys 0 .. i0 + g; a NaN's bits are above every other magnitude's.
                const U16 seen = lane + static_cast<uint32_t>(j0) <= static_cast<uint32_t>(i0 + g);
                const U16 bits = __builtin_bit_cast(U16, acc[g]) & 0x7FFFFFFFu & seen;
                m = m > bits ? m : bits;
            }
        }
    }
    uint32_t largest = 0;
    for (int j = 0; j < kKeys; ++j) largest = std::max(largest, m[j]);
    return largest;
}

} // namespace

torch::Tensor causal_max_abs_score_cpu(const torch::Tensor& q_in, const torch::Tensor& k_in)
{
    TORCH_CHECK(q_in.is_cpu() && k_in.is_cpu() && q_in.scalar_type() == torch::kFloat32 &&
                    k_in.scalar_type() == torch::kFloat32 && q_in.dim() == 4 && q_in.sizes() == k_in.sizes(),
                "causal_max_abs_score_cpu: FP32 CPU heads (B, H, T, D) of equal sizes");
    const auto q = q_in.stride(3) == 1 ? q_in : q_in.contiguous();
    const auto k = k_in.stride(3) == 1 ? k_in : k_in.contiguous();
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
    std::atomic<uint32_t> largest{0};
    if (B * H * T * D > 0) {
        at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
            const int64_t Tp = (T + kKeys - 1) / kKeys * kKeys;
            std::vector<float> k_t(static_cast<size_t>(D * Tp)), q_g(static_cast<size_t>(kQueries * D));
            uint32_t m = 0;
            for (int64_t bh = begin; bh < end; ++bh) {
                const int64_t b = bh / H, h = bh % H;
                const float* qp = q.data_ptr<float>() + b * q.stride(0) + h * q.stride(1);
                const float* kp = k.data_ptr<float>() + b * k.stride(0) + h * k.stride(1);
                m = std::max(m, head_max_bits(qp, q.stride(2), kp, k.stride(2), T, D, k_t.data(), q_g.data()));
            }
            uint32_t seen = largest.load();
            while (seen < m && !largest.compare_exchange_weak(seen, m)) {
            }
        });
    }
    return torch::scalar_tensor(std::bit_cast<float>(largest.load()), torch::kFloat32);
}

} // namespace mantissa
