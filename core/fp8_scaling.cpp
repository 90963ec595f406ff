// SPDX-License-Identifier: GPL-3.0-or-later
#include "fp8_scaling.h"

#include <algorithm>
#include <cmath>

namespace mantissa {

float scale_from_amax(float amax, double fp8_max, int64_t margin, float previous)
{
    if (!(amax > 0.0f) || !std::isfinite(amax)) return previous;
    const double scale = (fp8_max / static_cast<double>(amax)) / std::ldexp(1.0, static_cast<int>(margin));
    return static_cast<float>(scale);
}

void DelayedScaling::record(float amax, double fp8_max, bool use_max, int64_t margin)
{
    if (history_.empty()) history_.push_back(0.0f);
    std::rotate(history_.rbegin(), history_.rbegin() + 1, history_.rend()); // roll by one
    history_[0] = amax;
    float reduced = history_[0];
    if (use_max) {
        reduced = 0.0f;
        for (float a : history_) {
            if (!std::isfinite(a)) { reduced = a; break; } // a non-finite amax keeps the old scale
            reduced = std::max(reduced, a);
        }
    }
    scale_ = scale_from_amax(reduced, fp8_max, margin, scale_);
}

void DelayedScaling::reset()
{
    std::fill(history_.begin(), history_.end(), 0.0f);
    scale_ = 1.0f;
}

namespace {

Overflow overflow_of(const Fp8Recipe& r) { return r.saturate ? Overflow::Saturate : Overflow::Propagate; }

// Per-tensor: q = cast(x * scale), x ~ q * (1 / scale), as TE multiplies by scale_inv.
torch::Tensor scaled_round(const torch::Tensor& x, const torch::Tensor& scale, NumberFormat format, Overflow overflow)
{
    return round_to_format(x * scale, format, overflow) * scale.reciprocal();
}

torch::Tensor quantize_rows(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe, int64_t k_dim)
{
    const double fp8_max = format_info(format).max_finite;
    auto amax = x.abs().amax({k_dim}, /*keepdim=*/true); // one per row of the GEMM operand
    auto scale = (fp8_max / amax).div(std::ldexp(1.0, static_cast<int>(recipe.margin)));
    if (recipe.rowwise_power_of_two) scale = torch::exp2(torch::floor(torch::log2(scale)));
    // Rows of zeros (or non-finite amax) keep scale 1.
    scale = torch::where(torch::isfinite(scale) & (amax > 0), scale, torch::ones_like(scale));
    return scaled_round(x, scale, format, overflow_of(recipe));
}

torch::Tensor quantize_blocks(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe, int64_t k_dim)
{
    constexpr int64_t kBlock = 32;
    const int emax_elem = format == NumberFormat::E4M3 ? 8 : 15; // exponent of the format's largest binade
    // Move K last and pad it to a multiple of 32; padding zeros do not change a block's amax.
    auto moved = x.movedim(k_dim, -1);
    const int64_t k = moved.size(-1);
    const int64_t padded = (k + kBlock - 1) / kBlock * kBlock;
    auto work = padded == k ? moved : torch::constant_pad_nd(moved, {0, padded - k});
    auto shape = work.sizes().vec();
    shape.back() = padded / kBlock;
    shape.push_back(kBlock);
    auto blocks = work.reshape(shape); // (..., K/32, 32)
    auto amax = blocks.abs().amax({-1}, /*keepdim=*/true);
    auto log2_amax = torch::log2(amax);
    // OCP MX v1.0: shared_exp = floor(log2(amax)) - emax_elem. Rounding up instead guarantees
    // amax / 2^e <= max, so no element saturates.
    auto shared_exp = recipe.mx_round_scale_up
                          ? torch::ceil(log2_amax - std::log2(format_info(format).max_finite))
                          : torch::floor(log2_amax) - emax_elem;
    shared_exp = torch::where(amax > 0, shared_exp, torch::zeros_like(shared_exp)).clamp(-127, 127); // E8M0 range
    auto block_scale = torch::exp2(shared_exp);
    // Elements saturate per the spec: beyond max they clamp (OCP "saturating" conversion).
    auto q = round_to_format(blocks / block_scale, format, Overflow::Saturate) * block_scale;
    q = q.reshape(work.sizes());
    if (padded != k) q = q.narrow(-1, 0, k);
    return q.movedim(-1, k_dim).contiguous();
}

} // namespace

QuantizedOperand quantize_fp8(const torch::Tensor& x_in, NumberFormat format, const Fp8Recipe& recipe,
                              int64_t contraction_dim, DelayedScaling* delayed, TensorRole role)
{
    TORCH_CHECK(format_info(format).is_fp8, "quantize_fp8 needs an FP8 format");
    const double fp8_max = format_info(format).max_finite;
    auto x = x_in.to(torch::kFloat32);
    const int64_t k_dim = contraction_dim < 0 ? contraction_dim + x.dim() : contraction_dim;

    // Outliers bypass FP8 and travel in BF16 beside it.
    torch::Tensor outliers;
    if (recipe.outlier_rms_multiple > 0.0) {
        const auto rms = x.square().mean().sqrt();
        const auto is_outlier = x.abs() > rms * recipe.outlier_rms_multiple;
        outliers = torch::where(is_outlier, x, torch::zeros_like(x));
        x = x - outliers;
    }

    QuantizedOperand out;
    out.amax = x.abs().max().item<float>();
    switch (recipe.scaling) {
    case Fp8Scaling::Delayed: {
        TORCH_CHECK(delayed != nullptr, "delayed scaling needs its state");
        out.scale = delayed->scale();
        out.values = scaled_round(x, torch::tensor(out.scale), format, overflow_of(recipe));
        delayed->record(out.amax, fp8_max, recipe.amax_use_max, recipe.margin);
        break;
    }
    case Fp8Scaling::Current:
        out.scale = scale_from_amax(out.amax, fp8_max, recipe.margin, 1.0f);
        out.values = scaled_round(x, torch::tensor(out.scale), format, overflow_of(recipe));
        break;
    case Fp8Scaling::PerRow:
        out.scale = 0.0f;
        out.values = quantize_rows(x, format, recipe, k_dim);
        break;
    case Fp8Scaling::Block32:
        out.scale = 0.0f;
        out.values = quantize_blocks(x, format, recipe, k_dim);
        break;
    case Fp8Scaling::Block128:
    case Fp8Scaling::NvFp4:
    case Fp8Scaling::MxFp4:
        out.scale = 0.0f;
        out.values = quantize_block_recipe(x, format, recipe, k_dim, role);
        break;
    }
    if (outliers.defined()) out.values = out.values + round_to_format(outliers, NumberFormat::BF16, Overflow::Propagate);
    return out;
}

} // namespace mantissa
