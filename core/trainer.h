// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The training loop's public face. No LibTorch in this header: the CLI, the run store and
// the GUI include it without paying for torch's headers.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint_file.h"
#include "precision_policy.h"
#include "project_config.h"
#include "telemetry.h"

namespace mantissa {

class DataParallel; // data_parallel.h

struct RunSummary {
    int64_t steps_done = 0;
    bool stopped_early = false;
    double final_train_loss = 0.0;  // last step's training loss
    double final_val_loss = -1.0;   // last evaluation; < 0 when none ran
    int64_t final_val_step = -1;    // the step it ran at (a stopped run's is an earlier step's)
    double mean_step_time_ms = 0.0; // excludes the first steps (allocator and cache warm-up)
    // The same steps from boundary to boundary: the step, and after it its telemetry frame's
    // read-back and the sinks (evaluations and checkpoints left out). What statistics cost a
    // run, where the step time leaves out the frame.
    double mean_loop_time_ms = 0.0;
    double tokens_per_s = 0.0;
    int64_t skipped_steps = 0;
    int64_t peak_device_memory_bytes = -1; // CUDA caching allocator's peak; -1 on a CPU
};

class Trainer {
public:
    // Loads the data and builds the model; throws ConfigError if the data does not fit the
    // project (missing file, too short for the context, ...). Nothing trains yet.
    explicit Trainer(ProjectConfig config);
    ~Trainer();
    Trainer(const Trainer&) = delete;
    Trainer& operator=(const Trainer&) = delete;

    // Trains on the calling thread until training.steps or a Stop command.
    RunSummary run(TelemetrySink& sink);

    // Thread-safe; applied at the next step boundary. False when there is none: the last
    // step has begun, or the run stopped (nothing is queued).
    bool request_pause();
    bool request_resume();
    bool request_stop();
    // Writes a checkpoint at the next step boundary (needs training.checkpoint_dir).
    bool request_checkpoint();
    // Everything a bit-exact resume needs: master weights, AdamW state, loss scaler, layer
    // formats and FP8 histories, RNG and data-sampler state, step. Written atomically
    // (temporary file, then rename). Call between steps: before/after run() or from a sink.
    void save_checkpoint(const std::string& path);
    // Restores a checkpoint of the same project; the next run() continues from its step.
    // Throws ConfigError naming the file if it is missing or corrupt (this trainer may then be
    // half-loaded: do not train it), CheckpointMismatch (before changing anything) if it is of
    // another run (set_checkpoint_identity) or model.
    void load_checkpoint(const std::string& path);
    int64_t step() const; // optimizer steps done
    // The FP32 master weights as safetensors (names as in named_parameters: wte, wpe,
    // blocks.N.attn.qkv.weight, ...), with the resolved project in the metadata.
    void export_safetensors(const std::string& path) const;
    // Where periodic and final checkpoints go (overrides training.checkpoint_dir); call before run().
    void set_checkpoint_dir(const std::string& dir);
    // The run whose checkpoints these are: written into every checkpoint (with the model
    // shape), and checked by load_checkpoint. Call before run() / load_checkpoint().
    void set_checkpoint_identity(const std::string& run_uuid, int64_t run_id);
    // A file of this run's that no longer reads (its run store recorded it, then it was
    // damaged): it may be written over. Unreadable files are otherwise left alone, as they
    // may be another run's in a shared training.checkpoint_dir.
    void adopt_damaged_checkpoint(const std::string& path);
    // One periodic or final checkpoint write: the file, or `error` when it could not be
    // written (the run goes on, the temporary file is removed, a checkpoint_failed event says so).
    struct CheckpointWrite {
        int64_t step = 0;
        std::string path;
        std::string error;    // empty: written
        std::string checksum; // of the bytes written ("fnv1a64:..."), made as they were written
        int64_t bytes = -1;
    };
    // Telemetry frames are handed to the sink one step after the step they describe (with
    // its step number), so that their copy to the host never stalls a step. On by default on
    // CUDA; tests switch it on for the CPU to hold the two schedules together.
    void set_deferred_frames(bool deferred);
    // Called on the training thread after each write, before old checkpoints are rotated
    // away; must not throw. Call before run(). Returns false when a written checkpoint could
    // not be recorded (the run store is full): a resume trusts only recorded checkpoints, so
    // rotation then keeps the newest recorded one, however many unrecorded ones follow it.
    void set_checkpoint_listener(std::function<bool(const CheckpointWrite&)> listener);

    // Switches every layer matching the glob to `formats`, and to the scaling recipe `scaling`
    // where one is given, between two steps. Throws ConfigError at once if the pattern matches
    // no layer, or a format is no GEMM operand's (e8m0, e2m1: block-recipe formats). False as
    // request_pause.
    bool request_layer_formats(const std::string& layer_pattern, const GemmFormats& formats,
                               std::optional<Fp8Scaling> scaling = std::nullopt);
    // A user's precision change that the run being resumed made at or after its checkpoint (its
    // precision_changed event at step `at_step`): made again at that step boundary, so the
    // resumed run trains as the interrupted one did. Call after load_checkpoint, before run().
    void replay_layer_formats(int64_t at_step, const std::string& layer_pattern, const GemmFormats& formats,
                              std::optional<Fp8Scaling> scaling = std::nullopt);

    // Data-parallel training (docs/DISTRIBUTED.md): this trainer is one rank of `dp` (started or
    // not: run() starts its process group). training.grad_accum counts the micro-batches of one
    // optimizer step across all ranks; rank r runs micro-batches r, r+W, ... of them. Throws
    // ConfigError when grad_accum is not a multiple of the world size. Call before run().
    // Only rank 0 reports to its sink in full and writes checkpoints; run() begins with every
    // rank taking rank 0's state (so a checkpoint resumes on any world size).
    void set_data_parallel(std::shared_ptr<DataParallel> dp);
    // FNV-1a over what must be equal on every data-parallel rank: master weights, FP8
    // delayed-scaling histories and scales, the loss scaler. As hex text.
    std::string state_digest() const;

    int64_t parameter_count() const;
    // Forward order. Reads live layer state: call it from the training thread (a sink) or
    // while no run is in progress; other threads get the same facts from run events.
    std::vector<LayerState> layers() const;
    // The scaling recipe a layer runs now, FP8 GEMMs or not (LayerState names it only for FP8
    // layers), read as layers() reads. Throws ConfigError for a name that is no layer's.
    Fp8Scaling layer_scaling(const std::string& layer) const;
    double loss_scale() const;
    int64_t vocab_size() const;
    std::string describe() const; // one line: model size, data, threads
    const ProjectConfig& config() const;

    // Generates `tokens` tokens after `prompt` (empty: a newline or token 0) and decodes them.
    std::string sample(const std::string& prompt, int64_t tokens, uint64_t seed);

private:
    RunSummary run_steps(TelemetrySink& sink);
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// nanoGPT's schedule: linear warmup, cosine decay to min_learning_rate at decay_steps.
// `step_index` is 0-based.
double learning_rate_at(const OptimizerConfig& optimizer, int64_t step_index);

} // namespace mantissa
