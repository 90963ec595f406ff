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
//   device_loss_scale.cpp   the loss scaler's state on the device
//   batch_sampler.cpp       random training windows
// Internal: includes LibTorch, so only the engine's own sources include it.

#include <deque>
#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "adamw.h"
#include "batch_sampler.h"
#include "checkpoint_file.h"
#include "command_queue.h"
#include "data_parallel.h"
#include "dataset.h"
#include "device_loss_scale.h"
#include "gpt_model.h"
#include "gradient_buckets.h"
#include "gradients.h"
#include "loss_scaler.h"
#include "telemetry_frame.h"
#include "arithmetic_record.h"
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
    double allreduce_ms = 0.0;      // data parallel: time after the backward spent in the reductions
    int overlapped_buckets = 0;     // data parallel: gradient buckets started during the backward
};

struct Trainer::Impl {
    ProjectConfig config;
    TokenSplits data;
    Gpt model{nullptr};
    std::unique_ptr<AdamW> optimizer;
    LossScaler scaler;          // the policy the run reports and checkpoints
    DeviceLossScale device_scale; // its state on the device, which the step itself uses
    std::unique_ptr<BatchSampler> train_batches;
    int64_t step = 0; // optimizer steps done; a resumed run starts here
    std::string resumed_from; // the checkpoint load_checkpoint read, if any
    bool resumed_from_file = false; // load_checkpoint took one (step 0's included), not rank 0's state
    int64_t resumed_cpu_threads = 0; // the CPU threads that checkpoint's run used (0: not recorded)
    std::string resumed_arithmetic;  // that checkpoint's arithmetic_text() ("": not recorded)
    GemmBackend executor = GemmBackend::Emulated; // precision.backend as resolved for this device
    // What decides the arithmetic beyond the project: the device (and GPU model, or ATen's CPU
    // kernels), the executor, deterministic kernels on a GPU, LibTorch's version. A resume where
    // it differs continues the run, but not bit for bit (the resume event says so).
    // `cpu_kernels` false: without the CPU's kernels, as checkpoints before 2026-12-06 were.
    std::string arithmetic_text(bool cpu_kernels) const;
    Watchers watchers;
    std::vector<std::string> layer_order; // GEMM layers in forward order, for attribution
    CommandQueue commands;
    std::multimap<int64_t, Command> replays; // step -> a precision change made again there (resume)
    // Layer names never change after construction, so this is safe from any thread.
    bool matches_a_layer(const std::string& pattern) const
    {
        for (const auto& g : model->gemm_layers())
            if (glob_match(pattern, g->name())) return true;
        return false;
    }
    bool defer_frames = false; // telemetry frames handed on a step later (CUDA)
    CheckpointIdentity identity; // written into every checkpoint; run_uuid empty = no run attached
    std::function<bool(const Trainer::CheckpointWrite&)> checkpoint_listener;
    std::set<std::string> unrecorded_checkpoints; // written, but the listener could not record them
    // This run's files past the checkpoint it resumed from: another future of it (a stop cut
    // short before the store recorded its file, a newest file found damaged). Rotation does not
    // count them among the `keep`, and removes them once the run is past them.
    std::set<std::string> abandoned_checkpoints;
    std::map<std::string, bool> checkpoint_is_ours; // by path: read once, for shared folders
    torch::Device device{torch::kCPU};
    // The CUDA device's index for memory readings, or -1 on the CPU.
    int cuda_device() const { return device.is_cuda() ? device.index() : -1; }
    int threads = 1;
    LayerGradients gradients;
    std::shared_ptr<DataParallel> dp; // null: a single process
    std::vector<DelayedScaling*> fp8_journals;               // data parallel: this step's FP8 delayed states
    std::vector<DeviceDelayedScaling*> device_fp8_journals; // native FP8 on CUDA: the same, on the device
    std::unique_ptr<GradientBuckets> grad_buckets; // data parallel: the gradients' allreduce
    bool reduce_amax = true; // MANTISSA_DP_SKIP_AMAX_REDUCTION=1 turns it off (a test shows it matters)

    explicit Impl(ProjectConfig c);

    // trainer_data_parallel.cpp (all no-ops without `dp`)
    bool is_rank0() const { return !dp || dp->rank() == 0; }
    // Starts the process group and gives every rank rank 0's state (weights, optimizer,
    // scaler, FP8 histories, RNG and sampler state, step): a fresh run and a resumed one alike.
    void dp_begin_run();
    // Whether this rank runs micro-batch `micro` of the step (rank r: r, r+W, ...).
    bool dp_owns_micro_batch(int64_t micro) const;
    // Before the backward of micro-batch `micro`: the step's last one on this rank arms the
    // gradient buckets, whose allreduces then start while it runs.
    void dp_before_backward(int64_t micro);
    // Before the step's first forward: snapshots the FP8 delayed-scaling states.
    void dp_fp8_begin_step();
    // After the last backward: the gradient buckets finished (summed), the FP8 amaxes of the
    // step reduced with MAX and the scales recomputed from them, the loss summed. Returns the
    // milliseconds spent (the communication the backward did not hide).
    double dp_reduce_step(torch::Tensor& loss_sum, int& overlapped_buckets);
    // Rank 0's pending commands, the same on every rank; while paused, rank 0 waits for one
    // and the others wait with it. nullopt: nothing more at this boundary.
    std::optional<Command> dp_next_command(bool paused);
    // Data parallel: rank 0's commands as broadcast, the same on every rank, not yet applied.
    // What a Resume leaves behind it in one broadcast is applied at the next step boundary,
    // as a single process's queue keeps it.
    std::deque<Command> dp_synced_commands;
    // Rank 0's watchers' BF16 switches not yet sent to the other ranks (handle_alerts). The next
    // boundary's commands carry them, ahead of the queue's; a step that evaluates or
    // checkpoints (or the last) sends them at its end instead, through this, so that its
    // evaluation and checkpoint hold them, as a single process's do (it switches at once).
    std::vector<Command> pending_switches;
    // A Stop was applied: the commands behind it are still applied at that boundary (a
    // precision change accepted there is in the final checkpoint), but none pauses or waits.
    bool stop_requested = false;
    // The step whose checkpoint was last written: a stop right after a periodic checkpoint
    // needs no second one of the same state (it wrote and recorded that step twice).
    int64_t checkpoint_written_at = -1;
    void dp_apply_pending_switches(TelemetrySink& sink);
    // The last boundary: rank 0 closes its command queue only when it is empty, in one step
    // with the check, and every rank learns from its broadcast whether it did. False: a
    // command came while the last round was applied, and every rank runs another round.
    bool dp_close_commands_if_empty();
    // Every rank's step and allreduce times, as scalars for rank 0's sink.
    void dp_gather_times(double step_ms, double allreduce_ms, int overlapped_buckets, StepMetrics& metrics);
    // telemetry.reduce_ranks: the allreduces a telemetry step's buffer is combined with.
    TelemetryStep::RankReduction dp_rank_reduction();
    // A failure during run(): the peer's posted reason, or this rank's, posted for the others.
    [[noreturn]] void dp_fail(const std::exception& error);
    std::string state_digest() const;

    // trainer_step.cpp
    StepOutcome train_step(bool armed, TelemetryStep& telemetry, TelemetrySink& sink);
    // The host scaler's update from this step's non-finite layers (already unscaled and read;
    // the device made the same update and skipped the optimizer already), and its events;
    // true when the step was skipped.
    // The FP8 gradient histories measured gradients multiplied by `measured_under`; they follow
    // the scaler's scale now (every loss-scale change: a growth or backoff, a live change that
    // turns scaling on or off, a resume under another mode). Queued on the device, no sync.
    void rescale_gradient_amaxes(double measured_under);
    bool update_loss_scale(double used_scale, const std::vector<std::string>& bad_layers, StepOutcome& outcome,
                           TelemetrySink& sink);
    // Dropout's masks for micro-batch `micro` of this step: the generators seeded from
    // (training.seed, step, micro), so that they do not depend on who ran the micro-batches before.
    void seed_dropout(int64_t micro) const;
    // A host batch onto the training device without making the host wait.
    torch::Tensor to_device(const torch::Tensor& host) const;

    // trainer_checkpoint.cpp
    FileChecksum save_checkpoint(const std::string& path); // the file's checksum, made as it is written
    void load_checkpoint(const std::string& path);
    // The checkpoint's bytes, handed to `out` as the archive makes them (an error from `out`
    // is thrown once the archive is done); in memory, and their loading (`source` names them
    // in errors).
    void write_state(const std::function<void(const char*, size_t)>& out);
    std::string serialize_state();
    void load_state(std::istream& in, const std::string& source);
    void load_archive(const std::string& path, const std::function<void(torch::serialize::InputArchive&)>& open);
    // step-00000100.pt in training.checkpoint_dir, keeping the newest checkpoint_keep. A failed
    // write (full disk, folder gone) is a warning event: training goes on without it.
    std::string write_periodic_checkpoint(TelemetrySink& sink);
    CheckpointIdentity current_identity() const;
    // data_fingerprint(data), computed at the first checkpoint written or loaded.
    const std::string& data_fingerprint_text() const;
    mutable std::string data_fingerprint_;
    // Whether a checkpoint file in the folder is this run's: two runs may be given one
    // training.checkpoint_dir, and neither may overwrite or rotate away the other's files.
    bool is_our_checkpoint(const std::string& path);
    // Refuses a checkpoint that names another run, before anything is loaded.
    // "; it holds the model of run 3 (uuid ...): n_layer=..., this one is n_layer=..." when known.
    std::string whose_model(const CheckpointIdentity& theirs) const;

    // trainer_evaluation.cpp
    double estimate_loss(const TokenIds& split);
    std::string sample(const std::string& prompt, int64_t tokens, uint64_t seed);

    // trainer_commands.cpp
    // Returns false when a Stop arrived. Blocks while paused.
    // `before_first` runs once, before the first command is applied (the trainer hands on a
    // frame in flight there).
    bool apply_commands(TelemetrySink& sink, const std::function<void()>& before_first = {});
    // Runs the watchers' verdicts: events, and the optional actions.
    // Whether a watcher's switch of `pattern` to BF16 has nothing left to do (done, or pending).
    bool switched_to_bf16(const std::string& pattern) const;
    // The layers an alert's layer name stands for, as a pattern: the GEMM layer of that name,
    // or every layer under it (a block's attention).
    std::string layers_named_by(const std::string& layer) const;
    void handle_alerts(const std::vector<WatchAlert>& alerts, TelemetrySink& sink);
    // A SetLayerFormats command: the change and its precision_changed event.
    void apply_layer_formats(const Command& command, TelemetrySink& sink);
    // Applies a precision change (and a scaling recipe, where given); returns the layers it
    // touched with their formats and recipe before.
    struct LayerBefore {
        std::string name;
        GemmFormats formats;
        Fp8Scaling scaling;
    };
    std::vector<LayerBefore> set_layer_formats(const std::string& pattern, const GemmFormats& formats,
                                               std::optional<Fp8Scaling> scaling = std::nullopt);
    bool backends_changed = false; // a precision change since the last layer_backends event
    // A switch that turned loss scaling on or off (the scale was `scale_before`, 1 while off,
    // before set_layer_formats) says so in its event.
    void note_loss_scale_switch(RunEvent& change, double scale_before) const;
    // precision.loss_scaling.mode "auto" follows the layers' formats as they are now: dynamic
    // while any GEMM is FP16, so that a live change to FP16 (or a checkpoint whose layers were
    // changed to it) trains with loss scaling, as a run started in FP16 does. Turning on starts
    // at init_scale; `keep_state` (a checkpoint load) keeps the restored scale and counters.
    void follow_formats_with_loss_scaling(bool keep_state);

    std::vector<LayerState> layer_states() const;
    // Forward order; the backend empty (the layers were just changed: layer_backends follows).
    std::vector<LayerState> layer_states_of(const std::vector<std::string>& names) const;
};

} // namespace mantissa
