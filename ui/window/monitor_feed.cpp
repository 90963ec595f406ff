// SPDX-License-Identifier: GPL-3.0-or-later
#include "window/monitor_feed.h"

#include <QDir>

#include "common/run_format.h"
#include "controller/run_follower.h"
#include "controller/store_connection.h"
#include "pages/monitor_page.h"
#include "remote/remote_mirror.h"
#include "run_store.h"
#include "window/run_status_widget.h"

namespace mantissa {

MonitorFeed::MonitorFeed(MonitorPage* page, StoreConnection* store, QObject* parent)
    : QObject(parent), page_(page), store_(store), follower_(new RunFollower(this))
{
    connect(follower_, &RunFollower::opened, this, &MonitorFeed::onOpened);
    connect(follower_, &RunFollower::batchReady, page_, &MonitorPage::ingest);
    // The follower is stopped while a run trains in the window: the readout is that run's then.
    // Paused and ended as the run's own events and record say, as for a run that trains here
    // (a remote run read "ETA 12 s" while paused, and "done" when stopped or failed).
    connect(follower_, &RunFollower::batchReady, this, [this](const TelemetryBatch& batch) {
        if (!status_) return;
        status_->update(batch);
        for (const auto& e : batch.events)
            if (e.kind == EventKind::Paused || e.kind == EventKind::Resumed)
                status_->setPaused(e.kind == EventKind::Paused);
    });
    connect(follower_, &RunFollower::ended, this, [this] {
        page_->renderNow();
        if (!status_) return;
        const RunStatus status = follower_->run().status; // as the follower last read it, ended
        status_->finish(status == RunStatus::Finished ? QString() : format_status(status));
    });
    connect(follower_, &RunFollower::failed, this, &MonitorFeed::failed);
}

int64_t MonitorFeed::followedRun() const { return follower_->isFollowing() ? follower_->runId() : -1; }

bool MonitorFeed::showRun(int64_t runId, QString* error)
{
    if (localTraining_) {
        if (error) *error = tr("A run trains in this window: the Monitor shows it until it ends.");
        return false;
    }
    if (!follow(runId, error)) return false;
    userPicked_ = true;
    return true;
}

void MonitorFeed::release()
{
    follower_->stop();
    userPicked_ = false;
}

void MonitorFeed::setLocalTraining(bool training)
{
    localTraining_ = training;
    if (training) release();
}

void MonitorFeed::setRemote(RemoteMirror* mirror)
{
    mirror_ = mirror;
    userPicked_ = false;
    if (mirror_) {
        // The replica says "finished" before the mirror has copied a run's last rows.
        follower_->setCompleteness([mirror](int64_t id) { return mirror->runComplete(id); });
        connect(mirror_, &RemoteMirror::rowsArrived, follower_, [this](qint64 id) {
            if (id == follower_->runId()) follower_->pollSoon();
        });
        // A long run is drawn as its pages arrive, not as SQLite writes them.
        // Only while the follower reads this mirror's replica.
        connect(mirror_, &RemoteMirror::scalarsFetched, follower_,
                [this, mirror](qint64 id, qint64 from, const ScalarPage& page) {
                    if (mirror_ == mirror && follower_->storePath() == mirror->replicaPath())
                        follower_->offerScalars(id, from, page);
                });
    } else {
        follower_->setCompleteness({});
    }
    // The replica (or the local store) the follower read is no longer what the pages show,
    // nor is the readout of its run.
    if (!localTraining_) {
        follower_->stop();
        if (status_) status_->reset(0);
    }
    followNewest();
}

void MonitorFeed::followNewest()
{
    if (!mirror_ || localTraining_ || userPicked_) return;
    RunStore* store = store_->store();
    if (!store) return;
    int64_t newest = -1, newestRunning = -1;
    std::string newestIdentity, newestRunningIdentity;
    try {
        for (const auto& run : store->list_runs()) {
            newest = run.id;
            newestIdentity = followed_identity(run);
            if (run.status == RunStatus::Running) {
                newestRunning = run.id;
                newestRunningIdentity = newestIdentity;
            }
        }
    } catch (const std::exception&) {
        return; // the replica is being rewritten: the next change looks again
    }
    const int64_t target = newestRunning > 0 ? newestRunning : newest;
    if (target <= 0) return;
    const std::string& targetIdentity = newestRunning > 0 ? newestRunningIdentity : newestIdentity;
    // Keep following a run that is still live; move on when a newer one starts, also under the
    // id of the one followed (deleted on the server, its id given again).
    const bool sameRun = follower_->runId() == target && follower_->run().identity == targetIdentity;
    // One read to its end that runs again (resumed on the server) is followed again: it stayed
    // "done" while it trained.
    const bool runsAgain = sameRun && !follower_->isLive() && newestRunning == target;
    // Followed live, ended for this connection (the mirror refused, the server's claims released):
    // the follower's own connection, opened while they were held, would read it running for 30 s more.
    if (sameRun && follower_->isLive() && newestRunning != target) follower_->reopenSoon();
    if (follower_->isFollowing() && follower_->storePath() == store_->path() &&
        ((sameRun && !runsAgain) || (follower_->isLive() && newestRunning < 0)))
        return;
    follow(target, nullptr);
}

bool MonitorFeed::follow(int64_t runId, QString* error)
{
    QString why;
    if (!follower_->follow(store_->path(), runId, &why)) {
        if (error) *error = why;
        emit failed(tr("Cannot show run %1 in the Monitor: %2").arg(runId).arg(why));
        return false;
    }
    return true;
}

void MonitorFeed::onOpened(const FollowedRun& run)
{
    page_->reset(run.tokensPerStep, run.layers);
    page_->setInitialLayerStates(run.initialLayerStates);
    if (status_) status_->reset(run.totalSteps);
    // No training thread in this process to share the cores with when the run is remote.
    page_->setFrameBudget(mirror_ ? MonitorPage::kSpareCoreFrameBudget : MonitorPage::kSharedCoreFrameBudget);
    const QString where = mirror_ ? tr("the remote store") : QDir::toNativeSeparators(store_->path());
    emit message(tr("Monitor: run %1 %2 of %3%4")
                     .arg(run.id)
                     .arg(run.name, where, run.status == RunStatus::Running ? tr(", live") : QString()));
}

} // namespace mantissa
