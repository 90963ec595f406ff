// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Which number format each GEMM of each layer uses. A GEMM-bearing layer has three GEMMs:
//   forward  y  = x  W^T   (input x weight)
//   dgrad    dx = dy W     (grad-output x weight)
//   wgrad    dW = dy^T x   (grad-output x input)
// Operand rule: a GEMM in a 16-bit or 32-bit format rounds both operands to that format.
// An FP8 backward GEMM (E5M2 in TE's HYBRID) takes the gradient in that format and the
// saved weight/input in E4M3, as TransformerEngine does and as _scaled_mm requires.
// No LibTorch here.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loss_scaler.h"
#include "number_format.h"

namespace mantissa {

struct GemmFormats {
    NumberFormat forward = NumberFormat::FP32;
    NumberFormat dgrad = NumberFormat::FP32;
    NumberFormat wgrad = NumberFormat::FP32;

    static GemmFormats all(NumberFormat f) { return {f, f, f}; } // one format for the three GEMMs
    bool all_fp32() const;
    bool any_fp8() const;
    bool operator==(const GemmFormats&) const = default;
    std::string describe() const; // "e4m3/e5m2/e5m2"
};

// Block32 is MXFP8. Block128 is TE's Float8BlockScaling (DeepSeek-V3), NvFp4 TE's
// NVFP4BlockScaling and MxFp4 OCP MX's FP4: under the last two a GEMM named FP8 takes E2M1
// elements whatever its FP8 format (core/block_scaling.h).
enum class Fp8Scaling { Delayed, Current, PerRow, Block32, Block128, NvFp4, MxFp4 };

struct Fp8Recipe {
    Fp8Scaling scaling = Fp8Scaling::Delayed;
    int64_t amax_history_length = 1024; // TE default
    bool amax_use_max = true;           // "max" over the history; false = "most_recent"
    int64_t margin = 0;                 // scale = FP8_MAX / amax / 2^margin
    bool saturate = true;
    bool rowwise_power_of_two = true;   // torchao's rowwise recipe rounds scales to powers of two
    bool mx_round_scale_up = false;     // arXiv 2506.08027: round the block exponent up, never saturate
    double outlier_rms_multiple = 0.0;  // >0: |x| > k * rms(x) skips FP8 and is added back in BF16
    bool block_power_of_two = true;     // fp8-block: FP32 scales rounded down to powers of two (TE default)
    bool nvfp4_rht = true;              // nvfp4: 16-point random Hadamard transform on the wgrad inputs
    bool nvfp4_stochastic_rounding = true; // nvfp4: gradients round stochastically
    bool nvfp4_weight_2d = true;        // nvfp4: weights in 16x16 tiles (else 1x16 like the rest)
};

// One scale for the whole tensor (delayed, current), as against per-row or per-block scales.
inline bool per_tensor_scaling(const Fp8Recipe& r) { return r.scaling == Fp8Scaling::Delayed || r.scaling == Fp8Scaling::Current; }

// In an FP8 backward GEMM the saved operand (weight or input) is E4M3 (E5M2 x E5M2 does not
// exist on Hopper); in every other format both operands share the GEMM's format.
NumberFormat saved_operand_format(NumberFormat gemm_format);

// How LayerGemm::linear runs a layer, from its formats and recipe, and so what it keeps between
// the forward and the backward (the memory model bills it from this). Fp32: ATen's linear.
// Autocast16: one 16-bit format for the three GEMMs, as autocast runs it. Native: each GEMM as
// itself (FP32, 16-bit, or FP8 codes under per-tensor or per-row scales). BlockwiseCodes:
// fp8-block's E4M3 codes and block scales into cuBLAS's blockwise GEMM. Emulated: the
// emulator's FP32 values (the CPU's default; MX and FP4 recipes, fp8-block off whole
// 128-blocks, and the outlier split on a GPU).
enum class LinearRoute { Fp32, Autocast16, Native, BlockwiseCodes, Emulated };
// `native_executor`: backend native, or auto on a GPU. The GEMM is (rows, in) x (out, in)^T.
// BlockwiseCodes also needs, at run time, a cuBLAS that has the GEMM (on a GPU) and
// MANTISSA_FP8_BLOCK_CODES not set to 0; that is assumed here.
LinearRoute linear_route(const GemmFormats& f, const Fp8Recipe& recipe, bool native_executor, int64_t rows,
                         int64_t in_features, int64_t out_features);
// The tests linear_route makes, which LayerGemm makes on the tensors themselves.
bool uniform_16bit(const GemmFormats& f); // one 16-bit format for the three GEMMs
bool runs_native_linear(const GemmFormats& f, const Fp8Recipe& recipe);
bool blockwise_codes_fit(const GemmFormats& f, const Fp8Recipe& recipe, int64_t rows, int64_t in_features,
                         int64_t out_features);

// fp8-block without the outlier split: its GPU cast reads a 16-bit operand as it is, unwidened
// (fp8_block_reads_as_is asks this of the tensor too).
inline bool fp8_block_reads_16bit(const Fp8Recipe& r)
{
    return r.scaling == Fp8Scaling::Block128 && r.outlier_rms_multiple == 0.0;
}

// Weights quantized in square tiles (fp8-block's 128x128, nvfp4's 16x16): W and W^T then hold
// the same values, so one cast serves the forward (along K) and dgrad (along N) GEMMs.
inline bool square_weight_tiles(const Fp8Recipe& r)
{
    return r.scaling == Fp8Scaling::Block128 || (r.scaling == Fp8Scaling::NvFp4 && r.nvfp4_weight_2d);
}

// Whether one weight cast in `format` serves both GEMMs that read the weight (the forward along
// K, the dgrad along N): 16-bit casts, per-tensor scales and square tiles do; per-row and 1-D
// block scales run along K.
inline bool weight_cast_serves_both_layouts(NumberFormat format, const Fp8Recipe& r)
{
    return !format_info(format).is_fp8 || per_tensor_scaling(r) || square_weight_tiles(r);
}

// One entry of precision.layers: a glob over layer names ('*' matches any run of characters)
// and the formats it sets; unset formats keep what the preset (or an earlier entry) chose.
struct LayerOverride {
    std::string match;
    std::optional<NumberFormat> forward, dgrad, wgrad;
    std::optional<Fp8Scaling> scaling; // the FP8 scaling recipe for matching layers (TE allows one per module)
};

enum class GemmBackend { Auto, Emulated, Native };

struct PrecisionConfig {
    std::string preset = "fp32"; // fp32 | bf16 | fp16 | fp8-hybrid | fp8-hybrid-keep-ends
    std::vector<LayerOverride> layers;
    Fp8Recipe fp8;
    std::string loss_scaling_mode = "auto"; // auto (dynamic when any GEMM is FP16) | dynamic | static | off
    LossScalingConfig loss_scaling;         // mode filled in by resolve_loss_scaling
    GemmBackend backend = GemmBackend::Auto;
    int64_t keep_last_bf16 = 0; // the last N transformer blocks run in BF16 (the NVFP4 paper's choice)
};

std::vector<std::string> precision_preset_names();
bool glob_match(const std::string& pattern, const std::string& name);

// Formats for one layer: `blocks.N.attn.qkv|proj`, `blocks.N.mlp.fc1|fc2`, `lm_head`, or
// `blocks.N.attn.sdpa` for the attention score and value products.
GemmFormats resolve_layer_formats(const PrecisionConfig& config, const std::string& layer_name, int64_t n_layer);
// precision.fp8 with the scaling recipe of the last matching precision.layers entry, if any.
Fp8Recipe resolve_layer_recipe(const PrecisionConfig& config, const std::string& layer_name);
// The GEMM-bearing layers of an n_layer model in forward order (the names above).
std::vector<std::string> gemm_layer_names(int64_t n_layer);
LossScalingConfig resolve_loss_scaling(const PrecisionConfig& config, bool any_fp16_gemm);

// True when a precision.layers entry asks for an FP8 format or an FP8 scaling recipe: a recipe
// is then named with its scaling even under a non-FP8 preset.
bool overrides_use_fp8(const PrecisionConfig& config);

// The formats a layer's GEMMs compute in: under nvfp4 and mxfp4 a GEMM named FP8 takes E2M1
// elements whatever its FP8 format.
GemmFormats formats_as_computed(const GemmFormats& f, Fp8Scaling scaling);

// The scaling recipes that the FP8 layers of an n_layer model use (resolve_layer_recipe of each
// layer with an FP8 GEMM), each once, in fp8_scalings() order. Empty when no GEMM is FP8.
std::vector<Fp8Scaling> fp8_layer_scalings(const PrecisionConfig& config, int64_t n_layer);
// Which of nvfp4's parts some nvfp4 layer's casts take (block_scaling.cpp): the Hadamard
// transform the wgrad GEMM's operands, stochastic rounding the gradients (dgrad and wgrad
// GEMMs), 2D blocks a Linear's weight (forward and dgrad GEMMs; attention has no weight).
struct Nvfp4PartsRead {
    bool rht = false, stochastic_rounding = false, weight_2d = false;
};
Nvfp4PartsRead nvfp4_parts_read(const PrecisionConfig& config, int64_t n_layer);
// `config` with the recipe settings that no layer reads put back to their defaults: all of
// precision.fp8 and every precision.layers scaling when no GEMM is FP8; else a layers entry's
// scaling that no FP8 layer takes (an entry left empty goes), and the settings of recipes
// that no FP8 layer uses (nvfp4's three switches, fp8-block's power-of-two scales, the amax
// history, the margin and saturation under the block recipes, ...). Configs equal after
// this train the same arithmetic (unread_settings.h compares them).
PrecisionConfig recipe_as_read(const PrecisionConfig& config, int64_t n_layer);

const char* fp8_scaling_name(Fp8Scaling scaling);
std::vector<Fp8Scaling> fp8_scalings(); // every recipe, in the order the GUI lists them
// "delayed, current, ...", for messages: every recipe, or those given.
std::string fp8_scaling_names_joined(const std::vector<Fp8Scaling>& scalings = fp8_scalings());
std::optional<Fp8Scaling> parse_fp8_scaling(const std::string& name);

} // namespace mantissa
