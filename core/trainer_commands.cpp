// SPDX-License-Identifier: GPL-3.0-or-later
// What changes a run between two steps: commands from other threads (pause, stop, a
// checkpoint, a layer's precision) and the watchers' automatic actions.
#include "trainer_impl.h"

#include <algorithm>

namespace mantissa {

bool Trainer::Impl::apply_commands(TelemetrySink& sink, const std::function<void()>& before_first)
{
    auto event = [&](EventKind kind) {
        RunEvent e;
        e.step = step;
        e.kind = kind;
        return e;
    };
    bool paused = false, before_first_ran = false;
    while (true) {
        std::optional<Command> command;
        const bool waits = paused && !stop_requested;
        if (dp) command = dp_next_command(waits);
        else command = waits ? std::optional<Command>(commands.wait_pop()) : commands.try_pop();
        if (!command) return !stop_requested;
        if (before_first && !before_first_ran) {
            before_first();
            before_first_ran = true;
        }
        switch (command->kind) {
        case Command::Kind::Stop:
            stop_requested = true; // the rest of the queue is applied first
            break;
        case Command::Kind::Pause:
            if (stop_requested) break;
            if (!paused) sink.on_event(event(EventKind::Paused));
            paused = true;
            break;
        case Command::Kind::Resume:
            if (paused) {
                sink.on_event(event(EventKind::Resumed));
                return true;
            }
            break;
        case Command::Kind::Checkpoint:
            if (!is_rank0() || stop_requested) break; // rank 0 writes them; a stopping run writes its final one
            if (config.training.checkpoint_dir.empty()) {
                auto e = event(EventKind::CheckpointSkipped);
                e.text = "no training.checkpoint_dir set";
                sink.on_event(e);
            } else if (checkpoint_written_at == step && !backends_changed) {
                // Asked for while this step's own was being written (the button pressed while a
                // periodic write held the window): the same state again cost a whole write,
                // seconds of the step's thread (read-only audit 'ckpt-scale').
                auto e = event(EventKind::CheckpointSkipped);
                e.text = "step " + std::to_string(step) + " was checkpointed already";
                sink.on_event(e);
            } else {
                write_periodic_checkpoint(sink);
            }
            break;
        case Command::Kind::SetLayerFormats:
            apply_layer_formats(*command, sink);
            break;
        }
    }
}

void Trainer::Impl::apply_layer_formats(const Command& command, TelemetrySink& sink)
{
    RunEvent e;
    e.step = step;
    e.kind = EventKind::PrecisionChanged;
    e.pattern = command.layer_pattern;
    e.new_formats = command.formats;
    e.cause = command.cause;
    e.watcher = command.watcher;
    e.new_scaling = command.scaling;
    const double scale_before = scaler.scale();
    const auto changed = set_layer_formats(command.layer_pattern, command.formats, command.scaling);
    for (const auto& before : changed) e.layers.push_back(before.name);
    if (!changed.empty()) {
        e.old_formats = changed.front().formats;
        if (command.scaling) e.old_scaling = changed.front().scaling;
    }
    e.layer_states = layer_states_of(e.layers);
    note_loss_scale_switch(e, scale_before);
    sink.on_event(e);
}

void Trainer::Impl::note_loss_scale_switch(RunEvent& change, double scale_before) const
{
    if (scaler.scale() == scale_before) return;
    change.old_scale = scale_before;
    change.new_scale = scaler.scale();
}

bool Trainer::Impl::switched_to_bf16(const std::string& pattern) const
{
    // Several tensors of one layer (its input, weight, gradients) may alert at one step, and a
    // layer a watcher moved to BF16 stays there: one switch, one precision_changed event.
    const GemmFormats bf16 = GemmFormats::all(NumberFormat::BF16);
    for (const auto& c : pending_switches)
        if (c.layer_pattern == pattern && c.formats == bf16) return true;
    bool any = false;
    for (const auto& g : model->gemm_layers()) {
        if (!glob_match(pattern, g->name())) continue;
        if (!(g->formats() == bf16)) return false;
        any = true;
    }
    return any;
}

std::string Trainer::Impl::layers_named_by(const std::string& layer) const
{
    // The gradient watchers name parameters: the tied token embedding's (`wte`) holds
    // lm_head's weight gradient, the GEMM an action can switch.
    if (layer == "wte") return "lm_head";
    // attention_logit names a block's attention (blocks.N.attn), no one GEMM layer: its action
    // switches the three layers of it (qkv, sdpa, proj).
    for (const auto& g : model->gemm_layers())
        if (g->name() == layer) return layer;
    return layer + ".*";
}

void Trainer::Impl::handle_alerts(const std::vector<WatchAlert>& alerts, TelemetrySink& sink)
{
    for (const auto& a : alerts) {
        RunEvent alert;
        alert.step = a.step;
        alert.kind = EventKind::Alert;
        alert.watcher = a.watcher;
        alert.role = a.role;
        if (!a.layer.empty()) alert.layers = {a.layer};
        alert.text = a.message;
        sink.on_event(alert);
        RunEvent action;
        action.step = a.step;
        action.kind = EventKind::WatchAction;
        action.watcher = a.watcher;
        const std::string target = a.layer.empty() ? std::string() : layers_named_by(a.layer);
        // The layer as switched: lm_head for the embedding's gradient, else the alert's own.
        const std::string switched_name = target.ends_with(".*") ? a.layer : target;
        const auto switchable = [&] {
            return std::any_of(model->gemm_layers().begin(), model->gemm_layers().end(),
                               [&](const auto& g) { return glob_match(target, g->name()); });
        };
        if (a.action == WatchAction::Pause) {
            action.action = "pause";
            if (!a.layer.empty()) action.layers = {a.layer};
            // Refused once the loop has passed its last boundary: "pausing training" was
            // recorded, and the run finished.
            if (!commands.push({Command::Kind::Pause, {}, {}})) action.text = "not paused: the run ends at this step";
            sink.on_event(action);
        } else if (a.action == WatchAction::SwitchToBf16 && !a.layer.empty() && !switchable()) {
            // A LayerNorm's or the position embedding's gradient: no GEMM to switch. Said, where
            // nothing used to follow the alert.
            action.action = "bf16";
            action.layers = {a.layer};
            action.text = "nothing switched: " + a.layer + " has no GEMM layer";
            sink.on_event(action);
        } else if (a.action == WatchAction::SwitchToBf16 && !a.layer.empty() && switched_to_bf16(target)) {
            continue; // another of its tensors alerted first: the layer is (or is about to be) BF16
        } else if (a.action == WatchAction::SwitchToBf16 && !a.layer.empty() && dp) {
            // Data parallel: sent from rank 0, so that every rank switches at one step boundary
            // (pending_switches).
            const GemmFormats bf16{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16};
            pending_switches.push_back({Command::Kind::SetLayerFormats, target, bf16, ChangeCause::Watcher, a.watcher});
            action.action = "bf16";
            action.layers = {switched_name};
            sink.on_event(action);
        } else if (a.action == WatchAction::SwitchToBf16 && !a.layer.empty()) {
            const GemmFormats bf16{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16};
            const double scale_before = scaler.scale();
            const auto changed = set_layer_formats(target, bf16);
            if (changed.empty()) continue;
            action.action = "bf16";
            action.layers = {switched_name};
            sink.on_event(action);
            // The switch is a precision change like the user's, so whoever tracks the layers'
            // live formats (the precision table) sees it the same way.
            RunEvent change;
            change.step = a.step;
            change.kind = EventKind::PrecisionChanged;
            change.pattern = target;
            for (const auto& before : changed) change.layers.push_back(before.name);
            change.old_formats = changed.front().formats;
            change.new_formats = bf16;
            change.cause = ChangeCause::Watcher;
            change.watcher = a.watcher;
            change.layer_states = layer_states_of(change.layers);
            note_loss_scale_switch(change, scale_before);
            sink.on_event(change);
        }
    }
}

std::vector<Trainer::Impl::LayerBefore> Trainer::Impl::set_layer_formats(const std::string& pattern,
                                                                         const GemmFormats& formats,
                                                                         std::optional<Fp8Scaling> scaling)
{
    std::vector<LayerBefore> changed;
    for (auto& g : model->gemm_layers()) {
        if (!glob_match(pattern, g->name())) continue;
        changed.push_back({g->name(), g->formats(), g->recipe().scaling});
        if (scaling) g->set_scaling(*scaling);
        g->set_formats(formats);
    }
    backends_changed |= !changed.empty(); // the next step says where they ran now
    const double scale_before = scaler.scale(); // 1 while off; the host replayed every step
    follow_formats_with_loss_scaling(/*keep_state=*/false);
    rescale_gradient_amaxes(scale_before);
    return changed;
}

void Trainer::Impl::follow_formats_with_loss_scaling(bool keep_state)
{
    bool any_fp16 = false;
    for (const auto& g : model->gemm_layers()) {
        const auto f = g->formats();
        any_fp16 |= f.forward == NumberFormat::FP16 || f.dgrad == NumberFormat::FP16 || f.wgrad == NumberFormat::FP16;
    }
    const LossScalingConfig resolved = resolve_loss_scaling(config.precision, any_fp16);
    if (resolved.mode == scaler.mode()) return; // a scale already in use keeps its state
    const auto state = scaler.state();
    scaler = LossScaler(resolved);
    if (keep_state) scaler.restore(state);
}

std::vector<LayerState> Trainer::Impl::layer_states_of(const std::vector<std::string>& names) const
{
    std::vector<LayerState> out;
    for (auto& s : layer_states())
        if (std::find(names.begin(), names.end(), s.name) != names.end()) {
            // Just changed: where the new formats run is known once a step has run them (the
            // layer_backends event after it); until then the backend is left unsaid.
            s.backend.clear();
            out.push_back(std::move(s));
        }
    return out;
}

std::vector<LayerState> Trainer::Impl::layer_states() const
{
    std::vector<LayerState> out;
    for (const auto& g : model->gemm_layers()) {
        const auto f = g->formats();
        out.push_back({g->name(), f, f.any_fp8() ? fp8_scaling_name(g->recipe().scaling) : "", g->backend_used()});
    }
    return out;
}

} // namespace mantissa
