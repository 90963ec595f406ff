// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Runs on disk: one SQLite database (WAL mode) holding each run's resolved config, status,
// scalar metrics and events. Writes are queued and committed in batches by a writer
// thread, so the training step never waits for the disk.

#include <array>
#include <condition_variable>
#include <functional>
#include <map>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "run_compare.h"
#include "run_status.h"
#include "run_summary.h"
#include "telemetry.h"

struct sqlite3;

namespace mantissa {

class StoreError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The request itself is wrong, not the store (an empty tag, no such run): a command line's
// bad argument (exit 2), where other StoreErrors are the store's (exit 3).
class StoreArgumentError : public StoreError {
public:
    using StoreError::StoreError;
};

// The store cannot be written (read-only file, directory or mount): it may still be read
// with OpenMode::ReadOnly. The message names the file and says "is read-only".
class StoreReadOnlyError : public StoreError {
public:
    using StoreError::StoreError;
};

struct RunInfo {
    int64_t id = 0;
    std::string name;
    std::string project_path;
    std::string config_json;
    RunStatus status = RunStatus::Running;
    std::string created_at;
    std::string finished_at;
    int64_t last_step = 0;
    std::string uuid; // 32 hex digits, random: the run's identity inside its checkpoints
    bool legacy_checkpoints = false; // recorded before schema 4: may have checkpoints in legacy_checkpoint_dir
};

// One checkpoint file as it was written: verified against the file before it is loaded.
struct CheckpointRow {
    int64_t run_id = 0;
    int64_t step = 0;
    std::string path; // as written (absolute)
    std::string checksum; // checksum_file()
    int64_t bytes = 0;
};

struct ScalarRow {
    int64_t step = 0;
    std::string tag; // "train/loss", "val/loss", "lr", "grad_norm", "step_time_ms", "tokens_per_s", ...
    double value = 0.0;
};

struct EventRow {
    int64_t step = 0;
    std::string kind;    // the stored tag (RunEvent::tag())
    std::string message; // as rendered when it was written
    std::string created_at;
    RunEvent event;      // the typed event, fields included
};

// An event row as stored, id and fields JSON included: what a replica copies verbatim.
struct StoredEventRow {
    int64_t id = 0;
    int64_t step = 0;
    std::string kind, message, created_at;
    std::string fields = "{}";
    bool operator==(const StoredEventRow&) const = default;
};

// What a replica compares with its source to know it holds a run's rows exactly.
struct RunRowCounts {
    int64_t scalars = 0;
    int64_t events = 0;
    int64_t max_event_id = 0; // 0: none
    int64_t max_scalar_step = -1; // -1: none
    int64_t layer_stats = 0;
    int64_t max_layer_step = -1; // -1: none
};

// One page of a run's rows from a step on, cut at a whole step: every row with a step in
// [from, next) of the store as read. `cut` true: rows at `next` and beyond were left out
// (ask again from `next`); false: the page holds every row from `from` on.
struct ScalarPage {
    std::vector<ScalarRow> rows; // by tag, then step
    bool cut = false;
    int64_t next = 0;
};
struct LayerStatsPage {
    std::vector<std::pair<int64_t, TensorStats>> rows; // by step, layer, role
    bool cut = false;
    int64_t next = 0;
    // SQLite's VM steps to list the run's tensors: a few per tensor, whatever the run's length
    // (a row-value seek stepped through every row of the run: a long run's follower read it
    // whole every 200 ms).
    int64_t tensor_lookup_steps = 0;
};

// Which runs list_run_summaries returns; empty fields match everything.
struct RunFilter {
    std::vector<int64_t> ids;          // only these runs (in id order, not this order)
    std::string name_contains;         // case-sensitive substring of the name
    std::optional<RunStatus> status;   // exact status
    std::vector<std::string> tags;     // runs carrying every one of these tags
    std::string preset;                // exact precision.preset
};

// What list_run_summaries keeps between calls so that a refresh reads only the tokens/s rows
// each run added since the last one: the Runs page asks every second while a run trains or a
// remote run is mirrored, and a run of 1,000,000 steps took about 150 ms a read in full. Each
// run's values up to the last step read, sorted; read again in full when the run (re)started
// since (every resume records run_started), or when its steps went back (a resume's discard).
// Owned by the caller; one used with another store starts empty.
class TokensMedianCache {
public:
    int64_t rows_read() const { return rows_read_; } // tokens/s rows read from the store, all calls

private:
    friend class RunStore;
    struct Entry {
        std::string created_at; // with the id: another run that took a deleted run's id is another entry
        int64_t starts = -1;    // run_started events when last read
        int64_t last_step = -1; // the highest step read
        std::vector<double> sorted;
    };
    std::string store_path_;
    std::map<int64_t, Entry> runs_;
    int64_t rows_read_ = 0;
};

enum class OpenMode {
    Create,    // read-write; creates the store in an absent or empty file (run, sweep, the GUI's Start)
    ReadWrite, // read-write; the store must exist (rename, delete, tag, resume, the GUI's edits)
    ReadOnly,  // never creates or changes a file (list, show, export, compare)
};

class RunStore {
public:
    // 1: runs, scalars, events. 2: + layer_stats. 3: + run_tags. 4: + events.fields (typed
    // events), runs.uuid, checkpoints. 5: event ids are never reused (AUTOINCREMENT). Older
    // stores are upgraded in place on a writable open; a read-only open reads them as their
    // tables allow.
    static constexpr int kSchemaVersion = 5;

    // Opens (or, with Create, creates) the store. Throws StoreError, leaving the file
    // untouched, with a message naming the file and the reason: absent or empty (unless
    // Create), not a SQLite database, another program's database, no Mantissa tables, a newer
    // schema, damaged, disk full / I/O error; StoreReadOnlyError when a writable mode meets a
    // store that cannot be written.
    // ReadOnly starts no writer thread, migrates nothing, and reports a "running" run whose
    // process died as "interrupted" without writing that down; every writing method throws
    // StoreReadOnlyError.
    // `quick_check` false skips PRAGMA quick_check, which reads the whole file (~150 ms for a
    // 1-M-row store), for a store checked once already and opened again and again (the store
    // server's connection pool).
    // A file that passed the check in this process and has not changed since is not read again.
    // Throws StoreArgumentError for a path that names no file (is_private_database).
    explicit RunStore(const std::string& path, OpenMode mode = OpenMode::Create, bool quick_check = true);
    // "" and ":memory:" are SQLite's private databases, gone when the connection closes: a run
    // recorded there would be saved nowhere (a script's --db "$UNSET").
    static bool is_private_database(const std::string& path) { return path.empty() || path == ":memory:"; }
    // A path that names a folder ("runs/", or one that exists as a directory): refused as
    // StoreArgumentError before anything is made (a --db of "runs/" used to make the folder,
    // then fail on it).
    static bool names_a_folder(const std::string& path);
    // An SQLite database's header at `path`, read through SQLite: a descriptor of one's own
    // opened and closed on a store this process has open drops its locks on it.
    static bool is_sqlite_file(const std::string& path);
    static std::unique_ptr<RunStore> open_read_only(const std::string& path, bool quick_check = true)
    {
        return std::make_unique<RunStore>(path, OpenMode::ReadOnly, quick_check);
    }
    ~RunStore(); // flushes queued rows
    static int64_t quick_checks_run(); // in this process: whole-file checks made
    RunStore(const RunStore&) = delete;
    RunStore& operator=(const RunStore&) = delete;

    // The new run is "running" and claimed by this store (see claim_run).
    int64_t create_run(const std::string& name, const std::string& project_path, const std::string& config_json);
    // Marks the run "running" and holds its lock file while this store lives, so that a
    // store opened later can tell a live run from one whose process died (-> "interrupted").
    void claim_run(int64_t run_id);
    void rename_run(int64_t run_id, const std::string& name);
    // The run's settings (a resume's overrides changed them).
    void set_run_config(int64_t run_id, const std::string& config_json);
    void delete_run(int64_t run_id); // with its metrics, events and layer statistics
    // Keeps the run (id, name, uuid, tags) but drops everything it recorded: for a replica
    // whose source was rewritten under it.
    void clear_run_records(int64_t run_id);
    // For a run that died before its first checkpoint and is trained again from step 0: drops
    // everything that attempt recorded (its start included: the run is started once) except
    // the user's own precision changes, which the new attempt makes again (RunSession::reopen)
    // and a later start-over or resume must still find.
    void start_run_over(int64_t run_id);
    // For a run resumed from its checkpoint at `step`, which trains the steps after it again:
    // drops what those steps recorded (scalars, layer statistics, the events that training them
    // again makes again: retraining_reproduces), so that each is recorded once, as in a run
    // never stopped, and none is left from steps the resumed run does not reach. The run's
    // history stays: starts, stops, failures, checkpoint files, and the user's precision
    // changes, which the resume makes again from here (RunSession::reopen), unless its own
    // settings superseded them (`live_changes_superseded`): then those from `step` on go too.
    void discard_steps_after(int64_t run_id, int64_t step, bool live_changes_superseded = false);
    void finish_run(int64_t run_id, RunStatus status); // flushes first

    // Queued; committed by the writer thread within ~250 ms.
    void append_scalar(int64_t run_id, int64_t step, const std::string& tag, double value);
    void append_event(int64_t run_id, const RunEvent& event);
    void append_layer_stats(int64_t run_id, int64_t step, const TensorStats& stats);
    // A step's rows as one unit: the writer commits all of them or none yet, so that a reader
    // (the GUI's RunFollower) never finds a step with some of its rows, which it would hand on
    // as whole (a commit could end between one gradient norm and the next).
    void append_step_rows(int64_t run_id, int64_t step, const std::vector<std::pair<std::string, double>>& scalars,
                          const std::vector<TensorStats>& stats = {});
    void flush(); // blocks until everything queued so far is committed
    // Why the writer thread last failed to commit a batch ("" if it never did), e.g. "disk
    // full". The rows of a failed batch are lost; the run goes on, and finish_run still tries
    // to record its status (and throws if that fails too).
    std::string last_write_error() const;
    // Rows of every batch that could not be written since this store was opened (their
    // errors were printed, the last one is last_write_error()).
    int64_t rows_lost() const;

    std::vector<RunInfo> list_runs();
    // One run by id: a seek, where find_run read every run of the store (a remote window's
    // poll, every 100 ms, cost the training host 17% of a core in a store of 2,000 runs).
    std::optional<RunInfo> run_info(int64_t id);
    // By numeric id, else the newest run with that name.
    std::optional<RunInfo> find_run(const std::string& id_or_name);
    std::vector<ScalarRow> scalars(int64_t run_id);
    // One metric of one run, ascending step: what a plot of that run draws. NaN values were
    // stored as NULL by SQLite and come back as NaN.
    Series series(int64_t run_id, const std::string& tag);
    // The tag's row of the highest step, one index seek (`show` read a run's every row for it).
    std::optional<ScalarRow> last_scalar(int64_t run_id, const std::string& tag);
    // The scalar tags one run has, sorted: one index seek per tag, however many rows.
    std::vector<std::string> scalar_tags(int64_t run_id);

    // Everything the Runs page shows, one row per run in id order, in three queries however
    // many runs there are (see docs/BENCHMARKS.md for the cost).
    // With a cache, each run's tokens/s median is read from the rows added since the last call.
    std::vector<RunSummaryRow> list_run_summaries(const RunFilter& filter = {}, TokensMedianCache* cache = nullptr);

    // Tags: short labels ("baseline", "sweep:fp8-2026-11-30"). Surrounding blanks are trimmed;
    // an empty tag or an unknown run throws StoreError. Adding a tag twice keeps one.
    void add_tags(int64_t run_id, const std::vector<std::string>& tags);
    void remove_tags(int64_t run_id, const std::vector<std::string>& tags); // absent ones are ignored
    std::vector<std::string> tags(int64_t run_id); // sorted
    std::vector<std::pair<std::string, int64_t>> all_tags(); // (tag, runs carrying it), sorted by tag
    std::vector<EventRow> events(int64_t run_id);
    // (step, stats) for one run; `layer` empty = all layers. Ordered by step, layer, role.
    std::vector<std::pair<int64_t, TensorStats>> layer_stats(int64_t run_id, const std::string& layer = {});
    // One role's rows of every layer, without the exponent histograms (exponent_counts empty):
    // the Compare page's heatmap read every row's histogram too (3.2 s and 470 MB for a
    // 900,000-row run, on the window's thread).
    std::vector<std::pair<int64_t, TensorStats>> layer_stats_without_histograms(int64_t run_id,
                                                                                const std::string& role);

    // A run's checkpoint folder: "<store file>.checkpoints/run-<id>" beside the store, so
    // that two stores in one folder never share one (as the lock files in "<store file>.locks/").
    std::string checkpoint_dir(int64_t run_id) const;
    // Where stores before schema 4 put them: "checkpoints/run-<id>" beside the store file.
    std::string legacy_checkpoint_dir(int64_t run_id) const;
    // Written at once (not queued): a checkpoint on disk must not outlive its record by a crash.
    void record_checkpoint(const CheckpointRow& row);
    std::vector<CheckpointRow> checkpoints(int64_t run_id); // by step

    // Row by row, for exports of any length (csv_export.h, tensorboard_export.h): the caller
    // holds one row, not the run; SQLite sorts beyond its page cache in temporary files (in
    // $TMPDIR, else /var/tmp or /tmp), so a large export takes room there. `visit` runs under
    // the store's lock and must not call the store; what it throws ends the read.
    void for_each_scalar(int64_t run_id, const std::function<void(const ScalarRow&)>& visit); // by step, tag
    void for_each_event(int64_t run_id, const std::function<void(const EventRow&)>& visit); // in order
    // By step, layer, role; without the exponent histograms (left empty) unless asked for.
    void for_each_layer_stats(int64_t run_id, bool with_histograms,
                              const std::function<void(int64_t step, const TensorStats&)>& visit);

    int schema_version();
    const std::string& path() const { return path_; }
    bool read_only() const { return mode_ == OpenMode::ReadOnly; }
    // A read-only open of a store with no WAL beside it reads the file as immutable
    // (open_read_only): true once a writer has started since (a WAL is there) or has changed
    // the file and closed it (a delete, a short run), when this connection would miss the
    // writer's rows or read the changed file as "malformed". Open the store again then.
    // Always false for other opens.
    bool snapshot_outdated() const;
    // Asks again which "running" runs lost their process, as a connection kept open (a
    // server's pool, the window's Runs page) would otherwise keep its first answer: a run
    // resumed since would read "interrupted" while it trains, one killed since "running".
    // Read-only: read as "interrupted"; read-write: marked so in the store.
    void refresh_dead_runs();

    // Remote mirroring (remote/, ui/remote/, docs/REMOTE.md). A server pages a run's rows
    // out with these; a client's replica store takes them in under the same ids, so that a
    // replica reads like the store it mirrors.
    // Scalars of one run with step >= from_step, ascending step, at most `limit` per tag:
    // one primary-key range per tag, however many rows the run has.
    std::vector<ScalarRow> scalars_from_step(int64_t run_id, int64_t from_step, int64_t limit);
    std::vector<StoredEventRow> events_after(int64_t run_id, int64_t after_id, int64_t limit); // by id
    RunRowCounts row_counts(int64_t run_id);
    // Pages cut at a whole step: scalars with at most `limit` (>= 2) steps per tag; layer
    // statistics with at most about `max_rows` rows (and at least 2 steps per tensor), one
    // primary-key range per (layer, role), so a page costs the same early or late in a long run.
    // NaN statistics (stored as NULL) come back as NaN, so that a copy stores them as NULL too.
    ScalarPage scalars_page(int64_t run_id, int64_t from_step, int64_t limit);
    LayerStatsPage layer_stats_page(int64_t run_id, int64_t from_step, int64_t max_rows);
    bool has_scalar(int64_t run_id, const std::string& tag, int64_t step);
    // The rows of these tags with from_step <= step <= to_step, by tag, then step.
    std::vector<ScalarRow> scalars_in_steps(int64_t run_id, const std::vector<std::string>& tags, int64_t from_step,
                                            int64_t to_step);
    // Typed events with their ids, id > after_id, by id: what a follower of a live run reads.
    std::vector<std::pair<int64_t, EventRow>> event_rows_after(int64_t run_id, int64_t after_id, int64_t limit);

    // Every read between construction and destruction sees one state of the file (one SQLite
    // read transaction), so rows of several tables and tags read in between are consistent
    // with one another. Only on a read-only store (a writable one shares its connection with
    // its writer thread): elsewhere it does nothing.
    class ReadSnapshot {
    public:
        explicit ReadSnapshot(RunStore& store);
        ~ReadSnapshot();
        ReadSnapshot(const ReadSnapshot&) = delete;
        ReadSnapshot& operator=(const ReadSnapshot&) = delete;

    private:
        RunStore& store_;
        bool active_ = false;
    };
    // Replica side, written at once in one transaction: the run's record (same id, status,
    // times, uuid) and tags as given, and rows as the source stored them.
    void put_mirrored_run(const RunInfo& info, const std::vector<std::string>& tags);
    void put_mirrored_rows(int64_t run_id, const std::vector<ScalarRow>& scalars,
                           const std::vector<StoredEventRow>& events,
                           const std::vector<std::pair<int64_t, TensorStats>>& layer_stats = {});

private:
    std::vector<RunInfo> read_runs(std::optional<int64_t> only); // every run, or the one with that id
    struct PendingRow {
        enum class Kind { Scalar, Event, LayerStats } kind = Kind::Scalar;
        int64_t run_id = 0, step = 0;
        std::string tag_or_kind, message;
        double value = 0.0;
        TensorStats stats;
        std::string fields; // events: event_fields_json
    };
    void writer_loop();
    // False where another connection held the write lock past the busy timeout (the rows are
    // untouched, to be tried again); other failures drop the rows (record_write_failure).
    bool write_batch(std::vector<PendingRow>& rows, bool last_try);
    void record_write_failure(size_t rows, const std::string& why); // db_mutex_ held
    // discard_steps_after's deletes, in the caller's transaction (db_mutex_ held): events only
    // with an id below `before_event` (a replica's resume event and what followed it stay).
    void delete_steps_after(int64_t run_id, int64_t step, int64_t before_event, bool live_changes_superseded);
    // add_tags / remove_tags: `sql` binds (run_id, tag) once per tag, in one transaction.
    void write_tags(int64_t run_id, const std::vector<std::string>& tags, const char* sql, bool run_must_exist);

    void open_writable();
    void open_read_only();
    // The refusals common to every mode; sets schema_. True for a SQLite file without tables.
    bool check_contents(bool may_be_empty);
    void require_writable(const char* what) const;
    std::vector<int64_t> running_run_ids();
    void make_lock_folder() const; // throws StoreError
    std::vector<int64_t> dead_running_runs();
    void mark_dead_runs_interrupted();
    std::string lock_path(int64_t run_id) const;
    void release_claim(int64_t run_id);
    // The runs.status column as readers see it: a read-only store reports dead runs as
    // "interrupted" here instead of writing that down.
    std::string status_sql() const;

    std::string path_;
    OpenMode mode_ = OpenMode::Create;
    bool quick_check_ = true;
    int schema_ = 0; // as found on disk; below kSchemaVersion only when read-only
    bool created_here_ = false; // the file was absent when this open began (removed if the open fails)
    bool immutable_ = false; // read-only, opened as immutable
    bool wal_at_open_ = false; // a WAL was in use then (immutable only where it could not be read)
    std::string file_stamp_; // the file's inode, size and times before an immutable open
    std::vector<int64_t> dead_runs_; // read-only: "running" runs whose process is gone
    sqlite3* db_ = nullptr;
    std::map<int64_t, int> claims_; // run id -> locked file descriptor
    std::mutex db_mutex_; // one connection, shared by the writer thread and readers

    mutable std::mutex queue_mutex_;
    std::condition_variable queue_cv_;
    std::condition_variable flushed_cv_;
    std::vector<PendingRow> queue_;
    uint64_t enqueued_ = 0, committed_ = 0;
    bool flush_requested_ = false;
    bool stopping_ = false;
    std::string last_write_error_; // under queue_mutex_
    int64_t rows_lost_ = 0;        // under queue_mutex_: rows of failed batches, since the store opened
    std::thread writer_;
};

// Feeds one run's telemetry into the store.
class StoreSink : public TelemetrySink {
public:
    StoreSink(RunStore& store, int64_t run_id) : store_(store), run_id_(run_id) {}
    void on_step(const StepMetrics& m) override;
    void on_eval(const EvalMetrics& m) override;
    void on_event(const RunEvent& e) override;
    void on_layer_stats(const LayerStatsFrame& frame) override;

private:
    RunStore& store_;
    int64_t run_id_;
};

// Default store location: $MANTISSA_DB, else $XDG_DATA_HOME/mantissa/runs.sqlite, else
// ~/.local/share/mantissa/runs.sqlite.
std::string default_store_path();

// Where `serve` keeps a store's token unless --token-file says otherwise.
inline std::string default_token_path(const std::string& store_path) { return store_path + ".token"; }

// The files beside a store that no export may write in place of, there or not yet: SQLite's
// next writer takes a file named -wal, -shm or -journal as the store's own (a CSV named
// runs.sqlite-shm was deleted by the next `tag`), and a CSV in the token's place locked every
// window out. Each suffix with what the file is.
struct StoreSideFile {
    const char* suffix;
    const char* what;
};
inline constexpr std::array<StoreSideFile, 4> kStoreSideFiles = {{{"-wal", "the run store's own file"},
                                                                  {"-shm", "the run store's own file"},
                                                                  {"-journal", "the run store's own file"},
                                                                  {".token", "the store server's token file"}}};

} // namespace mantissa
