// SPDX-License-Identifier: GPL-3.0-or-later
// The run store: round trips, batching, CSV export, refusal of foreign/corrupt files, read-only
// opens that change nothing, and a full disk.

#include <QtTest>

#include <QCryptographicHash>
#include <QProcess>
#include <QTemporaryDir>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>

#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint_file.h"
#include "consistent_read.h"
#include "csv_export.h"
#include "event_helpers.h"
#include "held_output.h"
#include "private_mounts.h"
#include "durable_file.h"
#include "run_lock_file.h"
#include "run_store.h"
#include "store_fixtures.h"
#include "tensorboard_export.h"

using namespace mantissa;
using namespace mantissa::test;

namespace {

// Started again as a second process (MANTISSA_TEST_STORE_WRITER=<store>): a writer that adds a
// run and closes, as a mantissa-train beside the GUI does. Runs before QTest's main.
const bool kIsWriterProcess = [] {
    const char* store = std::getenv("MANTISSA_TEST_STORE_WRITER");
    if (!store) return false;
    try {
        RunStore writer(store, OpenMode::ReadWrite);
        writer.create_run("from another process", "p.json", "{}");
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        std::_Exit(1);
    }
    std::_Exit(0);
}();

// Runs this test program again as that writer; "" when it succeeded, else what went wrong.
QString run_writer_process(const std::string& store)
{
    QProcess writer;
    auto env = QProcessEnvironment::systemEnvironment();
    env.insert("MANTISSA_TEST_STORE_WRITER", QString::fromStdString(store));
    writer.setProcessEnvironment(env);
    writer.start(QCoreApplication::applicationFilePath(), {});
    if (!writer.waitForFinished(60000)) return QStringLiteral("the writer did not finish");
    if (writer.exitCode() != 0) return QString::fromUtf8(writer.readAllStandardError());
    return {};
}

// A replica store at `path` holding run 1, as a mirror makes it before the run's first page.
std::unique_ptr<RunStore> replica_with_one_run(const std::string& path)
{
    auto replica = std::make_unique<RunStore>(path);
    RunInfo run;
    run.id = 1;
    run.name = "mirrored";
    run.status = RunStatus::Running;
    replica->put_mirrored_run(run, {});
    return replica;
}

// Steps [from, to) of three metrics: a page of a run's rows.
std::vector<ScalarRow> three_metrics(int64_t from, int64_t to)
{
    std::vector<ScalarRow> rows;
    for (int64_t step = from; step < to; ++step)
        for (const char* tag : {"train/loss", "grad_norm", "step_time_ms"}) rows.push_back({step, tag, 0.5});
    return rows;
}

QByteArray file_hash(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256);
}

void run_sql(const QString& path, const char* sql)
{
    sqlite3* db = nullptr;
    sqlite3_open(path.toStdString().c_str(), &db);
    sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
    sqlite3_close(db);
}

// One step's worth of rows: an event per tag, a precision change by each cause, the loss and a
// layer's statistics.
void record_step(RunStore& store, int64_t run, int64_t step, const std::vector<std::string>& tags)
{
    for (const auto& tag : tags) store.append_event(run, text_event(step, tag, tag));
    for (const auto cause : {ChangeCause::User, ChangeCause::Watcher, ChangeCause::Resume}) {
        RunEvent change = text_event(step, "precision_changed", "");
        change.pattern = "lm_head";
        change.cause = cause;
        store.append_event(run, change);
    }
    store.append_scalar(run, step, "train/loss", double(step));
    TensorStats t;
    t.layer = "lm_head";
    t.role = "weight";
    t.format = "bf16";
    store.append_layer_stats(run, step, t);
}

// Writes zeros to `path` until the file system is full.
void fill_disk(const QString& path)
{
    std::FILE* f = std::fopen(path.toStdString().c_str(), "wb");
    if (!f) return;
    static const char zeros[4096] = {};
    while (std::fwrite(zeros, 1, sizeof zeros, f) == sizeof zeros) {
    }
    std::fclose(f);
}

// A store with a finished run "a" (metrics, an event, a tag) and a run "b" whose process died
// while it was "running". Closed, so the file stands alone (no -wal, no -shm).
void make_two_run_store(const std::string& path)
{
    RunStore store(path);
    const auto a = store.create_run("a", "p.json", R"({"precision": {"preset": "bf16"}})");
    for (int64_t step = 1; step <= 30; ++step) store.append_scalar(a, step, "train/loss", 3.0 - 0.01 * step);
    store.append_event(a, text_event(5, "note", "hello"));
    store.add_tags(a, {"baseline"});
    store.finish_run(a, RunStatus::Finished);
    store.create_run("b", "p.json", "{}"); // never finished: its lock goes with this store
}

template <typename F>
QString store_error_of(F&& f)
{
    try {
        f();
    } catch (const StoreError& e) {
        return QString::fromStdString(e.what());
    }
    return "no error";
}

} // namespace

class TestStore : public QObject {
    Q_OBJECT
private slots:
    // A connection kept open (the window's Runs page) learns that another process's run died
    // when it asks again (refresh_dead_runs): its first answer was taken at its open, before
    // that run began. Its own run, whose lock it holds, stays running.
    void aKeptConnectionSeesAnotherProcesssRunDie()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        RunStore kept(path);
        kept.create_run("mine", "p.json", "{}");
        const QString failed = run_writer_process(path); // a run it does not finish
        QVERIFY2(failed.isEmpty(), qPrintable(failed));
        const auto status = [&](const std::string& name) {
            for (const auto& run : kept.list_runs())
                if (run.name == name) return int(run.status);
            return -1;
        };
        QCOMPARE(status("from another process"), int(RunStatus::Running));
        kept.refresh_dead_runs();
        QCOMPARE(status("from another process"), int(RunStatus::Interrupted));
        QCOMPARE(status("mine"), int(RunStatus::Running));
        // Marked in the store, for every reader.
        QCOMPARE(int(RunStore::open_read_only(path)->list_runs().at(1).status), int(RunStatus::Interrupted));
    }

    // A second RunStore opened and closed in a process that holds one must not drop the first
    // one's locks on the file: closing any descriptor of it drops all of a process's POSIX
    // locks, and another process's writer could then take the file as its alone, delete the
    // WAL under the open connection, and leave this process reading a stale index ("database
    // disk image is malformed"), or writing through one.
    void aSecondOpenKeepsTheFirstOnesLocks()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        RunStore first(path);
        const int64_t id = first.create_run("first", "p.json", "{}");
        first.append_scalar(id, 1, "train/loss", 2.5);
        first.flush();
        for (int i = 0; i < 2; ++i) {
            { RunStore second(path, OpenMode::ReadWrite); } // opened and closed beside it
            const QString failed = run_writer_process(path);
            QVERIFY2(failed.isEmpty(), qPrintable(failed));
            // The writer was not the last connection: the WAL stays for the one still open here.
            QVERIFY(std::filesystem::exists(path + "-wal"));
        }
        RunStore third(path, OpenMode::ReadWrite);
        QCOMPARE(third.list_runs().size(), size_t(3));
        QCOMPARE(first.list_runs().size(), size_t(3));
        QCOMPARE(first.scalars(id).size(), size_t(1));
    }

    // A store opened through a link to its file is the target's: its lock and checkpoint
    // folders are named from the file, so a run that trains through the link is alive to a
    // process that opens the target (named from the link, it read as dead there: marked
    // interrupted, trained again by a resume, deleted while it trained).
    void aStoreOpenedThroughALinkIsItsFiles()
    {
        QTemporaryDir dir;
        const std::string target = dir.filePath("real.sqlite").toStdString(), link = dir.filePath("link.sqlite").toStdString();
        std::filesystem::create_symlink("real.sqlite", link); // to a store not made yet: SQLite makes it
        RunStore through(link);
        const int64_t id = through.create_run("live", "p.json", "{}");
        through.append_scalar(id, 1, "train/loss", 2.5);
        through.flush();
        RunStore direct(target, OpenMode::ReadWrite);
        QCOMPARE(direct.list_runs().at(0).status, RunStatus::Running);
        QCOMPARE(RunStore::open_read_only(target)->list_runs().at(0).status, RunStatus::Running);
        QCOMPARE(through.checkpoint_dir(id), direct.checkpoint_dir(id));
        QCOMPARE(through.path(), direct.path());
        QVERIFY(std::filesystem::exists(target + ".locks"));
        QVERIFY(!std::filesystem::exists(link + ".locks"));

        // A relative link whose ".." leaves a folder reached through a link: read from the
        // folder's real place, as the system reads it (lexically, it named another, empty store
        // that a run then made and trained into).
        namespace fs = std::filesystem;
        const fs::path root = dir.filePath("tree").toStdString();
        fs::create_directories(root / "real" / "data");
        fs::create_directories(root / "real" / "proj");
        { RunStore(fs::path(root / "real" / "data" / "runs.sqlite").string()).create_run("kept", "p.json", "{}"); }
        fs::create_directory_symlink("real/proj", root / "alias");
        fs::create_symlink("../data/runs.sqlite", root / "real" / "proj" / "runs.sqlite");
        RunStore aliased(fs::path(root / "alias" / "runs.sqlite").string(), OpenMode::ReadWrite);
        QCOMPARE(aliased.list_runs().size(), size_t(1));
        QCOMPARE(aliased.list_runs().at(0).name, std::string("kept"));
        QVERIFY(!fs::exists(root / "data"));
    }

    // A read-only connection reads a store with no WAL as immutable, without locks. Another
    // process's writer that starts during the read and checkpoints into the file can hand it
    // pages of two versions, or "malformed": such a read is made again on a fresh connection,
    // and a read that nothing overlapped is made once.
    void aReadThatAWriterOverlappedIsReadAgain()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        {
            RunStore store(path);
            store.finish_run(store.create_run("a", "p.json", "{}"), RunStatus::Finished);
        }
        auto store = RunStore::open_read_only(path);
        const auto names = [](RunStore& s) {
            std::vector<std::string> out;
            for (const auto& r : s.list_runs()) out.push_back(r.name);
            return out;
        };
        int reads = 0;
        QString failed;
        const auto overlapped = read_consistently(store, [&](RunStore& s) {
            if (++reads == 1) failed = run_writer_process(path); // in the middle of the read
            return names(s);
        });
        QVERIFY2(failed.isEmpty(), qPrintable(failed));
        QCOMPARE(reads, 2);
        QCOMPARE(overlapped, (std::vector<std::string>{"a", "from another process"}));
        reads = 0;
        QCOMPARE(read_consistently(store, [&](RunStore& s) { return ++reads, names(s); }).size(), size_t(2));
        QCOMPARE(reads, 1);

        // A torn view's error is read again; a current view's is the store's own.
        reads = 0;
        QCOMPARE(read_consistently(store,
                                   [&](RunStore& s) {
                                       if (++reads == 1) {
                                           failed = run_writer_process(path);
                                           throw StoreError("database disk image is malformed");
                                       }
                                       return names(s);
                                   })
                     .size(),
                 size_t(3));
        QCOMPARE(reads, 2);
        reads = 0;
        QVERIFY_THROWS_EXCEPTION(StoreError, read_consistently(store, [&](RunStore&) -> int {
            ++reads;
            throw StoreError("the store's own");
        }));
        QCOMPARE(reads, 1);

        // A store that changes under every read is reported after three.
        reads = 0;
        try {
            read_consistently(store, [&](RunStore& s) { return failed = run_writer_process(path), ++reads, names(s); });
            QFAIL("a read of a store that kept changing returned");
        } catch (const StoreError& e) {
            QCOMPARE(QString(e.what()), QString("run store '%1' changed under 3 reads in a row (a writer started or "
                                                "ended each time): try again")
                                            .arg(QString::fromStdString(path)));
        }
        QCOMPARE(reads, 3);
    }

    // A reading command acts on its read (an export writes its file) once, after the read that
    // stood: an export written from each read was written twice, or left behind by a command
    // that then failed.
    void aReadingCommandActsOnceAfterTheReadThatStood()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        {
            RunStore store(path);
            store.finish_run(store.create_run("a", "p.json", "{}"), RunStatus::Finished);
        }
        int reads = 0;
        std::vector<size_t> acted; // the runs each act saw
        QString failed;
        const int code = run_reading_command(path, [&](RunStore& s, const CliStreams& io) {
            if (++reads == 1) failed = run_writer_process(path); // in the middle of the read
            const size_t runs = s.list_runs().size();
            return after_the_read(io, [&acted, runs] { return acted.push_back(runs), 0; });
        });
        QVERIFY2(failed.isEmpty(), qPrintable(failed));
        QCOMPARE(code, 0);
        QCOMPARE(reads, 2);
        QCOMPARE(acted, std::vector<size_t>{2}); // once, with the second read's two runs
        // A command that failed leaves nothing to do.
        acted.clear();
        QCOMPARE(run_reading_command(path, [&](RunStore&, const CliStreams& io) {
                     after_the_read(io, [&acted] { return acted.push_back(0), 0; });
                     return 2;
                 }),
                 2);
        QVERIFY(acted.empty());
    }

    // A replica that takes page after page (a desktop following a busy run) checkpoints its
    // WAL as it goes: its rows reach the file, and the WAL stays bounded. A statement left on
    // a row at the page's COMMIT once kept SQLite's automatic checkpoint from ever running.
    void aReplicaCheckpointsAsItTakesPages()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("replica.sqlite").toStdString();
        const auto replica = replica_with_one_run(path);
        const auto before = std::filesystem::file_size(path);
        constexpr int64_t kStepsPerPage = 2000, kPages = 40;
        for (int64_t page = 0; page < kPages; ++page)
            replica->put_mirrored_rows(1, three_metrics(page * kStepsPerPage, (page + 1) * kStepsPerPage), {});
        // ~7 MB of rows went through the WAL; SQLite checkpoints every 1000 pages (~4 MB).
        QVERIFY2(std::filesystem::file_size(path) > before + (2 << 20),
                 qPrintable(QString("the file stayed at %1 bytes, the WAL reached %2")
                                .arg(std::filesystem::file_size(path))
                                .arg(std::filesystem::file_size(path + "-wal"))));
        QCOMPARE(replica->row_counts(1).scalars, kPages * kStepsPerPage * 3);
    }

    // One big transaction (a long run deleted, a replica's first page of a long run) leaves a
    // big WAL: it is cut back to 16 MiB once the WAL restarts, not kept while the store is open.
    void aBigTransactionsWalIsCutBack()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        const auto replica = replica_with_one_run(path);
        replica->put_mirrored_rows(1, three_metrics(0, 400000), {});
        const auto big = std::filesystem::file_size(path + "-wal");
        QVERIFY2(big > (24u << 20), qPrintable(QString("the WAL reached only %1 bytes").arg(big)));
        for (int64_t step = 400000; step < 400010; ++step)
            replica->put_mirrored_rows(1, three_metrics(step, step + 1), {});
        QVERIFY2(std::filesystem::file_size(path + "-wal") <= (16u << 20),
                 qPrintable(QString("the WAL kept %1 bytes").arg(std::filesystem::file_size(path + "-wal"))));
    }

    // A diverged run's NaN loss is stored as NULL (SQLite has no NaN); every reader must give
    // NaN back, not 0.0, or `show` and the TensorBoard export report a diverged run as perfect.
    void nanScalarsReadBackAsNan()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("runs.sqlite").toStdString());
        const int64_t id = store.create_run("diverged", "p.json", "{}");
        store.append_scalar(id, 1, "train/loss", 2.5);
        store.append_scalar(id, 2, "train/loss", std::nan(""));
        store.append_scalar(id, 3, "train/loss", -0.0);
        const auto rows = store.scalars(id);
        QCOMPARE(rows.size(), size_t(3));
        QCOMPARE(rows[0].value, 2.5);
        QVERIFY(std::isnan(rows[1].value));
        QVERIFY(rows[2].value == 0.0);
        const auto series = store.series(id, "train/loss");
        QVERIFY(std::isnan(series[1].second));
        // A tensor full of NaN: its amax and cast error are NaN, and so they read back.
        TensorStats t;
        t.layer = "blocks.0.mlp.fc1";
        t.role = "input";
        t.format = "e4m3";
        t.count = 4;
        t.nans = 4;
        t.amax = std::nan("");
        t.quant_snr_db = std::nan("");
        store.append_layer_stats(id, 2, t);
        const auto stats = store.layer_stats(id);
        QCOMPARE(stats.size(), size_t(1));
        QVERIFY(std::isnan(stats[0].second.amax));
        QVERIFY(std::isnan(stats[0].second.quant_snr_db));
        QCOMPARE(stats[0].second.nans, int64_t(4));
    }

    void roundTripsRunsMetricsAndEvents()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        int64_t id = 0;
        {
            RunStore store(path);
            QCOMPARE(store.schema_version(), RunStore::kSchemaVersion);
            id = store.create_run("baseline", "projects/x.json", R"({"a": 1})");
            StoreSink sink(store, id);
            for (int64_t step = 1; step <= 100; ++step) {
                StepMetrics m;
                m.step = step;
                m.train_loss = 4.0 - 0.01 * static_cast<double>(step);
                m.learning_rate = 1e-3;
                m.grad_norm = 0.5;
                m.step_time_ms = 12.5;
                m.tokens_per_s = 1000.0;
                sink.on_step(m);
            }
            sink.on_eval({50, 3.25, 3.5});
            sink.on_event(text_event(7, "note", "comma, \"quoted\" message"));
            store.finish_run(id, RunStatus::Finished);
        } // closing flushes; reopen reads from disk
        RunStore store(path);
        const auto runs = store.list_runs();
        QCOMPARE(runs.size(), size_t(1));
        QCOMPARE(runs[0].name, std::string("baseline"));
        QCOMPARE(status_text(runs[0].status), std::string("finished"));
        QCOMPARE(runs[0].config_json, std::string(R"({"a": 1})"));
        QCOMPARE(runs[0].last_step, int64_t(100));
        QVERIFY(!runs[0].finished_at.empty());

        const auto rows = store.scalars(id);
        QCOMPARE(rows.size(), size_t(100 * 6 + 2)); // 6 scalars a step (no skipped steps) + 2 eval
        int train_rows = 0;
        for (const auto& r : rows) {
            if (r.tag == "train/loss") {
                ++train_rows;
                QCOMPARE(r.value, 4.0 - 0.01 * static_cast<double>(r.step)); // REAL is a double: exact
            }
            if (r.tag == "val/loss") QCOMPARE(r.value, 3.25);
        }
        QCOMPARE(train_rows, 100);
        const auto events = store.events(id);
        QCOMPARE(events.size(), size_t(1));
        QCOMPARE(events[0].message, std::string("comma, \"quoted\" message"));
    }

    // Schema 4: runs get an identity (old ones in the upgrade), checkpoints get checksums.
    void versionFourGivesRunsAnIdentityAndRecordsCheckpoints()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("v2.sqlite").toStdString();
        QVERIFY(load_store_fixture(path, "run_store_v2.sql"));

        RunStore store(path);
        QCOMPARE(store.schema_version(), RunStore::kSchemaVersion);
        const auto old = store.list_runs();
        QCOMPARE(old.size(), size_t(2));
        const auto is_hex_uuid = [](const std::string& u) {
            return u.size() == 32 && u.find_first_not_of("0123456789abcdef") == std::string::npos;
        };
        for (const auto& r : old) {
            QVERIFY2(is_hex_uuid(r.uuid), r.uuid.c_str());
            QVERIFY(r.legacy_checkpoints);
            QVERIFY(store.checkpoints(r.id).empty());
        }
        QVERIFY(old[0].uuid != old[1].uuid);
        const int64_t id = store.create_run("new", "p.json", "{}");
        const auto fresh = store.find_run(std::to_string(id));
        QVERIFY(is_hex_uuid(fresh->uuid));
        QVERIFY(!fresh->legacy_checkpoints);
        QVERIFY(fresh->uuid != old[0].uuid && fresh->uuid != old[1].uuid);

        // Folder rule: named after the store file, beside it.
        const std::string folder = std::filesystem::absolute(path).string() + ".checkpoints/run-" + std::to_string(id);
        QCOMPARE(store.checkpoint_dir(id), folder);
        QCOMPARE(store.legacy_checkpoint_dir(id), dir.filePath("checkpoints/run-%1").arg(id).toStdString());
        store.record_checkpoint({id, 20, folder + "/step-00000020.pt", "fnv1a64:00000000000000aa", 1234});
        store.record_checkpoint({id, 10, folder + "/step-00000010.pt", "fnv1a64:00000000000000bb", 99});
        store.record_checkpoint({id, 20, folder + "/step-00000020.pt", "fnv1a64:00000000000000cc", 1235}); // rewritten
        const auto rows = store.checkpoints(id);
        QCOMPARE(rows.size(), size_t(2));
        QCOMPARE(rows[0].step, int64_t(10));
        QCOMPARE(rows[0].bytes, int64_t(99));
        QCOMPARE(rows[1].checksum, std::string("fnv1a64:00000000000000cc"));
        QCOMPARE(rows[1].bytes, int64_t(1235));
        QCOMPARE(rows[1].path, folder + "/step-00000020.pt");
        store.delete_run(id);
        QVERIFY(store.checkpoints(id).empty()); // cascades with the run
    }

    // 32 flipped bytes, one flipped bit, a truncated tail: each changes the checksum.
    void checkpointChecksumDetectsDamage()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("f.bin").toStdString();
        std::string bytes(100000, '\0');
        for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 7919) % 251);
        const auto write = [&](const std::string& b) { std::ofstream(path, std::ios::binary) << b; };
        write(bytes);
        const FileChecksum clean = checksum_file(path);
        QCOMPARE(clean.bytes, int64_t(100000));
        QCOMPARE(clean.checksum.size(), size_t(8 + 16));
        QCOMPARE(checksum_file(path).checksum, clean.checksum);
        std::string flipped = bytes;
        for (size_t i = 50000; i < 50032; ++i) flipped[i] = static_cast<char>(~flipped[i]);
        write(flipped);
        QVERIFY(checksum_file(path).checksum != clean.checksum);
        std::string one_bit = bytes;
        one_bit[99999] ^= 1;
        write(one_bit);
        QVERIFY(checksum_file(path).checksum != clean.checksum);
        write(bytes.substr(0, 99999));
        QVERIFY(checksum_file(path).checksum != clean.checksum);
        // The empty file: FNV-1a's offset basis.
        write("");
        QCOMPARE(checksum_file(path).checksum, std::string("fnv1a64:cbf29ce484222325"));
        // Names: only step-<digits>.pt counts.
        QCOMPARE(checkpoint_file_name(120), std::string("step-00000120.pt"));
        QCOMPARE(checkpoint_step("/x/step-00000120.pt"), std::optional<int64_t>(120));
        QVERIFY(!checkpoint_step("/x/step-abc.pt"));
        QVERIFY(!checkpoint_step("/x/step-.pt"));
        QVERIFY(!checkpoint_step("/x/step-12.pt.tmp"));
        QVERIFY(!checkpoint_step("/x/step--12.pt"));
        // Only the name it is written under: a copy named otherwise is not a checkpoint.
        QVERIFY(!checkpoint_step("/x/step-120.pt"));
        QVERIFY(!checkpoint_step("/x/step-000000120.pt"));
        QCOMPARE(checkpoint_step("/x/step-123456789.pt"), std::optional<int64_t>(123456789));
        QVERIFY(!checkpoint_step("/x/step-0123456789.pt"));
    }

    void findsRunsByIdOrNewestName()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("r.sqlite").toStdString());
        const auto a = store.create_run("same", "", "{}");
        const auto b = store.create_run("same", "", "{}");
        QCOMPARE(store.find_run(std::to_string(a))->id, a);
        QCOMPARE(store.find_run("same")->id, b);
        QVERIFY(!store.find_run("other").has_value());
        QVERIFY(!store.find_run("999").has_value());
        QVERIFY(!store.find_run("99999999999999999999").has_value()); // past int64: no run, no throw
        const auto c = store.create_run("d\u00fcnn", "", "{}");
        QCOMPARE(store.find_run("d\u00fcnn")->id, c);
        // One run by id is a seek (a remote window's poll read every run of the store) and
        // reads as the list does.
        store.append_scalar(b, 7, "train/loss", 1.0);
        store.finish_run(b, RunStatus::Stopped);
        const auto one = store.run_info(b);
        QVERIFY(one.has_value());
        QCOMPARE(one->last_step, int64_t(7));
        QVERIFY(one->status == RunStatus::Stopped);
        QCOMPARE(one->uuid, store.list_runs()[1].uuid);
        QVERIFY(!store.run_info(999).has_value());
        // The counts and marks a replica checks itself by: the newest step of any tag (found by
        // a seek per tag, not a scan of every row of the run).
        QCOMPARE(store.row_counts(a).max_scalar_step, int64_t(-1));
        for (int64_t step = 1; step <= 10; ++step) store.append_scalar(a, step, "train/loss", 1.0);
        store.append_scalar(a, 12, "val/loss", 1.0);
        store.append_scalar(a, 7, "memory/resident_bytes", 1.0);
        store.append_scalar(c, 99, "train/loss", 1.0); // another run's rows count for nothing here
        const RunRowCounts counts = store.row_counts(a);
        QCOMPARE(counts.max_scalar_step, int64_t(12));
        QCOMPARE(counts.scalars, int64_t(12));
    }

    void exportsPivotedCsv()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("r.sqlite").toStdString());
        const auto id = store.create_run("csv", "", "{}");
        StoreSink sink(store, id);
        sink.on_eval({0, 4.5, 4.25});
        auto step = [](int64_t n, double loss, double lr, double grad_norm) {
            StepMetrics m;
            m.step = n;
            m.train_loss = loss;
            m.learning_rate = lr;
            m.grad_norm = grad_norm;
            m.step_time_ms = 10.0;
            m.tokens_per_s = 2000.0;
            return m;
        };
        sink.on_step(step(1, 4.0, 0.001, 1.5));
        sink.on_step(step(2, 3.5, 0.002, 1.25));
        sink.on_event(text_event(2, "sample", "line1\nline2"));
        sink.on_event(text_event(2, "sample", "=HYPERLINK(\"http://127.0.0.1/\")"));
        sink.on_event(text_event(2, "sample", "-0.5"));
        sink.on_event(text_event(2, "sample", "@me"));
        QCOMPARE(metrics_csv(store, id),
                 std::string("step,train/loss,val/loss,eval/train_loss,lr,grad_norm,step_time_ms,tokens_per_s,"
                             "loss_scale\n"
                             "0,,4.5,4.25,,,,,\n"
                             "1,4,,,0.001,1.5,10,2000,1\n"
                             "2,3.5,,,0.002,1.25,10,2000,1\n"));
        const std::string events = events_csv(store, id);
        QVERIFY(events.rfind("step,kind,message,created_at\n2,sample,\"line1\nline2\",", 0) == 0);
        // A spreadsheet would run the first as a formula: it is text, as the GUI's exports make it.
        QVERIFY2(events.find("\n2,sample,\"'=HYPERLINK(\"\"http://127.0.0.1/\"\")\",") != std::string::npos,
                 events.c_str());
        QVERIFY2(events.find("\n2,sample,-0.5,") != std::string::npos, events.c_str());
        QVERIFY2(events.find("\n2,sample,'@me,") != std::string::npos, events.c_str());
    }

    // A long run's table reaches the sink in pieces as it is read, never whole: pieces of about
    // 64 KiB, which together are the table. NaN as "nan", a step without the tag empty.
    void csvExportsComeInPieces()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("r.sqlite").toStdString());
        const auto id = store.create_run("long", "", "{}");
        for (int64_t step = 1; step <= 20000; ++step) {
            store.append_scalar(id, step, "train/loss", step == 7 ? std::nan("") : 1.0 / double(step));
            if (step % 2 == 0) store.append_scalar(id, step, "lr", 0.001);
        }
        store.flush();
        std::vector<size_t> pieces;
        std::string text;
        write_metrics_csv(store, id, [&](std::string_view piece) {
            pieces.push_back(piece.size());
            text += piece;
        });
        QVERIFY2(text.rfind("step,train/loss,lr\n1,1,\n2,0.5,0.001\n3,0.3333333333333333,\n", 0) == 0,
                 text.substr(0, 80).c_str());
        QVERIFY(text.find("\n7,nan,\n8,0.125,0.001\n") != std::string::npos);
        QVERIFY(text.size() > 20000 * 10);
        QCOMPARE(std::count(text.begin(), text.end(), '\n'), std::ptrdiff_t(20001));
        QVERIFY(text.ends_with("\n19999,5.000250012500625e-05,\n20000,5e-05,0.001\n"));
        QVERIFY2(pieces.size() >= text.size() / (64 * 1024), qPrintable(QString::number(pieces.size())));
        for (const size_t piece : pieces) QVERIFY(piece > 0 && piece <= 64 * 1024 + 64);
        QCOMPARE(metrics_csv(store, id), text);
    }

    // A TensorBoard export not committed (its read did not stand, or the command failed) leaves
    // nothing: no partial file, no folder it made, and an earlier export of the run as it was.
    void anUncommittedTensorBoardExportLeavesNothing()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("r.sqlite").toStdString());
        const auto id = store.create_run("tb", "", "{}");
        for (int64_t step = 1; step <= 3; ++step) store.append_scalar(id, step, "train/loss", 1.0);
        store.flush();
        const QString out = dir.filePath("tb");
        {
            TensorBoardExport board(store, id, out.toStdString());
            QVERIFY(!board.empty());
            QVERIFY(QFile::exists(out + "/run1-tb/.mantissa-export.partial"));
        }
        QVERIFY(!QDir(out).exists());

        const QString path = QString::fromStdString(export_tensorboard(store, id, out.toStdString()));
        const auto bytes = [&path] {
            QFile f(path);
            return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
        };
        const QByteArray before = bytes();
        QVERIFY(before.size() > 100);
        store.append_scalar(id, 4, "train/loss", 2.0);
        store.flush();
        { TensorBoardExport again(store, id, out.toStdString()); }
        QCOMPARE(bytes(), before);
        QCOMPARE(QDir(out + "/run1-tb").entryList(QDir::Files | QDir::Hidden),
                 QStringList{QFileInfo(path).fileName()});
        {
            TensorBoardExport again(store, id, out.toStdString());
            QCOMPARE(again.commit(), path.toStdString());
        }
        QVERIFY(bytes().size() > before.size()); // step 4 is in it now

        const auto empty = store.create_run("empty", "", "{}");
        {
            TensorBoardExport none(store, empty, out.toStdString());
            QVERIFY(none.empty());
        }
        QCOMPARE(QDir(out).entryList(QDir::Dirs | QDir::NoDotAndDotDot), QStringList{"run1-tb"});
        // Nor any folder above: `--out a/x/y` of an empty run left a/x.
        {
            TensorBoardExport none(store, empty, dir.filePath("a/x/y").toStdString());
            QVERIFY(QDir(dir.filePath("a/x/y")).exists());
        }
        QVERIFY(!QDir(dir.filePath("a")).exists());
    }

    // A reading command's output is held in memory up to a size, then in an unlinked file in
    // $TMPDIR; where that file cannot be made, or fills up (here a file-size limit), in memory
    // again. Whichever way, all of it comes out, once.
    void heldOutputSpillsToAFileAndBack()
    {
        std::string text;
        for (int i = 0; i < 2000; ++i) text += "row " + std::to_string(i) + ",1.5,2.5\n";
        const auto through = [&](size_t memory, bool* spilled) {
            HeldOutput held(memory);
            for (size_t at = 0; at < text.size(); at += 1000)
                std::fwrite(text.data() + at, 1, std::min<size_t>(1000, text.size() - at), held.streams().out);
            std::fprintf(held.streams().err, "note\n");
            *spilled = held.spilled();
            char* out = nullptr;
            char* err = nullptr;
            size_t out_size = 0, err_size = 0;
            std::FILE* to = open_memstream(&out, &out_size);
            std::FILE* messages = open_memstream(&err, &err_size);
            const std::string problem = held.release(to, messages);
            std::fclose(to);
            std::fclose(messages);
            const std::string result = problem + "|" + std::string(err, err_size) + "|" + std::string(out, out_size);
            std::free(out);
            std::free(err);
            return result;
        };
        const std::string expected = "|note\n|" + text;
        bool spilled = false;
        QCOMPARE(through(HeldOutput::kMemoryBytes, &spilled), expected);
        QVERIFY(!spilled);
        QCOMPARE(through(4096, &spilled), expected);
        QVERIFY(spilled);

        QTemporaryDir tmp;
        const QByteArray before = qgetenv("TMPDIR");
        qputenv("TMPDIR", tmp.filePath("no-such-folder").toUtf8());
        QCOMPARE(through(4096, &spilled), expected);
        QVERIFY(!spilled);
        qputenv("TMPDIR", tmp.path().toUtf8());
        // A file-size limit of 12,000 bytes: the file takes the first pieces, then refuses (EFBIG, with
        // SIGXFSZ ignored as mantissa-train does), and it all comes back into memory.
        const auto sigxfsz = std::signal(SIGXFSZ, SIG_IGN);
        rlimit limit{};
        QVERIFY(::getrlimit(RLIMIT_FSIZE, &limit) == 0);
        const rlimit small{12000, limit.rlim_max}; // not a multiple of a piece: one is cut part way
        QVERIFY(::setrlimit(RLIMIT_FSIZE, &small) == 0);
        const std::string limited = through(4096, &spilled);
        // A file-size limit is no full disk: a checkpoint's rotation frees nothing for it (a
        // retry after removing a kept checkpoint lost that checkpoint for nothing).
        QString kind = "no error";
        try {
            replace_file_durably(tmp.filePath("big").toStdString(), std::string(20000, 'x'));
        } catch (const NoSpaceError&) {
            kind = "no space";
        } catch (const std::runtime_error& e) {
            kind = QString::fromStdString(e.what());
        }
        ::setrlimit(RLIMIT_FSIZE, &limit);
        QVERIFY2(kind.contains("File too large"), qPrintable(kind));
        std::signal(SIGXFSZ, sigxfsz);
        if (before.isNull()) qunsetenv("TMPDIR");
        else qputenv("TMPDIR", before);
        QCOMPARE(limited, expected);
        QVERIFY(!spilled);
    }

    void usesWalAndMarksItsFiles()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("r.sqlite").toStdString();
        { RunStore store(path); }
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
        auto read = [&](const char* sql) {
            sqlite3_stmt* s = nullptr;
            sqlite3_prepare_v2(db, sql, -1, &s, nullptr);
            sqlite3_step(s);
            const std::string v = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
            sqlite3_finalize(s);
            return v;
        };
        QCOMPARE(read("PRAGMA journal_mode"), std::string("wal"));
        QCOMPARE(read("PRAGMA user_version"), std::to_string(RunStore::kSchemaVersion));
        QCOMPARE(read("PRAGMA application_id"), std::to_string(0x4D414E54));
        sqlite3_close(db);
    }

    void writesLandWithoutExplicitFlush()
    {
        // The writer thread commits on its own within its interval: a crash loses < 1 s.
        QTemporaryDir dir;
        const std::string path = dir.filePath("r.sqlite").toStdString();
        RunStore store(path);
        const auto id = store.create_run("live", "", "{}");
        store.append_scalar(id, 1, "train/loss", 2.0);
        sqlite3* reader = nullptr;
        sqlite3_open(path.c_str(), &reader);
        sqlite3_busy_timeout(reader, 5000);
        int count = 0;
        // Waits longer than the writer's interval needs: under ASan on a loaded machine its
        // thread may not be scheduled for a while, and the point is that no flush was asked for.
        for (int i = 0; i < 400 && count == 0; ++i) {
            QTest::qWait(50);
            sqlite3_stmt* s = nullptr;
            sqlite3_prepare_v2(reader, "SELECT count(*) FROM scalars", -1, &s, nullptr);
            sqlite3_step(s);
            count = sqlite3_column_int(s, 0);
            sqlite3_finalize(s);
        }
        sqlite3_close(reader);
        QCOMPARE(count, 1);
    }

    void refusesBadFilesAndLeavesThemUntouched_data()
    {
        QTest::addColumn<QByteArray>("content");
        QTest::addColumn<QString>("message");
        QTest::newRow("text file") << QByteArray("this is not a database, just some text\n").repeated(200)
                                   << "is not a Mantissa run store";
        QByteArray header("SQLite format 3\0", 16);
        // SQLite's magic, the rest of the header garbage: the right file damaged, not another one.
        QTest::newRow("truncated sqlite") << header + QByteArray(84, '\x7f')
                                          << "is damaged: it starts as a SQLite database, but its header page does "
                                             "not read";
    }
    void refusesBadFilesAndLeavesThemUntouched()
    {
        QFETCH(QByteArray, content);
        QFETCH(QString, message);
        QTemporaryDir dir;
        const QString path = dir.filePath("bad.sqlite");
        {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(content);
        }
        const QByteArray before = file_hash(path);
        try {
            RunStore store(path.toStdString());
            QFAIL("opened a bad file");
        } catch (const StoreError& e) {
            QVERIFY2(QString(e.what()).contains(message), e.what());
            QVERIFY2(QString(e.what()).contains(path), e.what());
        }
        QCOMPARE(file_hash(path), before);
        QVERIFY(!QFile::exists(path + "-wal"));
    }

    void refusesForeignSqliteDatabase()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath("other.sqlite");
        sqlite3* db = nullptr;
        sqlite3_open(path.toStdString().c_str(), &db);
        sqlite3_exec(db, "CREATE TABLE contacts(name TEXT); INSERT INTO contacts VALUES('x');", nullptr, nullptr,
                     nullptr);
        sqlite3_close(db);
        const QByteArray before = file_hash(path);
        try {
            RunStore store(path.toStdString());
            QFAIL("opened another program's database");
        } catch (const StoreError& e) {
            QVERIFY2(QString(e.what()).contains("another program"), e.what());
        }
        QCOMPARE(file_hash(path), before);
    }

    void refusesNewerSchema()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("new.sqlite").toStdString();
        { RunStore store(path); }
        sqlite3* db = nullptr;
        sqlite3_open(path.c_str(), &db);
        sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr);
        sqlite3_close(db);
        try {
            RunStore store(path);
            QFAIL("opened a newer schema");
        } catch (const StoreError& e) {
            QVERIFY2(QString(e.what()).contains("schema version 99: it was written by a newer Mantissa"), e.what());
        }
    }

    void deadRunsAreMarkedInterruptedLiveOnesAreNot()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("r.sqlite").toStdString();
        int64_t id = 0;
        {
            RunStore writer(path);
            id = writer.create_run("live", "", "{}");
            RunStore reader(path); // another "process" looking while the run is alive
            QCOMPARE(status_text(reader.find_run("live")->status), std::string("running"));
        } // the writer goes away without finish_run, as a killed process would
        RunStore later(path);
        QCOMPARE(status_text(later.find_run(std::to_string(id))->status), std::string("interrupted"));
        later.claim_run(id); // resuming takes it back
        QCOMPARE(status_text(later.find_run(std::to_string(id))->status), std::string("running"));
        later.finish_run(id, RunStatus::Finished);
        QCOMPARE(status_text(later.find_run(std::to_string(id))->status), std::string("finished"));
    }

    void renameAndDeleteRuns()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("r.sqlite").toStdString());
        const auto keep = store.create_run("a", "", "{}");
        const auto drop = store.create_run("b", "", "{}");
        store.append_scalar(drop, 1, "train/loss", 1.0);
        store.append_event(drop, text_event(1, "note", "x"));
        store.rename_run(keep, "renamed");
        store.delete_run(drop);
        const auto runs = store.list_runs();
        QCOMPARE(runs.size(), size_t(1));
        QCOMPARE(runs[0].name, std::string("renamed"));
        QVERIFY(store.scalars(drop).empty());
        QVERIFY(store.events(drop).empty());
    }

    void crc32cMatchesTheStandardCheckValue()
    {
        // RFC 3720 / iSCSI check value of "123456789".
        QCOMPARE(crc32c("123456789", 9), 0xE3069283u);
        QCOMPARE(crc32c("", 0), 0u);
        const uint32_t c = crc32c("a", 1);
        QCOMPARE(masked_crc32c("a", 1), ((c >> 15) | (c << 17)) + 0xA282EAD8u);
    }

    void readOnlyOpenReadsEverythingAndWritesNothing()
    {
        QTemporaryDir dir;
        const QString folder = dir.filePath("archive");
        QVERIFY(QDir().mkpath(folder));
        const QString path = folder + "/runs.sqlite";
        make_two_run_store(path.toStdString());
        QVERIFY(QFile::setPermissions(path, QFile::ReadOwner | QFile::ReadGroup | QFile::ReadOther));
        QVERIFY(QFile::setPermissions(folder, QFile::ReadOwner | QFile::ExeOwner | QFile::ReadOther | QFile::ExeOther));
        const QStringList before = snapshot(dir.path());
        QVERIFY(!before.join('\n').contains("-wal"));
        {
            const auto store = RunStore::open_read_only(path.toStdString());
            QVERIFY(store->read_only());
            QCOMPARE(store->schema_version(), RunStore::kSchemaVersion);
            const auto runs = store->list_runs();
            QCOMPARE(runs.size(), size_t(2));
            QCOMPARE(status_text(runs[0].status), std::string("finished"));
            QCOMPARE(runs[0].last_step, int64_t(30));
            QCOMPARE(status_text(runs[1].status), std::string("interrupted")); // reported, not written
            QCOMPARE(store->scalars(runs[0].id).size(), size_t(30));
            QCOMPARE(store->events(runs[0].id).size(), size_t(1));
            QCOMPARE(store->tags(runs[0].id), std::vector<std::string>{"baseline"});
            RunFilter interrupted;
            interrupted.status = RunStatus::Interrupted;
            QCOMPARE(store->list_run_summaries(interrupted).size(), size_t(1));
            const auto summaries = store->list_run_summaries();
            QCOMPARE(summaries.size(), size_t(2));
            QCOMPARE(summaries[0].preset, std::string("bf16"));
            QCOMPARE(status_text(summaries[1].status), std::string("interrupted"));

            const int64_t a = runs[0].id;
            const std::vector<std::function<void()>> writes = {
                [&] { store->rename_run(a, "x"); },         [&] { store->delete_run(a); },
                [&] { store->add_tags(a, {"t"}); },          [&] { store->remove_tags(a, {"baseline"}); },
                [&] { store->create_run("c", "", "{}"); },   [&] { store->claim_run(a); },
                [&] { store->finish_run(a, RunStatus::Failed); },     [&] { store->append_scalar(a, 1, "x", 1.0); },
                [&] { store->append_event(a, text_event(1, "k", "m")); }, [&] { store->append_layer_stats(a, 1, {}); },
            };
            for (const auto& write : writes) {
                const QString error = store_error_of(write);
                QVERIFY2(error.contains("run store '" + path + "' is read-only"), qPrintable(error));
            }
            QCOMPARE(store->list_runs()[0].name, std::string("a"));
        }
        QCOMPARE(snapshot(dir.path()), before); // no -wal, -shm or .locks, not a byte changed
        sqlite3* raw = nullptr;
        sqlite3_open_v2(("file:" + path.toStdString() + "?immutable=1").c_str(), &raw,
                        SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, nullptr);
        sqlite3_stmt* s = nullptr;
        sqlite3_prepare_v2(raw, "SELECT status FROM runs WHERE name='b'", -1, &s, nullptr);
        QCOMPARE(sqlite3_step(s), SQLITE_ROW);
        QCOMPARE(QString(reinterpret_cast<const char*>(sqlite3_column_text(s, 0))), QString("running"));
        sqlite3_finalize(s);
        sqlite3_close(raw);
        QFile::setPermissions(folder, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    }

    void readOnlyOpenSeesWhatALiveWriterCommitted()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("live.sqlite").toStdString();
        RunStore writer(path);
        const auto id = writer.create_run("live", "", "{}");
        for (int64_t step = 1; step <= 10; ++step) writer.append_scalar(id, step, "train/loss", 1.0);
        writer.flush(); // in the WAL, not yet in the main file
        const QStringList before = snapshot(dir.path());
        QVERIFY(before.join('\n').contains("live.sqlite-wal"));
        {
            const auto reader = RunStore::open_read_only(path);
            QCOMPARE(reader->list_runs().size(), size_t(1));
            QCOMPARE(status_text(reader->list_runs()[0].status), std::string("running")); // its lock is held
            QCOMPARE(reader->scalars(id).size(), size_t(10));
        }
        QCOMPARE(snapshot(dir.path()).size(), before.size()); // the -shm is shared state, not a new file
    }

    void refusalsNameTheFileAndChangeNothing_data()
    {
        QTest::addColumn<QByteArray>("content"); // "absent" = no file at all
        QTest::addColumn<QString>("sql");        // run on the file first when set
        QTest::addColumn<QString>("message");
        QTest::newRow("absent") << QByteArray("absent") << QString() << "does not exist (no runs stored yet)";
        QTest::newRow("empty") << QByteArray() << QString() << "is empty: no runs stored yet";
        QTest::newRow("app id, no tables") << QByteArray() << "PRAGMA application_id=1296125524; VACUUM;"
                                           << "has no Mantissa tables";
        QTest::newRow("foreign") << QByteArray() << "CREATE TABLE contacts(name TEXT);"
                                 << "is a SQLite database of another program";
        QTest::newRow("text") << QByteArray("just some text\n").repeated(100) << QString()
                              << "is not a SQLite database";
        // SQLite's 16 bytes, then garbage where the page size and the rest of the header go.
        QTest::newRow("damaged header") << QByteArray("SQLite format 3", 16) + QByteArray(4080, '\x5a') << QString()
                                        << "is damaged: it starts as a SQLite database, but its header page does not "
                                           "read";
        QTest::newRow("newer") << QByteArray() << "PRAGMA application_id=1296125524; PRAGMA user_version=9; "
                                                  "CREATE TABLE runs(id INTEGER PRIMARY KEY);"
                               << "has schema version 9: it was written by a newer Mantissa";
    }
    void refusalsNameTheFileAndChangeNothing()
    {
        QFETCH(QByteArray, content);
        QFETCH(QString, sql);
        QFETCH(QString, message);
        QTemporaryDir dir;
        const QString path = dir.filePath("x.sqlite");
        if (content != "absent") {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(content);
        }
        if (!sql.isEmpty()) run_sql(path, sql.toUtf8().constData());
        const QStringList before = snapshot(dir.path());
        for (const OpenMode mode : {OpenMode::ReadOnly, OpenMode::ReadWrite}) {
            const QString error = store_error_of([&] { RunStore store(path.toStdString(), mode); });
            QVERIFY2(error.contains(message), qPrintable(error));
            QVERIFY2(error.contains("'" + path + "'"), qPrintable(error));
            QCOMPARE(snapshot(dir.path()), before);
        }
    }

    // A real store damaged the way disks and copies damage files: cut short, or one bit
    // flipped in the structure of a page in the middle of the file. Every open refuses it,
    // names the file, and leaves the folder byte-for-byte as it was (no -wal, no -shm). A bit
    // flipped inside a stored value cannot be seen: SQLite pages carry no checksums.
    void damagedStoresAreRefusedAndLeftUntouched_data()
    {
        QTest::addColumn<QString>("damage");
        QTest::addColumn<QString>("message");
        QTest::newRow("truncated to half") << "half" << "is damaged";
        QTest::newRow("last page cut") << "last page" << "is damaged";
        QTest::newRow("bit flip, page header") << "flip header" << "is damaged";
        QTest::newRow("bit flip, cell pointer") << "flip cell" << "is damaged";
    }
    void damagedStoresAreRefusedAndLeftUntouched()
    {
        QFETCH(QString, damage);
        QFETCH(QString, message);
        QTemporaryDir dir;
        const QString path = dir.filePath("damaged.sqlite");
        {
            make_two_run_store(path.toStdString());
            RunStore store(path.toStdString(), OpenMode::ReadWrite);
            const auto run = store.find_run("a")->id;
            for (int64_t step = 31; step <= 3000; ++step) store.append_scalar(run, step, "train/loss", 1.0 / step);
        }
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadWrite));
        QByteArray bytes = f.readAll();
        const int page_size = (static_cast<unsigned char>(bytes[16]) << 8) | static_cast<unsigned char>(bytes[17]);
        const int pages = static_cast<int>(bytes.size() / page_size);
        QVERIFY2(pages >= 8, "the store should span several pages");
        // A b-tree leaf page in the middle (byte 0: 0x0d table leaf, 0x0a index leaf; both have
        // the cell count at byte 3 and the cell pointers from byte 8).
        int page = pages / 2;
        const auto kind = [&](int p) { return static_cast<unsigned char>(bytes[qsizetype(p - 1) * page_size]); };
        while (kind(page) != 0x0d && kind(page) != 0x0a && page < pages) ++page;
        QVERIFY(kind(page) == 0x0d || kind(page) == 0x0a);
        const qsizetype at = qsizetype(page - 1) * page_size;
        if (damage == "half") bytes.truncate(bytes.size() / 2);
        if (damage == "last page") bytes.truncate(bytes.size() - page_size);
        if (damage == "flip header") bytes[at + 3] = static_cast<char>(bytes[at + 3] ^ 0x40); // the cell count
        if (damage == "flip cell") bytes[at + 8] = static_cast<char>(bytes[at + 8] ^ 0x80); // the first cell's offset
        QVERIFY(f.resize(0));
        QCOMPARE(f.write(bytes), bytes.size());
        f.close();
        const QStringList before = snapshot(dir.path());
        for (const OpenMode mode : {OpenMode::ReadOnly, OpenMode::ReadWrite, OpenMode::Create}) {
            const QString error = store_error_of([&] { RunStore store(path.toStdString(), mode); });
            QVERIFY2(error.contains(message), qPrintable(error));
            QVERIFY2(error.contains("'" + path + "'"), qPrintable(error));
            QCOMPARE(snapshot(dir.path()), before);
        }
    }

    // A store checked whole once in a process is not read whole again while it is unchanged:
    // the window read a 452-MB store for every Show in Monitor and every run it started (a
    // read-only audit: 0.9 s each). A changed file is checked again.
    void anUnchangedStoreIsCheckedOncePerProcess()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("once.sqlite").toStdString();
        make_two_run_store(path);
        const int64_t before = RunStore::quick_checks_run();
        for (int i = 0; i < 3; ++i) RunStore::open_read_only(path)->list_runs();
        QCOMPARE(RunStore::quick_checks_run(), before + 1);
        {
            RunStore store(path, OpenMode::ReadWrite); // unchanged still: no check
            QCOMPARE(RunStore::quick_checks_run(), before + 1);
            store.create_run("c", "p.json", "{}");
        } // the close checkpoints the WAL into the file
        RunStore::open_read_only(path)->list_runs();
        QCOMPARE(RunStore::quick_checks_run(), before + 2);
    }

    void createModeOnlyFillsAnEmptyOrAbsentFile()
    {
        QTemporaryDir dir;
        const QString empty = dir.filePath("empty.sqlite");
        QFile(empty).open(QIODevice::WriteOnly);
        { RunStore store(empty.toStdString()); }
        QCOMPARE(RunStore::open_read_only(empty.toStdString())->schema_version(), RunStore::kSchemaVersion);
        // A tableless SQLite file of another program is not ours to fill.
        const QString other = dir.filePath("other.sqlite");
        run_sql(other, "PRAGMA application_id=42; VACUUM;");
        const QByteArray before = file_hash(other);
        QVERIFY(store_error_of([&] { RunStore store(other.toStdString()); }).contains("another program"));
        QCOMPARE(file_hash(other), before);
    }

    void readOnlyOpenReadsOlderSchemasWithoutUpgrading_data()
    {
        QTest::addColumn<QString>("fixture");
        QTest::addColumn<int>("version");
        QTest::newRow("v1") << "run_store_v1.sql" << 1;
        QTest::newRow("v2") << "run_store_v2.sql" << 2;
    }
    void readOnlyOpenReadsOlderSchemasWithoutUpgrading()
    {
        QFETCH(QString, fixture);
        QFETCH(int, version);
        QFile sql(QString(MANTISSA_TEST_DATA_DIR) + "/" + fixture);
        QVERIFY(sql.open(QIODevice::ReadOnly));
        QTemporaryDir dir;
        const QString path = dir.filePath("old.sqlite");
        run_sql(path, sql.readAll().constData());
        const QStringList before = snapshot(dir.path());
        {
            const auto store = RunStore::open_read_only(path.toStdString());
            QCOMPARE(store->schema_version(), version);
            const auto runs = store->list_run_summaries();
            QVERIFY(!runs.empty());
            QVERIFY(runs[0].tags.empty());
            QVERIFY(store->tags(runs[0].id).empty());
            QVERIFY(store->all_tags().empty());
            RunFilter tagged;
            tagged.tags = {"x"};
            QVERIFY(store->list_run_summaries(tagged).empty());
            if (version == 1) QVERIFY(store->layer_stats(runs[0].id).empty());
            QCOMPARE(store->list_runs().size(), runs.size());
        }
        QCOMPARE(snapshot(dir.path()), before);
        RunStore upgraded(path.toStdString()); // a writable open upgrades it, as before
        QCOMPARE(upgraded.schema_version(), RunStore::kSchemaVersion);
    }

    void readOnlyMountIsReadAndWritingOpensSayReadOnly()
    {
        QTemporaryDir dir;
        const QString folder = dir.filePath("share");
        QVERIFY(QDir().mkpath(folder));
        const QString path = folder + "/runs.sqlite";
        make_two_run_store(path.toStdString());
        const QStringList before = snapshot(dir.path());
        if (!mount_read_only(folder)) QSKIP("cannot bind-mount read-only here (needs CAP_SYS_ADMIN)");
        std::optional<MountGuard> mounted;
        mounted.emplace(folder);
        for (const OpenMode mode : {OpenMode::Create, OpenMode::ReadWrite}) {
            const QString error = store_error_of([&] { RunStore store(path.toStdString(), mode); });
            QVERIFY2(error.contains("run store '" + path + "' is read-only (Read-only file system)"),
                     qPrintable(error));
        }
        // No store there yet: none to call read-only.
        const QString fresh = folder + "/new.sqlite";
        QCOMPARE(store_error_of([&] { RunStore store(fresh.toStdString(), OpenMode::Create); }),
                 "run store '" + fresh + "' cannot be created: its folder '" + folder +
                     "' cannot be written (Read-only file system)");
        try {
            RunStore store(path.toStdString(), OpenMode::ReadWrite);
        } catch (const StoreReadOnlyError&) {
        } // the type the GUI falls back on
        {
            const auto store = RunStore::open_read_only(path.toStdString());
            QCOMPARE(store->list_run_summaries().size(), size_t(2));
            QCOMPARE(store->scalars(store->list_runs()[0].id).size(), size_t(30));
        }
        mounted.reset();
        QCOMPARE(snapshot(dir.path()), before);
    }

    void fullDiskStillReadsAndSaysDiskFull()
    {
        QTemporaryDir dir;
        const QString fs = dir.filePath("small");
        QVERIFY(QDir().mkpath(fs));
        if (!mount_tmpfs(fs, "1m")) QSKIP("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
        const MountGuard mounted(fs);
        const std::string path = (fs + "/runs.sqlite").toStdString();
        make_two_run_store(path);
        fill_disk(fs + "/filler");
        {
            const auto store = RunStore::open_read_only(path);
            QCOMPARE(store->list_run_summaries().size(), size_t(2));
        }
        const QString error = store_error_of([&] { RunStore store(path, OpenMode::ReadWrite); });
        QVERIFY2(error.contains("disk full"), qPrintable(error));
        QVERIFY2(!error.contains("not a"), qPrintable(error));
    }

    void writerSurvivesAFullDiskAndFinishRunSaysSo()
    {
        QTemporaryDir dir;
        const QString fs = dir.filePath("small");
        QVERIFY(QDir().mkpath(fs));
        if (!mount_tmpfs(fs, "1m")) QSKIP("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
        const MountGuard mounted(fs);
        const std::string path = (fs + "/runs.sqlite").toStdString();
        int64_t id = 0;
        {
            RunStore store(path);
            id = store.create_run("big", "", "{}");
            QCOMPARE(store.last_write_error(), std::string());
            fill_disk(fs + "/filler");
            for (int64_t step = 1; step <= 20000; ++step) store.append_scalar(id, step, "train/loss", 1.0);
            store.flush(); // the batch fails; the process goes on
            QVERIFY2(QString::fromStdString(store.last_write_error()).contains("disk full"),
                     store.last_write_error().c_str());
            const QString error = store_error_of([&] { store.finish_run(id, RunStatus::Finished); });
            QVERIFY2(error.contains("cannot record run " + QString::number(id) + " as finished: disk full"),
                     qPrintable(error));
        }
        QFile::remove(fs + "/filler");
        RunStore later(path);
        QCOMPARE(status_text(later.find_run(std::to_string(id))->status), std::string("interrupted")); // never "running"
    }

    // A TensorBoard export small enough to sit in the stream's buffer meets the full disk only
    // when it is flushed: that must still be an error, and no cut file is left.
    void tensorboardExportToAFullDiskSaysSo()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        RunStore store(path);
        const auto id = store.create_run("small", "", "{}");
        for (int64_t step = 1; step <= 3; ++step) store.append_scalar(id, step, "train/loss", 1.0 / double(step));
        store.flush();
        const QString fs = dir.filePath("small");
        QVERIFY(QDir().mkpath(fs));
        if (!mount_tmpfs(fs, "1m")) QSKIP("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
        const MountGuard mounted(fs);
        fill_disk(fs + "/filler");
        QString error = "no error";
        try {
            export_tensorboard(store, id, (fs + "/tb").toStdString());
        } catch (const ExportWriteError& e) { // the output's problem, not the store's
            error = QString::fromStdString(e.what());
        }
        QVERIFY2(error.startsWith("cannot write '" + fs + "/tb/run1-small/events.out.tfevents."), qPrintable(error));
        QCOMPARE(QDir(fs + "/tb/run1-small").entryList(QDir::Files | QDir::Hidden), QStringList()); // no partial file either
        QVERIFY(!QDir(fs + "/tb").exists()); // nor the folders it made for the file
        // A folder that was there before stays (empty, as it was).
        QVERIFY(QDir().mkpath(fs + "/mine"));
        QVERIFY_THROWS_EXCEPTION(ExportWriteError, export_tensorboard(store, id, (fs + "/mine").toStdString()));
        QVERIFY(QDir(fs + "/mine").exists());
        QVERIFY(!QDir(fs + "/mine/run1-small").exists());
    }

    void twoStoresOnOneFileBothWrite()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("shared.sqlite").toStdString();
        RunStore a(path), b(path);
        const auto ra = a.create_run("a", "", "{}");
        const auto rb = b.create_run("b", "", "{}");
        for (int i = 1; i <= 500; ++i) {
            a.append_scalar(ra, i, "train/loss", 1.0);
            b.append_scalar(rb, i, "train/loss", 2.0);
        }
        a.flush();
        b.flush();
        QCOMPARE(a.scalars(rb).size(), size_t(500));
        QCOMPARE(b.scalars(ra).size(), size_t(500));
    }

    // A resume deletes the killed attempt's newest events (samples, alerts); the events after
    // it must still get ids above every id ever given, or a reader that follows the run by
    // "events after id N" (the remote mirror) never sees them. Also for a store of schema 4,
    // whose upgrade keeps every event and its id.
    void eventIdsAreNeverGivenTwice_data()
    {
        QTest::addColumn<bool>("fromV4");
        QTest::newRow("new store") << false;
        QTest::newRow("upgraded from v4") << true;
    }
    void eventIdsAreNeverGivenTwice()
    {
        QFETCH(bool, fromV4);
        QTemporaryDir dir;
        const std::string path = dir.filePath("ids.sqlite").toStdString();
        int64_t run = 1;
        if (fromV4) {
            QVERIFY(load_store_fixture(path, "run_store_v4.sql"));
        }
        RunStore store(path);
        QCOMPARE(store.schema_version(), RunStore::kSchemaVersion);
        if (!fromV4) {
            run = store.create_run("r", "", "{}");
            for (const auto kind : {EventKind::RunStarted, EventKind::Checkpoint, EventKind::RunFinished}) {
                RunEvent e;
                e.kind = kind;
                e.step = kind == EventKind::RunStarted ? 0 : kind == EventKind::Checkpoint ? 2 : 3;
                store.append_event(run, e);
            }
            RunEvent sample;
            sample.kind = EventKind::Sample;
            sample.step = 3;
            sample.text = "To be, or not";
            store.append_event(run, sample);
            store.flush();
        }
        auto ids = [&] {
            std::vector<int64_t> out;
            for (const auto& e : store.events_after(run, 0, 100)) out.push_back(e.id);
            return out;
        };
        QCOMPARE(ids(), (std::vector<int64_t>{1, 2, 3, 4}));
        if (fromV4) QCOMPARE(store.events(run)[3].event.text, std::string("To be, or not"));

        store.discard_steps_after(run, 2); // the sample of step 3, id 4, goes
        QCOMPARE(ids(), (std::vector<int64_t>{1, 2, 3}));
        RunEvent resumed;
        resumed.kind = EventKind::ResumedFromCheckpoint;
        resumed.step = 2;
        store.append_event(run, resumed);
        store.flush();
        QCOMPARE(ids(), (std::vector<int64_t>{1, 2, 3, 5}));
        QCOMPARE(store.events_after(run, 4, 100).size(), size_t(1));
    }

    // Another connection holding the write lock past the busy timeout (5 s; a large run
    // deleted by another process) delays the rows; it loses none of them.
    void aHeldWriteLockDelaysRowsAndLosesNone()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("held.sqlite").toStdString();
        RunStore store(path);
        const auto id = store.create_run("live", "", "{}");
        sqlite3* other = nullptr;
        QCOMPARE(sqlite3_open(path.c_str(), &other), SQLITE_OK);
        QCOMPARE(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
        for (int i = 1; i <= 300; ++i) store.append_scalar(id, i, "train/loss", 1.0 / i);
        std::thread release([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(6500)); // past one busy timeout
            sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
        });
        store.flush(); // waits through the held lock
        release.join();
        QCOMPARE(store.last_write_error(), std::string());
        const auto rows = store.series(id, "train/loss");
        QCOMPARE(rows.size(), size_t(300));
        QCOMPARE(rows.back().second, 1.0 / 300);
        // So do a run's start, its checkpoints and its end: each tried once, a run failed at its
        // start with "database is locked", and a checkpoint went unrecorded.
        QCOMPARE(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
        std::thread release_again([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(6500));
            sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr);
        });
        const auto second = store.create_run("second", "", "{}");
        release_again.join();
        sqlite3_close(other);
        store.record_checkpoint({second, 10, "/x/step-00000010.pt", "00", 1});
        store.finish_run(second, RunStatus::Finished);
        QCOMPARE(store.checkpoints(second).size(), size_t(1));
        QCOMPARE(status_text(store.find_run(std::to_string(second))->status), std::string("finished"));
    }

    // A reader sees a step's rows all or none: the GUI's follower hands on the newest step once
    // it has its metrics, and rows committed after that never reached the window. Row by row, the
    // writer woke at 4096 queued rows and committed in the middle of this step's gradient norms.
    void aStepsRowsAreCommittedTogether()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("units.sqlite").toStdString();
        RunStore store(path);
        const auto id = store.create_run("wide", "", "{}");
        StepMetrics m;
        for (int i = 0; i < 5000; ++i) m.layer_grad_norms.emplace_back("layer" + std::to_string(i), 1.0);
        const int64_t per_step = 6 + 5000;
        sqlite3* reader = nullptr;
        QCOMPARE(sqlite3_open_v2(path.c_str(), &reader, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
        sqlite3_stmt* count = nullptr;
        QCOMPARE(sqlite3_prepare_v2(reader, "SELECT step, count(*) FROM scalars GROUP BY step", -1, &count, nullptr),
                 SQLITE_OK);
        std::atomic<bool> done{false};
        std::thread training([&] {
            StoreSink sink(store, id);
            for (m.step = 1; m.step <= 20; ++m.step) sink.on_step(m);
            store.flush();
            done = true;
        });
        std::vector<std::pair<int64_t, int64_t>> torn;
        int reads = 0;
        for (bool last = false; !last; ++reads) {
            last = done;
            while (sqlite3_step(count) == SQLITE_ROW)
                if (sqlite3_column_int64(count, 1) != per_step)
                    torn.emplace_back(sqlite3_column_int64(count, 0), sqlite3_column_int64(count, 1));
            sqlite3_reset(count);
        }
        training.join();
        sqlite3_finalize(count);
        sqlite3_close(reader);
        if (!torn.empty())
            QFAIL(qPrintable(QString("step %1 read with %2 of its %3 rows (%4 reads)")
                                 .arg(torn[0].first).arg(torn[0].second).arg(per_step).arg(reads)));
        QCOMPARE(store.scalars(id).size(), size_t(20 * per_step));
    }

    // A run's events are followed by id ("after id N": the window's follower every 200 ms, the
    // store server per request) through an index of their own: a seek, with nothing sorted. It
    // sorted every event of the run each time (38 ms an idle poll at 520,000 events). A store
    // without the index (an older version's) gains it at its first open for writing and keeps
    // schema 5, so older versions still open it.
    void eventsAreFollowedThroughAnIndex()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("e.sqlite").toStdString();
        const auto query = [&](const std::string& sql) {
            sqlite3* db = nullptr;
            sqlite3_open(path.c_str(), &db);
            sqlite3_stmt* s = nullptr;
            std::string out;
            if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK)
                while (sqlite3_step(s) == SQLITE_ROW) // the last column: EXPLAIN QUERY PLAN's detail
                    out += reinterpret_cast<const char*>(sqlite3_column_text(s, sqlite3_column_count(s) - 1)) +
                           std::string(";");
            sqlite3_finalize(s);
            sqlite3_close(db);
            return out;
        };
        const std::string plan = "EXPLAIN QUERY PLAN SELECT id, step, kind, message, created_at, fields FROM events "
                                 "WHERE run_id=1 AND id>5 ORDER BY id LIMIT 1000";
        {
            RunStore store(path);
            store.append_event(store.create_run("a", "", "{}"), text_event(1, "sample", "x"));
        }
        QCOMPARE(query(plan), std::string("SEARCH events USING INDEX events_by_run_id (run_id=? AND id>?);"));
        query("DROP INDEX events_by_run_id");
        QCOMPARE(query(plan),
                 std::string("SEARCH events USING INDEX events_by_run (run_id=?);USE TEMP B-TREE FOR ORDER BY;"));
        {
            RunStore read_only(path, OpenMode::ReadOnly); // reads as before, changes nothing
            QCOMPARE(read_only.schema_version(), 5);
        }
        QCOMPARE(query("SELECT count(*) FROM sqlite_master WHERE name='events_by_run_id'"), std::string("0;"));
        { RunStore store(path); }
        QCOMPARE(query(plan), std::string("SEARCH events USING INDEX events_by_run_id (run_id=? AND id>?);"));
        QCOMPARE(query("PRAGMA user_version"), std::string("5;"));
    }

    // A page of layer statistics finds the run's tensors in a few seeks each, however long the
    // run: a row-value seek stepped through every row of a tensor, so a follower of a
    // 20,000-step run read it whole on every poll (a read-only audit: 185 ms a page).
    void aLayerPageFindsTheTensorsWithoutReadingTheRun()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("p.sqlite").toStdString());
        const auto write = [&](int64_t run, int64_t steps) {
            for (int64_t s = 1; s <= steps; ++s)
                for (const char* layer : {"blocks.0.attn.qkv", "blocks.0.mlp.fc1", "lm_head"})
                    for (const char* role : {"grad_output", "input", "weight"}) {
                        TensorStats t;
                        t.layer = layer;
                        t.role = role;
                        t.format = "bf16";
                        t.amax = double(s);
                        t.first_exponent = -3;
                        t.exponent_counts = {1, 2, int64_t(s)};
                        store.append_layer_stats(run, s, t);
                    }
        };
        const int64_t shortRun = store.create_run("short", "p.json", "{}");
        const int64_t longRun = store.create_run("long", "p.json", "{}");
        write(shortRun, 3);
        write(longRun, 3000);
        const auto shortPage = store.layer_stats_page(shortRun, 0, 1000);
        const auto longPage = store.layer_stats_page(longRun, 2999, 1000);
        QCOMPARE(shortPage.rows.size(), size_t(27));
        QCOMPARE(longPage.rows.size(), size_t(18)); // steps 2999 and 3000
        std::vector<std::string> tensors;
        for (const auto& [step, t] : longPage.rows)
            if (step == 3000) tensors.push_back(t.layer + "/" + t.role);
        QCOMPARE(tensors, (std::vector<std::string>{"blocks.0.attn.qkv/grad_output", "blocks.0.attn.qkv/input",
                                                    "blocks.0.attn.qkv/weight", "blocks.0.mlp.fc1/grad_output",
                                                    "blocks.0.mlp.fc1/input", "blocks.0.mlp.fc1/weight",
                                                    "lm_head/grad_output", "lm_head/input", "lm_head/weight"}));
        QVERIFY2(longPage.tensor_lookup_steps <= 2 * shortPage.tensor_lookup_steps, // 210 and 212 seen
                 qPrintable(QString("%1 VM steps for 3,000 steps a tensor, %2 for 3")
                                .arg(longPage.tensor_lookup_steps)
                                .arg(shortPage.tensor_lookup_steps)));
        QVERIFY(shortPage.tensor_lookup_steps > 0);

        // The Compare page's heatmap reads one role, without the histograms.
        const auto all = store.layer_stats(shortRun);
        const auto inputs = store.layer_stats_without_histograms(shortRun, "input");
        QCOMPARE(all.size(), size_t(27));
        QCOMPARE(inputs.size(), size_t(9));
        size_t k = 0;
        for (const auto& [step, t] : all) {
            if (t.role != "input") continue;
            QCOMPARE(inputs[k].first, step);
            QCOMPARE(inputs[k].second.layer, t.layer);
            QCOMPARE(inputs[k].second.amax, t.amax);
            QCOMPARE(inputs[k].second.first_exponent, -3);
            QCOMPARE(t.exponent_counts, (std::vector<int64_t>{1, 2, step}));
            QVERIFY(inputs[k].second.exponent_counts.empty());
            ++k;
        }
        QCOMPARE(k, size_t(9));
    }

    // A file replaced whole keeps its mode: a 0640 export came back 0644 (the temporary's).
    void aReplacedFileKeepsItsMode()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("m.csv").toStdString();
        replace_file_durably(path, "a\n");
        QVERIFY(::chmod(path.c_str(), 0640) == 0);
        replace_file_durably(path, "b\n");
        struct stat st {};
        QVERIFY(::stat(path.c_str(), &st) == 0);
        QCOMPARE(st.st_mode & 07777, mode_t(0640));
        std::ifstream in(path);
        std::string line;
        QVERIFY(std::getline(in, line) && line == "b");
    }

    void twoWritersOfOneFileEachReplaceItWhole()
    {
        // Two runs checkpointing the same step into one folder, or two exports to one name: each
        // writes its own temporary file, so whichever commits last is there, whole.
        QTemporaryDir dir;
        const std::string path = dir.filePath("step-00000010.pt").toStdString();
        const auto read = [&] {
            std::ifstream in(path, std::ios::binary);
            return std::string(std::istreambuf_iterator<char>(in), {});
        };
        DurableFile first(path), second(path);
        first.write("the first writer's checkpoint");
        second.write("the second's");
        first.commit();
        QCOMPARE(read(), std::string("the first writer's checkpoint"));
        second.commit();
        QCOMPARE(read(), std::string("the second's"));
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files), QStringList{"step-00000010.pt"});
        {
            DurableFile abandoned(path); // an error on the way: no commit
            abandoned.write("half");
        }
        QCOMPARE(read(), std::string("the second's"));
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files), QStringList{"step-00000010.pt"});
    }

    void temporariesOfADeadWriterAreRemoved()
    {
        QTemporaryDir dir;
        char host[256] = {};
        QCOMPARE(::gethostname(host, sizeof host - 1), 0);
        const pid_t dead = ::fork(); // a process that is gone by the time the folder is cleaned
        if (dead == 0) ::_exit(0);
        QVERIFY(dead > 0);
        int status = 0;
        QCOMPARE(::waitpid(dead, &status, 0), dead);
        const auto name = [&](const std::string& who, long pid) {
            return "step-00000010.pt.tmp." + who + "." + std::to_string(pid) + ".0";
        };
        const std::vector<std::string> kept = {name(host, long(::getpid())), name(std::string(host) + "-other", long(dead)),
                                               "step-00000010.pt", "notes.tmp.txt"};
        for (const auto& f : kept) std::ofstream(dir.filePath(QString::fromStdString(f)).toStdString()) << "x";
        std::ofstream(dir.filePath(QString::fromStdString(name(host, long(dead)))).toStdString()) << "cut short";
        remove_stale_temporaries(dir.path().toStdString());
        QStringList expected;
        for (const auto& f : kept) expected << QString::fromStdString(f);
        expected.sort();
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files, QDir::Name), expected);
        // A DurableFile's own temporary file carries this host and process.
        DurableFile open(dir.filePath("x.pt").toStdString());
        const QStringList open_ones = QDir(dir.path()).entryList({"x.pt.tmp.*"}, QDir::Files);
        QCOMPARE(open_ones.size(), 1);
        QVERIFY2(open_ones[0].startsWith(QString("x.pt.tmp.%1.%2.").arg(host).arg(::getpid())), qPrintable(open_ones[0]));
        remove_stale_temporaries(dir.path().toStdString());
        QCOMPARE(QDir(dir.path()).entryList({"x.pt.tmp.*"}, QDir::Files).size(), 1); // alive: left
    }

    void aRunTrainingElsewhereIsNotDeletedUnderIt()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        RunStore training(path); // as a mantissa-train process would hold it
        const auto id = training.create_run("busy", "", "{}");
        RunStore other(path);
        try {
            other.delete_run(id);
            QFAIL("a run that another store has claimed was deleted");
        } catch (const StoreError& e) {
            QCOMPARE(std::string(e.what()), std::string("run 1 is in use by another process: stop it first"));
        }
        QVERIFY(other.find_run("1"));
        training.finish_run(id, RunStatus::Finished); // drops the claim
        other.delete_run(id);
        QVERIFY(!other.find_run("1"));
    }

    // A process that releases its claim unlinks the lock file and then closes it. Another one
    // that opened the file just before the unlink locks it just after: that lock is on a file
    // no longer at the path, and the next claimer would make a new file there and lock it too.
    void aLockOnAnUnlinkedLockFileIsTakenAgainOnTheFileAtThePath()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("run-1.lock").toStdString();
        std::ofstream(path).put('\n');
        int opens = 0;
        const RunLockFile first = lock_run_file(path, RunLockKind::Exclusive, /*create=*/true, [&] {
            if (opens++ == 0) std::filesystem::remove(path); // the releasing process's unlink
        });
        QCOMPARE(int(first.state), int(RunLockFile::State::Locked));
        QCOMPARE(opens, 2);
        struct stat at_path {}, locked {};
        QCOMPARE(::stat(path.c_str(), &at_path), 0);
        QCOMPARE(::fstat(first.fd, &locked), 0);
        QCOMPARE(locked.st_ino, at_path.st_ino);
        const RunLockFile second = lock_run_file(path, RunLockKind::Exclusive, /*create=*/true);
        QCOMPARE(int(second.state), int(RunLockFile::State::Held));
        const RunLockFile reader = lock_run_file(path, RunLockKind::Shared, /*create=*/false);
        QCOMPARE(int(reader.state), int(RunLockFile::State::Held));
        release_run_file(path, first.fd);
        QVERIFY(!std::filesystem::exists(path));
        QCOMPARE(int(lock_run_file(path, RunLockKind::Shared, /*create=*/false).state), int(RunLockFile::State::Missing));
    }

    // A new run's lock is taken before its row is written: a "running" row whose lock nobody
    // holds is a dead run's to every other process that opens the store, which marks it
    // interrupted (and unlinks its lock file) in the moment between the two. An id whose lock
    // file is held (a claim of a run deleted meanwhile) is passed over.
    void aNewRunIsLockedBeforeItsRowExists()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        RunStore store(path);
        std::filesystem::create_directories(path + ".locks");
        const RunLockFile squatter =
            lock_run_file(path + ".locks/run-1.lock", RunLockKind::Exclusive, /*create=*/true);
        QCOMPARE(int(squatter.state), int(RunLockFile::State::Locked));
        QCOMPARE(store.create_run("a", "", "{}"), int64_t(2));
        QVERIFY(!store.find_run("1"));
        QCOMPARE(status_text(store.find_run("2")->status), std::string("running"));
        RunStore other(path); // opening marks dead runs; this one is alive
        QCOMPARE(status_text(other.find_run("2")->status), std::string("running"));
        release_run_file(path + ".locks/run-1.lock", squatter.fd);
    }

    // A start-over (killed before its first checkpoint) is the run started once: only the
    // user's own precision changes are left for the new attempt to make again.
    void aStartOverKeepsOnlyTheUsersPrecisionChanges()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("runs.sqlite").toStdString());
        const auto id = store.create_run("r", "p.json", "{}");
        for (const int64_t step : {0, 3})
            record_step(store, id, step, {"run_started", "memory_estimate", "layer_backends", "sample", "paused"});
        store.record_checkpoint({id, 3, dir.filePath("step-3.pt").toStdString(), "00", 1});
        store.flush();

        store.start_run_over(id);
        std::vector<std::string> kept;
        for (const auto& e : store.events(id))
            kept.push_back(std::to_string(e.step) + " " + e.kind + " " + std::string(change_cause_name(e.event.cause)));
        QCOMPARE(kept, (std::vector<std::string>{"0 precision_changed user", "3 precision_changed user"}));
        QVERIFY(store.series(id, "train/loss").empty());
        QVERIFY(store.layer_stats(id).empty());
        QVERIFY(store.checkpoints(id).empty());
        QCOMPARE(store.list_runs().size(), size_t(1));
    }

    // A run resumed from its checkpoint at step 10 trains the steps after it again: what they
    // recorded goes (each is recorded again, once), what happened to the run stays, and a
    // replica drops the same rows when the resume's event (which says so) reaches it.
    void aResumeDropsWhatTheStepsAfterItsCheckpointRecorded()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("runs.sqlite").toStdString());
        const auto id = store.create_run("r", "p.json", "{}");
        const std::vector<std::string> tags{"run_started", "memory_estimate", "resumed_from_checkpoint", "sample",
                                            "paused", "resumed", "checkpoint", "checkpoint_skipped",
                                            "checkpoint_failed", "checkpoint_damaged", "checkpoint_unrecorded",
                                            "layer_backends", "loss_scale_backoff", "loss_scale_growth",
                                            "step_skipped", "alert_spikes", "watch_action", "run_finished",
                                            "run_stopped", "run_failed", "a_newer_kind"};
        for (const int64_t step : {5, 10, 11, 20}) record_step(store, id, step, tags);
        store.flush();
        const auto source_rows = store.events_after(id, 0, 1000);
        const auto kept_after_10 = [](RunStore& s, int64_t run) {
            std::vector<std::string> kept;
            for (const auto& e : s.events(run))
                if (e.step > 10)
                    kept.push_back(std::to_string(e.step) + " " + e.kind +
                                   (e.event.kind == EventKind::PrecisionChanged
                                        ? " " + std::string(change_cause_name(e.event.cause))
                                        : ""));
            return kept;
        };
        std::vector<std::string> history;
        for (const int64_t step : {11, 20})
            for (const auto& tag : {"run_started", "memory_estimate", "resumed_from_checkpoint", "paused", "resumed",
                                    "checkpoint", "checkpoint_skipped", "checkpoint_failed", "checkpoint_damaged",
                                    "checkpoint_unrecorded", "run_finished", "run_stopped", "run_failed",
                                    "a_newer_kind", "precision_changed user"})
                history.push_back(std::to_string(step) + " " + tag);

        store.discard_steps_after(id, 10);
        QCOMPARE(kept_after_10(store, id), history);
        QCOMPARE(store.series(id, "train/loss"), (Series{{5, 5.0}, {10, 10.0}}));
        QCOMPARE(store.layer_stats(id).size(), size_t(2));
        // Steps 5 and 10 whole, but for step 10's replay by an earlier resume, which this one
        // makes again (its replays start at the checkpoint's own boundary).
        QCOMPARE(store.events(id).size(), 2 * (tags.size() + 3) - 1 + history.size());

        // The replica held every row of before; the page that brings the resume's event
        // brings rows of the steps trained again, which stay.
        RunStore replica(dir.filePath("replica.sqlite").toStdString());
        replica.put_mirrored_run(store.list_runs().at(0), {});
        replica.put_mirrored_rows(id, {{5, "train/loss", 5.0}, {10, "train/loss", 10.0}, {11, "train/loss", 11.0},
                                       {20, "train/loss", 20.0}},
                                  source_rows);
        const int64_t next = source_rows.back().id + 1;
        const std::vector<StoredEventRow> page{
            {next, 10, "resumed_from_checkpoint", "continuing", "", R"({"later_steps_dropped":true})"},
            {next + 1, 11, "loss_scale_growth", "scale 1 -> 2", "", "{}"}};
        replica.put_mirrored_rows(id, {{11, "train/loss", 11.5}}, page);
        auto want = history;
        want.push_back("11 loss_scale_growth"); // events come by id
        QCOMPARE(kept_after_10(replica, id), want);
        QCOMPARE(replica.series(id, "train/loss"), (Series{{5, 5.0}, {10, 10.0}, {11, 11.5}}));

        // A source written by an older version kept the steps after its resumes, and its
        // resume event does not say it dropped them: a replica of it keeps them too.
        RunStore older(dir.filePath("older.sqlite").toStdString());
        older.put_mirrored_run(store.list_runs().at(0), {});
        older.put_mirrored_rows(id, {{5, "train/loss", 5.0}, {20, "train/loss", 20.0}}, source_rows);
        auto old_page = page;
        old_page.front().fields = R"({"path":"step-10.pt"})";
        older.put_mirrored_rows(id, {{11, "train/loss", 11.5}}, old_page);
        QCOMPARE(older.series(id, "train/loss"), (Series{{5, 5.0}, {11, 11.5}, {20, 20.0}}));
        QCOMPARE(older.events(id).size(), source_rows.size() + old_page.size());

        // A resume whose settings superseded the interrupted run's live changes dropped those
        // too (from its own step on), and a replica follows it.
        RunStore superseding(dir.filePath("superseding.sqlite").toStdString());
        superseding.put_mirrored_run(store.list_runs().at(0), {});
        superseding.put_mirrored_rows(id, {{5, "train/loss", 5.0}, {20, "train/loss", 20.0}}, source_rows);
        auto superseding_page = page;
        superseding_page.front().fields = R"({"later_steps_dropped":true,"live_changes_superseded":true})";
        superseding.put_mirrored_rows(id, {{11, "train/loss", 11.5}}, superseding_page);
        auto without_live_changes = want;
        std::erase_if(without_live_changes, [](const std::string& s) { return s.ends_with("precision_changed user"); });
        QCOMPARE(without_live_changes.size(), want.size() - 2);
        QCOMPARE(kept_after_10(superseding, id), without_live_changes);
    }

    void aDeletedRunsIdIsNotHandedOutWhileItsCheckpointFolderHoldsFiles()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        RunStore store(path);
        const auto first = store.create_run("a", "", "{}");
        const auto second = store.create_run("b", "", "{}");
        store.finish_run(second, RunStatus::Finished);
        std::filesystem::create_directories(store.checkpoint_dir(second));
        std::ofstream(store.checkpoint_dir(second) + "/notes.txt") << "not a checkpoint";
        store.delete_run(second);
        // A folder without checkpoint files is no obstacle: SQLite's next id is taken.
        const auto third = store.create_run("c", "", "{}");
        QCOMPARE(third, second);
        store.finish_run(third, RunStatus::Finished);
        std::ofstream(store.checkpoint_dir(third) + "/step-00000010.pt") << "left behind";
        store.delete_run(third);
        const auto fourth = store.create_run("d", "", "{}");
        QCOMPARE(fourth, second + 1);
        QCOMPARE(first, int64_t(1));
    }
};

QTEST_GUILESS_MAIN(TestStore)
#include "test_store.moc"
