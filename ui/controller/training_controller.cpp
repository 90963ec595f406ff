// SPDX-License-Identifier: GPL-3.0-or-later
#include "controller/training_controller.h"

#include <QThread>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

#include "run_session.h"
#include "run_store.h"

namespace mantissa {

// State the worker thread and the GUI thread share for one job. The buffer has its own
// lock; everything else is guarded by `mutex`.
struct TrainingController::Job {
    SnapshotBuffer buffer;

    std::mutex mutex;
    RunSession* session = nullptr; // set only while its run may be executing
    bool ended = false;            // the run is over (or never started): no session will come
    bool stop_requested = false;
    bool pause_requested = false;
    // Precision edits made while the trainer was being built (a large corpus takes seconds):
    // the table shows them sent, so they are handed on once the trainer exists.
    struct FormatsRequest {
        std::string pattern;
        GemmFormats formats;
        std::optional<Fp8Scaling> scaling;
    };
    std::vector<FormatsRequest> formats_requested;
    int64_t run_id = -1;
    // Written once by the worker just before it returns.
    RunStatus status = RunStatus::Failed;
    std::string error;
    bool settings_refused = false; // the project's settings or data were refused (the CLI's exit 2)
    bool store_failed = false;     // the store could not make or keep the run (the next would fail too)
    RunSummary summary;

    void work(ProjectConfig config, const std::string& project_path, const std::string& store_path,
              const std::string& run_name);
    void finish(RunStatus final_status, std::string message, RunSummary final_summary = {})
    {
        std::lock_guard lock(mutex);
        session = nullptr;
        ended = true;
        status = final_status;
        error = std::move(message);
        summary = final_summary;
    }
};

// The same RunSession as mantissa-train's: one record, one checkpoint folder rule, so
// `mantissa-train resume ID` finds GUI runs.
void TrainingController::Job::work(ProjectConfig config, const std::string& project_path,
                                   const std::string& store_path, const std::string& run_name)
{
    // Nothing may escape this function: an exception on a QThread terminates the process.
    std::unique_ptr<RunSession> owned;
    try {
        owned = std::make_unique<RunSession>(std::move(config));
    } catch (const ConfigError& e) { // training.device=cuda without one, data the project cannot use
        settings_refused = true;
        finish(RunStatus::Failed, e.what());
        return;
    } catch (const std::exception& e) {
        finish(RunStatus::Failed, e.what());
        return;
    } catch (...) {
        finish(RunStatus::Failed, "building the model failed with an unknown error");
        return;
    }
    {
        // Loading data can take a while; a Stop in the meantime should not leave a run behind.
        std::lock_guard lock(mutex);
        if (stop_requested) {
            status = RunStatus::Stopped;
            ended = true;
            return;
        }
    }

    std::unique_ptr<RunStore> store;
    try {
        store = std::make_unique<RunStore>(store_path);
        owned->create_run(*store, run_name.empty() ? owned->config().name : run_name, project_path);
    } catch (const StoreError& e) {
        store_failed = true;
        finish(RunStatus::Failed, e.what()); // names the file already
        return;
    } catch (const ConfigError& e) { // training.checkpoint_dir cannot be made: it says which
        settings_refused = true;
        finish(RunStatus::Failed, e.what());
        return;
    } catch (const std::exception& e) {
        store_failed = true;
        finish(RunStatus::Failed, "run store '" + store_path + "': " + e.what());
        return;
    }

    {
        std::lock_guard lock(mutex);
        run_id = owned->run_id();
        session = owned.get();
        // Commands that arrived before the trainer existed, in the order the user gave them.
        for (const auto& [pattern, formats, scaling] : formats_requested) {
            try {
                session->request_layer_formats(pattern, formats, scaling);
            } catch (const std::exception& e) { // the table sends layers the project has; say it anyway
                std::fprintf(stderr, "mantissa: a precision change made while the run started was refused: %s\n",
                             e.what());
            }
        }
        formats_requested.clear();
        if (stop_requested)
            session->request_stop();
        else if (pause_requested)
            session->request_pause();
    }

    SessionOutcome outcome = owned->run({&buffer});
    {
        // Commands must not reach a session that is about to be destroyed.
        std::lock_guard lock(mutex);
        session = nullptr;
        ended = true;
    }
    owned.reset();
    try {
        store.reset(); // flushes and closes before the GUI reads the run back
    } catch (const std::exception& e) {
        outcome.status = RunStatus::Failed;
        outcome.error = "run store '" + store_path + "': " + e.what();
        store_failed = true;
    }
    store_failed = store_failed || outcome.store_failed || outcome.rows_lost > 0;
    // A run that finished while the store lost rows (a full disk) says so, like a failure does.
    if (outcome.error.empty() && !outcome.store_error.empty())
        outcome.error = "the run store could not keep " + std::to_string(outcome.rows_lost) +
                        " rows of this run's metrics (checkpoints after the loss are not recorded): " +
                        outcome.store_error;
    // So does one that cannot be resumed from its end.
    if (outcome.error.empty()) outcome.error = final_checkpoint_problem(outcome);
    finish(outcome.status, outcome.error, outcome.summary);
}

TrainingController::TrainingController(const QString& storePath, QObject* parent)
    : QObject(parent), storePath_(storePath.isEmpty() ? QString::fromStdString(default_store_path()) : storePath)
{
    qRegisterMetaType<mantissa::RunStatus>();
    drainTimer_.setInterval(kDrainIntervalMs);
    connect(&drainTimer_, &QTimer::timeout, this, &TrainingController::drain);
}

TrainingController::~TrainingController()
{
    if (thread_) {
        stop();
        thread_->wait();
    }
}

bool TrainingController::start(const ProjectConfig& config, const QString& projectPath, const QString& runName)
{
    if (running_) return false;
    job_ = std::make_unique<Job>();
    running_ = true;
    paused_ = false;
    startAnnounced_ = false;
    runId_ = -1;
    lastStatus_.reset();
    lastError_.clear();
    lastRefusedSettings_ = false;
    lastStoreFailed_ = false;
    lastSummary_ = {};

    Job* job = job_.get();
    thread_.reset(QThread::create([job, config, project = projectPath.toStdString(), store = storePath_.toStdString(),
                                   name = runName.toStdString()] { job->work(config, project, store, name); }));
    thread_->setObjectName(QStringLiteral("mantissa-trainer"));
    // QThread::finished is emitted on the worker; the queued hop lands us back on this thread.
    connect(thread_.get(), &QThread::finished, this, &TrainingController::onWorkerFinished, Qt::QueuedConnection);
    drainTimer_.start();
    thread_->start();
    return true;
}

void TrainingController::stop()
{
    if (!job_) return;
    std::lock_guard lock(job_->mutex);
    job_->stop_requested = true;
    if (job_->session) job_->session->request_stop();
}

void TrainingController::pause()
{
    if (!running_ || paused_) return;
    {
        std::lock_guard lock(job_->mutex);
        // Refused once the last step has begun: the run ends, and must not read "paused" until then.
        if (job_->session && !job_->session->request_pause()) return;
        job_->pause_requested = true;
    }
    paused_ = true;
    emit pausedChanged(true);
}

void TrainingController::resume()
{
    if (!running_ || !paused_) return;
    {
        std::lock_guard lock(job_->mutex);
        job_->pause_requested = false;
        if (job_->session) job_->session->request_resume();
    }
    paused_ = false;
    emit pausedChanged(false);
}

bool TrainingController::setLayerFormats(const QString& pattern, const GemmFormats& formats, const QString& scaling,
                                         QString* error)
{
    const auto refuse = [&](const QString& why) {
        if (error) *error = why;
        return false;
    };
    if (!job_) return refuse(tr("No run is going."));
    std::optional<Fp8Scaling> recipe;
    if (!scaling.isEmpty()) {
        recipe = parse_fp8_scaling(scaling.toStdString());
        if (!recipe)
            return refuse(tr("'%1' is no scaling recipe (one of %2)")
                              .arg(scaling, QString::fromStdString(fp8_scaling_names_joined())));
    }
    std::lock_guard lock(job_->mutex);
    if (!job_->session) {
        if (job_->ended) return refuse(tr("No run is going."));
        job_->formats_requested.push_back({pattern.toStdString(), formats, recipe}); // applied once the trainer exists
        return true;
    }
    try {
        if (!job_->session->request_layer_formats(pattern.toStdString(), formats, recipe))
            return refuse(tr("The run is finishing: its last step has begun."));
    } catch (const std::exception& e) {
        return refuse(QString::fromStdString(e.what()));
    }
    return true;
}

bool TrainingController::requestCheckpoint(QString* error)
{
    if (!job_) {
        if (error) *error = tr("No run is going.");
        return false;
    }
    std::lock_guard lock(job_->mutex);
    if (!job_->session) {
        if (error) *error = tr("The run is still starting; try again in a moment.");
        return false;
    }
    if (!job_->session->request_checkpoint()) {
        if (error) *error = tr("The run is finishing: its last step has begun, and its final checkpoint is written anyway.");
        return false;
    }
    return true;
}

void TrainingController::drain()
{
    if (!job_) return;
    // Take the batch before reading the run id: the worker publishes the id before its first
    // snapshot, so a non-empty batch always comes after started().
    TelemetryBatch batch = job_->buffer.take();
    if (!startAnnounced_) {
        int64_t id = -1;
        {
            std::lock_guard lock(job_->mutex);
            id = job_->run_id;
        }
        if (id >= 0) {
            startAnnounced_ = true;
            runId_ = id;
            emit started(id);
        }
    }
    if (batch.empty()) return;
    followEnginePause(batch.events);
    emit drained(batch);
    // A slot may have run a nested event loop in which the job ended.
    if (job_) job_->buffer.recycle(std::move(batch));
}

void TrainingController::followEnginePause(const std::vector<RunEvent>& events)
{
    const auto last = std::find_if(events.rbegin(), events.rend(), [](const RunEvent& e) {
        return e.kind == EventKind::Paused || e.kind == EventKind::Resumed;
    });
    if (last == events.rend()) return;
    const bool paused = last->kind == EventKind::Paused;
    if (paused == paused_) return;
    paused_ = paused;
    emit pausedChanged(paused);
}

void TrainingController::onWorkerFinished()
{
    if (!thread_) return;
    thread_->wait();
    drainTimer_.stop();
    drain(); // whatever the worker pushed after the last tick
    {
        // The worker has returned, but QThread::wait() synchronises through futexes that
        // ThreadSanitizer cannot see; the worker's last writes were made under this lock, so
        // taking it is what orders them before these reads for every tool, not only for the CPU.
        std::lock_guard lock(job_->mutex);
        lastStatus_ = job_->status;
        lastError_ = QString::fromStdString(job_->error);
        lastRefusedSettings_ = job_->settings_refused;
        lastStoreFailed_ = job_->store_failed;
        lastSummary_ = job_->summary;
    }
    thread_.reset();
    job_.reset();
    running_ = false;
    if (paused_) {
        paused_ = false;
        emit pausedChanged(false);
    }
    if (lastStatus_ == RunStatus::Failed) emit failed(lastError_);
    emit finished(*lastStatus_);
}

} // namespace mantissa
