// SPDX-License-Identifier: GPL-3.0-or-later
#include "unread_settings.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace mantissa {
namespace {

// The keys that spell the layers' formats (and a layer's recipe), which settings_as_read
// compares as the layers compute them.
bool spells_layer_formats(const std::string& key)
{
    return key == "precision" || key.starts_with("precision.preset") || key.starts_with("precision.layers") ||
           key.starts_with("precision.keep_last_bf16");
}

// nvfp4's Hadamard transform mixes the wgrad GEMM's inputs along their tokens, 16 at a time
// (quantize_block_recipe): a micro-batch whose token count is no multiple of 16 goes without.
int64_t micro_batch_tokens(const ProjectConfig& config)
{
    return config.training.batch_size * config.model.context_length;
}
bool rht_has_its_groups(const ProjectConfig& config) { return micro_batch_tokens(config) % 16 == 0; }

std::string why_no_rht(const ProjectConfig& config)
{
    return "a micro-batch of " + std::to_string(micro_batch_tokens(config)) + " tokens (training.batch_size " +
           std::to_string(config.training.batch_size) + " x model.context_length " +
           std::to_string(config.model.context_length) + ") is no multiple of 16, the transform's length";
}

// The data keys a kind reads; the others are ignored (docs/PROJECT_FORMAT.md).
bool data_key_read(DataKind kind, const std::string& key)
{
    switch (kind) {
    case DataKind::Text: return key == "data.path" || key == "data.tokenizer" || key == "data.val_fraction";
    case DataKind::TokenBin: return key == "data.dir" || key == "data.vocab_size";
    case DataKind::SyntheticAddition:
        return key == "data.val_fraction" || key == "data.digits" || key == "data.examples";
    }
    return true;
}

const char* kind_word(DataKind kind)
{
    return kind == DataKind::Text ? "text" : kind == DataKind::TokenBin ? "bin" : "synthetic-addition";
}

// The sampling keys are read only where samples are drawn.
bool sampling_key(const std::string& key)
{
    return key == "eval.sample_temperature" || key == "eval.sample_top_k";
}

} // namespace

std::vector<UnreadSetting> recipe_settings_read_by_no_layer(const ProjectConfig& config)
{
    // Each setting moved to another value that the project accepts; none moves a layer's recipe.
    using Flip = void (*)(Fp8Recipe&);
    static const std::pair<const char*, Flip> kFlips[] = {
        {"precision.fp8.scaling",
         [](Fp8Recipe& r) {
             r.scaling = r.scaling == Fp8Scaling::Current ? Fp8Scaling::Delayed : Fp8Scaling::Current;
         }},
        {"precision.fp8.amax_history_length",
         [](Fp8Recipe& r) { r.amax_history_length = r.amax_history_length == 1 ? 2 : 1; }},
        {"precision.fp8.amax_compute_algo", [](Fp8Recipe& r) { r.amax_use_max = !r.amax_use_max; }},
        {"precision.fp8.margin", [](Fp8Recipe& r) { r.margin = r.margin == 0 ? 1 : 0; }},
        {"precision.fp8.saturate", [](Fp8Recipe& r) { r.saturate = !r.saturate; }},
        {"precision.fp8.rowwise_power_of_two", [](Fp8Recipe& r) { r.rowwise_power_of_two = !r.rowwise_power_of_two; }},
        {"precision.fp8.mx_scale_rounding", [](Fp8Recipe& r) { r.mx_round_scale_up = !r.mx_round_scale_up; }},
        {"precision.fp8.outlier_rms_multiple",
         [](Fp8Recipe& r) { r.outlier_rms_multiple = r.outlier_rms_multiple == 0.0 ? 4.0 : 0.0; }},
        {"precision.fp8.block_scales", [](Fp8Recipe& r) { r.block_power_of_two = !r.block_power_of_two; }},
        {"precision.nvfp4.rht", [](Fp8Recipe& r) { r.nvfp4_rht = !r.nvfp4_rht; }},
        {"precision.nvfp4.stochastic_rounding",
         [](Fp8Recipe& r) { r.nvfp4_stochastic_rounding = !r.nvfp4_stochastic_rounding; }},
        {"precision.nvfp4.weight_2d", [](Fp8Recipe& r) { r.nvfp4_weight_2d = !r.nvfp4_weight_2d; }},
    };
    std::vector<UnreadSetting> out;
    const std::string read = settings_as_read(config);
    for (const auto& [key, flip] : kFlips) {
        ProjectConfig other = config;
        flip(other.precision.fp8);
        if (settings_as_read(other) == read) out.push_back({key, why_the_same_run(config, key)});
    }
    return out;
}

std::vector<std::string> project_settings_read_by_no_layer(const ProjectConfig& config,
                                                           const std::vector<Override>& overrides)
{
    std::vector<std::string> notes;
    const auto unread = recipe_settings_read_by_no_layer(config);
    if (unread.empty()) return notes;
    const auto mine = nlohmann::json::parse(to_json_text(config));
    const auto defaults = nlohmann::json::parse(to_json_text(ProjectConfig{}));
    for (const auto& u : unread) {
        const bool overridden = std::any_of(overrides.begin(), overrides.end(), [&](const Override& o) {
            return u.key == o.first || u.key.starts_with(o.first + ".");
        });
        std::string pointer = "/" + u.key;
        std::replace(pointer.begin(), pointer.end(), '.', '/');
        const nlohmann::json::json_pointer at(pointer);
        if (overridden || mine.at(at) == defaults.at(at)) continue;
        const auto& value = mine.at(at);
        notes.push_back(u.key + "=" + (value.is_string() ? value.get<std::string>() : value.dump()) +
                        ", as the project sets it, changes nothing this run computes as it starts: " + u.why);
    }
    return notes;
}

std::vector<std::string> recipe_parts_left_out(const ProjectConfig& config)
{
    std::vector<std::string> out;
    // Only where some nvfp4 layer's wgrad GEMM would take it: without one, no token count matters.
    if (config.precision.fp8.nvfp4_rht && nvfp4_parts_read(config.precision, config.model.n_layer).rht &&
        !rht_has_its_groups(config))
        out.push_back("nvfp4's random Hadamard transform is not applied: " + why_no_rht(config));
    return out;
}

std::string settings_as_read(const ProjectConfig& config)
{
    const int64_t n = config.model.n_layer;
    ProjectConfig read = config;
    read.precision = recipe_as_read(config.precision, n);
    if (!rht_has_its_groups(config)) read.precision.fp8.nvfp4_rht = Fp8Recipe{}.nvfp4_rht;
    // The other data kinds' keys, and sampling's where no sample is drawn: a sweep over
    // data.path under synthetic data trained the same run once for each value.
    const DataConfig data_defaults;
    const DataKind kind = config.data.kind;
    if (!data_key_read(kind, "data.path")) read.data.path = data_defaults.path;
    if (!data_key_read(kind, "data.tokenizer")) read.data.tokenizer = data_defaults.tokenizer;
    if (!data_key_read(kind, "data.val_fraction")) read.data.val_fraction = data_defaults.val_fraction;
    if (!data_key_read(kind, "data.dir")) read.data.dir = data_defaults.dir;
    if (!data_key_read(kind, "data.vocab_size")) read.data.vocab_size = data_defaults.vocab_size;
    if (!data_key_read(kind, "data.digits")) read.data.digits = data_defaults.digits;
    if (!data_key_read(kind, "data.examples")) read.data.examples = data_defaults.examples;
    if (config.eval.sample_tokens == 0) {
        read.eval.sample_temperature = EvalConfig{}.sample_temperature;
        read.eval.sample_top_k = EvalConfig{}.sample_top_k;
    }
    // The layers as they compute, in place of the preset, the layers entries and keep_last_bf16
    // that spell them: fp8-hybrid and fp8-e4m3 under nvfp4 (E2M1 either way), or a one-block
    // model's fp8-hybrid-keep-ends and bf16, train the same run.
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& name : gemm_layer_names(n)) {
        const GemmFormats f = resolve_layer_formats(read.precision, name, n);
        const Fp8Scaling s = resolve_layer_recipe(read.precision, name).scaling;
        layers.push_back({name, formats_as_computed(f, s).describe(), f.any_fp8() ? fp8_scaling_name(s) : ""});
    }
    auto j = nlohmann::json::parse(to_json_text(read));
    auto& p = j["precision"];
    for (const char* spelled : {"preset", "layers", "keep_last_bf16"}) p.erase(spelled);
    p["fp8"].erase("scaling"); // each FP8 layer's, above
    p["layers_as_computed"] = std::move(layers);
    return j.dump();
}

std::string why_the_same_run(const ProjectConfig& config, const std::string& key)
{
    if (key.starts_with("data.") && key != "data.kind" && !data_key_read(config.data.kind, key))
        return std::string("data.kind is ") + kind_word(config.data.kind) + ", which does not read " + key;
    if (sampling_key(key) && config.eval.sample_tokens == 0)
        return "eval.sample_tokens is 0: no sample is drawn, so nothing reads " + key;
    const auto scalings = fp8_layer_scalings(config.precision, config.model.n_layer);
    if (spells_layer_formats(key)) {
        const bool fp4 = std::any_of(scalings.begin(), scalings.end(),
                                     [](Fp8Scaling s) { return s == Fp8Scaling::NvFp4 || s == Fp8Scaling::MxFp4; });
        return std::string("every layer computes in the same formats") +
               (scalings.empty() ? ", none in FP8," : " and with the same recipe") + " either way" +
               (fp4 ? " (under nvfp4 and mxfp4 a GEMM named FP8 takes E2M1 elements whatever its FP8 format)" : "");
    }
    const bool nvfp4 = std::find(scalings.begin(), scalings.end(), Fp8Scaling::NvFp4) != scalings.end();
    const Nvfp4PartsRead parts = nvfp4_parts_read(config.precision, config.model.n_layer);
    if (key == "precision.nvfp4.rht" && nvfp4 && !parts.rht)
        return "no nvfp4 layer computes its wgrad GEMM in FP4, whose operands alone take the Hadamard transform";
    if (key == "precision.nvfp4.rht" && nvfp4 && !rht_has_its_groups(config))
        return "no GEMM takes nvfp4's Hadamard transform: " + why_no_rht(config);
    if (key == "precision.nvfp4.stochastic_rounding" && nvfp4 && !parts.stochastic_rounding)
        return "no nvfp4 layer computes its dgrad or wgrad GEMM in FP4, and only gradients are rounded stochastically";
    if (key == "precision.nvfp4.weight_2d" && nvfp4 && !parts.weight_2d)
        return "no nvfp4 linear layer computes its forward or dgrad GEMM in FP4, the GEMMs that take its weight";
    if (key == "precision.fp8.scaling" && !scalings.empty())
        return "every FP8 layer takes its recipe from its own precision.layers entry";
    if (scalings.empty())
        return "no GEMM computes in FP8 under precision.preset=" + config.precision.preset +
               (config.precision.layers.empty() ? "" : " and its precision.layers") +
               ", so no layer reads the FP8 recipe; set an FP8 preset (precision.preset=fp8-hybrid) "
               "or a precision.layers entry";
    return "the FP8 layers scale with " + fp8_scaling_names_joined(scalings) + ", which " +
           (scalings.size() == 1 ? "does" : "do") +
           " not read " + key;
}

} // namespace mantissa
