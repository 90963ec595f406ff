// SPDX-License-Identifier: GPL-3.0-or-later
#include "controller/sweep_runner.h"

#include <QDateTime>
#include <QTimer>

#include "run_store.h"
#include "controller/store_connection.h"
#include "controller/training_controller.h"

namespace mantissa {

SweepRunner::SweepRunner(TrainingController* controller, StoreConnection* store, StartRun startRun, QObject* parent)
    : QObject(parent), controller_(controller), store_(store), startRun_(std::move(startRun))
{
    connect(controller_, &TrainingController::started, this, &SweepRunner::onStarted);
    connect(controller_, &TrainingController::finished, this, &SweepRunner::onFinished);
}

bool SweepRunner::plan(const ProjectConfig& base, const QString& key, const QString& values,
                       std::vector<SweepRunPlan>* plans, QString* error)
{
    try {
        const SweepSpec spec = parse_vary(key.trimmed().toStdString() + "=" + values.toStdString());
        *plans = plan_sweep(base, spec);
        return true;
    } catch (const std::exception& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
}

QString SweepRunner::defaultName()
{
    return QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss"));
}

bool SweepRunner::start(std::vector<SweepRunPlan> plans, const QString& name, QString* error)
{
    if (running_ || controller_->isRunning()) {
        if (error) *error = tr("A run is going: stop it before starting a sweep.");
        return false;
    }
    if (plans.empty()) {
        if (error) *error = tr("The sweep has no runs.");
        return false;
    }
    if (name.trimmed().isEmpty()) {
        if (error) *error = tr("Give the sweep a name (its runs are tagged sweep:NAME).");
        return false;
    }
    plans_ = std::move(plans);
    name_ = name.trimmed();
    runIds_.clear();
    problems_.clear();
    current_ = -1;
    running_ = true;
    stopRequested_ = false;
    startNext();
    if (!running_ && runIds_.isEmpty() && current_ <= 0 && !problems_.isEmpty()) {
        if (error) *error = problems_.first();
        return false;
    }
    return true;
}

void SweepRunner::stop()
{
    if (!running_) return;
    stopRequested_ = true;
    controller_->stop();
}

void SweepRunner::startNext()
{
    ++current_;
    if (stopRequested_ || current_ >= count()) {
        finish(stopRequested_);
        return;
    }
    const SweepRunPlan& p = plans_[static_cast<size_t>(current_)];
    emit runStarting(current_, count(), QString::fromStdString(p.name));
    if (!startRun_(p.config, QString::fromStdString(p.name))) {
        problems_ << tr("%1: could not start").arg(QString::fromStdString(p.name));
        finish(true);
    }
}

void SweepRunner::onStarted(qint64 runId)
{
    if (!running_) return;
    runIds_ << runId;
    QString error;
    RunStore* store = store_->store(&error);
    try {
        if (!store) throw StoreError(error.toStdString());
        store->add_tags(runId, {tag().toStdString()});
    } catch (const std::exception& e) {
        problems_ << tr("run %1: cannot tag it %2: %3").arg(runId).arg(tag(), QString::fromStdString(e.what()));
    }
}

void SweepRunner::onFinished(RunStatus status)
{
    if (!running_) return;
    if (status == RunStatus::Failed)
        problems_ << tr("%1 failed: %2")
                         .arg(QString::fromStdString(plans_[static_cast<size_t>(current_)].name), controller_->lastError());
    else if (!controller_->lastError().isEmpty()) // trained, but its rows or final checkpoint were not all kept
        problems_ << tr("%1: %2").arg(QString::fromStdString(plans_[static_cast<size_t>(current_)].name),
                                      controller_->lastError());
    if (status == RunStatus::Stopped) stopRequested_ = true;
    // The store could not record this run: nor would it the next ones (as the CLI's sweep stops).
    if (controller_->lastStoreFailed() && current_ + 1 < count()) {
        problems_ << tr("the run store failed: the sweep's other runs were not started");
        stopRequested_ = true;
    }
    // After every other finished() slot (the window's), once the controller is idle.
    QTimer::singleShot(0, this, &SweepRunner::startNext);
}

void SweepRunner::finish(bool stopped)
{
    running_ = false;
    emit finished(runIds_, stopped);
}

} // namespace mantissa
