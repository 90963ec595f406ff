// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_compare.h"

#include <algorithm>
#include <cmath>

#include "project_config.h"

namespace mantissa {

std::vector<double> debiased_ema(const std::vector<double>& values, double weight)
{
    std::vector<double> out(values);
    weight = std::clamp(weight, 0.0, 0.999999);
    if (values.empty() || weight == 0.0) return out;
    // TensorBoard leaves a constant series alone (debiasing would only add rounding noise).
    const bool constant = std::all_of(values.begin(), values.end(), [&](double v) { return v == values.front(); });
    if (constant) return out;
    double last = 0.0;
    double weight_pow = 1.0; // weight^n for the n finite values seen so far
    for (double& v : out) {
        if (!std::isfinite(v)) continue;
        last = last * weight + (1.0 - weight) * v;
        weight_pow *= weight;
        v = last / (1.0 - weight_pow);
    }
    return out;
}

Series ema_smooth(const Series& series, double weight)
{
    std::vector<double> values;
    values.reserve(series.size());
    for (const auto& point : series) values.push_back(point.second);
    values = debiased_ema(values, weight);
    Series out(series);
    for (size_t i = 0; i < out.size(); ++i) out[i].second = values[i];
    return out;
}

std::vector<AlignedPoint> align_on_steps(const Series& a, const Series& b)
{
    std::vector<AlignedPoint> out;
    size_t i = 0, j = 0;
    while (i < a.size() && j < b.size()) {
        if (a[i].first < b[j].first) ++i;
        else if (b[j].first < a[i].first) ++j;
        else {
            out.push_back({a[i].first, a[i].second, b[j].second});
            ++i;
            ++j;
        }
    }
    return out;
}

std::vector<XYPoint> series_by_tokens(const Series& series, double tokens_per_step)
{
    std::vector<XYPoint> out;
    out.reserve(series.size());
    for (const auto& [step, value] : series) out.push_back({static_cast<double>(step) * tokens_per_step, value});
    return out;
}

std::vector<XYPoint> series_by_recorded_tokens(const Series& series, const Series& tokens_per_s,
                                               const Series& step_time_ms, double fallback_tokens_per_step)
{
    // (step, tokens of that step) where both figures were recorded, ascending.
    std::vector<std::pair<int64_t, double>> records;
    for (const auto& [step, ms] : step_time_ms) {
        const auto rate = std::lower_bound(tokens_per_s.begin(), tokens_per_s.end(), step,
                                           [](const auto& row, int64_t s) { return row.first < s; });
        if (rate == tokens_per_s.end() || rate->first != step) continue;
        const double tokens = std::round(rate->second * ms / 1000.0);
        if (std::isfinite(tokens) && tokens > 0) records.emplace_back(step, tokens);
    }
    std::vector<XYPoint> out;
    out.reserve(series.size());
    size_t r = 0;
    int64_t done = 0;     // the last step counted
    double tokens = 0.0;  // after it
    for (const auto& [step, value] : series) {
        for (; r < records.size() && records[r].first <= step; ++r) {
            tokens += static_cast<double>(records[r].first - done) * records[r].second;
            done = records[r].first;
        }
        const double rest = r < records.size() ? records[r].second : fallback_tokens_per_step;
        out.push_back({tokens + static_cast<double>(std::max<int64_t>(step - done, 0)) * rest, value});
    }
    return out;
}

std::vector<XYPoint> series_by_seconds(const Series& series, const Series& step_time_ms)
{
    std::vector<XYPoint> out;
    out.reserve(series.size());
    size_t t = 0;
    double seconds = 0.0;
    for (const auto& [step, value] : series) {
        while (t < step_time_ms.size() && step_time_ms[t].first <= step) {
            if (std::isfinite(step_time_ms[t].second)) seconds += step_time_ms[t].second / 1000.0;
            ++t;
        }
        out.push_back({seconds, value});
    }
    return out;
}

double tokens_per_step(const std::string& config_json)
{
    const ProjectConfig config = load_run_config(config_json);
    return static_cast<double>(config.training.batch_size * config.model.context_length * config.training.grad_accum);
}

std::vector<AlignedXY> align_on_x(const std::vector<XYPoint>& a, const std::vector<XYPoint>& b)
{
    std::vector<AlignedXY> out;
    if (b.empty()) return out;
    size_t j = 0;
    for (const auto& p : a) {
        if (p.x < b.front().x || p.x > b.back().x) continue;
        while (j + 1 < b.size() && b[j + 1].x < p.x) ++j;
        // b[j].x <= p.x here (or j == 0 and p.x == b[0].x)
        double y = b[j].y;
        if (b[j].x < p.x && j + 1 < b.size()) {
            const auto& lo = b[j];
            const auto& hi = b[j + 1];
            const double span = hi.x - lo.x;
            y = span > 0 ? lo.y + (hi.y - lo.y) * (p.x - lo.x) / span : hi.y;
        }
        out.push_back({p.x, p.y, y});
    }
    return out;
}

std::optional<int64_t> first_divergence_step(const Series& a, const Series& b, double tolerance, bool relative)
{
    for (const auto& p : align_on_steps(a, b)) {
        const bool fa = std::isfinite(p.a), fb = std::isfinite(p.b);
        if (!fa && !fb) continue;
        if (fa != fb) return p.step;
        const double diff = std::abs(p.a - p.b);
        const double limit = relative ? tolerance * std::max(std::abs(p.a), std::abs(p.b)) : tolerance;
        if (diff > limit) return p.step;
    }
    return std::nullopt;
}

} // namespace mantissa
