// SPDX-License-Identifier: GPL-3.0-or-later
// The Trainer as one rank of a data-parallel job (docs/DISTRIBUTED.md): the start from rank
// 0's state, the micro-batch shard, what is reduced after the backward (FP8 amaxes with MAX,
// gradients and loss with SUM), the commands every rank applies at the same step boundary,
// per-rank timing, and failure reports.
#include "trainer_impl.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>

#include "data_parallel_impl.h"
#include "first_line.h"

namespace mantissa {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// A NaN amax (stored as given in the history) travels as -1 so that MAX keeps the other
// ranks' finite amaxes, with fmax's semantics, as the history's own reduction does.
constexpr float kNanAmax = -1.0f;

std::string encode_commands(const std::vector<Command>& commands)
{
    std::ostringstream out;
    for (const auto& c : commands)
        out << static_cast<int>(c.kind) << ' ' << static_cast<int>(c.formats.forward) << ' '
            << static_cast<int>(c.formats.dgrad) << ' ' << static_cast<int>(c.formats.wgrad) << ' '
            << static_cast<int>(c.cause) << ' ' << (c.scaling ? static_cast<int>(*c.scaling) : -1) << ' '
            << c.layer_pattern.size() << ' ' << c.layer_pattern << ' ' << c.watcher.size() << ' ' << c.watcher << '\n';
    return out.str();
}

std::vector<Command> decode_commands(const std::string& text)
{
    std::vector<Command> out;
    std::istringstream in(text);
    auto read_string = [&in] {
        size_t n = 0;
        in >> n;
        in.get(); // the blank
        std::string s(n, '\0');
        in.read(s.data(), static_cast<std::streamsize>(n));
        return s;
    };
    int kind = 0, forward = 0, dgrad = 0, wgrad = 0, cause = 0, scaling = -1;
    while (in >> kind >> forward >> dgrad >> wgrad >> cause >> scaling) {
        Command c{static_cast<Command::Kind>(kind), {}, {}};
        c.formats = {static_cast<NumberFormat>(forward), static_cast<NumberFormat>(dgrad),
                     static_cast<NumberFormat>(wgrad)};
        c.cause = static_cast<ChangeCause>(cause);
        if (scaling >= 0) c.scaling = static_cast<Fp8Scaling>(scaling);
        c.layer_pattern = read_string();
        c.watcher = read_string();
        out.push_back(std::move(c));
    }
    return out;
}

void fnv1a(uint64_t& h, const void* data, size_t n)
{
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
}

} // namespace

void Trainer::Impl::dp_begin_run()
{
    if (!dp) return;
    if (!dp->started())
        dp->start(device.is_cuda(), std::chrono::seconds(config.training.collective_timeout_s));
    const char* skip = std::getenv("MANTISSA_DP_SKIP_AMAX_REDUCTION");
    reduce_amax = !(skip && std::string(skip) == "1");
    // Rank 0's whole state, as a checkpoint in memory: a fresh run's weights (all ranks drew
    // them from the same seed, but only rank 0's count) and a resumed run's everything.
    const std::string state = dp->impl().broadcast_bytes(is_rank0() ? serialize_state() : std::string());
    if (!is_rank0()) {
        std::istringstream in(state);
        load_state(in, "rank 0's state");
    }
    // The buckets are bucketed by parameter, so they are built once the parameters are final.
    grad_buckets.reset(); // first: its destructor takes the hooks off the parameters
    grad_buckets = std::make_unique<GradientBuckets>(
        model->parameters(), static_cast<int64_t>(config.training.dp_bucket_mb * 1024 * 1024),
        [this](torch::Tensor& flat) { return dp->impl().allreduce_sum_async(flat); });
    // Dropout needs nothing here: each micro-batch seeds its own masks (seed_dropout), so rank r
    // draws for micro-batch r what the single process draws for it.
}

bool Trainer::Impl::dp_owns_micro_batch(int64_t micro) const
{
    return !dp || micro % dp->world_size() == dp->rank();
}

void Trainer::Impl::dp_before_backward(int64_t micro)
{
    // This rank's micro-batches are r, r + W, ...: the last is the one with none after it.
    if (dp && micro + dp->world_size() >= config.training.grad_accum) grad_buckets->arm();
}

void Trainer::Impl::dp_fp8_begin_step()
{
    fp8_journals.clear();
    device_fp8_journals.clear();
    if (!dp || !reduce_amax) return;
    for (const auto& g : model->gemm_layers()) {
        if (g->recipe().scaling != Fp8Scaling::Delayed || !g->formats().any_fp8()) continue;
        const bool on_device = g->scales_on_device(device);
        for (int product = 0; product < g->scaling_products(); ++product) // attention: both products'
            for (auto role : kOperandRoles)
                for (auto format : kFp8Formats) {
                    // Per-tensor casts record into the device mirror in the native executor and
                    // on a GPU (LayerGemm::scales_on_device), otherwise into the host state. Only
                    // the state in use is journaled: a mirror made here and never recorded into
                    // would be written back over the live host state at the next checkpoint.
                    if (on_device) {
                        auto& d = g->device_delayed(role, format, product, device);
                        d.begin_journal();
                        device_fp8_journals.push_back(&d);
                    } else {
                        auto& d = g->delayed(role, format, product);
                        d.begin_journal();
                        fp8_journals.push_back(&d);
                    }
                }
    }
}

double Trainer::Impl::dp_reduce_step(torch::Tensor& loss_sum, int& overlapped_buckets)
{
    if (!dp) return 0.0;
    torch::NoGradGuard no_grad;
    const auto t0 = Clock::now();
    auto& group = dp->impl();

    // Gradients first: their buckets were issued during the backward (or are now), and every
    // rank must issue its collectives in one order. Each rank's backward already divided by
    // the global grad_accum, so the sum is the single process's accumulated gradient; with
    // two ranks a + b is bitwise the single process's a + b.
    overlapped_buckets = grad_buckets->finish();

    // FP8 delayed scaling, as TransformerEngine's amax reduction: each record of this step
    // is replayed from the state before the step with the MAX of the ranks' amaxes, so the
    // histories and scales stay equal on every rank. Every rank recorded as often (the same
    // code ran), so the records line up.
    if (!fp8_journals.empty()) {
        std::vector<float> amaxes;
        for (const auto* d : fp8_journals)
            for (const auto& r : d->journal()) amaxes.push_back(std::isnan(r.amax) ? kNanAmax : r.amax);
        auto reduced = torch::tensor(amaxes, torch::kFloat32);
        if (!amaxes.empty()) group.allreduce_max(reduced);
        const float* a = reduced.data_ptr<float>();
        for (auto* d : fp8_journals) {
            std::vector<float> mine(a, a + d->journal().size());
            a += mine.size();
            for (float& m : mine)
                if (m == kNanAmax) m = std::numeric_limits<float>::quiet_NaN();
            d->replay(mine);
        }
        fp8_journals.clear();
    }

    // The same for the device mirrors, without leaving the device: one MAX over the
    // concatenated journals (NCCL reduces device tensors), then each replays its slice.
    if (!device_fp8_journals.empty()) {
        std::vector<torch::Tensor> parts;
        for (auto* d : device_fp8_journals) parts.push_back(d->journal_amaxes());
        auto reduced = torch::cat(parts);
        if (reduced.numel() > 0) group.allreduce_max_on_device(reduced);
        int64_t offset = 0;
        for (auto* d : device_fp8_journals) {
            const auto n = static_cast<int64_t>(d->journal_size());
            d->replay(reduced.narrow(0, offset, n));
            offset += n;
        }
        device_fp8_journals.clear();
    }
    // FP64: l0 + l1, as the single process adds them. The step's one host wait on the
    // collectives: on NCCL the ones above only ordered the stream, and this one queues behind them.
    group.allreduce_sum(loss_sum);
    return ms_since(t0);
}

std::optional<Command> Trainer::Impl::dp_next_command(bool paused)
{
    // Every rank calls this equally often: what it decides on (the synced commands, `paused`)
    // is the same everywhere, since it comes from rank 0's broadcast.
    std::deque<Command>& synced = dp_synced_commands;
    // Paused, rank 0 tells the others it is still here well within the collective timeout.
    const auto alive_every = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(1000), std::chrono::milliseconds(config.training.collective_timeout_s * 1000 / 4));
    while (synced.empty()) {
        std::string mine;
        std::vector<Command> drained = std::move(pending_switches); // the watchers' first
        pending_switches.clear(); // on every rank: only rank 0's count
        if (is_rank0()) {
            while (auto c = commands.try_pop()) drained.push_back(*c);
            // Paused: wait for a command a while, then tell the others we are still here.
            if (drained.empty() && paused)
                if (auto c = commands.wait_pop_for(alive_every)) drained.push_back(*c);
            mine = encode_commands(drained);
        }
        for (auto& c : decode_commands(dp->impl().control_broadcast_bytes(mine))) synced.push_back(std::move(c));
        if (synced.empty() && !paused) return std::nullopt;
    }
    Command c = std::move(synced.front());
    synced.pop_front();
    return c;
}

void Trainer::Impl::dp_apply_pending_switches(TelemetrySink& sink)
{
    const std::string mine = is_rank0() ? encode_commands(pending_switches) : std::string();
    pending_switches.clear(); // on every rank: only rank 0's count
    for (const auto& c : decode_commands(dp->impl().control_broadcast_bytes(mine))) apply_layer_formats(c, sink);
}

bool Trainer::Impl::dp_close_commands_if_empty()
{
    // What a Resume left behind it in the last broadcast goes first (the same on every rank).
    if (!dp_synced_commands.empty()) return false;
    // "" (closed, the usual answer) costs one collective, the length's.
    const std::string mine = is_rank0() && !commands.close_if_empty() ? "open" : std::string();
    return dp->impl().control_broadcast_bytes(mine).empty();
}

void Trainer::Impl::dp_gather_times(double step_ms, double allreduce_ms, int overlapped_buckets, StepMetrics& metrics)
{
    if (!dp) return;
    const int w = dp->world_size(), r = dp->rank();
    auto times = torch::zeros({2 * w}, torch::kFloat64);
    times[2 * r] = step_ms;
    times[2 * r + 1] = allreduce_ms;
    dp->impl().control_allreduce_sum(times);
    if (!is_rank0()) return;
    const double* t = times.data_ptr<double>();
    metrics.extra_scalars.emplace_back("dp/allreduce_ms", t[1]);
    metrics.extra_scalars.emplace_back("dp/allreduce_share", t[0] > 0 ? t[1] / t[0] : 0.0);
    // Rank 0's: every rank buckets alike, and the count shows the overlap at work.
    metrics.extra_scalars.emplace_back("dp/overlapped_buckets", static_cast<double>(overlapped_buckets));
    for (int i = 0; i < w; ++i) {
        metrics.extra_scalars.emplace_back("dp/step_ms/rank_" + std::to_string(i), t[2 * i]);
        metrics.extra_scalars.emplace_back("dp/allreduce_ms/rank_" + std::to_string(i), t[2 * i + 1]);
    }
}

TelemetryStep::RankReduction Trainer::Impl::dp_rank_reduction()
{
    TelemetryStep::RankReduction r;
    r.world_size = dp->world_size();
    r.sum = [this](torch::Tensor& t) { dp->impl().allreduce_sum(t); };
    r.max = [this](torch::Tensor& t) { dp->impl().allreduce_max(t); };
    return r;
}

void Trainer::Impl::dp_fail(const std::exception& error)
{
    // However it ends, a peer of rank 0 has done with the store once it leaves here: rank 0,
    // which may host it, waits for that (DataParallel::acknowledge_failure) before it exits.
    struct Acknowledge {
        DataParallel& dp;
        ~Acknowledge()
        {
            if (dp.rank() != 0) dp.acknowledge_failure();
        }
    } acknowledge{*dp};
    const std::string what = first_line(error);
    const std::string me = "rank " + std::to_string(dp->rank());
    if (dynamic_cast<const PeerRefused*>(&error) || dynamic_cast<const PeerNeverStarted*>(&error) ||
        dynamic_cast<const StoppedBeforeStart*>(&error))
        throw; // names the rank already
    if (!dynamic_cast<const CollectiveError*>(&error)) {
        // This rank's own failure: the others will see a collective fail; tell them why.
        dp->report_failure(what);
        if (!is_rank0()) throw; // the error as it was (a ConfigError stays one)
        // Rank 0 records the run: its own failure names the rank as a peer's does
        // ("data-parallel: rank 1: ..."), and a ConfigError stays one.
        const std::string named = "data-parallel: " + me + ": " + what;
        if (dynamic_cast<const ConfigError*>(&error)) throw ConfigError(named);
        throw std::runtime_error(named);
    }
    // A peer left. It may have said why before it went (it posts before its sockets close).
    if (const auto reason = dp->failure_reason(std::chrono::milliseconds(2000))) {
        const std::string said = "data-parallel: " + *reason;
        if (what == said) throw CollectiveError(said); // this rank read the reason already (its preflight)
        throw CollectiveError(said + " (" + me + " stopped with it: " + what + ")");
    }
    // This rank waited out the timeout: a peer is hung, or busy past it (rank 0 evaluating or
    // writing a checkpoint). Said for the others: a busy rank 0 would otherwise find only this
    // rank's sockets closed, and record that it lost this rank.
    if (static_cast<const CollectiveError&>(error).timed_out) {
        const std::string why = "waited longer than training.collective_timeout_s=" +
                                std::to_string(config.training.collective_timeout_s) +
                                " s for its peers (one is hung, or busy that long: an evaluation or a checkpoint "
                                "write?): " + what;
        dp->report_failure(why);
        throw CollectiveError("data-parallel: " + me + " " + why);
    }
    const std::string whom =
        dp->world_size() == 2 ? "rank " + std::to_string(1 - dp->rank()) : std::string("one of its peers");
    throw CollectiveError("data-parallel: " + me + " lost " + whom + ", which did not say why (killed, machine lost, "
                          "or no answer within training.collective_timeout_s=" +
                          std::to_string(config.training.collective_timeout_s) + "): " + what);
}

std::string Trainer::Impl::state_digest() const
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const auto& p : model->parameters()) {
        const auto host = p.detach().to(torch::kCPU).contiguous();
        fnv1a(h, host.data_ptr(), host.nbytes());
    }
    for (const auto& g : model->gemm_layers()) {
        g->sync_device_scaling_to_host(); // the state the step used, wherever it lives
        for (int product = 0; product < g->scaling_products(); ++product)
            for (auto role : kOperandRoles)
                for (auto format : kFp8Formats) {
                    const auto& d = g->delayed(role, format, product);
                    fnv1a(h, d.history().data(), d.history().size() * sizeof(float));
                    const float s = d.scale();
                    fnv1a(h, &s, sizeof s);
                }
    }
    const auto sc = scaler.state();
    fnv1a(h, &sc.scale, sizeof sc.scale);
    fnv1a(h, &sc.growth_tracker, sizeof sc.growth_tracker);
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
    return text;
}

} // namespace mantissa
