// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Data parallel: the gradients summed across the ranks in flat buckets, each bucket's
// allreduce started while the backward still runs (PyTorch DDP's design). Internal: LibTorch.
//
// - Parameters are bucketed in reverse registration order: the backward writes the last
//   layers' gradients first, so the first buckets fill first. One dtype per bucket, up to a
//   byte cap (training.dp_bucket_mb; DDP's default 25 MB).
// - A post-accumulate-grad hook on every parameter copies its gradient into the bucket's flat
//   buffer once the step's last local backward has written it. A full bucket starts its
//   allreduce at once, but only after every earlier bucket has started: collectives must be
//   issued in the same order on every rank, and the hooks' order is not part of any contract.
// - finish() starts what the backward did not (a parameter with no gradient contributes
//   zeros), waits for every allreduce in order and writes the sums back into the gradients,
//   giving one to a parameter that had none here (the ranks must step the same parameters).
// The arithmetic is the sum the un-overlapped reduction computed, element for element.

#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <vector>

#include <torch/torch.h>

namespace mantissa {

class GradientBuckets {
public:
    // Starts an allreduce (SUM, in place) of `flat`; the function it returns waits for it
    // (throwing CollectiveError when a peer is lost).
    using StartAllreduce = std::function<std::function<void()>(torch::Tensor& flat)>;

    GradientBuckets(std::vector<torch::Tensor> parameters, int64_t cap_bytes, StartAllreduce start);
    ~GradientBuckets(); // removes the hooks
    GradientBuckets(const GradientBuckets&) = delete;
    GradientBuckets& operator=(const GradientBuckets&) = delete;

    // The next backward is this step's last on this rank: its hooks fill the buckets.
    void arm();
    // Starts the buckets not yet started, waits for all and writes the sums into the
    // gradients. Returns how many buckets started during the backward (the overlapped ones).
    int finish();

    size_t bucket_count() const { return buckets_.size(); }

    // The hook's entry (GradientBucketHook): parameter `k`'s gradient is final for this step.
    void gradient_written(size_t k);

private:
    struct Slot {
        size_t bucket = 0;
        int64_t offset = 0; // in elements, within the bucket's flat buffer
    };
    struct Bucket {
        std::vector<size_t> params; // indices into parameters_
        torch::Tensor flat;         // (total numel) on the parameters' device, in their dtype
        size_t waiting = 0;         // gradients not yet copied in this step
        std::function<void()> wait; // set once started
    };

    void copy_in(size_t k);
    void start_ready_in_order();
    void reset();

    std::vector<torch::Tensor> parameters_;
    std::vector<Slot> slots_;   // by parameter index
    std::vector<char> copied_;  // by parameter index, this step
    std::vector<Bucket> buckets_;
    StartAllreduce start_;
    std::mutex mutex_; // the CUDA backward runs the hooks on the device's autograd thread
    bool armed_ = false;
    size_t next_to_start_ = 0;
    int started_in_backward_ = 0;
    std::exception_ptr error_; // a failed start inside a hook, rethrown by finish()
};

} // namespace mantissa
