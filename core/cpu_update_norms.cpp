// SPDX-License-Identifier: GPL-3.0-or-later
#include "cpu_update_norms.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "vector_clones.h"

namespace mantissa {
namespace {

using D8 = double __attribute__((vector_size(64)));
using F16 = float __attribute__((vector_size(64)));

struct SquareSums {
    double weight = 0.0, update = 0.0;
};

// Sum before^2 and (after - before)^2 over [begin, end), sixteen values a step in sixteen FP64
// lanes each (four-lane sums were one chain of dependent adds a step, and took twice as long),
// added lane by lane at the end; the last values, fewer than sixteen, one by one.
MANTISSA_VECTOR_CLONES
SquareSums square_sums(const float* before, const float* after, int64_t begin, int64_t end)
{
    D8 w_lo{}, w_hi{}, u_lo{}, u_hi{};
    int64_t i = begin;
    for (; i + 16 <= end; i += 16) {
        F16 b, a;
        std::memcpy(&b, before + i, sizeof b);
        std::memcpy(&a, after + i, sizeof a);
        const D8 b_lo = __builtin_convertvector(__builtin_shufflevector(b, b, 0, 1, 2, 3, 4, 5, 6, 7), D8);
        const D8 b_hi = __builtin_convertvector(__builtin_shufflevector(b, b, 8, 9, 10, 11, 12, 13, 14, 15), D8);
        const D8 d_lo = __builtin_convertvector(__builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7), D8) - b_lo;
        const D8 d_hi = __builtin_convertvector(__builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15), D8) - b_hi;
        w_lo += b_lo * b_lo;
        w_hi += b_hi * b_hi;
        u_lo += d_lo * d_lo;
        u_hi += d_hi * d_hi;
    }
    SquareSums s;
    for (int lane = 0; lane < 8; ++lane) {
        s.weight += w_lo[lane] + w_hi[lane];
        s.update += u_lo[lane] + u_hi[lane];
    }
    for (; i < end; ++i) {
        const double b = before[i], d = static_cast<double>(after[i]) - b;
        s.weight += b * b;
        s.update += d * d;
    }
    return s;
}

} // namespace

bool update_norms_cpu_takes(const std::vector<torch::Tensor>& befores, const std::vector<torch::Tensor>& afters)
{
    if (befores.size() != afters.size()) return false;
    for (size_t i = 0; i < befores.size(); ++i) {
        const auto &b = befores[i], &a = afters[i];
        const auto fp32_here = [](const torch::Tensor& t) {
            return t.is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
        };
        if (!fp32_here(b) || !fp32_here(a) || b.sizes() != a.sizes()) return false;
    }
    return true;
}

torch::Tensor update_norms_cpu(const std::vector<torch::Tensor>& befores, const std::vector<torch::Tensor>& afters)
{
    TORCH_CHECK(update_norms_cpu_takes(befores, afters), "update_norms_cpu: pairs of contiguous FP32 CPU tensors");
    struct Chunk {
        size_t pair;
        int64_t begin, end;
    };
    // Chunks of a fixed size, not a share per thread: the sums must not depend on the thread count.
    constexpr int64_t kChunk = 1 << 14;
    std::vector<Chunk> chunks;
    for (size_t p = 0; p < befores.size(); ++p)
        for (int64_t b = 0; b < befores[p].numel(); b += kChunk)
            chunks.push_back({p, b, std::min(b + kChunk, befores[p].numel())});
    std::vector<SquareSums> partial(chunks.size());
    at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
            const auto& ch = chunks[static_cast<size_t>(c)];
            partial[static_cast<size_t>(c)] = square_sums(befores[ch.pair].data_ptr<float>(),
                                                          afters[ch.pair].data_ptr<float>(), ch.begin, ch.end);
        }
    });
    auto out = torch::zeros({static_cast<int64_t>(befores.size()), 2}, torch::kFloat64);
    double* o = out.data_ptr<double>();
    for (size_t c = 0; c < chunks.size(); ++c) { // in order
        o[2 * chunks[c].pair] += partial[c].weight;
        o[2 * chunks[c].pair + 1] += partial[c].update;
    }
    return out.sqrt_();
}

} // namespace mantissa
