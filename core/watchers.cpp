// SPDX-License-Identifier: GPL-3.0-or-later
#include "watchers.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include <nlohmann/json.hpp>

namespace mantissa {

const std::vector<std::string>& watcher_names()
{
    static const std::vector<std::string> names = {"nonfinite", "loss_spike",      "grad_spike", "loss_scale_collapse",
                                                   "attention_logit", "log_z", "fp8_underflow"};
    return names;
}

const char* watch_action_name(WatchAction action)
{
    switch (action) {
    case WatchAction::None: return "none";
    case WatchAction::Pause: return "pause";
    case WatchAction::SwitchToBf16: return "bf16";
    }
    return "?";
}

namespace {

std::string fmt(double v)
{
    if (std::isnan(v)) return "nan"; // a stream writes a negative NaN as "-nan"
    std::ostringstream out;
    out.precision(5);
    out << v;
    return out.str();
}

// Whether the backward pass makes a role's tensor: the gradients, the wgrad GEMM's operands
// (cast in the backward) and their block scales. The rest (operands, outputs, attention's
// probabilities and the forward casts' scales) come from the forward pass.
bool backward_role(const std::string& role)
{
    return role.starts_with("grad_") || role == "weight_grad" || role.find("_wgrad") != std::string::npos;
}

int role_rank(const std::string& role)
{
    const auto& order = tensor_roles();
    const auto it = std::find(order.begin(), order.end(), role);
    return static_cast<int>(it - order.begin());
}

} // namespace

// "1.52 (running mean 1.43 + 6 sigma of 0.015)": the mean and sigma the value was compared
// with, before it was folded in (the mean after it understated the bar).
std::string Watchers::spike_bar(const RunningStats& s, double k)
{
    return fmt(s.compared_mean + k * s.compared_sigma) + " (running mean " + fmt(s.compared_mean) + " + " + fmt(k) +
           " sigma of " + fmt(s.compared_sigma) + ")";
}

bool Watchers::RunningStats::spike(double x, double k, int64_t window)
{
    const int64_t warmup = std::max<int64_t>(10, window / 2);
    compared_mean = mean;
    compared_sigma = std::sqrt(var);
    const bool fired = n >= warmup && x > mean + k * compared_sigma;
    // Exponential moving mean and variance with span `window`.
    const double alpha = 2.0 / (static_cast<double>(window) + 1.0);
    if (n == 0) {
        mean = x;
    } else {
        const double delta = x - mean;
        mean += alpha * delta;
        var = (1.0 - alpha) * (var + alpha * delta * delta);
    }
    ++n;
    return fired;
}

bool Watchers::cooled_down(const std::string& watcher, const std::string& subject, int64_t step)
{
    const auto key = std::make_pair(watcher, subject);
    const auto it = last_fired_.find(key);
    // Quiet for cooldown_steps steps after the step it fired in (`<` fired again one step
    // early: 1 was 0), and for the rest of that step; 0 fires every time.
    if (it != last_fired_.end() && config_.cooldown_steps > 0 && step - it->second <= config_.cooldown_steps)
        return false;
    last_fired_[key] = step;
    return true;
}

WatchAlert Watchers::make(int64_t step, const std::string& watcher, const std::string& layer, std::string message) const
{
    WatchAlert a;
    a.step = step;
    a.watcher = watcher;
    a.layer = layer;
    a.message = std::move(message);
    if (const auto it = config_.actions.find(watcher); it != config_.actions.end()) a.action = it->second;
    return a;
}

std::vector<WatchAlert> Watchers::on_step(const StepMetrics& m)
{
    std::vector<WatchAlert> alerts;
    if (!std::isfinite(m.train_loss) || (!m.skipped && !std::isfinite(m.grad_norm))) {
        // Where the backward made them first: lm_head's gradient (which the tied token
        // embedding's, `wte`, holds), then the rest in reverse. A non-finite loss came from the
        // forward, and every gradient after it is NaN: the gradients name no layer then (a
        // telemetry frame's watcher does, from the forward's values).
        std::string layer;
        if (std::isfinite(m.train_loss)) {
            std::vector<std::pair<std::string, double>> backward(m.layer_grad_norms.rbegin(),
                                                                 m.layer_grad_norms.rend());
            std::stable_partition(backward.begin(), backward.end(), [](const auto& g) { return g.first == "wte"; });
            for (const auto& [name, norm] : backward)
                if (!std::isfinite(norm)) {
                    layer = name;
                    break;
                }
        }
        if (cooled_down("nonfinite", layer, m.step))
            alerts.push_back(make(m.step, "nonfinite", layer,
                                  "loss " + fmt(m.train_loss) + ", grad norm " + fmt(m.grad_norm) +
                                      (layer.empty() ? std::string() : "; first non-finite gradient in " + layer)));
        return alerts; // spikes are meaningless on a non-finite step
    }
    if (loss_.spike(m.train_loss, config_.loss_spike_sigma, config_.spike_window) && cooled_down("loss_spike", "", m.step))
        alerts.push_back(make(m.step, "loss_spike", "",
                              "loss " + fmt(m.train_loss) + " > " + spike_bar(loss_, config_.loss_spike_sigma)));
    if (!m.skipped && grad_norm_.spike(m.grad_norm, config_.grad_spike_sigma, config_.spike_window) &&
        cooled_down("grad_spike", "", m.step)) {
        std::string worst;
        double worst_norm = -1.0;
        for (const auto& [name, norm] : m.layer_grad_norms)
            if (norm > worst_norm) {
                worst_norm = norm;
                worst = name;
            }
        const std::string largest =
            worst.empty() ? std::string() : "; largest in " + worst + " (" + fmt(worst_norm) + ")";
        alerts.push_back(make(m.step, "grad_spike", worst,
                              "grad norm " + fmt(m.grad_norm) + " > " +
                                  spike_bar(grad_norm_, config_.grad_spike_sigma) + largest));
    }
    return alerts;
}

std::vector<WatchAlert> Watchers::on_loss_scale(int64_t step, double scale, bool backed_off)
{
    std::vector<WatchAlert> alerts;
    if (backed_off) backoffs_.push_back(step);
    while (!backoffs_.empty() && step - backoffs_.front() >= config_.backoff_window) backoffs_.pop_front();
    const bool below_floor = scale < config_.loss_scale_floor;
    const bool too_many = static_cast<int64_t>(backoffs_.size()) >= config_.backoff_limit;
    if ((below_floor || too_many) && cooled_down("loss_scale_collapse", "", step))
        alerts.push_back(make(step, "loss_scale_collapse", "",
                              below_floor ? "loss scale " + fmt(scale) + " below floor " + fmt(config_.loss_scale_floor)
                                          : std::to_string(backoffs_.size()) + " backoffs within " +
                                                std::to_string(config_.backoff_window) + " steps (scale " + fmt(scale) +
                                                ")"));
    return alerts;
}

std::vector<WatchAlert> Watchers::on_frame(const LayerStatsFrame& frame, const std::vector<std::string>& forward_order)
{
    std::vector<WatchAlert> alerts;
    auto rank = [&](const std::string& layer) {
        return static_cast<int>(std::find(forward_order.begin(), forward_order.end(), layer) - forward_order.begin());
    };
    // Non-finite values: where they first appeared in data-flow order. The forward pass runs
    // through the layers in order; the backward pass runs in reverse after it, so a layer that
    // only has non-finite gradients ranks after every forward value.
    auto flow_rank = [&](const TensorStats& t) {
        const bool backward = backward_role(t.role);
        const int layer = rank(t.layer);
        return std::make_tuple(backward ? 1 : 0, backward ? -layer : layer, role_rank(t.role));
    };
    const TensorStats* first = nullptr;
    for (const auto& t : frame.tensors) {
        if (t.nans + t.infs == 0) continue;
        // A step the loss scaler skipped: its gradients overflowed, and the scaler backed off
        // (as on_step, no divergence). Its forward values are the model's own.
        if (frame.skipped && backward_role(t.role)) continue;
        if (!first || flow_rank(t) < flow_rank(*first)) first = &t;
    }
    if (first && cooled_down("nonfinite", first->layer, frame.step)) {
        alerts.push_back(make(frame.step, "nonfinite", first->layer,
                              first->role + " of " + first->layer + " has " + std::to_string(first->nans) + " NaN and " +
                                  std::to_string(first->infs) + " inf of " + std::to_string(first->count) + " values"));
        alerts.back().role = first->role;
    }
    // Per layer, the worst tensor over its threshold: the first in the frame's order fired, and
    // lm_head's "weight: 5.3% flush to zero" was all a step said whose gradient flushed whole
    // (read-only audit 'guiwalk'). The cooldown stays the layer's: a watcher's action (a pause,
    // a switch to BF16) is taken once a layer, not once a role.
    std::vector<std::pair<std::string, std::vector<const TensorStats*>>> over; // layers in frame order
    for (const auto& t : frame.tensors) {
        // FP8 operands, and the E2M1 elements of nvfp4/mxfp4 operands (against their own
        // threshold). A "<role>_scale" row of nvfp4 counts blocks whose E4M3 scale became 0:
        // every value of such a block is lost. The "_no_rht" rows are a cast no GEMM makes
        // (the wgrad operand without its Hadamard transform, for comparison): not watched.
        const bool fp8 = t.format == "e4m3" || t.format == "e5m2", fp4 = t.format == "e2m1";
        if ((!fp8 && !fp4) || t.role.ends_with("_no_rht")) continue;
        if (t.underflow <= (fp4 ? config_.fp4_underflow_max : config_.fp8_underflow_max)) continue;
        auto it = std::find_if(over.begin(), over.end(), [&](const auto& l) { return l.first == t.layer; });
        if (it == over.end()) it = over.insert(over.end(), {t.layer, {}});
        it->second.push_back(&t);
    }
    for (const auto& [layer, tensors] : over) {
        if (!cooled_down("fp8_underflow", layer, frame.step)) continue;
        // The largest share flushed; the first in the frame's order among equals.
        const TensorStats* t = *std::max_element(tensors.begin(), tensors.end(), [](const auto* a, const auto* b) {
            return a->underflow < b->underflow;
        });
        const bool block_scales = t->role.size() > 6 && t->role.ends_with("_scale");
        const double threshold = t->format == "e2m1" ? config_.fp4_underflow_max : config_.fp8_underflow_max;
        const std::string what = block_scales ? "% of blocks have a scale that flushes to zero in "
                                              : "% of values flush to zero in ";
        alerts.push_back(make(frame.step, "fp8_underflow", layer,
                              t->role + " of " + layer + ": " + fmt(100.0 * t->underflow) + what + t->format +
                                  " (threshold " + fmt(100.0 * threshold) + "%)"));
        alerts.back().role = t->role;
    }
    for (const auto& [layer, logit] : frame.attention_max_logit)
        if (logit > config_.attention_logit_max && cooled_down("attention_logit", layer, frame.step))
            alerts.push_back(make(frame.step, "attention_logit", layer,
                                  "max attention logit " + fmt(logit) + " > " + fmt(config_.attention_logit_max)));
    if (std::abs(frame.log_z_mean) > config_.log_z_max && cooled_down("log_z", "lm_head", frame.step))
        alerts.push_back(make(frame.step, "log_z", "lm_head",
                              "mean log Z " + fmt(frame.log_z_mean) + " beyond +-" + fmt(config_.log_z_max)));
    return alerts;
}

std::string Watchers::state_text() const
{
    nlohmann::json fired = nlohmann::json::array();
    for (const auto& [key, step] : last_fired_) fired.push_back({key.first, key.second, step});
    const nlohmann::json j = {{"loss", {loss_.mean, loss_.var, loss_.n}},
                              {"grad_norm", {grad_norm_.mean, grad_norm_.var, grad_norm_.n}},
                              {"backoffs", backoffs_},
                              {"last_fired", fired}};
    return j.dump();
}

void Watchers::restore_state(const std::string& text)
{
    try {
        const auto j = nlohmann::json::parse(text);
        auto stats = [](const nlohmann::json& s) {
            return RunningStats{s.at(0).get<double>(), s.at(1).get<double>(), s.at(2).get<int64_t>()};
        };
        RunningStats loss = stats(j.at("loss")), grad = stats(j.at("grad_norm"));
        std::deque<int64_t> backoffs;
        for (const auto& b : j.at("backoffs")) backoffs.push_back(b.get<int64_t>());
        std::map<std::pair<std::string, std::string>, int64_t> fired;
        for (const auto& f : j.at("last_fired"))
            fired[{f.at(0).get<std::string>(), f.at(1).get<std::string>()}] = f.at(2).get<int64_t>();
        loss_ = loss;
        grad_norm_ = grad;
        backoffs_ = std::move(backoffs);
        last_fired_ = std::move(fired);
    } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(std::string("watcher state cannot be read: ") + e.what());
    }
}

} // namespace mantissa
