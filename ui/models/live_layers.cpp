// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/live_layers.h"

namespace mantissa {

std::string LiveLayer::last_switch() const
{
    if (switched_at < 0) return {};
    return "step " + std::to_string(switched_at) + ": " + (cause == ChangeCause::Watcher ? "watcher " + watcher : "you");
}

std::vector<LayerState> LiveLayers::from_project(const ProjectConfig& config)
{
    std::vector<LayerState> out;
    for (const auto& name : gemm_layer_names(config.model.n_layer)) {
        LayerState s;
        s.name = name;
        s.formats = resolve_layer_formats(config.precision, name, config.model.n_layer);
        if (s.formats.any_fp8()) s.recipe = fp8_scaling_name(resolve_layer_recipe(config.precision, name).scaling);
        out.push_back(std::move(s));
    }
    return out;
}

void LiveLayers::reset(const std::vector<LayerState>& initial)
{
    layers_.clear();
    index_.clear();
    for (const auto& s : initial) ensure(s.name).state = s;
    ++revision_;
}

LiveLayer& LiveLayers::ensure(const std::string& name)
{
    const auto it = index_.find(name);
    if (it != index_.end()) return layers_[it->second];
    index_.emplace(name, layers_.size());
    layers_.push_back({});
    layers_.back().state.name = name;
    return layers_.back();
}

const LiveLayer* LiveLayers::find(const std::string& name) const
{
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &layers_[it->second];
}

bool LiveLayers::apply(const RunEvent& e)
{
    switch (e.kind) {
    case EventKind::LayerBackends:
    case EventKind::ResumedFromCheckpoint:
        if (e.layer_states.empty()) return false;
        for (const auto& s : e.layer_states) {
            LayerState& state = ensure(s.name).state;
            // The resume event is sent before any layer ran: keep a backend already known.
            const std::string backend = s.backend.empty() ? state.backend : s.backend;
            state = s;
            state.backend = backend;
        }
        break;
    case EventKind::PrecisionChanged:
        if (!e.new_formats && e.layer_states.empty()) return false;
        // The backend of new formats is not known until the layer_backends event after their
        // first step: the old one is cleared rather than shown for formats it did not run.
        for (const auto& name : e.layers) {
            LiveLayer& layer = ensure(name);
            if (e.new_formats && !(layer.state.formats == *e.new_formats)) {
                layer.state.formats = *e.new_formats;
                layer.state.backend.clear();
            }
            layer.switched_at = e.step;
            layer.cause = e.cause;
            layer.watcher = e.watcher;
        }
        // The engine's own view of the changed layers (recipe), where it sent one.
        for (const auto& s : e.layer_states) {
            LayerState& state = ensure(s.name).state;
            const std::string backend = s.backend.empty() && state.formats == s.formats ? state.backend : s.backend;
            state = s;
            state.backend = backend;
        }
        break;
    default:
        return false;
    }
    ++revision_;
    return true;
}

} // namespace mantissa
