// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_event.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <utility>

#include <nlohmann/json.hpp>

namespace mantissa {
namespace {

constexpr std::array<std::pair<EventKind, std::string_view>, 21> kKindNames{{
    {EventKind::RunStarted, "run_started"},
    {EventKind::MemoryEstimate, "memory_estimate"},
    {EventKind::ResumedFromCheckpoint, "resumed_from_checkpoint"},
    {EventKind::Sample, "sample"},
    {EventKind::Paused, "paused"},
    {EventKind::Resumed, "resumed"},
    {EventKind::Checkpoint, "checkpoint"},
    {EventKind::CheckpointSkipped, "checkpoint_skipped"},
    {EventKind::CheckpointFailed, "checkpoint_failed"},
    {EventKind::CheckpointDamaged, "checkpoint_damaged"},
    {EventKind::CheckpointUnrecorded, "checkpoint_unrecorded"},
    {EventKind::LayerBackends, "layer_backends"},
    {EventKind::PrecisionChanged, "precision_changed"},
    {EventKind::LossScaleBackoff, "loss_scale_backoff"},
    {EventKind::LossScaleGrowth, "loss_scale_growth"},
    {EventKind::StepSkipped, "step_skipped"},
    {EventKind::Alert, "alert"},
    {EventKind::WatchAction, "watch_action"},
    {EventKind::RunFinished, "run_finished"},
    {EventKind::RunStopped, "run_stopped"},
    {EventKind::RunFailed, "run_failed"},
}};

constexpr std::string_view kAlertPrefix = "alert_";

std::string join(const std::vector<std::string>& items)
{
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
    return out;
}

// Loss scales are powers of two in practice; print them without a tail of zeros.
std::string format_scale(double scale)
{
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%g", scale);
    return buffer;
}

nlohmann::json formats_json(const GemmFormats& f)
{
    return {{"forward", format_name(f.forward)}, {"dgrad", format_name(f.dgrad)}, {"wgrad", format_name(f.wgrad)}};
}

std::optional<GemmFormats> formats_from(const nlohmann::json& j)
{
    if (!j.is_object()) return std::nullopt;
    auto one = [&](const char* key) { return parse_number_format(j.value(key, std::string())); };
    const auto forward = one("forward"), dgrad = one("dgrad"), wgrad = one("wgrad");
    if (!forward || !dgrad || !wgrad) return std::nullopt;
    return GemmFormats{*forward, *dgrad, *wgrad};
}

// "12 KiB", "3 MiB", "20.0 GiB"
std::string format_bytes(int64_t bytes)
{
    if (bytes >= (int64_t(1) << 34)) {
        char buffer[32];
        std::snprintf(buffer, sizeof buffer, "%.1f GiB", static_cast<double>(bytes) / double(int64_t(1) << 30));
        return buffer;
    }
    if (bytes >= (int64_t(1) << 24)) return std::to_string((bytes + (1 << 19)) >> 20) + " MiB";
    return std::to_string((bytes + 512) >> 10) + " KiB";
}

} // namespace

std::string_view event_kind_name(EventKind kind)
{
    for (const auto& [k, name] : kKindNames)
        if (k == kind) return name;
    return "other";
}

std::optional<EventKind> parse_event_kind(std::string_view name)
{
    if (name.substr(0, kAlertPrefix.size()) == kAlertPrefix) return EventKind::Alert;
    for (const auto& [k, n] : kKindNames)
        if (n == name) return k;
    return std::nullopt;
}

GemmFormats formats_as_run(const LayerState& layer)
{
    const auto scaling = parse_fp8_scaling(layer.recipe);
    return scaling ? formats_as_computed(layer.formats, *scaling) : layer.formats;
}

std::string_view change_cause_name(ChangeCause cause)
{
    switch (cause) {
    case ChangeCause::Watcher: return "watcher";
    case ChangeCause::Resume: return "resume";
    case ChangeCause::User: break;
    }
    return "user";
}

bool retraining_reproduces(const RunEvent& e)
{
    switch (e.kind) {
    case EventKind::Sample:
    case EventKind::LayerBackends:
    case EventKind::LossScaleBackoff:
    case EventKind::LossScaleGrowth:
    case EventKind::StepSkipped:
    case EventKind::Alert:
    case EventKind::WatchAction:
        return true;
    case EventKind::PrecisionChanged:
        return e.cause != ChangeCause::User;
    default:
        return false;
    }
}

std::string RunEvent::tag() const
{
    if (kind == EventKind::Alert) return std::string(kAlertPrefix) + watcher;
    if (kind == EventKind::Other && !other_tag.empty()) return other_tag;
    return std::string(event_kind_name(kind));
}

std::string describe_setting_changes(const std::vector<SettingChange>& changes)
{
    std::string out;
    for (const auto& c : changes) out += (out.empty() ? "" : ", ") + c.key + " " + c.before + " -> " + c.after;
    return out;
}

std::string RunEvent::message() const
{
    switch (kind) {
    case EventKind::RunStarted:
    case EventKind::Sample:
    case EventKind::Other:
        return text;
    case EventKind::MemoryEstimate: {
        std::string out;
        for (size_t i = 0; i < bytes.size(); ++i)
            out += (i == 0 ? "" : i + 1 == bytes.size() ? "; " : ", ") + bytes[i].first + " " + format_bytes(bytes[i].second);
        return out;
    }
    case EventKind::ResumedFromCheckpoint: {
        const std::string changes = describe_setting_changes(settings_changed);
        return "continuing at step " + std::to_string(step) + (path.empty() ? "" : " from " + path) +
               (changes.empty() ? "" : "; settings changed: " + changes) + (text.empty() ? "" : "; " + text);
    }
    case EventKind::Paused:
        return "training paused";
    case EventKind::Resumed:
        return "training resumed";
    case EventKind::Checkpoint:
        return path;
    case EventKind::CheckpointSkipped:
        return text;
    case EventKind::CheckpointFailed:
        return "checkpoint '" + path + "' could not be written: " + text;
    case EventKind::CheckpointDamaged:
        return "checkpoint '" + path + "' is damaged (" + text + "); skipped";
    case EventKind::CheckpointUnrecorded:
        return "checkpoint '" + path + "' has no recorded checksum: " + text;
    case EventKind::LayerBackends: {
        std::string out;
        for (const auto& l : layer_states) { // the recipe of FP8 layers: a live switch may change only that
            out += (out.empty() ? "" : "; ") + l.name + " " + formats_as_run(l).describe() + " " +
                   (l.recipe.empty() ? "" : l.recipe + " ") + l.backend;
        }
        return out;
    }
    case EventKind::PrecisionChanged: {
        // What the switch did to the layers' FP8 scales (LayerGemm::set_scaling, set_formats):
        // a new recipe starts them afresh; new formats alone keep each delayed-scaling history
        // whose cast keeps its format, and restart the others.
        // Both said only of layers that have FP8 scales now (a layer's recipe is "" when none
        // of its GEMMs is FP8), or where the event does not say how they scale, as older ones
        // do not: a new recipe given to layers switched to BF16 starts nothing.
        const auto some_layer = [&](const auto& scales) {
            return layer_states.empty() || std::any_of(layer_states.begin(), layer_states.end(), scales);
        };
        const bool new_recipe = new_scaling && old_scaling && *new_scaling != *old_scaling &&
                                some_layer([](const LayerState& l) { return !l.recipe.empty(); });
        // Histories are delayed scaling's alone.
        const bool histories = some_layer([](const LayerState& l) { return l.recipe == "delayed"; });
        // A switch without a recipe keeps the layer's: under nvfp4 or mxfp4 its FP8 formats run as
        // E2M1, which "-> e4m3/e5m2/e5m2" alone hid.
        std::string kept;
        if (new_formats && !new_scaling)
            for (const auto& l : layer_states)
                if (const auto s = parse_fp8_scaling(l.recipe);
                    s && formats_as_computed(*new_formats, *s) != *new_formats) {
                    kept = std::string("; runs as ") + formats_as_computed(*new_formats, *s).describe() +
                           " under the layer's " + fp8_scaling_name(*s) + " scaling";
                    break;
                }
        // A switch to a recipe names the formats it computes in: "-> e4m3/e5m2/e5m2 with nvfp4
        // scaling" read as FP8 beside a precision table that said e2m1.
        const auto shown = new_formats && new_scaling ? formats_as_computed(*new_formats, *new_scaling) : new_formats;
        return pattern + " -> " + (shown ? shown->describe() : std::string("?")) +
               (new_scaling ? std::string(" with ") + fp8_scaling_name(*new_scaling) + " scaling" : std::string()) +
               " (" + join(layers) + ")" + (cause == ChangeCause::Watcher ? " by watcher " + watcher : "") +
               (cause == ChangeCause::Resume ? " again, as the interrupted run did" : "") + kept +
               (new_recipe ? "; FP8 scales start afresh under the new recipe"
                : histories ? "; delayed-scaling histories restart where a cast's format changed"
                            : "") +
               // precision.loss_scaling.mode auto follows FP16 GEMMs in and out.
               (std::isnan(old_scale) || std::isnan(new_scale) ? std::string()
                : new_scale == 1.0 ? "; loss scaling off (scale " + format_scale(old_scale) + " -> 1)"
                : old_scale == 1.0 ? "; loss scaling on (scale 1 -> " + format_scale(new_scale) + ")"
                                   : "; loss scale " + format_scale(old_scale) + " -> " + format_scale(new_scale));
    }
    case EventKind::LossScaleBackoff:
        return "scale " + format_scale(old_scale) + " -> " + format_scale(new_scale) + "; non-finite gradients in " +
               join(layers);
    case EventKind::LossScaleGrowth:
        return "scale " + format_scale(old_scale) + " -> " + format_scale(new_scale);
    case EventKind::StepSkipped:
        return "non-finite gradients in " + join(layers);
    case EventKind::Alert:
        return (layers.empty() ? "" : layers.front() + ": ") + text;
    case EventKind::WatchAction:
        if (!text.empty()) return watcher + ": " + text; // an action not taken, and why
        if (action == "pause") return watcher + ": pausing training";
        return watcher + ": switched " + join(layers) + " to " + action;
    case EventKind::RunFinished:
        return "finished " + std::to_string(step) + " steps";
    case EventKind::RunStopped:
        return "stopped at step " + std::to_string(step);
    case EventKind::RunFailed:
        return text;
    }
    return text;
}

std::string event_fields_json(const RunEvent& e)
{
    nlohmann::json j = nlohmann::json::object();
    if (!e.layers.empty()) j["layers"] = e.layers;
    if (!e.watcher.empty()) j["watcher"] = e.watcher;
    if (!e.action.empty()) j["action"] = e.action;
    if (!e.role.empty()) j["role"] = e.role;
    if (!e.pattern.empty()) j["pattern"] = e.pattern;
    if (e.old_formats) j["old_formats"] = formats_json(*e.old_formats);
    if (e.new_formats) j["new_formats"] = formats_json(*e.new_formats);
    if (e.old_scaling) j["old_scaling"] = fp8_scaling_name(*e.old_scaling);
    if (e.new_scaling) j["new_scaling"] = fp8_scaling_name(*e.new_scaling);
    if (e.kind == EventKind::PrecisionChanged) j["cause"] = change_cause_name(e.cause);
    if (!std::isnan(e.old_scale)) j["old_scale"] = e.old_scale;
    if (!std::isnan(e.new_scale)) j["new_scale"] = e.new_scale;
    if (!e.path.empty()) j["path"] = e.path;
    if (!e.bytes.empty()) {
        nlohmann::json parts = nlohmann::json::array();
        for (const auto& [name, b] : e.bytes) parts.push_back({name, b});
        j["bytes"] = parts;
    }
    if (!e.layer_states.empty()) {
        nlohmann::json states = nlohmann::json::array();
        for (const auto& l : e.layer_states)
            states.push_back({{"name", l.name}, {"formats", formats_json(l.formats)}, {"recipe", l.recipe},
                              {"backend", l.backend}});
        j["layer_states"] = states;
    }
    if (!e.text.empty()) j["text"] = e.text;
    if (e.later_steps_dropped) j["later_steps_dropped"] = true;
    if (e.live_changes_superseded) j["live_changes_superseded"] = true;
    if (!e.settings_changed.empty()) {
        nlohmann::json changes = nlohmann::json::array();
        for (const auto& c : e.settings_changed) changes.push_back({c.key, c.before, c.after});
        j["settings_changed"] = changes;
    }
    return j.dump();
}

RunEvent event_from_stored(int64_t step, const std::string& tag, const std::string& fields_json,
                           const std::string& message)
{
    RunEvent e;
    e.step = step;
    const auto kind = parse_event_kind(tag);
    e.kind = kind.value_or(EventKind::Other);
    if (e.kind == EventKind::Alert) e.watcher = tag.substr(kAlertPrefix.size());
    const auto j = nlohmann::json::parse(fields_json.empty() ? "{}" : fields_json, nullptr, /*allow_exceptions=*/false);
    if (!kind) e.other_tag = tag;
    if (!kind || !j.is_object()) {
        e.text = message; // a newer kind, or fields this version cannot read: keep what people read
        return e;
    }
    auto str = [&](const char* key) {
        const auto it = j.find(key);
        return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
    };
    auto num = [&](const char* key) {
        const auto it = j.find(key);
        return it != j.end() && it->is_number() ? it->get<double>() : std::nan("");
    };
    if (const auto it = j.find("layers"); it != j.end() && it->is_array())
        for (const auto& l : *it)
            if (l.is_string()) e.layers.push_back(l.get<std::string>());
    if (const auto w = str("watcher"); !w.empty()) e.watcher = w; // alerts already have it from the tag
    e.action = str("action");
    e.role = str("role");
    e.pattern = str("pattern");
    if (const auto it = j.find("old_formats"); it != j.end()) e.old_formats = formats_from(*it);
    if (const auto it = j.find("new_formats"); it != j.end()) e.new_formats = formats_from(*it);
    e.old_scaling = parse_fp8_scaling(str("old_scaling")); // none in older stores, or a recipe this version lacks
    e.new_scaling = parse_fp8_scaling(str("new_scaling"));
    e.cause = str("cause") == "watcher" ? ChangeCause::Watcher
              : str("cause") == "resume" ? ChangeCause::Resume
                                         : ChangeCause::User;
    e.old_scale = num("old_scale");
    e.new_scale = num("new_scale");
    e.path = str("path");
    if (const auto it = j.find("bytes"); it != j.end() && it->is_array())
        for (const auto& part : *it)
            if (part.is_array() && part.size() == 2 && part[0].is_string() && part[1].is_number_integer())
                e.bytes.emplace_back(part[0].get<std::string>(), part[1].get<int64_t>());
    if (const auto it = j.find("layer_states"); it != j.end() && it->is_array())
        for (const auto& s : *it) {
            if (!s.is_object()) continue;
            LayerState l;
            l.name = s.value("name", std::string());
            if (const auto f = formats_from(s.value("formats", nlohmann::json()))) l.formats = *f;
            l.recipe = s.value("recipe", std::string());
            l.backend = s.value("backend", std::string());
            e.layer_states.push_back(std::move(l));
        }
    e.text = str("text");
    if (const auto it = j.find("later_steps_dropped"); it != j.end() && it->is_boolean())
        e.later_steps_dropped = it->get<bool>();
    if (const auto it = j.find("live_changes_superseded"); it != j.end() && it->is_boolean())
        e.live_changes_superseded = it->get<bool>();
    if (const auto it = j.find("settings_changed"); it != j.end() && it->is_array())
        for (const auto& c : *it)
            if (c.is_array() && c.size() == 3 && c[0].is_string() && c[1].is_string() && c[2].is_string())
                e.settings_changed.push_back(
                    {c[0].get<std::string>(), c[1].get<std::string>(), c[2].get<std::string>()});
    return e;
}

} // namespace mantissa
