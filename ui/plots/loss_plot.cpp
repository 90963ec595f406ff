// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/loss_plot.h"

#include <algorithm>
#include <cmath>

#include "plots/smoothing.h"

namespace mantissa {

namespace {

const QColor kTrainColor(31, 119, 180);
const QColor kValColor(255, 127, 14);

double x_of(const StepPoint& p, XAxisMode mode)
{
    switch (mode) {
    case XAxisMode::Tokens:
        return p.tokens;
    case XAxisMode::Seconds:
        return p.seconds;
    case XAxisMode::Step:
        break;
    }
    return static_cast<double>(p.step);
}

QVector<double> to_qvector(const std::vector<double>& v) { return QVector<double>(v.begin(), v.end()); }

} // namespace

LossPlot::LossPlot(QWidget* parent) : TimeSeriesPlot(parent)
{
    setMinimumSize(320, 180);
    train_ = addGraph();
    train_->setName(QStringLiteral("train"));
    val_ = addGraph();
    val_->setName(QStringLiteral("val"));
    val_->setPen(curvePen(kValColor, 2.0));
    val_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, kValColor, Qt::white, 7));
    styleTrainGraphs();

    yAxis->setLabel(QStringLiteral("loss (nats/token)"));
    legend->setVisible(true);

    nonFiniteText_ = new QCPItemText(this);
    nonFiniteText_->position->setType(QCPItemPosition::ptAxisRectRatio);
    nonFiniteText_->position->setCoords(0.02, 0.04);
    nonFiniteText_->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
    nonFiniteText_->setColor(QColor(180, 20, 30));
    nonFiniteText_->setBrush(QColor(255, 255, 255, 220));
    nonFiniteText_->setPadding(QMargins(4, 2, 4, 2));
    nonFiniteText_->setVisible(false);
}

QString LossPlot::nonFiniteNote() const
{
    if (nonFiniteCount_ == 0) return {};
    if (nonFiniteSince_ >= 0) return QStringLiteral("train loss NaN/Inf since step %1").arg(nonFiniteSince_);
    return QStringLiteral("train loss NaN/Inf at %1 step%2, first at step %3")
        .arg(nonFiniteCount_)
        .arg(nonFiniteCount_ == 1 ? "" : "s")
        .arg(firstNonFinite_);
}

LossPlot::~LossPlot() = default;

void LossPlot::styleTrainGraphs()
{
    if (smoothing_ > 0.0) {
        // The raw curve stays visible as context, the smoothed one carries the trend.
        QColor faint = kTrainColor;
        faint.setAlpha(70);
        train_->setPen(curvePen(faint, 1.0));
    } else {
        train_->setPen(curvePen(kTrainColor, 1.5));
    }
    if (smooth_) {
        smooth_->setPen(curvePen(kTrainColor, 2.0));
        smooth_->setName(QStringLiteral("train (smoothed %1)").arg(smoothing_, 0, 'f', 2));
        smooth_->setVisible(smoothing_ > 0.0);
        if (smoothing_ > 0.0)
            smooth_->addToLegend();
        else
            smooth_->removeFromLegend();
    }
}

void LossPlot::replotIfStandalone()
{
    // With the page's history the page's frame scheduler replots; standalone we do.
    if (owned_ && history() == owned_.get()) replot(rpQueuedReplot);
}

void LossPlot::clear()
{
    batches_ = 0;
    if (owned_ && history() == owned_.get()) owned_->reset(owned_->tokensPerStep());
    invalidate();
    setFollowing(true);
    xAxis->setRange(0, 1);
    yAxis->setRange(logScale_ ? 0.1 : 0.0, logScale_ ? 10.0 : 1.0);
    refresh();
    replotIfStandalone();
}

void LossPlot::appendBatch(const std::vector<StepMetrics>& steps, const std::vector<EvalMetrics>& evals)
{
    if (steps.empty() && evals.empty()) return;
    if (!owned_) {
        if (history()) return; // fed by the page's history
        owned_ = std::make_unique<RunHistory>();
        setHistory(owned_.get());
        // The old contract is one point per step: decimate only really long runs.
        setMinPointBudget(1 << 16);
    }
    if (history() != owned_.get()) return;
    ++batches_;
    TelemetryBatch batch;
    batch.steps = steps;
    batch.evals = evals;
    owned_->append(batch);
    refresh();
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
    fitValueTicks(); // a new ticker: the count the plot's height chose, not its default
    fitToData();
    markNeedsReplot();
    replotIfStandalone();
}

void LossPlot::setSmoothing(double weight)
{
    weight = std::clamp(weight, 0.0, 0.999);
    if (weight == smoothing_) return;
    smoothing_ = weight;
    if (!smooth_ && weight > 0.0) {
        smooth_ = addGraph();
        smooth_->setName(QStringLiteral("train (smoothed)"));
    }
    styleTrainGraphs();
    markSettingsChanged();
    replotIfStandalone();
}

void LossPlot::clearData()
{
    train_->data()->clear();
    val_->data()->clear();
    if (smooth_) smooth_->data()->clear();
    builtSteps_ = 0;
    builtLastStep_ = 0;
    builtDecimated_ = false;
    nonFiniteCount_ = 0;
    firstNonFinite_ = nonFiniteSince_ = -1;
    nonFiniteText_->setVisible(false);
}

void LossPlot::rebuild(const RunHistory& history, bool full)
{
    const auto& steps = history.steps();
    const size_t n = steps.size();
    const size_t budget = static_cast<size_t>(pointBudget());
    const XAxisMode mode = xAxisMode();

    // The history only grew since the last build (the steps built are still its first ones).
    const bool counted =
        !full && builtSteps_ <= n && (builtSteps_ == 0 || steps[builtSteps_ - 1].step == builtLastStep_);
    // New steps after the ones already drawn, nothing decimated: a plain append.
    const bool append = counted && !builtDecimated_ && n <= budget;
    // The non-finite losses over the steps not yet counted (all of them when rebuilt whole).
    if (!counted) {
        nonFiniteCount_ = 0;
        firstNonFinite_ = nonFiniteSince_ = -1;
    }
    for (size_t i = counted ? builtSteps_ : 0; i < n; ++i) {
        if (std::isfinite(steps[i].train_loss)) {
            nonFiniteSince_ = -1;
            continue;
        }
        ++nonFiniteCount_;
        if (firstNonFinite_ < 0) firstNonFinite_ = steps[i].step;
        if (nonFiniteSince_ < 0) nonFiniteSince_ = steps[i].step;
    }
    nonFiniteText_->setText(nonFiniteNote());
    nonFiniteText_->setVisible(nonFiniteCount_ > 0);
    // Between NaN gaps a finite loss is a point with no line to it: drawn as a dot.
    train_->setScatterStyle(nonFiniteCount_ > 0 ? QCPScatterStyle(QCPScatterStyle::ssDisc, kTrainColor, 4)
                                                : QCPScatterStyle());
    if (append) {
        if (n > builtSteps_) {
            QVector<double> keys, values;
            keys.reserve(qsizetype(n - builtSteps_));
            values.reserve(qsizetype(n - builtSteps_));
            for (size_t i = builtSteps_; i < n; ++i) {
                keys.push_back(x_of(steps[i], mode));
                values.push_back(steps[i].train_loss);
            }
            train_->addData(keys, values, /*alreadySorted=*/true);
        }
    }
    std::vector<double> xs, ys;
    if (!append || smoothing_ > 0.0) {
        xs.reserve(n);
        ys.reserve(n);
        for (const StepPoint& p : steps) {
            xs.push_back(x_of(p, mode));
            ys.push_back(p.train_loss);
        }
    }
    const size_t buckets = std::max<size_t>(1, budget / 4);
    if (!append) {
        const DecimatedSeries raw = decimate_min_max(xs, ys, buckets);
        train_->setData(to_qvector(raw.xs), to_qvector(raw.ys), /*alreadySorted=*/true);
        builtDecimated_ = raw.xs.size() != n;
    }
    builtSteps_ = n;
    builtLastStep_ = n ? steps.back().step : 0;

    if (smooth_) {
        if (smoothing_ > 0.0) {
            // Smooth first, then decimate: the average must see every step.
            const DecimatedSeries s = decimate_min_max(xs, debiased_ema(ys, smoothing_), buckets);
            smooth_->setData(to_qvector(s.xs), to_qvector(s.ys), /*alreadySorted=*/true);
        } else {
            smooth_->data()->clear();
        }
    }

    QVector<double> keys, values;
    keys.reserve(qsizetype(history.evals().size()));
    values.reserve(qsizetype(history.evals().size()));
    for (const EvalPoint& e : history.evals()) {
        keys.push_back(history.xOf(e.step, mode));
        values.push_back(e.val_loss);
    }
    val_->setData(keys, values, /*alreadySorted=*/true);
}

void LossPlot::fitToData() { fitGraphs({train_, val_, smooth_}, logScale_, false); }

} // namespace mantissa
