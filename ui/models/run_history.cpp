// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/run_history.h"

#include <algorithm>
#include <cmath>
#include <cctype>
#include <iterator>

namespace mantissa {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr int kStatsPerTensor = 6; // underflow, overflow, amax, quantization SNR, NaN and Inf, subnormal

// Keeps elements 0, 2, 4, ... and always the last one, so the newest data stays exact.
template <typename T> void drop_every_other(std::vector<T>& items)
{
    if (items.size() < 3) return;
    std::vector<T> kept;
    kept.reserve(items.size() / 2 + 1);
    for (size_t i = 0; i + 1 < items.size(); i += 2) kept.push_back(std::move(items[i]));
    kept.push_back(std::move(items.back()));
    items = std::move(kept);
}

// Kinds that can come once a step, for the whole run.
bool repeats(EventKind kind)
{
    return kind == EventKind::LossScaleBackoff || kind == EventKind::LossScaleGrowth || kind == EventKind::StepSkipped;
}

size_t bytes_of(const std::vector<float>& v) { return v.capacity() * sizeof(float); }

} // namespace

const std::vector<std::string>& RunHistory::roles() { return tensor_roles(); }

int RunHistory::roleIndex(const std::string& role)
{
    const auto& r = roles();
    const auto it = std::find(r.begin(), r.end(), role);
    return it == r.end() ? -1 : static_cast<int>(it - r.begin());
}

int RunHistory::roleSlot(const std::string& role) const
{
    const int r = roleIndex(role);
    return r >= 0 && size_t(r) < roleSlot_.size() ? roleSlot_[size_t(r)] : -1;
}

RunHistory::RunHistory(int64_t tokensPerStep) { reset(tokensPerStep); }

void RunHistory::reset(int64_t tokensPerStep)
{
    tokensPerStep_ = tokensPerStep;
    steps_.clear();
    hasCommunication_ = false;
    evals_.clear();
    events_.clear();
    ++eventsRevision_;
    memory_.clear();
    layers_.clear();
    layerIndex_.clear();
    layerHasTensors_.clear();
    roleSlot_.assign(roles().size(), -1);
    roleSlots_ = 0;
    gradNormColumns_.clear();
    gradNormStride_ = 1;
    frames_.clear();
    histograms_.clear();
    histogramBytes_ = frameBytes_ = 0;
    repeated_.clear();
    live_.reset();
    ++revision_;
}

void RunHistory::setInitialLayerStates(const std::vector<LayerState>& states)
{
    live_.reset(states);
    ++revision_;
}

void RunHistory::setLayers(const std::vector<std::string>& names)
{
    for (const auto& n : names) ensureLayer(n);
    ++revision_;
}

int RunHistory::ensureLayer(const std::string& name)
{
    const auto it = layerIndex_.find(name);
    if (it != layerIndex_.end()) return it->second;
    const int index = static_cast<int>(layers_.size());
    layers_.push_back(name);
    layerIndex_.emplace(name, index);
    return index;
}

bool RunHistory::hasTensors(const std::string& name) const
{
    const int index = layerIndex(name);
    return index >= 0 && size_t(index) < layerHasTensors_.size() && layerHasTensors_[size_t(index)];
}

size_t RunHistory::layersWithTensors() const
{
    return static_cast<size_t>(std::count(layerHasTensors_.begin(), layerHasTensors_.end(), true));
}

int RunHistory::layerIndex(const std::string& name) const
{
    const auto it = layerIndex_.find(name);
    return it == layerIndex_.end() ? -1 : it->second;
}

void RunHistory::append(const TelemetryBatch& batch)
{
    for (const auto& m : batch.steps) {
        StepPoint p;
        p.step = m.step;
        p.tokens = static_cast<double>(m.step * tokensPerStep_);
        p.seconds = (steps_.empty() ? 0.0 : steps_.back().seconds) + m.step_time_ms / 1000.0;
        p.train_loss = m.train_loss;
        p.loss_scale = m.loss_scale;
        p.grad_norm = m.grad_norm;
        p.learning_rate = m.learning_rate;
        p.tokens_per_s = m.tokens_per_s;
        p.step_time_ms = m.step_time_ms;
        p.skipped = m.skipped;
        for (const auto& [tag, value] : m.extra_scalars)
            if (tag == "dp/allreduce_ms") {
                p.allreduce_ms = value;
                hasCommunication_ = true;
            }
        steps_.push_back(p);

        if (!m.layer_grad_norms.empty() && m.step % gradNormStride_ == 0) {
            LayerColumn column;
            column.step = m.step;
            for (const auto& [name, norm] : m.layer_grad_norms) {
                const int i = ensureLayer(name);
                if (column.values.size() <= size_t(i)) column.values.resize(size_t(i) + 1, kNaN);
                column.values[size_t(i)] = static_cast<float>(norm);
            }
            gradNormColumns_.push_back(std::move(column));
        }
    }
    for (const auto& e : batch.evals) evals_.push_back({e.step, e.val_loss, e.train_loss});
    for (const auto& e : batch.events) {
        live_.apply(e);
        if (repeats(e.kind)) {
            Repeated& r = repeated_[e.kind];
            if (r.tail) { // the previous newest, off the stride: this one is newer
                const auto last = std::find_if(events_.rbegin(), events_.rend(),
                                               [&e](const RunEvent& kept) { return kept.kind == e.kind; });
                if (last != events_.rend()) events_.erase(std::next(last).base());
                r.tail = false;
            }
            if (r.arrived++ % r.stride == 0) ++r.kept;
            else r.tail = true;
        }
        events_.push_back(e);
        ++eventsRevision_;
    }
    for (const auto& f : batch.layer_frames) appendFrame(f);
    thinColumns();
    thinHistograms();
    thinEvents();
    ++revision_;
}

void RunHistory::appendFrame(const LayerStatsFrame& frame)
{
    for (const auto& t : frame.tensors) // first the slots: one stride for the whole frame
        if (const int role = roleIndex(t.role); role >= 0 && roleSlot_[size_t(role)] < 0)
            roleSlot_[size_t(role)] = static_cast<int>(roleSlots_++);
    const size_t nRoles = roleSlots_;
    FrameSummary summary;
    summary.step = frame.step;
    summary.stride = nRoles;
    HistogramFrame hist;
    hist.step = frame.step;
    hist.stride = nRoles;
    for (const auto& t : frame.tensors) {
        const int layer = ensureLayer(t.layer);
        const int index = roleIndex(t.role);
        if (index < 0) continue;
        const int role = roleSlot_[size_t(index)];
        if (layerHasTensors_.size() <= size_t(layer)) layerHasTensors_.resize(size_t(layer) + 1, false);
        layerHasTensors_[size_t(layer)] = true;
        const size_t base = (size_t(layer) * nRoles + size_t(role)) * kStatsPerTensor;
        if (summary.tensorStats.size() < base + kStatsPerTensor) summary.tensorStats.resize(base + kStatsPerTensor, kNaN);
        // -1: not measured (underflow: a 16-bit tensor whose cast ran in the op that made it;
        // overflow: that, or per-row and block scales), no value rather than -100%.
        summary.tensorStats[base + 0] = t.underflow >= 0 ? static_cast<float>(100.0 * t.underflow) : kNaN;
        summary.tensorStats[base + 1] = t.overflow >= 0 ? static_cast<float>(100.0 * t.overflow) : kNaN;
        summary.tensorStats[base + 2] = static_cast<float>(t.amax);
        // An exact cast (or none: FP32) has no error to colour: NaN reads as "no value". -inf (values
        // lost to Inf) is the worst colour.
        summary.tensorStats[base + 3] =
            t.quant_snr_db < std::numeric_limits<double>::infinity() ? static_cast<float>(t.quant_snr_db) : kNaN;
        summary.tensorStats[base + 4] =
            t.count > 0 ? static_cast<float>(100.0 * static_cast<double>(t.nans + t.infs) / double(t.count)) : kNaN;
        summary.tensorStats[base + 5] = t.subnormal >= 0 ? static_cast<float>(100.0 * t.subnormal) : kNaN; // -1: none

        const size_t slot = size_t(layer) * nRoles + size_t(role);
        if (hist.byIndex.size() <= slot) hist.byIndex.resize(slot + 1);
        ExponentHistogram& h = hist.byIndex[slot];
        h.first_exponent = t.first_exponent;
        h.counts = t.exponent_counts;
        h.count = t.count;
        h.zeros = t.zeros;
        h.infs = t.infs;
        h.nans = t.nans;
        h.format = parse_number_format(t.format).value_or(NumberFormat::FP32);
        h.scale = t.scale;
        h.underflow = t.underflow;
        h.subnormal = t.subnormal;
        h.overflow = t.overflow;
    }
    hist.bytes = hist.byIndex.capacity() * sizeof(ExponentHistogram);
    for (const auto& h : hist.byIndex) hist.bytes += h.counts.capacity() * sizeof(int64_t);
    for (const auto& [block, logit] : frame.attention_max_logit) {
        const int layer = ensureLayer(block + ".sdpa"); // "blocks.N.attn" -> its sdpa row
        if (summary.attentionMaxLogit.size() <= size_t(layer)) summary.attentionMaxLogit.resize(size_t(layer) + 1, kNaN);
        summary.attentionMaxLogit[size_t(layer)] = static_cast<float>(logit);
    }
    frameBytes_ += sizeof(FrameSummary) + bytes_of(summary.tensorStats) + bytes_of(summary.attentionMaxLogit);
    frames_.push_back(std::move(summary));
    if (!hist.byIndex.empty()) {
        histogramBytes_ += hist.bytes;
        histograms_.push_back(std::move(hist));
    }
    memory_.push_back({frame.step, frame.memory.resident_bytes, frame.memory.cuda_allocated_bytes,
                       frame.memory.cuda_reserved_bytes, frame.memory.nvml_used_bytes});
}

void RunHistory::thinColumns()
{
    if (gradNormColumns_.size() > maxColumns_) {
        drop_every_other(gradNormColumns_);
        gradNormStride_ *= 2;
    }
    while ((frames_.size() > maxColumns_ || frameBytes_ > maxFrameBytes_) && frames_.size() >= 3) {
        drop_every_other(frames_);
        frameBytes_ = 0;
        for (const auto& f : frames_)
            frameBytes_ += sizeof(FrameSummary) + bytes_of(f.tensorStats) + bytes_of(f.attentionMaxLogit);
    }
    // A point a telemetry frame: thinned as the frames are, where there are many more of them.
    while (memory_.size() > 4 * maxColumns_ && memory_.size() >= 3) drop_every_other(memory_);
}

void RunHistory::thinHistograms()
{
    while (histogramBytes_ > maxHistogramBytes_ && histograms_.size() >= 3) {
        drop_every_other(histograms_);
        histogramBytes_ = 0;
        for (const auto& h : histograms_) histogramBytes_ += h.bytes;
    }
}

void RunHistory::thinEvents()
{
    for (auto& [kind, r] : repeated_) {
        // Halved as often as it takes: one batch may bring thousands (a window catching up).
        while (r.kept > maxRepeatedEvents_) {
            // Every other one of this kind, the oldest kept, as drop_every_other does with
            // columns. The newest stays: as the tail it was, or as the tail it becomes.
            size_t seen = 0;
            const size_t onStride = r.kept;
            const bool newestOnStride = !r.tail;
            std::erase_if(events_, [&, kind = kind](const RunEvent& e) {
                if (e.kind != kind) return false;
                const size_t i = seen++;
                return i < onStride && i % 2 == 1 && !(newestOnStride && i + 1 == onStride);
            });
            if (newestOnStride && onStride % 2 == 0) r.tail = true;
            r.kept = (onStride + 1) / 2;
            r.stride *= 2;
            ++eventsRevision_;
        }
    }
}

double RunHistory::xOf(int64_t step, XAxisMode mode) const
{
    if (mode == XAxisMode::Step) return static_cast<double>(step);
    if (mode == XAxisMode::Tokens) return static_cast<double>(step * tokensPerStep_);
    if (steps_.empty() || step <= 0) return 0.0;
    // Steps arrive in order: binary search, then interpolate (steps can be missing after a resume).
    const auto it = std::lower_bound(steps_.begin(), steps_.end(), step,
                                     [](const StepPoint& p, int64_t s) { return p.step < s; });
    if (it == steps_.end()) return steps_.back().seconds;
    if (it->step == step || it == steps_.begin()) return it->seconds;
    const auto prev = std::prev(it);
    const double t = static_cast<double>(step - prev->step) / static_cast<double>(it->step - prev->step);
    return prev->seconds + t * (it->seconds - prev->seconds);
}

std::vector<LayerColumn> RunHistory::columns(LayerStat stat, const std::string& role) const
{
    std::vector<LayerColumn> out;
    const size_t nLayers = layers_.size();
    if (stat == LayerStat::GradNorm) {
        out = gradNormColumns_;
        for (auto& c : out) c.values.resize(nLayers, kNaN);
        return out;
    }
    const int r = roleSlot(role);
    out.reserve(frames_.size());
    for (const auto& f : frames_) {
        LayerColumn c;
        c.step = f.step;
        c.values.assign(nLayers, kNaN);
        if (stat == LayerStat::AttentionMaxLogit) {
            for (size_t i = 0; i < std::min(nLayers, f.attentionMaxLogit.size()); ++i) c.values[i] = f.attentionMaxLogit[i];
        } else if (r >= 0) {
            const size_t which = stat == LayerStat::UnderflowPercent ? 0
                                 : stat == LayerStat::OverflowPercent ? 1
                                 : stat == LayerStat::Amax            ? 2
                                 : stat == LayerStat::QuantSnrDb      ? 3
                                 : stat == LayerStat::SubnormalPercent ? 5
                                                                      : 4;
            for (size_t i = 0; i < nLayers && size_t(r) < f.stride; ++i) {
                const size_t at = (i * f.stride + size_t(r)) * kStatsPerTensor + which;
                if (at < f.tensorStats.size()) c.values[i] = f.tensorStats[at];
            }
        }
        out.push_back(std::move(c));
    }
    return out;
}

std::vector<int64_t> RunHistory::histogramSteps() const
{
    std::vector<int64_t> out;
    out.reserve(histograms_.size());
    for (const auto& h : histograms_) out.push_back(h.step);
    return out;
}

const ExponentHistogram* RunHistory::histogram(const std::string& layer, const std::string& role, int64_t step,
                                               int64_t* frameStep) const
{
    if (histograms_.empty()) return nullptr;
    auto it = std::lower_bound(histograms_.begin(), histograms_.end(), step,
                               [](const HistogramFrame& h, int64_t s) { return h.step < s; });
    if (it == histograms_.end()) it = std::prev(it);
    else if (it != histograms_.begin() && step - std::prev(it)->step < it->step - step) it = std::prev(it);
    const int l = layerIndex(layer), r = roleSlot(role);
    if (l < 0 || r < 0 || size_t(r) >= it->stride) return nullptr;
    const size_t slot = size_t(l) * it->stride + size_t(r);
    if (slot >= it->byIndex.size() || it->byIndex[slot].count < 0) return nullptr;
    if (frameStep) *frameStep = it->step;
    return &it->byIndex[slot];
}

} // namespace mantissa
