// SPDX-License-Identifier: GPL-3.0-or-later
// The launcher's environment, the rendezvous store and the process group. The only file that
// includes c10d's backend headers: ProcessGroupGloo.hpp needs gloo's headers (Debian's
// libgloo-dev; the wheel does not ship them) and ProcessGroupNCCL.hpp needs nccl.h (the
// nvidia-nccl wheel). CMake defines MANTISSA_DP_GLOO / MANTISSA_DP_NCCL only where they exist.
#include "data_parallel_impl.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>
#include <utility>

#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if MANTISSA_DP_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#if MANTISSA_DP_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "device_memory.h"
#include "first_line.h"
#include "project_config.h"

namespace mantissa {

namespace {

int parse_int(const EnvLookup& lookup, const std::string& name, int min_value)
{
    const auto text = lookup(name);
    if (!text) throw ConfigError("data-parallel launch: " + name + " is not set");
    int value = 0;
    const auto* end = text->data() + text->size();
    const auto [ptr, ec] = std::from_chars(text->data(), end, value);
    if (ec != std::errc() || ptr != end || value < min_value)
        throw ConfigError("data-parallel launch: " + name + "='" + *text + "' is not a whole number >= " +
                          std::to_string(min_value));
    return value;
}

} // namespace

std::optional<DistributedEnv> read_distributed_env(const EnvLookup& lookup)
{
    DistributedEnv env;
    const bool torchrun_style = lookup("RANK") || lookup("WORLD_SIZE");
    if (torchrun_style) {
        env.rank = parse_int(lookup, "RANK", 0);
        env.world_size = parse_int(lookup, "WORLD_SIZE", 1);
        env.local_rank = lookup("LOCAL_RANK") ? parse_int(lookup, "LOCAL_RANK", 0) : env.rank;
        env.launcher = lookup("TORCHELASTIC_RUN_ID") ? "torchrun" : "env";
    } else if (lookup("SLURM_STEP_ID") && lookup("SLURM_PROCID") && (lookup("SLURM_STEP_NUM_TASKS") || lookup("SLURM_NTASKS"))) {
        // Only a task that srun started (a job step: SLURM_STEP_ID). The batch script itself has
        // SLURM_PROCID=0 and the job's SLURM_NTASKS too, and a plain run there, outside srun,
        // would wait as rank 0 for peers that never come.
        env.world_size = parse_int(lookup, lookup("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS", 1);
        env.rank = parse_int(lookup, "SLURM_PROCID", 0);
        env.local_rank = lookup("SLURM_LOCALID") ? parse_int(lookup, "SLURM_LOCALID", 0) : 0;
        env.launcher = "slurm";
    } else {
        return std::nullopt;
    }
    if (env.rank >= env.world_size)
        throw ConfigError("data-parallel launch: rank " + std::to_string(env.rank) + " is not below the world size " +
                          std::to_string(env.world_size) + " (" + (env.launcher == "slurm" ? "SLURM_PROCID/SLURM_NTASKS" : "RANK/WORLD_SIZE") + ")");
    if (env.local_rank > env.rank && env.launcher != "slurm")
        throw ConfigError("data-parallel launch: LOCAL_RANK=" + std::to_string(env.local_rank) + " is above RANK=" +
                          std::to_string(env.rank));
    // One process (WORLD_SIZE=1, or one Slurm task): an ordinary run, with no rendezvous to name
    // (WORLD_SIZE=1 was refused for want of MASTER_ADDR).
    if (env.world_size == 1) return std::nullopt;
    const auto addr = lookup("MASTER_ADDR");
    if (!addr || addr->empty())
        throw ConfigError("data-parallel launch: MASTER_ADDR is not set (the host of rank 0, e.g. 127.0.0.1)");
    env.master_addr = *addr;
    env.master_port = parse_int(lookup, "MASTER_PORT", 1);
    if (env.master_port > 65535)
        throw ConfigError("data-parallel launch: MASTER_PORT=" + std::to_string(env.master_port) + " is not a port");
    const auto agent = lookup("TORCHELASTIC_USE_AGENT_STORE");
    env.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
    if (lookup("TORCHELASTIC_RESTART_COUNT")) env.restart_count = parse_int(lookup, "TORCHELASTIC_RESTART_COUNT", 0);
    return env;
}

std::optional<DistributedEnv> read_distributed_env()
{
    return read_distributed_env([](const std::string& name) -> std::optional<std::string> {
        const char* v = std::getenv(name.c_str());
        if (!v) return std::nullopt;
        return std::string(v);
    });
}

std::string data_parallel_backends()
{
    std::string out;
#if MANTISSA_DP_GLOO
    out = "gloo";
#endif
#if MANTISSA_DP_NCCL
    out += out.empty() ? "nccl" : ", nccl";
#endif
    return out;
}

class DataParallelBackend {
public:
    c10::intrusive_ptr<c10d::Store> store;     // this attempt's keys
    c10::intrusive_ptr<c10d::Store> job_store; // keys of every attempt
    c10::intrusive_ptr<c10d::Backend> group;
    // The control channel's group (commands, step times): a Gloo group of its own wherever the
    // build has Gloo, so that these host values never touch the GPU; else `group` itself.
    c10::intrusive_ptr<c10d::Backend> control;
    std::string name;
    bool cuda = false;
    std::chrono::milliseconds timeout{0}; // the collective timeout
    bool closed = false;                  // DataParallel::close ran
    bool acknowledged = false;            // acknowledge_failure ran: one arrival per rank
    // A bounded store call (within()) is still waiting for its answer: the store is not asked
    // again until it has one. Shared with that call's thread, which may outlive this.
    std::shared_ptr<std::atomic<bool>> store_call_waiting = std::make_shared<std::atomic<bool>>(false);
};

namespace {

// A device this build has no backend for: `what` says which ("on the CPU needs Gloo"), `remedy`
// what to do. Unused in a build that has both backends.
[[maybe_unused]] ConfigError missing_backend(const std::string& what, const std::string& remedy)
{
    const std::string built = data_parallel_backends();
    return ConfigError("data-parallel training " + what + ", and this build has none (" +
                       (built.empty() ? std::string("no backend") : built) + ")" + remedy);
}

std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string from_bytes(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// MANTISSA_DP_TRACE=1: one line on stderr per collective, naming its group and how the host
// waits for it, so that what a step sends where can be seen (and is tested).
bool tracing()
{
    static const bool on = [] {
        const char* v = std::getenv("MANTISSA_DP_TRACE");
        return v && std::string(v) == "1";
    }();
    return on;
}

void trace(const DataParallelBackend& b, bool control, const char* op, int64_t elements, const char* wait)
{
    if (!tracing()) return;
    const bool shared = b.control == b.group;
    std::fprintf(stderr, "mantissa-dp: %s group (%s) %s, %lld elements, %s\n",
                 control && !shared ? "control" : "main", control && !shared ? "gloo" : b.name.c_str(), op,
                 static_cast<long long>(elements), wait);
}

// How long a store call on the failure path, or a look for a posted failure, may take.
constexpr std::chrono::milliseconds kBoundedStoreCall{2000};

// `call(store)` on a thread of its own, waited for at most `wait`: its result (or its
// exception, rethrown), or none where it ran out. A host that stopped answering without closing
// its connections (rank 0 frozen, SIGSTOPped, cut off by a partition) leaves a TCPStore request
// in recv(2) for as long as TCP keeps the connection: minutes, past any collective timeout, and
// a follower reporting its failure hung until killed (read-only audit 'dpfail'). A call that ran
// out is left behind, detached, holding its own references. Until it has its answer the store
// is not asked again (none: at most one such thread), and then it is: a store slow for a moment
// on the NCCL path does not end the looks for a peer's failure for good.
template <class T>
std::optional<T> within(DataParallelBackend& b, std::chrono::milliseconds wait,
                        std::function<T(c10d::Store&)> call)
{
    if (b.store_call_waiting->exchange(true)) return std::nullopt;
    auto task = std::make_shared<std::packaged_task<T()>>(
        [store = b.store, waiting = b.store_call_waiting, call = std::move(call)] {
            // Cleared before the result is set: a caller that has it may ask the store again
            // at once (finish_rank reads rank 0's outcome, then says it read it).
            struct Clear {
                std::atomic<bool>& flag;
                ~Clear() { flag = false; }
            } clear{*waiting};
            return call(*store);
        });
    auto result = task->get_future();
    std::thread([task] { (*task)(); }).detach();
    if (result.wait_for(wait) != std::future_status::ready) return std::nullopt;
    return result.get();
}

// On the failure path the store's host may be gone, and c10d logs each call that finds it so
// as a warning with a 15-frame C++ backtrace ("recvValue failed ... Exception raised from
// recvBytes"): some 35 lines before this rank's own one-line error, which names the lost rank.
// The process is on its way out; its errors still print.
void quiet_store_warnings()
{
    FLAGS_caffe2_log_level = std::max<int>(FLAGS_caffe2_log_level, 2); // c10's ERROR
}

// What a failed rank posted to the store's "failure" key (DataParallel::report_failure), if any.
// A store that does not answer within kBoundedStoreCall says nothing: the collective's own
// timeout then decides.
std::optional<std::string> posted_failure(DataParallelBackend& b)
{
    try {
        return within<std::optional<std::string>>(b, kBoundedStoreCall, [](c10d::Store& store) {
                   if (!store.check({"failure"})) return std::optional<std::string>();
                   return std::optional<std::string>(from_bytes(store.get("failure")));
               }).value_or(std::nullopt);
    } catch (const std::exception&) {
        return std::string("the rendezvous store is gone with its host");
    }
}

// Whether a c10d error is a wait that ran out (Gloo's "Timed out waiting 1000ms for recv",
// TCPStore's "wait timeout after 1000ms"): c10d gives these no type of their own. Not any
// "timeout": Gloo's "Application timeout caused pair closure" is a peer that went.
bool says_timed_out(const std::exception& e)
{
    std::string lowered = first_line(e);
    std::transform(lowered.begin(), lowered.end(), lowered.begin(), [](unsigned char c) { return std::tolower(c); });
    return lowered.find("timed out") != std::string::npos || lowered.find("wait timeout") != std::string::npos;
}

// Waits for a collective; a peer that died, hung up or timed out becomes a CollectiveError.
// On NCCL the host waits itself (wait_for_collective), looking for a peer's posted failure; a
// NCCL peer that is gone is otherwise only noticed at the timeout.
void finish(DataParallelBackend& b, const c10::intrusive_ptr<c10d::Work>& work, const char* what, bool on_nccl)
{
    try {
        if (on_nccl) {
            const auto waited = wait_for_collective([&] { return work->isCompleted(); }, [&] { return posted_failure(b); },
                                                    [&] { b.group->abort(); }, b.timeout);
            if (waited.end == CollectiveWait::End::PeerFailed)
                throw CollectiveError(std::string(what) + " abandoned: " + waited.failure);
            // Completed: returns at once (and rethrows the collective's error). Timed out: a wait
            // with a timeout throws torch's timeout and aborts the communicator, whatever
            // TORCH_NCCL_BLOCKING_WAIT says (a user's 0 is kept).
            if (waited.end == CollectiveWait::End::TimedOut) {
                work->wait(b.timeout);
                b.group->abort();
                throw CollectiveError(std::string(what) + " timed out after " + std::to_string(b.timeout.count()) + " ms",
                                      true);
            }
        }
        work->wait();
    } catch (const CollectiveError&) {
        throw;
    } catch (const std::exception& e) {
        throw CollectiveError(std::string(what) + " failed: " + first_line(e), says_timed_out(e));
    }
}

// A collective whose result stays on the GPU (NCCL): the current stream waits for it, the host
// does not. Blocking-wait mode would otherwise hold the host in a sleep loop per collective
// (gradient buckets, the amax MAX) and drain the GPU. A peer that hangs still fails the step
// with the timeout: the loss SUM queues behind these on the same NCCL stream, and its wait is
// a host wait (finish). Where torch's synchronize() still blocks in that mode, nothing is lost.
void order_after(const c10::intrusive_ptr<c10d::Work>& work, const char* what)
{
    try {
        work->synchronize();
    } catch (const std::exception& e) {
        throw CollectiveError(std::string(what) + " failed: " + first_line(e), says_timed_out(e));
    }
}

} // namespace

CollectiveWait wait_for_collective(const std::function<bool()>& completed,
                                   const std::function<std::optional<std::string>()>& failure,
                                   const std::function<void()>& abort, std::chrono::milliseconds timeout,
                                   std::chrono::milliseconds look_every)
{
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    auto next_look = start + look_every;
    auto pause = std::chrono::microseconds(20);
    while (!completed()) {
        const auto now = Clock::now();
        if (now - start >= timeout) return {CollectiveWait::End::TimedOut, {}};
        if (now >= next_look) {
            next_look = now + look_every;
            if (auto reason = failure()) {
                abort();
                return {CollectiveWait::End::PeerFailed, std::move(*reason)};
            }
        }
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
    return {};
}

DataParallel::Impl::~Impl() = default;

DataParallel::DataParallel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DataParallel::~DataParallel() = default;

std::shared_ptr<DataParallel> DataParallel::join(const DistributedEnv& env, std::chrono::milliseconds timeout)
{
    if (data_parallel_backends().empty())
        throw ConfigError("data-parallel training is not available in this build (it was built without gloo's "
                          "headers and without NCCL: install libgloo-dev and reconfigure)");
    auto impl = std::make_unique<Impl>();
    impl->env = env;
    impl->key_prefix = "mantissa/";
    impl->backend = std::make_unique<DataParallelBackend>();
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(env.master_port);
    options.isServer = !env.agent_store && env.rank == 0;
    options.numWorkers = env.agent_store ? std::nullopt : std::optional<std::size_t>(env.world_size);
    options.waitWorkers = false;
    options.timeout = timeout;
    try {
        c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
        impl->backend->job_store = c10::make_intrusive<c10d::PrefixStore>("mantissa-job", store);
        // As torch.distributed does under torchrun: each restart attempt has keys of its own.
        if (env.agent_store)
            store = c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + std::to_string(env.restart_count),
                                                           store);
        impl->backend->store = c10::make_intrusive<c10d::PrefixStore>("mantissa", store);
    } catch (const std::exception& e) {
        throw CollectiveError("data-parallel: rank " + std::to_string(env.rank) + " cannot reach the store at " +
                              env.master_addr + ":" + std::to_string(env.master_port) + ": " +
                              first_line(e));
    }
    // A store that has this rank already is another job's: two jobs launched with one MASTER_PORT
    // (29500 is everyone's default). The second job's rank 0 cannot listen there, but its other
    // ranks reached the first job's store, took its project, and hung in the process group's
    // set-up for good (with SIGTERM ignored, as training had begun).
    int64_t joined = 0;
    try {
        joined = impl->backend->store->add("joined/" + std::to_string(env.rank), 1);
    } catch (const std::exception& e) {
        throw CollectiveError("data-parallel: rank " + std::to_string(env.rank) + " cannot reach the store at " +
                              env.master_addr + ":" + std::to_string(env.master_port) + ": " + first_line(e));
    }
    if (joined > 1)
        throw ConfigError("data-parallel: the store at " + env.master_addr + ":" + std::to_string(env.master_port) +
                          " already has a rank " + std::to_string(env.rank) +
                          ": that MASTER_PORT serves another data-parallel job (or this rank was started twice); "
                          "give each job its own MASTER_PORT");
    // One WORLD_SIZE for every rank, rank 0's: ranks that disagreed blamed grad_accum, or waited
    // 300 s for a rank that was never to come (read-only audit 'dpfail'). The refusing rank posts
    // why, so that rank 0, waiting for it, says so too.
    const std::string me = "rank " + std::to_string(env.rank), world = std::to_string(env.world_size);
    std::string rank0_world = world;
    const auto mismatch = [&] {
        return me + ": WORLD_SIZE is " + world + " here but " + rank0_world +
               " on rank 0: launch every rank with the same WORLD_SIZE";
    };
    try {
        auto& store = *impl->backend->store;
        if (env.rank == 0) store.set("world_size", to_bytes(world));
        else rank0_world = from_bytes(store.get("world_size")); // rank 0 posts it as it joins
        if (rank0_world != world) store.compareSet("failure", {}, to_bytes(mismatch()));
    } catch (const std::exception& e) {
        throw CollectiveError("data-parallel: " + me + " cannot reach the store at " + env.master_addr + ":" +
                              std::to_string(env.master_port) + ": " + first_line(e));
    }
    if (rank0_world != world) throw ConfigError("data-parallel: " + mismatch());
#if MANTISSA_DP_NCCL
    // One GPU per rank, chosen before the Trainer puts anything on a device.
    const int gpu = torch::cuda::is_available() ? gpu_of_local_rank(env.local_rank, static_cast<int>(torch::cuda::device_count())) : -1;
    if (gpu >= 0) c10::cuda::set_device(static_cast<c10::DeviceIndex>(gpu));
#endif
    return std::shared_ptr<DataParallel>(new DataParallel(std::move(impl)));
}

int DataParallel::rank() const { return impl_->env.rank; }
int DataParallel::world_size() const { return impl_->env.world_size; }
int DataParallel::local_rank() const { return impl_->env.local_rank; }
bool DataParallel::started() const { return static_cast<bool>(impl_->backend->group); }
std::string DataParallel::backend_name() const { return impl_->backend->name; }

void DataParallel::close()
{
    auto& b = *impl_->backend;
    if (!b.group || b.closed) return;
    b.closed = true;
    try {
        if (b.control && b.control != b.group) b.control->shutdown(); // Gloo: nothing to do
        b.group->shutdown();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "warning: data-parallel rank %d: the %s process group did not shut down cleanly: %s\n",
                     rank(), b.name.c_str(), first_line(e).c_str());
    }
}

namespace {

// c10's own error types are no CollectiveError, which the CLI's handlers take.
void post_to(c10d::Store& store, int rank, const std::string& key, const std::string& value)
{
    try {
        store.set(key, to_bytes(value));
    } catch (const std::exception& e) {
        throw CollectiveError("data-parallel: rank " + std::to_string(rank) + " cannot post '" + key +
                              "' to the rendezvous store: " + first_line(e));
    }
}

} // namespace

void DataParallel::post(const std::string& key, const std::string& value)
{
    post_to(*impl_->backend->store, rank(), key, value);
}

std::string DataParallel::wait_for(const std::string& key)
{
    try {
        // Polled, not a store get(): that one ends at the store's timeout.
        while (!impl_->backend->store->check({key})) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return from_bytes(impl_->backend->store->get(key));
    } catch (const std::exception& e) {
        throw CollectiveError("data-parallel: rank " + std::to_string(rank()) + " waited in vain for '" + key +
                                  "' (rank 0 is gone, and its store with it?): " + first_line(e),
                              says_timed_out(e));
    }
}

std::optional<std::string> DataParallel::peek(const std::string& key, std::chrono::milliseconds wait)
{
    const auto until = std::chrono::steady_clock::now() + wait;
    try {
        // Bounded as a whole: the looks themselves may hang (within()).
        const auto look = [key, until](c10d::Store& s) {
            while (true) {
                if (s.check({key})) return std::optional<std::string>(from_bytes(s.get(key)));
                if (std::chrono::steady_clock::now() >= until) return std::optional<std::string>();
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        };
        return within<std::optional<std::string>>(*impl_->backend, wait + kBoundedStoreCall, look)
            .value_or(std::nullopt);
    } catch (const std::exception&) {
        return std::nullopt; // the store went away with its host
    }
}

int DataParallel::restart_count() const { return impl_->env.restart_count; }

void DataParallel::post_job(const std::string& key, const std::string& value)
{
    post_to(*impl_->backend->job_store, rank(), key, value);
}

std::optional<std::string> DataParallel::peek_job(const std::string& key)
{
    try {
        if (!impl_->backend->job_store->check({key})) return std::nullopt;
        return from_bytes(impl_->backend->job_store->get(key));
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

void DataParallel::arrive(const std::string& key)
{
    try {
        within<int64_t>(*impl_->backend, kBoundedStoreCall, [key](c10d::Store& s) { return s.add(key, 1); });
    } catch (const std::exception&) {
        // The host is gone already: nothing waits for this arrival.
    }
}

bool DataParallel::wait_for_arrivals(const std::string& key, int64_t count, std::chrono::milliseconds wait)
{
    const auto until = std::chrono::steady_clock::now() + wait;
    try {
        return within<bool>(*impl_->backend, wait + kBoundedStoreCall, [key, count, until](c10d::Store& s) {
                   while (s.add(key, 0) < count) {
                       if (std::chrono::steady_clock::now() >= until) return false;
                       std::this_thread::sleep_for(std::chrono::milliseconds(20));
                   }
                   return true;
               }).value_or(false);
    } catch (const std::exception&) {
        return false;
    }
}

namespace {

void post_failure(DataParallelBackend& b, int rank, const std::string& reason)
{
    quiet_store_warnings();
    try {
        // compareSet with an empty expectation: only the first reason is kept.
        within<std::vector<uint8_t>>(b, kBoundedStoreCall,
                                     [value = to_bytes("rank " + std::to_string(rank) + ": " + reason)](
                                         c10d::Store& s) { return s.compareSet("failure", {}, value); });
    } catch (const std::exception&) {
        // The store is gone: the others learn of this rank's end from the collectives alone.
    }
}

// A rank launched a little late is the rule, not a fault: the first word comes once a quarter
// of the wait has passed, and at most 10 s in.
std::chrono::steady_clock::duration first_start_notice(std::chrono::milliseconds timeout)
{
    return std::min<std::chrono::steady_clock::duration>(timeout / 4, std::chrono::seconds(10));
}

std::string still_waiting(int rank, int peer, std::chrono::steady_clock::duration waited,
                          std::chrono::milliseconds timeout, bool stoppable)
{
    const auto left = std::chrono::ceil<std::chrono::seconds>(timeout - waited).count();
    const auto all = std::chrono::ceil<std::chrono::seconds>(timeout).count();
    return "data-parallel: rank " + std::to_string(rank) + " is waiting for rank " + std::to_string(peer) +
           " to start; it gives up in " + std::to_string(std::max<int64_t>(left, 0)) + " s (of " +
           std::to_string(all) + " s)" + (stoppable ? "; Ctrl-C stops it" : "");
}

} // namespace

void DataParallel::report_failure(const std::string& reason) { post_failure(*impl_->backend, rank(), reason); }
void DataParallel::watch_start(StartWatch watch) { impl_->start_watch = std::move(watch); }

std::optional<std::string> DataParallel::failure_reason(std::chrono::milliseconds wait)
{
    quiet_store_warnings();
    return peek("failure", wait);
}

void DataParallel::acknowledge_failure()
{
    quiet_store_warnings();
    if (std::exchange(impl_->backend->acknowledged, true)) return; // rank 0 counts ranks, not calls
    arrive("failure_read");
}

bool DataParallel::abandon_collectives_and_wait_for_acknowledgements(std::chrono::milliseconds wait)
{
    auto& b = *impl_->backend;
    // No collective follows a failure; destroyed, the groups close their connections (Gloo's
    // sockets; NCCL aborts its communicators).
    b.control.reset();
    b.group.reset();
    return wait_for_arrivals("failure_read", world_size() - 1, wait);
}

int gpu_of_local_rank(int local_rank, int visible_gpus)
{
    if (local_rank >= 0 && local_rank < visible_gpus) return local_rank;
    // One visible GPU for a later local rank: the launcher gave each rank its own (Slurm's
    // --gpus-per-task=1 or --gpu-bind sets CUDA_VISIBLE_DEVICES per task). Ranks that share it
    // after all are refused by the preflight, which compares the GPUs' PCI addresses.
    if (visible_gpus == 1) return 0;
    return -1;
}

std::optional<std::pair<int, int>> ranks_sharing_a_gpu(const std::vector<std::string>& gpu_of_rank)
{
    for (size_t a = 0; a < gpu_of_rank.size(); ++a)
        for (size_t b = a + 1; b < gpu_of_rank.size(); ++b)
            if (!gpu_of_rank[a].empty() && gpu_of_rank[a] == gpu_of_rank[b])
                return std::pair<int, int>(static_cast<int>(a), static_cast<int>(b));
    return std::nullopt;
}

namespace {

// This rank's GPU as "<host>/<boot id>/<PCI address>" (the same on every rank that holds it;
// the boot id tells apart containers of one host name on identical servers, as NCCL's own
// check does), or "" on the CPU and where it cannot be told.
std::string gpu_identity([[maybe_unused]] bool cuda)
{
#if MANTISSA_DP_NCCL
    if (!cuda || !torch::cuda::is_available()) return {};
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) return {};
    std::string boot;
    std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
    const std::string bus = cuda_pci_bus_id(static_cast<int>(c10::cuda::current_device()));
    return bus.empty() ? std::string() : std::string(host) + "/" + boot + "/" + bus;
#else
    return {};
#endif
}

} // namespace

// Why this rank cannot join a process group on this device, or "" when it can.
std::string DataParallel::Impl::local_refusal(bool cuda) const
{
    if (cuda) {
#if MANTISSA_DP_NCCL
        // NCCL wants a GPU of its own per rank; join() chose it (gpu_of_local_rank).
        const int gpus = static_cast<int>(torch::cuda::device_count());
        if (gpu_of_local_rank(env.local_rank, gpus) < 0)
            return "data-parallel on CUDA: LOCAL_RANK=" + std::to_string(env.local_rank) +
                   " has no GPU of its own (this machine has " + std::to_string(gpus) +
                   "); NCCL needs one GPU per rank: launch at most " + std::to_string(gpus) +
                   " ranks per machine, or train on the CPU (training.device=cpu)";
#else
        return missing_backend("on CUDA needs NCCL", "; train on the CPU (training.device=cpu) or rebuild with nccl.h").what();
#endif
    } else {
#if !MANTISSA_DP_GLOO
        return missing_backend("on the CPU needs Gloo", ": install libgloo-dev and reconfigure").what();
#endif
    }
    return {};
}

namespace {

// The environment variables that change which collectives a rank makes: set on some ranks and
// not others, the ranks' collectives stop matching (Gloo then ends the process in
// std::terminate, "collective mismatch"). "NAME=value" each, "NAME unset" where absent.
std::string collective_settings()
{
    std::string out;
    for (const char* name : {"MANTISSA_DP_SKIP_AMAX_REDUCTION", "MANTISSA_DP_CONTROL"}) {
        const char* v = std::getenv(name);
        out += std::string(out.empty() ? "" : ", ") + name + (v ? "=" + std::string(v) : std::string(" unset"));
    }
    return out;
}

} // namespace

void DataParallel::Impl::preflight(bool cuda) { preflight(cuda, gpu_identity(cuda)); }

void DataParallel::Impl::preflight(bool cuda, const std::string& gpu)
{
    // Every rank says, through the store, where it trains and whether it can; then every rank
    // reads all of them. A rank that cannot start (no GPU of its own, no backend) or that
    // trains elsewhere (device=auto on a node without a GPU, NCCL against Gloo) would otherwise
    // leave the others waiting in the process group's first collective for the whole
    // collective timeout. Now every rank refuses at once, with that rank's reason.
    const std::string refusal = local_refusal(cuda);
    const std::string key = "preflight/" + std::to_string(env.rank);
    // Set before the preflight answer: whoever reads the answer finds the settings too.
    backend->store->set("preflight_settings/" + std::to_string(env.rank), to_bytes(collective_settings()));
    // "<device>\n<GPU identity>\n<refusal>"
    backend->store->set(key, to_bytes(std::string(cuda ? "cuda" : "cpu") + "\n" + gpu + "\n" + refusal));
    std::string first_refusal, rank0_settings, differing_settings;
    int refusing_rank = -1, other_device_rank = -1, differing_rank = -1;
    std::vector<std::string> gpu_of_rank;
    for (int r = 0; r < env.world_size; ++r) {
        std::string answer;
        const std::string peer_key = "preflight/" + std::to_string(r);
        const std::string waited = "data-parallel: rank " + std::to_string(env.rank) + " waited in vain for rank " +
                                   std::to_string(r) + " to start: ";
        // Waited for as a collective is, not with a blocking get: a rank that failed before its
        // preflight (its project or data would not load on its node) posted why, and the
        // others say so at once instead of after the whole store timeout.
        CollectiveWait wait;
        bool stopped = false;
        const auto look = [&, started = std::chrono::steady_clock::now(),
                           next_notice = std::chrono::steady_clock::duration::zero()]() mutable
            -> std::optional<std::string> {
            const auto waited_for = std::chrono::steady_clock::now() - started;
            if (start_watch.stopped && start_watch.stopped()) {
                stopped = true;
                return std::string();
            }
            if (start_watch.notice && waited_for >= first_start_notice(backend->store->getTimeout()) &&
                waited_for >= next_notice) {
                next_notice = waited_for + std::chrono::seconds(60);
                start_watch.notice(still_waiting(env.rank, r, waited_for, backend->store->getTimeout(),
                                                 static_cast<bool>(start_watch.stopped)));
            }
            return posted_failure(*backend);
        };
        try {
            wait = wait_for_collective([&] { return backend->store->check({peer_key}); }, look, [] {},
                                       backend->store->getTimeout());
            if (wait.end == CollectiveWait::End::Completed) answer = from_bytes(backend->store->get(peer_key));
        } catch (const std::exception& e) {
            throw CollectiveError(waited + first_line(e));
        }
        if (stopped) {
            const std::string why = "stopped (Ctrl-C or SIGTERM) while it waited for rank " + std::to_string(r) +
                                    " to start";
            post_failure(*backend, env.rank, why);
            throw StoppedBeforeStart("data-parallel: rank " + std::to_string(env.rank) + " " + why);
        }
        if (wait.end == CollectiveWait::End::PeerFailed) throw CollectiveError("data-parallel: " + wait.failure);
        if (wait.end == CollectiveWait::End::TimedOut) {
            const auto timeout = backend->store->getTimeout();
            const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout).count();
            throw PeerNeverStarted(waited + "no answer in " + std::to_string(seconds) +
                                   " s (not launched, launched with another MASTER_PORT or WORLD_SIZE, or it died "
                                   "while starting)");
        }
        // "<device>\n<GPU>\n<refusal>"; before 2026-12-02 "<device>\n<refusal>" (no GPU).
        const auto first = answer.find('\n'), second = answer.find('\n', first + 1);
        const std::string device = answer.substr(0, first);
        const std::string reason = second == std::string::npos ? answer.substr(first + 1) : answer.substr(second + 1);
        gpu_of_rank.push_back(second == std::string::npos ? std::string() : answer.substr(first + 1, second - first - 1));
        if (!reason.empty() && refusing_rank < 0) {
            refusing_rank = r;
            first_refusal = reason;
        }
        if (device != (cuda ? "cuda" : "cpu") && other_device_rank < 0) other_device_rank = r;
        std::string settings;
        try {
            const std::string settings_key = "preflight_settings/" + std::to_string(r);
            if (backend->store->check({settings_key})) settings = from_bytes(backend->store->get(settings_key));
        } catch (const std::exception& e) {
            throw CollectiveError(waited + first_line(e));
        }
        if (r == 0) rank0_settings = settings;
        else if (settings != rank0_settings && differing_rank < 0) {
            differing_rank = r;
            differing_settings = settings;
        }
    }
    const auto shared = ranks_sharing_a_gpu(gpu_of_rank);
    if (refusing_rank >= 0 || other_device_rank >= 0 || shared || differing_rank >= 0) {
        // Every rank refuses. The rank that hosts the store waits (a while) until every other
        // has read the answers, so that its exit does not take them away mid-read.
        try {
            backend->store->add("preflight_read", 1);
            if (env.rank == 0 && !env.agent_store) {
                const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                while (backend->store->add("preflight_read", 0) < env.world_size &&
                       std::chrono::steady_clock::now() < until)
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
            }
        } catch (const std::exception&) {
            // The store is gone already: the refusal below is all there is to say.
        }
    }
    if (!refusal.empty()) throw ConfigError(refusal);
    if (refusing_rank >= 0)
        throw PeerRefused("data-parallel: rank " + std::to_string(refusing_rank) + ": " + first_refusal);
    if (shared)
        throw PeerRefused("data-parallel on CUDA: ranks " + std::to_string(shared->first) + " and " +
                          std::to_string(shared->second) + " would share the GPU " + gpu_of_rank[shared->first] +
                          "; NCCL needs one GPU per rank: give each rank its own (torchrun: at most one rank per "
                          "GPU of a machine; Slurm: --gpus-per-task=1)");
    if (differing_rank >= 0)
        throw PeerRefused("data-parallel: rank " + std::to_string(differing_rank) + " has " + differing_settings +
                          " but rank 0 has " + rank0_settings +
                          "; these change which collectives a rank makes: set them alike on every rank");
    if (other_device_rank >= 0)
        throw PeerRefused("data-parallel: rank " + std::to_string(env.rank) + " trains on " +
                          (cuda ? "CUDA" : "the CPU") + " but rank " + std::to_string(other_device_rank) + " on " +
                          (cuda ? "the CPU" : "CUDA") +
                          "; every rank must train on the same kind of device (set training.device to cpu or cuda, "
                          "not auto, when some machines have no GPU)");
}

#if MANTISSA_DP_GLOO
namespace {

c10::intrusive_ptr<c10d::Backend> gloo_group(const c10::intrusive_ptr<c10d::Store>& store, const DistributedEnv& env,
                                             std::chrono::milliseconds timeout)
{
    auto options = c10d::ProcessGroupGloo::Options::create(timeout);
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    const bool loopback = env.master_addr == "localhost" || env.master_addr.rfind("127.", 0) == 0;
    if (ifname && *ifname) options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    else if (loopback) options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    else options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    options->threads = 1;
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank, env.world_size, options);
}

} // namespace
#endif

void DataParallel::start(bool cuda, std::chrono::milliseconds collective_timeout)
{
    auto& b = *impl_->backend;
    const auto& env = impl_->env;
    impl_->preflight(cuda);
    auto store = c10::make_intrusive<c10d::PrefixStore>("group", b.store);
    try {
        if (cuda) {
#if MANTISSA_DP_NCCL
            // NCCL's timeout otherwise only arms its watchdog, which tears the process down: with
            // a blocking wait a timed-out collective throws, and the run is marked failed.
            ::setenv("TORCH_NCCL_BLOCKING_WAIT", "1", /*overwrite=*/0);
            auto options = c10d::ProcessGroupNCCL::Options::create();
            options->timeout = collective_timeout;
            b.group = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank, env.world_size, options);
            b.name = "nccl";
#else
            throw std::logic_error("preflight let a CUDA rank start without NCCL");
#endif
        } else {
#if MANTISSA_DP_GLOO
            b.group = gloo_group(store, env, collective_timeout);
            b.name = "gloo";
#else
            throw std::logic_error("preflight let a CPU rank start without Gloo");
#endif
        }
        // The control channel (commands, step times) gets a Gloo group of its own, on the CPU
        // too, so that the path NCCL runs take is the one every CPU test runs. PyTorch's own
        // answer to host objects on NCCL (broadcast_object_list) copies them through the GPU.
        // MANTISSA_DP_CONTROL=main (the same on every rank) keeps it on the main group: where
        // Gloo cannot connect between the nodes (GLOO_SOCKET_IFNAME unset on hosts whose name
        // resolves to a loopback address) or its headers do not match the wheel's library.
        const char* control = std::getenv("MANTISSA_DP_CONTROL");
        const bool on_main = control && std::string(control) == "main";
#if MANTISSA_DP_GLOO
        if (on_main) b.control = b.group;
        else b.control = gloo_group(c10::make_intrusive<c10d::PrefixStore>("control", b.store), env, collective_timeout);
#else
        (void)on_main;
        b.control = b.group;
#endif
    } catch (const ConfigError&) {
        throw;
    } catch (const std::exception& e) {
        throw CollectiveError("data-parallel: rank " + std::to_string(env.rank) + " could not build the process group: " +
                              first_line(e));
    }
    b.cuda = cuda;
    b.timeout = collective_timeout;
}

namespace {

// One of the two groups: the main one (gradients, amaxes, the loss, rank 0's state; NCCL on
// CUDA) or the control channel (commands, step times; Gloo, host tensors, wherever it exists).
struct Channel {
    DataParallelBackend& b;
    bool control = false;

    const c10::intrusive_ptr<c10d::Backend>& group() const { return control ? b.control : b.group; }
    // NCCL: device tensors, and a host wait that looks for a peer's posted failure.
    bool nccl() const { return b.cuda && group() == b.group; }
};

// Gloo reduces host tensors; NCCL device ones. A tensor elsewhere travels there and back.
torch::Tensor on_backend_device(const Channel& c, const torch::Tensor& t)
{
    if (c.nccl()) return t.is_cuda() ? t.contiguous() : t.to(torch::kCUDA).contiguous();
    return t.is_cuda() ? t.to(torch::kCPU).contiguous() : t.contiguous();
}

void copy_back(torch::Tensor& target, const torch::Tensor& reduced)
{
    if (reduced.data_ptr() != target.data_ptr()) target.copy_(reduced);
}

void broadcast_on(const Channel& c, std::vector<torch::Tensor>& tensors)
{
    for (auto& t : tensors) {
        std::vector<torch::Tensor> one{on_backend_device(c, t)};
        c10d::BroadcastOptions options;
        options.rootRank = 0;
        trace(c.b, c.control, "broadcast", t.numel(), "host wait");
        finish(c.b, c.group()->broadcast(one, options), "broadcast", c.nccl());
        copy_back(t, one[0]);
    }
}

// stream_only: the result is read on the device only (order_after).
void allreduce(const Channel& c, torch::Tensor& tensor, c10d::ReduceOp op, const char* what, bool stream_only = false)
{
    std::vector<torch::Tensor> one{on_backend_device(c, tensor)};
    c10d::AllreduceOptions options;
    options.reduceOp = op;
    const bool on_stream = stream_only && c.nccl() && tensor.is_cuda();
    trace(c.b, c.control, what, tensor.numel(), on_stream ? "stream wait" : "host wait");
    const auto work = c.group()->allreduce(one, options);
    if (on_stream) order_after(work, what);
    else finish(c.b, work, what, c.nccl());
    copy_back(tensor, one[0]);
}

// Rank 0's bytes on every rank (a length broadcast, then the bytes when there are any).
std::string broadcast_bytes_on(const Channel& c, int rank, const std::string& bytes_on_rank0)
{
    const bool root = rank == 0;
    std::vector<torch::Tensor> length{torch::tensor({root ? static_cast<int64_t>(bytes_on_rank0.size()) : int64_t(0)})};
    broadcast_on(c, length);
    const int64_t n = length[0].item<int64_t>();
    if (n == 0) return {};
    auto bytes = torch::empty({n}, torch::kUInt8);
    if (root) std::memcpy(bytes.data_ptr<uint8_t>(), bytes_on_rank0.data(), static_cast<size_t>(n));
    std::vector<torch::Tensor> one{bytes};
    broadcast_on(c, one);
    const auto host = one[0].to(torch::kCPU).contiguous();
    return std::string(reinterpret_cast<const char*>(host.data_ptr<uint8_t>()), static_cast<size_t>(n));
}

} // namespace

void DataParallel::Impl::broadcast(std::vector<torch::Tensor>& tensors) { broadcast_on({*backend}, tensors); }

void DataParallel::Impl::allreduce_sum(torch::Tensor& tensor)
{
    allreduce({*backend}, tensor, c10d::ReduceOp::SUM, "allreduce (sum)");
}

std::function<void()> DataParallel::Impl::allreduce_sum_async(torch::Tensor& tensor)
{
    const Channel main{*backend};
    std::vector<torch::Tensor> one{on_backend_device(main, tensor)};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    const bool stream_only = main.nccl() && tensor.is_cuda(); // a gradient bucket on its GPU
    trace(*backend, false, "allreduce (sum), started", tensor.numel(), stream_only ? "stream wait" : "host wait");
    c10::intrusive_ptr<c10d::Work> work;
    try {
        work = backend->group->allreduce(one, options);
    } catch (const std::exception& e) {
        throw CollectiveError("allreduce (sum) failed to start: " + first_line(e));
    }
    return [work, target = tensor, reduced = one[0], stream_only, nccl = main.nccl(), &b = *backend]() mutable {
        if (stream_only) order_after(work, "allreduce (sum)");
        else finish(b, work, "allreduce (sum)", nccl);
        copy_back(target, reduced);
    };
}

void DataParallel::Impl::allreduce_max(torch::Tensor& tensor)
{
    allreduce({*backend}, tensor, c10d::ReduceOp::MAX, "allreduce (max)");
}

void DataParallel::Impl::allreduce_max_on_device(torch::Tensor& tensor)
{
    allreduce({*backend}, tensor, c10d::ReduceOp::MAX, "allreduce (max)", /*stream_only=*/true);
}

std::string DataParallel::Impl::broadcast_bytes(const std::string& bytes_on_rank0)
{
    return broadcast_bytes_on({*backend}, env.rank, bytes_on_rank0);
}

std::string DataParallel::Impl::control_broadcast_bytes(const std::string& bytes_on_rank0)
{
    return broadcast_bytes_on({*backend, /*control=*/true}, env.rank, bytes_on_rank0);
}

void DataParallel::Impl::control_allreduce_sum(torch::Tensor& host_tensor)
{
    allreduce({*backend, /*control=*/true}, host_tensor, c10d::ReduceOp::SUM, "allreduce (sum)");
}

} // namespace mantissa
