// SPDX-License-Identifier: GPL-3.0-or-later
#include "batch_sampler.h"

namespace mantissa {

BatchSampler::BatchSampler(TokenIds tokens, int64_t batch_size, int64_t context_length, uint64_t seed)
    : tokens_(std::move(tokens)), batch_size_(batch_size), context_length_(context_length),
      generator_(at::make_generator<at::CPUGeneratorImpl>(seed))
{
}

std::pair<torch::Tensor, torch::Tensor> BatchSampler::next()
{
    const int64_t B = batch_size_, T = context_length_;
    const auto max_start = static_cast<int64_t>(tokens_.size()) - T;
    const auto offsets = torch::randint(max_start, {B}, generator_, torch::kLong);
    auto x = torch::empty({B, T}, torch::kLong);
    auto y = torch::empty({B, T}, torch::kLong);
    auto* xp = x.data_ptr<int64_t>();
    auto* yp = y.data_ptr<int64_t>();
    const auto* op = offsets.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
            xp[b * T + t] = tokens_[static_cast<size_t>(op[b] + t)];
            yp[b * T + t] = tokens_[static_cast<size_t>(op[b] + t + 1)];
        }
    return {x, y};
}

} // namespace mantissa
