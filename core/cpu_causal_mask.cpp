// SPDX-License-Identifier: GPL-3.0-or-later
#include "cpu_causal_mask.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>

#include "vector_clones.h"

namespace mantissa {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows [begin, end) of (rows, T): row r is query r % T; its keys past the query get `future`,
// the others x * scale. Two loops per row, so that neither carries a branch.
MANTISSA_VECTOR_CLONES
void mask_rows(const float* x, float* out, int64_t t, float scale, float future, int64_t begin, int64_t end)
{
    for (int64_t r = begin; r < end; ++r) {
        const int64_t seen = r % t + 1; // keys 0..query
        const float* xr = x + r * t;
        float* o = out + r * t;
        for (int64_t j = 0; j < seen; ++j) o[j] = xr[j] * scale;
        std::fill(o + seen, o + t, future);
    }
}

torch::Tensor masked_scaled(const torch::Tensor& x_in, float scale, float future)
{
    const auto x = x_in.contiguous();
    const int64_t t = x.size(-1), rows = t == 0 ? 0 : x.numel() / t;
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, t)),
                     [&](int64_t begin, int64_t end) { mask_rows(in, o, t, scale, future, begin, end); });
    return out;
}

struct ScaledCausalMask : public torch::autograd::Function<ScaledCausalMask> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& scores, double scale)
    {
        ctx->saved_data["scale"] = scale;
        return masked_scaled(scores, static_cast<float>(scale), -std::numeric_limits<float>::infinity());
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        // masked_fill's backward fills the future with 0; the product's multiplies the rest.
        if (!grads[0].defined()) return {torch::Tensor(), torch::Tensor()};
        const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
        return {masked_scaled(grads[0], scale, 0.0f), torch::Tensor()};
    }
};

} // namespace

torch::Tensor scaled_causal_mask(const torch::Tensor& scores, double scale)
{
    TORCH_CHECK(scores.dim() >= 2 && scores.size(-1) == scores.size(-2), "scaled_causal_mask: scores (..., T, T)");
    const int64_t t = scores.size(-1);
    if (scores.device().is_cpu() && scores.scalar_type() == torch::kFloat32)
        return ScaledCausalMask::apply(scores, scale);
    const auto future = torch::ones({t, t}, torch::dtype(torch::kBool).device(scores.device())).triu(1);
    return (scores * scale).masked_fill(future, -std::numeric_limits<float>::infinity());
}

} // namespace mantissa
