// SPDX-License-Identifier: GPL-3.0-or-later
#include "loss_plot.h"

#include <algorithm>

namespace mantissa {

LossPlot::LossPlot(QWidget* parent) : QCustomPlot(parent)
{
    setMinimumSize(320, 220);
    setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    // Antialiasing costs little at these point counts but is dropped while dragging so
    // panning a long run stays fluid.
    setNoAntialiasingOnDrag(true);

    train_ = addGraph();
    train_->setName(QStringLiteral("train"));
    train_->setPen(QPen(QColor(31, 119, 180), 1.5));

    val_ = addGraph();
    val_->setName(QStringLiteral("val"));
    val_->setPen(QPen(QColor(255, 127, 14), 2.0));
    val_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QColor(255, 127, 14), Qt::white, 7));

    xAxis->setLabel(QStringLiteral("step"));
    yAxis->setLabel(QStringLiteral("loss (cross-entropy, nats/token)"));
    xAxis->setRange(0, 1);
    yAxis->setRange(0, 1);
    const QColor grid(225, 225, 225);
    xAxis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    yAxis->grid()->setPen(QPen(grid, 1, Qt::DotLine));

    legend->setVisible(true);
    legend->setBrush(QColor(255, 255, 255, 220));
    legend->setBorderPen(QPen(QColor(190, 190, 190)));
    axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);

    // A plain click should not freeze the view; only an actual drag (a move with a button
    // down, which QCustomPlot turns into a pan) does.
    connect(this, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
        if (event->buttons() != Qt::NoButton) following_ = false;
    });
    connect(this, &QCustomPlot::mouseWheel, this, [this] { following_ = false; });
    connect(this, &QCustomPlot::mouseDoubleClick, this, [this] { setFollowing(true); });
}

void LossPlot::clear()
{
    train_->data()->clear();
    val_->data()->clear();
    batches_ = 0;
    following_ = true;
    xAxis->setRange(0, 1);
    yAxis->setRange(logScale_ ? 0.1 : 0.0, logScale_ ? 10.0 : 1.0);
    replot(rpQueuedReplot);
}

void LossPlot::appendBatch(const std::vector<StepMetrics>& steps, const std::vector<EvalMetrics>& evals)
{
    if (steps.empty() && evals.empty()) return;
    ++batches_;
    if (!steps.empty()) {
        QVector<double> keys, values;
        keys.reserve(static_cast<qsizetype>(steps.size()));
        values.reserve(static_cast<qsizetype>(steps.size()));
        for (const auto& m : steps) {
            keys.push_back(static_cast<double>(m.step));
            values.push_back(m.train_loss);
        }
        // Steps arrive in order, so the sorted-insert path is a plain append.
        train_->addData(keys, values, /*alreadySorted=*/true);
    }
    for (const auto& e : evals)
        val_->addData(static_cast<double>(e.step), e.val_loss);
    if (following_) fitToData();
    replot(rpQueuedReplot);
}

void LossPlot::setLogScale(bool enabled)
{
    if (enabled == logScale_) return;
    logScale_ = enabled;
    if (enabled) {
        yAxis->setScaleType(QCPAxis::stLogarithmic);
        yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
        yAxis->setNumberFormat(QStringLiteral("gb"));
    } else {
        yAxis->setScaleType(QCPAxis::stLinear);
        yAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
        yAxis->setNumberFormat(QStringLiteral("gbd"));
    }
    fitToData();
    replot(rpQueuedReplot);
}

void LossPlot::setFollowing(bool enabled)
{
    following_ = enabled;
    if (enabled) {
        fitToData();
        replot(rpQueuedReplot);
    }
}

void LossPlot::fitToData()
{
    if (train_->data()->isEmpty() && val_->data()->isEmpty()) return;
    bool found = false;
    QCPRange keys = train_->getKeyRange(found);
    bool valFound = false;
    const QCPRange valKeys = val_->getKeyRange(valFound);
    if (!found)
        keys = valKeys;
    else if (valFound)
        keys.expand(valKeys);
    xAxis->setRange(std::min(0.0, keys.lower), std::max(keys.upper, 1.0));

    // Log axes ignore non-positive values; a loss is never <= 0 in practice anyway.
    const QCP::SignDomain domain = logScale_ ? QCP::sdPositive : QCP::sdBoth;
    QCPRange values = train_->getValueRange(found, domain);
    const QCPRange valValues = val_->getValueRange(valFound, domain);
    if (!found && !valFound) return;
    if (!found)
        values = valValues;
    else if (valFound)
        values.expand(valValues);
    if (logScale_) {
        yAxis->setRange(values.lower / 1.15, values.upper * 1.15);
    } else {
        const double pad = std::max(values.size() * 0.05, 1e-3);
        yAxis->setRange(std::max(0.0, values.lower - pad), values.upper + pad);
    }
}

} // namespace mantissa
