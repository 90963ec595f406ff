// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Instability watchers: each turns a trajectory (loss, gradient norms, loss scale, layer
// statistics) into alerts that name the step, the layer and the values. No LibTorch: they
// run on plain snapshots, so they are tested on scripted trajectories.

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "telemetry.h"

namespace mantissa {

enum class WatchAction { None, Pause, SwitchToBf16 };

struct WatcherConfig {
    double loss_spike_sigma = 6.0;     // loss more than k sigma above its running mean
    double grad_spike_sigma = 6.0;     // same for the global gradient norm
    int64_t spike_window = 100;        // EMA span (steps) of the running mean and variance
    double loss_scale_floor = 1.0;     // dynamic loss scale below this: collapse
    int64_t backoff_limit = 5;         // ... or this many backoffs
    int64_t backoff_window = 100;      // ... within this many steps
    double attention_logit_max = 100.0; // max |q.k|/sqrt(d) of a layer (Wortsman et al. 2023)
    double log_z_max = 20.0;           // |mean log Z| of the output softmax
    double fp8_underflow_max = 0.05;   // fraction of an FP8 tensor flushed to zero (TE AutoswitchGemm: 5%)
    // The same for the E2M1 elements of nvfp4/mxfp4 operands: a 16- or 32-value block flushes
    // what lies below a quarter of its smallest step, 7-11% of a Gaussian's values (so 5%
    // would fire on every healthy layer); 25% is a tail heavy enough to lose a quarter.
    double fp4_underflow_max = 0.25;
    int64_t cooldown_steps = 100;      // a watcher stays quiet this long per layer after firing
    // What to do when one fires: keyed by watcher name (nonfinite, loss_spike, grad_spike,
    // loss_scale_collapse, attention_logit, log_z, fp8_underflow).
    std::map<std::string, WatchAction> actions;
};

struct WatchAlert {
    int64_t step = 0;
    std::string watcher; // the names above
    std::string layer;   // "" for global signals
    std::string role;    // the tensor role, for alerts about one tensor (nonfinite in a frame, fp8_underflow)
    std::string message;
    WatchAction action = WatchAction::None;
};

const std::vector<std::string>& watcher_names();
const char* watch_action_name(WatchAction action);

class Watchers {
public:
    explicit Watchers(WatcherConfig config) : config_(std::move(config)) {}

    // Every step: loss and global/per-layer gradient norms (layer_grad_norms in forward order).
    std::vector<WatchAlert> on_step(const StepMetrics& m);
    // After each loss-scaler update.
    std::vector<WatchAlert> on_loss_scale(int64_t step, double scale, bool backed_off);
    // Whether any watcher has an action (pause, switch to BF16): then when its alert is handled
    // is part of the run, not only of its record.
    bool has_actions() const
    {
        for (const auto& [name, action] : config_.actions)
            if (action != WatchAction::None) return true;
        return false;
    }
    // At the telemetry cadence. `forward_order` ranks layer names for attribution.
    std::vector<WatchAlert> on_frame(const LayerStatsFrame& frame, const std::vector<std::string>& forward_order);

    // What the watchers have learnt of the run (running means, recent backoffs, cooldowns),
    // as text for checkpoints: a resumed run alerts exactly where the straight run would.
    // Doubles round-trip exactly. restore_state throws std::invalid_argument on text it
    // cannot read.
    std::string state_text() const;
    void restore_state(const std::string& text);

private:
    struct RunningStats {
        double mean = 0.0, var = 0.0;
        int64_t n = 0;
        double compared_mean = 0.0, compared_sigma = 0.0; // what the last `spike` compared x with
        // True when `x` is more than k sigma above the mean seen so far; then folds x in.
        bool spike(double x, double k, int64_t window);
    };
    static std::string spike_bar(const RunningStats& stats, double k);
    // True, and the firing noted, unless `watcher` fired for `subject` (a layer) within the
    // cooldown.
    bool cooled_down(const std::string& watcher, const std::string& subject, int64_t step);
    WatchAlert make(int64_t step, const std::string& watcher, const std::string& layer, std::string message) const;

    WatcherConfig config_;
    RunningStats loss_, grad_norm_;
    std::deque<int64_t> backoffs_;
    std::map<std::pair<std::string, std::string>, int64_t> last_fired_;
};

} // namespace mantissa
