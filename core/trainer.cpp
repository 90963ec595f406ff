// SPDX-License-Identifier: GPL-3.0-or-later
#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <sstream>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <unordered_map>

#include <torch/torch.h>

#include "adamw.h"
#include "command_queue.h"
#include "dataset.h"
#include "gpt_model.h"
#include "loss_scaler.h"
#include "device_memory.h"
#include "memory_model.h"
#include "safetensors_writer.h"
#include "watchers.h"

namespace mantissa {

std::vector<std::string> list_checkpoints(const std::string& dir)
{
    namespace fs = std::filesystem;
    std::vector<std::string> files;
    std::error_code ec;
    if (dir.empty() || !fs::is_directory(dir, ec)) return files;
    for (const auto& entry : fs::directory_iterator(dir))
        if (entry.path().filename().string().rfind("step-", 0) == 0 && entry.path().extension() == ".pt")
            files.push_back(entry.path().string());
    std::sort(files.begin(), files.end()); // zero-padded step numbers sort by name
    return files;
}

double learning_rate_at(const OptimizerConfig& o, int64_t step_index)
{
    if (step_index < o.warmup_steps)
        return o.learning_rate * static_cast<double>(step_index + 1) / static_cast<double>(o.warmup_steps + 1);
    if (step_index > o.decay_steps || o.decay_steps == o.warmup_steps) return o.min_learning_rate;
    const double ratio =
        static_cast<double>(step_index - o.warmup_steps) / static_cast<double>(o.decay_steps - o.warmup_steps);
    const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
    return o.min_learning_rate + coeff * (o.learning_rate - o.min_learning_rate);
}

namespace {

// Random windows of a token split. Offsets come from a dedicated generator so that the
// batch sequence depends only on the seed, not on what else consumed random numbers.
class BatchSampler {
public:
    BatchSampler(const std::vector<uint16_t>& tokens, int64_t batch_size, int64_t context_length, uint64_t seed)
        : tokens_(tokens), batch_size_(batch_size), context_length_(context_length),
          generator_(at::make_generator<at::CPUGeneratorImpl>(seed))
    {
    }

    // x (B, T) and y (B, T) = x shifted by one token.
    std::pair<torch::Tensor, torch::Tensor> next()
    {
        const int64_t B = batch_size_, T = context_length_;
        const auto max_start = static_cast<int64_t>(tokens_.size()) - T;
        const auto offsets = torch::randint(max_start, {B}, generator_, torch::kLong);
        auto x = torch::empty({B, T}, torch::kLong);
        auto y = torch::empty({B, T}, torch::kLong);
        auto* xp = x.data_ptr<int64_t>();
        auto* yp = y.data_ptr<int64_t>();
        const auto* op = offsets.data_ptr<int64_t>();
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < T; ++t) {
                xp[b * T + t] = tokens_[static_cast<size_t>(op[b] + t)];
                yp[b * T + t] = tokens_[static_cast<size_t>(op[b] + t + 1)];
            }
        return {x, y};
    }

    at::Generator& generator() { return generator_; }

private:
    const std::vector<uint16_t>& tokens_;
    int64_t batch_size_, context_length_;
    at::Generator generator_;
};

constexpr uint64_t kEvalSeedSalt = 0x5EEDE7A1ULL; // evaluation batches differ from training ones

} // namespace

struct Trainer::Impl {
    ProjectConfig config;
    TokenSplits data;
    Gpt model{nullptr};
    std::unique_ptr<AdamW> optimizer;
    LossScaler scaler;
    std::unique_ptr<BatchSampler> train_batches;
    int64_t step = 0; // optimizer steps done; a resumed run starts here
    Watchers watchers;
    std::vector<std::string> layer_order; // GEMM layers in forward order, for attribution
    CommandQueue commands;
    torch::Device device{torch::kCPU};
    int threads = 1;
    // Gradients by the layer that owns them, for naming the layers of a non-finite gradient.
    std::vector<std::pair<std::string, torch::Tensor>> params_by_layer;

    explicit Impl(ProjectConfig c) : config(std::move(c)), watchers(config.telemetry.watchers)
    {
        data = load_token_splits(config);
        threads = config.training.threads > 0 ? static_cast<int>(config.training.threads)
                                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        device = pick_device(config.training.device);
        // Initialise on the CPU generator so a seed gives the same weights on every device.
        torch::manual_seed(config.training.seed);
        model = Gpt(config.model, data.vocabulary.size(), config.precision);
        model->to(device);
        std::vector<torch::Tensor> decayed, undecayed;
        for (auto& item : model->named_parameters()) {
            auto& p = item.value();
            (p.dim() >= 2 ? decayed : undecayed).push_back(p);
            const auto& name = item.key();
            const auto dot = name.rfind('.');
            params_by_layer.emplace_back(dot == std::string::npos ? name : name.substr(0, dot), p);
        }
        optimizer = std::make_unique<AdamW>(decayed, undecayed, config.optimizer);
        bool any_fp16 = false;
        for (const auto& g : model->gemm_layers()) {
            const auto f = g->formats();
            any_fp16 |= f.forward == NumberFormat::FP16 || f.dgrad == NumberFormat::FP16 || f.wgrad == NumberFormat::FP16;
        }
        scaler = LossScaler(resolve_loss_scaling(config.precision, any_fp16));
        for (const auto& g : model->gemm_layers()) layer_order.push_back(g->name());
        train_batches = std::make_unique<BatchSampler>(data.train, config.training.batch_size,
                                                       config.model.context_length, config.training.seed);
    }

    void save_checkpoint(const std::string& path)
    {
        namespace fs = std::filesystem;
        torch::serialize::OutputArchive archive;
        archive.write("format_version", torch::tensor(int64_t(1)));
        archive.write("step", torch::tensor(step));
        for (const auto& item : model->named_parameters()) archive.write("model/" + item.key(), item.value());
        optimizer->save(archive);
        const auto sc = scaler.state();
        archive.write("scaler", torch::tensor({sc.scale, static_cast<double>(sc.growth_tracker),
                                               static_cast<double>(sc.overflows_left)},
                                              torch::kFloat64));
        for (const auto& g : model->gemm_layers()) g->save(archive);
        archive.write("rng/global", at::detail::getDefaultCPUGenerator().get_state());
        archive.write("rng/train_batches", train_batches->generator().get_state());
        const fs::path target(path);
        if (target.has_parent_path()) fs::create_directories(target.parent_path());
        const fs::path temporary = target.string() + ".tmp";
        archive.save_to(temporary.string());
        fs::rename(temporary, target); // atomic on POSIX: a crash leaves the old file or the new one
    }

    void load_checkpoint(const std::string& path)
    {
        torch::serialize::InputArchive archive;
        // A fresh tensor per key: reading into a used one would try to resize the archive's storage.
        auto get = [&](const std::string& key) {
            torch::Tensor t;
            archive.read(key, t);
            return t;
        };
        try {
            archive.load_from(path);
            if (get("format_version").item<int64_t>() != 1)
                throw ConfigError("checkpoint '" + path + "' has an unknown format version");
            torch::NoGradGuard no_grad;
            for (auto& item : model->named_parameters()) {
                const auto t = get("model/" + item.key());
                if (!t.sizes().equals(item.value().sizes()))
                    throw ConfigError("checkpoint '" + path + "' does not fit this model (" + item.key() + ")");
                item.value().copy_(t);
            }
            optimizer->load(archive);
            const auto sc = get("scaler");
            scaler.restore({sc[0].item<double>(), static_cast<int64_t>(sc[1].item<double>()),
                            static_cast<int64_t>(sc[2].item<double>())});
            for (const auto& g : model->gemm_layers()) g->load(archive);
            at::Generator global = at::detail::getDefaultCPUGenerator(); // a handle to the shared generator
            global.set_state(get("rng/global"));
            train_batches->generator().set_state(get("rng/train_batches"));
            step = get("step").item<int64_t>();
        } catch (const ConfigError&) {
            throw;
        } catch (const std::exception& e) {
            const std::string what = e.what();
            throw ConfigError("checkpoint '" + path + "' cannot be read: " + what.substr(0, what.find('\n')));
        }
    }

    // step-00000100.pt in training.checkpoint_dir, keeping the newest checkpoint_keep.
    std::string write_periodic_checkpoint(TelemetrySink& sink)
    {
        namespace fs = std::filesystem;
        const auto& dir = config.training.checkpoint_dir;
        if (dir.empty()) return {};
        char name[32];
        std::snprintf(name, sizeof name, "step-%08lld.pt", static_cast<long long>(step));
        const std::string path = (fs::path(dir) / name).string();
        save_checkpoint(path);
        auto existing = list_checkpoints(dir);
        for (size_t i = 0; i + static_cast<size_t>(config.training.checkpoint_keep) < existing.size(); ++i)
            fs::remove(existing[i]);
        sink.on_event({step, "checkpoint", path});
        return path;
    }

    void arm_telemetry(bool armed)
    {
        for (const auto& g : model->gemm_layers()) g->arm_telemetry(armed);
        model->measure_log_z(armed);
    }

    void scale_gradients(double factor)
    {
        torch::NoGradGuard no_grad;
        std::vector<torch::Tensor> grads;
        for (const auto& [layer, p] : params_by_layer)
            if (p.grad().defined()) grads.push_back(p.grad());
        at::_foreach_mul_(grads, factor);
    }

    // Gradient L2 norm of every parameter-owning layer, forward order, one sync for all.
    std::vector<std::pair<std::string, double>> layer_grad_norms()
    {
        torch::NoGradGuard no_grad;
        std::vector<torch::Tensor> grads;
        std::vector<size_t> owner;
        std::vector<std::pair<std::string, double>> out;
        for (const auto& [layer, p] : params_by_layer) {
            if (!p.grad().defined()) continue;
            if (out.empty() || out.back().first != layer) out.emplace_back(layer, 0.0);
            grads.push_back(p.grad());
            owner.push_back(out.size() - 1);
        }
        if (grads.empty()) return out;
        const auto norms = torch::stack(at::_foreach_norm(grads)).to(torch::kFloat64).cpu();
        const auto* n = norms.data_ptr<double>();
        for (size_t i = 0; i < owner.size(); ++i) out[owner[i]].second += n[i] * n[i];
        for (auto& item : out) item.second = std::sqrt(item.second);
        return out;
    }

    // Runs the watchers' verdicts: events, and the optional actions.
    void handle_alerts(const std::vector<WatchAlert>& alerts, TelemetrySink& sink)
    {
        for (const auto& a : alerts) {
            sink.on_event({a.step, "alert_" + a.watcher, (a.layer.empty() ? "" : a.layer + ": ") + a.message});
            if (a.action == WatchAction::Pause) {
                commands.push({Command::Kind::Pause, {}, {}});
                sink.on_event({a.step, "watch_action", a.watcher + ": pausing training"});
            } else if (a.action == WatchAction::SwitchToBf16 && !a.layer.empty()) {
                const GemmFormats bf16{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16};
                const auto changed = set_layer_formats(a.layer, bf16);
                if (!changed.empty())
                    sink.on_event({a.step, "watch_action", a.watcher + ": switched " + a.layer + " to bf16"});
            }
        }
    }

    static torch::Device pick_device(const std::string& wanted)
    {
        if (wanted == "cuda") {
            if (!torch::cuda::is_available())
                throw ConfigError("training.device: 'cuda' was asked for, but this LibTorch has no CUDA device");
            return torch::kCUDA;
        }
        if (wanted == "auto" && torch::cuda::is_available()) return torch::kCUDA;
        return torch::kCPU;
    }

    // Divides the gradients by the loss scale and names the layers whose gradients are not
    // finite (in forward order of registration). Empty when all are finite.
    std::vector<std::string> unscale_and_check(double scale)
    {
        torch::NoGradGuard no_grad;
        std::vector<std::string> bad;
        for (auto& [layer, p] : params_by_layer) {
            auto& g = p.mutable_grad();
            if (!g.defined()) continue;
            if (scale != 1.0) g.mul_(1.0 / scale);
            if (!torch::isfinite(g).all().item<bool>() &&
                (bad.empty() || bad.back() != layer))
                bad.push_back(layer);
        }
        return bad;
    }

    // Applies a live precision change; returns the layers it touched.
    std::vector<std::string> set_layer_formats(const std::string& pattern, const GemmFormats& formats)
    {
        std::vector<std::string> changed;
        for (auto& g : model->gemm_layers()) {
            if (!glob_match(pattern, g->name())) continue;
            g->set_formats(formats);
            changed.push_back(g->name());
        }
        return changed;
    }

    double estimate_loss(const std::vector<uint16_t>& split)
    {
        torch::NoGradGuard no_grad;
        model->eval();
        BatchSampler sampler(split, config.training.batch_size, config.model.context_length,
                             config.training.seed ^ kEvalSeedSalt);
        double total = 0.0;
        for (int64_t i = 0; i < config.eval.batches; ++i) {
            auto [x, y] = sampler.next();
            x = x.to(device);
            y = y.to(device);
            total += model->loss(model->forward(x), y).item<double>();
        }
        model->train();
        return total / static_cast<double>(config.eval.batches);
    }

    // Returns false when a Stop arrived. Blocks while paused.
    bool apply_commands(TelemetrySink& sink, int64_t step)
    {
        bool paused = false;
        while (true) {
            auto command = paused ? std::optional<Command>(commands.wait_pop()) : commands.try_pop();
            if (!command) return true;
            switch (command->kind) {
            case Command::Kind::Stop:
                return false;
            case Command::Kind::Pause:
                if (!paused) sink.on_event({step, "paused", "training paused"});
                paused = true;
                break;
            case Command::Kind::Resume:
                if (paused) sink.on_event({step, "resumed", "training resumed"});
                if (paused) return true;
                break;
            case Command::Kind::Checkpoint:
                if (config.training.checkpoint_dir.empty())
                    sink.on_event({step, "checkpoint_skipped", "no training.checkpoint_dir set"});
                else
                    write_periodic_checkpoint(sink);
                break;
            case Command::Kind::SetLayerFormats: {
                const auto changed = set_layer_formats(command->layer_pattern, command->formats);
                std::string names;
                for (const auto& n : changed) names += (names.empty() ? "" : ", ") + n;
                sink.on_event({step, "precision_changed",
                               command->layer_pattern + " -> " + command->formats.describe() + " (" + names +
                                   "); FP8 scale history restarted"});
                break;
            }
            }
        }
    }
};

Trainer::Trainer(ProjectConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Trainer::~Trainer() = default;

void Trainer::request_pause() { impl_->commands.push({Command::Kind::Pause, {}, {}}); }
void Trainer::request_resume() { impl_->commands.push({Command::Kind::Resume, {}, {}}); }
void Trainer::request_stop() { impl_->commands.push({Command::Kind::Stop, {}, {}}); }
void Trainer::request_checkpoint() { impl_->commands.push({Command::Kind::Checkpoint, {}, {}}); }
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

void Trainer::set_checkpoint_dir(const std::string& dir) { impl_->config.training.checkpoint_dir = dir; }

void Trainer::request_layer_formats(const std::string& layer_pattern, const GemmFormats& formats)
{
    // Layer names never change after construction, so matching here is thread-safe.
    bool any = false;
    for (const auto& g : impl_->model->gemm_layers()) any |= glob_match(layer_pattern, g->name());
    if (!any) throw ConfigError("no layer matches '" + layer_pattern + "'");
    impl_->commands.push({Command::Kind::SetLayerFormats, layer_pattern, formats});
}

std::vector<LayerInfo> Trainer::layers() const
{
    std::vector<LayerInfo> out;
    for (const auto& g : impl_->model->gemm_layers()) out.push_back({g->name(), g->formats(), g->backend_used()});
    return out;
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
        << impl_->threads << " threads; device " << (impl_->device.is_cuda() ? "cuda" : "cpu") << "; precision "
        << c.precision.preset;
    if (impl_->scaler.enabled()) out << ", loss scale " << impl_->scaler.scale();
    return out.str();
}

RunSummary Trainer::run(TelemetrySink& sink)
{
    Impl& s = *impl_;
    const auto& cfg = s.config;
    torch::set_num_threads(s.threads);
    s.model->train();
    BatchSampler& train_batches = *s.train_batches;
    const double tokens_per_step =
        static_cast<double>(cfg.training.batch_size * cfg.model.context_length * cfg.training.grad_accum);

    RunSummary summary;
    sink.on_event({0, "run_started", describe()});
    {
        // What this recipe needs on a GPU, before anything is allocated.
        const auto mem = estimate_memory(cfg, s.data.vocabulary.size());
        auto mib = [](int64_t b) { return std::to_string((b + (1 << 19)) >> 20) + " MiB"; };
        auto kib = [](int64_t b) { return std::to_string((b + 512) >> 10) + " KiB"; };
        auto size = [&](int64_t b) { return b >= (int64_t(1) << 24) ? mib(b) : kib(b); };
        sink.on_event({0, "memory_estimate",
                       "master weights " + size(mem.master_weights_bytes) + ", low-precision copies " +
                           size(mem.low_precision_weights_bytes) + ", gradients " + size(mem.gradients_bytes) +
                           ", optimizer state " + size(mem.optimizer_state_bytes) + ", activations " +
                           size(mem.activations_bytes) + "; total " + size(mem.total_bytes())});
    }
    auto evaluate = [&](int64_t step) {
        EvalMetrics m;
        m.step = step;
        m.val_loss = s.estimate_loss(s.data.val);
        m.train_loss = s.estimate_loss(s.data.train);
        summary.final_val_loss = m.val_loss;
        sink.on_eval(m);
        if (cfg.eval.sample_tokens > 0)
            sink.on_event({step, "sample", sample("", cfg.eval.sample_tokens, cfg.training.seed + static_cast<uint64_t>(step))});
    };
    int64_t& step = s.step; // continues from a loaded checkpoint
    if (step > 0) sink.on_event({step, "resumed_from_checkpoint", "continuing at step " + std::to_string(step)});
    if (cfg.eval.interval > 0 && step == 0) evaluate(0);

    // Steps before this one are warm-up (allocator, caches) and stay out of the mean.
    const int64_t timed_from = std::min<int64_t>(10, cfg.training.steps / 10) + 1;
    double timed_ms = 0.0;
    int64_t timed_steps = 0;
    const int64_t first_step = step;
    while (step < cfg.training.steps) {
        if (!s.apply_commands(sink, step)) {
            summary.stopped_early = true;
            break;
        }
        const auto t0 = std::chrono::steady_clock::now();
        const double lr = learning_rate_at(cfg.optimizer, step);
        const double loss_scale = s.scaler.scale();
        const int64_t interval = cfg.telemetry.interval;
        // The schedule depends on the step alone, so a resumed run observes the same steps as
        // an uninterrupted one (telemetry never changes a step, but its frames should match too).
        const bool armed = interval > 0 && (step == 0 || (step + 1) % interval == 0);
        if (armed) s.arm_telemetry(true);
        double loss_sum = 0.0;
        for (int64_t micro = 0; micro < cfg.training.grad_accum; ++micro) {
            auto [x, y] = train_batches.next();                 // (B, T) each
            x = x.to(s.device);
            y = y.to(s.device);
            auto loss = s.model->loss(s.model->forward(x), y);  // scalar
            // The scale multiplies the loss so that small gradients survive FP16's range.
            ((loss * loss_scale) / static_cast<double>(cfg.training.grad_accum)).backward();
            loss_sum += loss.item<double>();
            if (armed && micro == 0) s.arm_telemetry(false); // statistics of the first micro-batch
        }
        std::unordered_map<std::string, torch::Tensor> weights_before; // for the update/weight ratio
        if (armed) {
            torch::NoGradGuard no_grad;
            for (const auto& g : s.model->gemm_layers())
                if (g->last_weight().defined()) weights_before[g->name()] = g->last_weight().detach().clone();
        }
        std::vector<WatchAlert> alerts;
        bool skipped = false;
        if (s.scaler.enabled()) {
            const auto bad_layers = s.unscale_and_check(loss_scale);
            const auto outcome = s.scaler.update(!bad_layers.empty());
            skipped = !bad_layers.empty();
            std::string names;
            for (const auto& n : bad_layers) names += (names.empty() ? "" : ", ") + n;
            if (outcome == LossScaler::Outcome::SkippedAndBackedOff)
                sink.on_event({step + 1, "loss_scale_backoff",
                               "scale " + std::to_string(loss_scale) + " -> " + std::to_string(s.scaler.scale()) +
                                   "; non-finite gradients in " + names});
            else if (outcome == LossScaler::Outcome::Skipped)
                sink.on_event({step + 1, "step_skipped", "non-finite gradients in " + names});
            else if (outcome == LossScaler::Outcome::Grew)
                sink.on_event({step + 1, "loss_scale_growth",
                               "scale " + std::to_string(loss_scale) + " -> " + std::to_string(s.scaler.scale())});
            if (s.scaler.mode() == LossScalingMode::Dynamic)
                alerts = s.watchers.on_loss_scale(step + 1, s.scaler.scale(),
                                                  outcome == LossScaler::Outcome::SkippedAndBackedOff);
        }
        auto layer_norms = s.layer_grad_norms();
        double grad_norm = 0.0;
        if (skipped) {
            ++summary.skipped_steps;
            grad_norm = std::numeric_limits<double>::quiet_NaN();
        } else {
            // The global norm follows from the per-layer norms already measured; clipping then
            // scales every gradient as clip_grad_norm_ does (coefficient max/(norm + 1e-6), at most 1).
            double sum_sq = 0.0;
            for (const auto& [layer, norm] : layer_norms) sum_sq += norm * norm;
            grad_norm = std::sqrt(sum_sq);
            if (cfg.optimizer.grad_clip > 0.0) {
                const double coef = cfg.optimizer.grad_clip / (grad_norm + 1e-6);
                if (coef < 1.0) s.scale_gradients(coef);
            }
            s.optimizer->step(lr);
            for (const auto& g : s.model->gemm_layers()) g->invalidate_weight_cache();
        }
        s.optimizer->zero_grad();
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        ++step;
        if (step == first_step + 1) {
            // Which backend each layer actually ran on, once they have all run.
            std::string text;
            for (const auto& g : s.model->gemm_layers())
                text += (text.empty() ? "" : "; ") + g->name() + " " + g->formats().describe() + " " + g->backend_used();
            sink.on_event({step, "layer_backends", text});
        }

        StepMetrics m;
        m.step = step;
        m.train_loss = loss_sum / static_cast<double>(cfg.training.grad_accum);
        m.learning_rate = lr;
        m.grad_norm = grad_norm;
        m.step_time_ms = ms;
        m.tokens_per_s = tokens_per_step / (ms / 1000.0);
        m.loss_scale = loss_scale;
        m.skipped = skipped;
        m.layer_grad_norms = std::move(layer_norms);
        sink.on_step(m);
        for (auto& a : s.watchers.on_step(m)) alerts.push_back(std::move(a));
        if (armed) {
            LayerStatsFrame frame;
            frame.step = step;
            for (const auto& g : s.model->gemm_layers()) {
                for (auto& t : g->take_stats()) {
                    if (t.role == "weight") {
                        const auto it = weights_before.find(g->name());
                        if (it != weights_before.end() && !skipped) {
                            const auto& before = it->second;
                            const double w_rms = before.square().mean().sqrt().item<double>();
                            const double u_rms = (g->last_weight().detach() - before).square().mean().sqrt().item<double>();
                            t.update_ratio = w_rms > 0 ? u_rms / w_rms : 0.0;
                        }
                    }
                    frame.tensors.push_back(std::move(t));
                }
                if (g->attention_max_logit() >= 0) {
                    const auto& n = g->name();
                    frame.attention_max_logit.emplace_back(n.substr(0, n.size() - std::string(".sdpa").size()),
                                                           g->attention_max_logit());
                }
            }
            frame.log_z_mean = s.model->log_z_mean();
            frame.log_z_max = s.model->log_z_max();
            frame.memory = read_memory(s.device.is_cuda());
            sink.on_layer_stats(frame);
            for (auto& a : s.watchers.on_frame(frame, s.layer_order)) alerts.push_back(std::move(a));
        }
        s.handle_alerts(alerts, sink);
        summary.final_train_loss = m.train_loss;
        if (step - first_step >= timed_from) {
            timed_ms += ms;
            ++timed_steps;
        }
        const bool last = step == cfg.training.steps;
        if ((cfg.eval.interval > 0 && step % cfg.eval.interval == 0) || last) evaluate(step);
        if (cfg.training.checkpoint_interval > 0 && step % cfg.training.checkpoint_interval == 0 && !last)
            s.write_periodic_checkpoint(sink);
    }
    // The final state is always kept, so a stopped run can be resumed.
    if (step > first_step) s.write_periodic_checkpoint(sink);
    summary.steps_done = step;
    summary.mean_step_time_ms = timed_steps > 0 ? timed_ms / static_cast<double>(timed_steps) : 0.0;
    summary.tokens_per_s = summary.mean_step_time_ms > 0 ? tokens_per_step / (summary.mean_step_time_ms / 1000.0) : 0;
    sink.on_event({step, summary.stopped_early ? "run_stopped" : "run_finished",
                   summary.stopped_early ? "stopped at step " + std::to_string(step)
                                         : "finished " + std::to_string(step) + " steps"});
    return summary;
}

std::string Trainer::sample(const std::string& prompt, int64_t tokens, uint64_t seed)
{
    Impl& s = *impl_;
    torch::NoGradGuard no_grad;
    s.model->eval();
    std::vector<int64_t> ids;
    if (!prompt.empty()) {
        ids = s.data.vocabulary.encode(prompt);
    } else {
        try {
            ids = s.data.vocabulary.encode("\n"); // text models start a fresh line
        } catch (const ConfigError&) {
            ids = {0}; // token files have no tokenizer here
        }
    }
    const size_t prompt_len = ids.size();
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    const int64_t T = s.config.model.context_length;
    for (int64_t i = 0; i < tokens; ++i) {
        const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - T);
        auto context = torch::tensor(std::vector<int64_t>(ids.begin() + start, ids.end()), torch::kLong)
                           .unsqueeze(0)
                           .to(s.device);
        auto logits = s.model->forward(context).select(1, -1).squeeze(0).cpu() / s.config.eval.sample_temperature; // (V)
        if (s.config.eval.sample_top_k > 0 && s.config.eval.sample_top_k < logits.size(0)) {
            const auto kth = std::get<0>(logits.topk(s.config.eval.sample_top_k)).min();
            logits = logits.masked_fill(logits < kth, -std::numeric_limits<double>::infinity());
        }
        const auto probs = torch::softmax(logits, 0);
        ids.push_back(torch::multinomial(probs, 1, false, generator).item<int64_t>());
    }
    s.model->train();
    return s.data.vocabulary.decode(std::vector<int64_t>(ids.begin() + static_cast<long>(prompt_len), ids.end()));
}

} // namespace mantissa
