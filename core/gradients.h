// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The model's gradients grouped by the layer that owns them: per-layer norms (what the
// monitor plots and clipping uses), unscaling with the names of layers whose gradients are
// not finite (what a loss-scale backoff blames), and scaling (what clipping applies).

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace mantissa {

class LayerGradients {
public:
    // Parameters named as in named_parameters ("blocks.0.mlp.fc1.weight"); the layer is the
    // name up to the last dot.
    void add(const std::string& parameter_name, const torch::Tensor& parameter);

    // What the host needs from the gradients after the backward, read in one copy (the step's
    // one host sync): the L2 norm of every parameter-owning layer's gradient (registration
    // order), the layers whose gradients are not finite (only when `check_finite`), and a
    // device scalar that rides along (the step's loss).
    struct Report {
        std::vector<std::pair<std::string, double>> layer_norms;
        std::vector<std::string> non_finite_layers;
        double extra = 0.0;
    };
    Report read(bool check_finite, const torch::Tensor& extra = {}) const;
    std::vector<std::pair<std::string, double>> layer_norms() const { return read(false).layer_norms; }
    // Multiplies every gradient by `factor` (unscaling, clipping): queued, no sync.
    void scale(double factor);

private:
    std::vector<std::pair<std::string, torch::Tensor>> params_by_layer_;
};

// nn.utils.clip_grad_norm_ from norms already measured: the global norm is the root of the
// per-layer squares; gradients are scaled by max_norm / (norm + 1e-6) when that is below 1.
// Returns the global norm before clipping.
double clip_by_global_norm(LayerGradients& gradients, const std::vector<std::pair<std::string, double>>& layer_norms,
                           double max_norm);

} // namespace mantissa
