// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Follows one run of a run store as the Monitor page shows it: reads what the store holds of
// the run after its own marks (scalars by step, events by id, layer statistics by step) and
// turns the rows back into the TelemetryBatch objects the training thread would have handed
// over. Fed from a remote store's replica it shows a remote run live; fed from a local store,
// a `mantissa-train run` of another process on the same machine. A run that has ended is
// read once to the end; a running one is polled on a timer in the GUI thread.
//
// The store is read through the follower's own read-only connection, each poll in one
// snapshot, so rows of different tags and tables agree with one another. A row is handed on
// once the run's later rows show it is whole (StoreSink writes a step's rows in order), so
// nothing is handed on twice or half:
// - a step, once the store holds a later step, or its six fixed metrics and as many per-layer
//   gradient norms as the step before;
// - an evaluation, once val/loss and eval/train_loss are there;
// - a telemetry frame, once memory/resident_bytes (written after its layer statistics) is.
// When the run has ended, whatever it holds is whole.
//
// A mirror may also offer the scalar rows it has fetched before its replica holds them
// (offerScalars): while an offered page joins the follower's marks, its steps are handed on
// from memory, by the same rules, instead of waiting for the replica's writes (SQLite's
// inserts are the slow part of opening a long remote run). Everything else — events, frames,
// whether the run has ended — is still read from the store.

#include <QObject>
#include <QString>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/snapshot_buffer.h"
#include "project_config.h"
#include "run_event.h"
#include "run_status.h"
#include "run_store.h"

class QElapsedTimer;
class QTimer;

namespace mantissa {

struct RunInfo;
// The identity FollowedRun keeps of a run.
std::string followed_identity(const RunInfo& info);

// What a consumer needs to show the run before its first batch (MonitorPage::reset).
struct FollowedRun {
    int64_t id = 0;
    // Which run under that id: its uuid (its creation time in a store from before uuids). A
    // deleted run's id is given again, and the new run is another one to follow.
    std::string identity;
    QString name;
    RunStatus status = RunStatus::Running;
    int64_t tokensPerStep = 0;         // 0 when the stored config cannot be read
    int64_t totalSteps = 0;            // training.steps of the stored config; 0 when it cannot be read
    std::vector<std::string> layers;   // GEMM layers in forward order, from the stored config
    std::vector<LayerState> initialLayerStates;
    // The stored config's precision settings; none when it cannot be read. A layer switched to
    // 16 or 32 bits takes its project recipe from here (MainWindow::switchLayer).
    std::optional<PrecisionConfig> precision;
};

class RunFollower : public QObject {
    Q_OBJECT

public:
    static constexpr int kDefaultIntervalMs = 200;

    explicit RunFollower(QObject* parent = nullptr);
    ~RunFollower() override;

    // Starts following run `runId` of the store at `storePath` from its first row: emits
    // opened(), then everything the run has as batches (first poll at once), then whatever
    // is added. False with the reason when the store or the run cannot be read.
    bool follow(const QString& storePath, int64_t runId, QString* error = nullptr);
    void stop();

    bool isFollowing() const { return runId_ > 0; }
    int64_t runId() const { return runId_; }
    QString storePath() const { return storePath_; }
    // Following a run that is still running (polled); false once it has been read to its end.
    bool isLive() const;
    const FollowedRun& run() const { return run_; }

    // Whether the store holds every row of an ended run yet. A replica that a mirror still
    // fills may say "finished" before the last rows are in: until this says so, an ended run
    // is polled like a running one. Default: always (a local store).
    using Completeness = std::function<bool(int64_t runId)>;
    void setCompleteness(Completeness complete) { complete_ = std::move(complete); }
    // Polls at once rather than at the next tick (a mirror just wrote rows).
    void pollSoon();
    // Another connection to the store saw the run end (its writer gone, a mirror refused): read
    // it through a new connection now, not after kReopenAfterQuietMs of quiet.
    void reopenSoon();
    // Scalar rows of run `runId` that the store will hold, from step `fromStep` on, as a page
    // of the store's own shape (page.cut: every step in it is whole; page.next: where the next
    // page starts, or the page's newest step when it may end in half a step). Ignored unless
    // this follower follows that run; used once the marks reach `fromStep`, dropped if they
    // pass the page first, and never more than kMaxOfferedRows rows are held.
    void offerScalars(int64_t runId, int64_t fromStep, const ScalarPage& page);
    static constexpr size_t kMaxOfferedRows = 2'000'000;

    void setIntervalMs(int ms);
    // Reads what is new now and emits it (the timer calls this). True when anything came.
    bool poll();

    // The TelemetryBatch steps, evaluations, events and frames handed on so far.
    int64_t stepsEmitted() const { return stepsEmitted_; }
    int64_t framesEmitted() const { return framesEmitted_; }
    // Offered pages handed on from memory (offerScalars), rather than read from the store.
    int64_t offeredPagesTaken() const { return offeredPagesTaken_; }

signals:
    void opened(const mantissa::FollowedRun& run); // before the first batch, and after restarted()
    void batchReady(const mantissa::TelemetryBatch& batch);
    // The run was resumed from a checkpoint before the steps already handed on: its later
    // steps are being rewritten. opened() comes again and the run is read again from its start.
    void restarted();
    void ended(); // read to the end of a run that is no longer running (run().status says how it ended)
    void failed(const QString& message);    // the store or the run went away: following stops

private:
    struct Marks {
        int64_t scalarFrom = 0;   // scalars are read from here on, inclusively
        int64_t lastStep = -1;    // the newest step handed on
        int64_t lastEval = -1;
        int64_t layerFrom = 0;    // layer statistics are read from here on
        int64_t afterEvent = 0;   // the last event id handed on
        size_t gradNorms = 0;     // per-layer gradient norms of the last step handed on
    };

    RunStore* connection(QString* error);
    bool readScalars(RunStore& store, bool runEnded, TelemetryBatch& batch, bool& more);
    // Hands on the whole steps of `page`, which starts at or before marks_.scalarFrom.
    void handOnScalars(const ScalarPage& page, bool runEnded, TelemetryBatch& batch);
    // The offered page that joins the marks, handed on; false when none does.
    bool takeOffered(TelemetryBatch& batch, bool& more);
    bool readFrames(RunStore& store, bool runEnded, TelemetryBatch& batch, bool& more);
    // Pages of events until none is left or the poll's budget is spent (`more`).
    void readEvents(RunStore& store, TelemetryBatch& batch, bool& rewound, bool& more, const QElapsedTimer& budget);
    void openRun(const RunInfo& info);
    void fail(const QString& message);

    QTimer* timer_ = nullptr;
    QString storePath_;
    int64_t runId_ = 0;
    FollowedRun run_;
    Marks marks_;
    bool live_ = false;
    std::unique_ptr<RunStore> store_;
    bool storeChecked_ = false; // the file was checked whole by a first open
    qint64 openedAtMs_ = 0, lastNewsMs_ = 0;
    int intervalMs_ = kDefaultIntervalMs;
    Completeness complete_;
    struct Offered {
        int64_t fromStep = 0;
        ScalarPage page;
    };
    std::deque<Offered> offered_; // in step order
    size_t offeredRows_ = 0;
    int64_t offeredPagesTaken_ = 0;
    int64_t stepsEmitted_ = 0, framesEmitted_ = 0;
};

} // namespace mantissa
