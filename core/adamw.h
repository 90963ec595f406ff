// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// AdamW over two parameter groups (decayed 2-D weights, undecayed rest), using ATen's
// fused kernel: the same math and kernel as torch.optim.AdamW(fused=True), in one call
// per group instead of a dozen ops per tensor.

#include <vector>

#include <torch/torch.h>

#include "project_config.h"

namespace mantissa {

class AdamW {
public:
    AdamW(std::vector<torch::Tensor> decayed, std::vector<torch::Tensor> undecayed, const OptimizerConfig& config);

    // Parameters without a gradient are skipped. `found_inf` (() FP32 on the parameters'
    // device, 1 or 0; optional) skips the whole update on the device where it is 1, as
    // torch.optim.AdamW(fused=True) under a GradScaler: weights, moments and step counters
    // stay as they were, and the host need not know.
    void step(double learning_rate, const torch::Tensor& found_inf = {});
    void zero_grad();                // drops the gradients (set_to_none)

    // Optimizer state for checkpoints, under "adamw/...".
    void save(torch::serialize::OutputArchive& archive) const;
    void load(torch::serialize::InputArchive& archive);

private:
    struct Group {
        std::vector<torch::Tensor> params, exp_avg, exp_avg_sq, steps;
        double weight_decay = 0.0;
    };
    void step_group(Group& group, double learning_rate, const torch::Tensor& found_inf);

    OptimizerConfig config_;
    std::vector<Group> groups_;
};

} // namespace mantissa
