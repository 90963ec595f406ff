// SPDX-License-Identifier: GPL-3.0-or-later
// The native executor's side of LayerGemm: 16-bit layers run as autocast runs them; FP8
// GEMMs under per-tensor or per-row scales multiply real FP8 codes (at::_scaled_mm on CUDA)
// with scales that never leave the device, beside 16-bit or FP32 GEMMs of the same layer.
// The emulated side (layer_gemm.cpp) is the reference it is tested against.
#include "layer_gemm.h"

#include <cstdlib>
#include <string>

#include "quantize.h"

namespace mantissa {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// An FP8 operand's statistics: the per-tensor scale stays on the device until the frame is
// read; per-row scales are recorded as 0, as the emulator records them.
void record_fp8(LayerGemm& layer, const char* role, const torch::Tensor& x, const Fp8Tensor& t)
{
    if (per_row(t)) layer.record(role, x, t.format, 0.0f, t.dequantized());
    else layer.record(role, x, t.format, t.scale, t.codes, t.inv_scale);
}

bool is_fp8(NumberFormat f) { return format_info(f).is_fp8; }

// y = x W^T + b with each GEMM in its own format: FP8 GEMMs on FP8 codes (per-tensor or
// per-row scales), 16-bit GEMMs on the cast operands with FP32 accumulation (cuBLAS), FP32
// GEMMs in FP32. TE's HYBRID and E4M3 throughout are all-FP8; an FP8 forward with a BF16
// backward is one GEMM each way. x (M, K), W (N, K).
// `gelu_input` (linear_of_gelu, where casts_from_gelu_input holds): x is u and the linear is of
// at::gelu(u): its FP8 cast comes from u (quantize_gelu_native), u is kept, and the backward
// ends with the GELU's gradient, at::gelu_backward as autograd's node would run it.
struct NativeLinear : public torch::autograd::Function<NativeLinear> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, int64_t layer_address, bool gelu_input = false)
    {
        auto* layer = reinterpret_cast<LayerGemm*>(layer_address);
        const GemmFormats f = layer->formats();
        const bool has_bias = bias.numel() > 0;
        torch::Tensor y, saved_x = x, saved_scale, saved_inv_scale;
        bool reuse_input = false;
        if (is_fp8(f.forward)) {
            // TE keeps the FP8 input for the weight gradient when the wgrad GEMM takes that
            // format (per tensor only: per-row scales ran along K, and wgrad contracts over M),
            // and keeps it transposed, as that GEMM takes it: the cast writes both layouts.
            reuse_input = layer->training() && f.forward == saved_operand_format(f.wgrad) &&
                          layer->recipe().scaling != Fp8Scaling::PerRow;
            TORCH_CHECK(!gelu_input || reuse_input, "linear_of_gelu: the GELU's cast must serve the wgrad GEMM too");
            const Fp8Tensor x8 = gelu_input ? layer->quantize_gelu_native(x, f.forward)
                                            : layer->quantize_native(x, f.forward, OperandRole::Input, 1,
                                                                     reuse_input); // (M, K); per row: scales (M, 1)
            const Fp8Tensor w8 = layer->native_weight(weight, f.forward);                   // (N, K); per row: (N, 1)
            bool native = false;
            // Fast accumulation in the forward GEMM only, as TransformerEngine does.
            y = fp8_gemm(x8.codes, x8.inv_scale, w8.codes.t(), w8.inv_scale.t(), has_bias ? bias : torch::Tensor(),
                         torch::kBFloat16, /*fast_accum=*/true, &native); // (M, N) BF16
            layer->note_backend(native);
            if (layer->telemetry_armed()) {
                layer->remember_weight(weight);
                layer->record("output", y, NumberFormat::BF16, 1.0f, {});
                record_fp8(*layer, "weight", weight, w8);
                // The values the cast was made of: at::gelu(u) is made here for the record alone.
                record_fp8(*layer, "input", gelu_input ? at::gelu(x) : x, x8);
            }
            if (reuse_input) {
                saved_x = x8.codes_t; // (K, M)
                saved_scale = x8.scale;
                saved_inv_scale = x8.inv_scale;
            }
        } else {
            TORCH_CHECK(!gelu_input, "linear_of_gelu: an FP8 forward GEMM only");
            const auto dtype = activation_dtype(f.forward); // its 16-bit dtype, or FP32
            const auto x_cast = x.to(dtype), w_cast = weight.to(dtype); // (M, K), (N, K)
            y = at::linear(x_cast, w_cast, has_bias ? bias.to(dtype) : torch::Tensor()); // (M, N)
            if (is_16bit(f.forward)) layer->note_backend(true);
            if (layer->telemetry_armed()) {
                const bool cast = f.forward != NumberFormat::FP32;
                layer->record_forward(x, weight, y, f.forward, cast ? x_cast : torch::Tensor(),
                                      cast ? w_cast : torch::Tensor());
            }
            if (f.wgrad == f.forward) saved_x = x_cast; // the wgrad GEMM's operand, already cast
        }
        ctx->saved_data["layer"] = layer_address;
        ctx->saved_data["has_bias"] = has_bias;
        ctx->saved_data["reuse_input"] = reuse_input;
        ctx->saved_data["gelu_input"] = gelu_input;
        ctx->save_for_backward({saved_x, weight, saved_scale, saved_inv_scale, gelu_input ? x : torch::Tensor()});
        return y;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        auto* layer = reinterpret_cast<LayerGemm*>(ctx->saved_data["layer"].toInt());
        const GemmFormats f = layer->formats();
        const auto saved = ctx->get_saved_variables();
        const auto& weight = saved[1];
        const auto dy = grads[0].contiguous(); // (M, N)
        const bool armed = layer->telemetry_armed();

        // dgrad: dx = dy W, contraction over N.
        torch::Tensor dx;
        Fp8Tensor dy8;
        // The wgrad GEMM reuses the dgrad GEMM's cast of dy when it takes the same format under
        // a per-tensor scale, transposed: the cast writes that layout too.
        const bool per_tensor = layer->recipe().scaling != Fp8Scaling::PerRow;
        const bool share_dy = is_fp8(f.dgrad) && f.wgrad == f.dgrad && per_tensor;
        const bool has_bias = ctx->saved_data["has_bias"].toBool();
        const UnsharedCasts unshared = unshared_casts(f, layer->recipe()); // their rows, as the emulator's
        if (is_fp8(f.dgrad)) {
            // W as (N, K) column-major: the cached transpose. The cast-transpose of dy also sums
            // its columns where its kernel can (the bias gradient, from the same read of dy).
            dy8 = layer->quantize_native(dy, f.dgrad, OperandRole::GradOutput, 1, share_dy,
                                         share_dy && has_bias); // per row: (M, 1)
            const Fp8Tensor w8 = layer->native_weight(weight, saved_operand_format(f.dgrad), 0); // per row: (1, K)
            bool native = false;
            const auto w_kn = per_row(w8) ? w8.codes : layer->native_weight_transposed(w8).t(); // (N, K), fp8_gemm lays it out
            dx = fp8_gemm(dy8.codes, dy8.inv_scale, w_kn, w8.inv_scale, {}, torch::kBFloat16, /*fast_accum=*/false,
                          &native); // (M, K)
            layer->note_backend(native);
            if (armed) record_fp8(*layer, "grad_output", dy, dy8);
            if (armed && unshared.weight_dgrad) record_fp8(*layer, "weight_dgrad", weight, w8);
        } else {
            const auto dtype = activation_dtype(f.dgrad);
            const auto dy_cast = dy.to(dtype), w_cast = weight.to(dtype);
            dx = dy_cast.mm(w_cast); // (M, K)
            if (is_16bit(f.dgrad)) layer->note_backend(true);
            if (armed) layer->record("grad_output", dy, f.dgrad, 1.0f, f.dgrad != NumberFormat::FP32 ? dy_cast : torch::Tensor());
            if (armed && unshared.weight_dgrad) layer->record("weight_dgrad", weight, f.dgrad, 1.0f, w_cast);
        }

        // wgrad: dW = dy^T x, contraction over M (per row: dy scaled along M, one per N).
        torch::Tensor dw;
        if (is_fp8(f.wgrad)) {
            // Per tensor, both operands come transposed from their casts (M innermost, as the
            // GEMM takes them); per row, fp8_gemm lays them out.
            const Fp8Tensor dy_w =
                share_dy ? dy8 : layer->quantize_native(dy, f.wgrad, OperandRole::GradOutput, 0, per_tensor);
            Fp8Tensor x8;
            if (ctx->saved_data["reuse_input"].toBool()) {
                x8.codes_t = saved[0]; // (K, M)
                x8.scale = saved[2];
                x8.inv_scale = saved[3];
                x8.format = saved_operand_format(f.wgrad);
            } else {
                x8 = layer->quantize_native(saved[0], saved_operand_format(f.wgrad), OperandRole::Input, 0,
                                            per_tensor); // per row: (1, K)
            }
            if (armed && unshared.grad_output_wgrad) record_fp8(*layer, "grad_output_wgrad", dy, dy_w);
            if (armed && unshared.input_wgrad) record_fp8(*layer, "input_wgrad", saved[0], x8);
            const auto dy_nm = dy_w.codes_t.defined() ? dy_w.codes_t : dy_w.codes.t(); // (N, M)
            const auto x_mk = x8.codes_t.defined() ? x8.codes_t.t() : x8.codes;       // (M, K), column-major if transposed
            bool native = false;
            dw = fp8_gemm(dy_nm, dy_w.inv_scale.t(), x_mk, x8.inv_scale, {}, torch::kBFloat16, /*fast_accum=*/false,
                          &native); // (N, K)
            layer->note_backend(native);
        } else {
            const auto dtype = activation_dtype(f.wgrad);
            const auto dy_cast = dy.to(dtype), x_cast = saved[0].to(dtype);
            if (armed && unshared.grad_output_wgrad) layer->record("grad_output_wgrad", dy, f.wgrad, 1.0f, dy_cast);
            if (armed && unshared.input_wgrad) layer->record("input_wgrad", saved[0], f.wgrad, 1.0f, x_cast);
            dw = dy_cast.t().mm(x_cast); // (N, K)
            if (is_16bit(f.wgrad)) layer->note_backend(true);
        }
        if (armed) layer->record("weight_grad", dw, gemm_output_format(f.wgrad), 1.0f, {});

        torch::Tensor db;
        if (has_bias) db = dy8.column_sums.defined() ? dy8.column_sums : dy.sum(0, false, torch::kFloat32); // FP32 sums
        if (ctx->saved_data["gelu_input"].toBool()) {
            // The gradient that reached gelu(u), in gelu(u)'s dtype (u's), as autograd hands it
            // to the GELU's node, then that node's op.
            const auto& u = saved[4];
            dx = at::gelu_backward(dx.to(u.scalar_type()), u);
        }
        return {dx, dw, db, torch::Tensor(), torch::Tensor()};
    }
};

} // namespace

c10::ScalarType LayerGemm::output_dtype() const
{
    return native_ ? activation_dtype(formats_.forward) : torch::kFloat32;
}

bool LayerGemm::uniform_16bit() const { return mantissa::uniform_16bit(formats_); }

torch::Tensor LayerGemm::linear_native(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias)
{
    if (uniform_16bit()) {
        // Exactly what autocast does: cast x, W and b, and let torch's linear and its autograd
        // run in that dtype (tests/test_native.cpp holds the two bit for bit).
        const auto dtype = activation_dtype(formats_.forward);
        const auto x_cast = x.to(dtype), w_cast = weight.to(dtype);
        auto y = at::linear(x_cast, w_cast, bias.defined() ? bias.to(dtype) : torch::Tensor());
        note_backend(true);
        if (armed_) observe_linear(x, weight, y, formats_.forward, x_cast, w_cast);
        return y;
    }
    if (takes_native_linear()) return apply_linear<NativeLinear>(x, weight, bias);
    if (blockwise_codes_eligible(x.reshape({-1, x.size(-1)}), weight)) return linear_blockwise(x, weight, bias);
    // MX and block scales, outliers, TF32: the emulator's arithmetic, in FP32, and the
    // (already rounded) output handed on in its dtype. An input fp8-block's casts read as they
    // are stays as it is, and so does the copy saved for the backward (half the size).
    const bool as_is = fp8_block_reads_as_is(x, recipe_);
    return linear_emulated(as_is ? x : x.to(torch::kFloat32), weight, bias).to(output_dtype());
}

bool LayerGemm::takes_native_linear() const
{
    // Each GEMM in a format the native executor multiplies as itself: FP32, 16-bit, or FP8
    // under per-tensor or per-row scales without the outlier split.
    return runs_native_linear(formats_, recipe_);
}

bool LayerGemm::casts_from_gelu_input(const torch::Tensor& u) const
{
    // MANTISSA_GELU_CAST=0 keeps the GELU apart (at::gelu, then the cast), for a timing of the
    // two ways on a GPU (the fused kernel does the GELU's erff and the cast in one pass, and may
    // be bound by its instructions rather than by the memory it saves).
    static const bool enabled = [] {
        const char* v = std::getenv("MANTISSA_GELU_CAST");
        return !(v && std::string(v) == "0");
    }();
    // NativeLinear's FP8 forward whose cast the wgrad GEMM reuses (kept transposed, so gelu(u)
    // is needed nowhere else), under delayed scaling, whose scale is known before the cast.
    return enabled && native_ && training_ && !uniform_16bit() && takes_native_linear() &&
           recipe_.scaling == Fp8Scaling::Delayed && is_fp8(formats_.forward) &&
           formats_.forward == saved_operand_format(formats_.wgrad) && u.dim() >= 2;
}

torch::Tensor LayerGemm::linear_of_gelu(const torch::Tensor& u, const torch::Tensor& weight, const torch::Tensor& bias)
{
    if (casts_from_gelu_input(u)) return apply_linear<NativeLinear>(u, weight, bias, /*gelu_input=*/true);
    return linear(torch::gelu(u), weight, bias);
}

Fp8Tensor LayerGemm::quantize_gelu_native(const torch::Tensor& u, NumberFormat format)
{
    return quantize_gelu_fp8_native(u, format, recipe_, &device_delayed(OperandRole::Input, format, u.device()),
                                    /*record=*/training_);
}

DeviceDelayedScaling& LayerGemm::device_delayed(OperandRole role, NumberFormat format, const torch::Device& device)
{
    return device_delayed(role, format, product_, device);
}

DeviceDelayedScaling& LayerGemm::device_delayed(OperandRole role, NumberFormat format, int product,
                                                const torch::Device& device)
{
    auto& d = device_scaling_[scaling_index(role, format, product)];
    if (!d.defined()) d.upload(delayed(role, format, product), device); // a resumed or fresh state, once
    return d;
}

void LayerGemm::sync_device_scaling_to_host()
{
    for (size_t i = 0; i < kScalingStates; ++i) device_scaling_[i].download(delayed_[i]);
}

Fp8Tensor LayerGemm::quantize_native(const torch::Tensor& x, NumberFormat format, OperandRole role, int64_t k_dim,
                                     bool with_transpose, bool column_sums)
{
    if (recipe_.scaling == Fp8Scaling::PerRow) return quantize_fp8_rowwise_native(x, format, recipe_, k_dim);
    DeviceDelayedScaling* state =
        recipe_.scaling == Fp8Scaling::Delayed ? &device_delayed(role, format, x.device()) : nullptr;
    DeviceDelayedScaling at_forward_scale; // recast_operand: the forward's scale, on the device
    if (state && recast_scale_.defined()) {
        at_forward_scale = state->with_scale(recast_scale_);
        state = &at_forward_scale;
    }
    // Evaluation uses the current scale and leaves the history where it is.
    return quantize_fp8_native(x, format, recipe_, state, /*record=*/training_, with_transpose, column_sums);
}

Fp8Tensor LayerGemm::native_weight(const torch::Tensor& weight, NumberFormat format, int64_t k_dim)
{
    // Per-tensor scales do not depend on the layout: one cast serves both GEMMs.
    if (recipe_.scaling != Fp8Scaling::PerRow) k_dim = 1;
    if (!training_) return quantize_native(weight.detach(), format, OperandRole::Weight, k_dim);
    const int64_t version = static_cast<int64_t>(weight._version());
    if (native_version_ != version || native_data_ != weight.data_ptr()) {
        native_weight_ = native_weight_dgrad_ = {};
        native_version_ = version;
        native_data_ = weight.data_ptr();
    }
    // Per row, a slot per layout. Per tensor, a slot per format: the forward GEMM and the input
    // gradient's may take the weight in two formats (an E5M2 forward casts it E5M2, the dgrad
    // E4M3), and one slot would re-cast it, and record its amax, at every micro-batch.
    Fp8Tensor* slot = k_dim == 1 ? &native_weight_ : &native_weight_dgrad_;
    if (recipe_.scaling != Fp8Scaling::PerRow && native_weight_.defined() && native_weight_.format != format)
        slot = &native_weight_dgrad_;
    Fp8Tensor& cached = *slot;
    if (cached.defined() && cached.format == format) return cached;
    // Per tensor, the dgrad GEMM takes this very cast transposed when its format matches: the
    // cast writes both layouts.
    const bool for_dgrad_too = k_dim == 1 && recipe_.scaling != Fp8Scaling::PerRow && is_fp8(formats_.dgrad) &&
                               saved_operand_format(formats_.dgrad) == format;
    cached = quantize_native(weight.detach(), format, OperandRole::Weight, k_dim,
                             for_dgrad_too); // one amax record per step
    return cached;
}

torch::Tensor LayerGemm::native_weight_transposed(const Fp8Tensor& w8)
{
    // The step's cached cast wrote its transpose (native_weight); evaluation's cast is not cached.
    for (const Fp8Tensor* cached : {&native_weight_, &native_weight_dgrad_})
        if (w8.codes.is_same(cached->codes) && cached->codes_t.defined()) return cached->codes_t;
    return w8.codes.t().contiguous(); // (K, N)
}

} // namespace mantissa
