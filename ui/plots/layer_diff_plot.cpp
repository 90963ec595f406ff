// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/layer_diff_plot.h"

#include <algorithm>
#include <cmath>

#include "plots/plot_style.h"

namespace mantissa {

namespace {

// Column index -> step label, at a handful of evenly spaced columns.
QSharedPointer<QCPAxisTickerText> step_ticker(const std::vector<int64_t>& steps)
{
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    if (steps.empty()) return ticker;
    const size_t n = steps.size();
    const size_t ticks = std::min<size_t>(n, 10);
    for (size_t i = 0; i < ticks; ++i) {
        const size_t c = ticks == 1 ? 0 : i * (n - 1) / (ticks - 1);
        ticker->addTick(double(c), QString::number(steps[c]));
    }
    return ticker;
}

QSharedPointer<QCPAxisTickerText> layer_ticker(const std::vector<std::string>& layers)
{
    auto ticker = QSharedPointer<QCPAxisTickerText>::create();
    for (size_t r = 0; r < layers.size(); ++r) ticker->addTick(double(r), QString::fromStdString(layers[r]));
    return ticker;
}

} // namespace

LayerDiffPlot::LayerDiffPlot(QWidget* parent) : QCustomPlot(parent)
{
    setMinimumSize(320, 180);
    map_ = new QCPColorMap(xAxis, yAxis);
    map_->setInterpolate(false);
    map_->setTightBoundary(false);
    colorScale_ = attach_color_scale(this, map_);

    QCPColorGradient g;
    g.setColorStopAt(0.0, QColor(33, 102, 172));
    g.setColorStopAt(0.25, QColor(146, 197, 222));
    g.setColorStopAt(0.5, QColor(247, 247, 247));
    g.setColorStopAt(0.75, QColor(244, 165, 130));
    g.setColorStopAt(1.0, QColor(178, 24, 43));
    g.setNanHandling(QCPColorGradient::nhNanColor);
    g.setNanColor(QColor(200, 200, 200));
    map_->setGradient(g);

    QFont small = font();
    small.setPointSizeF(std::max(6.5, small.pointSizeF() * 0.85));
    xAxis->setTickLabelFont(small);
    yAxis->setTickLabelFont(small);
    xAxis->setLabel(tr("step"));
    yAxis->setRangeReversed(true);
    for (QCPAxis* a : {xAxis, yAxis}) a->grid()->setVisible(false);
    for (QCPAxis* a : {xAxis2, yAxis2}) {
        a->setVisible(true);
        a->setTicks(false);
        a->setTickLabels(false);
    }
    emptyText_ = new QCPItemText(this);
    emptyText_->position->setType(QCPItemPosition::ptAxisRectRatio);
    emptyText_->position->setCoords(0.5, 0.5);
    emptyText_->setColor(QColor(110, 110, 110));
    sameText_ = new QCPItemText(this);
    sameText_->position->setType(QCPItemPosition::ptAxisRectRatio);
    sameText_->position->setCoords(0.5, 0.5);
    sameText_->setColor(QColor(60, 60, 60));
    sameText_->setBrush(QColor(255, 255, 255, 220));
    sameText_->setPadding(QMargins(6, 3, 6, 3));
    sameText_->setText(tr("no difference at any layer or step"));
    setGrid({}, {});
    follow_palette(this); // after the plot's own legend and axis set-up
}

void LayerDiffPlot::setEmptyText(const QString& text)
{
    emptyText_->setText(text);
    replot(rpQueuedReplot);
}

void LayerDiffPlot::setGrid(LayerDiffGrid grid, const QString& label)
{
    grid_ = std::move(grid);
    const int nx = columnCount(), ny = rowCount();
    double extent = 0.0;
    fill_color_map(map_, nx, ny, [&](int c, int r) {
        const double v = grid_.values[static_cast<size_t>(c) * static_cast<size_t>(ny) + static_cast<size_t>(r)];
        if (std::isfinite(v)) extent = std::max(extent, std::abs(v));
        return v;
    });
    // Identical runs: a white map on a scale of ±1 and a line that says so (a blank field on a
    // ±1e-6 scale read as a broken plot; read-only audit 'gui-deep').
    const bool identical = extent == 0.0 && nx > 0 && ny > 0 &&
                           std::any_of(grid_.values.begin(), grid_.values.end(), [](double v) { return v == 0.0; });
    if (extent == 0.0) extent = 1.0;
    map_->setDataRange(QCPRange(-extent, extent));
    colorScale_->axis()->setLabel(label);
    xAxis->setTicker(step_ticker(grid_.steps));
    yAxis->setTicker(layer_ticker(grid_.layers));
    xAxis->setRange(-0.5, std::max(nx, 1) - 0.5);
    yAxis->setRange(-0.5, std::max(ny, 1) - 0.5);
    map_->setVisible(nx > 0 && ny > 0);
    emptyText_->setVisible(nx == 0 || ny == 0);
    sameText_->setVisible(identical);
    replot(rpQueuedReplot);
}

} // namespace mantissa
