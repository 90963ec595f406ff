// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// One telemetry step, from arming the layers to the LayerStatsFrame handed to the sinks.
// Arming only makes the layers read their tensors; the arithmetic of the step is the same
// armed or not (tests/test_golden holds every preset to that, bit for bit).

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include <torch/torch.h>

#include "gpt_model.h"
#include "telemetry.h"

namespace mantissa {

class TelemetryStep {
public:
    // Telemetry runs on steps whose number (1-based, the step being made) is 1 or a multiple
    // of `interval`; 0 turns it off. The schedule depends on the step alone, so a resumed
    // run observes exactly the steps the uninterrupted run observed.
    static bool is_armed(int64_t interval, int64_t step_index);

    // Records the first micro-batch's tensors.
    void arm(Gpt& model);
    void disarm(Gpt& model);
    // Copies of the weights the layers multiplied, before the optimizer moves them.
    void remember_weights(Gpt& model);
    // A telemetry step's measurements on their way to the host: one buffer, copied once
    // (on CUDA asynchronously into pinned memory), with where each value sits in it.
    struct InFlight;
    // Data parallel with telemetry.reduce_ranks: the buffer combined across the ranks before
    // the copy, element by element as each value means: counts and energies summed, amaxes,
    // logits and log Z's max taken as the max, log Z's mean averaged. Rows of the weight
    // (the same tensor on every rank) and values the ranks share (the FP8 scale, the update
    // ratio) stay as they are. `sum` and `max` are allreduces, in place, on the buffer's device.
    struct RankReduction {
        int world_size = 1;
        std::function<void(torch::Tensor&)> sum, max;
    };
    // Gathers everything measured (per-tensor statistics with the update/weight ratio unless
    // the step was skipped, attention max logits, log Z) and starts the copy, and reads the
    // memory of `cuda_device` (-1: a CPU run) now, at the end of its step (the allocator's
    // counters: no host sync). Without `read_back` (a data-parallel rank other than 0, whose
    // part reaches rank 0's frame through the reduction) nothing is copied and no frame comes.
    std::shared_ptr<InFlight> launch(Gpt& model, int64_t step, bool skipped, int cuda_device,
                                     const RankReduction* ranks = nullptr, bool read_back = true);
    // The frame, once the copy has landed (waits for it only if it has not; after the next
    // step's own sync it has).
    static LayerStatsFrame complete(const InFlight& in_flight);

private:
    std::unordered_map<std::string, torch::Tensor> weights_before_;
};

// How each value of a telemetry step's buffer combines across data-parallel ranks.
enum RankCombine : int8_t { kRankSum = 0, kRankMax = 1, kRankMean = 2 };
// The buffer combined element by element as `how` says (RankReduction's allreduces). A
// maximum is NaN where any rank's value is: MAX alone drops it (NCCL's max is fmaxf; Gloo's
// std::max keeps or drops it by the ranks' order), and one rank's NaN attention logit must
// reach the frame as the single process's would.
torch::Tensor combine_across_ranks(const torch::Tensor& buffer, const std::vector<int8_t>& how,
                                   const TelemetryStep::RankReduction& ranks);

} // namespace mantissa
