// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The GEMMs of one layer under its precision policy. Holds the layer's formats, its FP8
// scaling state (one DelayedScaling per tensor role) and a cache of its quantised weight,
// and runs forward/backward either emulated (rounded operands, FP32 GEMM, rounded output)
// or natively on CUDA (bf16/fp16 GEMMs, _scaled_mm for FP8).

#include <array>
#include <mutex>
#include <string>

#include <torch/torch.h>

#include "block_scaling.h"
#include "blockwise_fp8.h"
#include "fp8_scaling.h"
#include "native_fp8.h"
#include "precision_policy.h"
#include "telemetry.h"
#include "tensor_stats.h"

namespace mantissa {

enum class OperandRole { Input, Weight, GradOutput };
inline constexpr std::array<OperandRole, 3> kOperandRoles = {OperandRole::Input, OperandRole::Weight,
                                                             OperandRole::GradOutput};
// The FP8 formats a role's delayed-scaling state is kept for, one state each.
inline constexpr std::array<NumberFormat, 2> kFp8Formats = {NumberFormat::E4M3, NumberFormat::E5M2};

// Whether at::_scaled_mm runs on this CUDA device (probed once, sm_89 and newer).
bool native_fp8_available();

// The casts a linear's backward makes apart from the forward's and from each other's, where the
// layer's FP8 GEMMs (if any) take per-tensor scales: the dgrad GEMM's W in another format than
// the forward's, the wgrad GEMM's dy in another format than the dgrad's, and its x in another
// than the forward's. Each gets a row of its own ("weight_dgrad", "grad_output_wgrad",
// "input_wgrad"), in both executors alike. A wgrad E4M3 cast that flushed all of dy had none
// before 2026-12-07. Per-row and block recipes' copies along another dimension are not
// recorded yet (docs/TELEMETRY.md, "Casts that have no row").
struct UnsharedCasts {
    bool weight_dgrad = false, grad_output_wgrad = false, input_wgrad = false;
};
UnsharedCasts unshared_casts(const GemmFormats& f, const Fp8Recipe& recipe);

// One tensor's statistics while they are still on its device (a tensor_stats.h row), with
// what the host needs to read them back.
struct PendingTensorStats {
    std::string role;
    NumberFormat format = NumberFormat::FP32;
    float scale = 1.0f;
    torch::Tensor scale_on_device; // () native FP8 scale, read back with the row (then `scale` is a placeholder)
    int64_t count = 0;
    bool compared = false;
    // The tensor holds `format`'s values already and the cast into it ran where no row sees it
    // (tensor_stats_from_row's values_only).
    bool values_only = false;
    torch::Tensor row; // (stats_row::kSize) float64; undefined until computed
    // The weight's .grad, read once the backward is done (LayerGemm::finish_stats).
    StatsSource source;
    bool from_weight_grad = false; // source is the weight's .grad, read when finishing
};

class LayerGemm {
public:
    LayerGemm(std::string layer_name, GemmFormats formats, const Fp8Recipe& recipe, GemmBackend backend);

    // y = x W^T + b; x (..., K), W (N, K), b (N) or undefined -> (..., N)
    torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
    // linear(at::gelu(u), W, b): the linear after an exact GELU. The native executor's FP8
    // layers under delayed scaling cast gelu(u) for their GEMM straight from u, where a GPU
    // kernel does it in one read without writing gelu(u) (quantize_gelu_fp8_native), and take
    // the GELU's gradient in their own backward; everything else runs linear(at::gelu(u)). The
    // same values and gradients either way (tests/test_native).
    torch::Tensor linear_of_gelu(const torch::Tensor& u, const torch::Tensor& weight, const torch::Tensor& bias);
    // Whether linear_of_gelu runs as the native FP8 linear that casts from the GELU's input.
    bool casts_from_gelu_input(const torch::Tensor& u) const;
    // y = a b; a (..., M, K), b (..., K, N) -> (..., M, N). For attention's two products:
    // on armed training steps the values product records its `a` (the probabilities) as
    // "probs", and the scores product its output gradient (dS) as "grad_scores", each against
    // the format it is cast to, as a linear records "input" and "grad_output".
    enum class AttentionProduct { Scores, Values };
    torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b, AttentionProduct product);

    // The native executor (precision.backend native, or auto on CUDA): activations travel in
    // their compute dtype (activation_dtype), 16-bit GEMMs run as themselves, per-tensor and
    // per-row FP8 GEMMs on real FP8 codes with device-side scales, each GEMM of a layer in its
    // own format. What it cannot run natively (MX and block scales, outliers, TF32, FP8
    // attention) runs emulated in FP32 and leaves in the output's dtype; backend_used() then
    // says "emulated" or "native+emulated".
    void set_native(bool native) { native_ = native; }
    bool native() const { return native_; }
    // The dtype this layer's outputs travel in (FP32 when emulated).
    c10::ScalarType output_dtype() const;
    // One 16-bit format for all three GEMMs: the layer runs as autocast would run it.
    bool uniform_16bit() const;

    const std::string& name() const { return name_; }
    // Evaluation and sampling use the current FP8 scales but must not move them (nor fill the
    // weight cache): otherwise an evaluation would change the training that follows it.
    void set_training(bool training)
    {
        training_ = training;
        if (training) blockwise_scratch_ = {}; // evaluation's fp8-block weight cast, on the device
    }
    bool training() const { return training_; }
    // fp8-block operands the blockwise FP8 GEMM can take (its caller checks the format and device).
    bool blockwise_fp8_eligible(const torch::Tensor& a, const torch::Tensor& b) const;
    GemmFormats formats() const { return formats_; }
    // Takes effect at the next GEMM. FP8 delayed-scaling states that the old and the new
    // formats both use go on; the others restart, so that stale scales are not reused.
    void set_formats(const GemmFormats& formats);
    // Another scaling recipe (delayed, nvfp4, ...), from the next GEMM on; the recipe's other
    // settings (history length, margin, nvfp4's parts) stay the project's. Every delayed-scaling
    // state restarts, as a module given a new recipe starts in TransformerEngine: its amaxes were
    // recorded under another recipe's casts, or not at all while it ran. Casts kept are dropped.
    void set_scaling(Fp8Scaling scaling);
    // The loss scale changed by `ratio` at a step boundary (a growth or backoff, a live switch
    // that turned loss scaling on or off, a resume under another mode): every gradient's amax
    // history and scale follow, with no host sync, so that the next step's FP8
    // gradient casts fit the scaled gradients (scales from the unscaled history saturated every
    // value of a gradient scaled by 65536). A ratio that is not a positive finite float (a loss
    // scale that backed off to 0) changes nothing.
    void rescale_gradient_amaxes(float ratio);
    // The optimizer changed the master weights: drop the low-precision copy. (The version
    // counter alone is not enough: fused optimizer kernels update in place without bumping it.)
    void invalidate_weight_cache()
    {
        weight_casts_ = {};
        native_weight_ = {};
        native_weight_dgrad_ = {};
        blockwise_weight_ = {};
        blockwise_scratch_ = {};
    }
    // "fp32", "emulated", "native", or "native+emulated" when some GEMMs fell back: what ran
    // since the formats were last set ("none" before anything ran).
    std::string backend_used() const;

    // Used by the autograd functions. `k_dim` is the operand's contraction dimension. For
    // per-tensor FP8 recipes `scale` receives the scale used, a () FP32 tensor on x's device
    // (undefined otherwise), so a native GEMM can recover the FP8 codes exactly:
    // codes = values * scale.
    torch::Tensor round_operand(const torch::Tensor& x, NumberFormat format, OperandRole role, int64_t k_dim,
                                torch::Tensor* scale = nullptr);
    // The same cast without recording an amax: a tensor that the forward cast and recorded,
    // cast again in the backward. Attention keeps its operands rather than their casts (P's
    // would cost another T x T a head). `forward_scale` is the scale the forward's cast took
    // (round_operand's `scale`): under delayed scaling the backward casts with it, so it
    // multiplies the forward's very FP8 codes, as TE's saved FP8 tensors do; the forward's
    // record has moved the state's scale since. Undefined: the state's current scale.
    torch::Tensor recast_operand(const torch::Tensor& x, NumberFormat format, OperandRole role, int64_t k_dim,
                                 const torch::Tensor& forward_scale);
    torch::Tensor quantized_weight(const torch::Tensor& weight, NumberFormat format, int64_t k_dim,
                                   torch::Tensor* scale = nullptr);
    // a (M, K) in `format` x b (K, N) in saved_operand_format(format), plus `bias` in FP32 (the
    // epilogue), output rounded to the format's output dtype. Defined `scale_a`/`scale_b`
    // allow the native FP8 GEMM.
    torch::Tensor gemm(const torch::Tensor& a, const torch::Tensor& b, NumberFormat format,
                       const torch::Tensor& bias = {}, const torch::Tensor& scale_a = {},
                       const torch::Tensor& scale_b = {}, const char* output_role = nullptr);

    // Telemetry: while armed, the GEMMs record TensorStats for their tensor roles (weight,
    // input, output, grad_output, weight_grad), FP32 layers included. Recording only reads:
    // an armed step runs the same kernels in the same order as an unarmed one. The statistics
    // stay on the device until the telemetry step reads them all back at once.
    void arm_telemetry(bool armed);
    bool telemetry_armed() const { return armed_; }
    void record(const char* role, const torch::Tensor& x, NumberFormat format, float scale,
                const torch::Tensor& dequantized);
    // A linear's forward records of a 16-bit or FP32 GEMM (output, weight, input, with the
    // casts it multiplied; undefined casts for FP32), and the weight for the update ratio.
    void record_forward(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& y,
                        NumberFormat format, const torch::Tensor& x_cast, const torch::Tensor& w_cast);
    // The same with the scale still on the device (native FP8): read back with the row.
    void record(const char* role, const torch::Tensor& x, NumberFormat format, const torch::Tensor& scale,
                const torch::Tensor& dequantized);
    // The same with the cast as the native executor holds it: FP8 codes (x's shape) whose values
    // are codes * inv_scale (a () FP32 tensor; Fp8Tensor::dequantized()). On a GPU the statistics
    // kernel reads the codes, so the dequantized FP32 tensor is never made.
    void record(const char* role, const torch::Tensor& x, NumberFormat format, const torch::Tensor& scale,
                const torch::Tensor& codes, const torch::Tensor& inv_scale);
    // An fp8-block operand as the native executor holds its cast: codes (R, C) and the inverse
    // scale of each 1x128 block along its rows (R, C / 128). Recorded as record() with its
    // FP32 values and scale 0 records them; on a GPU the kernel reads the codes.
    void record_block_codes(const char* role, const torch::Tensor& x, NumberFormat format, const torch::Tensor& codes,
                            const torch::Tensor& inv_scale);
    // The names an nvfp4 wgrad operand's Hadamard rows take ("<name>_wgrad", "<name>_wgrad_no_rht")
    // instead of its role's, while set (nullptr: the role's). Attention's two products are one
    // layer's: named by their own tensors (query and grad_scores, probs and grad_output), the
    // scores product's rows no longer replace the values product's in the store.
    void name_wgrad_records(const char* input, const char* grad_output)
    {
        wgrad_input_name_ = input;
        wgrad_grad_output_name_ = grad_output;
    }
    std::vector<PendingTensorStats> take_pending();
    // Computes the statistics these layers deferred to the end of the backward (the weights'
    // gradients), in one pass on the CPU. Called once the first micro-batch's backward is done
    // (nothing recorded is modified before the update).
    static void finish_stats(const std::vector<std::shared_ptr<LayerGemm>>& layers);
    // The weight is also used elsewhere (the tied LM head): its .grad is not this GEMM's alone.
    void set_weight_shared(bool shared) { weight_shared_ = shared; }
    // The recorded statistics read back now (one host copy for this layer).
    std::vector<TensorStats> take_stats();
    // Attention: max |q.k| over the scores (a device scalar) and the 1/sqrt(d) it is scaled by.
    void set_attention_max_score(torch::Tensor max_abs_score, double inv_sqrt_d)
    {
        attention_max_score_ = std::move(max_abs_score);
        attention_logit_scale_ = inv_sqrt_d;
    }
    const torch::Tensor& attention_max_score() const { return attention_max_score_; } // undefined: not measured
    double attention_logit_scale() const { return attention_logit_scale_; }
    // The master weight this layer last multiplied while armed (for the update/weight ratio).
    const torch::Tensor& last_weight() const { return last_weight_; }
    void remember_weight(const torch::Tensor& w) { last_weight_ = w; }
    const Fp8Recipe& recipe() const { return recipe_; }
    // Delayed scaling keeps one state per tensor role and FP8 format: a role cast in two
    // formats (an E5M2 forward whose input the wgrad takes as E4M3; dgrad and wgrad in
    // different formats) must not scale one format's cast by a scale made for the other's
    // range. TE's recipes cast each role in one format, so for them this is TE's per-role state.
    // An attention layer keeps a set for each of its two products (`product` 1: the values
    // product): q and P, K and V, dS and dY are different tensors, and one history for both
    // scaled V by K's amax (TE scales each tensor by its own). Without `product`, the set of
    // the product being cast (AttentionProduct's scope in its matmul), 0 elsewhere.
    DelayedScaling& delayed(OperandRole role, NumberFormat format);
    DelayedScaling& delayed(OperandRole role, NumberFormat format, int product);
    int scaling_products() const { return attention_ ? 2 : 1; }
    // The product whose states the casts take from now on (an attention matmul's forward and
    // backward set it around their casts); returns the one before.
    int select_product(int product)
    {
        const int before = product_;
        product_ = product;
        return before;
    }
    // Its device mirror (native FP8 on CUDA), filled from the host state on first use.
    DeviceDelayedScaling& device_delayed(OperandRole role, NumberFormat format, const torch::Device& device);
    DeviceDelayedScaling& device_delayed(OperandRole role, NumberFormat format, int product,
                                         const torch::Device& device);
    // Whether this layer's per-tensor FP8 casts on `device` keep their state in the device
    // mirror (scales_on_device): what data parallel journals.
    bool scales_on_device(const torch::Device& device) const;

    // Native FP8: `x` cast under this layer's per-tensor or per-row recipe (`k_dim`: the
    // contraction dimension, which per-row scales run along), and the cached FP8 weight
    // (refilled once per optimizer step, as TE does with is_first_microbatch; per-row: W
    // scaled along K for the forward, `k_dim` 0 along N for dgrad, each cached) with its
    // transpose, (K, N) contiguous, made on first use.
    // with_transpose: codes_t too, for the wgrad GEMM (per-tensor recipes; per-row ignores it);
    // column_sums with it: the bias gradient from the cast's read, where its kernel makes it.
    Fp8Tensor quantize_native(const torch::Tensor& x, NumberFormat format, OperandRole role, int64_t k_dim = 1,
                              bool with_transpose = false, bool column_sums = false);
    // quantize_native(at::gelu(u), format, Input, 1, with_transpose) under delayed scaling, from
    // u (quantize_gelu_fp8_native): the forward operand of linear_of_gelu.
    Fp8Tensor quantize_gelu_native(const torch::Tensor& u, NumberFormat format);
    Fp8Tensor native_weight(const torch::Tensor& weight, NumberFormat format, int64_t k_dim = 1);
    torch::Tensor native_weight_transposed(const Fp8Tensor& w8);
    // What training ran: evaluation's and sampling's shapes (a sample's single rows) may take
    // other routes, which backend_used() would otherwise report as fallbacks.
    void note_backend(bool native)
    {
        if (training_) (native ? used_native_ : used_emulated_) = true;
    }

    // fp8-block in the native executor (layer_gemm_blockwise.cpp): the three GEMMs multiply the
    // codes their casts write, with the casts' block scales, where the emulator's path rounds
    // to FP32 values and splits them into codes again around each GEMM. Whether a linear of x
    // (M, K) and W (N, K) takes it: E4M3 in all three GEMMs, no outlier split, M, K and N
    // multiples of 128 and at least 256 (each is some GEMM's K, and with one block along K
    // _scaled_mm reads the scales as row-wise); on CUDA only where the blockwise GEMM passed
    // its probe. On a CPU the same path multiplies the dequantized codes (the tests' route).
    bool blockwise_codes_eligible(const torch::Tensor& x2, const torch::Tensor& weight) const;
    // Process-wide: false sends fp8-block back to the emulator's path (values split into codes
    // around each GEMM), so that the two can be set side by side (tests, bench/gpu.py). Starts
    // from the environment: MANTISSA_FP8_BLOCK_CODES=0 turns it off.
    static void set_blockwise_codes_enabled(bool enabled);
    static bool blockwise_codes_enabled();
    // fp8-block's 1x128 E4M3 cast of x (R, K) along K, as codes, where no backward follows (a
    // forward or dgrad operand: an armed training step records its block scales, as the
    // emulator's cast does; the wgrad copies along M are not recorded, there as here).
    Fp8BlockCodes blockwise_cast(const torch::Tensor& x, OperandRole role);
    // Both of x's casts, along K (observed as above) and along M (its wgrad copy, codes (K, M)),
    // on a GPU from one read of x.
    Fp8BlockCodesBoth blockwise_cast_both(const torch::Tensor& x, OperandRole role);
    // The weight's 128x128 E4M3 tiles as codes, cast once per optimizer step (evaluation casts
    // and keeps nothing): rows (N, K) with the tiles' scales per 1x128 row block, and with
    // `transposed` also W^T (K, N) the same way (a byte transpose, made on first use: the tiles
    // are square, so W^T holds the same values and scales).
    struct BlockwiseWeight {
        Fp8BlockOperand rows, transposed;
        torch::Tensor tile_decode; // (ceil(N / 128), ceil(K / 128))
        int64_t version = -1;
        const void* data = nullptr;
    };
    const BlockwiseWeight& blockwise_weight(const torch::Tensor& weight, bool transposed);

    // The device mirror of the delayed-scaling state written back into the host state, which
    // checkpoints and the data-parallel digest read.
    void sync_device_scaling_to_host();
    // Formats and FP8 scaling state for checkpoints, under "layers/<name>/...".
    void save(torch::serialize::OutputArchive& archive);
    void load(torch::serialize::InputArchive& archive);

private:
    bool use_native(const torch::Tensor& t) const;
    torch::Tensor linear_native(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
    torch::Tensor linear_emulated(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
    torch::Tensor linear_blockwise(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);
    // Telemetry of a linear that ran as torch's own linear (FP32, or 16-bit in the native
    // executor; `format` and the casts `x_cast`/`w_cast` say which): reads, never computes the step.
    void observe_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& y,
                        NumberFormat format, const torch::Tensor& x_cast, const torch::Tensor& w_cast);
    // y = Function(x as (M, K), W, b, this, extra...), back in x's leading shape: custom autograd
    // functions take 2-D operands, and an empty tensor stands for "no bias" (they cannot
    // take undefined tensors).
    template <typename Function, typename... Extra>
    torch::Tensor apply_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, Extra... extra)
    {
        auto out_shape = x.sizes().vec();
        out_shape.back() = weight.size(0);
        const auto bias_or_empty = bias.defined() ? bias : torch::empty({0}, weight.options().requires_grad(false));
        return Function::apply(x.reshape({-1, x.size(-1)}), weight, bias_or_empty, reinterpret_cast<int64_t>(this), extra...)
            .view(out_shape);
    }
    // Whether linear_native runs NativeLinear: each GEMM FP32, 16-bit or FP8 under per-tensor
    // or per-row scales, without the outlier split.
    bool takes_native_linear() const;
    // Telemetry of a block-recipe cast: an nvfp4 wgrad operand's Hadamard rows at once; a
    // row-wise cast's block scales kept until the operand itself is recorded (record()).
    void observe_block_cast(OperandRole role, const torch::Tensor& x, int64_t k_dim, BlockCastRecord block);
    // The same for a blockwise cast along x's last dimension (layer_gemm_blockwise.cpp).
    void observe_blockwise_cast(OperandRole role, const torch::Tensor& x, const Fp8BlockCodes& cast);
    torch::Tensor gemm_unrecorded(const torch::Tensor& a, const torch::Tensor& b, NumberFormat format,
                                  const torch::Tensor& bias, const torch::Tensor& scale_a, const torch::Tensor& scale_b,
                                  torch::Tensor* accumulator = nullptr);
    // nvfp4 and mxfp4 on a GPU whose FP4 GEMM passed its probe (Blackwell; block_fp4_gemm.h,
    // untested on hardware): a (M, K) times b (K, N) from the operands' codes and block scales,
    // (M, N) BF16; undefined where that GEMM does not apply (the emulator's product runs).
    // nvfp4's operands are split with their casts' own scales, kept beside the values that
    // round_operand handed back (by their data; a weight's while its cast is cached).
    torch::Tensor block_fp4_product(const torch::Tensor& a, const torch::Tensor& b, NumberFormat format);
    struct Fp4Operand {
        torch::Tensor values;
        Nvfp4Scales scales;
        bool weight = false;
    };
    std::vector<Fp4Operand> fp4_operands_;
    bool keeps_fp4_scales(const torch::Tensor& x) const;
    void remember_fp4_operand(const torch::Tensor& values, Nvfp4Scales scales, bool weight);
    const Nvfp4Scales* fp4_scales_of(const torch::Tensor& operand) const; // operand (rows, K)
    // Per-tensor FP8 casts keep their scale and delayed-scaling state as tensors (the device
    // mirror): on any device in the native executor, and on a GPU in the emulator too, so that
    // no cast reads an amax back. The emulator on a CPU keeps the host state.
    bool scales_on_device(const torch::Tensor& x) const { return scales_on_device(x.device()); }

    std::string name_;
    const char* wgrad_input_name_ = nullptr;
    const char* wgrad_grad_output_name_ = nullptr;
    GemmFormats formats_;
    Fp8Recipe recipe_;
    GemmBackend backend_;
    // 2 attention products x 3 roles x {E4M3, E5M2}; a linear layer's second six are empty.
    static constexpr size_t kScalingStates = 12;
    static size_t scaling_index(OperandRole role, NumberFormat format, int product);
    std::array<DelayedScaling, kScalingStates> delayed_;
    bool attention_ = false; // "*.sdpa": two products, each with its scaling states
    int product_ = 0;        // the product whose operands are being cast (select_product)
    torch::Tensor recast_scale_; // while recast_operand runs: the scale its delayed cast takes
    // Weight cache: a cast stays valid while the master weight's version counter, its format
    // and (for per-row and 1-D block casts) its layout hold. Two slots: the forward GEMM and
    // the input gradient's may take the weight in different formats or layouts (BF16 forward
    // with an FP8 dgrad, per-row scales along K and along N), and one slot would re-cast the
    // weight, and record its amax, at every micro-batch as the two evicted each other.
    struct WeightCast {
        torch::Tensor weight;
        torch::Tensor scale; // () per-tensor FP8 scale of `weight`, or undefined
        int64_t version = -1;
        const void* data = nullptr;
        NumberFormat format = NumberFormat::FP32;
        int64_t k_dim = 0;
    };
    std::array<WeightCast, 2> weight_casts_;
    size_t next_weight_slot_ = 0;
    bool used_native_ = false, used_emulated_ = false;
    bool native_ = false;
    std::array<DeviceDelayedScaling, kScalingStates> device_scaling_; // the device mirror of delayed_
    Fp8Tensor native_weight_;
    Fp8Tensor native_weight_dgrad_; // per-row recipes: W scaled along N; per tensor: the second format
    BlockwiseWeight blockwise_weight_, blockwise_scratch_; // the step's cached cast; evaluation's
    int64_t native_version_ = -1;
    const void* native_data_ = nullptr;
    bool armed_ = false;
    bool training_ = true;
    // A device-scaled record's pending row (both record overloads with a () scale tensor).
    void push_device_scaled(const char* role, const torch::Tensor& x, NumberFormat format, const torch::Tensor& scale,
                            bool compared, torch::Tensor row);
    // record()'s body: `codes_scale` defined when `dequantized` is FP8 codes (record_block_codes).
    // `fp32_cast`: `dequantized` is a cast even where `format` is FP32 (fp8-block's block
    // scales, rounded to powers of two); elsewhere an FP32 operand was not cast.
    void record_cast(const char* role, const torch::Tensor& x, NumberFormat format, float scale,
                     const torch::Tensor& dequantized, const torch::Tensor& codes_scale, bool fp32_cast = false);
    std::vector<PendingTensorStats> pending_;
    struct ObservedBlockCast {
        const void* source = nullptr; // the operand's data: record() pairs the cast with its tensor
        BlockCastRecord block;
    };
    std::array<std::optional<ObservedBlockCast>, 3> block_casts_; // by OperandRole, armed steps only
    bool weight_shared_ = false;
    torch::Tensor last_weight_;
    torch::Tensor attention_max_score_;
    double attention_logit_scale_ = 1.0;
};

} // namespace mantissa
