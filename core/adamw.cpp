// SPDX-License-Identifier: GPL-3.0-or-later
#include "adamw.h"

namespace mantissa {

AdamW::AdamW(std::vector<torch::Tensor> decayed, std::vector<torch::Tensor> undecayed,
             const OptimizerConfig& config)
    : config_(config)
{
    auto make = [](std::vector<torch::Tensor> params, double weight_decay) {
        Group g;
        g.weight_decay = weight_decay;
        for (auto& p : params) {
            g.exp_avg.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
            g.exp_avg_sq.push_back(torch::zeros_like(p, torch::MemoryFormat::Preserve));
            // As torch.optim keeps it for the fused kernel: FP32, on the parameter's device.
            g.steps.push_back(torch::zeros({}, p.options().dtype(torch::kFloat32)));
        }
        g.params = std::move(params);
        return g;
    };
    groups_.push_back(make(std::move(decayed), config.weight_decay));
    groups_.push_back(make(std::move(undecayed), 0.0));
}

void AdamW::step(double learning_rate, const torch::Tensor& found_inf)
{
    torch::NoGradGuard no_grad;
    for (auto& g : groups_) step_group(g, learning_rate, found_inf);
}

void AdamW::step_group(Group& group, double learning_rate, const torch::Tensor& found_inf)
{
    std::vector<torch::Tensor> params, grads, exp_avg, exp_avg_sq, steps;
    for (size_t i = 0; i < group.params.size(); ++i) {
        const auto& grad = group.params[i].grad();
        if (!grad.defined()) continue;
        params.push_back(group.params[i]);
        grads.push_back(grad);
        exp_avg.push_back(group.exp_avg[i]);
        exp_avg_sq.push_back(group.exp_avg_sq[i]);
        steps.push_back(group.steps[i]);
    }
    if (params.empty()) return;
    // The fused kernel reads the already-incremented step. A skipped step adds 1 - 1 (as
    // torch.optim adds 1, then subtracts found_inf): integers, exact in FP32.
    if (found_inf.defined()) at::_foreach_add_(steps, std::vector<torch::Tensor>(steps.size(), 1.0 - found_inf));
    else at::_foreach_add_(steps, 1);
    at::_fused_adamw_(params, grads, exp_avg, exp_avg_sq, /*max_exp_avg_sqs=*/{}, steps, learning_rate,
                      config_.beta1, config_.beta2, group.weight_decay, config_.eps, /*amsgrad=*/false,
                      /*maximize=*/false, /*grad_scale=*/std::nullopt,
                      found_inf.defined() ? std::optional<torch::Tensor>(found_inf) : std::nullopt);
}

void AdamW::save(torch::serialize::OutputArchive& archive) const
{
    for (size_t g = 0; g < groups_.size(); ++g)
        for (size_t i = 0; i < groups_[g].params.size(); ++i) {
            const std::string key = "adamw/" + std::to_string(g) + "/" + std::to_string(i) + "/";
            archive.write(key + "exp_avg", groups_[g].exp_avg[i]);
            archive.write(key + "exp_avg_sq", groups_[g].exp_avg_sq[i]);
            archive.write(key + "step", groups_[g].steps[i]);
        }
}

void AdamW::load(torch::serialize::InputArchive& archive)
{
    torch::NoGradGuard no_grad;
    for (size_t g = 0; g < groups_.size(); ++g)
        for (size_t i = 0; i < groups_[g].params.size(); ++i) {
            const std::string key = "adamw/" + std::to_string(g) + "/" + std::to_string(i) + "/";
            torch::Tensor avg, avg_sq, step; // fresh tensors: the archive's storage is not resizable
            archive.read(key + "exp_avg", avg);
            archive.read(key + "exp_avg_sq", avg_sq);
            archive.read(key + "step", step);
            groups_[g].exp_avg[i].copy_(avg);
            groups_[g].exp_avg_sq[i].copy_(avg_sq);
            groups_[g].steps[i].copy_(step);
        }
}

void AdamW::zero_grad()
{
    for (auto& g : groups_)
        for (auto& p : g.params) p.mutable_grad().reset();
}

} // namespace mantissa
