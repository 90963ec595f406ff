// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Mirrors a remote run store (mantissa-train serve / run --serve, docs/REMOTE.md) into a
// local replica store, which the pages read like any local store. Rows are fetched after the
// replica's own high-water marks (per run: the last scalar step, the last event id, the last
// layer-statistics step), so a
// dropped connection resumes where the replica ends: nothing is fetched twice into it (rows
// keep their source keys) and nothing is lost. A live run is long-polled: its rows arrive
// within about a second of their commit on the server.
//
// Runs in the GUI thread; the network is asynchronous, and the replica's row writes (one
// transaction per page) run in order on a thread of their own (ReplicaWriter) while the next
// page is fetched.

#include <QElapsedTimer>
#include <QObject>
#include <QString>
#include <QUrl>
#include <QVariantMap>

#include <deque>
#include <map>
#include <memory>

#include "remote/replica_writer.h"
#include "run_store.h"

class QNetworkAccessManager;
class QJsonObject;
class QNetworkReply;
class QTimer;

namespace mantissa {

class RunStore;

// The replica is another mirror's (another window of this process, or another process): two
// mirrors writing one replica would fight over its live runs' locks.
class ReplicaInUse : public StoreError {
public:
    using StoreError::StoreError;
};

class RemoteMirror : public QObject {
    Q_OBJECT

public:
    enum class State {
        Connecting,   // no answer yet
        Connected,    // the last request was answered
        Reconnecting, // the server is gone or failing: retrying with back-off
        Refused,      // the server refused the token (401) or this client: no retry
        Stopped,
    };

    // `server`: http(s)://HOST:PORT. The replica is created when absent.
    RemoteMirror(const QUrl& server, const QString& token, const QString& replicaPath, QObject* parent = nullptr);
    ~RemoteMirror() override;

    // Throws ReplicaInUse when another mirror keeps this replica, StoreError when it cannot be
    // opened. The replica is this mirror's until stop().
    void start();
    void stop();

    // Trusts the server's certificate when its SHA-256 (of the DER bytes, 32 bytes) is this,
    // whoever signed it: a self-signed certificate on a lab server (mantissa-train prints the
    // fingerprint as it starts). Empty: the system's trust store decides. Set before start().
    void setPinnedCertificate(const QByteArray& sha256) { pinnedSha256_ = sha256; }
    // "AB:CD:..." -> 32 bytes; colons, spaces and case are free. Empty when not 64 hex digits.
    static QByteArray parseFingerprint(const QString& text);
    static QString fingerprintText(const QByteArray& sha256); // 32 bytes -> "AB:CD:..."

    State state() const { return state_; }
    QString stateText() const; // "connected to HOST:PORT", "reconnecting in 2 s: connection refused", ...
    QString replicaPath() const { return replicaPath_; }
    QUrl server() const { return server_; }
    // Seconds since the replica last held everything the server had: 0 while caught up, -1
    // before it ever was.
    double lagSeconds() const;
    double bytesPerSecond() const; // over the last few seconds
    qint64 bytesReceived() const { return bytesReceived_; }
    // Every remote run is in the replica as the server last reported it, rows complete.
    bool caughtUp() const;
    int reconnects() const { return reconnects_; }
    // The server offers encoding=columnar and the rows come in it (docs/REMOTE.md).
    bool usesColumnarPages() const { return columnar_; }
    // The replica holds every row of this run, which has ended on the server (its counts
    // matched). False for a running run, and for an ended one still being copied. True for
    // every run once the server has refused the mirror: nothing more will be copied.
    bool runComplete(qint64 runId) const;
    // Bytes of fetched pages (as sent) that may wait for the replica's writes before the next
    // page is asked for; one page always may. Memory stays bounded when the network is
    // faster than the disk, and a run of a million rows (12 MB of columnar pages) is fetched,
    // and drawn (scalarsFetched), without waiting for SQLite's inserts.
    static constexpr size_t kDefaultBytesAhead = size_t(16) << 20;
    void setBytesAhead(size_t bytes) { bytesAhead_ = bytes; }
    // Pages after which the next was asked for only once the writes were done.
    int pagesHeld() const { return pagesHeld_; }
    // The run the server's own process trains, which takes commands (its run list says so);
    // -1 where it names none (`serve`, or a server before 2026-12-03).
    qint64 trainingRun() const { return trainingRun_; }
    // Run lists asked for. While a run is live its rows are polled on, and the list (every
    // run with its settings: megabytes on a store of thousands) is read again only every
    // kRunListEveryMs, or at once when a page says a run ended.
    int runListsRequested() const { return runListsRequested_; }
    static constexpr int kRunListEveryMs = 2000;

    // Steers a run that trains in the server's process (run --serve --allow-control):
    // `command` is pause, resume, stop, checkpoint, or layer_formats with `fields` pattern,
    // forward, dgrad, wgrad. The answer comes as commandAnswered(); a refusal (403 without
    // --allow-control, 404 not training there) carries the server's message.
    void sendCommand(qint64 runId, const QString& command, const QVariantMap& fields = {});

signals:
    void stateChanged(mantissa::RemoteMirror::State state, const QString& text);
    void runsChanged();             // runs were added, changed or removed in the replica
    void rowsArrived(qint64 runId); // a run's rows were added to the replica
    // A page of a run's scalar rows from step `fromStep` on, fetched and on its way into the
    // replica (RunFollower::offerScalars says what the page's fields mean). Not for a page
    // that rewinds the run (a resume rewrote its later steps). The page is lent for the call:
    // a listener copies what it keeps.
    void scalarsFetched(qint64 runId, qint64 fromStep, const mantissa::ScalarPage& page);
    void statsChanged();            // lag, bytes per second
    void commandAnswered(qint64 runId, const QString& command, bool accepted, const QString& message);
    // An ended run whose replica still differs from the server after kMaxResyncs copies: it is
    // not fetched again; `message` says so with both sides' counts.
    void replicaDiffers(qint64 runId, const QString& message);

private:
    struct Cursor {
        qint64 fromStep = 0;   // re-read inclusively: the step's rows may come in two commits
        qint64 afterEvent = 0; // the last event id held
        qint64 fromLayerStep = 0; // layer statistics: the first step not yet held whole
        bool running = false;
        bool complete = false; // ended on the server, and the replica's counts match
        bool claimed = false;  // the replica holds the run's lock while it runs remotely
        int resyncs = 0;
        bool gaveUp = false;   // still differs after kMaxResyncs copies: not fetched again
        int writesPending = 0; // pages handed to the writer and not yet written
        QByteArray stableRecord; // the run as last listed, less last_step: rewritten only on a change
        std::string uuid;        // the run the replica's rows are of ("" before it is known)
    };

    void requestRuns();
    void onRuns(QNetworkReply* reply);
    void requestNextRows();
    void onRows(QNetworkReply* reply, qint64 runId);
    // Reads a finished reply: its body, or "" after handling the failure (false). A 200 is a
    // connection made only once its body reads as a run store's: `confirms` false leaves that to
    // the caller (markConnected), so a captive portal's page is no "connected" between retries.
    bool take(QNetworkReply* reply, QByteArray& body, bool confirms = true);
    void markConnected();
    void setState(State state, const QString& text);
    void halt(const QString& why); // Refused: stopped for good, the replica's claims released
    void retryLater(const QString& why);
    // Why a request failed with no error of the server's own in its answer.
    static QString failureText(QNetworkReply* reply, int status);
    QNetworkReply* get(const QString& pathAndQuery, int waitMs);
    // Accepts the TLS errors of a pinned certificate; notes the fingerprint of one that is not.
    void checkCertificate(QNetworkReply* reply);
    void countBytes(qint64 bytes);
    void dropInFlight(); // aborts the request in flight, whose answer is then never handled
    // A run that has ended and whose last page is written: complete when the server's counts
    // are the replica's, else copied again (at most kMaxResyncs times).
    void checkCounts(qint64 runId, const QJsonObject& counts);

    QUrl server_;
    QString token_;
    QByteArray pinnedSha256_;
    QByteArray untrustedSha256_; // the last certificate refused, for the message
    QString replicaPath_;
    std::unique_ptr<RunStore> replica_;
    int replicaLockFd_ = -1; // flock on "<replica>.mirror-lock" while replica_ is open
    QNetworkAccessManager* net_ = nullptr;
    QTimer* retry_ = nullptr;
    std::map<qint64, Cursor> cursors_;
    std::deque<qint64> queue_; // runs whose rows are fetched next, in turn
    State state_ = State::Stopped;
    QString stateText_;
    int backoffMs_ = 0;
    int reconnects_ = 0;
    bool everConnected_ = false;
    qint64 bytesReceived_ = 0;
    std::deque<std::pair<qint64, qint64>> recentBytes_; // (ms since start, bytes)
    QElapsedTimer clock_;
    qint64 caughtUpAtMs_ = -1;
    bool caughtUp_ = false;
    QNetworkReply* inFlight_ = nullptr;
    bool columnar_ = false; // the server offers encoding=columnar (its run list says so)
    ReplicaWriter writer_; // the replica's row writes, off the GUI thread
    int generation_ = 0;   // counts stop()s: a write's outcome from before one is ignored
    bool nextPageHeld_ = false; // the next page waits until the writer has caught up
    size_t bytesAhead_ = kDefaultBytesAhead;
    int pagesHeld_ = 0;
    int runListsRequested_ = 0;
    qint64 trainingRun_ = -1;
    qint64 runsListedAtMs_ = -1; // when the run list was last asked for; -1: ask at the next turn
};

} // namespace mantissa
