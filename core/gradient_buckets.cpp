// SPDX-License-Identifier: GPL-3.0-or-later
#include "gradient_buckets.h"

#include <torch/csrc/autograd/function_hook.h>

namespace mantissa {

// Runs after AccumulateGrad wrote the parameter's .grad for this backward (once per backward,
// however many paths led to the parameter).
struct GradientBucketHook final : torch::autograd::PostAccumulateGradHook {
    GradientBuckets* owner;
    size_t index;
    GradientBucketHook(GradientBuckets* o, size_t i) : owner(o), index(i) {}
    void operator()(const torch::autograd::Variable&) override { owner->gradient_written(index); }
};

GradientBuckets::GradientBuckets(std::vector<torch::Tensor> parameters, int64_t cap_bytes, StartAllreduce start)
    : parameters_(std::move(parameters)), slots_(parameters_.size()), copied_(parameters_.size(), 0),
      start_(std::move(start))
{
    // Reverse registration order; a new bucket at a dtype change or when the cap is reached
    // (a parameter larger than the cap gets a bucket of its own).
    std::vector<std::vector<size_t>> groups;
    int64_t bytes = 0;
    for (size_t k = parameters_.size(); k-- > 0;) {
        const auto& p = parameters_[k];
        const int64_t n = static_cast<int64_t>(p.nbytes());
        const bool new_group = groups.empty() || parameters_[groups.back().front()].scalar_type() != p.scalar_type() ||
                               parameters_[groups.back().front()].device() != p.device() || bytes + n > cap_bytes;
        if (new_group) {
            groups.emplace_back();
            bytes = 0;
        }
        groups.back().push_back(k);
        bytes += n;
    }
    for (auto& group : groups) {
        Bucket b;
        int64_t numel = 0;
        for (size_t k : group) {
            slots_[k] = {buckets_.size(), numel};
            numel += parameters_[k].numel();
        }
        const auto& first = parameters_[group.front()];
        b.flat = torch::zeros({numel}, first.options().requires_grad(false));
        b.params = std::move(group);
        b.waiting = b.params.size();
        buckets_.push_back(std::move(b));
    }
    for (size_t k = 0; k < parameters_.size(); ++k)
        torch::autograd::impl::set_post_acc_grad_hooks(parameters_[k], std::make_unique<GradientBucketHook>(this, k));
}

GradientBuckets::~GradientBuckets()
{
    for (auto& p : parameters_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradientBuckets::reset()
{
    for (auto& b : buckets_) {
        b.waiting = b.params.size();
        b.wait = nullptr;
    }
    std::fill(copied_.begin(), copied_.end(), 0);
    next_to_start_ = 0;
    started_in_backward_ = 0;
    error_ = nullptr;
}

void GradientBuckets::arm()
{
    std::lock_guard lock(mutex_);
    reset(); // what a failed step left behind is dropped
    armed_ = true;
}

void GradientBuckets::copy_in(size_t k)
{
    if (copied_[k]) return;
    copied_[k] = 1;
    const auto& slot = slots_[k];
    auto& b = buckets_[slot.bucket];
    auto into = b.flat.narrow(0, slot.offset, parameters_[k].numel());
    const auto& grad = parameters_[k].grad();
    if (grad.defined()) into.copy_(grad.reshape({-1}));
    else into.zero_();
    --b.waiting;
}

void GradientBuckets::start_ready_in_order()
{
    while (next_to_start_ < buckets_.size() && buckets_[next_to_start_].waiting == 0) {
        auto& b = buckets_[next_to_start_];
        b.wait = start_(b.flat);
        ++next_to_start_;
        if (armed_) ++started_in_backward_;
    }
}

void GradientBuckets::gradient_written(size_t k)
{
    std::lock_guard lock(mutex_);
    if (!armed_ || error_) return;
    try {
        copy_in(k);
        start_ready_in_order();
    } catch (...) {
        // Thrown through the autograd engine it would lose its type (a lost peer must stay a
        // CollectiveError); finish() rethrows it as it was.
        error_ = std::current_exception();
    }
}

int GradientBuckets::finish()
{
    std::lock_guard lock(mutex_);
    armed_ = false;
    const int overlapped = started_in_backward_;
    std::exception_ptr error = error_;
    if (!error) {
        try {
            for (size_t k = 0; k < parameters_.size(); ++k) copy_in(k);
            start_ready_in_order();
        } catch (...) {
            error = std::current_exception();
        }
    }
    // Every started allreduce is waited for, even after a failure: its buffer is ours.
    for (auto& b : buckets_) {
        if (!b.wait) continue;
        try {
            b.wait();
        } catch (...) {
            if (!error) error = std::current_exception();
        }
    }
    reset();
    if (error) std::rethrow_exception(error);
    for (size_t k = 0; k < parameters_.size(); ++k) {
        auto& param = parameters_[k];
        const auto& slot = slots_[k];
        const auto sum = buckets_[slot.bucket].flat.narrow(0, slot.offset, param.numel()).view(param.sizes());
        // A parameter this rank's micro-batches never reached still takes the other ranks'
        // sum: left without a gradient, AdamW and the finite check would pass over it here
        // and not on a rank that had one, and the ranks would part (weights, skipped steps).
        // Knowing whether any rank had one would take a host read; so where none did, every
        // rank steps it with a zero gradient (a single process would leave it alone).
        if (!param.grad().defined()) param.mutable_grad() = torch::zeros_like(param);
        param.mutable_grad().copy_(sum);
    }
    return overlapped;
}

} // namespace mantissa
