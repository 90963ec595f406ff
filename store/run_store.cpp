// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_store.h"

#include "durable_file.h"
#include "legacy_events.h"
#include "run_lock_file.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "project_config.h"

namespace mantissa {
namespace {

// 'MANT': marks a database as ours, so a foreign SQLite file is refused, not altered.
constexpr int kApplicationId = 0x4D414E54;
constexpr auto kFlushInterval = std::chrono::milliseconds(250);
constexpr size_t kBatchRows = 4096;
// A batch that finds the write lock held (another process deleting a large run, a second
// writer) waits the busy timeout (5 s) and is tried again, this many times, before its rows
// are given up: a minute of a held lock loses nothing.
constexpr int kBusyTries = 12;

const char* kSchemaV1 = R"sql(
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  project_path TEXT NOT NULL DEFAULT '',
  config_json TEXT NOT NULL,
  status TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')),
  finished_at TEXT
);
CREATE TABLE scalars(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  tag TEXT NOT NULL,
  step INTEGER NOT NULL,
  value REAL,
  PRIMARY KEY(run_id, tag, step)
) WITHOUT ROWID;
CREATE TABLE events(
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  kind TEXT NOT NULL,
  message TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now'))
);
CREATE INDEX events_by_run ON events(run_id, step);
)sql";

// Version 1 -> 2: per-layer tensor statistics.
const char* kMigrateV1toV2 = R"sql(
CREATE TABLE layer_stats(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  layer TEXT NOT NULL,
  role TEXT NOT NULL,
  format TEXT NOT NULL,
  count INTEGER NOT NULL, zeros INTEGER NOT NULL, infs INTEGER NOT NULL, nans INTEGER NOT NULL,
  underflow REAL, subnormal REAL, overflow REAL,
  amax REAL, scale REAL, quant_mse REAL, quant_snr_db REAL, update_ratio REAL,
  first_exponent INTEGER NOT NULL,
  exponent_counts BLOB NOT NULL, -- int64 counts, little-endian, from first_exponent upward
  PRIMARY KEY(run_id, layer, role, step)
) WITHOUT ROWID;
)sql";

// Version 2 -> 3: tags on runs.
const char* kMigrateV2toV3 = R"sql(
CREATE TABLE run_tags(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  tag TEXT NOT NULL,
  PRIMARY KEY(run_id, tag)
) WITHOUT ROWID;
CREATE INDEX run_tags_by_tag ON run_tags(tag, run_id);
)sql";

// Version 3 -> 4:
// - typed events: `fields` holds the event's facts as JSON (run_event.h); `message` keeps the
//   rendered text for people and CSV. Rows of older versions get their fields from
//   legacy_events.cpp during the upgrade.
// - every run gets an identity (written into its checkpoints), and each checkpoint file's
//   checksum is recorded when it is written, to be verified before loading.
const char* kMigrateV3toV4 = R"sql(
ALTER TABLE events ADD COLUMN fields TEXT NOT NULL DEFAULT '{}';
ALTER TABLE runs ADD COLUMN uuid TEXT;
UPDATE runs SET uuid = lower(hex(randomblob(16))) WHERE uuid IS NULL;
-- 1: the run's checkpoints may still be in checkpoints/run-<id> beside the store (the old rule).
ALTER TABLE runs ADD COLUMN legacy_checkpoints INTEGER NOT NULL DEFAULT 0;
UPDATE runs SET legacy_checkpoints = 1;
CREATE TABLE checkpoints(
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  path TEXT NOT NULL,
  checksum TEXT NOT NULL,
  bytes INTEGER NOT NULL,
  PRIMARY KEY(run_id, step)
) WITHOUT ROWID;
)sql";

// Version 4 -> 5: event ids are never used again. With a plain INTEGER PRIMARY KEY, SQLite
// hands out max(id)+1, so after a resume deleted a killed attempt's newest events the next
// events took their ids, and a reader that follows a run by "events after id N" (the remote
// mirror, RunFollower) missed them, the resume event among them. AUTOINCREMENT keeps the
// highest id ever given in sqlite_sequence. SQLite cannot add it to a table: the table is
// copied, ids and all.
const char* kMigrateV4toV5 = R"sql(
CREATE TABLE events_v5(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step INTEGER NOT NULL,
  kind TEXT NOT NULL,
  message TEXT NOT NULL,
  created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
  fields TEXT NOT NULL DEFAULT '{}'
);
INSERT INTO events_v5(id, run_id, step, kind, message, created_at, fields)
  SELECT id, run_id, step, kind, message, created_at, fields FROM events;
DROP TABLE events;
ALTER TABLE events_v5 RENAME TO events;
CREATE INDEX events_by_run ON events(run_id, step);
)sql";

// Not a schema step: an index older versions keep up without knowing it, so a store that has
// it still opens in them. A reader following a run's events ("after id N", the window's
// follower every 200 ms and the store server) found them through events_by_run (run_id, step)
// and sorted every event of the run each time: 38 ms an idle poll at 520,000 events, and a
// first read of such a run took ~32 s (read-only audit 'longrun'). Made at the first open for
// writing; a read-only open of a store without it reads as before.
const char* kEventsByRunIdIndex = "CREATE INDEX IF NOT EXISTS events_by_run_id ON events(run_id, id)";

void fill_legacy_event_fields(sqlite3* db);

// A WAL with frames, or with its index beside it: a writer is busy, or died.
bool wal_in_use(const std::string& path)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    return fs::exists(path + "-wal", ec) && (fs::file_size(path + "-wal", ec) > 0 || fs::exists(path + "-shm", ec));
}

// Changes whenever a writer changes the file: device and inode (replaced), size, and
// modification and status-change times to the nanosecond.
std::string file_stamp(const std::string& path)
{
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return {};
    return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
           std::to_string(st.st_mtim.tv_sec) +
           "." + std::to_string(st.st_mtim.tv_nsec) + ":" + std::to_string(st.st_ctim.tv_sec) + "." +
           std::to_string(st.st_ctim.tv_nsec);
}

// Files that passed PRAGMA quick_check in this process, by device and stamp: the window opened
// the same unchanged store again for every Show in Monitor and every run it started, reading
// the whole file each time (about 2 s a GB). A write to the file (a checkpoint of its WAL, a
// copy over it) changes its stamp, and the next open checks it again; damage that no write
// made (a failing disk under a long-running window) goes unseen until the process restarts.
// Function-local: a store may be opened from another file's static initialiser.
struct CheckedFiles {
    std::mutex mutex;
    std::set<std::string> keys;
    std::atomic<int64_t> checks{0};
};
CheckedFiles& checked_files()
{
    static CheckedFiles files;
    return files;
}

// Any regular "step-*.pt" file (checkpoint_file.h names them; this library does not link
// the engine that reads them).
bool holds_checkpoint_files(const std::string& dir)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.starts_with("step-") && name.ends_with(".pt") && it->is_regular_file(ec)) return true;
    }
    return false;
}

// What a failed SQLite call means to the user: "disk full", else SQLite's words with the OS
// error behind them. Never "not a run store": an I/O problem says nothing about the file.
std::string describe_failure(int code, int system_errno, const std::string& sqlite_words)
{
    const int primary = code & 0xff;
    // SQLite keeps the errno of its last failed system call, also of harmless ones (a probe for
    // a journal that is not there): it only explains an I/O-kind result.
    const bool io = primary == SQLITE_IOERR || primary == SQLITE_FULL || primary == SQLITE_CANTOPEN ||
                    primary == SQLITE_READONLY || primary == SQLITE_PERM;
    if (primary == SQLITE_FULL || (io && (system_errno == ENOSPC || system_errno == EDQUOT)))
        return "disk full (" + (system_errno ? std::string(std::strerror(system_errno)) : sqlite_words) + ")";
    if (io && system_errno != 0) return sqlite_words + " (" + std::strerror(system_errno) + ")";
    if (primary == SQLITE_BUSY)
        return sqlite_words + ": another process held its write lock past every wait (a large delete?); try again";
    return sqlite_words;
}

std::string describe_failure(sqlite3* db)
{
    if (!db) return "out of memory";
    return describe_failure(sqlite3_extended_errcode(db), sqlite3_system_errno(db), sqlite3_errmsg(db));
}

// A failed SQLite call, with its result code kept: the connection's own error state is gone
// once the statements unwind (sqlite3_finalize resets it).
class SqliteFailure : public StoreError {
public:
    explicit SqliteFailure(sqlite3* db)
        : StoreError("SQL error" + in_store(db) + ": " + describe_failure(db)),
          code(db ? sqlite3_extended_errcode(db) : SQLITE_NOMEM),
          detail(describe_failure(db))
    {
    }
    int code;
    std::string detail; // "disk full (...)", "database is locked", ...

private:
    // " in run store 'PATH'": which store, for a message that reaches a user ("disk full" alone
    // does not say which disk).
    static std::string in_store(sqlite3* db)
    {
        const char* file = db ? sqlite3_db_filename(db, "main") : nullptr;
        return file && *file ? " in run store '" + std::string(file) + "'" : std::string();
    }
};

class Statement {
public:
    Statement(sqlite3* db, const char* sql) : db_(db)
    {
        if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) throw SqliteFailure(db);
    }
    ~Statement() { sqlite3_finalize(stmt_); }
    Statement(const Statement&) = delete;
    Statement& operator=(const Statement&) = delete;

    Statement& bind(int i, int64_t v) { check(sqlite3_bind_int64(stmt_, i, v)); return *this; }
    Statement& bind(int i, double v) { check(sqlite3_bind_double(stmt_, i, v)); return *this; }
    Statement& bind_blob(int i, const void* data, size_t bytes)
    {
        check(sqlite3_bind_blob(stmt_, i, bytes ? data : "", static_cast<int>(bytes), SQLITE_TRANSIENT));
        return *this;
    }
    std::vector<int64_t> int64_blob(int col) const
    {
        const auto* p = static_cast<const int64_t*>(sqlite3_column_blob(stmt_, col));
        const auto n = static_cast<size_t>(sqlite3_column_bytes(stmt_, col)) / sizeof(int64_t);
        return p ? std::vector<int64_t>(p, p + n) : std::vector<int64_t>();
    }
    Statement& bind(int i, const std::string& v)
    {
        check(sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
        return *this;
    }
    int64_t vm_steps() const { return sqlite3_stmt_status(stmt_, SQLITE_STMTSTATUS_VM_STEP, 0); }
    bool step() // true while rows come
    {
        const int rc = sqlite3_step(stmt_);
        if (rc == SQLITE_ROW) return true;
        if (rc == SQLITE_DONE) return false;
        throw SqliteFailure(db_);
    }
    void reset() { sqlite3_reset(stmt_); sqlite3_clear_bindings(stmt_); }
    int64_t int64(int col) const { return sqlite3_column_int64(stmt_, col); }
    bool is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
    // SQLite stores NaN as NULL: NULL reads back as NaN.
    double real_or_nan(int col) const { return is_null(col) ? std::nan("") : real(col); }
    double real(int col) const { return sqlite3_column_double(stmt_, col); }
    std::string text(int col) const
    {
        const auto* p = sqlite3_column_text(stmt_, col);
        return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
    }

private:
    void check(int rc)
    {
        if (rc != SQLITE_OK) throw StoreError(std::string("SQL bind error: ") + sqlite3_errmsg(db_));
    }
    sqlite3* db_;
    sqlite3_stmt* stmt_ = nullptr;
};

void exec(sqlite3* db, const char* sql)
{
    if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) throw SqliteFailure(db);
}

// Runs `body` in one write transaction: all of it is committed, or none (a throw rolls back).
// Each BEGIN waits one busy timeout (5 s) for another process's write lock, `tries` times. A
// run's own records (its start, claim, checkpoints, end) take kBusyTries, as the writer thread's
// batches do: a second process deleting a large run made a run fail at its start, or lose the
// record of a checkpoint. The user's edits (rename, tags, delete), often made on the GUI's
// thread, try once: a window frozen for a minute is worse than "database is locked".
template <class Body> void in_write_transaction(sqlite3* db, Body&& body, int tries_allowed = 1)
{
    for (int tries = 1;; ++tries) {
        try {
            exec(db, "BEGIN IMMEDIATE");
            break;
        } catch (const SqliteFailure& e) {
            const int primary = e.code & 0xFF;
            if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || tries >= tries_allowed) throw;
        }
    }
    try {
        body();
        exec(db, "COMMIT");
    } catch (...) {
        sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
        throw;
    }
}

// Deletes the events that `query` (bound; columns id, step, kind, message, fields) finds and
// `drop` picks, read typed: which to keep is a rule on the fields, not on SQL columns.
template <class Drop> void delete_events_if(sqlite3* db, Statement& query, Drop&& drop)
{
    std::vector<int64_t> ids;
    while (query.step())
        if (drop(event_from_stored(query.int64(1), query.text(2), query.text(4), query.text(3))))
            ids.push_back(query.int64(0));
    query.reset(); // done reading before the deletes
    Statement event(db, "DELETE FROM events WHERE id=?");
    for (const int64_t id : ids) {
        event.reset();
        event.bind(1, id).step();
    }
}

int64_t pragma_int(sqlite3* db, const char* sql)
{
    Statement s(db, sql);
    return s.step() ? s.int64(0) : 0;
}

void fill_legacy_event_fields(sqlite3* db)
{
    Statement read(db, "SELECT id, step, kind, message FROM events");
    Statement write(db, "UPDATE events SET fields=? WHERE id=?");
    while (read.step()) {
        write.reset();
        write.bind(1, event_fields_json(legacy_event(read.int64(1), read.text(2), read.text(3)))).bind(2, read.int64(0));
        write.step();
    }
}

// A status as the store keeps it; a name this version does not know (a newer Mantissa's)
// reads as failed rather than as a live run.
RunStatus stored_status(const std::string& name) { return parse_run_status(name).value_or(RunStatus::Failed); }

// One layer_stats row, in the table's column order, on an
// "INSERT OR REPLACE INTO layer_stats VALUES(?, ... 19)" statement. NaN binds as NULL.
void insert_layer_stats(Statement& layer, int64_t run_id, int64_t step, const TensorStats& t)
{
    layer.reset();
    layer.bind(1, run_id).bind(2, step).bind(3, t.layer).bind(4, t.role).bind(5, t.format);
    layer.bind(6, t.count).bind(7, t.zeros).bind(8, t.infs).bind(9, t.nans);
    layer.bind(10, t.underflow).bind(11, t.subnormal).bind(12, t.overflow).bind(13, t.amax);
    layer.bind(14, t.scale).bind(15, t.quant_mse).bind(16, t.quant_snr_db).bind(17, t.update_ratio);
    layer.bind(18, static_cast<int64_t>(t.first_exponent));
    layer.bind_blob(19, t.exponent_counts.data(), t.exponent_counts.size() * sizeof(int64_t));
    layer.step();
}

} // namespace

namespace {

bool is_read_only_failure(int code)
{
    return (code & 0xff) == SQLITE_READONLY || (code & 0xff) == SQLITE_CANTOPEN || (code & 0xff) == SQLITE_PERM;
}

enum class FileState { Absent, Empty, Present };

// What lies at `path` before SQLite looks at it.
// Whether the file begins with SQLite's magic, read through SQLite's own file layer. Closing
// a descriptor of our own would drop every POSIX lock this process holds on the file (another
// RunStore's connection): another process could then take the file as its alone, delete the
// WAL under that connection, and leave it reading, or writing through, a stale index ("How To
// Corrupt An SQLite Database File", 2.2). SQLite's close keeps the descriptor while the process
// holds locks. Opening reads nothing, and a read-only open creates nothing.
bool has_sqlite_header(const std::string& path)
{
    sqlite3* db = nullptr;
    const int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    char header[16] = {};
    sqlite3_file* file = nullptr;
    const bool read = rc == SQLITE_OK &&
                      sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &file) == SQLITE_OK && file &&
                      file->pMethods && file->pMethods->xRead(file, header, sizeof header, 0) == SQLITE_OK;
    sqlite3_close(db);
    return read && std::memcmp(header, "SQLite format 3", sizeof header) == 0;
}

} // namespace

bool RunStore::is_sqlite_file(const std::string& path) { return has_sqlite_header(path); }

namespace {

FileState inspect(const std::string& path)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (st.type() == fs::file_type::not_found) return FileState::Absent;
    if (ec) throw StoreError("run store '" + path + "' cannot be read: " + ec.message());
    if (fs::is_directory(st)) throw StoreError("run store '" + path + "' is a directory, not a file");
    const auto bytes = fs::file_size(path, ec);
    if (ec) throw StoreError("run store '" + path + "' cannot be read: " + ec.message());
    if (bytes == 0) return FileState::Empty;
    // A file that cannot be opened was never read: not "not a SQLite database".
    if (const std::string why = unreadable_reason(path); !why.empty())
        throw StoreError("run store '" + path + "' cannot be read: " + why);
    // SQLite takes a file shorter than its header for an empty database and would write a
    // schema over it: whatever that file is, it is not ours to overwrite.
    if (bytes < 16 || !has_sqlite_header(path))
        throw StoreError("'" + path + "' is not a SQLite database: it is not a Mantissa run store");
    return FileState::Present;
}

void refuse_absent_or_empty(const std::string& path, FileState state)
{
    if (state == FileState::Absent) throw StoreError("run store '" + path + "' does not exist (no runs stored yet)");
    if (state == FileState::Empty) throw StoreError("'" + path + "' is empty: no runs stored yet");
}

// A file: URI for `path`; '%', '?' and '#' would end or escape the path part.
std::string file_uri(const std::string& path, const char* query)
{
    std::string uri = "file:";
    for (const char c : path) {
        if (c == '%' || c == '?' || c == '#') {
            char buf[4];
            std::snprintf(buf, sizeof buf, "%%%02X", static_cast<unsigned char>(c));
            uri += buf;
        } else {
            uri += c;
        }
    }
    return uri + "?" + query;
}

} // namespace

bool RunStore::names_a_folder(const std::string& path)
{
    std::error_code ec;
    return !path.empty() && (path.back() == '/' || std::filesystem::is_directory(path, ec));
}

namespace {

// The file a link names (through every link in a chain), or `path` when it is no link: the
// store's lock and checkpoint folders and its WAL are named from its file, so that a process
// that opens it through a link and one that opens the target agree on them. Named from the
// link, a run training through it read as dead to the other (marked interrupted, trained again
// by a resume, deleted while it trained; read-only audit 'badinput').
// A link to a store not made yet (SQLite makes the file it names) is followed too.
std::string through_links(const std::string& path)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path p(path);
    for (int hops = 0; hops < 40 && fs::is_symlink(p, ec); ++hops) {
        const fs::path target = fs::read_symlink(p, ec);
        if (ec) return path;
        // A relative target is read from the link's folder as the system reads it: a ".." in
        // it leaves that folder's real place, not its name's (lexically, a link in a linked
        // folder opened another, empty store).
        const fs::path folder = fs::weakly_canonical(p.parent_path().empty() ? fs::path(".") : p.parent_path(), ec);
        if (ec) return path;
        p = fs::weakly_canonical(target.is_absolute() ? target : folder / target, ec);
        if (ec) return path;
    }
    return p == fs::path(path) ? path : p.string();
}

} // namespace

RunStore::RunStore(const std::string& path, OpenMode mode, bool quick_check)
    : path_(through_links(path)), mode_(mode), quick_check_(quick_check)
{
    if (is_private_database(path))
        throw StoreArgumentError("run store '" + path + "' is not a file: SQLite would keep it in memory only");
    if (names_a_folder(path))
        throw StoreArgumentError("run store '" + path + "' is a folder: name the store's file in it, e.g. '" + path +
                                 (path.back() == '/' ? "" : "/") + "runs.sqlite'");
    try {
        if (mode == OpenMode::ReadOnly) {
            open_read_only();
            dead_runs_ = dead_running_runs();
            return;
        }
        open_writable();
        mark_dead_runs_interrupted();
    } catch (...) {
        sqlite3_close(db_);
        db_ = nullptr;
        // A store this open was making and could not begin (a full disk) is left as an empty
        // file, which the next read would refuse as "empty": it held nothing, so it goes. Only
        // while it and its WAL are still empty: another process that made the same store
        // meanwhile has written its header, or its WAL.
        if (created_here_) {
            namespace fs = std::filesystem;
            std::error_code ec, wal_ec;
            const auto empty = [](const std::string& f, std::error_code& e) {
                const auto size = fs::file_size(f, e);
                return e ? e == std::errc::no_such_file_or_directory : size == 0;
            };
            if (empty(path_, ec) && !ec && empty(path_ + "-wal", wal_ec))
                for (const char* suffix : {"-journal", "-wal", "-shm", ""}) fs::remove(path_ + suffix, ec);
        }
        throw;
    }
    writer_ = std::thread([this] { writer_loop(); });
}

void RunStore::open_read_only()
{
    namespace fs = std::filesystem;
    refuse_absent_or_empty(path_, inspect(path_));
    // A WAL-mode store that nobody has open and that was closed cleanly is the file alone: its
    // WAL is checkpointed and removed. SQLite's plain read-only mode would still create the
    // -wal and -shm files beside it (and leave them), so such a store is read as immutable,
    // which creates nothing. With a WAL present (a writer is busy, or died), its frames hold
    // committed runs that only a WAL-aware open sees: mode=ro, which uses the existing -shm
    // index (or, for a WAL without one, must create it: reading the runs comes first), and
    // immutable only where that index cannot be created or written (a read-only folder).
    const bool wal = wal_in_use(path_);
    wal_at_open_ = wal;
    file_stamp_ = file_stamp(path_); // before the open: a change in between reads as outdated
    for (const bool immutable : {!wal, true}) {
        immutable_ = immutable;
        const std::string uri = file_uri(path_, immutable ? "mode=ro&immutable=1" : "mode=ro");
        if (sqlite3_open_v2(uri.c_str(), &db_, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_FULLMUTEX,
                            nullptr) != SQLITE_OK) {
            const std::string why = describe_failure(db_);
            sqlite3_close(db_);
            db_ = nullptr;
            throw StoreError("run store '" + path_ + "' cannot be opened: " + why);
        }
        sqlite3_busy_timeout(db_, 5000);
        const int rc = sqlite3_exec(db_, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
        // A full disk that cannot grow the -shm index is no reason to refuse a read where the
        // WAL holds nothing (a writing command that failed there leaves an empty WAL and a
        // 3-byte -shm): immutable reads the file, which is then all there is.
        const int code = sqlite3_extended_errcode(db_);
        std::error_code size_ec;
        const bool nothing_in_wal = fs::file_size(path_ + "-wal", size_ec) == 0 || size_ec;
        const bool full = (code & 0xff) == SQLITE_FULL || (code & 0xff) == SQLITE_IOERR;
        if (rc == SQLITE_OK || immutable || !(is_read_only_failure(code) || (full && nothing_in_wal))) break;
        sqlite3_close(db_);
        db_ = nullptr;
    }
    check_contents(/*may_be_empty=*/false);
    // Stores of schema 1 and 2 are read, not refused: upgrading needs a write this open must
    // not do, and an archive on a read-only share would then be unreadable. Their missing
    // tables (layer_stats, run_tags) read as empty; see the schema_ checks in the readers.
}

void RunStore::open_writable()
{
    namespace fs = std::filesystem;
    const fs::path p(path_);
    const FileState state = inspect(path_);
    if (mode_ == OpenMode::ReadWrite) refuse_absent_or_empty(path_, state);
    created_here_ = state == FileState::Absent;
    if (state == FileState::Absent && p.has_parent_path()) {
        std::error_code ec;
        fs::create_directories(p.parent_path(), ec);
    }
    // Asked before SQLite, which would otherwise open the file read-only without a word. Root
    // ignores permission bits, not a read-only mount (EROFS).
    const auto denied = [](int e) { return e == EACCES || e == EPERM || e == EROFS; };
    if (state != FileState::Absent && ::access(path_.c_str(), W_OK) != 0) {
        const int e = errno;
        if (denied(e)) throw StoreReadOnlyError("run store '" + path_ + "' is read-only (" + std::strerror(e) + ")");
        throw StoreError("run store '" + path_ + "' cannot be opened: " + std::strerror(e));
    }
    const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
    if (::access(dir.c_str(), W_OK) != 0) {
        const int e = errno;
        if (denied(e) && state == FileState::Absent) // no store yet to call read-only
            throw StoreReadOnlyError("run store '" + path_ + "' cannot be created: its folder '" + dir +
                                     "' cannot be written (" + std::strerror(e) + ")");
        if (denied(e))
            throw StoreReadOnlyError("run store '" + path_ + "' is read-only: its folder '" + dir +
                                     "', where SQLite keeps the write-ahead log, cannot be written (" +
                                     std::strerror(e) + ")");
        throw StoreError("run store '" + path_ + "' cannot be created: its folder '" + dir + "': " + std::strerror(e));
    }
    const int flags =
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX | (mode_ == OpenMode::Create ? SQLITE_OPEN_CREATE : 0);
    if (sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr) != SQLITE_OK) {
        const std::string why = describe_failure(db_);
        sqlite3_close(db_);
        db_ = nullptr;
        throw StoreError("run store '" + path_ + "' cannot be opened: " + why);
    }
    if (sqlite3_db_readonly(db_, "main") == 1) throw StoreReadOnlyError("run store '" + path_ + "' is read-only");
    sqlite3_busy_timeout(db_, 5000); // another process (a second CLI run) may hold the write lock
    // Everything before the schema is created only reads, so a refused file stays untouched.
    const bool blank = check_contents(/*may_be_empty=*/mode_ == OpenMode::Create);
    try {
        exec(db_, "PRAGMA journal_mode=WAL");
        exec(db_, "PRAGMA synchronous=NORMAL"); // WAL + NORMAL: durable across process crashes
        // A WAL is reused from its start after a checkpoint but keeps its largest size while any
        // connection is open (the window keeps one): one big transaction (deleting a long run,
        // an upgrade) left 70 MB of it for good. Past this it is cut back when it restarts.
        exec(db_, "PRAGMA journal_size_limit=16777216");
        exec(db_, "PRAGMA foreign_keys=ON");
        const bool lacks_event_index =
            !blank && pragma_int(db_, "SELECT count(*) FROM sqlite_master WHERE name='events_by_run_id'") == 0;
        if (blank || schema_ < kSchemaVersion || lacks_event_index) {
            exec(db_, "BEGIN IMMEDIATE");
            // Re-read inside the write lock: another process may have created or upgraded it.
            int64_t current = pragma_int(db_, "PRAGMA user_version");
            if (pragma_int(db_, "SELECT count(*) FROM sqlite_master") == 0) {
                exec(db_, kSchemaV1);
                exec(db_, ("PRAGMA application_id=" + std::to_string(kApplicationId)).c_str());
                current = 1;
            }
            if (current < 2) exec(db_, kMigrateV1toV2);
            if (current < 3) exec(db_, kMigrateV2toV3);
            if (current < 4) {
                exec(db_, kMigrateV3toV4);
                fill_legacy_event_fields(db_);
            }
            if (current < 5) exec(db_, kMigrateV4toV5);
            exec(db_, kEventsByRunIdIndex);
            exec(db_, ("PRAGMA user_version=" + std::to_string(kSchemaVersion)).c_str());
            exec(db_, "COMMIT");
            schema_ = kSchemaVersion;
        }
    } catch (const SqliteFailure& e) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        if ((e.code & 0xff) == SQLITE_READONLY)
            throw StoreReadOnlyError("run store '" + path_ + "' is read-only (" + e.detail + ")");
        throw StoreError("run store '" + path_ + "' cannot be written: " + e.detail);
    }
}

bool RunStore::check_contents(bool may_be_empty)
{
    int64_t app_id = 0, version = 0, tables = 0, ours = 0;
    try {
        app_id = pragma_int(db_, "PRAGMA application_id");
        version = pragma_int(db_, "PRAGMA user_version");
        tables = pragma_int(db_, "SELECT count(*) FROM sqlite_master");
        ours = pragma_int(db_, "SELECT count(*) FROM sqlite_master WHERE type='table' AND "
                               "name IN ('runs', 'scalars', 'events')");
    } catch (const SqliteFailure& e) {
        // Its first 16 bytes are SQLite's (inspect saw them): the rest of its header page is
        // damaged. "Not a run store" told a user holding the right file that it was the wrong one.
        if ((e.code & 0xff) == SQLITE_NOTADB)
            throw StoreError("run store '" + path_ + "' is damaged: it starts as a SQLite database, but its header "
                             "page does not read (" + e.detail + ")");
        if ((e.code & 0xff) == SQLITE_CORRUPT)
            throw StoreError("run store '" + path_ + "' is damaged (" + e.detail + ")");
        throw StoreError("run store '" + path_ + "' cannot be read: " + e.detail);
    }
    if (app_id != kApplicationId && (tables > 0 || app_id != 0))
        throw StoreError("'" + path_ + "' is a SQLite database of another program, not a Mantissa run store");
    if (version > kSchemaVersion)
        throw StoreError("'" + path_ + "' has schema version " + std::to_string(version) +
                         ": it was written by a newer Mantissa (this one understands up to " +
                         std::to_string(kSchemaVersion) + ")");
    if (tables == 0) {
        if (!may_be_empty)
            throw StoreError("'" + path_ + "' is a SQLite database that has no Mantissa tables: no runs stored yet");
        schema_ = 0;
        return true;
    }
    if (ours != 3)
        throw StoreError("'" + path_ + "' is marked as a Mantissa run store but has no Mantissa tables (runs, scalars, "
                         "events): it is damaged");
    // A damaged file is reported, not written to.
    if (quick_check_) {
        CheckedFiles& files = checked_files();
        const std::string key = file_stamp(path_);
        bool checked = false;
        {
            std::lock_guard lock(files.mutex);
            checked = !key.empty() && files.keys.count(key) > 0;
        }
        if (!checked) {
            ++files.checks;
            Statement check(db_, "PRAGMA quick_check");
            const std::string verdict = check.step() ? check.text(0) : "no answer";
            if (verdict != "ok")
                throw StoreError("run store '" + path_ + "' is damaged (quick_check: " + verdict + ")");
            std::lock_guard lock(files.mutex);
            if (files.keys.size() >= 256) files.keys.clear(); // a bound; the next opens check again
            if (!key.empty()) files.keys.insert(key);
        }
    }
    schema_ = static_cast<int>(std::max<int64_t>(version, 1));
    return false;
}

int64_t RunStore::quick_checks_run() { return checked_files().checks.load(); }

bool RunStore::snapshot_outdated() const
{
    // Opened immutable beside a WAL (a read-only folder where the WAL's index cannot be made):
    // the WAL was there all along, and only a change of the file itself tells.
    return immutable_ && ((!wal_at_open_ && wal_in_use(path_)) || file_stamp(path_) != file_stamp_);
}

void RunStore::require_writable(const char* what) const
{
    if (mode_ == OpenMode::ReadOnly)
        throw StoreReadOnlyError("run store '" + path_ + "' is read-only (opened for reading): cannot " + what);
}

void RunStore::refresh_dead_runs()
{
    if (mode_ == OpenMode::ReadOnly) dead_runs_ = dead_running_runs();
    else mark_dead_runs_interrupted();
}

std::string RunStore::status_sql() const
{
    if (dead_runs_.empty()) return "r.status";
    std::string ids;
    for (const int64_t id : dead_runs_) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    return "(CASE WHEN r.status = 'running' AND r.id IN (" + ids + ") THEN 'interrupted' ELSE r.status END)";
}

std::string RunStore::checkpoint_dir(int64_t run_id) const
{
    return std::filesystem::absolute(path_ + ".checkpoints").lexically_normal().string() + "/run-" +
           std::to_string(run_id);
}

std::string RunStore::legacy_checkpoint_dir(int64_t run_id) const
{
    const auto base = std::filesystem::absolute(path_).parent_path();
    return (base / "checkpoints" / ("run-" + std::to_string(run_id))).string();
}

void RunStore::record_checkpoint(const CheckpointRow& row)
{
    require_writable("record a checkpoint");
    std::lock_guard lock(db_mutex_);
    in_write_transaction(db_, [&] {
        Statement s(db_,
                    "INSERT OR REPLACE INTO checkpoints(run_id, step, path, checksum, bytes) VALUES(?, ?, ?, ?, ?)");
        s.bind(1, row.run_id).bind(2, row.step).bind(3, row.path).bind(4, row.checksum).bind(5, row.bytes).step();
    }, kBusyTries);
}

std::vector<CheckpointRow> RunStore::checkpoints(int64_t run_id)
{
    if (schema_ < 4) return {}; // a read-only store older than v4: no checksums were recorded
    std::lock_guard lock(db_mutex_);
    Statement s(db_, "SELECT run_id, step, path, checksum, bytes FROM checkpoints WHERE run_id=? ORDER BY step");
    s.bind(1, run_id);
    std::vector<CheckpointRow> rows;
    while (s.step()) rows.push_back({s.int64(0), s.int64(1), s.text(2), s.text(3), s.int64(4)});
    return rows;
}

std::string RunStore::lock_path(int64_t run_id) const { return path_ + ".locks/run-" + std::to_string(run_id) + ".lock"; }

void RunStore::claim_run(int64_t run_id)
{
    require_writable("claim a run");
    make_lock_folder();
    const RunLockFile lock = lock_run_file(lock_path(run_id), RunLockKind::Exclusive, /*create=*/true);
    if (lock.state != RunLockFile::State::Locked)
        throw StoreError(lock.state == RunLockFile::State::Held
                             ? "run " + std::to_string(run_id) + " is in use by another process"
                             : "run store '" + path_ + "': cannot open the lock file '" + lock_path(run_id) +
                                   "': " + std::strerror(lock.error));
    claims_[run_id] = lock.fd;
    bool gone = false;
    try {
        std::lock_guard guard(db_mutex_);
        in_write_transaction(db_, [&] {
            Statement s(db_, "UPDATE runs SET status='running', finished_at=NULL WHERE id=?");
            s.bind(1, run_id).step();
            gone = sqlite3_changes(db_) != 1;
        }, kBusyTries);
    } catch (...) {
        release_claim(run_id); // not claimed: nothing of it was written
        throw;
    }
    // Deleted since it was read (a delete between a resume's load and its claim): training it
    // would record nothing (every row fails its foreign key) and end "successfully".
    if (gone) {
        release_claim(run_id);
        throw StoreError("run store '" + path_ + "': run " + std::to_string(run_id) + " is no longer in the store");
    }
}

void RunStore::make_lock_folder() const
{
    std::error_code ec;
    std::filesystem::create_directories(path_ + ".locks", ec);
    if (ec) // an exception of the filesystem's own would reach no handler of the store's users
        throw StoreError("run store '" + path_ + "': cannot make the folder of its lock files '" + path_ +
                         ".locks': " + ec.message());
}

void RunStore::release_claim(int64_t run_id)
{
    const auto it = claims_.find(run_id);
    if (it == claims_.end()) return;
    release_run_file(lock_path(run_id), it->second);
    claims_.erase(it);
}

std::vector<int64_t> RunStore::running_run_ids()
{
    std::vector<int64_t> running;
    std::lock_guard lock(db_mutex_);
    Statement s(db_, "SELECT id FROM runs WHERE status='running'");
    while (s.step()) running.push_back(s.int64(0));
    return running;
}

std::vector<int64_t> RunStore::dead_running_runs()
{
    // A "running" run whose lock nobody holds lost its process (SIGKILL, crash, reboot): the
    // kernel released the flock when it died. A shared lock is enough to ask, and needs no
    // write access to the lock file.
    std::vector<int64_t> dead;
    for (const int64_t id : running_run_ids()) {
        const RunLockFile lock = lock_run_file(lock_path(id), RunLockKind::Shared, /*create=*/false);
        if (lock.fd >= 0) ::close(lock.fd);
        if (lock.state != RunLockFile::State::Held) dead.push_back(id);
    }
    return dead;
}

void RunStore::mark_dead_runs_interrupted()
{
    // Runs whose lock is held are alive: asked first without the write lock, so that opening a
    // store while another process writes (a large delete) waits only where a run looks dead.
    for (const int64_t id : dead_running_runs()) {
        // Asked again and marked inside one write transaction: a process that claims the run
        // meanwhile locks first and writes "running" after, so its write lands after this one.
        RunLockFile lock;
        try {
            std::lock_guard guard(db_mutex_);
            in_write_transaction(db_, [&] {
                lock = lock_run_file(lock_path(id), RunLockKind::Shared, /*create=*/false);
                if (lock.state == RunLockFile::State::Held) return;
                Statement s(db_, "UPDATE runs SET status='interrupted' WHERE id=? AND status='running'");
                s.bind(1, id).step();
            });
        } catch (...) {
            if (lock.fd >= 0) ::close(lock.fd); // a kept shared lock would refuse every resume of the run
            throw;
        }
        // Unlinked while still locked, so that no claimer can keep a lock on the unlinked file.
        if (lock.state == RunLockFile::State::Locked) release_run_file(lock_path(id), lock.fd);
    }
}

void RunStore::rename_run(int64_t run_id, const std::string& name)
{
    require_writable("rename a run");
    std::lock_guard lock(db_mutex_);
    Statement s(db_, "UPDATE runs SET name=? WHERE id=?");
    s.bind(1, name).bind(2, run_id).step();
}

void RunStore::set_run_config(int64_t run_id, const std::string& config_json)
{
    require_writable("change a run's settings");
    std::lock_guard lock(db_mutex_);
    in_write_transaction(db_, [&] {
        Statement s(db_, "UPDATE runs SET config_json=? WHERE id=?");
        s.bind(1, config_json).bind(2, run_id).step();
    }, kBusyTries);
}

void RunStore::delete_run(int64_t run_id)
{
    require_writable("delete a run");
    flush();
    // A run another process is training holds its lock file: its rows would come back
    // without their run (or fail their foreign key), so it is not deleted under it. A store
    // opened before that process started still shows the run as it was then. Asked inside the
    // write transaction of the delete: a claim locks first and writes after.
    const bool own = claims_.count(run_id) > 0;
    RunLockFile lock;
    try {
        std::lock_guard guard(db_mutex_);
        in_write_transaction(db_, [&] {
            if (!own) {
                lock = lock_run_file(lock_path(run_id), RunLockKind::Shared, /*create=*/false);
                if (lock.state == RunLockFile::State::Held)
                    throw StoreError("run " + std::to_string(run_id) + " is in use by another process: stop it first");
            }
            Statement s(db_, "DELETE FROM runs WHERE id=?"); // scalars, events, layer_stats cascade
            s.bind(1, run_id).step();
        });
    } catch (...) {
        if (lock.fd >= 0) ::close(lock.fd); // a kept shared lock would refuse every resume of the run
        throw;
    }
    if (lock.state == RunLockFile::State::Locked) release_run_file(lock_path(run_id), lock.fd);
    release_claim(run_id);
}

void RunStore::clear_run_records(int64_t run_id)
{
    require_writable("clear a run's records");
    flush();
    std::lock_guard lock(db_mutex_);
    in_write_transaction(db_, [&] {
        for (const char* sql : {"DELETE FROM scalars WHERE run_id=?", "DELETE FROM events WHERE run_id=?",
                                "DELETE FROM layer_stats WHERE run_id=?", "DELETE FROM checkpoints WHERE run_id=?"}) {
            Statement s(db_, sql);
            s.bind(1, run_id).step();
        }
    }, kBusyTries);
}

void RunStore::start_run_over(int64_t run_id)
{
    require_writable("start a run over");
    flush();
    std::lock_guard lock(db_mutex_);
    in_write_transaction(db_, [&] {
        Statement q(db_, "SELECT id, step, kind, message, fields FROM events WHERE run_id=?");
        q.bind(1, run_id);
        // A change whose fields cannot be read counts as the user's (the default): kept.
        delete_events_if(db_, q, [](const RunEvent& e) {
            return e.kind != EventKind::PrecisionChanged || e.cause != ChangeCause::User;
        });
        for (const char* sql : {"DELETE FROM scalars WHERE run_id=?", "DELETE FROM layer_stats WHERE run_id=?",
                                "DELETE FROM checkpoints WHERE run_id=?"}) {
            Statement s(db_, sql);
            s.bind(1, run_id).step();
        }
    }, kBusyTries);
}

void RunStore::discard_steps_after(int64_t run_id, int64_t step, bool live_changes_superseded)
{
    require_writable("discard a resumed run's later steps");
    flush();
    std::lock_guard lock(db_mutex_);
    in_write_transaction(
        db_, [&] { delete_steps_after(run_id, step, INT64_MAX, live_changes_superseded); }, kBusyTries);
}

void RunStore::delete_steps_after(int64_t run_id, int64_t step, int64_t before_event, bool live_changes_superseded)
{
    Statement q(db_, "SELECT id, step, kind, message, fields FROM events WHERE run_id=? AND step>=? AND id<?");
    q.bind(1, run_id).bind(2, step).bind(3, before_event);
    delete_events_if(db_, q, [step, live_changes_superseded](const RunEvent& e) {
        // An earlier resume's replay of a change made at the checkpoint's own boundary is
        // made again too (replays start at the checkpoint's step).
        const bool replayed = e.kind == EventKind::PrecisionChanged && e.cause == ChangeCause::Resume;
        const bool superseded = live_changes_superseded && e.kind == EventKind::PrecisionChanged;
        return (e.step > step && retraining_reproduces(e)) || replayed || superseded;
    });
    for (const char* sql : {"DELETE FROM scalars WHERE run_id=? AND step>?", "DELETE FROM layer_stats WHERE run_id=? AND step>?"}) {
        Statement s(db_, sql);
        s.bind(1, run_id).bind(2, step).step();
    }
}

RunStore::~RunStore()
{
    {
        std::lock_guard lock(queue_mutex_);
        stopping_ = true;
    }
    queue_cv_.notify_all();
    if (writer_.joinable()) writer_.join();
    while (!claims_.empty()) release_claim(claims_.begin()->first);
    sqlite3_close(db_);
}

int64_t RunStore::rows_lost() const
{
    std::lock_guard lock(queue_mutex_);
    return rows_lost_;
}

std::string RunStore::last_write_error() const
{
    std::lock_guard lock(queue_mutex_);
    return last_write_error_;
}

int RunStore::schema_version()
{
    std::lock_guard lock(db_mutex_);
    return static_cast<int>(pragma_int(db_, "PRAGMA user_version"));
}

int64_t RunStore::create_run(const std::string& name, const std::string& project_path, const std::string& config_json)
{
    require_writable("create a run");
    make_lock_folder();
    int64_t id = 0;
    RunLockFile lock;
    try {
        std::lock_guard guard(db_mutex_);
        // SQLite hands a deleted newest run's id out again. A run under that id would find the
        // deleted run's checkpoints left in "run-<id>" (a file it could not remove, a copy put
        // there by hand) and could then write no checkpoint of its own under their names: ids
        // whose folder still holds checkpoint files are skipped. The write lock keeps two
        // processes off one id. The run's lock is taken before its row exists: a "running" row
        // whose lock nobody holds is a dead run's to any other process that opens the store.
        in_write_transaction(db_, [&] {
            id = pragma_int(db_, "SELECT coalesce(max(id), 0) + 1 FROM runs");
            for (;; ++id) {
                if (holds_checkpoint_files(checkpoint_dir(id))) continue;
                lock = lock_run_file(lock_path(id), RunLockKind::Exclusive, /*create=*/true);
                if (lock.state == RunLockFile::State::Locked) break;
                if (lock.state != RunLockFile::State::Held) // Held: a claim of a run deleted meanwhile
                    throw StoreError("run store '" + path_ + "': cannot open the lock file '" + lock_path(id) +
                                     "': " + std::strerror(lock.error));
            }
            Statement s(db_, "INSERT INTO runs(id, name, project_path, config_json, status, uuid) "
                             "VALUES(?, ?, ?, ?, 'running', lower(hex(randomblob(16))))");
            s.bind(1, id).bind(2, name).bind(3, project_path).bind(4, config_json).step();
        }, kBusyTries);
    } catch (...) {
        if (lock.state == RunLockFile::State::Locked) release_run_file(lock_path(id), lock.fd);
        throw;
    }
    claims_[id] = lock.fd;
    return id;
}

void RunStore::finish_run(int64_t run_id, RunStatus status)
{
    require_writable("finish a run");
    flush();
    std::string failure;
    {
        std::lock_guard lock(db_mutex_);
        try {
            in_write_transaction(db_, [&] {
                Statement s(db_,
                            "UPDATE runs SET status=?, finished_at=strftime('%Y-%m-%dT%H:%M:%SZ','now') WHERE id=?");
                s.bind(1, std::string(run_status_name(status))).bind(2, run_id).step();
                if (sqlite3_changes(db_) != 1)
                    failure = "the run is no longer in the store (deleted while it trained?)";
            }, kBusyTries);
        } catch (const SqliteFailure& e) {
            failure = e.detail;
        }
    }
    // Released either way: a later open then sees the run as interrupted, the truth when its
    // status could not be written.
    release_claim(run_id);
    if (!failure.empty())
        throw StoreError("run store '" + path_ + "': cannot record run " + std::to_string(run_id) + " as " +
                         std::string(run_status_name(status)) +
                         ": " + failure);
}

void RunStore::append_scalar(int64_t run_id, int64_t step, const std::string& tag, double value)
{
    require_writable("record metrics");
    std::lock_guard lock(queue_mutex_);
    queue_.push_back({PendingRow::Kind::Scalar, run_id, step, tag, {}, value, {}});
    ++enqueued_;
    if (queue_.size() >= kBatchRows) queue_cv_.notify_one();
}

void RunStore::append_event(int64_t run_id, const RunEvent& event)
{
    require_writable("record events");
    // Rendered and serialised here, on the caller's thread: the writer only binds strings.
    PendingRow row{PendingRow::Kind::Event, run_id, event.step, event.tag(), event.message(), 0.0, {}};
    row.fields = event_fields_json(event);
    std::lock_guard lock(queue_mutex_);
    queue_.push_back(std::move(row));
    ++enqueued_;
}

void RunStore::append_layer_stats(int64_t run_id, int64_t step, const TensorStats& stats)
{
    require_writable("record layer statistics");
    std::lock_guard lock(queue_mutex_);
    queue_.push_back({PendingRow::Kind::LayerStats, run_id, step, {}, {}, 0.0, stats});
    ++enqueued_;
}

void RunStore::append_step_rows(int64_t run_id, int64_t step,
                                const std::vector<std::pair<std::string, double>>& scalars,
                                const std::vector<TensorStats>& stats)
{
    require_writable("record metrics");
    std::vector<PendingRow> rows;
    rows.reserve(stats.size() + scalars.size());
    for (const auto& t : stats) rows.push_back({PendingRow::Kind::LayerStats, run_id, step, {}, {}, 0.0, t});
    for (const auto& [tag, value] : scalars)
        rows.push_back({PendingRow::Kind::Scalar, run_id, step, tag, {}, value, {}});
    std::lock_guard lock(queue_mutex_);
    queue_.insert(queue_.end(), std::make_move_iterator(rows.begin()), std::make_move_iterator(rows.end()));
    enqueued_ += rows.size();
    if (queue_.size() >= kBatchRows) queue_cv_.notify_one();
}

void RunStore::flush()
{
    if (mode_ == OpenMode::ReadOnly) return; // nothing is ever queued, and no writer thread runs
    std::unique_lock lock(queue_mutex_);
    const uint64_t target = enqueued_;
    flush_requested_ = true;
    queue_cv_.notify_one();
    flushed_cv_.wait(lock, [&] { return committed_ >= target; });
}

void RunStore::writer_loop()
{
    std::unique_lock lock(queue_mutex_);
    int busy_tries = 0;
    while (true) {
        queue_cv_.wait_for(lock, kFlushInterval,
                           [&] { return stopping_ || flush_requested_ || queue_.size() >= kBatchRows; });
        std::vector<PendingRow> rows;
        rows.swap(queue_);
        flush_requested_ = false;
        const bool stop = stopping_;
        const uint64_t batch_end = enqueued_;
        lock.unlock();
        const bool written = rows.empty() || write_batch(rows, busy_tries >= kBusyTries - 1);
        lock.lock();
        if (!written) {
            // Back in front of what came meanwhile, in order; flush() keeps waiting for them.
            ++busy_tries;
            queue_.insert(queue_.begin(), std::make_move_iterator(rows.begin()), std::make_move_iterator(rows.end()));
            continue;
        }
        busy_tries = 0;
        committed_ = batch_end;
        flushed_cv_.notify_all();
        if (stop && queue_.empty()) return;
    }
}

bool RunStore::write_batch(std::vector<PendingRow>& rows, bool last_try)
{
    std::lock_guard lock(db_mutex_);
    try {
        exec(db_, "BEGIN IMMEDIATE");
        Statement scalar(db_, "INSERT OR REPLACE INTO scalars(run_id, tag, step, value) VALUES(?, ?, ?, ?)");
        Statement event(db_, "INSERT INTO events(run_id, step, kind, message, fields) VALUES(?, ?, ?, ?, ?)");
        Statement layer(db_, "INSERT OR REPLACE INTO layer_stats VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
        for (const auto& r : rows) {
            switch (r.kind) {
            case PendingRow::Kind::Scalar:
                scalar.reset();
                scalar.bind(1, r.run_id).bind(2, r.tag_or_kind).bind(3, r.step).bind(4, r.value).step();
                break;
            case PendingRow::Kind::Event:
                event.reset();
                event.bind(1, r.run_id).bind(2, r.step).bind(3, r.tag_or_kind).bind(4, r.message).bind(5, r.fields);
                event.step();
                break;
            case PendingRow::Kind::LayerStats:
                insert_layer_stats(layer, r.run_id, r.step, r.stats);
                break;
            }
        }
        exec(db_, "COMMIT");
    } catch (const SqliteFailure& e) {
        const int primary = e.code & 0xFF;
        if ((primary == SQLITE_BUSY || primary == SQLITE_LOCKED) && !last_try) {
            sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
            return false;
        }
        record_write_failure(rows.size(), e.detail);
    } catch (const std::exception& e) {
        record_write_failure(rows.size(), e.what());
    }
    return true;
}

void RunStore::record_write_failure(size_t rows, const std::string& why)
{
    // A failed batch (disk full, a lock held too long) must not take the training run down
    // with it: its rows are lost, the error is kept for last_write_error() and printed.
    const std::string message = "run store '" + path_ + "': could not write " + std::to_string(rows) + " rows: " + why;
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    std::fprintf(stderr, "mantissa: %s\n", message.c_str());
    std::lock_guard queue_lock(queue_mutex_);
    last_write_error_ = message;
    rows_lost_ += static_cast<int64_t>(rows);
}

std::vector<RunInfo> RunStore::list_runs() { return read_runs(std::nullopt); }

std::optional<RunInfo> RunStore::run_info(int64_t id)
{
    auto runs = read_runs(id);
    if (runs.empty()) return std::nullopt;
    return std::move(runs.front());
}

std::vector<RunInfo> RunStore::read_runs(std::optional<int64_t> only)
{
    flush();
    std::lock_guard lock(db_mutex_);
    // A read-only store older than v4 has no identities: its runs read with an empty uuid and
    // their checkpoints where the old rule put them.
    const std::string identity = schema_ >= 4 ? "coalesce(r.uuid, ''), r.legacy_checkpoints" : "'', 1";
    const std::string sql = "SELECT r.id, r.name, r.project_path, r.config_json, " + status_sql() +
                            ", r.created_at, coalesce(r.finished_at, ''), "
                            // Every trained step has a train/loss row; max over that one tag is a
                            // primary-key seek, where max over all tags scanned every metric row.
                            "(SELECT coalesce(max(step), 0) FROM scalars WHERE run_id = r.id AND tag = 'train/loss'), " +
                            identity + " FROM runs r" + (only ? " WHERE r.id = ?" : "") + " ORDER BY r.id";
    Statement s(db_, sql.c_str());
    if (only) s.bind(1, *only);
    std::vector<RunInfo> runs;
    while (s.step())
        runs.push_back({s.int64(0), s.text(1), s.text(2), s.text(3), stored_status(s.text(4)), s.text(5), s.text(6),
                        s.int64(7), s.text(8), s.int64(9) != 0});
    return runs;
}

std::optional<RunInfo> RunStore::find_run(const std::string& id_or_name)
{
    // Digits only, and few enough to be an id: a longer number is no run's id (stoll would
    // throw out_of_range), and a name in UTF-8 must not reach isdigit as a negative char.
    const bool numeric = !id_or_name.empty() && id_or_name.size() <= 18 &&
                         std::all_of(id_or_name.begin(), id_or_name.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (numeric)
        if (auto run = run_info(std::stoll(id_or_name))) return run;
    const auto runs = list_runs();
    for (auto it = runs.rbegin(); it != runs.rend(); ++it)
        if (it->name == id_or_name) return *it;
    return std::nullopt;
}

void RunStore::for_each_scalar(int64_t run_id, const std::function<void(const ScalarRow&)>& visit)
{
    flush();
    std::lock_guard lock(db_mutex_);
    Statement s(db_, "SELECT step, tag, value FROM scalars WHERE run_id=? ORDER BY step, tag");
    s.bind(1, run_id);
    ScalarRow row;
    while (s.step()) {
        row.step = s.int64(0);
        row.tag = s.text(1);
        row.value = s.real_or_nan(2); // NULL: a NaN stored
        visit(row);
    }
}

std::vector<ScalarRow> RunStore::scalars(int64_t run_id)
{
    std::vector<ScalarRow> rows;
    for_each_scalar(run_id, [&rows](const ScalarRow& row) { rows.push_back(row); });
    return rows;
}

std::vector<std::string> RunStore::scalar_tags(int64_t run_id)
{
    flush();
    std::lock_guard lock(db_mutex_);
    // A skip scan over the (run_id, tag, step) key: DISTINCT would read every row of the run.
    Statement s(db_, "SELECT tag FROM scalars WHERE run_id=? AND tag>? ORDER BY tag LIMIT 1");
    std::vector<std::string> tags;
    std::string last;
    for (;;) {
        s.reset();
        s.bind(1, run_id).bind(2, last);
        if (!s.step()) break;
        last = s.text(0);
        tags.push_back(last);
    }
    return tags;
}

void RunStore::for_each_event(int64_t run_id, const std::function<void(const EventRow&)>& visit)
{
    flush();
    std::lock_guard lock(db_mutex_);
    // A read-only store older than v4 has no fields column: its events' facts come from their
    // text, as the upgrade would take them.
    const bool typed = schema_ >= 4;
    Statement s(db_, typed ? "SELECT step, kind, message, created_at, fields FROM events WHERE run_id=? ORDER BY id"
                           : "SELECT step, kind, message, created_at FROM events WHERE run_id=? ORDER BY id");
    s.bind(1, run_id);
    while (s.step())
        visit({s.int64(0), s.text(1), s.text(2), s.text(3),
               typed ? event_from_stored(s.int64(0), s.text(1), s.text(4), s.text(2))
                     : legacy_event(s.int64(0), s.text(1), s.text(2))});
}

std::vector<EventRow> RunStore::events(int64_t run_id)
{
    std::vector<EventRow> rows;
    for_each_event(run_id, [&rows](const EventRow& row) { rows.push_back(row); });
    return rows;
}

namespace {

// The layer_stats columns after run_id and step, as select_layer_stats() lists them.
TensorStats read_tensor_stats(const Statement& s, int c)
{
    TensorStats t;
    t.layer = s.text(c);
    t.role = s.text(c + 1);
    t.format = s.text(c + 2);
    t.count = s.int64(c + 3);
    t.zeros = s.int64(c + 4);
    t.infs = s.int64(c + 5);
    t.nans = s.int64(c + 6);
    t.underflow = s.real_or_nan(c + 7);
    t.subnormal = s.real_or_nan(c + 8);
    t.overflow = s.real_or_nan(c + 9);
    t.amax = s.real_or_nan(c + 10);
    t.scale = s.real_or_nan(c + 11);
    t.quant_mse = s.real_or_nan(c + 12);
    t.quant_snr_db = s.real_or_nan(c + 13);
    t.update_ratio = s.real_or_nan(c + 14);
    t.first_exponent = static_cast<int>(s.int64(c + 15));
    t.exponent_counts = s.int64_blob(c + 16);
    return t;
}

// Before exponent_counts: a read without histograms selects NULL in its place.
constexpr const char* kLayerStatsScalarColumns = "layer, role, format, count, zeros, infs, nans, underflow, "
                                                 "subnormal, overflow, amax, scale, quant_mse, quant_snr_db, "
                                                 "update_ratio, first_exponent";
// "SELECT step, <every column after run_id and step> FROM layer_stats", the histogram selected as
// NULL (read back empty) unless asked for. A function: a store may be read from another file's
// static initialiser, before a namespace-scope string would be made.
std::string select_layer_stats(bool with_histograms)
{
    return std::string("SELECT step, ") + kLayerStatsScalarColumns +
           (with_histograms ? ", exponent_counts" : ", NULL") + " FROM layer_stats";
}

} // namespace

std::vector<std::pair<int64_t, TensorStats>> RunStore::layer_stats(int64_t run_id, const std::string& layer)
{
    flush();
    if (schema_ < 2) return {}; // a read-only schema-1 store: no layer_stats table yet
    std::lock_guard lock(db_mutex_);
    const std::string sql =
        select_layer_stats(true) + " WHERE run_id=? AND (?='' OR layer=?) ORDER BY step, layer, role";
    Statement s(db_, sql.c_str());
    s.bind(1, run_id).bind(2, layer).bind(3, layer);
    std::vector<std::pair<int64_t, TensorStats>> rows;
    while (s.step()) rows.emplace_back(s.int64(0), read_tensor_stats(s, 1)); // NULL: a NaN stored
    return rows;
}

void RunStore::for_each_layer_stats(int64_t run_id, bool with_histograms,
                                    const std::function<void(int64_t step, const TensorStats&)>& visit)
{
    flush();
    if (schema_ < 2) return;
    std::lock_guard lock(db_mutex_);
    const std::string sql = select_layer_stats(with_histograms) + " WHERE run_id=? ORDER BY step, layer, role";
    Statement s(db_, sql.c_str());
    s.bind(1, run_id);
    while (s.step()) visit(s.int64(0), read_tensor_stats(s, 1));
}

std::vector<std::pair<int64_t, TensorStats>> RunStore::layer_stats_without_histograms(int64_t run_id,
                                                                                      const std::string& role)
{
    flush();
    if (schema_ < 2) return {};
    std::lock_guard lock(db_mutex_);
    const std::string sql = select_layer_stats(false) + " WHERE run_id=? AND role=? ORDER BY step, layer, role";
    Statement s(db_, sql.c_str());
    s.bind(1, run_id).bind(2, role);
    std::vector<std::pair<int64_t, TensorStats>> rows;
    while (s.step()) rows.emplace_back(s.int64(0), read_tensor_stats(s, 1));
    return rows;
}

Series RunStore::series(int64_t run_id, const std::string& tag)
{
    flush();
    std::lock_guard lock(db_mutex_);
    Statement s(db_, "SELECT step, value FROM scalars WHERE run_id=? AND tag=? ORDER BY step");
    s.bind(1, run_id).bind(2, tag);
    Series out;
    while (s.step()) out.emplace_back(s.int64(0), s.real_or_nan(1));
    return out;
}

std::optional<ScalarRow> RunStore::last_scalar(int64_t run_id, const std::string& tag)
{
    flush();
    std::lock_guard lock(db_mutex_);
    Statement s(db_, "SELECT step, value FROM scalars WHERE run_id=? AND tag=? ORDER BY step DESC LIMIT 1");
    s.bind(1, run_id).bind(2, tag);
    if (!s.step()) return std::nullopt;
    return ScalarRow{s.int64(0), tag, s.real_or_nan(1)};
}

namespace {

// The recipe fields of a run's config; left empty when the stored config cannot be read.
void read_recipe(const std::string& config_json, RunSummaryRow& row)
{
    ProjectConfig config;
    try {
        config = load_run_config(config_json);
    } catch (const ConfigError&) {
        return;
    }
    const PrecisionConfig& p = config.precision;
    row.preset = p.preset;
    // The recipes the FP8 layers take (a precision.layers entry may give its own), else the
    // project's: a bf16 run whose MLPs run nvfp4 is found under nvfp4, not under delayed.
    const auto scalings = fp8_layer_scalings(p, config.model.n_layer);
    row.fp8_scaling = scalings.empty() ? fp8_scaling_name(p.fp8.scaling) : fp8_scaling_names_joined(scalings);
    row.layer_overrides = static_cast<int64_t>(p.layers.size());
    row.keep_last_bf16 = p.keep_last_bf16;
    row.recipe = describe_recipe(row.preset, row.fp8_scaling, row.layer_overrides, overrides_use_fp8(p),
                                 p.keep_last_bf16);
}

std::string trimmed_tag(const std::string& tag)
{
    const auto b = tag.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) throw StoreArgumentError("a tag cannot be empty");
    return tag.substr(b, tag.find_last_not_of(" \t\r\n") - b + 1);
}

} // namespace

namespace {

double sorted_median(const std::vector<double>& v)
{
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

} // namespace

std::vector<RunSummaryRow> RunStore::list_run_summaries(const RunFilter& filter, TokensMedianCache* cache)
{
    flush();
    // The filter becomes one WHERE clause on runs r, bound the same way for both queries.
    std::string where = " WHERE 1";
    std::vector<std::string> texts; // bound after the ids
    if (!filter.ids.empty()) {
        where += " AND r.id IN (";
        for (size_t i = 0; i < filter.ids.size(); ++i) where += i ? ",?" : "?";
        where += ")";
    }
    if (!filter.name_contains.empty()) {
        where += " AND instr(r.name, ?) > 0";
        texts.push_back(filter.name_contains);
    }
    if (filter.status) {
        where += " AND " + status_sql() + " = ?";
        texts.push_back(std::string(run_status_name(*filter.status)));
    }
    std::set<std::string> wanted_tags(filter.tags.begin(), filter.tags.end());
    if (!wanted_tags.empty() && schema_ < 3) return {}; // no run_tags table yet: no run carries a tag
    if (!wanted_tags.empty()) {
        where += " AND (SELECT count(*) FROM run_tags t WHERE t.run_id = r.id AND t.tag IN (";
        size_t i = 0;
        for (const auto& t : wanted_tags) {
            where += i++ ? ",?" : "?";
            texts.push_back(t);
        }
        where += ")) = " + std::to_string(wanted_tags.size());
    }
    const auto bind_filter = [&](Statement& s) {
        int i = 1;
        for (const int64_t id : filter.ids) s.bind(i++, id);
        for (const auto& t : texts) s.bind(i++, t);
    };

    std::lock_guard lock(db_mutex_);
    // Every subquery is a lookup or a short range on the scalars primary key (run_id, tag, step):
    // the cost grows with the number of evaluations and telemetry steps, not with all metric rows.
    const std::string main_sql =
        "SELECT r.id, r.name, r.project_path, " + status_sql() + ", r.created_at, coalesce(r.finished_at, ''), "
        "r.config_json, "
        "(SELECT step FROM scalars WHERE run_id = r.id AND tag = 'train/loss' ORDER BY step DESC LIMIT 1), "
        "(SELECT value FROM scalars WHERE run_id = r.id AND tag = 'train/loss' ORDER BY step DESC LIMIT 1), "
        "(SELECT step FROM scalars WHERE run_id = r.id AND tag = 'val/loss' ORDER BY step DESC LIMIT 1), "
        "(SELECT value FROM scalars WHERE run_id = r.id AND tag = 'val/loss' ORDER BY step DESC LIMIT 1), "
        "(SELECT step FROM scalars WHERE run_id = r.id AND tag = 'val/loss' AND value IS NOT NULL "
        " ORDER BY value, step LIMIT 1), "
        "(SELECT min(value) FROM scalars WHERE run_id = r.id AND tag = 'val/loss'), "
        "(SELECT count(*) FROM scalars WHERE run_id = r.id AND tag = 'skipped'), "
        "(SELECT max(value) FROM scalars WHERE run_id = r.id AND tag = 'memory/resident_bytes'), "
        "(SELECT max(value) FROM scalars WHERE run_id = r.id AND tag = 'memory/cuda_peak_bytes') "
        "FROM runs r" + where + " ORDER BY r.id";
    std::vector<RunSummaryRow> rows;
    std::map<int64_t, size_t> index; // run id -> row
    {
        Statement s(db_, main_sql.c_str());
        bind_filter(s);
        while (s.step()) {
            RunSummaryRow row;
            row.id = s.int64(0);
            row.name = s.text(1);
            row.project_path = s.text(2);
            row.status = stored_status(s.text(3));
            row.created_at = s.text(4);
            row.finished_at = s.text(5);
            row.config_json = s.text(6);
            row.steps_done = s.is_null(7) ? 0 : s.int64(7);
            row.final_train_loss = s.real_or_nan(8);
            row.final_val_step = s.is_null(9) ? -1 : s.int64(9);
            row.final_val_loss = s.real_or_nan(10);
            row.best_val_step = s.is_null(11) ? -1 : s.int64(11);
            row.best_val_loss = s.real_or_nan(12);
            row.skipped_steps = s.int64(13);
            // A stored scalar may be anything (a replica of another store's, an edited file): a
            // value outside int64's range, or NaN, reads as unknown rather than as a cast's UB.
            const auto bytes = [&](int column) -> int64_t {
                if (s.is_null(column)) return -1;
                const double v = s.real(column);
                return v >= 0.0 && v < 9.2e18 ? static_cast<int64_t>(v) : -1;
            };
            row.peak_resident_bytes = bytes(14);
            row.peak_cuda_bytes = bytes(15);
            read_recipe(row.config_json, row);
            if (!filter.preset.empty() && row.preset != filter.preset) continue;
            index[row.id] = rows.size();
            rows.push_back(std::move(row));
        }
    }
    if (rows.empty()) return rows;
    if (cache) {
        if (cache->store_path_ != path_) { // another store's runs share no id with this one's
            cache->store_path_ = path_;
            cache->runs_.clear();
        }
        Statement starts(db_, "SELECT count(*) FROM events WHERE run_id = ? AND kind = 'run_started'");
        Statement last(db_, "SELECT max(step) FROM scalars WHERE run_id = ? AND tag = 'tokens_per_s'");
        Statement fresh(db_, "SELECT value FROM scalars WHERE run_id = ? AND tag = 'tokens_per_s' AND step > ? AND "
                             "value IS NOT NULL");
        for (auto& row : rows) {
            TokensMedianCache::Entry& e = cache->runs_[row.id];
            starts.reset();
            const int64_t n_starts = starts.bind(1, row.id).step() ? starts.int64(0) : 0;
            last.reset();
            const int64_t last_step = last.bind(1, row.id).step() && !last.is_null(0) ? last.int64(0) : -1;
            if (e.created_at != row.created_at || e.starts != n_starts || last_step < e.last_step)
                e = {row.created_at, n_starts, -1, {}};
            if (last_step > e.last_step) {
                std::vector<double> added;
                fresh.reset();
                fresh.bind(1, row.id).bind(2, e.last_step);
                while (fresh.step()) added.push_back(fresh.real(0));
                cache->rows_read_ += static_cast<int64_t>(added.size());
                std::sort(added.begin(), added.end());
                const auto middle = static_cast<std::ptrdiff_t>(e.sorted.size());
                e.sorted.insert(e.sorted.end(), added.begin(), added.end());
                std::inplace_merge(e.sorted.begin(), e.sorted.begin() + middle, e.sorted.end());
                e.last_step = last_step;
            }
            if (!e.sorted.empty()) row.median_tokens_per_s = sorted_median(e.sorted);
        }
    } else {
        // Median tokens/s: one join that walks each run's tokens_per_s range of the primary key.
        Statement s(db_, ("SELECT r.id, s.value FROM runs r CROSS JOIN scalars s ON s.run_id = r.id AND "
                          "s.tag = 'tokens_per_s'" + where + " ORDER BY r.id")
                             .c_str());
        bind_filter(s);
        std::vector<double> values;
        int64_t current = -1;
        const auto finish = [&] {
            const auto it = index.find(current);
            if (it == index.end() || values.empty()) return;
            const auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
            std::nth_element(values.begin(), mid, values.end());
            double median = *mid;
            if (values.size() % 2 == 0) median = 0.5 * (median + *std::max_element(values.begin(), mid));
            rows[it->second].median_tokens_per_s = median;
        };
        while (s.step()) {
            const int64_t id = s.int64(0);
            if (id != current) {
                finish();
                values.clear();
                current = id;
            }
            if (!s.is_null(1)) values.push_back(s.real(1));
        }
        finish();
    }
    if (schema_ >= 3) {
        Statement s(db_, "SELECT run_id, tag FROM run_tags ORDER BY run_id, tag");
        while (s.step())
            if (const auto it = index.find(s.int64(0)); it != index.end()) rows[it->second].tags.push_back(s.text(1));
    }
    {
        // The precision changes made while a run trained, each once: a resume's replay of one
        // (cause "resume") is the same change made again. Read typed, as events() reads them.
        const bool typed = schema_ >= 4;
        // The listed runs' events only, each run's through events_by_run.
        Statement s(db_, ("SELECT e.run_id, e.step, e.message" + std::string(typed ? ", e.fields" : "") +
                          " FROM runs r CROSS JOIN events e ON e.run_id = r.id AND e.kind = 'precision_changed'" +
                          where)
                             .c_str());
        bind_filter(s);
        // One switch per step and cause: a resume whose --set changed the preset records each
        // layer's change at its step, which read as "11 live switches".
        std::set<std::tuple<size_t, int64_t, ChangeCause>> switches;
        while (s.step()) {
            const auto it = index.find(s.int64(0));
            if (it == index.end()) continue;
            const RunEvent e = typed ? event_from_stored(s.int64(1), "precision_changed", s.text(3), s.text(2))
                                     : legacy_event(s.int64(1), "precision_changed", s.text(2));
            if (e.cause != ChangeCause::Resume && switches.emplace(it->second, e.step, e.cause).second)
                ++rows[it->second].live_switches;
        }
        for (auto& row : rows)
            if (!row.recipe.empty()) row.recipe += describe_live_switches(row.live_switches);
    }
    return rows;
}

void RunStore::add_tags(int64_t run_id, const std::vector<std::string>& tags)
{
    // A line break in a tag broke every later `list` row in two (names refuse them already).
    // Only new tags: one stored before this rule can still be removed.
    for (const auto& t : tags) {
        const std::string clean = trimmed_tag(t);
        if (has_control_character(clean))
            throw StoreArgumentError("tag '" + clean + "' has a control character (a line break, a tab): give one "
                                     "line");
    }
    write_tags(run_id, tags, "INSERT OR IGNORE INTO run_tags(run_id, tag) VALUES(?, ?)", /*run_must_exist=*/true);
}

void RunStore::remove_tags(int64_t run_id, const std::vector<std::string>& tags)
{
    write_tags(run_id, tags, "DELETE FROM run_tags WHERE run_id=? AND tag=?", /*run_must_exist=*/false);
}

void RunStore::write_tags(int64_t run_id, const std::vector<std::string>& tags, const char* sql, bool run_must_exist)
{
    require_writable("change tags");
    // Every tag is checked before anything is written: one bad tag leaves the store as it was.
    std::vector<std::string> clean;
    for (const auto& t : tags) clean.push_back(trimmed_tag(t));
    std::lock_guard lock(db_mutex_);
    if (run_must_exist) {
        Statement exists(db_, "SELECT 1 FROM runs WHERE id=?");
        if (!exists.bind(1, run_id).step()) throw StoreArgumentError("no run " + std::to_string(run_id) + " in " + path_);
    }
    in_write_transaction(db_, [&] {
        Statement s(db_, sql);
        for (const auto& t : clean) {
            s.reset();
            s.bind(1, run_id).bind(2, t).step();
        }
    });
}

std::vector<std::string> RunStore::tags(int64_t run_id)
{
    std::lock_guard lock(db_mutex_);
    if (schema_ < 3) return {};
    Statement s(db_, "SELECT tag FROM run_tags WHERE run_id=? ORDER BY tag");
    s.bind(1, run_id);
    std::vector<std::string> out;
    while (s.step()) out.push_back(s.text(0));
    return out;
}

std::vector<std::pair<std::string, int64_t>> RunStore::all_tags()
{
    std::lock_guard lock(db_mutex_);
    if (schema_ < 3) return {};
    Statement s(db_, "SELECT tag, count(*) FROM run_tags GROUP BY tag ORDER BY tag");
    std::vector<std::pair<std::string, int64_t>> out;
    while (s.step()) out.emplace_back(s.text(0), s.int64(1));
    return out;
}

void StoreSink::on_step(const StepMetrics& m)
{
    std::vector<std::pair<std::string, double>> rows = {
        {"train/loss", m.train_loss},     {"lr", m.learning_rate},          {"grad_norm", m.grad_norm},
        {"step_time_ms", m.step_time_ms}, {"tokens_per_s", m.tokens_per_s}, {"loss_scale", m.loss_scale}};
    if (m.skipped) rows.emplace_back("skipped", 1.0);
    for (const auto& [layer, norm] : m.layer_grad_norms) rows.emplace_back("grad_norm/" + layer, norm);
    for (const auto& [tag, value] : m.extra_scalars) rows.emplace_back(tag, value);
    store_.append_step_rows(run_id_, m.step, rows);
}

void StoreSink::on_eval(const EvalMetrics& m)
{
    store_.append_step_rows(run_id_, m.step, {{"val/loss", m.val_loss}, {"eval/train_loss", m.train_loss}});
}

void StoreSink::on_event(const RunEvent& e)
{
    store_.append_event(run_id_, e);
    // A paused run may stay paused for long: a reader of the store (the Runs page, `list` in
    // another terminal) finds every step up to the pause, not the last one committed before it.
    if (e.kind == EventKind::Paused) store_.flush();
}

void StoreSink::on_layer_stats(const LayerStatsFrame& f)
{
    std::vector<std::pair<std::string, double>> rows;
    for (const auto& [block, logit] : f.attention_max_logit) rows.emplace_back("attn_max_logit/" + block, logit);
    rows.emplace_back("log_z/mean", f.log_z_mean);
    rows.emplace_back("log_z/max", f.log_z_max);
    rows.emplace_back("memory/resident_bytes", static_cast<double>(f.memory.resident_bytes));
    if (f.memory.cuda_allocated_bytes >= 0) {
        rows.emplace_back("memory/cuda_allocated_bytes", static_cast<double>(f.memory.cuda_allocated_bytes));
        rows.emplace_back("memory/cuda_reserved_bytes", static_cast<double>(f.memory.cuda_reserved_bytes));
        rows.emplace_back("memory/cuda_peak_bytes", static_cast<double>(f.memory.cuda_peak_bytes));
    }
    if (f.memory.nvml_used_bytes >= 0)
        rows.emplace_back("memory/nvml_used_bytes", static_cast<double>(f.memory.nvml_used_bytes));
    store_.append_step_rows(run_id_, f.step, rows, f.tensors);
}

std::string default_store_path()
{
    if (const char* env = std::getenv("MANTISSA_DB"); env && *env) return env;
    std::filesystem::path base;
    // The XDG spec: a relative XDG_DATA_HOME is invalid and ignored (it made the store's place
    // depend on the folder a command ran in).
    if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg && *xdg && std::filesystem::path(xdg).is_absolute())
        base = xdg;
    else if (const char* home = std::getenv("HOME"); home && *home) base = std::filesystem::path(home) / ".local/share";
    else base = ".";
    return (base / "mantissa" / "runs.sqlite").string();
}

// --- Remote mirroring -------------------------------------------------------------------

namespace {

// (step, value) rows of each tag in turn, from a statement whose parameters are
// (run_id, tag, a, b) and whose columns are (step, value).
std::vector<ScalarRow> scalar_rows_per_tag(Statement& s, int64_t run_id, const std::vector<std::string>& tags, int64_t a,
                                           int64_t b)
{
    std::vector<ScalarRow> rows;
    for (const auto& tag : tags) {
        s.reset();
        s.bind(1, run_id).bind(2, tag).bind(3, a).bind(4, b);
        while (s.step()) rows.push_back({s.int64(0), tag, s.real_or_nan(1)});
    }
    return rows;
}

} // namespace

std::vector<ScalarRow> RunStore::scalars_from_step(int64_t run_id, int64_t from_step, int64_t limit)
{
    const auto tags = scalar_tags(run_id);
    std::lock_guard lock(db_mutex_);
    Statement s(db_, "SELECT step, value FROM scalars WHERE run_id=? AND tag=? AND step>=? ORDER BY step LIMIT ?");
    return scalar_rows_per_tag(s, run_id, tags, from_step, limit);
}

std::vector<StoredEventRow> RunStore::events_after(int64_t run_id, int64_t after_id, int64_t limit)
{
    flush();
    std::lock_guard lock(db_mutex_);
    const bool typed = schema_ >= 4;
    Statement s(db_, typed ? "SELECT id, step, kind, message, created_at, fields FROM events "
                             "WHERE run_id=? AND id>? ORDER BY id LIMIT ?"
                           : "SELECT id, step, kind, message, created_at, '{}' FROM events "
                             "WHERE run_id=? AND id>? ORDER BY id LIMIT ?");
    s.bind(1, run_id).bind(2, after_id).bind(3, limit);
    std::vector<StoredEventRow> rows;
    while (s.step()) rows.push_back({s.int64(0), s.int64(1), s.text(2), s.text(3), s.text(4), s.text(5)});
    return rows;
}

RunRowCounts RunStore::row_counts(int64_t run_id)
{
    flush();
    std::lock_guard lock(db_mutex_);
    Statement s(db_, "SELECT (SELECT count(*) FROM scalars WHERE run_id=?1), (SELECT count(*) FROM events WHERE "
                     "run_id=?1), (SELECT coalesce(max(id), 0) FROM events WHERE run_id=?1)");
    s.bind(1, run_id);
    s.step();
    RunRowCounts counts{s.int64(0), s.int64(1), s.int64(2), -1};
    // The newest step as the newest of each tag's, a seek each over the (run_id, tag, step) key
    // (a skip scan over the tags): max(step) over the run read every one of its rows, 235 ms of
    // an ended run's last remote page on a run of 4.2 M rows (read-only audit 'remote-scale').
    Statement next_tag(db_, "SELECT tag FROM scalars WHERE run_id=? AND tag>? ORDER BY tag LIMIT 1");
    Statement newest(db_, "SELECT max(step) FROM scalars WHERE run_id=? AND tag=?");
    for (std::string tag;;) {
        next_tag.reset();
        if (!next_tag.bind(1, run_id).bind(2, tag).step()) break;
        tag = next_tag.text(0);
        newest.reset();
        if (newest.bind(1, run_id).bind(2, tag).step() && !newest.is_null(0))
            counts.max_scalar_step = std::max(counts.max_scalar_step, newest.int64(0));
    }
    if (schema_ >= 2) {
        Statement l(db_, "SELECT count(*), coalesce(max(step), -1) FROM layer_stats WHERE run_id=?");
        l.bind(1, run_id).step();
        counts.layer_stats = l.int64(0);
        counts.max_layer_step = l.int64(1);
    }
    return counts;
}

ScalarPage RunStore::scalars_page(int64_t run_id, int64_t from_step, int64_t limit)
{
    ScalarPage page;
    page.rows = scalars_from_step(run_id, from_step, limit);
    // A tag that filled its page may have more rows: keep only the steps every tag has complete.
    int64_t cut = INT64_MAX, rows = 0, last = -1, max_step = from_step;
    std::string tag;
    const auto close_tag = [&] {
        if (rows >= limit) cut = std::min(cut, last);
    };
    for (const auto& r : page.rows) {
        if (r.tag != tag) {
            close_tag();
            tag = r.tag;
            rows = 0;
        }
        ++rows;
        last = r.step;
        max_step = std::max(max_step, r.step);
    }
    close_tag();
    page.cut = cut != INT64_MAX;
    if (page.cut)
        std::erase_if(page.rows, [cut](const ScalarRow& r) { return r.step >= cut; });
    page.next = page.cut ? cut : max_step; // limit >= 2: cut > from_step, every page makes progress
    return page;
}


LayerStatsPage RunStore::layer_stats_page(int64_t run_id, int64_t from_step, int64_t max_rows)
{
    flush();
    LayerStatsPage page;
    page.next = from_step;
    if (schema_ < 2) return page;
    std::lock_guard lock(db_mutex_);
    // The run's tensors, an index seek or two each: a scan of the run's rows would cost a long
    // run more with every page. Two plain seeks, the next role of this layer and else the next
    // layer: SQLite 3.40 steps a row-value seek "(layer, role) > (?, ?)" through every row of
    // the current tensor (a 20,000-step run's page took 185 ms).
    std::vector<std::pair<std::string, std::string>> tensors;
    {
        Statement next_role(db_, "SELECT role FROM layer_stats WHERE run_id=?1 AND layer=?2 AND role>?3 "
                                 "ORDER BY role LIMIT 1");
        Statement next_layer(db_, "SELECT layer, role FROM layer_stats WHERE run_id=?1 AND layer>?2 "
                                  "ORDER BY layer, role LIMIT 1");
        std::string layer, role;
        for (bool any = false;;) {
            if (any) {
                next_role.reset();
                next_role.bind(1, run_id).bind(2, layer).bind(3, role);
                if (next_role.step()) {
                    role = next_role.text(0);
                    tensors.emplace_back(layer, role);
                    continue;
                }
            }
            next_layer.reset();
            next_layer.bind(1, run_id).bind(2, layer);
            if (!next_layer.step()) break;
            layer = next_layer.text(0);
            role = next_layer.text(1);
            tensors.emplace_back(layer, role);
            any = true;
        }
        page.tensor_lookup_steps = next_role.vm_steps() + next_layer.vm_steps();
    }
    if (tensors.empty()) return page;
    const int64_t per_tensor = std::max<int64_t>(2, max_rows / static_cast<int64_t>(tensors.size()));
    const std::string sql =
        select_layer_stats(true) + " WHERE run_id=? AND layer=? AND role=? AND step>=? ORDER BY step LIMIT ?";
    Statement s(db_, sql.c_str());
    int64_t cut = INT64_MAX, max_step = from_step;
    for (const auto& [layer, role] : tensors) {
        s.reset();
        s.bind(1, run_id).bind(2, layer).bind(3, role).bind(4, from_step).bind(5, per_tensor);
        int64_t rows = 0, last = -1;
        while (s.step()) {
            last = s.int64(0);
            page.rows.emplace_back(last, read_tensor_stats(s, 1));
            ++rows;
        }
        if (rows >= per_tensor) cut = std::min(cut, last);
        if (rows > 0) max_step = std::max(max_step, last);
    }
    page.cut = cut != INT64_MAX;
    if (page.cut) std::erase_if(page.rows, [cut](const auto& r) { return r.first >= cut; });
    std::sort(page.rows.begin(), page.rows.end(), [](const auto& a, const auto& b) {
        return std::tie(a.first, a.second.layer, a.second.role) < std::tie(b.first, b.second.layer, b.second.role);
    });
    page.next = page.cut ? cut : max_step;
    return page;
}

bool RunStore::has_scalar(int64_t run_id, const std::string& tag, int64_t step)
{
    flush();
    std::lock_guard lock(db_mutex_);
    Statement s(db_, "SELECT 1 FROM scalars WHERE run_id=? AND tag=? AND step=?");
    s.bind(1, run_id).bind(2, tag).bind(3, step);
    return s.step();
}

std::vector<ScalarRow> RunStore::scalars_in_steps(int64_t run_id, const std::vector<std::string>& tags,
                                                  int64_t from_step, int64_t to_step)
{
    flush();
    std::lock_guard lock(db_mutex_);
    Statement s(db_, "SELECT step, value FROM scalars WHERE run_id=? AND tag=? AND step BETWEEN ? AND ? ORDER BY step");
    return scalar_rows_per_tag(s, run_id, tags, from_step, to_step);
}

std::vector<std::pair<int64_t, EventRow>> RunStore::event_rows_after(int64_t run_id, int64_t after_id, int64_t limit)
{
    // The mirror's rows, typed: stores before version 4 have no fields, and their events are
    // read from the message as at the upgrade.
    const bool typed = schema_ >= 4;
    std::vector<std::pair<int64_t, EventRow>> rows;
    for (auto& r : events_after(run_id, after_id, limit))
        rows.emplace_back(r.id, EventRow{r.step, r.kind, r.message, r.created_at,
                                         typed ? event_from_stored(r.step, r.kind, r.fields, r.message)
                                               : legacy_event(r.step, r.kind, r.message)});
    return rows;
}

RunStore::ReadSnapshot::ReadSnapshot(RunStore& store) : store_(store)
{
    if (!store_.read_only()) return;
    std::lock_guard lock(store_.db_mutex_);
    exec(store_.db_, "BEGIN");
    active_ = true;
}

RunStore::ReadSnapshot::~ReadSnapshot()
{
    if (!active_) return;
    std::lock_guard lock(store_.db_mutex_);
    sqlite3_exec(store_.db_, "COMMIT", nullptr, nullptr, nullptr);
}

void RunStore::put_mirrored_run(const RunInfo& info, const std::vector<std::string>& tags)
{
    require_writable("mirror a run");
    flush();
    std::lock_guard lock(db_mutex_);
    in_write_transaction(db_, [&] {
        Statement run(db_, "INSERT INTO runs(id, name, project_path, config_json, status, created_at, finished_at, uuid) "
                           "VALUES(?, ?, ?, ?, ?, ?, nullif(?, ''), nullif(?, '')) ON CONFLICT(id) DO UPDATE SET "
                           "name=excluded.name, project_path=excluded.project_path, config_json=excluded.config_json, "
                           "status=excluded.status, created_at=excluded.created_at, finished_at=excluded.finished_at, "
                           "uuid=excluded.uuid");
        run.bind(1, info.id).bind(2, info.name).bind(3, info.project_path).bind(4, info.config_json);
        run.bind(5, std::string(run_status_name(info.status))).bind(6, info.created_at).bind(7, info.finished_at);
        run.bind(8, info.uuid).step();
        Statement clear(db_, "DELETE FROM run_tags WHERE run_id=?");
        clear.bind(1, info.id).step();
        Statement tag(db_, "INSERT OR IGNORE INTO run_tags(run_id, tag) VALUES(?, ?)");
        for (const auto& t : tags) {
            tag.reset();
            tag.bind(1, info.id).bind(2, t).step();
        }
    });
}

void RunStore::put_mirrored_rows(int64_t run_id, const std::vector<ScalarRow>& scalars,
                                 const std::vector<StoredEventRow>& events,
                                 const std::vector<std::pair<int64_t, TensorStats>>& layer_stats)
{
    require_writable("mirror a run's rows");
    flush();
    std::lock_guard lock(db_mutex_);
    // The run is checked once instead of by a foreign-key lookup per row, a quarter of the
    // time a 1-M-row copy spends here (PRAGMA foreign_keys takes effect outside a transaction).
    exec(db_, "PRAGMA foreign_keys=OFF");
    try {
        exec(db_, "BEGIN IMMEDIATE"); // inside: a BEGIN that fails (busy, full disk) turns them on again too
        {
            // Done before the COMMIT: a statement still on a row keeps this connection's read
            // transaction open past it, and SQLite's automatic checkpoint, which runs on the
            // committing connection, then gives up. A desktop following a busy run never
            // checkpointed its replica: the WAL grew by megabytes a second, without end.
            Statement run(db_, "SELECT 1 FROM runs WHERE id=?");
            if (!run.bind(1, run_id).step())
                throw StoreError("run " + std::to_string(run_id) + " is not in the replica");
        }
        // A resume dropped the steps after its checkpoint from the source before it trained
        // them again (discard_steps_after): the replica drops them too. The page's rows are
        // all of the source's state since, so they go in after. A source written by an older
        // version kept them, and says nothing.
        for (const auto& e : events) {
            if (e.kind != event_kind_name(EventKind::ResumedFromCheckpoint)) continue;
            const RunEvent resumed = event_from_stored(e.step, e.kind, e.fields, e.message);
            if (resumed.later_steps_dropped)
                delete_steps_after(run_id, e.step, e.id, resumed.live_changes_superseded);
        }
        // A source row that is sent again (the client re-reads its last step) replaces itself.
        Statement scalar(db_, "INSERT OR REPLACE INTO scalars(run_id, tag, step, value) VALUES(?, ?, ?, ?)");
        for (const auto& r : scalars) {
            scalar.reset();
            scalar.bind(1, run_id).bind(2, r.tag).bind(3, r.step);
            if (std::isnan(r.value)) scalar.step(); // unbound: NULL, as the source stores NaN
            else scalar.bind(4, r.value).step();
        }
        Statement event(db_, "INSERT OR REPLACE INTO events(id, run_id, step, kind, message, created_at, fields) "
                             "VALUES(?, ?, ?, ?, ?, ?, ?)");
        for (const auto& e : events) {
            event.reset();
            event.bind(1, e.id).bind(2, run_id).bind(3, e.step).bind(4, e.kind).bind(5, e.message);
            event.bind(6, e.created_at).bind(7, e.fields).step();
        }
        Statement layer(db_, "INSERT OR REPLACE INTO layer_stats VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
        for (const auto& [step, t] : layer_stats) insert_layer_stats(layer, run_id, step, t); // NaN as NULL, as in the source
        exec(db_, "COMMIT");
    } catch (...) {
        sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
        sqlite3_exec(db_, "PRAGMA foreign_keys=ON", nullptr, nullptr, nullptr);
        throw;
    }
    exec(db_, "PRAGMA foreign_keys=ON");
}

} // namespace mantissa
