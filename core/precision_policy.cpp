// SPDX-License-Identifier: GPL-3.0-or-later
#include "precision_policy.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace mantissa {

bool GemmFormats::all_fp32() const
{
    return forward == NumberFormat::FP32 && dgrad == NumberFormat::FP32 && wgrad == NumberFormat::FP32;
}

bool GemmFormats::any_fp8() const
{
    return format_info(forward).is_fp8 || format_info(dgrad).is_fp8 || format_info(wgrad).is_fp8;
}

NumberFormat saved_operand_format(NumberFormat gemm_format)
{
    return format_info(gemm_format).is_fp8 ? NumberFormat::E4M3 : gemm_format;
}

bool uniform_16bit(const GemmFormats& f)
{
    return (f.forward == NumberFormat::BF16 || f.forward == NumberFormat::FP16) && f.dgrad == f.forward &&
           f.wgrad == f.forward;
}

bool runs_native_linear(const GemmFormats& f, const Fp8Recipe& recipe)
{
    // FP8 codes under per-tensor or per-row scales, without the outlier split (whose sum no
    // FP8 GEMM can take).
    const bool fp8_native = (per_tensor_scaling(recipe) || recipe.scaling == Fp8Scaling::PerRow) &&
                            recipe.outlier_rms_multiple == 0.0;
    const auto runs_natively = [&](NumberFormat g) {
        return g == NumberFormat::FP32 || g == NumberFormat::BF16 || g == NumberFormat::FP16 ||
               (format_info(g).is_fp8 && fp8_native);
    };
    return runs_natively(f.forward) && runs_natively(f.dgrad) && runs_natively(f.wgrad);
}

bool blockwise_codes_fit(const GemmFormats& f, const Fp8Recipe& recipe, int64_t rows, int64_t in_features,
                         int64_t out_features)
{
    const auto e4m3 = NumberFormat::E4M3;
    if (recipe.scaling != Fp8Scaling::Block128 || recipe.outlier_rms_multiple != 0.0 || f.forward != e4m3 ||
        f.dgrad != e4m3 || f.wgrad != e4m3)
        return false;
    // Whole blocks along every side, and two of them: cuBLAS's blockwise kernels need both.
    const auto blocks = [](int64_t d) { return d % 128 == 0 && d >= 256; };
    return blocks(rows) && blocks(in_features) && blocks(out_features);
}

LinearRoute linear_route(const GemmFormats& f, const Fp8Recipe& recipe, bool native_executor, int64_t rows,
                         int64_t in_features, int64_t out_features)
{
    if (f.all_fp32()) return LinearRoute::Fp32;
    if (!native_executor) return LinearRoute::Emulated;
    if (uniform_16bit(f)) return LinearRoute::Autocast16;
    if (runs_native_linear(f, recipe)) return LinearRoute::Native;
    if (blockwise_codes_fit(f, recipe, rows, in_features, out_features)) return LinearRoute::BlockwiseCodes;
    return LinearRoute::Emulated;
}

std::string GemmFormats::describe() const
{
    return std::string(format_name(forward)) + "/" + format_name(dgrad) + "/" + format_name(wgrad);
}

std::vector<std::string> precision_preset_names()
{
    return {"fp32", "bf16", "fp16", "fp8-hybrid", "fp8-hybrid-keep-ends", "fp8-e4m3"};
}

bool glob_match(const std::string& pattern, const std::string& name)
{
    // Iterative wildcard match with backtracking to the last '*'.
    size_t p = 0, n = 0, star = std::string::npos, resume = 0;
    while (n < name.size()) {
        if (p < pattern.size() && pattern[p] == '*') {
            star = p++;
            resume = n;
        } else if (p < pattern.size() && pattern[p] == name[n]) {
            ++p;
            ++n;
        } else if (star != std::string::npos) {
            p = star + 1;
            n = ++resume;
        } else {
            return false;
        }
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}

namespace {

bool is_attention_core(const std::string& layer) { return layer.size() > 5 && layer.ends_with(".attn.sdpa"); }

bool is_end_layer(const std::string& layer, int64_t n_layer)
{
    return layer == "lm_head" || layer.rfind("blocks.0.", 0) == 0 ||
           layer.rfind("blocks." + std::to_string(n_layer - 1) + ".", 0) == 0;
}

GemmFormats preset_formats(const std::string& preset, const std::string& layer, int64_t n_layer)
{
    if (preset == "fp32") return GemmFormats::all(NumberFormat::FP32);
    if (preset == "bf16") return GemmFormats::all(NumberFormat::BF16);
    if (preset == "fp16") return GemmFormats::all(NumberFormat::FP16);
    if (preset == "fp8-e4m3") { // TE's Float8BlockScaling default: E4M3 for every tensor
        if (is_attention_core(layer)) return GemmFormats::all(NumberFormat::BF16);
        return GemmFormats::all(NumberFormat::E4M3);
    }
    if (preset == "fp8-hybrid" || preset == "fp8-hybrid-keep-ends") {
        // TE runs dot-product attention in BF16 under its FP8 recipes.
        if (is_attention_core(layer)) return GemmFormats::all(NumberFormat::BF16);
        if (preset == "fp8-hybrid-keep-ends" && is_end_layer(layer, n_layer))
            return GemmFormats::all(NumberFormat::BF16);
        return {NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2};
    }
    throw std::invalid_argument("unknown precision preset '" + preset + "'");
}

// blocks.N.* with N among the last `count` of n_layer blocks.
bool is_last_block(const std::string& layer, int64_t n_layer, int64_t count)
{
    for (int64_t i = std::max<int64_t>(0, n_layer - count); i < n_layer; ++i)
        if (layer.rfind("blocks." + std::to_string(i) + ".", 0) == 0) return true;
    return false;
}

} // namespace

GemmFormats resolve_layer_formats(const PrecisionConfig& config, const std::string& layer_name, int64_t n_layer)
{
    GemmFormats f = preset_formats(config.preset, layer_name, n_layer);
    if (is_last_block(layer_name, n_layer, config.keep_last_bf16)) f = GemmFormats::all(NumberFormat::BF16);
    for (const auto& o : config.layers) {
        if (!glob_match(o.match, layer_name)) continue;
        if (o.forward) f.forward = *o.forward;
        if (o.dgrad) f.dgrad = *o.dgrad;
        if (o.wgrad) f.wgrad = *o.wgrad;
    }
    return f;
}

Fp8Recipe resolve_layer_recipe(const PrecisionConfig& config, const std::string& layer_name)
{
    Fp8Recipe recipe = config.fp8;
    for (const auto& o : config.layers)
        if (o.scaling && glob_match(o.match, layer_name)) recipe.scaling = *o.scaling;
    return recipe;
}

std::vector<std::string> gemm_layer_names(int64_t n_layer)
{
    std::vector<std::string> names;
    for (int64_t i = 0; i < n_layer; ++i) {
        const std::string b = "blocks." + std::to_string(i);
        for (const char* part : {".attn.qkv", ".attn.sdpa", ".attn.proj", ".mlp.fc1", ".mlp.fc2"}) names.push_back(b + part);
    }
    names.push_back("lm_head");
    return names;
}

LossScalingConfig resolve_loss_scaling(const PrecisionConfig& config, bool any_fp16_gemm)
{
    LossScalingConfig c = config.loss_scaling;
    const auto& m = config.loss_scaling_mode;
    if (m == "dynamic" || (m == "auto" && any_fp16_gemm)) c.mode = LossScalingMode::Dynamic;
    else if (m == "static") c.mode = LossScalingMode::Static;
    else c.mode = LossScalingMode::Off;
    return c;
}

bool overrides_use_fp8(const PrecisionConfig& config)
{
    const auto fp8 = [](const std::optional<NumberFormat>& f) { return f && format_info(*f).is_fp8; };
    for (const auto& o : config.layers)
        if (o.scaling || fp8(o.forward) || fp8(o.dgrad) || fp8(o.wgrad)) return true;
    return false;
}

GemmFormats formats_as_computed(const GemmFormats& f, Fp8Scaling scaling)
{
    if (scaling != Fp8Scaling::NvFp4 && scaling != Fp8Scaling::MxFp4) return f;
    const auto fp4 = [](NumberFormat n) { return format_info(n).is_fp8 ? NumberFormat::E2M1 : n; };
    return {fp4(f.forward), fp4(f.dgrad), fp4(f.wgrad)};
}

namespace {

// The precision.layers entry whose scaling a layer takes (the last matching one), or -1 for the
// project's precision.fp8.scaling.
int scaling_entry_of(const PrecisionConfig& config, const std::string& layer_name)
{
    int entry = -1;
    for (size_t i = 0; i < config.layers.size(); ++i)
        if (config.layers[i].scaling && glob_match(config.layers[i].match, layer_name)) entry = static_cast<int>(i);
    return entry;
}

} // namespace

std::vector<Fp8Scaling> fp8_layer_scalings(const PrecisionConfig& config, int64_t n_layer)
{
    std::vector<bool> used(fp8_scalings().size(), false);
    for (const auto& name : gemm_layer_names(n_layer))
        if (resolve_layer_formats(config, name, n_layer).any_fp8())
            used[static_cast<size_t>(resolve_layer_recipe(config, name).scaling)] = true;
    std::vector<Fp8Scaling> scalings;
    for (Fp8Scaling s : fp8_scalings())
        if (used[static_cast<size_t>(s)]) scalings.push_back(s);
    return scalings;
}

Nvfp4PartsRead nvfp4_parts_read(const PrecisionConfig& config, int64_t n_layer)
{
    Nvfp4PartsRead read;
    const auto fp4 = [](NumberFormat x) { return format_info(x).is_fp8; }; // E2M1 under nvfp4
    for (const auto& name : gemm_layer_names(n_layer)) {
        const GemmFormats f = resolve_layer_formats(config, name, n_layer);
        if (!f.any_fp8() || resolve_layer_recipe(config, name).scaling != Fp8Scaling::NvFp4) continue;
        read.rht |= fp4(f.wgrad);
        read.stochastic_rounding |= fp4(f.dgrad) || fp4(f.wgrad);
        read.weight_2d |= !name.ends_with(".sdpa") && (fp4(f.forward) || fp4(f.dgrad));
    }
    return read;
}

PrecisionConfig recipe_as_read(const PrecisionConfig& config, int64_t n_layer)
{
    PrecisionConfig read = config;
    std::vector<bool> entry_read(config.layers.size(), false);
    bool project_scaling_read = false;
    for (const auto& name : gemm_layer_names(n_layer)) {
        if (!resolve_layer_formats(config, name, n_layer).any_fp8()) continue;
        const int entry = scaling_entry_of(config, name);
        if (entry < 0) project_scaling_read = true;
        else entry_read[static_cast<size_t>(entry)] = true;
    }
    for (size_t i = 0; i < read.layers.size(); ++i)
        if (!entry_read[i]) read.layers[i].scaling.reset();
    // An entry left with nothing to set sets nothing.
    std::erase_if(read.layers, [](const LayerOverride& o) { return !o.forward && !o.dgrad && !o.wgrad && !o.scaling; });
    const auto scalings = fp8_layer_scalings(config, n_layer);
    const Fp8Recipe defaults;
    if (scalings.empty()) {
        read.fp8 = defaults;
        return read;
    }
    const auto uses = [&](Fp8Scaling s) { return std::find(scalings.begin(), scalings.end(), s) != scalings.end(); };
    Fp8Recipe& r = read.fp8;
    if (!project_scaling_read) r.scaling = defaults.scaling;
    // Only the fields whose readers are known are reset (the outlier split is every recipe's).
    // The margin and saturation are those of the scales taken from an amax (per tensor, per
    // row): the block recipes take theirs from each block and saturate as their formats say.
    if (!uses(Fp8Scaling::Delayed) && !uses(Fp8Scaling::Current) && !uses(Fp8Scaling::PerRow)) {
        r.margin = defaults.margin;
        r.saturate = defaults.saturate;
    }
    if (!uses(Fp8Scaling::Delayed)) {
        r.amax_history_length = defaults.amax_history_length;
        r.amax_use_max = defaults.amax_use_max;
    }
    if (!uses(Fp8Scaling::PerRow)) r.rowwise_power_of_two = defaults.rowwise_power_of_two;
    if (!uses(Fp8Scaling::Block32) && !uses(Fp8Scaling::MxFp4)) r.mx_round_scale_up = defaults.mx_round_scale_up;
    if (!uses(Fp8Scaling::Block128)) r.block_power_of_two = defaults.block_power_of_two;
    // A layer with only its forward GEMM in FP4 trained bit-identically whatever rht and
    // stochastic_rounding said, and neither was shown as unread.
    const Nvfp4PartsRead parts = nvfp4_parts_read(config, n_layer);
    if (!parts.rht) r.nvfp4_rht = defaults.nvfp4_rht;
    if (!parts.stochastic_rounding) r.nvfp4_stochastic_rounding = defaults.nvfp4_stochastic_rounding;
    if (!parts.weight_2d) r.nvfp4_weight_2d = defaults.nvfp4_weight_2d;
    return read;
}

const char* fp8_scaling_name(Fp8Scaling scaling)
{
    switch (scaling) {
    case Fp8Scaling::Delayed: return "delayed";
    case Fp8Scaling::Current: return "current";
    case Fp8Scaling::PerRow: return "rowwise";
    case Fp8Scaling::Block32: return "mxfp8";
    case Fp8Scaling::Block128: return "fp8-block";
    case Fp8Scaling::NvFp4: return "nvfp4";
    case Fp8Scaling::MxFp4: return "mxfp4";
    }
    return "?";
}

std::optional<Fp8Scaling> parse_fp8_scaling(const std::string& name)
{
    for (auto s : fp8_scalings())
        if (name == fp8_scaling_name(s)) return s;
    return std::nullopt;
}

std::vector<Fp8Scaling> fp8_scalings()
{
    return {Fp8Scaling::Delayed,  Fp8Scaling::Current, Fp8Scaling::PerRow, Fp8Scaling::Block32,
            Fp8Scaling::Block128, Fp8Scaling::NvFp4,   Fp8Scaling::MxFp4};
}

std::string fp8_scaling_names_joined(const std::vector<Fp8Scaling>& scalings)
{
    std::string out;
    for (auto s : scalings) out += (out.empty() ? "" : ", ") + std::string(fp8_scaling_name(s));
    return out;
}

} // namespace mantissa
