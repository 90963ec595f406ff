// SPDX-License-Identifier: GPL-3.0-or-later
#include "window/run_status_widget.h"

#include "common/run_format.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>

#include <cmath>

namespace mantissa {

namespace {
constexpr double kRateWindowS = 30.0;
}

QString format_duration(double seconds)
{
    if (!(seconds >= 0) || !std::isfinite(seconds)) return QStringLiteral("–");
    const auto s = static_cast<qint64>(std::llround(seconds));
    if (s < 60) return QStringLiteral("%1 s").arg(s);
    if (s < 3600) return QStringLiteral("%1 min %2 s").arg(s / 60).arg(s % 60, 2, 10, QLatin1Char('0'));
    return QStringLiteral("%1 h %2 min").arg(s / 3600).arg((s % 3600) / 60, 2, 10, QLatin1Char('0'));
}

RunStatusWidget::RunStatusWidget(QWidget* parent) : QWidget(parent)
{
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(14);
    progress_ = new QProgressBar(this);
    progress_->setObjectName(QStringLiteral("runProgress"));
    progress_->setFixedWidth(220);
    progress_->setTextVisible(true);
    lossLabel_ = new QLabel(this);
    valLabel_ = new QLabel(this);
    speedLabel_ = new QLabel(this);
    etaLabel_ = new QLabel(this);
    etaLabel_->setObjectName(QStringLiteral("etaLabel"));
    // Two throughputs are shown, both right: this one over the steps the window last drew (some
    // tens of ms), the Runs and Compare tables' the median over the run's steps.
    speedLabel_->setToolTip(tr("Throughput over the steps the window last drew; the Runs and Compare pages give "
                               "the median over the run's steps"));
    for (QLabel* label : {lossLabel_, valLabel_, speedLabel_, etaLabel_}) layout->addWidget(label);
    layout->addWidget(progress_);
    labelTimer_.setSingleShot(true);
    connect(&labelTimer_, &QTimer::timeout, this, &RunStatusWidget::refreshLabels);
    reset(0);
}

void RunStatusWidget::reset(qint64 totalSteps)
{
    totalSteps_ = totalSteps;
    step_ = 0;
    trainLoss_.reset();
    valLoss_.reset();
    tokensPerS_ = stepTimeMs_ = 0.0;
    paused_ = finished_ = false;
    samples_.clear();
    clock_.start();
    refreshLabels();
}

void RunStatusWidget::setTotalSteps(qint64 totalSteps)
{
    totalSteps_ = totalSteps;
    refreshLabels();
}

void RunStatusWidget::addProgressSample(double wallSeconds, qint64 step, double trainedSeconds)
{
    if (!samples_.empty() && trainedSeconds > 2.0 * (wallSeconds - samples_.back().first) + 0.5) samples_.clear();
    samples_.emplace_back(wallSeconds, step);
    while (samples_.size() > 2 && wallSeconds - samples_.front().first > kRateWindowS) samples_.pop_front();
}

void RunStatusWidget::update(const TelemetryBatch& batch)
{
    if (!batch.steps.empty()) {
        const StepMetrics& last = batch.steps.back();
        step_ = last.step;
        trainLoss_ = last.train_loss;
        // Over the batch: single steps jitter too much to read at 25 Hz. The tokens trained over
        // the time they took, as the ms/step beside it: a mean of each step's tokens/s let fast
        // steps outweigh a slow telemetry step, and "23,712 tok/s · 225.7 ms/step" was read for
        // 1,024-token steps that ran at 4,537.
        double tokens = 0.0, ms = 0.0;
        for (const auto& m : batch.steps) {
            tokens += m.tokens_per_s * m.step_time_ms / 1000.0;
            ms += m.step_time_ms;
        }
        tokensPerS_ = ms > 0 ? tokens / (ms / 1000.0) : 0.0;
        stepTimeMs_ = ms / static_cast<double>(batch.steps.size());
        addProgressSample(static_cast<double>(clock_.elapsed()) / 1000.0, step_, ms / 1000.0);
    }
    if (!batch.evals.empty()) valLoss_ = batch.evals.back().val_loss;
    refreshLabelsSoon();
}

void RunStatusWidget::refreshLabelsSoon()
{
    if (sinceLabels_.isValid() && sinceLabels_.elapsed() < kLabelIntervalMs) {
        if (!labelTimer_.isActive()) labelTimer_.start(static_cast<int>(kLabelIntervalMs - sinceLabels_.elapsed()));
        return;
    }
    refreshLabels();
}

void RunStatusWidget::setPaused(bool paused)
{
    paused_ = paused;
    // Time spent paused must not drag the rate down once training goes on.
    samples_.clear();
    refreshLabels();
}

void RunStatusWidget::finish(const QString& outcome)
{
    finished_ = true;
    outcome_ = outcome;
    refreshLabels();
}

double RunStatusWidget::etaSeconds() const
{
    if (samples_.size() < 2 || totalSteps_ <= 0) return -1.0;
    const double dt = samples_.back().first - samples_.front().first;
    const double dsteps = static_cast<double>(samples_.back().second - samples_.front().second);
    if (dt <= 0.0 || dsteps <= 0.0) return -1.0;
    return static_cast<double>(std::max<qint64>(0, totalSteps_ - step_)) * dt / dsteps;
}

QString RunStatusWidget::etaText() const
{
    if (finished_) return outcome_.isEmpty() ? tr("done") : outcome_;
    if (paused_) return tr("paused");
    const double eta = etaSeconds();
    return eta < 0 ? tr("ETA –") : tr("ETA %1").arg(format_duration(eta));
}

void RunStatusWidget::refreshLabels()
{
    sinceLabels_.start();
    labelTimer_.stop();
    progress_->setRange(0, static_cast<int>(std::max<qint64>(1, totalSteps_)));
    progress_->setValue(static_cast<int>(std::min(step_, std::max<qint64>(1, totalSteps_))));
    progress_->setFormat(tr("step %L1 / %L2").arg(step_).arg(totalSteps_));
    lossLabel_->setText(tr("loss %1").arg(format_loss(trainLoss_.value_or(0.0), trainLoss_.has_value())));
    valLabel_->setText(tr("val %1").arg(format_loss(valLoss_.value_or(0.0), valLoss_.has_value())));
    speedLabel_->setText(tokensPerS_ > 0
                             ? tr("%L1 tok/s · %2 ms/step").arg(tokensPerS_, 0, 'f', 0).arg(stepTimeMs_, 0, 'f', 1)
                             : tr("– tok/s"));
    etaLabel_->setText(etaText());
}

} // namespace mantissa
