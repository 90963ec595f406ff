// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/communication_plot.h"

#include <algorithm>
#include <cmath>

#include "plots/smoothing.h"

namespace mantissa {

CommunicationPlot::CommunicationPlot(QWidget* parent) : TimeSeriesPlot(parent)
{
    yAxis->setLabel(QStringLiteral("ms / step"));
    compute_ = addGraph();
    compute_->setName(QStringLiteral("compute (rank 0)"));
    compute_->setPen(curvePen(QColor(31, 119, 180), 1.5));
    allreduce_ = addGraph();
    allreduce_->setName(QStringLiteral("allreduce wait (rank 0)"));
    allreduce_->setPen(curvePen(QColor(214, 39, 40), 1.5));
    legend->setVisible(true);
    placeLegendAbove();
}

void CommunicationPlot::clearData()
{
    compute_->data()->clear();
    allreduce_->data()->clear();
}

void CommunicationPlot::rebuild(const RunHistory& history, bool)
{
    // One point per step, decimated to the budget by min/max so that a spike survives.
    std::vector<double> xs, compute, allreduce;
    for (const StepPoint& p : history.steps()) {
        if (!std::isfinite(p.allreduce_ms)) continue;
        xs.push_back(history.xOf(p.step, xAxisMode()));
        compute.push_back(std::max(0.0, p.step_time_ms - p.allreduce_ms));
        allreduce.push_back(p.allreduce_ms);
    }
    const size_t buckets = std::max<size_t>(1, size_t(pointBudget()) / 4);
    for (auto [graph, ys] : {std::pair{compute_, &compute}, std::pair{allreduce_, &allreduce}}) {
        const DecimatedSeries d = decimate_min_max(xs, *ys, buckets);
        graph->setData(QVector<double>(d.xs.begin(), d.xs.end()), QVector<double>(d.ys.begin(), d.ys.end()), true);
    }
}

void CommunicationPlot::fitToData() { fitGraphs({compute_, allreduce_}, false, true); }

} // namespace mantissa
