// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Plain value snapshots that the engine pushes out while it trains. No LibTorch,
// no Qt: the run store, the CLI and the GUI all consume these.

#include <cstdint>
#include <string>
#include <vector>

#include "run_event.h"

namespace mantissa {

// One optimizer step. `step` counts completed updates, starting at 1.
struct StepMetrics {
    int64_t step = 0;
    double train_loss = 0.0;    // mean over the micro-batches of this step
    double learning_rate = 0.0; // lr used for this update
    double grad_norm = 0.0;     // global L2 norm before clipping
    double step_time_ms = 0.0;  // wall time of forward+backward+update
    double tokens_per_s = 0.0;
    double loss_scale = 1.0;    // the scale this step's backward used (1 when scaling is off)
    bool skipped = false;       // optimizer step skipped: non-finite gradients
    std::vector<std::pair<std::string, double>> layer_grad_norms; // per GEMM layer, forward order
    // Further scalars by tag: a data-parallel run's communication and per-rank times
    // (dp/allreduce_ms, dp/step_ms/rank_N, ...; docs/DISTRIBUTED.md).
    std::vector<std::pair<std::string, double>> extra_scalars;
};

// A periodic evaluation. `step` is the number of updates done when it ran (0 = before training).
struct EvalMetrics {
    int64_t step = 0;
    double val_loss = 0.0;
    double train_loss = 0.0; // same estimator on the training split, for the gap
};

// One tensor of one layer at one step (docs/TELEMETRY.md).
struct TensorStats {
    std::string layer;  // dotted layer name
    std::string role;   // one of tensor_roles()
    std::string format; // the format the tensor was cast to
    int first_exponent = 0;                 // exponent of exponent_counts[0]
    std::vector<int64_t> exponent_counts;   // finite non-zero values by floor(log2|x|), contiguous span
    int64_t count = 0, zeros = 0, infs = 0, nans = 0;
    // -1: not measured. A 16-bit row whose cast no row saw (the native executor's activations,
    // gradients and GEMM outputs, already in the format) has underflow and overflow -1 and MSE
    // and SNR NaN; per-row and block scales have subnormal and overflow -1.
    double underflow = 0.0; // fraction of values that were non-zero and became zero (-1: cast not seen)
    double subnormal = 0.0; // fraction that landed in the format's subnormal range (-1: per-row/block scales)
    double overflow = 0.0;  // fraction beyond the format's max, saturated or inf/NaN (-1: see above)
    double amax = 0.0;
    double scale = 1.0;     // FP8 per-tensor scale (0 for per-row/block recipes, 1 otherwise)
    double quant_mse = 0.0;
    double quant_snr_db = 0.0; // +inf when the cast was exact; -inf (MSE +inf) when a value became Inf/NaN
    double update_ratio = -1.0; // weights: rms(update) / rms(weight); -1 otherwise
};

// Every TensorStats::role the engine records, in the order the GUI offers them
// (docs/TELEMETRY.md): a GEMM's operands, output and weight gradient; a block recipe's scales
// ("<role>_scale", against the scale format); the wgrad GEMM's operands where it casts them
// apart (nvfp4: with and without the Hadamard transform; per-tensor recipes: in another format
// than the forward's or the dgrad's) and the dgrad GEMM's weight likewise ("weight_dgrad"); an
// unfused attention layer's probabilities and score gradient, with their block scales under a
// block recipe.
inline const std::vector<std::string>& tensor_roles()
{
    static const std::vector<std::string> names{
        "weight",       "input",       "output",           "grad_output",        "weight_grad",
        "weight_scale", "input_scale", "grad_output_scale", "input_wgrad",       "input_wgrad_no_rht",
        "grad_output_wgrad", "grad_output_wgrad_no_rht", "probs", "grad_scores", "probs_scale",
        "grad_scores_scale", "query_wgrad", "query_wgrad_no_rht", "grad_scores_wgrad", "grad_scores_wgrad_no_rht",
        "probs_wgrad", "probs_wgrad_no_rht", "weight_dgrad"};
    return names;
}

// Memory at one step.
struct MemorySnapshot {
    int64_t resident_bytes = 0;        // process RSS (CPU)
    int64_t cuda_allocated_bytes = -1; // caching allocator, -1 when not on CUDA
    int64_t cuda_reserved_bytes = -1;
    int64_t cuda_peak_bytes = -1;
    int64_t nvml_used_bytes = -1;      // whole device, all processes (NVML)
};

// Everything the engine measured at one telemetry step.
struct LayerStatsFrame {
    int64_t step = 0;
    bool skipped = false; // the loss scaler skipped the step (its gradients overflowed)
    std::vector<TensorStats> tensors;
    std::vector<std::pair<std::string, double>> attention_max_logit; // by block: max |q.k|/sqrt(d)
    double log_z_mean = 0.0;  // mean log-partition of the output softmax
    double log_z_max = 0.0;
    MemorySnapshot memory;
};

// Receives snapshots from the training thread. Implementations must return fast and
// must not throw: the training step waits for them.
class TelemetrySink {
public:
    virtual ~TelemetrySink() = default;
    virtual void on_step(const StepMetrics& metrics) = 0;
    virtual void on_eval(const EvalMetrics& metrics) = 0;
    virtual void on_event(const RunEvent& event) = 0;
    virtual void on_layer_stats(const LayerStatsFrame& frame) {}
};

// Forwards every snapshot to several sinks (store, GUI buffer, console).
class FanOutSink : public TelemetrySink {
public:
    explicit FanOutSink(std::vector<TelemetrySink*> sinks) : sinks_(std::move(sinks)) {}
    void on_step(const StepMetrics& m) override { for (auto* s : sinks_) s->on_step(m); }
    void on_eval(const EvalMetrics& m) override { for (auto* s : sinks_) s->on_eval(m); }
    void on_event(const RunEvent& e) override { for (auto* s : sinks_) s->on_event(e); }
    void on_layer_stats(const LayerStatsFrame& f) override { for (auto* s : sinks_) s->on_layer_stats(f); }

private:
    std::vector<TelemetrySink*> sinks_;
};

} // namespace mantissa
