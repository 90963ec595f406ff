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

LayerGradients::Report LayerGradients::read(bool check_finite, const torch::Tensor& extra) const
{
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads;
    std::vector<size_t> owner;
    Report report;
    auto& out = report.layer_norms;
    for (const auto& [layer, p] : params_by_layer_) {
        if (!p.grad().defined()) continue;
        if (out.empty() || out.back().first != layer) out.emplace_back(layer, 0.0);
        grads.push_back(p.grad());
        owner.push_back(out.size() - 1);
    }
    std::vector<torch::Tensor> parts;
    if (extra.defined()) parts.push_back(extra.detach().reshape({1}).to(torch::kFloat64));
    if (!grads.empty()) {
        const auto l2 = torch::stack(at::_foreach_norm(grads)); // (params)
        parts.push_back(l2.to(torch::kFloat64));
        if (check_finite) {
            // A gradient is not finite exactly when its max |g| is inf or NaN, or its L2 norm
            // is NaN (which catches a NaN even where a max kernel skips it); a finite
            // gradient's L2 can overflow to inf, never to NaN.
            const auto linf = torch::stack(at::_foreach_norm(grads, std::numeric_limits<double>::infinity()));
            parts.push_back((~torch::isfinite(linf) | torch::isnan(l2)).to(torch::kFloat64));
        }
    }
    if (parts.empty()) return report;
    const auto host = torch::cat(parts).to(torch::kCPU); // the one sync
    const double* v = host.data_ptr<double>();
    if (extra.defined()) report.extra = *v++;
    const double* norms = v;
    const double* bad = v + grads.size();
    for (size_t i = 0; i < owner.size(); ++i) {
        out[owner[i]].second += norms[i] * norms[i];
        if (check_finite && bad[i] != 0.0) {
            const auto& layer = out[owner[i]].first;
            if (report.non_finite_layers.empty() || report.non_finite_layers.back() != layer)
                report.non_finite_layers.push_back(layer);
        }
    }
    for (auto& item : out) item.second = std::sqrt(item.second);
    return report;
}

void LayerGradients::scale(double factor)
{
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads;
    for (const auto& [layer, p] : params_by_layer_)
        if (p.grad().defined()) grads.push_back(p.grad());
    at::_foreach_mul_(grads, factor);
}

double clip_by_global_norm(LayerGradients& gradients, const std::vector<std::pair<std::string, double>>& layer_norms,
                           double max_norm)
{
    double sum_sq = 0.0;
    for (const auto& [layer, norm] : layer_norms) sum_sq += norm * norm;
    const double norm = std::sqrt(sum_sq);
    if (max_norm > 0.0) {
        const double coef = max_norm / (norm + 1e-6);
        if (coef < 1.0) gradients.scale(coef);
    }
    return norm;
}

} // namespace mantissa
