// SPDX-License-Identifier: GPL-3.0-or-later
// The Trainer's public face and run(), the training loop. Each concern the loop calls on
// lives in its own file (see trainer_impl.h).
#include "trainer_impl.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <sstream>
#include <thread>

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/ScopeExit.h>

#include "block_fp4_gemm.h"
#include "blockwise_fp8.h"
#include "determinism.h"
#include "device_memory.h"
#include "fused_cross_entropy.h"
#include "memory_model.h"
#include "native_fp8.h"
#include "safetensors_writer.h"
#include "tensor_stats.h"

namespace mantissa {

double learning_rate_at(const OptimizerConfig& o, int64_t step_index)
{
    if (step_index < o.warmup_steps)
        // + 1 in double: warmup_steps 2^63-1 overflowed int64 (a negative rate). Exact below 2^53.
        return o.learning_rate * static_cast<double>(step_index + 1) / (static_cast<double>(o.warmup_steps) + 1.0);
    if (step_index > o.decay_steps || o.decay_steps == o.warmup_steps) return o.min_learning_rate;
    const double ratio =
        static_cast<double>(step_index - o.warmup_steps) / static_cast<double>(o.decay_steps - o.warmup_steps);
    const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
    return o.min_learning_rate + coeff * (o.learning_rate - o.min_learning_rate);
}

namespace {

// The GPU this thread is on now, named with its index: the trainer's tensors stay on it even
// when later calls come from a thread whose current device is another (a data-parallel rank
// chose its GPU before the Trainer was built).
torch::Device current_cuda_device()
{
    return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice();
}

torch::Device pick_device(const std::string& wanted)
{
    if (wanted == "cuda") {
        if (!torch::cuda::is_available())
            throw ConfigError("training.device: 'cuda' was asked for, but this LibTorch has no CUDA device");
        return current_cuda_device();
    }
    if (wanted == "auto" && torch::cuda::is_available()) return current_cuda_device();
    return torch::kCPU;
}

RunEvent event_at(int64_t step, EventKind kind)
{
    RunEvent e;
    e.step = step;
    e.kind = kind;
    return e;
}

// What this recipe needs on a GPU, before anything is allocated.
RunEvent memory_estimate_event(const ProjectConfig& config, int64_t vocab_size)
{
    const auto mem = estimate_memory(config, vocab_size);
    auto e = event_at(0, EventKind::MemoryEstimate);
    e.bytes = {{"master weights", mem.master_weights_bytes},
               {"low-precision copies", mem.low_precision_weights_bytes},
               {"gradients", mem.gradients_bytes},
               {"optimizer state", mem.optimizer_state_bytes},
               {"activations", mem.activations_bytes},
               {"total", mem.total_bytes()}};
    return e;
}

} // namespace

Trainer::Impl::Impl(ProjectConfig c) : config(std::move(c)), watchers(config.telemetry.watchers)
{
    data = load_token_splits(config);
    // Again with the vocabulary the data has: a character-level text's may be 65536, and
    // the logits grow with it (the check before the data was read took 1).
    if (config.data.kind == DataKind::Text) check_fits_machine(config, static_cast<int64_t>(data.vocabulary.size()));
    threads = config.training.threads > 0 ? static_cast<int>(config.training.threads)
                                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    device = pick_device(config.training.device);
    // Before the model reaches the device: the GPU's kernels add in a fixed order, so that a
    // resumed run is bit-identical to one never stopped (determinism.h). The CPU's already do.
    set_deterministic_kernels(device.is_cuda() && config.training.deterministic);
    // Initialise on the CPU generator so a seed gives the same weights on every device.
    torch::manual_seed(config.training.seed);
    // precision.backend auto: the native executor on CUDA, the emulator (the reference) on the CPU.
    PrecisionConfig precision = config.precision;
    if (precision.backend == GemmBackend::Auto)
        precision.backend = device.is_cuda() ? GemmBackend::Native : GemmBackend::Emulated;
    executor = precision.backend;
    model = Gpt(config.model, data.vocabulary.size(), precision);
    model->to(device);
    std::vector<torch::Tensor> decayed, undecayed;
    for (auto& item : model->named_parameters()) {
        auto& p = item.value();
        (p.dim() >= 2 ? decayed : undecayed).push_back(p);
        gradients.add(item.key(), p);
    }
    optimizer = std::make_unique<AdamW>(decayed, undecayed, config.optimizer);
    scaler = LossScaler(resolve_loss_scaling(config.precision, false));
    follow_formats_with_loss_scaling(/*keep_state=*/false);
    for (const auto& g : model->gemm_layers()) layer_order.push_back(g->name());
    defer_frames = device.is_cuda();
    // The fused statistics kernel, the FP8 kernels, the FP8 GEMMs (and the BF16 output of the
    // blockwise one) and the attention max logit's routes are tried here, once per process, so
    // that their probes' host syncs fall outside the steps (a run's telemetry may be switched
    // on at any step, and a layer's recipe changed to FP8).
    if (device.is_cuda()) {
        const c10::DeviceGuard on_this_gpu(device); // the probes try the GPU this run trains on
        fused_cuda_stats_available();
        native_fp8_kernels_report();
        native_fp8_available();
        rowwise_fp8_available();
        blockwise_fp8_available();
        blockwise_fp8_bf16_output_available();
        probe_attention_score_routes(device, config.model.n_embd / config.model.n_head);
        fp4_block_mm_available(true); // sm_100 only; the others return at once
        fp4_block_mm_available(false);
        fp8_block_kernels_report();
        fused_cross_entropy_available();
    }
    train_batches = std::make_unique<BatchSampler>(data.train, config.training.batch_size,
                                                   config.model.context_length, config.training.seed);
}

Trainer::Trainer(ProjectConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Trainer::~Trainer() = default;

bool Trainer::request_pause() { return impl_->commands.push({Command::Kind::Pause, {}, {}}); }
bool Trainer::request_resume() { return impl_->commands.push({Command::Kind::Resume, {}, {}}); }
bool Trainer::request_stop() { return impl_->commands.push({Command::Kind::Stop, {}, {}}); }
bool Trainer::request_checkpoint() { return impl_->commands.push({Command::Kind::Checkpoint, {}, {}}); }
void Trainer::save_checkpoint(const std::string& path) { impl_->save_checkpoint(path); }
void Trainer::load_checkpoint(const std::string& path) { impl_->load_checkpoint(path); }
int64_t Trainer::step() const { return impl_->step; }
void Trainer::export_safetensors(const std::string& path) const
{
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (const auto& item : impl_->model->named_parameters()) tensors.emplace_back(item.key(), item.value());
    write_safetensors(path, tensors,
                      {{"format", "pt"}, {"producer", "mantissa"}, {"step", std::to_string(impl_->step)},
                       {"project", to_json_text(impl_->config)}});
}

void Trainer::set_data_parallel(std::shared_ptr<DataParallel> dp)
{
    if (dp && impl_->config.training.grad_accum % dp->world_size() != 0)
        throw ConfigError("training.grad_accum (" + std::to_string(impl_->config.training.grad_accum) +
                          ") must be a multiple of the world size (" + std::to_string(dp->world_size()) +
                          "): it counts the micro-batches of one optimizer step across all ranks");
    impl_->dp = std::move(dp);
}
std::string Trainer::state_digest() const { return impl_->state_digest(); }
void Trainer::set_deferred_frames(bool deferred) { impl_->defer_frames = deferred; }
void Trainer::set_checkpoint_dir(const std::string& dir) { impl_->config.training.checkpoint_dir = dir; }
void Trainer::set_checkpoint_identity(const std::string& run_uuid, int64_t run_id)
{
    impl_->identity.run_uuid = run_uuid;
    impl_->identity.run_id = run_id;
}
void Trainer::adopt_damaged_checkpoint(const std::string& path) { impl_->checkpoint_is_ours[path] = true; }

void Trainer::set_checkpoint_listener(std::function<bool(const CheckpointWrite&)> listener)
{
    impl_->checkpoint_listener = std::move(listener);
}

bool Trainer::request_layer_formats(const std::string& layer_pattern, const GemmFormats& formats,
                                    std::optional<Fp8Scaling> scaling)
{
    if (!impl_->matches_a_layer(layer_pattern)) throw ConfigError("no layer matches '" + layer_pattern + "'");
    for (const NumberFormat f : {formats.forward, formats.dgrad, formats.wgrad})
        if (!format_info(f).gemm_operand)
            throw ConfigError(std::string("'") + format_name(f) +
                              "' is no GEMM operand's format (a block recipe's element or scale format); one of " +
                              number_format_names_joined());
    return impl_->commands.push(
        {Command::Kind::SetLayerFormats, layer_pattern, formats, ChangeCause::User, {}, scaling});
}

void Trainer::replay_layer_formats(int64_t at_step, const std::string& layer_pattern, const GemmFormats& formats,
                                   std::optional<Fp8Scaling> scaling)
{
    // A resume whose --set changed the layers may have none left that the change was made to.
    if (impl_->matches_a_layer(layer_pattern))
        impl_->replays.emplace(
            at_step, Command{Command::Kind::SetLayerFormats, layer_pattern, formats, ChangeCause::Resume, {}, scaling});
}

std::vector<LayerState> Trainer::layers() const { return impl_->layer_states(); }

Fp8Scaling Trainer::layer_scaling(const std::string& layer) const
{
    for (const auto& g : impl_->model->gemm_layers())
        if (g->name() == layer) return g->recipe().scaling;
    throw ConfigError("no layer is named '" + layer + "'");
}

double Trainer::loss_scale() const { return impl_->scaler.scale(); }
const ProjectConfig& Trainer::config() const { return impl_->config; }
int64_t Trainer::vocab_size() const { return impl_->data.vocabulary.size(); }

int64_t Trainer::parameter_count() const
{
    int64_t n = 0;
    for (const auto& p : impl_->model->parameters()) n += p.numel();
    return n;
}

std::string Trainer::describe() const
{
    std::ostringstream out;
    const auto& c = impl_->config;
    out << c.model.n_layer << " layers, " << c.model.n_head << " heads, " << c.model.n_embd << " dims, context "
        << c.model.context_length << ", " << parameter_count() << " parameters; vocabulary " << vocab_size()
        << "; " << impl_->data.train.size() << " train / " << impl_->data.val.size() << " val tokens; "
        << impl_->threads << " threads; device "
        << (impl_->device.is_cuda() ? (c.training.deterministic ? "cuda (deterministic kernels)" : "cuda") : "cpu")
        << "; precision " << c.precision.preset;
    if (impl_->scaler.enabled()) out << ", loss scale " << impl_->scaler.scale();
    // Which arithmetic ran: on a CPU both executors report every FP8 layer "emulated", and
    // their losses differ (the native one hands activations on in BF16).
    out << "; " << (impl_->executor == GemmBackend::Native ? "native" : "emulated") << " executor";
    return out.str();
}

RunSummary Trainer::run(TelemetrySink& sink)
{
    struct CloseCommands { // however the run ends, a command after it is refused
        CommandQueue& queue;
        ~CloseCommands() { queue.close(); }
    } closing{impl_->commands};
    try {
        if (!impl_->dp) return run_steps(sink);
        try {
            return run_steps(sink);
        } catch (const std::exception& error) {
            impl_->dp_fail(error); // names the rank that failed first, and why
        }
    } catch (const std::exception& error) {
        if (!is_determinism_refusal(error.what())) throw;
        throw std::runtime_error(std::string(error.what()) +
                                 "\nMantissa runs GPU kernels deterministically by default (training.deterministic), "
                                 "so that a resumed run is bit-identical to one never stopped, and this op has no "
                                 "deterministic kernel. Set training.deterministic=false to train with it anyway.");
    }
}

RunSummary Trainer::run_steps(TelemetrySink& sink)
{
    Impl& s = *impl_;
    const auto& cfg = s.config;
    torch::set_num_threads(s.threads);
    // The mode is the process's: a Trainer built after this one (a sweep's next point, a
    // window's next project) set it for itself. This run's setting holds from its first step.
    set_deterministic_kernels(s.device.is_cuda() && cfg.training.deterministic);
    reset_peak_memory(s.cuda_device()); // this run's peak, not the process's
    s.dp_begin_run(); // data parallel: every rank takes rank 0's state
    s.model->train();
    const double tokens_per_step =
        static_cast<double>(cfg.training.batch_size * cfg.model.context_length * cfg.training.grad_accum);

    s.commands.open(); // a Trainer run again (more steps) takes commands again
    RunSummary summary;
    auto started = event_at(0, EventKind::RunStarted);
    started.text = describe();
    sink.on_event(started);
    sink.on_event(memory_estimate_event(cfg, vocab_size()));
    auto evaluate = [&](int64_t step) {
        EvalMetrics m;
        m.step = step;
        m.val_loss = s.estimate_loss(s.data.val);
        m.train_loss = s.estimate_loss(s.data.train);
        summary.final_val_loss = m.val_loss;
        summary.final_val_step = step;
        sink.on_eval(m);
        if (cfg.eval.sample_tokens > 0) {
            auto e = event_at(step, EventKind::Sample);
            e.text = sample("", cfg.eval.sample_tokens, cfg.training.seed + static_cast<uint64_t>(step));
            sink.on_event(e);
        }
    };
    int64_t& step = s.step; // continues from a loaded checkpoint
    // A checkpoint of step 0 (a Checkpoint command at the first boundary) is a resume too: the
    // store drops what came after it, and its evaluation at step 0 was made and recorded.
    if (step > 0 || s.resumed_from_file) {
        // The layers' formats may differ from the project's (live changes are checkpointed).
        auto e = event_at(step, EventKind::ResumedFromCheckpoint);
        e.path = s.resumed_from;
        e.layer_states = s.layer_states();
        // Not run since the load: "none" read as the backend of every low-precision layer until
        // the next layer_backends event (for a whole pause when the resumed run paused first).
        for (auto& l : e.layer_states) l.backend.clear();
        // A CPU run's sums split by thread: another count rounds some of them differently.
        if (!s.device.is_cuda() && s.resumed_cpu_threads > 0 && s.resumed_cpu_threads != s.threads)
            e.text = "trained on " + std::to_string(s.resumed_cpu_threads) + " CPU threads, continuing on " +
                     std::to_string(s.threads) + ": CPU sums split by thread may round differently, so this run "
                     "is not bit-identical to one never stopped (set training.threads=" +
                     std::to_string(s.resumed_cpu_threads) + " for that)";
        // Another device, GPU model, CPU kernels, executor or LibTorch adds and rounds differently.
        if (const std::string note = arithmetic_change(s.resumed_arithmetic, s.arithmetic_text(true),
                                                       s.arithmetic_text(false));
            !note.empty())
            e.text += std::string(e.text.empty() ? "" : "; ") + note;
        if (!s.replays.empty()) {
            std::string steps;
            int64_t last = -1; // one mention a step, however many changes it makes again
            for (const auto& [at, command] : s.replays)
                if (at != last) steps += (steps.empty() ? "" : ", ") + std::to_string(last = at);
            e.text += std::string(e.text.empty() ? "" : "; ") + "makes the precision changes of the interrupted run " +
                      "again at step " + steps;
        }
        sink.on_event(e);
    }
    if (cfg.eval.interval > 0 && step == 0 && !s.resumed_from_file && s.is_rank0()) evaluate(0); // rank 0 evaluates for all

    // Steps before this one are warm-up (allocator, caches) and stay out of the mean.
    const int64_t timed_from = std::min<int64_t>(10, cfg.training.steps / 10) + 1;
    double timed_ms = 0.0, timed_loop_ms = 0.0;
    int64_t timed_steps = 0;
    const int64_t first_step = step;
    TelemetryStep telemetry;
    const bool reduce_ranks = s.dp && cfg.telemetry.reduce_ranks;
    TelemetryStep::RankReduction rank_reduction;
    if (reduce_ranks) rank_reduction = s.dp_rank_reduction();
    // On CUDA a telemetry step's frame lands on the host while the next step runs (its copy
    // is done by that step's own sync) and is handed on then, with its step number. Before
    // anything that saves or changes state at a step boundary (commands, evaluation,
    // checkpoints, the end) it is handed on first, so watcher state never depends on timing.
    // Not where a watcher has an action: a frame's action would then take effect one step
    // later, or not, as evaluations and checkpoints fall, and observing would change the run.
    // Such a run hands each frame on at the end of its own step (one more host wait on a
    // telemetry step), as on the CPU.
    const bool defer_frames = s.defer_frames && !s.watchers.has_actions();
    std::shared_ptr<TelemetryStep::InFlight> in_flight;
    auto deliver = [&](std::vector<WatchAlert>& alerts) {
        if (!in_flight) return;
        const auto frame = TelemetryStep::complete(*in_flight);
        in_flight.reset();
        sink.on_layer_stats(frame);
        for (auto& a : s.watchers.on_frame(frame, s.layer_order)) alerts.push_back(std::move(a));
    };
    // A step or a sink that throws (a CUDA error, a full disk) ends the run: the frame still in
    // flight may be the one that shows why (the NaNs before it), and was lost with the unwinding.
    // Handed on where it can still be read; the failure goes on up as it was.
    const int exceptions_before = std::uncaught_exceptions();
    const auto hand_on_before_failing = c10::make_scope_exit([&] {
        if (!in_flight || std::uncaught_exceptions() == exceptions_before) return;
        try {
            const auto frame = TelemetryStep::complete(*in_flight);
            in_flight.reset();
            sink.on_layer_stats(frame);
        } catch (...) { // the device or the sink as broken as the step: the first failure is the one told
        }
    });
    auto deliver_now = [&] {
        std::vector<WatchAlert> alerts;
        deliver(alerts);
        s.handle_alerts(alerts, sink);
    };
    while (step < cfg.training.steps) {
        // A resumed run's own precision changes, at the boundaries where it first made them
        // (rank 0's queue: data parallel sends them to every rank from there). They go before
        // a change the user asked for since, as they were made before it: the order the store
        // records, and a later resume replays, is the order applied.
        std::vector<Command> due;
        while (!s.replays.empty() && s.replays.begin()->first <= step) {
            due.push_back(s.replays.begin()->second);
            s.replays.erase(s.replays.begin());
        }
        if (s.is_rank0()) s.commands.push_front(due);
        // A frame in flight is handed on before the first command is applied (a command that
        // arrives while this runs is too: the check and the pop are one).
        bool go_on = s.apply_commands(sink, deliver_now);
        // The last boundary: a command from now on would never be applied, and is refused. One
        // that came while the others were applied is applied too, in another round (data
        // parallel: every rank runs that round, as rank 0 tells them). A Stop makes this the
        // last boundary too: what was accepted behind it is applied (it was said to be).
        const auto closed = [&] { return s.dp ? s.dp_close_commands_if_empty() : s.commands.close_if_empty(); };
        if (go_on && step + 1 == cfg.training.steps) {
            while (go_on && !closed()) go_on = s.apply_commands(sink, deliver_now);
        }
        if (!go_on) {
            while (!closed()) s.apply_commands(sink, deliver_now);
            summary.stopped_early = true;
            break; // the queue closes after the loop
        }
        const auto t0 = std::chrono::steady_clock::now();
        // Telemetry is rank 0's, of its micro-batches, unless it is reduced over the ranks
        // (telemetry.reduce_ranks): then every rank measures and rank 0 reports the combination.
        const bool armed = (s.is_rank0() || reduce_ranks) && TelemetryStep::is_armed(cfg.telemetry.interval, step);
        StepOutcome outcome = s.train_step(armed, telemetry, sink);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        StepMetrics m;
        s.dp_gather_times(ms, outcome.allreduce_ms, outcome.overlapped_buckets, m);
        ++step;
        if (outcome.skipped) ++summary.skipped_steps;
        if (step == first_step + 1 || s.backends_changed) {
            // Which backend each layer actually ran on, once they have all run: after the first
            // step, and after the first step of a live precision change.
            auto e = event_at(step, EventKind::LayerBackends);
            e.layer_states = s.layer_states();
            sink.on_event(e);
            s.backends_changed = false;
        }

        m.step = step;
        m.train_loss = outcome.train_loss;
        m.learning_rate = outcome.learning_rate;
        m.grad_norm = outcome.grad_norm;
        m.step_time_ms = ms;
        m.tokens_per_s = tokens_per_step / (ms / 1000.0);
        m.loss_scale = outcome.loss_scale;
        m.skipped = outcome.skipped;
        m.layer_grad_norms = std::move(outcome.layer_grad_norms);
        sink.on_step(m);
        auto alerts = std::move(outcome.alerts);
        for (auto& a : s.watchers.on_step(m)) alerts.push_back(std::move(a));
        deliver(alerts); // the previous telemetry step's, landed during this step
        const bool last = step == cfg.training.steps;
        const bool evaluates = (cfg.eval.interval > 0 && step % cfg.eval.interval == 0) || last;
        const bool checkpoints = cfg.training.checkpoint_interval > 0 && step % cfg.training.checkpoint_interval == 0;
        if (armed) {
            // Another rank's part is in rank 0's frame: it copies nothing back.
            in_flight = telemetry.launch(s.model, step, outcome.skipped, s.cuda_device(),
                                         reduce_ranks ? &rank_reduction : nullptr, s.is_rank0());
            if (!defer_frames || evaluates || checkpoints) deliver(alerts);
        }
        s.handle_alerts(alerts, sink);
        // Data parallel: rank 0's watchers' switches to BF16 reach every rank at the next
        // boundary, unless this step evaluates or checkpoints (every rank knows which do):
        // then now, so that the evaluation and the checkpoint hold them as a single process's
        // do (it switches at once), and a checkpoint of this step resumes the run that went on.
        if (s.dp && (evaluates || checkpoints || last)) s.dp_apply_pending_switches(sink);
        summary.final_train_loss = m.train_loss;
        if (step - first_step >= timed_from) {
            timed_ms += ms;
            timed_loop_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            ++timed_steps;
        }
        if (evaluates && s.is_rank0()) evaluate(step);
        if (checkpoints && !last && s.is_rank0()) s.write_periodic_checkpoint(sink);
    }
    s.commands.close(); // also where no step was left to train
    deliver_now();
    // The final state is always kept, so a stopped run can be resumed. Rank 0's is every rank's.
    // Unless this state is the one the last checkpoint holds (a stop right after a periodic
    // one, with no precision change at the boundary between).
    const bool kept = s.checkpoint_written_at == step && !s.backends_changed;
    if (step > first_step && s.is_rank0() && !kept) s.write_periodic_checkpoint(sink);
    summary.steps_done = step;
    summary.mean_step_time_ms = timed_steps > 0 ? timed_ms / static_cast<double>(timed_steps) : 0.0;
    summary.mean_loop_time_ms = timed_steps > 0 ? timed_loop_ms / static_cast<double>(timed_steps) : 0.0;
    summary.tokens_per_s = summary.mean_step_time_ms > 0 ? tokens_per_step / (summary.mean_step_time_ms / 1000.0) : 0;
    if (s.device.is_cuda()) summary.peak_device_memory_bytes = read_memory(s.cuda_device()).cuda_peak_bytes;
    sink.on_event(event_at(step, summary.stopped_early ? EventKind::RunStopped : EventKind::RunFinished));
    return summary;
}

std::string Trainer::sample(const std::string& prompt, int64_t tokens, uint64_t seed)
{
    return impl_->sample(prompt, tokens, seed);
}

} // namespace mantissa
