// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Runs one training job at a time on a worker QThread and hands its telemetry to the GUI
// thread at a fixed cadence. The worker only ever writes into a SnapshotBuffer and the run
// store; every signal below is emitted on the controller's (GUI) thread, so slots may touch
// widgets directly.

#include <QObject>
#include <QString>
#include <QTimer>

#include <memory>
#include <optional>

#include "controller/snapshot_buffer.h"
#include "project_config.h"
#include "run_status.h"
#include "trainer.h"

class QThread;

namespace mantissa {

class TrainingController : public QObject {
    Q_OBJECT

public:
    // ~25 Hz: smooth enough for a live curve, rare enough that replotting stays cheap.
    static constexpr int kDrainIntervalMs = 40;

    // `storePath` empty: default_store_path().
    explicit TrainingController(const QString& storePath = {}, QObject* parent = nullptr);
    ~TrainingController() override; // stops a running job and joins the worker

    // Returns false (and does nothing) while a job is running. Building the model happens
    // on the worker, so a bad project is reported through failed(), never thrown here.
    // `runName` empty: the run is named after the project (a sweep names its points).
    bool start(const ProjectConfig& config, const QString& projectPath, const QString& runName = {});
    void stop();
    void pause();
    void resume();
    // Switches every layer matching the glob to `formats` (and to the scaling recipe named
    // `scaling`, unless it is empty) at the running trainer's next step boundary; the trainer
    // reports it back as a precision_changed event. False (with the reason) when no run is
    // going, the pattern matches no layer or `scaling` names no recipe.
    bool setLayerFormats(const QString& pattern, const GemmFormats& formats, const QString& scaling = {},
                         QString* error = nullptr);
    // Writes a checkpoint at the next step boundary (beside the store, like mantissa-train).
    bool requestCheckpoint(QString* error = nullptr);

    bool isRunning() const { return running_; }
    bool isPaused() const { return paused_; }
    QString storePath() const { return storePath_; }
    // The current or last run's id in the store; -1 until the store created one.
    qint64 runId() const { return runId_; }
    // After finished(): Finished, Stopped or Failed; nullopt before the first job ends.
    std::optional<RunStatus> lastStatus() const { return lastStatus_; }
    // Why the last job failed, or what went wrong in a job that did not (the store lost rows).
    QString lastError() const { return lastError_; }
    // Whether the last job failed because the project's settings or data were refused before it
    // trained (a bad argument: the CLI's exit 2), not in training.
    bool lastRefusedSettings() const { return lastRefusedSettings_; }
    // The store could not make the run or keep all of it: a sweep's next run would fare the same.
    bool lastStoreFailed() const { return lastStoreFailed_; }
    const RunSummary& lastSummary() const { return lastSummary_; }

signals:
    void started(qint64 runId);                          // the store holds the run now
    void drained(const mantissa::TelemetryBatch& batch); // at most once per drain tick
    void pausedChanged(bool paused);
    void failed(const QString& message);        // emitted just before finished(Failed)
    void finished(mantissa::RunStatus status); // always the last signal of a job

private:
    struct Job;

    void drain();
    // The engine pauses itself too (a watcher's "pause" action): the last Paused or Resumed
    // event it reports is its state, whoever asked.
    void followEnginePause(const std::vector<RunEvent>& events);
    void onWorkerFinished();

    QString storePath_;
    QTimer drainTimer_;
    std::unique_ptr<Job> job_; // shared with the worker thread while it runs
    std::unique_ptr<QThread> thread_;
    bool running_ = false;
    bool paused_ = false;
    bool startAnnounced_ = false;
    qint64 runId_ = -1;
    std::optional<RunStatus> lastStatus_;
    QString lastError_;
    bool lastRefusedSettings_ = false;
    bool lastStoreFailed_ = false;
    RunSummary lastSummary_;
};

} // namespace mantissa

Q_DECLARE_METATYPE(mantissa::RunStatus)
