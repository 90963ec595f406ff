// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The collectives the Trainer runs across data-parallel ranks. Internal: includes LibTorch
// (not c10d: the backend headers stay inside data_parallel.cpp, which is the only file that
// needs gloo's or NCCL's headers).

#include <chrono>
#include <functional>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "data_parallel.h"
#include "project_config.h" // ConfigError

namespace mantissa {

class DataParallelBackend; // data_parallel.cpp: the c10d store and process group

// Another rank cannot start, or trains on another kind of device: a ConfigError every rank
// throws before the process group, whose text already names the rank (no prefix is added).
struct PeerRefused : ConfigError {
    using ConfigError::ConfigError;
};

// A rank that never came to the preflight within the store's timeout (not launched, launched
// with another MASTER_PORT or WORLD_SIZE, or dead while starting): its text says how long was
// waited, which is not training.collective_timeout_s, and that the rank never started (it was
// reported as "lost ... within training.collective_timeout_s=5").
struct PeerNeverStarted : CollectiveError {
    using CollectiveError::CollectiveError;
};

// The rank was stopped (Ctrl-C, SIGTERM) while it waited for its peers to start: its text says
// for whom it waited; the others are told through the store.
struct StoppedBeforeStart : CollectiveError {
    using CollectiveError::CollectiveError;
};

// The GPU a rank with this LOCAL_RANK trains on among the `visible_gpus` it sees: its own
// index, or the only one it sees (a launcher that binds one GPU per task), or -1: none.
int gpu_of_local_rank(int local_rank, int visible_gpus);
// The first two ranks whose (non-empty) GPU identities are equal.
std::optional<std::pair<int, int>> ranks_sharing_a_gpu(const std::vector<std::string>& gpu_of_rank);

// How a host wait on a collective ended (wait_for_collective).
struct CollectiveWait {
    enum class End { Completed, TimedOut, PeerFailed } end = End::Completed;
    std::string failure; // PeerFailed: what the failed rank posted
};
// The host waits for a collective itself (NCCL), instead of torch's blocking wait, which sleeps
// 1 to 10 ms per look depending on the release and never learns why a peer is gone: it asks
// `completed` after sleeps that start at 20 us and double up to 1 ms, and every `look_every`
// asks `failure` (the store's "failure" key, where a failing rank posts its reason before it
// exits; under torchrun the survivors are killed some 30 s after that, long before a collective
// timeout). A failure calls `abort` first. Nothing here sleeps once `completed` says yes.
CollectiveWait wait_for_collective(const std::function<bool()>& completed,
                                   const std::function<std::optional<std::string>()>& failure,
                                   const std::function<void()>& abort, std::chrono::milliseconds timeout,
                                   std::chrono::milliseconds look_every = std::chrono::milliseconds(250));

struct DataParallel::Impl {
    DistributedEnv env;
    std::string key_prefix; // "mantissa/<restart>/": keys of an earlier torchrun attempt are not reused
    std::unique_ptr<DataParallelBackend> backend;
    DataParallel::StartWatch start_watch;

    ~Impl();

    // Why this rank cannot build a process group for this device (no GPU of its own, no
    // backend), or "".
    std::string local_refusal(bool cuda) const;
    // Before the process group: every rank learns through the store whether every other can
    // start on the same kind of device, and throws ConfigError naming the rank that cannot.
    // `gpu`: this rank's GPU ("<host>/<PCI address>", "" on the CPU); two ranks naming the
    // same one are refused too.
    void preflight(bool cuda);
    void preflight(bool cuda, const std::string& gpu);

    // Every rank's tensors take rank 0's values (in place).
    void broadcast(std::vector<torch::Tensor>& tensors);
    // In place: the element-wise SUM (or MAX) over the ranks. One call per tensor; a caller
    // packs what it can into one flat tensor first.
    void allreduce_sum(torch::Tensor& tensor);
    void allreduce_max(torch::Tensor& tensor);
    // The SUM started and not waited for (Gloo's worker thread, NCCL's stream): the function
    // returned waits for it and leaves the sum in `tensor` (throws CollectiveError).
    // On NCCL (a CUDA tensor) the function makes the current stream wait, not the host: a
    // hang shows at the step's next host wait (the loss SUM, allreduce_sum).
    std::function<void()> allreduce_sum_async(torch::Tensor& tensor);
    // allreduce_max for a result read on the device only: on NCCL no host wait (as above).
    void allreduce_max_on_device(torch::Tensor& tensor);
    // Rank 0's bytes on every rank (a length broadcast, then the bytes).
    std::string broadcast_bytes(const std::string& bytes_on_rank0);

    // The control channel, for the small host values every rank needs at each step boundary
    // (rank 0's commands, the step times). On NCCL, a collective on a host tensor copies it to
    // the GPU with a blocking copy, which waits for the optimizer step queued before it, and
    // back: the GPU would drain at every step's end and the host could not run ahead into the
    // next forward. So these travel on a Gloo group of their own, host to host, wherever the
    // build has Gloo (the CPU's runs too, so that every CPU test runs this path); without
    // Gloo, on the main group as before.
    std::string control_broadcast_bytes(const std::string& bytes_on_rank0);
    void control_allreduce_sum(torch::Tensor& host_tensor);
};

} // namespace mantissa
