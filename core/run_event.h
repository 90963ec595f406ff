// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Typed run events. Each fact an event carries (the layers concerned, the loss scales, the
// formats before and after, the checkpoint file) is a field; the human-readable message is
// rendered from the fields and never parsed back. The store keeps the fields as JSON beside
// the rendered message (schema v5). No LibTorch, no Qt.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "precision_policy.h"

namespace mantissa {

enum class EventKind {
    RunStarted,            // text: the run's description
    MemoryEstimate,        // bytes: the analytic estimate's components
    ResumedFromCheckpoint, // path: the checkpoint continued from
    Sample,                // text: the generated sample
    Paused,
    Resumed,
    Checkpoint,            // path: the checkpoint written
    CheckpointSkipped,     // text: why
    CheckpointFailed,      // path, text: the OS / LibTorch error
    CheckpointDamaged,     // path, text: why a checkpoint was skipped on resume (checksum, unreadable)
    CheckpointUnrecorded,  // path, text: written, but its checksum could not be recorded
    LayerBackends,         // layer_states: each layer's formats, recipe and backend after step 1
    PrecisionChanged,      // layers, pattern, old/new formats, cause, layer_states: the changed layers now
    LossScaleBackoff,      // old_scale, new_scale, layers: the layers with non-finite gradients
    LossScaleGrowth,       // old_scale, new_scale
    StepSkipped,           // layers: the layers with non-finite gradients
    Alert,                 // watcher, layers (0 or 1), role, text: the watcher's finding
    WatchAction,           // watcher, action, layers
    RunFinished,
    RunStopped,
    RunFailed,             // text: the reason
    Other,                 // a kind this version does not know (a newer store); text holds the message
};

// The store's tag for a kind ("loss_scale_backoff"; alerts are "alert_<watcher>").
std::string_view event_kind_name(EventKind kind);
std::optional<EventKind> parse_event_kind(std::string_view name);

// Who changed a layer's precision. Resume: a resumed run making a user's change again at the
// step where the interrupted run made it (that change stays recorded as the user's).
enum class ChangeCause { User, Watcher, Resume };

// "user" | "watcher" | "resume", as the store's fields keep it.
std::string_view change_cause_name(ChangeCause cause);

// One GEMM-bearing layer as the engine runs it right now.
struct LayerState {
    std::string name;        // blocks.N.attn.qkv | .attn.sdpa | .attn.proj | .mlp.fc1 | .mlp.fc2 | lm_head
    GemmFormats formats;
    std::string recipe;      // the FP8 scaling recipe (fp8_scaling_name), "" when no GEMM is FP8
    std::string backend;     // fp32 | emulated | native | native+emulated (known after the first step)
    bool operator==(const LayerState&) const = default;
};

// The formats the layer's GEMMs compute in: E2M1 for its FP8 GEMMs under nvfp4 or mxfp4 (a
// switch to "e4m3" keeps such a recipe), `formats` otherwise.
GemmFormats formats_as_run(const LayerState& layer);

// A setting that a resume's --set changed, as the run's stored settings spell it before and
// after ("(none)" for a key one side lacks).
struct SettingChange {
    std::string key, before, after;
    bool operator==(const SettingChange&) const = default;
};

// "key a -> b, key2 c -> d".
std::string describe_setting_changes(const std::vector<SettingChange>& changes);

struct RunEvent {
    int64_t step = 0;
    EventKind kind = EventKind::Other;
    std::vector<std::string> layers;       // the layers concerned, forward order
    std::string watcher;                   // Alert, WatchAction, PrecisionChanged by a watcher
    std::string action;                    // WatchAction: pause | bf16
    std::string role;                      // Alert: the tensor role (weight, input, grad_output, ...)
    std::string pattern;                   // PrecisionChanged: the glob the change was asked for
    std::optional<GemmFormats> old_formats, new_formats;
    // PrecisionChanged of the scaling recipe too: the first matched layer's before, and the new one.
    std::optional<Fp8Scaling> old_scaling, new_scaling;
    ChangeCause cause = ChangeCause::User; // PrecisionChanged
    double old_scale = std::nan("");       // loss-scale events; a precision change that turned scaling on/off
    double new_scale = std::nan("");
    std::string path;                      // checkpoint file
    std::vector<std::pair<std::string, int64_t>> bytes; // MemoryEstimate: component -> bytes
    std::vector<LayerState> layer_states;  // LayerBackends, ResumedFromCheckpoint, PrecisionChanged
    std::string text;                      // prose no code reads: a sample, a description, a reason
    // ResumedFromCheckpoint: the store dropped what the steps after it had recorded before they
    // were trained again (RunStore::discard_steps_after). A store written by an older version
    // kept them, and a replica of it must too.
    bool later_steps_dropped = false;
    // ResumedFromCheckpoint: its --set changed what the layers compute in, so the interrupted
    // run's live precision changes from its step on were not made again; the store dropped
    // them with the steps (a later resume must not make them either), and a replica does too.
    bool live_changes_superseded = false;
    // ResumedFromCheckpoint: the settings its --set changed (stored with the run from then on),
    // read back by a later resume that falls back past it. Older stores have them in `text`
    // ("settings changed: ...").
    std::vector<SettingChange> settings_changed;
    std::string other_tag;                 // Other: the tag as stored, shown as it is

    // "alert_<watcher>" for alerts, event_kind_name otherwise.
    std::string tag() const;
    // Rendered from the fields, for people.
    std::string message() const;
};

// Whether training the event's step again makes the event again: what the steps compute
// (samples, backends, loss-scale events, watchers' findings and switches, a resume's replays).
// Not the run's history (starts, stops, failures, pauses, checkpoint files) nor a user's
// precision change, which a resume makes again from the record (ChangeCause::Resume).
bool retraining_reproduces(const RunEvent& e);

// The fields as JSON (what the store keeps), and back. from_stored accepts what any version
// wrote; unknown tags become Other with the stored message as text.
std::string event_fields_json(const RunEvent& event);
RunEvent event_from_stored(int64_t step, const std::string& tag, const std::string& fields_json,
                           const std::string& message);

} // namespace mantissa
