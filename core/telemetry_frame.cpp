// SPDX-License-Identifier: GPL-3.0-or-later
#include "telemetry_frame.h"

#include <limits>
#include <optional>

#include "cpu_update_norms.h"
#include "device_memory.h"
#include "host_copy.h"
#include "tensor_stats.h"

namespace mantissa {

bool TelemetryStep::is_armed(int64_t interval, int64_t step_index)
{
    const int64_t step = step_index + 1;
    return interval > 0 && (step == 1 || step % interval == 0);
}

void TelemetryStep::arm(Gpt& model)
{
    for (const auto& g : model->gemm_layers()) g->arm_telemetry(true);
    model->measure_log_z(true);
}

void TelemetryStep::disarm(Gpt& model)
{
    for (const auto& g : model->gemm_layers()) g->arm_telemetry(false);
    LayerGemm::finish_stats(model->gemm_layers());
    model->measure_log_z(false);
}

void TelemetryStep::remember_weights(Gpt& model)
{
    torch::NoGradGuard no_grad;
    weights_before_.clear();
    for (const auto& g : model->gemm_layers())
        if (g->last_weight().defined()) weights_before_[g->name()] = g->last_weight().detach().clone();
}

namespace {

// How a value combines across data-parallel ranks (TelemetryStep::RankReduction).
enum Combine : int8_t { kSum = kRankSum, kMax = kRankMax, kMean = kRankMean };

// Where each value of the frame sits in the step's buffer, and how it combines across ranks.
struct Layout {
    std::vector<torch::Tensor> parts; // 1-D float64 tensors on the model's device
    int64_t size = 0;
    bool combining = false;      // ranks are reduced: `combine` is kept (a host byte per value)
    std::vector<int8_t> combine; // by element

    int64_t add(const torch::Tensor& t, Combine how)
    {
        const auto flat = t.reshape({-1}).to(torch::kFloat64);
        parts.push_back(flat);
        const int64_t at = size;
        size += flat.numel();
        if (combining) combine.insert(combine.end(), static_cast<size_t>(flat.numel()), how);
        return at;
    }
    // A statistics row: counts and energies add up over the ranks' tensors, the amax is the
    // largest. A tensor that is the same on every rank (the weight) is itself: MAX of equals.
    int64_t add_row(const torch::Tensor& row, bool same_on_every_rank)
    {
        const int64_t at = add(row, same_on_every_rank ? kMax : kSum);
        if (combining) combine[static_cast<size_t>(at + stats_row::kAmax)] = kMax;
        return at;
    }
};

} // namespace

torch::Tensor combine_across_ranks(const torch::Tensor& buffer, const std::vector<int8_t>& how,
                                   const TelemetryStep::RankReduction& ranks)
{
    // The ranks' NaNs are counted in the same SUM as the values.
    const int64_t n = buffer.numel();
    auto summed = torch::cat({buffer, buffer.isnan().to(buffer.dtype())});
    ranks.sum(summed);
    const auto nan_somewhere = summed.narrow(0, n, n) > 0;
    summed = summed.narrow(0, 0, n);
    auto maxed = buffer.clone();
    ranks.max(maxed);
    maxed = maxed.masked_fill(nan_somewhere, std::numeric_limits<double>::quiet_NaN());
    auto kind = torch::from_blob(const_cast<int8_t*>(how.data()), {static_cast<int64_t>(how.size())}, torch::kInt8).clone();
    if (buffer.is_cuda()) kind = kind.pin_memory().to(buffer.device(), /*non_blocking=*/true);
    return torch::where(kind == kMax, maxed, torch::where(kind == kMean, summed / ranks.world_size, summed));
}

struct TelemetryStep::InFlight {
    struct TensorSlot {
        PendingTensorStats pending;
        std::string layer;
        int64_t row = 0, rms = -1; // rms: ||w||, ||update|| of the update ratio
        int64_t scale = -1;        // the native FP8 scale, read back with the rows
        int64_t ranks = 1;         // ranks whose tensors the row counts (reduced: all but the weight's)
    };
    int64_t step = 0;
    bool skipped = false;
    std::vector<TensorSlot> tensors;
    std::vector<std::pair<std::string, std::pair<int64_t, double>>> logits; // block, (slot, 1/sqrt(d))
    int64_t log_z = -1;
    HostCopy copy;
    MemorySnapshot memory; // at the end of the step, not when the frame is handed on
};

std::shared_ptr<TelemetryStep::InFlight> TelemetryStep::launch(Gpt& model, int64_t step, bool skipped,
                                                               int cuda_device, const RankReduction* ranks,
                                                               bool read_back)
{
    torch::NoGradGuard no_grad;
    // Everything measured is still on the device: gather it into one buffer, read it back
    // once, then fill the frame on the host.
    LayerGemm::finish_stats(model->gemm_layers());
    Layout layout;
    layout.combining = ranks != nullptr;
    auto out = std::make_shared<InFlight>();
    out->step = step;
    out->skipped = skipped;
    auto& tensors = out->tensors;
    auto& logits = out->logits;
    using TensorSlot = InFlight::TensorSlot;
    // The weights' update ratio, ||w_after - w_before|| / ||w_before|| (as rms(update) / rms(w):
    // the count cancels), for all weights at once with multi-tensor kernels: one launch each for
    // the differences and the norms, where each weight took about nine ops (about 440 launches
    // a telemetry step of GPT-2 small).
    std::vector<torch::Tensor> befores, afters;
    std::vector<size_t> ratio_slots; // the slots in `tensors` that take the ratio, in order
    for (const auto& g : model->gemm_layers()) {
        for (auto& p : g->take_pending()) {
            TensorSlot slot{std::move(p), g->name()};
            // The same tensor on every rank: the weight, and its block scales (block recipes).
            const bool shared = slot.pending.role == "weight" || slot.pending.role == "weight_scale" ||
                                slot.pending.role == "weight_dgrad";
            slot.row = layout.add_row(slot.pending.row, shared);
            if (ranks && !shared) slot.ranks = ranks->world_size;
            // The scale a cast used, and the weights' update ratio, are equal on every rank.
            if (slot.pending.scale_on_device.defined()) slot.scale = layout.add(slot.pending.scale_on_device, kMax);
            if (slot.pending.role == "weight" && !skipped) {
                const auto it = weights_before_.find(g->name());
                if (it != weights_before_.end()) {
                    befores.push_back(it->second);
                    afters.push_back(g->last_weight().detach());
                    ratio_slots.push_back(tensors.size());
                }
            }
            tensors.push_back(std::move(slot));
        }
        if (g->attention_max_score().defined()) {
            const auto& n = g->name();
            logits.push_back({n.substr(0, n.size() - std::string(".sdpa").size()),
                              {layout.add(g->attention_max_score(), kMax), g->attention_logit_scale()}});
        }
    }
    if (!befores.empty()) {
        torch::Tensor norms; // (weights, 2): w, u of each
        if (update_norms_cpu_takes(befores, afters)) {
            // One pass on both CPUs: LibTorch's norms of a CPU tensor run on one thread, after a
            // pass that writes the differences (about 0.8 ms of a 22-ms shakespeare-char step,
            // perf, 2026-12-05).
            norms = update_norms_cpu(befores, afters);
        } else {
            const auto w_norms = torch::stack(torch::_foreach_norm(befores));                              // (weights)
            const auto u_norms = torch::stack(torch::_foreach_norm(torch::_foreach_sub(afters, befores))); // (weights)
            norms = torch::stack({w_norms, u_norms}, 1);
        }
        const int64_t at = layout.add(norms, kMax);
        for (size_t i = 0; i < ratio_slots.size(); ++i) tensors[ratio_slots[i]].rms = at + 2 * static_cast<int64_t>(i);
    }
    if (model->log_z_mean().defined()) {
        out->log_z = layout.add(torch::stack({model->log_z_mean(), model->log_z_max()}), kMax);
        // Every rank's mean is over as many tokens: their mean is the mean over all of them.
        if (layout.combining) layout.combine[static_cast<size_t>(out->log_z)] = kMean;
    }
    if (!layout.parts.empty()) {
        auto buffer = torch::cat(layout.parts);
        if (ranks) buffer = combine_across_ranks(buffer, layout.combine, *ranks);
        if (read_back) out->copy = start_copy(buffer);
    }
    weights_before_.clear();
    if (!read_back) return nullptr;
    out->memory = read_memory(cuda_device);
    return out;
}

LayerStatsFrame TelemetryStep::complete(const InFlight& in)
{
    const auto& host = in.copy.wait();
    const double* values = host.defined() ? host.data_ptr<double>() : nullptr;
    LayerStatsFrame frame;
    frame.step = in.step;
    frame.skipped = in.skipped;
    for (const auto& slot : in.tensors) {
        const auto& p = slot.pending;
        const float scale = slot.scale >= 0 ? static_cast<float>(values[slot.scale]) : p.scale;
        TensorStats t =
            tensor_stats_from_row(values + slot.row, p.format, scale, p.count * slot.ranks, p.compared, p.values_only);
        t.layer = slot.layer;
        t.role = p.role;
        if (slot.rms >= 0) {
            const double w_norm = values[slot.rms], u_norm = values[slot.rms + 1];
            t.update_ratio = w_norm > 0 ? u_norm / w_norm : 0.0;
        }
        frame.tensors.push_back(std::move(t));
    }
    for (const auto& [block, at] : in.logits) frame.attention_max_logit.emplace_back(block, values[at.first] * at.second);
    if (in.log_z >= 0) {
        frame.log_z_mean = values[in.log_z];
        frame.log_z_max = values[in.log_z + 1];
    }
    frame.memory = in.memory;
    return frame;
}

} // namespace mantissa
