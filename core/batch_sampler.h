// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Random windows of a token split. Offsets come from a dedicated generator so that the
// batch sequence depends only on the seed, not on what else consumed random numbers.

#include <cstdint>
#include <utility>

#include <torch/torch.h>

#include "token_ids.h"

namespace mantissa {

class BatchSampler {
public:
    BatchSampler(TokenIds tokens, int64_t batch_size, int64_t context_length, uint64_t seed);

    // x (B, T) and y (B, T) = x shifted by one token, on the CPU.
    std::pair<torch::Tensor, torch::Tensor> next();

    at::Generator& generator() { return generator_; }

private:
    TokenIds tokens_; // shares the split's buffer or mapping
    int64_t batch_size_, context_length_;
    at::Generator generator_;
};

} // namespace mantissa
