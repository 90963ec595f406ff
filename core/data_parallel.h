// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Data-parallel training on PyTorch's own distributed engine (c10d): the launcher's
// environment (torchrun or Slurm), the rendezvous store, and the process group (Gloo on the
// CPU, NCCL on CUDA). No LibTorch in this header: the CLI includes it. The collectives the
// Trainer runs live in data_parallel_impl.h. docs/DISTRIBUTED.md describes the semantics.

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace mantissa {

// Where this process sits in a data-parallel job, as its launcher said.
struct DistributedEnv {
    int rank = 0;
    int world_size = 1;
    int local_rank = 0; // selects the GPU on CUDA
    std::string master_addr;
    int master_port = 0;
    // torchrun's agent already hosts the store at MASTER_ADDR:MASTER_PORT: every rank is a
    // client (TORCHELASTIC_USE_AGENT_STORE). Otherwise rank 0 hosts it.
    bool agent_store = false;
    std::string launcher;  // "torchrun", "slurm" or "env" (RANK/WORLD_SIZE set by hand)
    int restart_count = 0; // torchrun --max-restarts: keys of an earlier attempt are not reused
};

// Reads the launcher's variables through `lookup` (name -> value, nullopt when unset):
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun sets all of them), or
// SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID with MASTER_ADDR/MASTER_PORT. nullopt when
// neither RANK/WORLD_SIZE nor a Slurm job step with more than one task is there (a single
// process). Throws ConfigError naming the variable when they are inconsistent (RANK >=
// WORLD_SIZE, no MASTER_PORT, a value that is not a number).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
std::optional<DistributedEnv> read_distributed_env(const EnvLookup& lookup);
std::optional<DistributedEnv> read_distributed_env(); // from this process's environment

// "gloo", "gloo, nccl", "nccl" or "" (this build has no data-parallel backend).
std::string data_parallel_backends();

// The collective timeout when the project sets none (training.collective_timeout_s):
// c10d's own default is 30 minutes, far too long to notice a stopped peer.
inline constexpr int kDefaultCollectiveTimeoutS = 300;

// A collective failed: a peer died, stopped answering within the timeout, or hung up.
// `timed_out`: this rank waited the whole timeout (a peer hung, or busy that long), as opposed
// to a peer that said why or hung up; the trainer tells its peers which.
struct CollectiveError : std::runtime_error {
    explicit CollectiveError(const std::string& what, bool timed_out = false)
        : std::runtime_error(what), timed_out(timed_out)
    {
    }
    bool timed_out;
};

class DataParallel {
public:
    // Connects to the rendezvous store at MASTER_ADDR:MASTER_PORT (rank 0 hosts it unless
    // torchrun's agent does), waiting up to `timeout` for it. Throws std::runtime_error (a
    // ConfigError when this build has no backend).
    static std::shared_ptr<DataParallel> join(const DistributedEnv& env, std::chrono::milliseconds timeout);
    ~DataParallel();
    DataParallel(const DataParallel&) = delete;
    DataParallel& operator=(const DataParallel&) = delete;

    int rank() const;
    int world_size() const;
    int local_rank() const;

    // Messages through the store, outside the collectives: what rank 0 hands the other ranks
    // before training (the project), and a failing rank's reason.
    void post(const std::string& key, const std::string& value);
    // Blocks until `key` is posted, with no deadline while the store answers: rank 0 may take
    // long to prepare what it posts (a large corpus tokenized, a large store checked, a
    // checkpoint loaded), longer than any timeout a follower could know before it has the
    // project. A rank 0 that dies takes its store along (or torchrun's agent stops every rank):
    // throws CollectiveError once the store stops answering.
    std::string wait_for(const std::string& key);
    // Waits up to `wait` for `key`; nullopt if it did not come (or the store is gone).
    std::optional<std::string> peek(const std::string& key, std::chrono::milliseconds wait);

    // Keys of the whole job, which outlive a torchrun restart (torchrun's agent keeps its store
    // up across attempts): the run an earlier attempt created, so that a restarted `run`
    // resumes it. Without torchrun's agent they live as long as rank 0.
    void post_job(const std::string& key, const std::string& value);
    std::optional<std::string> peek_job(const std::string& key);
    int restart_count() const;

    // Arrivals counted at `key`: a rank that hosts the store waits for the others to have read
    // what it posted before it exits (and takes the store with it). False after `wait`.
    void arrive(const std::string& key);
    bool wait_for_arrivals(const std::string& key, int64_t count, std::chrono::milliseconds wait);

    // Builds the process group on every rank: Gloo for the CPU, NCCL for CUDA (the GPU
    // LOCAL_RANK names). Collectives that take longer than `collective_timeout` fail.
    // Throws ConfigError when this build lacks the backend the device needs.
    void start(bool cuda, std::chrono::milliseconds collective_timeout);
    bool started() const;
    // While start() waits for the other ranks to come (up to the store's timeout, 300 s by
    // default: a rank launched late is fine), a rank that waits says so and may be stopped.
    // `stopped` is asked every 250 ms: a yes ends the wait (StoppedBeforeStart), and the others
    // are told. `notice` hears that the wait goes on: once a quarter of it (at most 10 s) has
    // passed, then every 60 s. Either may be empty.
    struct StartWatch {
        std::function<bool()> stopped;
        std::function<void(const std::string&)> notice;
    };
    void watch_start(StartWatch watch);
    std::string backend_name() const; // "gloo" or "nccl" once started
    // After a run that ended normally on every rank (no collective after it): the process
    // group is shut down in order, NCCL's communicators flushed and destroyed, as PyTorch's
    // destroy_process_group does; without it torch warns at exit and aborts them. Never after a
    // failure: a flush could then wait on a peer that is gone. A problem is a warning on stderr.
    void close();

    // A rank that fails on its own (not in a collective) tells the others why, first come
    // first kept; the others' error then names it (failure_reason).
    void report_failure(const std::string& reason);
    std::optional<std::string> failure_reason(std::chrono::milliseconds wait);
    // The end of a failed run, where rank 0 may host the store: each other rank acknowledges
    // once it has read why (or given up reading); rank 0 drops its process groups (a peer
    // blocked in a collective fails at once, instead of at the timeout) and keeps the store up
    // until every peer acknowledged or `wait` passed. Without that, the store went with rank 0
    // in the very moment its peers came to read the reason.
    void acknowledge_failure();
    bool abandon_collectives_and_wait_for_acknowledgements(std::chrono::milliseconds wait);

    struct Impl; // data_parallel_impl.h: the store, the process group, the collectives
    Impl& impl() { return *impl_; }

private:
    explicit DataParallel(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

} // namespace mantissa
