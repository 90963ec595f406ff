// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Decides what the Monitor page shows when no run trains in this window, and feeds it: a run
// of the store the pages read, followed by a RunFollower. While a remote store is connected
// that is its newest running run, live (or its newest run when none runs); Runs ▸ Show in
// Monitor picks any run, of a remote or a local store (a `mantissa-train run` of another
// process shows live too). A run started in this window takes the Monitor back (release()).

#include <QObject>
#include <QString>

#include <cstdint>

namespace mantissa {

class MonitorPage;
class RemoteMirror;
class RunStatusWidget;
class RunFollower;
class StoreConnection;
struct FollowedRun;

class MonitorFeed : public QObject {
    Q_OBJECT

public:
    MonitorFeed(MonitorPage* page, StoreConnection* store, QObject* parent = nullptr);

    // Runs ▸ Show in Monitor. False with the reason when the run cannot be read.
    bool showRun(int64_t runId, QString* error = nullptr);
    // A run starts in this window: the Monitor is the controller's again.
    void release();
    // A run trains in this window: nothing is followed until it ends.
    void setLocalTraining(bool training);
    // Connected to a remote store through `mirror` (its replica is the store's path now), or
    // not (nullptr).
    void setRemote(RemoteMirror* mirror);
    // The store's runs changed: with a remote store, follow its newest running run.
    void followNewest();
    // The status bar's run readout shows the followed run too (step, loss, val loss, speed;
    // "done" once read to its end), as it shows a run that trains in the window.
    void setStatusWidget(RunStatusWidget* widget) { status_ = widget; }

    RunFollower* follower() const { return follower_; }
    int64_t followedRun() const;
    bool userPicked() const { return userPicked_; }

signals:
    void message(const QString& text); // for the status bar
    void failed(const QString& text);

private:
    bool follow(int64_t runId, QString* error);
    void onOpened(const FollowedRun& run);

    MonitorPage* page_;
    StoreConnection* store_;
    RunFollower* follower_;
    RemoteMirror* mirror_ = nullptr;
    RunStatusWidget* status_ = nullptr;
    bool localTraining_ = false;
    bool userPicked_ = false; // a run chosen on the Runs page stays until the user or a local run changes it
};

} // namespace mantissa
