// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Everything the monitor has seen of one run, in compact form, so any plot can be rebuilt
// with another x-axis, smoothing, statistic or step without asking the engine again. Fed by
// the live drain (append) or from the run store (the compare page). No Qt here.
//
// Memory stays bounded on long runs: per-layer columns (heatmap) and exponent histograms are
// thinned by dropping every other column once they pass a cap, so old history gets coarser
// instead of the process growing without limit (steps and evals are a few doubles each and
// are kept whole; plots decimate them when drawing).

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "number_format.h"
#include "controller/snapshot_buffer.h"
#include "models/live_layers.h"
#include "telemetry.h"

namespace mantissa {

enum class XAxisMode { Step, Tokens, Seconds };

// What the layer x step heatmap can show. UnderflowPercent, OverflowPercent, Amax and
// QuantSnrDb are per tensor role (appended last: the combo boxes store the value).
enum class LayerStat {
    UnderflowPercent,
    OverflowPercent,
    Amax,
    GradNorm,
    AttentionMaxLogit,
    QuantSnrDb,
    NonFinitePercent, // NaN and Inf among the tensor's values
    // Values in the format's subnormal range: what a 16-bit tensor whose cast no row saw (the
    // native executor's) can still say, where its underflow is not measured.
    SubnormalPercent
};

struct StepPoint {
    int64_t step = 0;
    double tokens = 0.0;  // tokens trained on after this step
    double seconds = 0.0; // training wall time after this step (sum of step times, evaluations excluded)
    double train_loss = 0.0;
    double loss_scale = 1.0;
    double grad_norm = 0.0;
    double learning_rate = 0.0;
    double tokens_per_s = 0.0;
    double step_time_ms = 0.0;
    double allreduce_ms = std::numeric_limits<double>::quiet_NaN(); // data parallel (dp/allreduce_ms), NaN otherwise
    bool skipped = false;
};

struct EvalPoint {
    int64_t step = 0;
    double val_loss = 0.0;
    double train_loss = 0.0;
};

struct MemoryPoint {
    int64_t step = 0;
    int64_t resident_bytes = 0;
    int64_t cuda_allocated_bytes = -1;
    int64_t cuda_reserved_bytes = -1;
    int64_t nvml_used_bytes = -1;
};

// One exponent histogram (see TensorStats): counts by floor(log2|x|) from first_exponent on.
struct ExponentHistogram {
    int first_exponent = 0;
    std::vector<int64_t> counts;
    int64_t count = -1, zeros = 0, infs = 0, nans = 0; // count -1: no such tensor
    NumberFormat format = NumberFormat::FP32;
    double scale = 1.0; // FP8 per-tensor scale the cast used (0: per-row/block scales)
    double underflow = 0.0, subnormal = 0.0, overflow = 0.0; // fractions, as measured by the engine
};

// One statistic for every layer at one step; NaN where the layer has no value.
struct LayerColumn {
    int64_t step = 0;
    std::vector<float> values; // indexed like RunHistory::layers()
};

class RunHistory {
public:
    static constexpr size_t kDefaultMaxColumns = 2048;
    // What the histograms and the heatmap's frames may take, counted as allocated: a frame keeps a
    // slot for every layer and role, present or not (the cap counted only the present tensors'
    // bins, and held 5-6 times its "32 MB"; a 48-block model's frames alone took 170 MB).
    static constexpr size_t kDefaultMaxHistogramBytes = size_t(32) << 20;
    static constexpr size_t kDefaultMaxFrameBytes = size_t(32) << 20;
    // Loss-scale backoffs and growths and skipped steps kept, of each kind: an FP16 run at its
    // scale floor backs off every step. Past this, every other one, and from then on every
    // other one that comes (as the grad-norm columns are thinned): the markers keep covering
    // the run evenly. The newest is kept as well, so that a live run shows its latest. The
    // event list and the store keep them all.
    static constexpr size_t kDefaultMaxRepeatedEvents = 2048;

    // The roles TensorStats uses, in display order.
    static const std::vector<std::string>& roles();

    explicit RunHistory(int64_t tokensPerStep = 0);

    // Forgets everything. `tokensPerStep` (batch x context x accumulation) turns steps into tokens.
    void reset(int64_t tokensPerStep);
    // Layer names in forward order, when known before the first frame (the project); layers
    // first seen in telemetry are appended.
    void setLayers(const std::vector<std::string>& names);
    // The run's layers as the engine starts them (LiveLayers::from_project); the events that
    // append() sees then keep them current.
    void setInitialLayerStates(const std::vector<LayerState>& states);
    const LiveLayers& liveLayers() const { return live_; }
    void append(const TelemetryBatch& batch);

    void setMaxColumns(size_t columns) { maxColumns_ = columns; }
    void setMaxHistogramBytes(size_t bytes) { maxHistogramBytes_ = bytes; }
    void setMaxFrameBytes(size_t bytes) { maxFrameBytes_ = bytes; }
    void setMaxRepeatedEvents(size_t events) { maxRepeatedEvents_ = events; }
    size_t histogramBytes() const { return histogramBytes_; }
    size_t frameBytes() const { return frameBytes_; }

    const std::vector<StepPoint>& steps() const { return steps_; }
    // A data-parallel run: some step recorded its allreduce time.
    bool hasCommunication() const { return hasCommunication_; }
    const std::vector<EvalPoint>& evals() const { return evals_; }
    const std::vector<RunEvent>& events() const { return events_; }
    const std::vector<MemoryPoint>& memory() const { return memory_; }
    int64_t lastStep() const { return steps_.empty() ? 0 : steps_.back().step; }
    int64_t tokensPerStep() const { return tokensPerStep_; }

    // The x coordinate of a step: the step itself, its tokens, or its training time
    // (interpolated between known steps; step 0 is x = 0).
    double xOf(int64_t step, XAxisMode mode) const;

    const std::vector<std::string>& layers() const { return layers_; }
    int layerIndex(const std::string& name) const; // -1 if unknown
    // Whether some frame held tensor statistics of the layer (an attention row holds only its
    // max logit unless it runs unfused), and how many layers did.
    bool hasTensors(const std::string& name) const;
    size_t layersWithTensors() const;

    // Heatmap columns for a statistic in step order. `role` matters for the per-tensor stats
    // (UnderflowPercent, OverflowPercent, Amax); GradNorm comes from every step's per-layer
    // norms, AttentionMaxLogit is on the blocks' `.attn.sdpa` rows.
    std::vector<LayerColumn> columns(LayerStat stat, const std::string& role = "grad_output") const;

    // Steps that have exponent histograms, ascending.
    std::vector<int64_t> histogramSteps() const;
    // The histogram of `layer`/`role` at the frame nearest `step`; nullptr when none.
    const ExponentHistogram* histogram(const std::string& layer, const std::string& role, int64_t step,
                                       int64_t* frameStep = nullptr) const;

    // A counter bumped by every append: plots compare it to know whether to rebuild.
    uint64_t revision() const { return revision_; }
    // Bumped whenever events() changes (an event came, or thinning dropped some): its size alone
    // may come back to an earlier value.
    uint64_t eventsRevision() const { return eventsRevision_; }

private:
    struct FrameSummary {
        int64_t step = 0;
        size_t stride = 0; // the role slots when the frame came (roleSlot_)
        // [layer * stride + slot] * kStatsPerTensor + {underflow, overflow, amax, SNR, NaN/Inf, subnormal};
        // NaN where absent
        std::vector<float> tensorStats;
        std::vector<float> attentionMaxLogit; // by layer index (sdpa rows), NaN elsewhere
    };
    struct HistogramFrame {
        int64_t step = 0;
        size_t stride = 0;
        // [layer * stride + slot]; count < 0 where the frame has no such tensor. A flat vector,
        // not a map keyed by name: ingesting 1200 tensors a step must stay cheap on the GUI thread.
        std::vector<ExponentHistogram> byIndex;
        size_t bytes = 0; // as allocated: every slot, and the present ones' counts
    };

    int ensureLayer(const std::string& name);
    void appendFrame(const LayerStatsFrame& frame);
    void thinColumns();
    void thinHistograms();
    void thinEvents();
    static int roleIndex(const std::string& role);
    // A role's slot in this history's frames, -1 if no frame had it. Slots are given as roles
    // come: a run records 5 of the 22 roles, and frames laid out by all of them held 4 times
    // the memory (fewer frames under the byte cap).
    int roleSlot(const std::string& role) const;

    LiveLayers live_;
    int64_t tokensPerStep_ = 0;
    std::vector<StepPoint> steps_;
    bool hasCommunication_ = false;
    std::vector<EvalPoint> evals_;
    std::vector<RunEvent> events_;
    std::vector<MemoryPoint> memory_;
    std::vector<std::string> layers_;
    std::vector<bool> layerHasTensors_; // by layer index
    std::vector<int> roleSlot_;         // by roleIndex: the slot, -1 until a frame has the role
    size_t roleSlots_ = 0;
    std::unordered_map<std::string, int> layerIndex_;
    std::vector<LayerColumn> gradNormColumns_;
    int64_t gradNormStride_ = 1; // after thinning, only every stride-th step is kept
    std::vector<FrameSummary> frames_;
    std::vector<HistogramFrame> histograms_;
    size_t histogramBytes_ = 0, frameBytes_ = 0;
    size_t maxColumns_ = kDefaultMaxColumns;
    size_t maxHistogramBytes_ = kDefaultMaxHistogramBytes;
    size_t maxFrameBytes_ = kDefaultMaxFrameBytes;
    size_t maxRepeatedEvents_ = kDefaultMaxRepeatedEvents;
    struct Repeated {
        size_t kept = 0, arrived = 0, stride = 1; // only every stride-th arrival is kept
        bool tail = false; // the newest, off the stride, is kept too until the next one comes
    };
    std::map<EventKind, Repeated> repeated_; // of each kind that repeats
    uint64_t revision_ = 0;
    uint64_t eventsRevision_ = 0;
};

} // namespace mantissa
