// SPDX-License-Identifier: GPL-3.0-or-later
#include "telemetry_frame.h"

#include "device_memory.h"

namespace mantissa {

bool TelemetryStep::is_armed(int64_t interval, int64_t step_index)
{
    const int64_t step = step_index + 1;
    return interval > 0 && (step == 1 || step % interval == 0);
}

void TelemetryStep::arm(Gpt& model)
{
    for (const auto& g : model->gemm_layers()) g->arm_telemetry(true);
    model->measure_log_z(true);
}

void TelemetryStep::disarm(Gpt& model)
{
    for (const auto& g : model->gemm_layers()) g->arm_telemetry(false);
    model->measure_log_z(false);
}

void TelemetryStep::remember_weights(Gpt& model)
{
    torch::NoGradGuard no_grad;
    weights_before_.clear();
    for (const auto& g : model->gemm_layers())
        if (g->last_weight().defined()) weights_before_[g->name()] = g->last_weight().detach().clone();
}

LayerStatsFrame TelemetryStep::assemble(Gpt& model, int64_t step, bool skipped, bool on_cuda)
{
    torch::NoGradGuard no_grad;
    LayerStatsFrame frame;
    frame.step = step;
    for (const auto& g : model->gemm_layers()) {
        for (auto& t : g->take_stats()) {
            if (t.role == "weight" && !skipped) {
                const auto it = weights_before_.find(g->name());
                if (it != weights_before_.end()) {
                    const auto& before = it->second;
                    const double w_rms = before.square().mean().sqrt().item<double>();
                    const double u_rms = (g->last_weight().detach() - before).square().mean().sqrt().item<double>();
                    t.update_ratio = w_rms > 0 ? u_rms / w_rms : 0.0;
                }
            }
            frame.tensors.push_back(std::move(t));
        }
        if (g->attention_max_logit() >= 0) {
            const auto& n = g->name();
            frame.attention_max_logit.emplace_back(n.substr(0, n.size() - std::string(".sdpa").size()),
                                                   g->attention_max_logit());
        }
    }
    frame.log_z_mean = model->log_z_mean();
    frame.log_z_max = model->log_z_max();
    frame.memory = read_memory(on_cuda);
    weights_before_.clear();
    return frame;
}

} // namespace mantissa
