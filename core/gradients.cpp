// SPDX-License-Identifier: GPL-3.0-or-later
#include "gradients.h"

#include <cmath>

namespace mantissa {

void LayerGradients::add(const std::string& parameter_name, const torch::Tensor& parameter)
{
    const auto dot = parameter_name.rfind('.');
    params_by_layer_.emplace_back(dot == std::string::npos ? parameter_name : parameter_name.substr(0, dot), parameter);
}

std::vector<std::pair<std::string, double>> LayerGradients::layer_norms() const
{
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads;
    std::vector<size_t> owner;
    std::vector<std::pair<std::string, double>> out;
    for (const auto& [layer, p] : params_by_layer_) {
        if (!p.grad().defined()) continue;
        if (out.empty() || out.back().first != layer) out.emplace_back(layer, 0.0);
        grads.push_back(p.grad());
        owner.push_back(out.size() - 1);
    }
    if (grads.empty()) return out;
    const auto norms = torch::stack(at::_foreach_norm(grads)).to(torch::kFloat64).cpu();
    const auto* n = norms.data_ptr<double>();
    for (size_t i = 0; i < owner.size(); ++i) out[owner[i]].second += n[i] * n[i];
    for (auto& item : out) item.second = std::sqrt(item.second);
    return out;
}

std::vector<std::string> LayerGradients::unscale_and_check(double scale)
{
    torch::NoGradGuard no_grad;
    std::vector<std::string> bad;
    for (auto& [layer, p] : params_by_layer_) {
        auto& g = p.mutable_grad();
        if (!g.defined()) continue;
        if (scale != 1.0) g.mul_(1.0 / scale);
        if (!torch::isfinite(g).all().item<bool>() && (bad.empty() || bad.back() != layer)) bad.push_back(layer);
    }
    return bad;
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
