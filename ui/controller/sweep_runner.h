// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A sweep from the window: the same project run once per value of one key, one run after
// another through the window's TrainingController (so the Monitor shows each as it goes).
// Every run is tagged sweep:<name> as soon as the store holds it. A failed run is recorded
// and the sweep goes on (as `mantissa-train sweep` does); Stop ends the current run and
// skips the rest. The project itself is never touched: each run trains a resolved copy.

#include <QList>
#include <QObject>
#include <QString>

#include <functional>
#include <vector>

#include "run_status.h"
#include "sweep.h"

namespace mantissa {

class StoreConnection;
class TrainingController;

class SweepRunner : public QObject {
    Q_OBJECT

public:
    // Starts one run (the window resets its monitor and hands the config to the controller),
    // named "project [key=value]"; its config keeps the project's name, as the CLI's sweep does.
    using StartRun = std::function<bool(const ProjectConfig& config, const QString& runName)>;

    SweepRunner(TrainingController* controller, StoreConnection* store, StartRun startRun, QObject* parent = nullptr);

    // Validates "key" and "v1,v2,..." against the project with parse_vary + plan_sweep, before
    // anything runs. False with the engine's message (it names the key and value).
    static bool plan(const ProjectConfig& base, const QString& key, const QString& values,
                     std::vector<SweepRunPlan>* plans, QString* error);
    // "20261130-140509": the CLI's default sweep name.
    static QString defaultName();

    // Starts the first run. False (nothing started) when a sweep or run is going, or no plan.
    bool start(std::vector<SweepRunPlan> plans, const QString& name, QString* error = nullptr);
    // Stops the current run and skips the rest; finished() follows when the run has stopped.
    void stop();

    bool isRunning() const { return running_; }
    int currentIndex() const { return current_; } // the run going now, 0-based
    int count() const { return static_cast<int>(plans_.size()); }
    QString name() const { return name_; }
    QString tag() const { return QStringLiteral("sweep:") + name_; }
    // The store's id of each run started so far, in sweep order.
    QList<qint64> runIds() const { return runIds_; }
    // Problems that did not stop the sweep (a run that failed, a tag that could not be set).
    QStringList problems() const { return problems_; }

signals:
    void runStarting(int index, int count, const QString& runName);
    // All runs are done (or the sweep was stopped): the ids of the runs the store holds.
    void finished(const QList<qint64>& runIds, bool stopped);

private:
    void startNext();
    void onStarted(qint64 runId);
    void onFinished(RunStatus status);
    void finish(bool stopped);

    TrainingController* controller_ = nullptr;
    StoreConnection* store_ = nullptr;
    StartRun startRun_;
    std::vector<SweepRunPlan> plans_;
    QString name_;
    QList<qint64> runIds_;
    QStringList problems_;
    int current_ = -1;
    bool running_ = false;
    bool stopRequested_ = false;
};

} // namespace mantissa
