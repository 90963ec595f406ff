// SPDX-License-Identifier: GPL-3.0-or-later
// Validation loss and sampling. Both run the model in eval mode: the layers use their FP8
// scales without moving them, so an evaluation never changes the training after it.
#include "trainer_impl.h"

#include <algorithm>
#include <limits>

namespace mantissa {
namespace {
constexpr uint64_t kEvalSeedSalt = 0x5EEDE7A1ULL; // evaluation batches differ from training ones
}

double Trainer::Impl::estimate_loss(const TokenIds& split)
{
    torch::NoGradGuard no_grad;
    model->eval();
    BatchSampler sampler(split, config.training.batch_size, config.model.context_length,
                         config.training.seed ^ kEvalSeedSalt);
    // Summed in FP64 on the device, in batch order (what a host sum of the read-back losses
    // gives, to the bit), and read once: no wait per batch.
    auto total = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
    for (int64_t i = 0; i < config.eval.batches; ++i) {
        auto [x, y] = sampler.next();
        x = to_device(x);
        y = to_device(y);
        total = total + model->loss(model->forward(x), y).to(torch::kFloat64);
    }
    model->train();
    return total.item<double>() / static_cast<double>(config.eval.batches);
}

std::string Trainer::Impl::sample(const std::string& prompt, int64_t tokens, uint64_t seed)
{
    torch::NoGradGuard no_grad;
    model->eval();
    std::vector<int64_t> ids;
    if (!prompt.empty()) {
        ids = data.vocabulary.encode(prompt);
    } else {
        try {
            ids = data.vocabulary.encode("\n"); // text models start a fresh line
        } catch (const ConfigError&) {
            ids = {0}; // token files have no tokenizer here
        }
    }
    const size_t prompt_len = ids.size();
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    const int64_t T = config.model.context_length;
    for (int64_t i = 0; i < tokens; ++i) {
        const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - T);
        auto context = torch::tensor(std::vector<int64_t>(ids.begin() + start, ids.end()), torch::kLong)
                           .unsqueeze(0)
                           .to(device);
        auto logits = model->forward(context).select(1, -1).squeeze(0).to(torch::kCPU, torch::kFloat32) /
                      config.eval.sample_temperature; // (V)
        if (config.eval.sample_top_k > 0 && config.eval.sample_top_k < logits.size(0)) {
            const auto kth = std::get<0>(logits.topk(config.eval.sample_top_k)).min();
            logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
        }
        const auto probs = torch::softmax(logits, 0);
        // A diverged model (NaN weights) has no distribution to draw from; the divergence
        // itself is the watchers' to report, so the sample just ends here.
        if (!torch::isfinite(probs).all().item<bool>() || !(probs.sum().item<double>() > 0.0)) break;
        ids.push_back(torch::multinomial(probs, 1, false, generator).item<int64_t>());
    }
    model->train();
    return data.vocabulary.decode(std::vector<int64_t>(ids.begin() + static_cast<long>(prompt_len), ids.end()));
}

} // namespace mantissa
