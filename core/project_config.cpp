// SPDX-License-Identifier: GPL-3.0-or-later
#include "project_config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <cctype>
#include <string_view>

#include <nlohmann/json.hpp>

#include "memory_model.h"

namespace mantissa {
namespace {

// A key as a message names it: one of a megabyte (a generated file gone wrong) made a message
// of a megabyte, and a window that showed it in one unbreakable line grew to gigabytes.
std::string key_for_message(const std::string& key)
{
    constexpr size_t kLongest = 120, kShown = 60;
    if (key.size() <= kLongest) return key;
    size_t cut = kShown;
    while (cut > 0 && (static_cast<unsigned char>(key[cut]) & 0xC0) == 0x80) --cut; // whole UTF-8 characters
    return key.substr(0, cut) + "... (" + std::to_string(key.size()) + " bytes)";
}

using nlohmann::json;

std::string type_word(const json& j);

const char* data_kind_name(DataKind kind)
{
    switch (kind) {
    case DataKind::SyntheticAddition: return "synthetic-addition";
    case DataKind::Text: return "text";
    case DataKind::TokenBin: return "bin";
    }
    return "?";
}

const char* backend_name(GemmBackend b)
{
    switch (b) {
    case GemmBackend::Auto: return "auto";
    case GemmBackend::Emulated: return "emulated";
    case GemmBackend::Native: return "native";
    }
    return "?";
}

json layers_to_json(const std::vector<LayerOverride>& layers)
{
    json out = json::array();
    for (const auto& o : layers) {
        json entry = {{"match", o.match}};
        if (o.forward) entry["forward"] = format_name(*o.forward);
        if (o.dgrad) entry["dgrad"] = format_name(*o.dgrad);
        if (o.wgrad) entry["wgrad"] = format_name(*o.wgrad);
        if (o.scaling) entry["scaling"] = fp8_scaling_name(*o.scaling);
        out.push_back(entry);
    }
    return out;
}

std::string join(const std::vector<std::string>& words)
{
    std::string out;
    for (size_t i = 0; i < words.size(); ++i) out += (i ? ", " : "") + words[i];
    return out;
}

NumberFormat format_at(const json& value, const std::string& key)
{
    if (!value.is_string()) throw ConfigError(key + ": expected a string, got " + type_word(value));
    const auto f = parse_number_format(value.get<std::string>());
    if (!f || !format_info(*f).gemm_operand) // e2m1/e8m0 name telemetry, not a GEMM's choice
        throw ConfigError(key + ": '" + value.get<std::string>() + "' is not one of " + number_format_names_joined());
    return *f;
}

// precision.layers is a list, so the defaults cannot describe its entries: check them here.
std::vector<LayerOverride> layers_from_json(const json& list)
{
    std::vector<LayerOverride> out;
    for (size_t i = 0; i < list.size(); ++i) {
        const std::string at = "precision.layers[" + std::to_string(i) + "]";
        const json& e = list[i];
        if (!e.is_object()) throw ConfigError(at + ": expected an object, got " + type_word(e));
        LayerOverride o;
        // "format" sets the three GEMMs and a GEMM's own key wins over it, whatever the order:
        // taken in the object's (alphabetical) order, it overwrote dgrad but not forward or wgrad.
        if (e.contains("format")) o.forward = o.dgrad = o.wgrad = format_at(e["format"], at + ".format");
        for (const auto& [key, value] : e.items()) {
            const std::string k = at + "." + key;
            if (key == "match") {
                if (!value.is_string() || value.get<std::string>().empty())
                    throw ConfigError(k + ": expected a non-empty layer-name pattern");
                o.match = value;
            } else if (key == "format") {
                // read above
            } else if (key == "forward") {
                o.forward = format_at(value, k);
            } else if (key == "dgrad") {
                o.dgrad = format_at(value, k);
            } else if (key == "wgrad") {
                o.wgrad = format_at(value, k);
            } else if (key == "scaling") {
                const auto scaling = value.is_string() ? parse_fp8_scaling(value.get<std::string>()) : std::nullopt;
                if (!scaling) throw ConfigError(k + ": expected one of " + fp8_scaling_names_joined());
                o.scaling = scaling;
            } else {
                throw ConfigError(key_for_message(k) +
                                  ": unknown key (expected match, format, forward, dgrad, wgrad, scaling)");
            }
        }
        if (o.match.empty()) throw ConfigError(at + ".match: is required");
        out.push_back(o);
    }
    return out;
}

json watchers_to_json(const WatcherConfig& w)
{
    json actions = json::object();
    for (const auto& name : watcher_names()) {
        const auto it = w.actions.find(name);
        actions[name] = watch_action_name(it == w.actions.end() ? WatchAction::None : it->second);
    }
    return {{"loss_spike_sigma", w.loss_spike_sigma},
            {"grad_spike_sigma", w.grad_spike_sigma},
            {"spike_window", w.spike_window},
            {"loss_scale_floor", w.loss_scale_floor},
            {"backoff_limit", w.backoff_limit},
            {"backoff_window", w.backoff_window},
            {"attention_logit_max", w.attention_logit_max},
            {"log_z_max", w.log_z_max},
            {"fp8_underflow_max", w.fp8_underflow_max},
            {"fp4_underflow_max", w.fp4_underflow_max},
            {"cooldown_steps", w.cooldown_steps},
            {"actions", actions}};
}

WatcherConfig watchers_from_json(const json& j)
{
    WatcherConfig w;
    w.loss_spike_sigma = j["loss_spike_sigma"];
    w.grad_spike_sigma = j["grad_spike_sigma"];
    w.spike_window = j["spike_window"];
    w.loss_scale_floor = j["loss_scale_floor"];
    w.backoff_limit = j["backoff_limit"];
    w.backoff_window = j["backoff_window"];
    w.attention_logit_max = j["attention_logit_max"];
    w.log_z_max = j["log_z_max"];
    w.fp8_underflow_max = j["fp8_underflow_max"];
    w.fp4_underflow_max = j["fp4_underflow_max"];
    w.cooldown_steps = j["cooldown_steps"];
    for (const auto& [name, value] : j["actions"].items()) {
        const std::string a = value;
        const std::string key = "telemetry.watchers.actions." + name;
        if (a == "none") w.actions[name] = WatchAction::None;
        else if (a == "pause") w.actions[name] = WatchAction::Pause;
        else if (a == "bf16") w.actions[name] = WatchAction::SwitchToBf16;
        else throw ConfigError(key + ": '" + a + "' is not one of none, pause, bf16");
    }
    return w;
}

// The defaults double as the schema: a user key is valid only if the defaults have it,
// and its JSON type must match the default's.
json to_json(const ProjectConfig& c)
{
    return json{
        {"name", c.name},
        {"model",
         {{"n_layer", c.model.n_layer},
          {"n_head", c.model.n_head},
          {"n_embd", c.model.n_embd},
          {"context_length", c.model.context_length},
          {"bias", c.model.bias},
          {"dropout", c.model.dropout}}},
        {"data",
         {{"kind", data_kind_name(c.data.kind)},
          {"path", c.data.path},
          {"tokenizer", c.data.tokenizer},
          {"val_fraction", c.data.val_fraction},
          {"dir", c.data.dir},
          {"vocab_size", c.data.vocab_size},
          {"digits", c.data.digits},
          {"examples", c.data.examples}}},
        {"optimizer",
         {{"learning_rate", c.optimizer.learning_rate},
          {"min_learning_rate", c.optimizer.min_learning_rate},
          {"warmup_steps", c.optimizer.warmup_steps},
          {"decay_steps", c.optimizer.decay_steps},
          {"beta1", c.optimizer.beta1},
          {"beta2", c.optimizer.beta2},
          {"eps", c.optimizer.eps},
          {"weight_decay", c.optimizer.weight_decay},
          {"grad_clip", c.optimizer.grad_clip}}},
        {"training",
         {{"steps", c.training.steps},
          {"batch_size", c.training.batch_size},
          {"grad_accum", c.training.grad_accum},
          {"seed", c.training.seed},
          {"threads", c.training.threads},
          {"device", c.training.device},
          {"deterministic", c.training.deterministic},
          {"checkpoint_interval", c.training.checkpoint_interval},
          {"checkpoint_dir", c.training.checkpoint_dir},
          {"checkpoint_keep", c.training.checkpoint_keep},
          {"collective_timeout_s", c.training.collective_timeout_s},
          {"dp_bucket_mb", c.training.dp_bucket_mb}}},
        {"eval",
         {{"interval", c.eval.interval},
          {"batches", c.eval.batches},
          {"sample_tokens", c.eval.sample_tokens},
          {"sample_temperature", c.eval.sample_temperature},
          {"sample_top_k", c.eval.sample_top_k}}},
        {"precision",
         {{"preset", c.precision.preset},
          {"layers", layers_to_json(c.precision.layers)},
          {"fp8",
           {{"scaling", fp8_scaling_name(c.precision.fp8.scaling)},
            {"amax_history_length", c.precision.fp8.amax_history_length},
            {"amax_compute_algo", c.precision.fp8.amax_use_max ? "max" : "most_recent"},
            {"margin", c.precision.fp8.margin},
            {"saturate", c.precision.fp8.saturate},
            {"rowwise_power_of_two", c.precision.fp8.rowwise_power_of_two},
            {"mx_scale_rounding", c.precision.fp8.mx_round_scale_up ? "up" : "floor"},
            {"outlier_rms_multiple", c.precision.fp8.outlier_rms_multiple},
            {"block_scales", c.precision.fp8.block_power_of_two ? "power-of-two" : "fp32"}}},
          {"nvfp4",
           {{"rht", c.precision.fp8.nvfp4_rht},
            {"stochastic_rounding", c.precision.fp8.nvfp4_stochastic_rounding},
            {"weight_2d", c.precision.fp8.nvfp4_weight_2d}}},
          {"keep_last_bf16", c.precision.keep_last_bf16},
          {"loss_scaling",
           {{"mode", c.precision.loss_scaling_mode},
            {"init_scale", c.precision.loss_scaling.init_scale},
            {"growth_factor", c.precision.loss_scaling.growth_factor},
            {"backoff_factor", c.precision.loss_scaling.backoff_factor},
            {"growth_interval", c.precision.loss_scaling.growth_interval},
            {"min_scale", c.precision.loss_scaling.min_scale},
            {"hysteresis", c.precision.loss_scaling.hysteresis}}},
          {"backend", backend_name(c.precision.backend)}}},
        {"telemetry",
         {{"log_interval", c.telemetry.log_interval},
          {"interval", c.telemetry.interval},
          {"reduce_ranks", c.telemetry.reduce_ranks},
          {"watchers", watchers_to_json(c.telemetry.watchers)}}},
    };
}

std::string type_word(const json& j)
{
    if (j.is_boolean()) return "a boolean";
    if (j.is_number_integer()) return "an integer";
    if (j.is_number()) return "a number";
    if (j.is_string()) return "a string";
    if (j.is_object()) return "an object";
    if (j.is_array()) return "an array";
    return "null";
}

// JSON integers above INT64_MAX parse as unsigned; every integer key but the seed is int64_t,
// where get<int64_t>() would wrap them to negative numbers (and a misleading message).
bool fits_int64(const json& j)
{
    return !j.is_number_unsigned() || j.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
}

bool same_kind(const json& expected, const json& given)
{
    if (expected.is_number_integer()) return given.is_number_integer();
    if (expected.is_number_float()) return given.is_number(); // 1 is a fine learning rate
    return expected.type() == given.type();
}

// " (did you mean model.n_layer?)" for a key one or two edits from one that `object` has (a
// letter too many, too few, changed or two swapped), else "".
std::string did_you_mean(const json& object, const std::string& key, const std::string& prefix)
{
    // Optimal string alignment distance: Levenshtein with a swap of neighbours as one edit.
    const auto distance = [](const std::string& a, const std::string& b) {
        std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
        for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
        for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
        for (size_t i = 1; i <= a.size(); ++i)
            for (size_t j = 1; j <= b.size(); ++j) {
                d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
                if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                    d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
            }
        return d[a.size()][b.size()];
    };
    // A key of one or two letters is an edit or two from too many others to guess at.
    const size_t most = key.size() < 3 ? 0 : key.size() < 8 ? 1 : 2;
    std::string best;
    size_t best_distance = most + 1;
    if (object.is_object())
        for (const auto& [candidate, value] : object.items())
            if (const size_t d = distance(key, candidate); d < best_distance) {
                best = candidate;
                best_distance = d;
            }
    if (best.empty()) return {};
    return " (did you mean " + (prefix.empty() ? best : prefix + "." + best) + "?)";
}

// Overlays `user` onto `base` (the defaults), rejecting unknown keys and wrong types.
void merge_checked(json& base, const json& user, const std::string& prefix)
{
    if (!user.is_object())
        throw ConfigError((prefix.empty() ? std::string("project") : prefix) + ": expected an object, got " +
                          type_word(user));
    for (const auto& [key, value] : user.items()) {
        const std::string path = prefix.empty() ? key : prefix + "." + key;
        if (!base.contains(key))
            throw ConfigError(key_for_message(path) + ": unknown key" + did_you_mean(base, key, prefix));
        json& slot = base[key];
        if (slot.is_object()) {
            merge_checked(slot, value, path);
        } else if (slot.is_number_integer() && value.is_number_float() && std::isfinite(value.get<double>()) &&
                   std::floor(value.get<double>()) == value.get<double>() && std::abs(value.get<double>()) >= 0x1p63) {
            // Past 2^64 the JSON parser reads an integer as a float: "expected an integer" told
            // the user they had not written one.
            throw ConfigError(path + ": " + value.dump() + " is out of range (at most 9223372036854775807)");
        } else if (!same_kind(slot, value)) {
            throw ConfigError(path + ": expected " + type_word(slot) + ", got " + type_word(value));
        } else if (slot.is_number_integer() && !fits_int64(value)) {
            throw ConfigError(path + ": " + value.dump() + " is out of range (at most 9223372036854775807)");
        } else {
            slot = value;
        }
    }
}

json parse_checking_keys(const std::string& text); // below, with the key tracker

// Sets a dotted key in the user JSON. The value is parsed as JSON when it can be, so
// `--set training.steps=10` is an integer and `--set data.path=a.txt` a string.
void apply_override(json& user, const Override& override_)
{
    const auto& [dotted, raw] = override_;
    if (dotted.empty()) throw ConfigError("--set: empty key");
    json value;
    try {
        value = parse_checking_keys(raw);
    } catch (const ConfigError& e) { // a key given twice in an object value
        throw ConfigError(dotted + "." + e.what());
    } catch (const json::out_of_range&) { // 1e999: a number, but not one a double holds
        throw ConfigError(dotted + ": " + raw + " is too large for a number");
    } catch (const json::exception&) {
        value = raw;
    }
    // A string that is not UTF-8 would only fail later, when the run's config is stored.
    try {
        (void)value.dump();
    } catch (const json::exception&) {
        throw ConfigError(dotted + ": the value is not valid UTF-8 text");
    }
    // A path typed on the command line means "relative to where I am", not to the project file:
    // the key's own value, or a path key inside an object given whole (data={"path": ...}).
    const std::function<void(json&, const std::string&)> absolute_paths_in = [&](json& v, const std::string& at) {
        if (is_path_key(at)) {
            if (v.is_string() && !v.get<std::string>().empty())
                v = std::filesystem::absolute(v.get<std::string>()).lexically_normal().string();
        } else if (v.is_object()) {
            for (auto& [key, child] : v.items()) absolute_paths_in(child, at + "." + key);
        }
    };
    absolute_paths_in(value, dotted);
    std::stringstream parts(dotted);
    std::string part;
    std::vector<std::string> keys;
    while (std::getline(parts, part, '.')) keys.push_back(part);
    if (keys.empty()) throw ConfigError("--set: empty key");
    // getline drops an empty last part: "training.steps." would set training.steps.
    if (dotted.back() == '.') throw ConfigError("--set " + dotted + ": a key cannot end with '.'");
    json* node = &user;
    std::string at;
    for (size_t i = 0; i + 1 < keys.size(); ++i) {
        at += (i ? "." : "") + keys[i];
        json& child = (*node)[keys[i]];
        if (child.is_null()) child = json::object();
        // The file's own value is the problem: say so as the merge would have.
        if (!child.is_object()) throw ConfigError(at + ": expected an object, got " + type_word(child));
        node = &child;
    }
    (*node)[keys.back()] = value;
}

// Structural bounds (docs/PROJECT_FORMAT.md). They hold on any machine, so a stored run
// config is checked against them too; what depends on the machine is in check_fits_machine.
// Layers: a checkpoint's archive takes time quadratic in its entries (LibTorch looks each new
// key up among all before it): a 1-step run of tiny blocks with its checkpoint took 3 s at 256
// blocks, 16 s at 512, 83 s at 1024; at 4096 the checkpoint did not end in 13 minutes. GPT-3
// has 96 blocks.
constexpr int64_t kMaxLayers = 512;
constexpr int64_t kMaxGradAccum = 1024;       // micro-batches per optimizer step
constexpr int64_t kMaxEvalBatches = 10000;    // batches per validation estimate (nanoGPT: 200)
constexpr int64_t kMaxSampleTokens = 10000;   // tokens generated per evaluation, one forward pass each
constexpr int64_t kMaxAmaxHistory = 1 << 24;  // TE's default is 1024

void require(bool ok, const std::string& key, const std::string& what)
{
    if (!ok) throw ConfigError(key + ": " + what);
}

ProjectConfig from_json(const json& j)
{
    ProjectConfig c;
    c.name = j["name"].get<std::string>();
    const json& m = j["model"];
    c.model.n_layer = m["n_layer"];
    c.model.n_head = m["n_head"];
    c.model.n_embd = m["n_embd"];
    c.model.context_length = m["context_length"];
    c.model.bias = m["bias"];
    c.model.dropout = m["dropout"];

    const json& d = j["data"];
    const std::string kind = d["kind"];
    if (kind == "synthetic-addition") c.data.kind = DataKind::SyntheticAddition;
    else if (kind == "text") c.data.kind = DataKind::Text;
    else if (kind == "bin") c.data.kind = DataKind::TokenBin;
    else throw ConfigError("data.kind: '" + kind + "' is not one of synthetic-addition, text, bin");
    c.data.path = d["path"];
    c.data.tokenizer = d["tokenizer"];
    c.data.val_fraction = d["val_fraction"];
    c.data.dir = d["dir"];
    c.data.vocab_size = d["vocab_size"];
    c.data.digits = d["digits"];
    c.data.examples = d["examples"];

    const json& o = j["optimizer"];
    c.optimizer.learning_rate = o["learning_rate"];
    c.optimizer.min_learning_rate = o["min_learning_rate"];
    c.optimizer.warmup_steps = o["warmup_steps"];
    c.optimizer.decay_steps = o["decay_steps"];
    c.optimizer.beta1 = o["beta1"];
    c.optimizer.beta2 = o["beta2"];
    c.optimizer.eps = o["eps"];
    c.optimizer.weight_decay = o["weight_decay"];
    c.optimizer.grad_clip = o["grad_clip"];

    const json& t = j["training"];
    c.training.steps = t["steps"];
    c.training.batch_size = t["batch_size"];
    c.training.grad_accum = t["grad_accum"];
    if (!fits_int64(t["seed"]) || t["seed"].get<int64_t>() < 0)
        throw ConfigError("training.seed: must be >= 0 (at most 9223372036854775807)");
    c.training.seed = t["seed"];
    c.training.threads = t["threads"];
    c.training.device = t["device"];
    c.training.deterministic = t["deterministic"];
    c.training.checkpoint_interval = t["checkpoint_interval"];
    c.training.checkpoint_dir = t["checkpoint_dir"];
    c.training.checkpoint_keep = t["checkpoint_keep"];
    c.training.collective_timeout_s = t["collective_timeout_s"];
    c.training.dp_bucket_mb = t["dp_bucket_mb"];

    const json& e = j["eval"];
    c.eval.interval = e["interval"];
    c.eval.batches = e["batches"];
    c.eval.sample_tokens = e["sample_tokens"];
    c.eval.sample_temperature = e["sample_temperature"];
    c.eval.sample_top_k = e["sample_top_k"];

    const json& p = j["precision"];
    c.precision.preset = p["preset"];
    c.precision.layers = layers_from_json(p["layers"]);
    const json& f8 = p["fp8"];
    const std::string scaling = f8["scaling"];
    const auto parsed_scaling = parse_fp8_scaling(scaling);
    if (!parsed_scaling)
        throw ConfigError("precision.fp8.scaling: '" + scaling + "' is not one of " + fp8_scaling_names_joined());
    c.precision.fp8.scaling = *parsed_scaling;
    c.precision.fp8.amax_history_length = f8["amax_history_length"];
    const std::string algo = f8["amax_compute_algo"];
    if (algo != "max" && algo != "most_recent")
        throw ConfigError("precision.fp8.amax_compute_algo: '" + algo + "' is not one of max, most_recent");
    c.precision.fp8.amax_use_max = algo == "max";
    c.precision.fp8.margin = f8["margin"];
    c.precision.fp8.saturate = f8["saturate"];
    c.precision.fp8.rowwise_power_of_two = f8["rowwise_power_of_two"];
    const std::string mx = f8["mx_scale_rounding"];
    if (mx != "floor" && mx != "up")
        throw ConfigError("precision.fp8.mx_scale_rounding: '" + mx + "' is not one of floor, up");
    c.precision.fp8.mx_round_scale_up = mx == "up";
    c.precision.fp8.outlier_rms_multiple = f8["outlier_rms_multiple"];
    const std::string block_scales = f8["block_scales"];
    if (block_scales != "power-of-two" && block_scales != "fp32")
        throw ConfigError("precision.fp8.block_scales: '" + block_scales + "' is not one of power-of-two, fp32");
    c.precision.fp8.block_power_of_two = block_scales == "power-of-two";
    const json& nv = p["nvfp4"];
    c.precision.fp8.nvfp4_rht = nv["rht"];
    c.precision.fp8.nvfp4_stochastic_rounding = nv["stochastic_rounding"];
    c.precision.fp8.nvfp4_weight_2d = nv["weight_2d"];
    c.precision.keep_last_bf16 = p["keep_last_bf16"];
    const json& ls = p["loss_scaling"];
    c.precision.loss_scaling_mode = ls["mode"];
    c.precision.loss_scaling.init_scale = ls["init_scale"];
    c.precision.loss_scaling.growth_factor = ls["growth_factor"];
    c.precision.loss_scaling.backoff_factor = ls["backoff_factor"];
    c.precision.loss_scaling.growth_interval = ls["growth_interval"];
    c.precision.loss_scaling.min_scale = ls["min_scale"];
    c.precision.loss_scaling.hysteresis = ls["hysteresis"];
    const std::string backend = p["backend"];
    if (backend == "auto") c.precision.backend = GemmBackend::Auto;
    else if (backend == "emulated") c.precision.backend = GemmBackend::Emulated;
    else if (backend == "native") c.precision.backend = GemmBackend::Native;
    else throw ConfigError("precision.backend: '" + backend + "' is not one of auto, emulated, native");
    c.telemetry.log_interval = j["telemetry"]["log_interval"];
    c.telemetry.interval = j["telemetry"]["interval"];
    c.telemetry.reduce_ranks = j["telemetry"]["reduce_ranks"];
    c.telemetry.watchers = watchers_from_json(j["telemetry"]["watchers"]);
    return c;
}

// `stored`: a run's saved settings read back, checked as they were when the run was made.
void validate(const ProjectConfig& c, bool stored = false)
{
    // A run takes its project's name: one with a NUL was stored whole but listed cut at the NUL,
    // one of digits became a run that `show 1` could not reach. A stored run's name stays
    // readable as it is.
    if (!stored)
        if (const std::string problem = run_name_problem(c.name); !problem.empty()) require(false, "name", problem);
    const auto& m = c.model;
    require(m.n_layer >= 1, "model.n_layer", "must be at least 1");
    require(m.n_layer <= kMaxLayers, "model.n_layer", "must be at most " + std::to_string(kMaxLayers));
    require(m.n_head >= 1, "model.n_head", "must be at least 1");
    require(m.n_embd >= 1, "model.n_embd", "must be at least 1");
    require(m.n_embd % m.n_head == 0, "model.n_embd",
            std::to_string(m.n_embd) + " is not divisible by model.n_head (" + std::to_string(m.n_head) + ")");
    require(m.context_length >= 1, "model.context_length", "must be at least 1");
    require(m.dropout >= 0.0 && m.dropout < 1.0, "model.dropout", "must be in [0, 1)");

    const auto& d = c.data;
    require(d.val_fraction > 0.0 && d.val_fraction < 1.0, "data.val_fraction", "must be in (0, 1)");
    switch (d.kind) {
    case DataKind::Text:
        require(!d.path.empty(), "data.path", "is required when data.kind is 'text'");
        require(d.tokenizer == "char" || d.tokenizer == "byte", "data.tokenizer",
                "'" + d.tokenizer + "' is not one of char, byte");
        break;
    case DataKind::TokenBin:
        require(!d.dir.empty(), "data.dir", "is required when data.kind is 'bin'");
        require(d.vocab_size >= 2 && d.vocab_size <= 65536, "data.vocab_size",
                "must be in [2, 65536] for uint16 token files");
        break;
    case DataKind::SyntheticAddition:
        require(d.digits >= 1 && d.digits <= 9, "data.digits", "must be in [1, 9]");
        require(d.examples >= 10, "data.examples", "must be at least 10");
        break;
    }

    const auto& o = c.optimizer;
    require(o.learning_rate > 0.0, "optimizer.learning_rate", "must be positive");
    require(o.min_learning_rate >= 0.0 && o.min_learning_rate <= o.learning_rate, "optimizer.min_learning_rate",
            "must be in [0, optimizer.learning_rate]");
    require(o.warmup_steps >= 0, "optimizer.warmup_steps", "must be >= 0");
    require(o.decay_steps >= o.warmup_steps, "optimizer.decay_steps", "must be >= optimizer.warmup_steps");
    require(o.beta1 >= 0.0 && o.beta1 < 1.0, "optimizer.beta1", "must be in [0, 1)");
    require(o.beta2 >= 0.0 && o.beta2 < 1.0, "optimizer.beta2", "must be in [0, 1)");
    require(o.eps > 0.0, "optimizer.eps", "must be positive");
    require(o.weight_decay >= 0.0, "optimizer.weight_decay", "must be >= 0");
    require(o.grad_clip >= 0.0, "optimizer.grad_clip", "must be >= 0 (0 disables clipping)");

    const auto& t = c.training;
    require(t.steps >= 1, "training.steps", "must be at least 1");
    require(t.batch_size >= 1, "training.batch_size", "must be at least 1");
    require(t.grad_accum >= 1, "training.grad_accum", "must be at least 1");
    require(t.grad_accum <= kMaxGradAccum, "training.grad_accum",
            "must be at most " + std::to_string(kMaxGradAccum) +
                ": more micro-batches per optimizer step would run for long with no step to show; raise "
                "training.batch_size instead");
    require(t.threads >= 0, "training.threads", "must be >= 0 (0 = all cores)");
    require(t.checkpoint_interval >= 0, "training.checkpoint_interval", "must be >= 0 (0 = only at the end)");
    require(t.checkpoint_keep >= 1, "training.checkpoint_keep", "must be at least 1");
    require(t.collective_timeout_s >= 1 && t.collective_timeout_s <= 86400, "training.collective_timeout_s",
            "must be 1 ... 86400 seconds");
    require(t.dp_bucket_mb > 0.0 && t.dp_bucket_mb <= 1024.0, "training.dp_bucket_mb",
            "must be above 0 and at most 1024 MiB");

    const auto& e = c.eval;
    require(e.interval >= 0, "eval.interval", "must be >= 0 (0 = only at the end)");
    require(e.batches >= 1, "eval.batches", "must be at least 1");
    require(e.batches <= kMaxEvalBatches, "eval.batches", "must be at most " + std::to_string(kMaxEvalBatches));
    require(e.sample_tokens >= 0, "eval.sample_tokens", "must be >= 0");
    require(e.sample_tokens <= kMaxSampleTokens, "eval.sample_tokens",
            "must be at most " + std::to_string(kMaxSampleTokens));
    // Below ~1e-30 the logits / temperature overflow float32 and sampling sees NaN.
    require(e.sample_temperature >= 1e-6 && e.sample_temperature <= 1e6, "eval.sample_temperature",
            "must be in [1e-6, 1e6]");
    require(e.sample_top_k >= 0, "eval.sample_top_k", "must be >= 0 (0 = no top-k)");

    const auto presets = precision_preset_names();
    require(std::find(presets.begin(), presets.end(), c.precision.preset) != presets.end(), "precision.preset",
            "'" + c.precision.preset + "' is not one of " + join(presets));
    const auto& f8 = c.precision.fp8;
    require(f8.amax_history_length >= 1, "precision.fp8.amax_history_length", "must be at least 1");
    require(f8.amax_history_length <= kMaxAmaxHistory, "precision.fp8.amax_history_length",
            "must be at most " + std::to_string(kMaxAmaxHistory));
    require(f8.margin >= 0 && f8.margin <= 16, "precision.fp8.margin", "must be in [0, 16]");
    require(f8.outlier_rms_multiple >= 0.0, "precision.fp8.outlier_rms_multiple", "must be >= 0 (0 = off)");
    require(c.precision.keep_last_bf16 >= 0 && c.precision.keep_last_bf16 <= c.model.n_layer,
            "precision.keep_last_bf16",
            "must be in [0, model.n_layer] (model.n_layer is " + std::to_string(c.model.n_layer) + ")");
    // A pattern that names no layer is a typo ("block.*"), and the run would train in the
    // preset's formats without a word; a live change with such a pattern is refused too. Not
    // for a stored run's own settings: runs made before this check (which trained in the
    // preset's formats there) must still show, compare and resume.
    const auto layer_names = gemm_layer_names(c.model.n_layer);
    for (size_t i = 0; !stored && i < c.precision.layers.size(); ++i) {
        const std::string& pattern = c.precision.layers[i].match;
        const bool matches = std::any_of(layer_names.begin(), layer_names.end(),
                                         [&](const std::string& name) { return glob_match(pattern, name); });
        require(matches, "precision.layers[" + std::to_string(i) + "].match",
                "'" + pattern + "' matches no layer of this model (blocks.0.attn.qkv ... blocks." +
                    std::to_string(c.model.n_layer - 1) + ".mlp.fc2, lm_head)");
    }
    const auto& ls = c.precision.loss_scaling;
    const auto& mode = c.precision.loss_scaling_mode;
    require(mode == "auto" || mode == "dynamic" || mode == "static" || mode == "off", "precision.loss_scaling.mode",
            "'" + mode + "' is not one of auto, dynamic, static, off");
    // The scale is a float32, as in PyTorch's GradScaler: a value that rounds to a finite one
    // (3.4028235e38, FLT_MAX as printed, was refused), and a normal one, whose reciprocal (the
    // unscale) is finite too: 1e-50 rounded to 0 and every step was skipped as non-finite.
    constexpr double kRoundsToInfinity = 0x1.ffffffp127, kFloat32MinNormal = 0x1p-126;
    require(ls.init_scale >= kFloat32MinNormal && ls.init_scale < kRoundsToInfinity,
            "precision.loss_scaling.init_scale", "must be a finite, normal float32: from 1.1754944e-38 to 3.4028235e38");
    require(ls.growth_factor > 1.0 && ls.growth_factor < kRoundsToInfinity, "precision.loss_scaling.growth_factor",
            "must be > 1 and a finite float32");
    require(ls.backoff_factor > 0.0 && ls.backoff_factor < 1.0, "precision.loss_scaling.backoff_factor",
            "must be in (0, 1)");
    // The device keeps the counters in FP64 (one buffer with the scale), exact up to 2^53.
    constexpr int64_t kExactInDouble = int64_t(1) << 53;
    require(ls.growth_interval >= 1 && ls.growth_interval <= kExactInDouble, "precision.loss_scaling.growth_interval",
            "must be from 1 to 2^53 (9007199254740992)");
    require(ls.min_scale >= 0.0 && ls.min_scale <= ls.init_scale, "precision.loss_scaling.min_scale",
            "must be in [0, precision.loss_scaling.init_scale]");
    require(ls.hysteresis >= 1 && ls.hysteresis <= kExactInDouble, "precision.loss_scaling.hysteresis",
            "must be from 1 to 2^53 (9007199254740992)");
    require(c.training.device == "auto" || c.training.device == "cpu" || c.training.device == "cuda",
            "training.device", "'" + c.training.device + "' is not one of auto, cpu, cuda");
    require(c.telemetry.log_interval >= 1, "telemetry.log_interval", "must be at least 1");
    require(c.telemetry.interval >= 0, "telemetry.interval", "must be >= 0 (0 = off)");
    const auto& w = c.telemetry.watchers;
    require(w.loss_spike_sigma > 0, "telemetry.watchers.loss_spike_sigma", "must be positive");
    require(w.grad_spike_sigma > 0, "telemetry.watchers.grad_spike_sigma", "must be positive");
    require(w.spike_window >= 2, "telemetry.watchers.spike_window", "must be at least 2");
    require(w.backoff_limit >= 1, "telemetry.watchers.backoff_limit", "must be at least 1");
    require(w.backoff_window >= 1, "telemetry.watchers.backoff_window", "must be at least 1");
    require(w.fp8_underflow_max >= 0 && w.fp8_underflow_max <= 1, "telemetry.watchers.fp8_underflow_max",
            "must be in [0, 1]");
    require(w.fp4_underflow_max >= 0 && w.fp4_underflow_max <= 1, "telemetry.watchers.fp4_underflow_max",
            "must be in [0, 1]");
    require(w.cooldown_steps >= 0, "telemetry.watchers.cooldown_steps", "must be >= 0");
}

// Where the parser is, as a dotted key ("training.steps", "precision.layers[1].match"), so a
// number that overflows a double or a syntax error can name the key it sits in.
class KeyTracker {
public:
    bool on_event(json::parse_event_t event, const json& parsed)
    {
        using E = json::parse_event_t;
        switch (event) {
        case E::object_start: stack_.push_back({false, 0, {}, false, {}}); break;
        case E::array_start: stack_.push_back({true, 0, {}, false, {}}); break;
        case E::key:
            if (!stack_.empty()) {
                Level& level = stack_.back();
                level.key = parsed.get<std::string>();
                level.has_key = true;
                // JSON parsers keep one of the two silently (nlohmann: the last): a setting
                // the user wrote would be dropped without a word.
                if (!level.keys.insert(level.key).second)
                    throw ConfigError(where() + ": the key is given twice in one object; give it once");
            }
            break;
        case E::object_end:
        case E::array_end:
            if (!stack_.empty()) stack_.pop_back();
            next_element();
            break;
        case E::value: next_element(); break;
        }
        return true;
    }

    std::string where() const
    {
        std::string out;
        for (const auto& level : stack_) {
            if (level.is_array) out += "[" + std::to_string(level.index) + "]";
            else if (level.has_key) out += (out.empty() ? "" : ".") + level.key; // "" is a key too
        }
        return out;
    }

private:
    void next_element()
    {
        if (!stack_.empty() && stack_.back().is_array) ++stack_.back().index;
    }
    struct Level {
        bool is_array = false;
        size_t index = 0;
        std::string key;
        bool has_key = false;
        std::set<std::string> keys; // an object's keys so far
    };
    std::vector<Level> stack_;
};

json parse_tracked(const std::string& text, KeyTracker& tracker)
{
    return json::parse(text, [&](int, json::parse_event_t event, json& parsed) { return tracker.on_event(event, parsed); });
}

json parse_checking_keys(const std::string& text)
{
    KeyTracker tracker;
    return parse_tracked(text, tracker);
}

json parse_project_text(const std::string& json_text)
{
    // A file saved as UTF-16 (an editor's "Unicode") reads as garbage at its first byte.
    if (json_text.starts_with("\xFF\xFE") || json_text.starts_with("\xFE\xFF"))
        throw ConfigError("not valid JSON: the file is UTF-16; save it as UTF-8");
    KeyTracker tracker;
    try {
        return parse_tracked(json_text, tracker);
    } catch (const json::out_of_range& e) { // 406: a number beyond a double's range (1e999)
        const std::string at = tracker.where();
        throw ConfigError((at.empty() ? std::string("project") : at) + ": a number is too large for a double (" +
                          json_error_words(e.what()) + ")");
    } catch (const json::exception& e) {
        const std::string at = tracker.where();
        throw ConfigError(std::string("not valid JSON") + (at.empty() ? "" : " (in " + at + ")") + ": " +
                          json_error_words(e.what()));
    }
}

// An override whose key the defaults do not have is the override's mistake, not the project
// file's: said as such (key first, as every ConfigError), before any file is read, as is a key
// that goes on through a value (training.steps.x). Empty keys and a trailing '.' are
// apply_override's to name.
void check_override_key(const std::string& dotted)
{
    if (dotted.empty() || dotted.back() == '.') return;
    static const json defaults = to_json(ProjectConfig{});
    // `compare` prints a list's entries as precision.layers[0].dgrad; --set takes a list whole.
    const auto whole_list = [](const std::string& key) {
        return ConfigError(key + ": is a list, which --set replaces whole: --set '" + key +
                           "=[...]' with a JSON array");
    };
    const json* at = &defaults;
    std::string walked;
    for (size_t begin = 0; begin <= dotted.size();) {
        if (at->is_array()) throw whole_list(walked);
        if (!at->is_object()) throw ConfigError(walked + ": expected an object, got " + type_word(*at));
        const size_t dot = std::min(dotted.find('.', begin), dotted.size());
        const std::string part = dotted.substr(begin, dot - begin);
        const std::string parent = walked;
        walked += (walked.empty() ? "" : ".") + part;
        if (const size_t bracket = part.find('['); bracket != std::string::npos && !at->contains(part)) {
            const std::string list = part.substr(0, bracket);
            if (at->contains(list) && (*at)[list].is_array())
                throw whole_list((parent.empty() ? "" : parent + ".") + list);
        }
        if (!at->contains(part))
            throw ConfigError(key_for_message(walked) + ": unknown key" + did_you_mean(*at, part, parent));
        at = &(*at)[part];
        begin = dot + 1;
    }
}

void check_override_keys(const std::vector<Override>& overrides)
{
    for (const auto& o : overrides) check_override_key(o.first);
}

ProjectConfig load_without_machine_checks(const std::string& json_text, const std::string& base_dir,
                                          const std::vector<Override>& overrides, bool stored = false)
{
    check_override_keys(overrides);
    json user = parse_project_text(json_text);
    if (!user.is_object()) throw ConfigError("project: expected a JSON object at the top level, got " + type_word(user));
    for (const auto& o : overrides) apply_override(user, o);

    json merged = to_json(ProjectConfig{});
    merge_checked(merged, user, "");
    ProjectConfig config = from_json(merged);
    config.base_dir = base_dir;
    // An override of precision.layers is checked as a new setting.
    const bool layers_overridden = std::any_of(overrides.begin(), overrides.end(), [](const Override& o) {
        return o.first.rfind("precision.layers", 0) == 0 || o.first == "precision";
    });
    validate(config, stored && !layers_overridden);
    return config;
}

// The override that set the value a ConfigError names first ("training.steps: must be at least
// 1"): the last one whose key is that key or holds it (training={"steps":0}). A message that
// names another key first (model.n_embd, not divisible by an overridden model.n_head) is not
// one override's alone and gets none.
const Override* override_at_fault(const std::string& message, const std::vector<Override>& overrides)
{
    for (auto o = overrides.rbegin(); o != overrides.rend(); ++o) {
        const std::string& key = o->first;
        if (message.size() > key.size() && message.compare(0, key.size(), key) == 0 &&
            std::string_view(":.[").find(message[key.size()]) != std::string_view::npos)
            return &*o;
    }
    return nullptr;
}

} // namespace

std::string json_error_words(const char* what)
{
    std::string_view text(what);
    if (text.starts_with("[json.exception.")) {
        const size_t end = text.find("] ");
        if (end != std::string_view::npos) text.remove_prefix(end + 2);
    }
    return std::string(text);
}

std::string blame_override(const std::string& message, const std::vector<Override>& overrides)
{
    const Override* o = override_at_fault(message, overrides);
    return o ? "--set " + o->first + "=" + o->second + ": " + message : std::string();
}

bool is_path_key(const std::string& dotted_key)
{
    return dotted_key == "data.path" || dotted_key == "data.dir" || dotted_key == "training.checkpoint_dir";
}

Override parse_override(const std::string& text)
{
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0)
        throw ConfigError("--set '" + text + "': expected dotted.key=value");
    try {
        check_override_key(text.substr(0, eq));
    } catch (const ConfigError& e) {
        throw ConfigError("--set " + text + ": " + e.what());
    }
    return {text.substr(0, eq), text.substr(eq + 1)};
}

namespace {

// Loads with `load`; a value that an override set is the override's mistake, named as such
// ("--set training.steps=abc: training.steps: ..."): the file or the stored run does not hold it.
template <typename Load>
ProjectConfig blaming_overrides(const std::vector<Override>& overrides, Load load)
{
    try {
        return load();
    } catch (const ConfigError& e) {
        if (std::string blamed = blame_override(e.what(), overrides); !blamed.empty()) throw ConfigError(blamed);
        throw;
    }
}

bool names_an_override(const ConfigError& e) { return std::string_view(e.what()).starts_with("--set "); }

} // namespace

ProjectConfig load_project_json(const std::string& json_text, const std::string& base_dir,
                                const std::vector<Override>& overrides)
{
    return blaming_overrides(overrides, [&] {
        ProjectConfig config = load_without_machine_checks(json_text, base_dir, overrides);
        check_fits_machine(config);
        return config;
    });
}

ProjectConfig load_stored_run_json(const std::string& json_text, const std::string& base_dir,
                                   const std::vector<Override>& overrides)
{
    return blaming_overrides(overrides, [&] {
        ProjectConfig config = load_without_machine_checks(json_text, base_dir, overrides, /*stored=*/true);
        check_fits_machine(config);
        return config;
    });
}

ProjectConfig load_project_file(const std::string& path, const std::vector<Override>& overrides)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::is_directory(path, ec)) throw ConfigError("project file '" + path + "' is a directory, expected a file");
    // A device (/dev/zero) would be read without end, a pipe would wait for a writer: a project
    // is a file, and a small one.
    const auto status = fs::status(path, ec);
    if (!ec && fs::exists(status) && !fs::is_regular_file(status))
        throw ConfigError("project file '" + path + "' is not a regular file (a device, a pipe or a socket)");
    // A project is a few kilobytes. Parsing takes 100-200 bytes of memory per byte of deeply
    // nested JSON (an 8-MB file of '[' took 1.5 GB): 1 MiB bounds that to a few hundred MB.
    constexpr uintmax_t kMaxProjectBytes = uintmax_t(1) << 20;
    if (const auto size = fs::file_size(path, ec); !ec && size > kMaxProjectBytes)
        throw ConfigError("project file '" + path + "' is " + std::to_string(size) +
                          " bytes: too large for a project (at most 1 MiB)");
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        const int error = errno; // ifstream leaves the open's own
        throw ConfigError("project file '" + path + "' cannot be opened" +
                          (error != 0 ? std::string(": ") + std::strerror(error) : std::string()));
    }
    std::stringstream text;
    text << in.rdbuf();
    const std::string base = fs::absolute(fs::path(path)).parent_path().string();
    check_override_keys(overrides); // not the file's mistake: named without it (a sweep's --vary)
    try {
        return load_project_json(text.str(), base, overrides);
    } catch (const ConfigError& e) {
        if (names_an_override(e)) throw; // not the file's mistake
        throw ConfigError(path + ": " + e.what());
    }
}

ProjectConfig load_run_config(const std::string& config_json)
{
    try {
        // A stored run may come from a bigger machine: reading it back is not running it.
        return load_without_machine_checks(config_json, {}, {}, /*stored=*/true);
    } catch (const ConfigError& e) {
        throw ConfigError(std::string("stored run config: ") + e.what());
    }
}

std::string to_json_text(const ProjectConfig& config) { return to_json(config).dump(2); }

bool has_control_character(std::string_view text)
{
    return std::any_of(text.begin(), text.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; });
}

std::string run_name_problem(std::string_view name)
{
    if (std::all_of(name.begin(), name.end(), [](unsigned char ch) { return std::isspace(ch); }))
        return "is empty: a run needs a name";
    if (has_control_character(name))
        return "has a control character (a NUL, a tab, a newline): a run's name is one line of text";
    if (name.find_first_not_of("0123456789") == std::string_view::npos)
        return "'" + std::string(name) + "' reads as a run id: name the run with a letter in it";
    return {};
}

std::string resolve_data_path(const ProjectConfig& config, const std::string& path)
{
    namespace fs = std::filesystem;
    fs::path p(path);
    if (p.is_relative() && !config.base_dir.empty()) p = fs::path(config.base_dir) / p;
    return p.lexically_normal().string();
}

} // namespace mantissa
