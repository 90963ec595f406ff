// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The model's gradients grouped by the layer that owns them: per-layer norms (what the
// monitor plots), the global norm and clipping, unscaling, and the names of layers whose
// gradients are not finite (what a loss-scale backoff blames). Everything is queued on the
// gradients' device; the host reads the results in one copy, queued ahead of the step's
// update and waited for after it.

#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "host_copy.h"

namespace mantissa {

class LayerGradients {
public:
    // Parameters named as in named_parameters ("blocks.0.mlp.fc1.weight"); the layer is the
    // name up to the last dot.
    void add(const std::string& parameter_name, const torch::Tensor& parameter);

    // What the step needs from the gradients, queued on their device (no sync): each
    // parameter's L2 norm, the global norm that clipping uses, and, with `check_finite`, which
    // parameters' gradients hold an inf or NaN and found_inf, on which the fused AdamW skips.
    struct Measured {
        std::vector<std::string> layers; // parameter-owning layers, registration order
        std::vector<size_t> owner;       // per parameter with a gradient: its index in `layers`
        torch::Tensor l2;                // (params) FP64
        torch::Tensor not_finite;        // (params) FP64, 1 or 0; only with check_finite
        torch::Tensor found_inf;         // () FP32, 1 or 0; only with check_finite
        torch::Tensor total_norm;        // () FP64: the root of the sum of the squared l2
    };
    Measured measure(bool check_finite) const;
    // nn.utils.clip_grad_norm_ with the measured global norm: every gradient times
    // max_norm / (norm + 1e-6) where that is below 1, decided on the device (queued).
    void clip(const Measured& measured, double max_norm);
    // Multiplies every gradient by a () FP32 device factor (unscaling): queued, no sync.
    void scale(const torch::Tensor& factor);

    // The step's one host sync, in two halves. start_read queues one copy of the measurement
    // and the `extras` (FP64 tensors that ride along: the step's loss, the loss scale's state)
    // and returns at once, so that the step goes on queuing its update behind it; finish_read
    // waits for that copy only: on CUDA the clipping and the optimizer keep the GPU busy
    // while the host reads the report and prepares the next step.
    struct Report {
        std::vector<std::pair<std::string, double>> layer_norms;
        std::vector<std::string> non_finite_layers;
        double total_norm = 0.0;
        std::vector<double> extras; // the extras' values, flattened in order
    };
    struct PendingRead {
        HostCopy copy;
        int64_t extras = 0; // values ahead of the measurement
    };
    PendingRead start_read(const Measured& measured, const std::vector<torch::Tensor>& extras = {}) const;
    Report finish_read(const Measured& measured, const PendingRead& pending) const;

private:
    std::vector<torch::Tensor> defined_grads() const;
    std::vector<std::pair<std::string, torch::Tensor>> params_by_layer_;
};

} // namespace mantissa
