// SPDX-License-Identifier: GPL-3.0-or-later
#include "gradients.h"

#include <cmath>
#include <limits>

namespace mantissa {

void LayerGradients::add(const std::string& parameter_name, const torch::Tensor& parameter)
{
    const auto dot = parameter_name.rfind('.');
    params_by_layer_.emplace_back(dot == std::string::npos ? parameter_name : parameter_name.substr(0, dot), parameter);
}

std::vector<torch::Tensor> LayerGradients::defined_grads() const
{
    std::vector<torch::Tensor> grads;
    for (const auto& [layer, p] : params_by_layer_)
        if (p.grad().defined()) grads.push_back(p.grad());
    return grads;
}

LayerGradients::Measured LayerGradients::measure(bool check_finite) const
{
    torch::NoGradGuard no_grad;
    Measured m;
    std::vector<torch::Tensor> grads;
    for (const auto& [layer, p] : params_by_layer_) {
        if (!p.grad().defined()) continue;
        if (m.layers.empty() || m.layers.back() != layer) m.layers.push_back(layer);
        grads.push_back(p.grad());
        m.owner.push_back(m.layers.size() - 1);
    }
    if (grads.empty()) return m;
    m.l2 = torch::stack(at::_foreach_norm(grads)).to(torch::kFloat64); // (params)
    m.total_norm = m.l2.square().sum().sqrt();
    if (check_finite) {
        // A gradient is not finite exactly when its max |g| is inf or NaN, or its L2 norm is
        // NaN (which catches a NaN even where a max kernel skips it); a finite gradient's L2
        // can overflow to inf, never to NaN.
        const auto linf = torch::stack(at::_foreach_norm(grads, std::numeric_limits<double>::infinity()));
        const auto bad = ~torch::isfinite(linf) | torch::isnan(m.l2);
        m.not_finite = bad.to(torch::kFloat64);
        m.found_inf = bad.any().to(torch::kFloat32); // exactly 1 or 0: the fused AdamW tests == 1
    }
    return m;
}

void LayerGradients::clip(const Measured& measured, double max_norm)
{
    if (max_norm <= 0.0 || !measured.total_norm.defined()) return;
    torch::NoGradGuard no_grad;
    // The coefficient rounds to float32 as a double scalar would in the multiply. Below 1
    // only (a NaN norm leaves the gradients alone, as the comparison on the host did):
    // multiplying by 1 is exact, so every other gradient stays as it was.
    const auto coef = max_norm / (measured.total_norm + 1e-6);
    const auto clamped = torch::where(coef < 1.0, coef, torch::ones_like(coef)).to(torch::kFloat32);
    auto grads = defined_grads();
    if (!grads.empty()) at::_foreach_mul_(grads, clamped);
}

void LayerGradients::scale(const torch::Tensor& factor)
{
    torch::NoGradGuard no_grad;
    auto grads = defined_grads();
    if (!grads.empty()) at::_foreach_mul_(grads, factor);
}

LayerGradients::PendingRead LayerGradients::start_read(const Measured& measured,
                                                       const std::vector<torch::Tensor>& extras) const
{
    std::vector<torch::Tensor> parts;
    PendingRead pending;
    for (const auto& e : extras) {
        parts.push_back(e.detach().reshape({-1}).to(torch::kFloat64));
        pending.extras += parts.back().numel();
    }
    if (measured.l2.defined()) {
        parts.push_back(measured.l2);
        parts.push_back(measured.total_norm.reshape({1}));
        if (measured.not_finite.defined()) parts.push_back(measured.not_finite);
    }
    if (!parts.empty()) pending.copy = start_copy(torch::cat(parts));
    return pending;
}

LayerGradients::Report LayerGradients::finish_read(const Measured& measured, const PendingRead& pending) const
{
    Report report;
    const auto& host = pending.copy.wait(); // the one sync
    if (!host.defined()) return report;
    const double* v = host.data_ptr<double>();
    report.extras.assign(v, v + pending.extras);
    if (!measured.l2.defined()) return report;
    const double* norms = v + pending.extras;
    const size_t n = measured.owner.size();
    report.total_norm = norms[n];
    const double* bad = measured.not_finite.defined() ? norms + n + 1 : nullptr;
    for (const auto& layer : measured.layers) report.layer_norms.emplace_back(layer, 0.0);
    for (size_t i = 0; i < n; ++i) {
        auto& [layer, sum_sq] = report.layer_norms[measured.owner[i]];
        sum_sq += norms[i] * norms[i];
        if (bad && bad[i] != 0.0 &&
            (report.non_finite_layers.empty() || report.non_finite_layers.back() != layer))
            report.non_finite_layers.push_back(layer);
    }
    for (auto& item : report.layer_norms) item.second = std::sqrt(item.second);
    return report;
}

} // namespace mantissa
