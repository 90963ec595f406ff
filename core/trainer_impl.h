// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The Trainer's state, shared by the files that make up the training loop:
//   trainer.cpp             the public API, and run(): the loop itself
//   trainer_step.cpp        one optimizer step: micro-batches, loss scaling, clipping, update
//   trainer_checkpoint.cpp  checkpoint save, load and rotation
//   trainer_evaluation.cpp  validation loss and sampling
//   trainer_commands.cpp    commands applied at step boundaries; watcher actions
//   telemetry_frame.cpp     arming the layers and assembling a telemetry frame
//   gradients.cpp           per-layer gradient norms, unscaling, clipping
//   batch_sampler.cpp       random training windows
// Internal: includes LibTorch, so only the engine's own sources include it.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "adamw.h"
#include "batch_sampler.h"
#include "checkpoint_file.h"
#include "command_queue.h"
#include "dataset.h"
#include "gpt_model.h"
#include "gradients.h"
#include "loss_scaler.h"
#include "telemetry_frame.h"
#include "trainer.h"
#include "watchers.h"

namespace mantissa {

// What one optimizer step produced, before it is reported.
struct StepOutcome {
    double train_loss = 0.0; // mean over the micro-batches
    double learning_rate = 0.0;
    double loss_scale = 1.0; // the scale this step's backward used
    double grad_norm = 0.0;  // NaN when the step was skipped
    bool skipped = false;
    std::vector<std::pair<std::string, double>> layer_grad_norms;
    std::vector<WatchAlert> alerts; // from the loss scaler's watcher
};

struct Trainer::Impl {
    ProjectConfig config;
    TokenSplits data;
    Gpt model{nullptr};
    std::unique_ptr<AdamW> optimizer;
    LossScaler scaler;
    std::unique_ptr<BatchSampler> train_batches;
    int64_t step = 0; // optimizer steps done; a resumed run starts here
    std::string resumed_from; // the checkpoint load_checkpoint read, if any
    Watchers watchers;
    std::vector<std::string> layer_order; // GEMM layers in forward order, for attribution
    CommandQueue commands;
    bool defer_frames = false; // telemetry frames handed on a step later (CUDA)
    CheckpointIdentity identity; // written into every checkpoint; run_uuid empty = no run attached
    std::function<void(const Trainer::CheckpointWrite&)> checkpoint_listener;
    std::map<std::string, bool> checkpoint_is_ours; // by path: read once, for shared folders
    torch::Device device{torch::kCPU};
    int threads = 1;
    LayerGradients gradients;

    explicit Impl(ProjectConfig c);

    // trainer_step.cpp
    StepOutcome train_step(bool armed, TelemetryStep& telemetry, TelemetrySink& sink);
    // Unscales the gradients, updates the loss scale and reports what happened; true when the
    // gradients are not finite and the update must be skipped.
    // The loss scaler's update from this step's non-finite layers (already unscaled and read);
    // true when the step is skipped.
    bool update_loss_scale(double used_scale, const std::vector<std::string>& bad_layers, StepOutcome& outcome,
                           TelemetrySink& sink);
    // A host batch onto the training device without making the host wait.
    torch::Tensor to_device(const torch::Tensor& host) const;

    // trainer_checkpoint.cpp
    void save_checkpoint(const std::string& path);
    void load_checkpoint(const std::string& path);
    // step-00000100.pt in training.checkpoint_dir, keeping the newest checkpoint_keep. A failed
    // write (full disk, folder gone) is a warning event: training goes on without it.
    std::string write_periodic_checkpoint(TelemetrySink& sink);
    CheckpointIdentity current_identity() const;
    // Whether a checkpoint file in the folder is this run's: two runs may be given one
    // training.checkpoint_dir, and neither may overwrite or rotate away the other's files.
    bool is_our_checkpoint(const std::string& path);
    // Refuses a checkpoint that names another run, before anything is loaded.
    void check_identity(const std::string& path, const CheckpointIdentity& theirs) const;
    // "; it holds the model of run 3 (uuid ...): n_layer=..., this one is n_layer=..." when known.
    std::string whose_model(const CheckpointIdentity& theirs) const;

    // trainer_evaluation.cpp
    double estimate_loss(const std::vector<uint16_t>& split);
    std::string sample(const std::string& prompt, int64_t tokens, uint64_t seed);

    // trainer_commands.cpp
    // Returns false when a Stop arrived. Blocks while paused.
    bool apply_commands(TelemetrySink& sink);
    // Runs the watchers' verdicts: events, and the optional actions.
    void handle_alerts(const std::vector<WatchAlert>& alerts, TelemetrySink& sink);
    // Applies a precision change; returns the layers it touched and their formats before.
    std::vector<std::pair<std::string, GemmFormats>> set_layer_formats(const std::string& pattern,
                                                                       const GemmFormats& formats);

    std::vector<LayerState> layer_states() const;
    std::vector<LayerState> layer_states_of(const std::vector<std::string>& names) const; // forward order
};

} // namespace mantissa
