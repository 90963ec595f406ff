// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/memory_plot.h"

#include <algorithm>

#include "plots/smoothing.h"

namespace mantissa {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

} // namespace

MemoryPlot::MemoryPlot(QWidget* parent) : TimeSeriesPlot(parent)
{
    yAxis->setLabel(QStringLiteral("memory (MiB)"));
    auto add = [this](const QString& name, const QColor& color, Qt::PenStyle style) {
        QCPGraph* g = addGraph();
        g->setName(name);
        QPen pen = curvePen(color, 1.5);
        pen.setStyle(style);
        g->setPen(pen);
        g->setVisible(false);
        g->removeFromLegend();
        return g;
    };
    resident_ = add(QStringLiteral("resident (RSS)"), QColor(31, 119, 180), Qt::SolidLine);
    allocated_ = add(QStringLiteral("CUDA allocated"), QColor(255, 127, 14), Qt::SolidLine);
    reserved_ = add(QStringLiteral("CUDA reserved"), QColor(44, 160, 44), Qt::SolidLine);
    nvml_ = add(QStringLiteral("device used (NVML)"), QColor(127, 127, 127), Qt::DashLine);
    legend->setVisible(true);
    placeLegendAbove();
}

void MemoryPlot::clearData()
{
    for (QCPGraph* g : {resident_, allocated_, reserved_, nvml_}) {
        g->data()->clear();
        g->setVisible(false);
        g->removeFromLegend();
    }
}

void MemoryPlot::rebuild(const RunHistory& history, bool)
{
    // Frames come on the telemetry cadence, so there are few; rebuilding is cheap.
    const auto& memory = history.memory();
    const size_t buckets = std::max<size_t>(1, size_t(pointBudget()) / 4);
    struct Line {
        QCPGraph* graph;
        int64_t MemoryPoint::*field;
    };
    for (const Line& line : {Line{resident_, &MemoryPoint::resident_bytes},
                             Line{allocated_, &MemoryPoint::cuda_allocated_bytes},
                             Line{reserved_, &MemoryPoint::cuda_reserved_bytes},
                             Line{nvml_, &MemoryPoint::nvml_used_bytes}}) {
        std::vector<double> xs, ys;
        for (const MemoryPoint& p : memory) {
            const int64_t bytes = p.*line.field;
            if (bytes < 0) continue;
            xs.push_back(history.xOf(p.step, xAxisMode()));
            ys.push_back(static_cast<double>(bytes) / kMiB);
        }
        const DecimatedSeries d = decimate_min_max(xs, ys, buckets);
        line.graph->setData(QVector<double>(d.xs.begin(), d.xs.end()), QVector<double>(d.ys.begin(), d.ys.end()), true);
        const bool present = !xs.empty();
        if (present != line.graph->visible()) {
            line.graph->setVisible(present);
            if (present)
                line.graph->addToLegend();
            else
                line.graph->removeFromLegend();
        }
    }
}

void MemoryPlot::fitToData() { fitGraphs({resident_, allocated_, reserved_, nvml_}, false, true); }

} // namespace mantissa
