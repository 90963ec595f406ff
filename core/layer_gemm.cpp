// SPDX-License-Identifier: GPL-3.0-or-later
#include "layer_gemm.h"

#include "quantize.h"

namespace mantissa {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool per_tensor(const Fp8Recipe& r) { return r.scaling == Fp8Scaling::Delayed || r.scaling == Fp8Scaling::Current; }

// In an FP8 backward GEMM the saved operand (weight or input) is E4M3 (E5M2 x E5M2 does not exist
// on Hopper); in every other format both operands share the GEMM's format.
NumberFormat saved_operand_format(NumberFormat gemm_format)
{
    return format_info(gemm_format).is_fp8 ? NumberFormat::E4M3 : gemm_format;
}

LayerGemm* layer_of(AutogradContext* ctx) { return reinterpret_cast<LayerGemm*>(ctx->saved_data["layer"].toInt()); }

// y = x W^T + b with the layer's three formats. x is (M, K), W (N, K).
struct LinearFunction : public torch::autograd::Function<LinearFunction> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, int64_t layer_address)
    {
        auto* layer = reinterpret_cast<LayerGemm*>(layer_address);
        const GemmFormats f = layer->formats();
        const auto xq = layer->round_operand(x, f.forward, OperandRole::Input, 1);    // (M, K)
        const auto wq = layer->quantized_weight(weight, f.forward, 1);                 // (N, K)
        const bool has_bias = bias.numel() > 0; // an empty tensor stands for "no bias"
        auto y = layer->gemm(xq, wq.t(), f.forward, has_bias ? bias : torch::Tensor()); // (M, N)
        ctx->saved_data["layer"] = layer_address;
        ctx->saved_data["has_bias"] = has_bias;
        // TE saves the FP8 input for the weight gradient; keep the quantised copy when it can be reused.
        const bool reuse_input = f.forward == saved_operand_format(f.wgrad) && per_tensor(layer->recipe());
        ctx->saved_data["reuse_input"] = reuse_input;
        ctx->save_for_backward({reuse_input ? xq : x, weight});
        return y;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        LayerGemm* layer = layer_of(ctx);
        const GemmFormats f = layer->formats();
        const auto saved = ctx->get_saved_variables();
        const auto& x = saved[0];
        const auto& weight = saved[1];
        const auto dy = grads[0].contiguous(); // (M, N)

        // dgrad: dx = dy W, contraction over N (dy's dim 1, W's dim 0).
        const auto dy_d = layer->round_operand(dy, f.dgrad, OperandRole::GradOutput, 1);
        const auto w_d = layer->quantized_weight(weight, saved_operand_format(f.dgrad), 0);
        const auto dx = layer->gemm(dy_d, w_d, f.dgrad); // (M, K)

        // wgrad: dW = dy^T x, contraction over M (dim 0 of both).
        torch::Tensor dy_w;
        if (f.wgrad == f.dgrad && per_tensor(layer->recipe())) dy_w = dy_d; // one cast, one amax record
        else dy_w = layer->round_operand(dy, f.wgrad, OperandRole::GradOutput, 0);
        const bool reuse_input = ctx->saved_data["reuse_input"].toBool();
        const auto x_w = reuse_input ? x : layer->round_operand(x, saved_operand_format(f.wgrad), OperandRole::Input, 0);
        const auto dw = layer->gemm(dy_w.t(), x_w, f.wgrad); // (N, K)

        torch::Tensor db;
        if (ctx->saved_data["has_bias"].toBool()) db = dy.sum(0);
        return {dx, dw, db, torch::Tensor()};
    }
};

// y = a b for attention (batched). Operands are activations: no weight cache.
struct MatmulFunction : public torch::autograd::Function<MatmulFunction> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                                 int64_t layer_address)
    {
        auto* layer = reinterpret_cast<LayerGemm*>(layer_address);
        const GemmFormats f = layer->formats();
        ctx->saved_data["layer"] = layer_address;
        ctx->save_for_backward({a, b});
        const auto aq = layer->round_operand(a, f.forward, OperandRole::Input, -1);
        const auto bq = layer->round_operand(b, f.forward, OperandRole::Weight, -2);
        return layer->gemm(aq, bq, f.forward);
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        LayerGemm* layer = layer_of(ctx);
        const GemmFormats f = layer->formats();
        const auto saved = ctx->get_saved_variables();
        const auto dy = grads[0].contiguous(); // (..., M, N)
        // da = dy b^T (contraction over N), db = a^T dy (contraction over M).
        const auto dy_a = layer->round_operand(dy, f.dgrad, OperandRole::GradOutput, -1);
        const auto b_a = layer->round_operand(saved[1], saved_operand_format(f.dgrad), OperandRole::Weight, -1);
        const auto da = layer->gemm(dy_a, b_a.transpose(-1, -2), f.dgrad);
        const auto dy_b = layer->round_operand(dy, f.wgrad, OperandRole::GradOutput, -2);
        const auto a_b = layer->round_operand(saved[0], saved_operand_format(f.wgrad), OperandRole::Input, -2);
        const auto db = layer->gemm(a_b.transpose(-1, -2), dy_b, f.wgrad);
        return {da, db, torch::Tensor()};
    }
};

} // namespace

LayerGemm::LayerGemm(std::string layer_name, GemmFormats formats, const Fp8Recipe& recipe, GemmBackend backend)
    : name_(std::move(layer_name)), formats_(formats), recipe_(recipe), backend_(backend),
      input_scaling_(recipe.amax_history_length), weight_scaling_(recipe.amax_history_length),
      grad_scaling_(recipe.amax_history_length)
{
}

void LayerGemm::set_formats(const GemmFormats& formats)
{
    formats_ = formats;
    input_scaling_.reset();
    weight_scaling_.reset();
    grad_scaling_.reset();
    cached_weight_ = torch::Tensor();
    cached_version_ = -1;
}

std::string LayerGemm::backend_used() const
{
    if (used_native_ && used_emulated_) return "native+emulated";
    if (used_native_) return "native";
    if (used_emulated_) return "emulated";
    return formats_.all_fp32() ? "fp32" : "none";
}

DelayedScaling& LayerGemm::delayed(OperandRole role)
{
    switch (role) {
    case OperandRole::Input: return input_scaling_;
    case OperandRole::Weight: return weight_scaling_;
    case OperandRole::GradOutput: break;
    }
    return grad_scaling_;
}

bool LayerGemm::use_native(const torch::Tensor& t) const
{
    return backend_ != GemmBackend::Emulated && t.is_cuda();
}

torch::Tensor LayerGemm::round_operand(const torch::Tensor& x, NumberFormat format, OperandRole role, int64_t k_dim)
{
    if (format == NumberFormat::FP32) return x;
    if (!format_info(format).is_fp8) return round_to_format(x, format, Overflow::Propagate);
    return quantize_fp8(x, format, recipe_, k_dim, &delayed(role)).values;
}

torch::Tensor LayerGemm::quantized_weight(const torch::Tensor& weight, NumberFormat format, int64_t k_dim)
{
    if (format == NumberFormat::FP32) return weight;
    // The master weight changes once per optimizer step; micro-batches and the backward pass
    // reuse the low-precision copy. Delayed scales move every step, so they re-derive it.
    const bool cacheable = !format_info(format).is_fp8 || recipe_.scaling != Fp8Scaling::Delayed;
    const int64_t version = static_cast<int64_t>(weight._version());
    if (cacheable && cached_weight_.defined() && cached_version_ == version && cached_data_ == weight.data_ptr() &&
        cached_format_ == format && (cached_k_dim_ == k_dim || !format_info(format).is_fp8 || per_tensor(recipe_)))
        return cached_weight_;
    auto q = round_operand(weight.detach(), format, OperandRole::Weight, k_dim);
    if (cacheable) {
        cached_weight_ = q;
        cached_version_ = version;
        cached_data_ = weight.data_ptr();
        cached_format_ = format;
        cached_k_dim_ = k_dim;
    }
    return q;
}

torch::Tensor LayerGemm::gemm(const torch::Tensor& a, const torch::Tensor& b, NumberFormat format,
                              const torch::Tensor& bias)
{
    const NumberFormat out = gemm_output_format(format);
    if (use_native(a) && (format == NumberFormat::BF16 || format == NumberFormat::FP16)) {
        // Operands are already exactly representable, so casting them is lossless; the tensor
        // core then accumulates in FP32 and rounds to the output dtype itself.
        used_native_ = true;
        const auto dtype = format == NumberFormat::BF16 ? torch::kBFloat16 : torch::kHalf;
        auto y = bias.defined() ? at::addmm(bias.to(dtype), a.to(dtype), b.to(dtype)) : at::matmul(a.to(dtype), b.to(dtype));
        return y.to(torch::kFloat32);
    }
    if (format != NumberFormat::FP32) used_emulated_ = true;
    // FP8 GEMMs are emulated on every device for now: the operands above carry the exact
    // values _scaled_mm would multiply, so only the accumulation order differs.
    auto y = bias.defined() ? at::addmm(bias, a, b) : at::matmul(a, b);
    return out == NumberFormat::FP32 ? y : round_to_format(y, out, Overflow::Propagate);
}

torch::Tensor LayerGemm::linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias)
{
    if (formats_.all_fp32()) return torch::nn::functional::linear(x, weight, bias);
    const int64_t K = x.size(-1);
    auto out_shape = x.sizes().vec();
    out_shape.back() = weight.size(0);
    const auto x2 = x.reshape({-1, K}); // (M, K)
    // Custom autograd functions cannot take undefined tensors: an empty one means no bias.
    const auto bias_or_empty = bias.defined() ? bias : torch::empty({0}, weight.options().requires_grad(false));
    auto y = LinearFunction::apply(x2, weight, bias_or_empty, reinterpret_cast<int64_t>(this));
    return y.view(out_shape);
}

torch::Tensor LayerGemm::matmul(const torch::Tensor& a, const torch::Tensor& b)
{
    if (formats_.all_fp32()) return at::matmul(a, b);
    return MatmulFunction::apply(a, b, reinterpret_cast<int64_t>(this));
}

} // namespace mantissa
