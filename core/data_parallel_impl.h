// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The collectives the Trainer runs across data-parallel ranks. Internal: includes LibTorch
// (not c10d: the backend headers stay inside data_parallel.cpp, which is the only file that
// needs gloo's or NCCL's headers).

#include <functional>
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

struct DataParallel::Impl {
    DistributedEnv env;
    std::string key_prefix; // "mantissa/<restart>/": keys of an earlier torchrun attempt are not reused
    std::unique_ptr<DataParallelBackend> backend;

    ~Impl();

    // Why this rank cannot build a process group for this device (no GPU of its own, no
    // backend), or "".
    std::string local_refusal(bool cuda) const;
    // Before the process group: every rank learns through the store whether every other can
    // start on the same kind of device, and throws ConfigError naming the rank that cannot.
    void preflight(bool cuda);

    // Every rank's tensors take rank 0's values (in place).
    void broadcast(std::vector<torch::Tensor>& tensors);
    // In place: the element-wise SUM (or MAX) over the ranks. One call per tensor; a caller
    // packs what it can into one flat tensor first.
    void allreduce_sum(torch::Tensor& tensor);
    void allreduce_max(torch::Tensor& tensor);
    // The SUM started and not waited for (Gloo's worker thread, NCCL's stream): the function
    // returned waits for it and leaves the sum in `tensor` (throws CollectiveError).
    std::function<void()> allreduce_sum_async(torch::Tensor& tensor);
    // Rank 0's bytes on every rank (a length broadcast, then the bytes).
    std::string broadcast_bytes(const std::string& bytes_on_rank0);
};

} // namespace mantissa
