// SPDX-License-Identifier: GPL-3.0-or-later
#include "layer_gemm.h"

#include <cstdio>

#include <c10/util/ScopeExit.h>

#include "blockwise_fp8.h"
#include "checkpoint_file.h"
#include "first_line.h"
#include "native_fp8.h"
#include "quantize.h"
#include "tensor_stats.h"

namespace mantissa {

namespace {

c10::ScalarType fp8_dtype(NumberFormat f) { return f == NumberFormat::E4M3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2; }

// _scaled_mm: a row-major (M, K), b column-major (K, N), every dimension a multiple of 16,
// per-tensor scales are the *inverse* scales (dequantisation factors). `scale_a`/`scale_b`:
// () FP32 tensors on the operands' device, what each was multiplied by before its cast.
torch::Tensor scaled_mm(const torch::Tensor& a_values, const torch::Tensor& scale_a, NumberFormat format_a,
                        const torch::Tensor& b_values, const torch::Tensor& scale_b, NumberFormat format_b)
{
    // values * scale recovers the codes exactly: the error of the FP32 product is far below
    // half an FP8 step, so the cast lands back on the code.
    const auto a = (a_values * scale_a).to(fp8_dtype(format_a)).contiguous();
    const auto b = (b_values * scale_b).to(fp8_dtype(format_b)).t().contiguous().t(); // column-major
    return at::_scaled_mm(a, b, scale_a.reciprocal(), scale_b.reciprocal(), {}, {}, torch::kFloat32);
}

} // namespace

bool native_fp8_available()
{
    static const bool available = [] {
        if (!torch::cuda::is_available()) return false;
        try {
            // A product with a known answer: anything else means this build/device cannot do it.
            const auto opts = torch::TensorOptions().device(torch::kCUDA);
            const auto a = torch::full({16, 32}, 0.5f, opts);
            const auto b = torch::full({32, 16}, 2.0f, opts);
            const auto f32 = opts.dtype(torch::kFloat32);
            const auto y = scaled_mm(a, torch::full({}, 4.0f, f32), NumberFormat::E4M3, b, torch::full({}, 8.0f, f32),
                                     NumberFormat::E4M3);
            if (!torch::allclose(y.cpu(), torch::full({16, 16}, 32.0f))) return false;
            // fp8_gemm's own calls: the forward's (BF16 output, BF16 bias, fast accumulation) and
            // the gradients' (E5M2 x E4M3, no bias).
            const auto one = torch::full({}, 1.0f, f32);
            const auto w8 = torch::ones({16, 32}, f32).to(torch::kFloat8_e4m3fn).t(); // (32, 16) column-major
            const auto forward = scaled_mm_call(torch::ones({16, 32}, f32).to(torch::kFloat8_e4m3fn), one, w8, one,
                                                torch::ones({16}, f32), torch::kBFloat16, true);
            const auto gradient = scaled_mm_call(torch::ones({16, 32}, f32).to(torch::kFloat8_e5m2), one, w8, one,
                                                 torch::Tensor(), torch::kBFloat16, false);
            if (torch::equal(forward.cpu(), torch::full({16, 16}, 33.0f).to(torch::kBFloat16)) &&
                torch::equal(gradient.cpu(), torch::full({16, 16}, 32.0f).to(torch::kBFloat16)))
                return true;
            std::fprintf(stderr, "mantissa: _scaled_mm gave a wrong product in fp8_gemm's calls: FP8 GEMMs run from "
                                 "the dequantised codes\n");
            return false;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "mantissa: _scaled_mm is not available (%s): FP8 GEMMs run from the dequantised codes\n",
                         first_line(e).c_str());
            return false;
        }
    }();
    return available;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

} // namespace

UnsharedCasts unshared_casts(const GemmFormats& f, const Fp8Recipe& recipe)
{
    UnsharedCasts u;
    if (f.any_fp8() && !per_tensor_scaling(recipe)) return u;
    const NumberFormat w_dgrad = saved_operand_format(f.dgrad), x_wgrad = saved_operand_format(f.wgrad);
    u.weight_dgrad = w_dgrad != f.forward && w_dgrad != NumberFormat::FP32;
    u.grad_output_wgrad = f.wgrad != f.dgrad && f.wgrad != NumberFormat::FP32;
    u.input_wgrad = x_wgrad != f.forward && x_wgrad != NumberFormat::FP32;
    return u;
}

namespace {

// The recipes whose casts report their block scales ("<role>_scale" rows).
bool is_block_recipe(Fp8Scaling s)
{
    return s == Fp8Scaling::Block32 || s == Fp8Scaling::Block128 || s == Fp8Scaling::NvFp4 || s == Fp8Scaling::MxFp4;
}

// Telemetry of an operand: an FP8 per-tensor cast's `scale` is a () tensor (read back with the
// frame), per-row and block FP8 scales are recorded as 0, every other format as 1.
void record_operand(LayerGemm& layer, const char* role, const torch::Tensor& x, NumberFormat f,
                    const torch::Tensor& scale, const torch::Tensor& cast)
{
    if (scale.defined()) layer.record(role, x, f, scale, cast);
    else layer.record(role, x, f, format_info(f).is_fp8 ? 0.0f : 1.0f, cast);
}

LayerGemm* layer_of(AutogradContext* ctx) { return reinterpret_cast<LayerGemm*>(ctx->saved_data["layer"].toInt()); }

// y = x W^T + b with the layer's three formats. x is (M, K), W (N, K).
struct LinearFunction : public torch::autograd::Function<LinearFunction> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, int64_t layer_address)
    {
        auto* layer = reinterpret_cast<LayerGemm*>(layer_address);
        const GemmFormats f = layer->formats();
        torch::Tensor sx, sw; // per-tensor FP8 scales, () on the operands' device
        const auto xq = layer->round_operand(x, f.forward, OperandRole::Input, 1, &sx); // (M, K)
        const auto wq = layer->quantized_weight(weight, f.forward, 1, &sw);             // (N, K)
        const bool has_bias = bias.numel() > 0; // an empty tensor stands for "no bias"
        // gemm() multiplies b as saved_operand_format(format): true of E4M3, but an E5M2 forward
        // casts both operands E5M2, which _scaled_mm cannot take. It stays on the FP32 route.
        const bool b_as_gemm_expects = saved_operand_format(f.forward) == f.forward;
        auto y = layer->gemm(xq, wq.t(), f.forward, has_bias ? bias : torch::Tensor(),
                             b_as_gemm_expects ? sx : torch::Tensor(), b_as_gemm_expects ? sw : torch::Tensor(),
                             "output"); // (M, N)
        if (layer->telemetry_armed()) {
            layer->remember_weight(weight);
            record_operand(*layer, "weight", weight, f.forward, sw, wq);
            record_operand(*layer, "input", x, f.forward, sx, xq);
        }
        ctx->saved_data["input_scale"] = sx;
        ctx->saved_data["layer"] = layer_address;
        ctx->saved_data["has_bias"] = has_bias;
        // TE saves the FP8 input for the weight gradient; keep the quantised copy when it can be reused.
        const bool reuse_input = f.forward == saved_operand_format(f.wgrad) && per_tensor_scaling(layer->recipe());
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
        torch::Tensor s_dy, s_w;
        const auto dy_d = layer->round_operand(dy, f.dgrad, OperandRole::GradOutput, 1, &s_dy);
        const auto w_d = layer->quantized_weight(weight, saved_operand_format(f.dgrad), 0, &s_w);
        const auto dx = layer->gemm(dy_d, w_d, f.dgrad, {}, s_dy, s_w); // (M, K)
        const UnsharedCasts unshared = unshared_casts(f, layer->recipe());
        if (layer->telemetry_armed()) {
            record_operand(*layer, "grad_output", dy, f.dgrad, s_dy, dy_d);
            if (unshared.weight_dgrad)
                record_operand(*layer, "weight_dgrad", weight, saved_operand_format(f.dgrad), s_w, w_d);
        }

        // wgrad: dW = dy^T x, contraction over M (dim 0 of both).
        torch::Tensor dy_w;
        torch::Tensor s_dy_w = s_dy, s_x;
        if (f.wgrad == f.dgrad && per_tensor_scaling(layer->recipe())) dy_w = dy_d; // one cast, one amax record
        else dy_w = layer->round_operand(dy, f.wgrad, OperandRole::GradOutput, 0, &s_dy_w);
        const bool reuse_input = ctx->saved_data["reuse_input"].toBool();
        torch::Tensor x_w;
        if (reuse_input) {
            x_w = x;
            s_x = ctx->saved_data["input_scale"].toTensor();
        } else {
            x_w = layer->round_operand(x, saved_operand_format(f.wgrad), OperandRole::Input, 0, &s_x);
        }
        if (layer->telemetry_armed()) {
            if (unshared.grad_output_wgrad) record_operand(*layer, "grad_output_wgrad", dy, f.wgrad, s_dy_w, dy_w);
            if (unshared.input_wgrad) record_operand(*layer, "input_wgrad", x, saved_operand_format(f.wgrad), s_x, x_w);
        }
        const auto dw = layer->gemm(dy_w.t(), x_w, f.wgrad, {}, s_dy_w, s_x, "weight_grad"); // (N, K)

        torch::Tensor db;
        // In FP32 whatever dy's dtype (a GPU's blockwise GEMM hands its BF16 output on as BF16):
        // the same sum as always, of the same values.
        if (ctx->saved_data["has_bias"].toBool()) db = dy.to(torch::kFloat32).sum(0);
        // A 16-bit layer's bias gradient is a 16-bit tensor on the hardware (autocast's linear,
        // the native executor's): the sum rounded to the format, Inf past FP16's 65504, which
        // the loss scaler must see as it does there. Kept in FP32, the emulator skipped other
        // steps than PyTorch's GradScaler (parity audit). FP8 layers' bias sums stay FP32, as
        // NativeLinear's do.
        if (db.defined() && uniform_16bit(f)) db = round_to_format(db, f.forward, Overflow::Propagate);
        return {dx, dw, db, torch::Tensor()};
    }
};

// y = a b for attention (batched). Operands are activations: no weight cache. Each product
// casts with its own scaling states (LayerGemm::select_product), and a tensor that the backward
// takes in the format the forward cast it in records no second amax (recast_operand), nor does
// dy where both backward GEMMs take one format: one record per tensor and step (four, across
// both products, went into one history).
struct MatmulFunction : public torch::autograd::Function<MatmulFunction> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                                 int64_t layer_address, bool values_product)
    {
        auto* layer = reinterpret_cast<LayerGemm*>(layer_address);
        const int before = layer->select_product(values_product ? 1 : 0);
        const auto restore = c10::make_scope_exit([layer, before] { layer->select_product(before); });
        const GemmFormats f = layer->formats();
        ctx->saved_data["layer"] = layer_address;
        ctx->saved_data["values_product"] = values_product;
        torch::Tensor s_a, s_b;
        const auto aq = layer->round_operand(a, f.forward, OperandRole::Input, -1, &s_a);
        const auto bq = layer->round_operand(b, f.forward, OperandRole::Weight, -2, &s_b);
        if (values_product && layer->telemetry_armed()) record_operand(*layer, "probs", a, f.forward, s_a, aq);
        ctx->save_for_backward({a, b});
        // () tensors, undefined where no per-tensor scale was taken: the backward's recasts.
        ctx->saved_data["scale_a"] = s_a;
        ctx->saved_data["scale_b"] = s_b;
        return layer->gemm(aq, bq, f.forward);
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        LayerGemm* layer = layer_of(ctx);
        const bool values_product = ctx->saved_data["values_product"].toBool();
        const int before = layer->select_product(values_product ? 1 : 0);
        const auto restore = c10::make_scope_exit([layer, before] { layer->select_product(before); });
        const GemmFormats f = layer->formats();
        const auto saved = ctx->get_saved_variables();
        const auto dy = grads[0].contiguous(); // (..., M, N)
        // da = dy b^T (contraction over N), db = a^T dy (contraction over M).
        torch::Tensor s_dy;
        const auto dy_a = layer->round_operand(dy, f.dgrad, OperandRole::GradOutput, -1, &s_dy);
        if (!values_product && layer->telemetry_armed()) record_operand(*layer, "grad_scores", dy, f.dgrad, s_dy, dy_a);
        // Per-tensor casts: one state per (role, format), recorded by the forward already where
        // the format is the forward's. Block and per-row casts keep no history to fill twice.
        const bool per_tensor = per_tensor_scaling(layer->recipe());
        const auto cast_saved = [&](const torch::Tensor& x, NumberFormat format, OperandRole role, int64_t k_dim,
                                    const char* forward_scale) {
            return per_tensor && format == f.forward
                       ? layer->recast_operand(x, format, role, k_dim, ctx->saved_data[forward_scale].toTensor())
                       : layer->round_operand(x, format, role, k_dim);
        };
        const auto b_a = cast_saved(saved[1], saved_operand_format(f.dgrad), OperandRole::Weight, -1, "scale_b");
        const auto da = layer->gemm(dy_a, b_a.transpose(-1, -2), f.dgrad);
        // Both products' wgrad casts are this layer's: each named by its own tensors, or the
        // scores product's Hadamard rows would replace the values product's in the store.
        layer->name_wgrad_records(values_product ? "probs" : "query", values_product ? "grad_output" : "grad_scores");
        const auto unnamed = c10::make_scope_exit([layer] { layer->name_wgrad_records(nullptr, nullptr); });
        const bool one_dy_cast = f.wgrad == f.dgrad && per_tensor; // one cast, one record
        const auto dy_b = one_dy_cast ? dy_a : layer->round_operand(dy, f.wgrad, OperandRole::GradOutput, -2);
        const auto a_b = cast_saved(saved[0], saved_operand_format(f.wgrad), OperandRole::Input, -2, "scale_a");
        const auto db = layer->gemm(a_b.transpose(-1, -2), dy_b, f.wgrad);
        return {da, db, torch::Tensor(), torch::Tensor()};
    }
};

} // namespace

LayerGemm::LayerGemm(std::string layer_name, GemmFormats formats, const Fp8Recipe& recipe, GemmBackend backend)
    : name_(std::move(layer_name)), formats_(formats), recipe_(recipe), backend_(backend),
      attention_(name_.ends_with(".sdpa"))
{
    for (size_t i = 0; i < kScalingStates; ++i)
        delayed_[i] = DelayedScaling(i < kScalingStates / 2 || attention_ ? recipe.amax_history_length : 0);
}

namespace {

// The delayed-scaling states (role, FP8 format) that GEMMs in these formats record into: the
// forward casts x and W in its format, the input gradient's GEMM W (as saved_operand_format)
// and dy, the weight gradient's x (likewise) and dy.
// Each product's set alike (an attention layer's second set mirrors the first).
std::array<bool, 12> delayed_states_in_use(const GemmFormats& f, size_t (*index)(OperandRole, NumberFormat, int))
{
    std::array<bool, 12> used{};
    const auto use = [&](OperandRole role, NumberFormat format) {
        if (format_info(format).is_fp8) used[index(role, format, 0)] = used[index(role, format, 1)] = true;
    };
    use(OperandRole::Input, f.forward);
    use(OperandRole::Weight, f.forward);
    if (format_info(f.dgrad).is_fp8) {
        use(OperandRole::Weight, saved_operand_format(f.dgrad));
        use(OperandRole::GradOutput, f.dgrad);
    }
    if (format_info(f.wgrad).is_fp8) {
        use(OperandRole::Input, saved_operand_format(f.wgrad));
        use(OperandRole::GradOutput, f.wgrad);
    }
    return used;
}

} // namespace

void LayerGemm::set_formats(const GemmFormats& formats)
{
    // A delayed-scaling state is one tensor's amax history in one FP8 format, whichever GEMM
    // casts it: one that the old and the new formats both record into goes on (a switch of the
    // weight gradient's GEMM alone leaves the forward's scales as they were; resetting them
    // would cast the next step with scale 1, a spike the change did not cause). The others
    // restart, so that a state unused for a while is not revived with stale scales. The
    // device mirrors, which hold the live state where they exist, are read back first.
    sync_device_scaling_to_host();
    const auto before = delayed_states_in_use(formats_, &scaling_index);
    const auto after = delayed_states_in_use(formats, &scaling_index);
    static_assert(kScalingStates == 12);
    for (size_t i = 0; i < kScalingStates; ++i)
        if (!(before[i] && after[i])) delayed_[i].reset();
    formats_ = formats;
    for (auto& d : device_scaling_) d.clear(); // refilled from the host state
    invalidate_weight_cache();
    fp4_operands_.clear(); // a weight's kept FP4 cast, which a layer off nvfp4 would keep for good
    used_native_ = used_emulated_ = false; // backend_used() tells of the new formats
}

void LayerGemm::set_scaling(Fp8Scaling scaling)
{
    if (scaling == recipe_.scaling) return;
    for (auto& d : delayed_) d.reset();
    for (auto& d : device_scaling_) d.clear(); // not read back: it would overwrite the reset
    recipe_.scaling = scaling;
    invalidate_weight_cache();
    fp4_operands_.clear();
    used_native_ = used_emulated_ = false;
}

void LayerGemm::rescale_gradient_amaxes(float ratio)
{
    // Where a device mirror holds the live state, on the device (queued: a growth at the end of
    // a step waits for nothing); else the host's, which a mirror made later is filled from.
    for (int product = 0; product < scaling_products(); ++product)
        for (auto format : kFp8Formats) {
            const size_t i = scaling_index(OperandRole::GradOutput, format, product);
            if (device_scaling_[i].defined()) device_scaling_[i].rescale(ratio);
            else delayed_[i].rescale(ratio);
        }
}

std::string LayerGemm::backend_used() const
{
    if (used_native_ && used_emulated_) return "native+emulated";
    if (used_native_) return "native";
    if (used_emulated_) return "emulated";
    return formats_.all_fp32() ? "fp32" : "none";
}

size_t LayerGemm::scaling_index(OperandRole role, NumberFormat format, int product)
{
    return 6 * static_cast<size_t>(product) + 2 * static_cast<size_t>(role) + (format == NumberFormat::E5M2 ? 1 : 0);
}

DelayedScaling& LayerGemm::delayed(OperandRole role, NumberFormat format) { return delayed(role, format, product_); }

DelayedScaling& LayerGemm::delayed(OperandRole role, NumberFormat format, int product)
{
    if (product >= scaling_products()) throw std::logic_error("layer " + name_ + " has one product");
    return delayed_[scaling_index(role, format, product)];
}

bool LayerGemm::use_native(const torch::Tensor& t) const
{
    return backend_ != GemmBackend::Emulated && t.is_cuda();
}

bool LayerGemm::scales_on_device(const torch::Device& device) const
{
    return per_tensor_scaling(recipe_) && (native_ || !device.is_cpu());
}

torch::Tensor LayerGemm::round_operand(const torch::Tensor& x, NumberFormat format, OperandRole role, int64_t k_dim,
                                       torch::Tensor* scale)
{
    if (scale) *scale = torch::Tensor();
    // In FP32 whatever x's dtype: on a GPU, fp8-block hands a 16-bit input on as it is, and its
    // blockwise GEMM's BF16 output comes back as a BF16 dy; a GEMM left in FP32 multiplies FP32.
    if (format == NumberFormat::FP32) return x.to(torch::kFloat32);
    if (!format_info(format).is_fp8) return round_to_format(x, format, Overflow::Propagate);
    if (scales_on_device(x)) {
        // The same cast with the scale, amax and history as tensors (native_fp8.h, held to the
        // host rules bit for bit): on a GPU the step never waits for an amax.
        if (recipe_.outlier_rms_multiple > 0.0) {
            // quantize_fp8's split, its inliers cast as above; no FP8 GEMM can take the sum,
            // so no scale is handed on.
            const auto split = split_outliers(x.to(torch::kFloat32), recipe_.outlier_rms_multiple);
            return split.rejoin(quantize_native(split.inliers, format, role, k_dim).dequantized());
        }
        const Fp8Tensor t = quantize_native(x, format, role, k_dim);
        if (scale) *scale = t.scale;
        return t.dequantized();
    }
    QuantizedOperand q;
    const TensorRole block_role = role == OperandRole::Weight       ? TensorRole::Weight
                                  : role == OperandRole::GradOutput ? TensorRole::Gradient
                                                                    : TensorRole::Activation;
    Nvfp4Scales fp4_scales;
    Nvfp4Scales* keep = keeps_fp4_scales(x) ? &fp4_scales : nullptr;
    if (training_) {
        const bool observe = armed_ && is_block_recipe(recipe_.scaling);
        BlockCastRecord block;
        q = quantize_fp8(x, format, recipe_, k_dim, &delayed(role, format), block_role, observe ? &block : nullptr, keep);
        if (observe) observe_block_cast(role, x, k_dim, std::move(block));
    } else {
        DelayedScaling scratch = delayed(role, format); // evaluation: same scale, the real history stays put
        if (recast_scale_.defined()) scratch.restore(scratch.history(), recast_scale_.item<float>()); // a host ()
        q = quantize_fp8(x, format, recipe_, k_dim, &scratch, block_role, nullptr, keep);
    }
    if (keep) remember_fp4_operand(q.values, std::move(fp4_scales), role == OperandRole::Weight);
    if (scale && per_tensor_scaling(recipe_) && recipe_.outlier_rms_multiple == 0.0) *scale = torch::tensor(q.scale);
    return q.values;
}

torch::Tensor LayerGemm::recast_operand(const torch::Tensor& x, NumberFormat format, OperandRole role, int64_t k_dim,
                                        const torch::Tensor& forward_scale)
{
    const bool training = training_;
    training_ = false; // round_operand's evaluation path: the history left alone
    // Current scaling finds the forward's scale again from the same tensor; only a history's
    // scale has moved.
    recast_scale_ = recipe_.scaling == Fp8Scaling::Delayed ? forward_scale : torch::Tensor();
    const auto restore = c10::make_scope_exit([this, training] {
        training_ = training;
        recast_scale_ = torch::Tensor();
    });
    return round_operand(x, format, role, k_dim);
}

torch::Tensor LayerGemm::quantized_weight(const torch::Tensor& weight, NumberFormat format, int64_t k_dim,
                                          torch::Tensor* scale)
{
    if (scale) *scale = torch::Tensor();
    if (format == NumberFormat::FP32) return weight.to(torch::kFloat32); // FP32 master weights: no copy
    // The master weight changes once per optimizer step; micro-batches and the backward pass
    // reuse the low-precision copy, and a delayed-scaling weight records its amax once per
    // step, as TE does with is_first_microbatch.
    const int64_t version = static_cast<int64_t>(weight._version());
    if (!training_) return round_operand(weight.detach(), format, OperandRole::Weight, k_dim, scale);
    const bool layout_free = weight_cast_serves_both_layouts(format, recipe_);
    for (const auto& c : weight_casts_)
        if (c.weight.defined() && c.version == version && c.data == weight.data_ptr() && c.format == format &&
            (c.k_dim == k_dim || layout_free)) {
            if (scale) *scale = c.scale;
            return c.weight;
        }
    WeightCast& c = weight_casts_[next_weight_slot_];
    next_weight_slot_ = (next_weight_slot_ + 1) % weight_casts_.size();
    c.weight = round_operand(weight.detach(), format, OperandRole::Weight, k_dim, &c.scale);
    if (scale) *scale = c.scale;
    c.version = version;
    c.data = weight.data_ptr();
    c.format = format;
    c.k_dim = k_dim;
    return c.weight;
}

namespace {

// Checkpoints before 2026-12-02 kept one state per role: the format that role was cast in first.
NumberFormat first_cast_format(OperandRole role, const GemmFormats& f)
{
    switch (role) {
    case OperandRole::Input: // the forward GEMM, then the weight gradient's
        return format_info(f.forward).is_fp8 ? f.forward : saved_operand_format(f.wgrad);
    case OperandRole::Weight: // the forward GEMM, then the input gradient's
        return format_info(f.forward).is_fp8 ? f.forward : saved_operand_format(f.dgrad);
    case OperandRole::GradOutput: break; // the input gradient's GEMM, then the weight gradient's
    }
    return format_info(f.dgrad).is_fp8 ? f.dgrad : f.wgrad;
}

} // namespace

void LayerGemm::save(torch::serialize::OutputArchive& archive)
{
    sync_device_scaling_to_host(); // the host state is what checkpoints keep
    const std::string key = "layers/" + name_ + "/";
    archive.write(key + "formats", torch::tensor({static_cast<int64_t>(formats_.forward),
                                                  static_cast<int64_t>(formats_.dgrad),
                                                  static_cast<int64_t>(formats_.wgrad)}));
    // By name: a live change may have given the layer another recipe than the project's.
    archive.write(key + "scaling", c10::IValue(std::string(fp8_scaling_name(recipe_.scaling))));
    // An attention layer's values product under values/ (checkpoints before 2026-12-07 hold
    // one set, which both products shared).
    for (int product = 0; product < scaling_products(); ++product)
        for (auto role : kOperandRoles)
            for (auto format : kFp8Formats) {
                const auto& d = delayed(role, format, product);
                const std::string r = key + (product == 1 ? "values/" : "") + std::to_string(static_cast<int>(role)) +
                                      "/" + format_info(format).name + "/";
                archive.write(r + "history", torch::tensor(d.history()));
                archive.write(r + "scale", torch::tensor(d.scale()));
            }
}

void LayerGemm::load(torch::serialize::InputArchive& archive)
{
    const std::string key = "layers/" + name_ + "/";
    torch::Tensor f;
    archive.read(key + "formats", f);
    // Checkpoints from before live recipe changes keep the project's recipe.
    if (c10::IValue scaling; archive.try_read(key + "scaling", scaling) && scaling.isString()) {
        const auto parsed = parse_fp8_scaling(scaling.toStringRef());
        if (!parsed)
            throw CheckpointMismatch("layer " + name_ + " of the checkpoint has the scaling recipe '" +
                                     scaling.toStringRef() + "', which this version does not know");
        set_scaling(*parsed);
    }
    set_formats({static_cast<NumberFormat>(f[0].item<int64_t>()), static_cast<NumberFormat>(f[1].item<int64_t>()),
                 static_cast<NumberFormat>(f[2].item<int64_t>())});
    // The history takes the project's amax_history_length (a resume may change it): the newest
    // entries, or zeros after them.
    const auto length = static_cast<size_t>(recipe_.amax_history_length);
    const auto restore = [length](DelayedScaling& d, torch::Tensor history, const torch::Tensor& scale) {
        history = history.contiguous();
        std::vector<float> h(history.data_ptr<float>(), history.data_ptr<float>() + history.numel());
        h.resize(length, 0.0f);
        d.restore(std::move(h), scale.item<float>());
    };
    for (auto role : kOperandRoles) {
        const std::string r = key + std::to_string(static_cast<int>(role)) + "/";
        torch::Tensor history, scale;
        if (archive.try_read(r + "history", history)) { // an older checkpoint: one state per role
            archive.read(r + "scale", scale);
            restore(delayed(role, first_cast_format(role, formats_), 0), history, scale);
            continue;
        }
        for (auto format : kFp8Formats) {
            const std::string rf = r + format_info(format).name + "/";
            archive.read(rf + "history", history);
            archive.read(rf + "scale", scale);
            restore(delayed(role, format, 0), history, scale);
        }
    }
    // The values product's own states; a checkpoint from before they were apart had one set,
    // which both products shared and each now starts from.
    for (int product = 1; product < scaling_products(); ++product)
        for (auto role : kOperandRoles)
            for (auto format : kFp8Formats) {
                const std::string rf = key + "values/" + std::to_string(static_cast<int>(role)) + "/" +
                                       format_info(format).name + "/";
                torch::Tensor history, scale;
                if (archive.try_read(rf + "history", history)) {
                    archive.read(rf + "scale", scale);
                    restore(delayed(role, format, product), history, scale);
                } else {
                    delayed(role, format, product) = delayed(role, format, 0);
                }
            }
    for (auto& d : device_scaling_) d.clear(); // refilled from the host state
}

namespace {

const char* role_name(OperandRole role)
{
    switch (role) {
    case OperandRole::Input: return "input";
    case OperandRole::Weight: return "weight";
    case OperandRole::GradOutput: return "grad_output";
    }
    return "input";
}

std::optional<OperandRole> operand_role(const std::string& role)
{
    // Attention's records: the values product's input and the scores product's gradient.
    if (role == "probs") return OperandRole::Input;
    if (role == "grad_scores") return OperandRole::GradOutput;
    for (auto r : kOperandRoles)
        if (role == role_name(r)) return r;
    return std::nullopt;
}

} // namespace

void LayerGemm::observe_block_cast(OperandRole role, const torch::Tensor& x, int64_t k_dim, BlockCastRecord block)
{
    const char* renamed = role == OperandRole::Input        ? wgrad_input_name_
                          : role == OperandRole::GradOutput ? wgrad_grad_output_name_
                                                            : nullptr;
    const std::string name = renamed ? renamed : role_name(role);
    if (block.transformed.defined()) {
        record((name + "_wgrad").c_str(), block.transformed, block.element_format, 0.0f, block.transformed_cast);
        record((name + "_wgrad_no_rht").c_str(), block.plain, block.element_format, 0.0f, block.plain_cast);
    }
    // Only the row-wise casts (forward and dgrad) are recorded as the role itself; the wgrad
    // copies along the other dimension are not, and neither are their scales.
    if (k_dim == -1 || k_dim == x.dim() - 1) block_casts_[static_cast<size_t>(role)] = ObservedBlockCast{x.data_ptr(), std::move(block)};
}

void LayerGemm::arm_telemetry(bool armed)
{
    armed_ = armed;
    for (auto& b : block_casts_) b.reset();
    if (armed) {
        pending_.clear();
        attention_max_score_ = torch::Tensor();
    }
}

void LayerGemm::record(const char* role, const torch::Tensor& x, NumberFormat format, float scale,
                       const torch::Tensor& dequantized)
{
    record_cast(role, x, format, scale, dequantized, {});
}

void LayerGemm::record_block_codes(const char* role, const torch::Tensor& x, NumberFormat format,
                                   const torch::Tensor& codes, const torch::Tensor& inv_scale)
{
    // The CPU's scan takes FP32 casts; a GPU's kernel reads the codes.
    if (x.is_cpu()) record_cast(role, x, format, 0.0f, dequantize_codes(codes, inv_scale), {});
    else record_cast(role, x, format, 0.0f, codes, inv_scale);
}

void LayerGemm::record_cast(const char* role, const torch::Tensor& x, NumberFormat format, float scale,
                            const torch::Tensor& dequantized, const torch::Tensor& codes_scale, bool fp32_cast)
{
    // A block-recipe operand: its elements are labelled with their own format (e2m1 under
    // nvfp4/mxfp4), and its block scales follow as "<role>_scale" against the scale format.
    std::optional<ObservedBlockCast> block;
    if (const auto r = operand_role(role)) {
        auto& slot = block_casts_[static_cast<size_t>(*r)];
        if (slot && slot->source == x.data_ptr()) block = std::move(slot);
        slot.reset();
    }
    if (block) format = block->block.element_format;
    // A 16-bit row whose cast no row sees: the tensor came in that dtype (an activation or a
    // gradient that the op before rounded; its "cast" here is itself), or a native GEMM rounded
    // its own output, no FP32 accumulator kept. Compared with itself, it counts where its values
    // lie (subnormal) and leaves what the cast lost unsaid: before 2026-12-07 such rows read
    // "underflow 0, subnormal 0, SNR exact" over bars in FP16's subnormal band.
    const bool values_only = is_16bit(format) && !fp32_cast &&
                             (!dequantized.defined() || x.scalar_type() == activation_dtype(format));
    const auto compared_with = values_only                                   ? x
                               : format == NumberFormat::FP32 && !fp32_cast ? torch::Tensor()
                                                                              : dequantized;
    PendingTensorStats p;
    p.role = role;
    p.format = format;
    p.scale = scale;
    p.count = x.numel();
    p.compared = stats_compared(compared_with);
    p.values_only = values_only;
    // A CPU tensor is scanned now, while its lines are still in cache, and is not held until
    // the end of the backward (which cost page faults for the memory it kept): with the scan's
    // vectorized count this took about 4 of the 15 ms that statistics added to a step of
    // shakespeare-char (docs/BENCHMARKS.md, 2026-12-05); with the scalar count, scanning now
    // was no faster than scanning everything after the backward.
    if (x.is_cpu()) {
        const auto cast = compared_with.defined() ? compared_with.detach() : torch::Tensor();
        p.row = tensor_stats_rows_cpu({{x.detach(), format, scale, cast}}).front();
    } else if (codes_scale.defined()) {
        p.row = tensor_stats_row_of_block_codes(x, format, compared_with, codes_scale);
    } else {
        p.row = tensor_stats_row(x, format, scale, compared_with); // queued on x's device, no sync
    }
    pending_.push_back(std::move(p));
    if (block) {
        const auto& b = block->block;
        record_cast((std::string(role) + "_scale").c_str(), b.requested_scales, b.scale_format, 1.0f, b.used_scales,
                    {}, /*fp32_cast=*/true);
        // A scale row's overflow: the blocks that their scale saturated, whether the scale itself
        // saturated (which these recipes' scales never do) or its rounding clipped the block's
        // largest value (always 0 before 2026-12-07: nothing counted mxfp4's clipped blocks).
        auto& row = pending_.back().row;
        if (row.defined() && b.clipped_blocks.defined()) {
            row = row.clone();
            auto slot = row.narrow(0, stats_row::kOverflow, 1);
            slot.copy_(torch::maximum(slot, b.clipped_blocks.reshape({1}).to(row.device(), row.scalar_type())));
        }
    }
}

void LayerGemm::record(const char* role, const torch::Tensor& x, NumberFormat format, const torch::Tensor& scale,
                       const torch::Tensor& dequantized)
{
    if (x.is_cpu()) {
        record(role, x, format, cpu_scalar(scale), dequantized); // no device to wait for
        return;
    }
    const bool compared = stats_compared(dequantized);
    push_device_scaled(role, x, format, scale, compared,
                       tensor_stats_row(x, format, scale, compared ? dequantized : torch::Tensor()));
}

void LayerGemm::push_device_scaled(const char* role, const torch::Tensor& x, NumberFormat format,
                                   const torch::Tensor& scale, bool compared, torch::Tensor row)
{
    PendingTensorStats p;
    p.role = role;
    p.format = format;
    p.scale = 1.0f; // replaced by the device scale when the frame is read back
    p.scale_on_device = scale;
    p.count = x.numel();
    p.compared = compared;
    p.row = std::move(row);
    pending_.push_back(std::move(p));
}

void LayerGemm::record(const char* role, const torch::Tensor& x, NumberFormat format, const torch::Tensor& scale,
                       const torch::Tensor& codes, const torch::Tensor& inv_scale)
{
    if (x.is_cpu()) {
        record(role, x, format, cpu_scalar(scale), codes.to(torch::kFloat32) * inv_scale);
        return;
    }
    push_device_scaled(role, x, format, scale, stats_compared(codes),
                       tensor_stats_row_of_codes(x, format, scale, codes, inv_scale));
}

void LayerGemm::finish_stats(const std::vector<std::shared_ptr<LayerGemm>>& layers)
{
    std::vector<PendingTensorStats*> deferred;
    std::vector<StatsSource> sources;
    for (const auto& g : layers) {
        for (auto& p : g->pending_) {
            if (p.row.defined()) continue;
            if (p.from_weight_grad) {
                const auto& grad = g->last_weight_.grad();
                // No gradient arrived (the loss did not reach this layer): nothing to read, on
                // the weight's device (the frame's rows are joined there).
                p.source.x = grad.defined() ? grad.detach() : torch::zeros({0}, g->last_weight_.options());
                p.source.format = p.format;
                if (p.values_only) p.source.dequantized = p.source.x; // a 16-bit GEMM's dW, in FP32
                p.count = p.source.x.numel();
                p.from_weight_grad = false;
                if (!p.source.x.is_cpu()) {
                    p.row = tensor_stats_row(p.source.x, p.format, 1.0f, p.source.dequantized);
                    p.source = {};
                    continue;
                }
            }
            deferred.push_back(&p);
            sources.push_back(p.source);
            p.source = {};
        }
    }
    if (sources.empty()) return;
    auto rows = tensor_stats_rows_cpu(sources);
    for (size_t i = 0; i < rows.size(); ++i) deferred[i]->row = std::move(rows[i]);
}

std::vector<PendingTensorStats> LayerGemm::take_pending()
{
    for (const auto& p : pending_)
        if (!p.row.defined()) {
            // Not finished by the telemetry step (a test driving the layer directly): finish now.
            finish_stats({std::shared_ptr<LayerGemm>(std::shared_ptr<LayerGemm>(), this)});
            break;
        }
    std::vector<PendingTensorStats> out;
    out.swap(pending_);
    return out;
}

std::vector<TensorStats> LayerGemm::take_stats()
{
    const auto pending = take_pending();
    std::vector<TensorStats> out;
    if (pending.empty()) return out;
    std::vector<torch::Tensor> rows;
    for (const auto& p : pending) rows.push_back(p.row);
    const auto host = torch::stack(rows).to(torch::kCPU).contiguous(); // (tensors, kSize)
    for (size_t i = 0; i < pending.size(); ++i) {
        const auto& p = pending[i];
        const float scale = p.scale_on_device.defined() ? p.scale_on_device.item<float>() : p.scale;
        TensorStats s = tensor_stats_from_row(host[static_cast<int64_t>(i)].data_ptr<double>(), p.format, scale,
                                              p.count, p.compared, p.values_only);
        s.layer = name_;
        s.role = p.role;
        out.push_back(std::move(s));
    }
    return out;
}

torch::Tensor LayerGemm::gemm(const torch::Tensor& a, const torch::Tensor& b, NumberFormat format,
                              const torch::Tensor& bias, const torch::Tensor& scale_a, const torch::Tensor& scale_b,
                              const char* output_role)
{
    const bool record_output = armed_ && output_role;
    torch::Tensor accumulator; // the FP32 result before the output cast, when emulated
    auto y = gemm_unrecorded(a, b, format, bias, scale_a, scale_b, record_output ? &accumulator : nullptr);
    if (record_output) {
        // The output cast is the GEMM's own: compare the FP32 accumulator with what came out.
        const NumberFormat out = gemm_output_format(format);
        if (out == NumberFormat::FP32 || !accumulator.defined()) record(output_role, y, out, 1.0f, {});
        else record(output_role, accumulator, out, 1.0f, y);
    }
    return y;
}

bool LayerGemm::blockwise_fp8_eligible(const torch::Tensor& a, const torch::Tensor& b) const
{
    // Both operands E4M3 (fp8-block's default; HYBRID's E5M2 gradients stay emulated), scales
    // that are powers of two (so the codes come back exactly), no outliers kept aside (their
    // BF16 values are no E4M3 code times the block's scale), whole 128-blocks everywhere, and
    // at least two along K: with one, _scaled_mm takes the (M, 1) and (1, N) scales for
    // row-wise scaling, which on Hopper wants a BF16 output.
    return recipe_.scaling == Fp8Scaling::Block128 && recipe_.block_power_of_two &&
           recipe_.outlier_rms_multiple == 0.0 && a.dim() == 2 && b.dim() == 2 && a.size(0) % 128 == 0 &&
           a.size(1) % 128 == 0 && a.size(1) >= 256 && b.size(1) % 128 == 0;
}

torch::Tensor LayerGemm::gemm_unrecorded(const torch::Tensor& a, const torch::Tensor& b, NumberFormat format,
                                         const torch::Tensor& bias, const torch::Tensor& scale_a,
                                         const torch::Tensor& scale_b, torch::Tensor* accumulator)
{
    const NumberFormat out = gemm_output_format(format);
    // The bias joins the FP32 accumulator in the output's dtype, as cuBLAS's epilogue (and so
    // autocast's addmm and _scaled_mm) takes it: rounded to that format first, then added, then
    // the sum rounded once.
    const torch::Tensor bias_out =
        bias.defined() && out != NumberFormat::FP32 ? round_to_format(bias, out, Overflow::Propagate) : bias;
    const bool fp8_shapes_ok = a.dim() == 2 && b.dim() == 2 && a.size(0) % 16 == 0 && a.size(1) % 16 == 0 &&
                               b.size(1) % 16 == 0;
    if (format_info(format).is_fp8 && scale_a.defined() && scale_b.defined() && fp8_shapes_ok && use_native(a) &&
        native_fp8_available()) {
        note_backend(true);
        auto y = scaled_mm(a, scale_a, format, b, scale_b, saved_operand_format(format)); // FP32 out
        if (bias.defined()) y = y + bias_out;
        if (accumulator) *accumulator = y; // the output row compares it, as on the CPU
        return round_to_format(y, out, Overflow::Propagate);
    }
    if (const auto y = block_fp4_product(a, b, format); y.defined()) {
        // nvfp4 and mxfp4 on Blackwell's FP4 tensor cores (untested on hardware): a BF16 product,
        // the bias added after it in FP32 and the sum rounded again (the emulator rounds once).
        note_backend(true);
        const auto sum = bias.defined() ? y.to(torch::kFloat32) + bias_out : y;
        if (out == NumberFormat::BF16) return sum.to(torch::kBFloat16);
        return round_to_format(sum.to(torch::kFloat32), out, Overflow::Propagate);
    }
    if (format == NumberFormat::E4M3 && blockwise_fp8_eligible(a, b) && use_native(a) && blockwise_fp8_available()) {
        // fp8-block on sm_90: the codes and power-of-two scales of the operands just rounded,
        // multiplied by cuBLAS's blockwise FP8 GEMM (blockwise_fp8.h says why this is exact).
        note_backend(true);
        auto y = blockwise_fp8_mm(split_fp8_blocks(a), split_fp8_blocks(b.t())); // (M, N) FP32
        if (bias.defined()) y = y + bias_out;
        if (accumulator) *accumulator = y;
        // A BF16 output as BF16: round_to_format's rounding (to BF16 and back to FP32) in one
        // pass instead of two, and no third when the native executor hands it on as BF16. A
        // gradient in BF16 reaches an FP32 input or weight as autograd converts it, the same
        // values.
        if (out == NumberFormat::BF16) return y.to(torch::kBFloat16);
        return round_to_format(y, out, Overflow::Propagate);
    }
    if (use_native(a) && (format == NumberFormat::BF16 || format == NumberFormat::FP16)) {
        // Operands are already exactly representable, so casting them is lossless; the tensor
        // core then accumulates in FP32 and rounds to the output dtype itself (cuBLAS may split
        // K and add the partial sums in the 16-bit dtype, as under autocast: torch's default
        // allow_bf16/fp16_reduced_precision_reduction; the GPU's order is not the CPU's anyway).
        note_backend(true);
        const auto dtype = format == NumberFormat::BF16 ? torch::kBFloat16 : torch::kHalf;
        auto y = bias.defined() ? at::addmm(bias.to(dtype), a.to(dtype), b.to(dtype)) : at::matmul(a.to(dtype), b.to(dtype));
        return y.to(torch::kFloat32);
    }
    if (format != NumberFormat::FP32) note_backend(false);
    // Emulation: the operands carry exactly the values the tensor core would multiply.
    auto y = bias.defined() ? at::addmm(bias_out, a, b) : at::matmul(a, b);
    if (accumulator) {
        *accumulator = y;
        return out == NumberFormat::FP32 ? y : round_to_format(y, out, Overflow::Propagate);
    }
    return out == NumberFormat::FP32 ? y : round_result_to_format(std::move(y), out);
}

torch::Tensor LayerGemm::linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias)
{
    if (formats_.all_fp32()) {
        // Observing a step must never change it: an FP32 layer runs the same kernels armed or
        // not (the spelled-out autograd path rounds differently), and telemetry only reads.
        const auto x32 = x.to(torch::kFloat32); // the native executor may hand over BF16
        // ATen's linear, as nn.Linear's: a (B, T, C) input takes one addmm with the bias in it
        // (cuBLAS's epilogue on a GPU), where the C++ frontend's functional::linear runs a
        // matmul and a separate bias add (bench/op_count.py found the extra pass).
        auto y = at::linear(x32, weight, bias);
        if (armed_) observe_linear(x32, weight, y, NumberFormat::FP32, {}, {});
        return y;
    }
    if (native_) return linear_native(x, weight, bias);
    return linear_emulated(x, weight, bias);
}

torch::Tensor LayerGemm::linear_emulated(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias)
{
    return apply_linear<LinearFunction>(x, weight, bias);
}

void LayerGemm::record_forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& y,
                               NumberFormat format, const torch::Tensor& x_cast, const torch::Tensor& w_cast)
{
    // Same roles, same order as the emulated path records them.
    remember_weight(weight);
    record("output", y, gemm_output_format(format), 1.0f, {});
    record("weight", weight, format, 1.0f, w_cast);
    record("input", x, format, 1.0f, x_cast);
}

void LayerGemm::observe_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& y,
                               NumberFormat format, const torch::Tensor& x_cast, const torch::Tensor& w_cast)
{
    record_forward(x, weight, y, format, x_cast, w_cast);
    if (!y.requires_grad()) return;
    // grad_output arrives through a hook that only reads it; the weight gradient is read from
    // the weight's .grad once the backward is done (a second product dy^T x only where the
    // weight is shared); every kernel of the step is untouched.
    const int64_t K = x.size(-1), N = y.size(-1);
    const auto x2 = (x_cast.defined() ? x_cast : x).detach().reshape({-1, K}); // (M, K), y's dtype
    const NumberFormat grad_format = format;
    y.register_hook([this, x2, N, grad_format](const torch::Tensor& dy) {
        if (!armed_) return;
        torch::NoGradGuard no_grad;
        const auto dy2 = dy.detach().reshape({-1, N}); // (M, N)
        record("grad_output", dy2, grad_format, 1.0f, {});
        // A 16-bit layer's dW comes out of its 16-bit GEMM (the native executor's), in that format.
        const NumberFormat dw_format = gemm_output_format(grad_format);
        if (weight_shared_ || !last_weight_.requires_grad()) {
            record("weight_grad", at::matmul(dy2.t(), x2), dw_format, 1.0f, {});
            return;
        }
        // The weight's own gradient, dy^T x, is what autograd is about to put in .grad (the
        // first micro-batch's gradients start from zero): read it there after the backward
        // instead of multiplying a second time.
        PendingTensorStats p;
        p.role = "weight_grad";
        p.format = dw_format;
        p.values_only = is_16bit(dw_format);
        p.compared = p.values_only;
        p.count = last_weight_.numel();
        p.from_weight_grad = true;
        pending_.push_back(std::move(p));
    });
}

torch::Tensor LayerGemm::matmul(const torch::Tensor& a, const torch::Tensor& b, AttentionProduct product)
{
    if (formats_.all_fp32()) return at::matmul(a.to(torch::kFloat32), b.to(torch::kFloat32));
    const bool values = product == AttentionProduct::Values;
    if (!native_) return MatmulFunction::apply(a, b, reinterpret_cast<int64_t>(this), values);
    // Native executor: attention's products when they are FP8 or of mixed formats (uniform
    // 16-bit attention runs fused, gpt_model.cpp). The output is already rounded to its
    // format, so handing it on in that dtype is lossless.
    return MatmulFunction::apply(a.to(torch::kFloat32), b.to(torch::kFloat32), reinterpret_cast<int64_t>(this), values)
        .to(output_dtype());
}

} // namespace mantissa
