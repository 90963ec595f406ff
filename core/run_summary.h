// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// One saved run at a glance: what the Runs page lists, what sweeps and `compare` summarise.
// Filled by the run store (RunStore::list_run_summaries); a plain value, no LibTorch.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "run_status.h"
#include <vector>

namespace mantissa {

struct RunSummaryRow {
    static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

    int64_t id = 0;
    std::string name;
    std::string project_path;
    RunStatus status = RunStatus::Running;
    std::string created_at;
    std::string finished_at; // "" while running
    std::vector<std::string> tags; // sorted

    // From the config's precision section.
    std::string preset;       // "fp32", "bf16", "fp8-hybrid", ...
    std::string fp8_scaling;  // the FP8 layers' recipes ("nvfp4, mxfp4"); as configured where no GEMM is FP8
    int64_t layer_overrides = 0; // entries in precision.layers
    int64_t keep_last_bf16 = 0;  // precision.keep_last_bf16: the last blocks train in BF16
    std::string recipe;       // "fp8-hybrid (delayed) + 2 overrides, 1 live switch": describe_recipe,
                              // then describe_live_switches
    // Precision changes made while the run trained (the user's, a watcher's): the recipe
    // above is the one it started with.
    int64_t live_switches = 0;

    // From the stored metrics. NaN / -1 where the run has none.
    int64_t steps_done = 0;          // last step with a train loss
    double final_train_loss = kNone; // at steps_done
    double final_val_loss = kNone;   // the last evaluation
    int64_t final_val_step = -1;
    double best_val_loss = kNone;    // the lowest evaluation (earliest step on ties)
    int64_t best_val_step = -1;
    double median_tokens_per_s = kNone; // median over the run's steps: robust to warm-up and evals
    int64_t skipped_steps = 0;          // optimizer steps skipped for non-finite gradients
    // Memory is sampled at telemetry steps (telemetry.interval): the largest sample.
    int64_t peak_resident_bytes = -1; // process RSS
    int64_t peak_cuda_bytes = -1;     // caching allocator's peak, CUDA runs only

    std::string config_json;

    // The figure to compare runs by: the CUDA allocator's peak on a GPU, else RSS.
    int64_t peak_memory_bytes() const { return peak_cuda_bytes >= 0 ? peak_cuda_bytes : peak_resident_bytes; }
    // An FP32 reference for comparisons: not one switched to another format while it trained,
    // nor one whose last blocks trained in BF16 (it was taken for "the FP32 run" beside one).
    bool is_fp32() const
    {
        return preset == "fp32" && layer_overrides == 0 && keep_last_bf16 == 0 && live_switches == 0;
    }
};

// "fp32", "bf16 + 1 override", "fp8-hybrid (delayed) + 2 overrides", "fp8-e4m3 (nvfp4), last
// 2 blocks bf16": the FP8 scaling recipe is named only for FP8 presets or when an override
// could make a layer FP8.
inline std::string describe_recipe(const std::string& preset, const std::string& fp8_scaling, int64_t layer_overrides,
                                   bool overrides_use_fp8 = false, int64_t keep_last_bf16 = 0)
{
    std::string out = preset.empty() ? std::string("?") : preset;
    if ((preset.rfind("fp8", 0) == 0 || overrides_use_fp8) && !fp8_scaling.empty()) out += " (" + fp8_scaling + ")";
    if (layer_overrides > 0)
        out += " + " + std::to_string(layer_overrides) + (layer_overrides == 1 ? " override" : " overrides");
    if (keep_last_bf16 > 0)
        out += ", last " + (keep_last_bf16 == 1 ? std::string("block") : std::to_string(keep_last_bf16) + " blocks") +
               " bf16";
    return out;
}

// What follows the recipe of a run switched while it trained: ", 2 live switches"; "" for none.
inline std::string describe_live_switches(int64_t live_switches)
{
    if (live_switches <= 0) return {};
    return ", " + std::to_string(live_switches) + (live_switches == 1 ? " live switch" : " live switches");
}

} // namespace mantissa
