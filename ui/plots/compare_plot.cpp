// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/compare_plot.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "plots/plot_style.h"
#include "plots/smoothing.h"

namespace mantissa {

namespace {

QVector<QCPGraphData> to_data(const std::vector<double>& xs, const std::vector<double>& ys)
{
    QVector<QCPGraphData> data;
    data.reserve(static_cast<qsizetype>(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i) data.append(QCPGraphData(xs[i], ys[i]));
    return data;
}

} // namespace

ComparePlot::ComparePlot(QWidget* parent) : QCustomPlot(parent)
{
    setMinimumSize(320, 200);
    setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    setNoAntialiasingOnDrag(true);
    setPlottingHint(QCP::phFastPolylines, true); // as TimeSeriesPlot: long runs' wide-pen curves
    style_axes(this);
    xAxis->setTicker(QSharedPointer<SiAxisTicker>::create());
    legend->setVisible(true);
    legend->setBrush(QColor(255, 255, 255, 225));
    legend->setBorderPen(QPen(QColor(200, 200, 200)));
    legend->setFont(xAxis->tickLabelFont()); // the smaller font style_axes() chose
    axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    emptyText_ = new QCPItemText(this);
    emptyText_->position->setType(QCPItemPosition::ptAxisRectRatio);
    emptyText_->position->setCoords(0.5, 0.5);
    emptyText_->setColor(QColor(110, 110, 110));
    emptyText_->setText(tr("Select runs on the Runs page and press Compare"));
    rebuild(true);
    follow_palette(this); // after the plot's own legend and axis set-up
    connect(this, &QCustomPlot::mouseWheel, this, [this] { userMoved_ = true; });
    connect(this, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) { // a drag, not a click
        if (event && event->buttons() != Qt::NoButton) userMoved_ = true;
    });
    connect(this, &QCustomPlot::mouseDoubleClick, this, [this] {
        userMoved_ = false;
        fit();
        replot(rpQueuedReplot);
    });
}

QCPGraph* ComparePlot::smoothedGraph(int i) const
{
    return smoothing_ > 0.0 ? smooth_.at(static_cast<size_t>(i)) : nullptr;
}

int ComparePlot::pointBudget() const { return std::max(8192, 4 * std::max(width(), 1)); }

void ComparePlot::setCurves(std::vector<Curve> curves, const QString& xLabel, const QString& yLabel)
{
    curves_ = std::move(curves);
    xAxis->setLabel(xLabel);
    yAxis->setLabel(yLabel);
    QString identity = xLabel + QLatin1Char('|') + yLabel;
    for (const Curve& c : curves_) identity += QLatin1Char('|') + QString::number(c.runId) + c.label;
    if (identity != curvesIdentity_) userMoved_ = false; // other curves: a range for them
    curvesIdentity_ = identity;
}

void ComparePlot::setMarkers(std::vector<Marker> markers) { markers_ = std::move(markers); }
void ComparePlot::setSmoothing(double weight) { smoothing_ = std::clamp(weight, 0.0, 0.99); }
void ComparePlot::setEmptyText(const QString& text) { emptyText_->setText(text); }

void ComparePlot::setLogScale(bool enabled)
{
    logScale_ = enabled;
    userMoved_ = false; // another scale: a range chosen on the old one means little
    yAxis->setScaleType(enabled ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (enabled)
        yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
    else
        yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
}

void ComparePlot::rebuild(bool now)
{
    clearGraphs();
    raw_.clear();
    smooth_.clear();
    for (QCPAbstractItem* item : markerItems_) removeItem(item);
    markerItems_.clear();

    const size_t buckets = static_cast<size_t>(pointBudget() / 4);
    for (const Curve& c : curves_) {
        const bool smoothed = smoothing_ > 0.0 && !c.markers;
        auto* raw = addGraph();
        const DecimatedSeries d = decimate_min_max(c.xs, c.ys, buckets);
        raw->data()->set(to_data(d.xs, d.ys), true);
        raw->setName(c.label);
        QColor faint = c.color;
        if (smoothed) faint.setAlpha(70);
        raw->setPen(QPen(faint, smoothed ? 1.0 : 1.6));
        if (c.markers)
            raw->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, c.color, QColor(255, 255, 255), 6));
        else if (std::any_of(c.ys.begin(), c.ys.end(), [](double y) { return !std::isfinite(y); }))
            raw->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, c.color, 4)); // a point between gaps
        raw->setAdaptiveSampling(true);
        raw_.push_back(raw);

        auto* smooth = addGraph();
        if (smoothed) {
            const DecimatedSeries s = decimate_min_max(c.xs, debiased_ema(c.ys, smoothing_), buckets);
            smooth->data()->set(to_data(s.xs, s.ys), true);
            smooth->setPen(QPen(c.color, 1.8));
            smooth->setName(c.label);
            raw->removeFromLegend();
        } else {
            smooth->removeFromLegend();
            smooth->setVisible(false);
        }
        smooth_.push_back(smooth);
    }
    // One row of labels per marker, each a label's height below the last: at a fixed 6% of a
    // short plot, labels of runs that diverge at one step were drawn over each other.
    QFont markerFont = font();
    markerFont.setPointSizeF(std::max(7.0, markerFont.pointSizeF() - 1.0));
    const int plotHeight = axisRect()->height();
    const double rowRatio =
        plotHeight >= 50 ? std::max(0.06, (QFontMetrics(markerFont).height() + 4.0) / plotHeight) : 0.06;
    // The legend sits at the top right: a marker in the right half of the steps starts its
    // labels below it (a late divergence's "#n diverges @ k" was drawn under the legend).
    const auto [xMin, xMax] = stepExtent();
    const double legendPixels = curves_.empty() ? 0.0 : legend->minimumOuterSizeHint().height() + 18.0; // + its inset
    const double belowLegend = plotHeight >= 50 ? std::min(0.8, legendPixels / plotHeight) : 0.0;
    for (const Marker& m : markers_) {
        auto* line = new QCPItemStraightLine(this);
        line->point1->setCoords(m.x, 0);
        line->point2->setCoords(m.x, 1);
        line->setPen(QPen(m.color, 1.2, Qt::DashLine));
        markerItems_.push_back(line);
        auto* label = new QCPItemText(this);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        const bool underLegend = xMax > xMin && m.x > xMin + 0.5 * (xMax - xMin);
        label->position->setCoords(m.x, (underLegend ? belowLegend : 0.0) + 0.02 +
                                            rowRatio * double(markerItems_.size() / 2));
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->setText(m.label);
        label->setColor(m.color.darker(130));
        label->setBrush(QColor(255, 255, 255, 220));
        label->setPadding(QMargins(3, 1, 3, 1));
        label->setFont(markerFont);
        markerItems_.push_back(label);
    }
    emptyText_->setVisible(curves_.empty());
    legend->setVisible(!curves_.empty());
    if (!userMoved_) fit();
    replot(now ? rpImmediateRefresh : rpQueuedReplot);
}

std::pair<double, double> ComparePlot::stepExtent() const
{
    // Every step the runs reached, NaN losses included: a diverged run spans its steps, not
    // the one finite point it had (0 to 1 on the axis).
    double x0 = 0.0, x1 = -std::numeric_limits<double>::infinity();
    for (const Curve& c : curves_)
        for (double x : c.xs) {
            if (!std::isfinite(x)) continue;
            x0 = std::min(x0, x);
            x1 = std::max(x1, x);
        }
    return {x0, x1};
}

void ComparePlot::fit()
{
    auto [x0, x1] = stepExtent();
    double y0 = std::numeric_limits<double>::infinity(), y1 = -y0;
    for (const Curve& c : curves_) {
        for (size_t i = 0; i < c.xs.size(); ++i) {
            if (!std::isfinite(c.xs[i])) continue;
            const double y = c.ys[i];
            if (!std::isfinite(y) || (logScale_ && y <= 0.0)) continue;
            y0 = std::min(y0, y);
            y1 = std::max(y1, y);
        }
    }
    if (x1 <= x0) x1 = x0 + 1; // no point at all, or one step
    xAxis->setRange(x0, x1);
    if (!std::isfinite(y0)) { // no finite value: the steps, and an empty y
        yAxis->setRange(logScale_ ? 0.1 : 0.0, 1);
        return;
    }
    if (logScale_) {
        yAxis->setRange(y0 / 1.15, y1 * 1.15);
    } else {
        const double pad = y1 > y0 ? 0.05 * (y1 - y0) : std::max(1e-3, std::abs(y0) * 0.05);
        yAxis->setRange(y0 - pad, y1 + pad);
    }
}

} // namespace mantissa
