// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/layer_diff.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace mantissa {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Cells = std::map<std::pair<std::string, int64_t>, double>; // (layer, step) -> value

std::vector<std::string> order_layers(const std::set<std::string>& present, const std::vector<std::string>& order)
{
    std::vector<std::string> rows;
    for (const auto& l : order)
        if (present.count(l)) rows.push_back(l);
    for (const auto& l : present)
        if (std::find(rows.begin(), rows.end(), l) == rows.end()) rows.push_back(l);
    return rows;
}

std::vector<int64_t> thin(std::vector<int64_t> steps)
{
    if (steps.size() <= kMaxLayerDiffColumns) return steps;
    std::vector<int64_t> out;
    const double stride = double(steps.size() - 1) / double(kMaxLayerDiffColumns - 1);
    for (size_t i = 0; i < kMaxLayerDiffColumns; ++i)
        out.push_back(steps[static_cast<size_t>(std::llround(double(i) * stride))]);
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

template <typename Diff>
LayerDiffGrid build(const Cells& a, const Cells& b, const std::vector<std::string>& order, Diff diff)
{
    std::set<std::string> layers;
    std::set<int64_t> stepsA, stepsB;
    for (const auto& [key, v] : a) {
        layers.insert(key.first);
        stepsA.insert(key.second);
    }
    for (const auto& [key, v] : b) {
        layers.insert(key.first);
        stepsB.insert(key.second);
    }
    std::vector<int64_t> common;
    std::set_intersection(stepsA.begin(), stepsA.end(), stepsB.begin(), stepsB.end(), std::back_inserter(common));
    LayerDiffGrid grid;
    if (common.empty()) return grid;
    grid.layers = order_layers(layers, order);
    grid.steps = thin(std::move(common));
    grid.values.assign(grid.steps.size() * grid.layers.size(), kNaN);
    for (size_t c = 0; c < grid.steps.size(); ++c)
        for (size_t r = 0; r < grid.layers.size(); ++r) {
            const auto key = std::make_pair(grid.layers[r], grid.steps[c]);
            const auto ia = a.find(key), ib = b.find(key);
            if (ia != a.end() && ib != b.end()) grid.values[c * grid.layers.size() + r] = diff(ia->second, ib->second);
        }
    return grid;
}

Cells tensor_cells(const std::vector<std::pair<int64_t, TensorStats>>& rows, LayerDiffStat stat, const std::string& role)
{
    Cells cells;
    for (const auto& [step, t] : rows) {
        if (t.role != role) continue;
        double v = kNaN;
        switch (stat) {
        case LayerDiffStat::UnderflowPercent: v = t.underflow >= 0 ? t.underflow * 100.0 : kNaN; break; // -1: none
        case LayerDiffStat::OverflowPercent: v = t.overflow >= 0 ? t.overflow * 100.0 : kNaN; break; // -1: not measured
        case LayerDiffStat::AmaxLog10Ratio: v = t.amax; break;
        case LayerDiffStat::GradNorm: break;
        }
        cells[{t.layer, step}] = v;
    }
    return cells;
}

} // namespace

double LayerDiffGrid::at(int64_t step, const std::string& layer) const
{
    const auto c = std::find(steps.begin(), steps.end(), step);
    const auto r = std::find(layers.begin(), layers.end(), layer);
    if (c == steps.end() || r == layers.end()) return kNaN;
    return values[static_cast<size_t>(c - steps.begin()) * layers.size() + static_cast<size_t>(r - layers.begin())];
}

LayerDiffGrid layer_stat_difference(const std::vector<std::pair<int64_t, TensorStats>>& a,
                                    const std::vector<std::pair<int64_t, TensorStats>>& b, LayerDiffStat stat,
                                    const std::string& role, const std::vector<std::string>& layerOrder)
{
    const Cells ca = tensor_cells(a, stat, role), cb = tensor_cells(b, stat, role);
    if (stat == LayerDiffStat::AmaxLog10Ratio)
        return build(ca, cb, layerOrder, [](double x, double y) {
            return x > 0.0 && y > 0.0 && std::isfinite(x) && std::isfinite(y) ? std::log10(x / y) : kNaN;
        });
    return build(ca, cb, layerOrder, [](double x, double y) { return x - y; });
}

LayerDiffGrid layer_series_difference(const std::map<std::string, Series>& a, const std::map<std::string, Series>& b,
                                      const std::vector<std::string>& layerOrder)
{
    // Every step (a million on a long run) is aligned per layer in one linear pass; only
    // the thinned columns are looked up.
    std::map<std::string, std::vector<AlignedPoint>> aligned;
    std::set<std::string> layers;
    std::vector<int64_t> steps;
    for (const auto& [layer, sa] : a) {
        const auto ib = b.find(layer);
        if (ib == b.end()) continue;
        auto points = align_on_steps(sa, ib->second);
        if (points.empty()) continue;
        layers.insert(layer);
        for (const auto& p : points) steps.push_back(p.step);
        aligned.emplace(layer, std::move(points));
    }
    std::sort(steps.begin(), steps.end());
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    LayerDiffGrid grid;
    if (steps.empty()) return grid;
    grid.layers = order_layers(layers, layerOrder);
    grid.steps = thin(std::move(steps));
    grid.values.assign(grid.steps.size() * grid.layers.size(), kNaN);
    for (size_t r = 0; r < grid.layers.size(); ++r) {
        const auto& points = aligned.at(grid.layers[r]);
        for (size_t c = 0; c < grid.steps.size(); ++c) {
            const auto it = std::lower_bound(points.begin(), points.end(), grid.steps[c],
                                             [](const AlignedPoint& p, int64_t s) { return p.step < s; });
            if (it != points.end() && it->step == grid.steps[c])
                grid.values[c * grid.layers.size() + r] = it->a - it->b;
        }
    }
    return grid;
}

} // namespace mantissa
