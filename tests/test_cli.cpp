// SPDX-License-Identifier: GPL-3.0-or-later
// mantissa-train end to end: run, list, show, export, sweep, compare, tags, bad input, and Ctrl-C.

#include <QtTest>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QCryptographicHash>
#include <QDirIterator>
#include <QFileInfo>
#include <QDateTime>
#include <QProcess>
#include <QTemporaryDir>

#include <cmath>
#include <limits>
#include <optional>
#include <regex>
#include <csignal>
#include <utility>

#include <sqlite3.h>
#include <sys/stat.h>

#include "event_helpers.h"
#include "cli_process.h"
#include "cli_table.h"
#include "run_store.h"
#include "project_config.h"

using namespace mantissa;

namespace {

using Result = CliResult;

// Runs mantissa-train inside its own mount namespace, after `setup` (a sh script that gets
// `dir` as $1) has mounted something at dir. Exit code 97: the setup was not permitted here.
Result run_cli_mounted(const QString& setup, const QString& dir, const QStringList& args)
{
    return run_program("unshare", QStringList{"-m", "sh", "-c", setup + " || exit 97; shift; exec \"$@\"", "sh", dir,
                                              MANTISSA_TRAIN_EXE} + args);
}

const QString kReadOnlyBind = "mount --bind \"$1\" \"$1\" && mount -o remount,bind,ro \"$1\"";

// Every entry under `dir` with a hash of each file: "nothing changed", byte for byte and
// entry for entry.
QStringList snapshot(const QString& dir)
{
    QStringList out;
    QDirIterator it(dir, QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot,
                    QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString path = it.next();
        QFile f(path);
        const QByteArray hash = f.open(QIODevice::ReadOnly)
                                    ? QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256).toHex()
                                    : QByteArray("-");
        out << path + " " + QString::fromLatin1(hash);
    }
    out.sort();
    return out;
}

// Two finished runs with metrics and an event, written through the store API; closed, so the
// file stands alone.
void make_store(const QString& path)
{
    RunStore store(path.toStdString());
    for (const char* name : {"a", "b"}) {
        const auto id = store.create_run(name, "p.json", R"({"training": {"steps": 10}})");
        for (int64_t step = 1; step <= 10; ++step) store.append_scalar(id, step, "train/loss", 2.0 - 0.01 * step);
        store.append_event(id, text_event(10, "note", "done"));
        store.finish_run(id, RunStatus::Finished);
    }
}

// A store (make_store) in `dir`, and the empty folder "small" beside it, where a test mounts a
// small file system and copies the store into it.
std::pair<QString, QString> store_and_mount_point(const QTemporaryDir& dir)
{
    const QString source = dir.filePath("runs.sqlite");
    make_store(source);
    const QString fs = dir.filePath("small");
    QDir().mkpath(fs);
    return {source, fs};
}

const QList<QStringList> kReadingCommands = {
    {"list"}, {"show", "1"}, {"export", "1"}, {"compare", "1", "2"}};

const char* kTinyProject = R"({
  "name": "tiny",
  "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context_length": 16},
  "data": {"kind": "synthetic-addition", "digits": 2, "examples": 600},
  "training": {"steps": 20, "batch_size": 4, "seed": 7},
  "eval": {"interval": 10, "batches": 2},
  "telemetry": {"log_interval": 5}
})";

} // namespace

class TestCli : public QObject {
    Q_OBJECT
private:
    QTemporaryDir dir_;
    QString project_, db_;

private slots:
    void initTestCase()
    {
        project_ = dir_.filePath("tiny.json");
        QFile f(project_);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(kTinyProject);
        db_ = dir_.filePath("runs.sqlite");
    }

    void runSavesTheRun()
    {
        const auto r = run_cli({"run", project_, "--db", db_, "--name", "first", "--set", "training.steps=15"});
        QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
        QVERIFY2(r.out.contains("finished after 15 steps"), qPrintable(r.out));
        QVERIFY(r.out.contains("step 15/15 loss"));  // plain log lines when not on a terminal
        QVERIFY(r.out.contains("eval step 10: val loss"));
        QVERIFY(!r.out.contains('\r'));
        RunStore store(db_.toStdString());
        const auto run = store.find_run("first");
        QVERIFY(run.has_value());
        QCOMPARE(status_text(run->status), std::string("finished"));
        QCOMPARE(run->last_step, int64_t(15));
        QVERIFY(run->config_json.find("\"steps\": 15") != std::string::npos); // the resolved config
    }

    // A mistyped command is named, with the commands there are (CLI11 alone said "A subcommand
    // is required"); a usage error, exit 2.
    void unknownCommandIsNamed()
    {
        QTemporaryDir dir;
        const auto r = run_cli({"--db", dir.filePath("runs.sqlite"), "trian", "projects/default.json"}, 120000, dir.path());
        QCOMPARE(r.exit_code, 2);
        QVERIFY2(r.err.startsWith("error: unknown command 'trian' (the commands are run, "), qPrintable(r.err));
        QVERIFY2(r.err.contains(", resume, ") && r.err.contains(", compare)\n"), qPrintable(r.err));
        QVERIFY(!QFile::exists(dir.filePath("runs.sqlite")));
        // A known command with a mistake of its own keeps CLI11's message.
        const auto known = run_cli({"run"}, 120000, dir.path());
        QCOMPARE(known.exit_code, 2);
        QVERIFY2(!known.err.contains("unknown command"), qPrintable(known.err));
    }

    void listShowAndExport()
    {
        const auto list = run_cli({"list", "--db", db_});
        QCOMPARE(list.exit_code, 0);
        QVERIFY2(list.out.contains("first") && list.out.contains("finished"), qPrintable(list.out));

        const auto show = run_cli({"show", "first", "--db", db_});
        QCOMPARE(show.exit_code, 0);
        QVERIFY(show.out.contains("status: finished"));
        QVERIFY(show.out.contains("run_finished"));
        {
            // The losses of the last step that has each.
            RunStore store(db_.toStdString(), OpenMode::ReadOnly);
            const int64_t id = store.find_run("first")->id;
            const auto train = store.series(id, "train/loss"), val = store.series(id, "val/loss");
            QVERIFY(train.size() > 1 && val.size() > 1);
            QVERIFY2(show.out.contains(QString::asprintf("last train loss: %.4f\nlast val loss: %.4f (step %lld)\n",
                                                         train.back().second, val.back().second,
                                                         static_cast<long long>(val.back().first))),
                     qPrintable(show.out));
        }

        const QString csv_path = dir_.filePath("m.csv");
        const auto exp = run_cli({"export", "first", "--format", "csv", "--out", csv_path, "--db", db_});
        QCOMPARE(exp.exit_code, 0);
        QFile csv(csv_path);
        QVERIFY(csv.open(QIODevice::ReadOnly));
        const QStringList lines = QString::fromUtf8(csv.readAll()).split('\n', Qt::SkipEmptyParts);
        QCOMPARE(lines.size(), 1 + 16); // header + steps 0..15
        QVERIFY(lines[0].startsWith("step,train/loss,val/loss"));
        QVERIFY(lines[1].startsWith("0,,"));   // step 0 has only the initial evaluation
        QVERIFY(lines[16].startsWith("15,"));

        // One line per event: a sample's line breaks show as the Monitor's log shows them.
        const QString db = dir_.filePath("show-sample.sqlite");
        QVERIFY(QFile::copy(db_, db));
        {
            RunStore store(db.toStdString(), OpenMode::ReadWrite);
            store.append_event(store.find_run("first")->id, text_event(15, "sample", "12+30=42\n7+8=15\n"));
        }
        const auto sample = run_cli({"show", "first", "--db", db});
        // The kinds' column is as wide as the longest kind shown, memory_estimate's 15 here.
        const QString line = QString::fromUtf8("  step     15  sample           12+30=42 \u21b5 7+8=15 \u21b5 \n");
        QVERIFY2(sample.out.contains(line), qPrintable(sample.out));

        const auto missing = run_cli({"show", "nosuchrun", "--db", db_});
        QCOMPARE(missing.exit_code, 2);
        QVERIFY(missing.err.contains("no run 'nosuchrun'"));
    }

    // Output sent to a standard output that cannot be written (a full disk behind `> m.csv`)
    // fails, as a failed --out does: a cut table or listing must not read as a whole one.
    void aStandardOutputThatCannotBeWrittenFails_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::newRow("export") << QStringList{"export", "first", "--format", "csv"};
        QTest::newRow("list") << QStringList{"list"};
        QTest::newRow("show") << QStringList{"show", "first"};
    }

    void aStandardOutputThatCannotBeWrittenFails()
    {
        QFETCH(QStringList, args);
        QProcess p;
        p.setStandardOutputFile(QStringLiteral("/dev/full"));
        p.start(MANTISSA_TRAIN_EXE, args + QStringList{"--db", db_});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 2);
        QVERIFY2(QString::fromUtf8(p.readAllStandardError())
                     .startsWith("error: cannot write to standard output: No space left on device"),
                 "the refusal names the cause");
    }

    // A reading command's output is held until its read stands, past 16 MiB in a file in
    // $TMPDIR (HeldOutput). A $TMPDIR that is not there, or full, holds it in memory: the
    // output is the same, and `list` works (a first version printed nothing and exited 2).
    void aMissingOrFullTmpdirStillPrints()
    {
        const auto whole = run_cli({"export", "first", "--db", db_});
        QVERIFY2(whole.exit_code == 0, qPrintable(whole.err));
        QVERIFY(whole.out.startsWith("step,train/loss,"));
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert("TMPDIR", dir_.filePath("no-such-folder"));
        const auto in_memory = run_cli({"export", "first", "--db", db_}, 120000, {}, env);
        QVERIFY2(in_memory.exit_code == 0, qPrintable(in_memory.err));
        QCOMPARE(in_memory.out, whole.out);

        QTemporaryDir dir;
        const QString fs = dir.filePath("tmp");
        QVERIFY(QDir().mkpath(fs));
        const QString full = "d=\"$1\"; shift; mount -t tmpfs -o size=64k tmpfs \"$d\" || exit 97; "
                             "dd if=/dev/zero of=\"$d/fill\" bs=4096 2>/dev/null; exec env TMPDIR=\"$d\" \"$@\"";
        const auto list = run_cli({"list", "--db", db_});
        for (const auto& [command, expected] : {std::pair{QStringList{"export", "first"}, whole.out},
                                                std::pair{QStringList{"list"}, list.out}}) {
            const auto r = run_program("unshare", QStringList{"-m", "sh", "-c", full, "sh", fs, MANTISSA_TRAIN_EXE} +
                                                      command + QStringList{"--db", db_});
            if (r.exit_code == 97) QSKIP("cannot mount a tmpfs here (unshare -m needs CAP_SYS_ADMIN)");
            QVERIFY2(r.exit_code == 0, qPrintable(r.err));
            QCOMPARE(r.out, expected);
        }
    }

    // A run with no train/loss (it failed before its first step) shares no step with another:
    // compare says so instead of "within tolerance over 0 common steps".
    void compareWithARunThatRecordedNoStepSaysSo()
    {
        const QString db = dir_.filePath("compare-empty.sqlite");
        QVERIFY(QFile::copy(db_, db));
        int64_t empty = 0;
        {
            RunStore store(db.toStdString());
            empty = store.create_run("nothing", "", "{}");
            store.finish_run(empty, RunStatus::Failed);
        }
        const auto r = run_cli({"compare", "first", QString::number(empty), "--db", db});
        QCOMPARE(r.exit_code, 0);
        QVERIFY2(r.out.contains(QString("  run %1: no train/loss step in common to compare").arg(empty)), qPrintable(r.out));
        QVERIFY2(!r.out.contains("within tolerance"), qPrintable(r.out));
    }

    // Columns line up under a name that is not ASCII: padded by what a terminal shows, not bytes.
    void listAlignsNamesThatAreNotAscii()
    {
        const QString db = dir_.filePath("unicode.sqlite");
        QVERIFY(QFile::copy(db_, db));
        QCOMPARE(run_cli({"rename", "first", "lr-\u00e4\u00e4", "--db", db}).exit_code, 0);
        QCOMPARE(run_cli({"rename", "first", "x", "--db", db}).exit_code, 2); // renamed indeed
        // A name of digits reads as a run id: found by id first, the run would be out of reach.
        const auto digits = run_cli({"rename", "lr-\u00e4\u00e4", "5", "--db", db});
        QCOMPARE(digits.exit_code, 2);
        QCOMPARE(digits.err, QString("error: the new name '5' reads as a run id: name the run with a letter in it\n"));
        // A newline split the run's row in `list` and `compare`; a tab shifted its columns.
        const auto twoLines = run_cli({"rename", "lr-\u00e4\u00e4", "two\nlines", "--db", db});
        QCOMPARE(twoLines.exit_code, 2);
        QCOMPARE(twoLines.err, QString("error: the new name has a control character (a NUL, a tab, a newline): a run's "
                                    "name is one line of text\n"));
        QCOMPARE(run_cli({"rename", "lr-\u00e4\u00e4", " ", "--db", db}).err,
                 QString("error: the new name is empty: a run needs a name\n"));
        const auto list = run_cli({"list", "--db", db});
        QCOMPARE(list.exit_code, 0);
        const QStringList lines = list.out.split('\n', Qt::SkipEmptyParts);
        const int column = lines.value(0).indexOf("status");
        QVERIFY(column > 0);
        const auto renamed = std::find_if(lines.begin(), lines.end(), [](const QString& l) { return l.contains("lr-"); });
        QVERIFY2(renamed != lines.end(), qPrintable(list.out));
        QVERIFY2(renamed->mid(column).startsWith("finished"), qPrintable(list.out));
    }

    // A diverged run's last loss is NaN (stored as NULL): `show` says nan, not 0.0000.
    void showSaysWhenTheLossDiverged()
    {
        const QString db = dir_.filePath("diverged.sqlite");
        {
            RunStore store(db.toStdString());
            const int64_t id = store.create_run("diverged", "p.json", "{}");
            store.append_scalar(id, 1, "train/loss", 3.0);
            store.append_scalar(id, 2, "train/loss", std::nan(""));
            store.finish_run(id, RunStatus::Failed);
        }
        const auto show = run_cli({"show", "diverged", "--db", db});
        QCOMPARE(show.exit_code, 0);
        QVERIFY2(show.out.contains("last train loss: nan"), qPrintable(show.out));
    }

    void badProjectIsRejectedBeforeAnyRun()
    {
        const auto r = run_cli({"run", project_, "--db", db_, "--set", "model.n_head=3"});
        QCOMPARE(r.exit_code, 2);
        QVERIFY2(r.err.contains("model.n_embd: 16 is not divisible by model.n_head (3)"), qPrintable(r.err));
        const auto missing = run_cli({"run", dir_.filePath("none.json"), "--db", db_});
        QCOMPARE(missing.exit_code, 2);
        QVERIFY(missing.err.contains("cannot be opened"));
        // What only reading the data finds is named with the --set that gave the value, and with
        // the project file where the file gave it.
        const QString noText = dir_.filePath("no-such-text.txt");
        const auto data = run_cli({"run", project_, "--db", db_, "--set", "data.kind=text", "--set", "data.path=" + noText});
        QCOMPARE(data.exit_code, 2);
        QCOMPARE(data.err,
                 "error: --set data.path=" + noText + ": data.path: file '" + noText + "' does not exist\n");
        const QString fileGave = dir_.filePath("no-text.json");
        QFile f(fileGave);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(kTinyProject)
                    .replace(R"("kind": "synthetic-addition", "digits": 2, "examples": 600)",
                             R"("kind": "text", "path": "no-such-text.txt")"));
        f.close();
        const auto file = run_cli({"run", fileGave, "--db", db_, "--set", "training.steps=3"});
        QCOMPARE(file.exit_code, 2);
        QCOMPARE(file.err, "error: " + fileGave + ": data.path: file '" + noText + "' does not exist\n");
        RunStore store(db_.toStdString());
        for (const auto& run : store.list_runs()) QCOMPARE(run.name, std::string("first")); // no run was created
    }

    void corruptStoreIsReportedAndKept()
    {
        const QString bad = dir_.filePath("corrupt.sqlite");
        QFile f(bad);
        QVERIFY(f.open(QIODevice::WriteOnly));
        const QByteArray junk = QByteArray("not sqlite at all ").repeated(300);
        f.write(junk);
        f.close();
        const auto r = run_cli({"run", project_, "--db", bad});
        QCOMPARE(r.exit_code, 3);
        QVERIFY2(r.err.contains("is not a Mantissa run store"), qPrintable(r.err));
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll(), junk);
    }

    // A resume of fewer steps than the warm-up times none, and says so: "0.000 ms (0 tokens/s)"
    // read as a measurement.
    void aResumeOfAFewStepsSaysItsStepTimeWasNotMeasured()
    {
        const QString db = dir_.filePath("few.sqlite");
        const auto first = run_cli({"run", project_, "--db", db, "--name", "few"});
        QVERIFY2(first.exit_code == 0, qPrintable(first.err));
        QVERIFY2(first.out.contains(QRegularExpression("\nmean step time: [0-9.]+ ms \\([0-9]+ tokens/s\\)\n")),
                 qPrintable(first.out));
        const auto more = run_cli({"resume", "few", "--db", db, "--set", "training.steps=21"});
        QVERIFY2(more.exit_code == 0, qPrintable(more.err));
        QVERIFY2(more.out.contains("\nmean step time: not measured (this session trained no step after its warm-up "
                                   "steps)\n"),
                 qPrintable(more.out));
        QVERIFY(!more.out.contains("mean loop time"));
    }

    void resumeContinuesTheSameRun()
    {
        const auto first = run_cli({"run", project_, "--db", db_, "--name", "long", "--set", "training.steps=8"});
        QVERIFY2(first.exit_code == 0, qPrintable(first.err + first.out));
        const auto resumed = run_cli({"resume", "long", "--db", db_, "--set", "training.steps=14"});
        QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err + resumed.out));
        QVERIFY2(resumed.out.contains("at step 8 from"), qPrintable(resumed.out));
        QVERIFY(resumed.out.contains("finished after 14 steps"));
        // Resumed once more with no more steps: nothing to train, said, and nothing recorded.
        const int64_t long_id = RunStore(db_.toStdString(), OpenMode::ReadOnly).find_run("long")->id;
        const auto events_before = RunStore(db_.toStdString(), OpenMode::ReadOnly).row_counts(long_id).events;
        const auto done = run_cli({"resume", "long", "--db", db_});
        QCOMPARE(done.exit_code, 0);
        QVERIFY2(done.out.endsWith(QString("run %1 'long' has already trained its 14 steps; resume --set "
                                           "training.steps=N trains it on\n")
                                       .arg(long_id)),
                 qPrintable(done.out));
        QCOMPARE(RunStore(db_.toStdString(), OpenMode::ReadOnly).row_counts(long_id).events, events_before);
        RunStore store(db_.toStdString());
        const auto run = store.find_run("long");
        QCOMPARE(status_text(run->status), std::string("finished"));
        QCOMPARE(run->last_step, int64_t(14));
        int train_rows = 0;
        for (const auto& s : store.scalars(run->id)) train_rows += s.tag == "train/loss";
        QCOMPARE(train_rows, 14); // steps 1-8 from the first process, 9-14 from the second
        QVERIFY(QFile::exists(dir_.filePath("runs.sqlite.checkpoints/run-%1/step-00000014.pt").arg(run->id)));

        // The weights as safetensors: header length, JSON header, then exactly the tensor bytes.
        const QString st = dir_.filePath("long.safetensors");
        const auto exported = run_cli({"export", "long", "--format", "safetensors", "--out", st, "--db", db_});
        QVERIFY2(exported.exit_code == 0, qPrintable(exported.err));
        QFile file(st);
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QByteArray bytes = file.readAll();
        quint64 header_length = 0;
        for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(bytes[i]);
        QCOMPARE(header_length % 8, quint64(0));
        const auto header = QJsonDocument::fromJson(bytes.mid(8, static_cast<qsizetype>(header_length))).object();
        QCOMPARE(header["__metadata__"].toObject()["step"].toString(), QString("14"));
        const auto wte = header["wte"].toObject();
        QCOMPARE(wte["dtype"].toString(), QString("F32"));
        QCOMPARE(wte["shape"].toArray(), (QJsonArray{13, 16})); // vocabulary x n_embd
        QCOMPARE(wte["data_offsets"].toArray(), (QJsonArray{0, 13 * 16 * 4}));
        qint64 data_bytes = 0;
        for (auto it = header.begin(); it != header.end(); ++it)
            if (it.key() != "__metadata__") data_bytes = std::max<qint64>(data_bytes, it.value().toObject()["data_offsets"].toArray()[1].toInteger());
        QCOMPARE(static_cast<qint64>(bytes.size()), static_cast<qint64>(8 + header_length) + data_bytes);
        QVERIFY(header.contains("blocks.0.attn.qkv.weight"));
        // Into a folder that is not there: a message naming the file, no abort.
        const QString nowhere = dir_.filePath("no-such-folder/long.safetensors");
        const auto refused = run_cli({"export", "long", "--format", "safetensors", "--out", nowhere, "--db", db_});
        QCOMPARE(refused.exit_code, 2);
        QVERIFY2(refused.err.contains("cannot write '" + nowhere + "': No such file or directory"), qPrintable(refused.err));
        // --table chooses a CSV table: with another format it would be ignored, so it is refused.
        const QString other = dir_.filePath("other.safetensors");
        const auto table = run_cli({"export", "long", "--format", "safetensors", "--table", "events", "--out", other,
                                    "--db", db_});
        QCOMPARE(table.exit_code, 2);
        QCOMPARE(table.err, QString("error: --table chooses a CSV table; --format safetensors writes the weights\n"));
        QVERIFY(!QFile::exists(other));
        const auto board = run_cli({"export", "long", "--format", "tensorboard", "--table", "metrics", "--out",
                                    dir_.filePath("board"), "--db", db_});
        QCOMPARE(board.exit_code, 2);
        QCOMPARE(board.err, QString("error: --table chooses a CSV table; --format tensorboard writes the metrics and "
                                    "the exponent histograms\n"));
        const auto events = run_cli({"export", "long", "--table", "events", "--db", db_});
        QVERIFY2(events.exit_code == 0 && events.out.startsWith("step,kind,message,created_at\n"),
                 qPrintable(events.err + events.out.left(200)));
        // The per-layer statistics: a row for each stored one, its values as stored, to the bit
        // (the shortest text that reads back as the same double).
        const auto layers = run_cli({"export", "long", "--table", "layers", "--db", db_});
        QCOMPARE(layers.exit_code, 0);
        QStringList lines = layers.out.split('\n', Qt::SkipEmptyParts);
        QCOMPARE(lines.takeFirst(), QString("step,layer,role,format,scale,count,zeros,infs,nans,underflow,subnormal,"
                                            "overflow,amax,quant_mse,quant_snr_db,update_ratio"));
        {
            RunStore store(db_.toStdString(), OpenMode::ReadOnly);
            const auto stored = store.layer_stats(run->id);
            QVERIFY(!stored.empty());
            QCOMPARE(lines.size(), qsizetype(stored.size()));
            for (qsizetype i = 0; i < lines.size(); ++i) {
                const QStringList f = lines[i].split(',');
                const auto& [step, t] = stored[size_t(i)];
                QCOMPARE(f.size(), 16);
                QCOMPARE(f[0].toLongLong(), step);
                QCOMPARE(f[2].toStdString(), t.role);
                QCOMPARE(f[5].toLongLong(), t.count);
                QCOMPARE(f[12].toDouble(), t.amax); // exactly: every bit of the stored value
                if (std::isfinite(t.quant_mse)) QCOMPARE(f[13].toDouble(), t.quant_mse);
            }
        }

        // An export writes a new file in --out's place: never over the run store, the run's
        // checkpoints, or what is not a regular file (a FIFO, a link, a device: a copy of
        // /dev/null became a CSV file). Each is refused, and left as it was.
        const QString fifo = dir_.filePath("export.fifo"), link = dir_.filePath("export.link");
        QVERIFY(::mkfifo(fifo.toLocal8Bit().constData(), 0644) == 0);
        QVERIFY(QFile::link(st, link));
        const QString checkpoint = dir_.filePath("runs.sqlite.checkpoints/run-%1/step-00000014.pt").arg(run->id);
        const QByteArray store_bytes = [&] {
            QFile f(db_);
            return f.open(QIODevice::ReadOnly) ? QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256)
                                               : QByteArray();
        }();
        const QList<std::pair<QStringList, QString>> refusals = {
            {{"--out", db_}, "error: --out '" + db_ + "' is the run store's own file\n"},
            // There or not: SQLite's next writer takes the file as the store's (a CSV written as
            // runs.sqlite-shm was deleted by the next `tag`).
            {{"--out", db_ + "-shm"}, "error: --out '" + db_ + "-shm' is the run store's own file\n"},
            {{"--out", db_ + "-journal"}, "error: --out '" + db_ + "-journal' is the run store's own file\n"},
            // `serve`'s token, there or not: a CSV in its place locked every window out.
            {{"--out", db_ + ".token"}, "error: --out '" + db_ + ".token' is the store server's token file\n"},
            // A live run's lock file replaced with a CSV read as a dead run, which a resume took.
            {{"--out", db_ + ".locks/run-1.lock"},
             "error: --out '" + db_ + ".locks/run-1.lock' is in the run store's lock folder\n"},
            {{"--format", "safetensors", "--out", checkpoint},
             "error: --out '" + checkpoint + "' is a checkpoint of run " + QString::number(run->id) + "\n"},
            {{"--out", fifo},
             "error: --out '" + fifo + "' is not a regular file (a device, FIFO or socket), which the export would "
                                       "replace; give the path of a file\n"},
            {{"--out", link},
             "error: --out '" + link + "' is a symbolic link, which the export would replace; give the path of a "
                                       "file\n"},
            {{"--out", dir_.filePath("board")}, "error: --out '" + dir_.filePath("board") +
                                                   "' is a folder, which the export would replace; give the path of "
                                                   "a file\n"}};
        QDir().mkpath(dir_.filePath("board"));
        for (const auto& [args, message] : refusals) {
            const auto r = run_cli(QStringList{"export", "long", "--db", db_} + args);
            QCOMPARE(r.exit_code, 2);
            QCOMPARE(r.err, message);
        }
        // Another run's checkpoint, and a new file among a run's checkpoints: "first"'s export
        // replaced "long"'s checkpoint with a CSV, which no resume could then load.
        const QString longRun = QString::number(run->id);
        const QString newcomer = dir_.filePath("runs.sqlite.checkpoints/run-%1/notes.csv").arg(run->id);
        const QList<std::pair<QString, QString>> others = {
            {checkpoint,
             "error: --out '" + checkpoint + "' is a checkpoint of run " + longRun + " (not the one exported)\n"},
            {newcomer, "error: --out '" + newcomer + "' is in the checkpoint folder of run " + longRun +
                           " (not the one exported)\n"}};
        for (const auto& [out, message] : others) {
            const auto r = run_cli({"export", "first", "--db", db_, "--out", out});
            QCOMPARE(r.exit_code, 2);
            QCOMPARE(r.err, message);
        }
        // Another store, a checkpoint that is no run's here, a project: no export writes such a
        // file (`--out b.sqlite` replaced every run of b.sqlite with a CSV table, exit 0).
        const QString otherStore = dir_.filePath("other.sqlite"), loose = dir_.filePath("loose.pt"),
                      projectCopy = dir_.filePath("project-copy.json");
        QVERIFY(QFile::copy(db_, otherStore) && QFile::copy(checkpoint, loose) && QFile::copy(project_, projectCopy));
        const QString keep = ": it was not replaced; remove it first or pick another file\n";
        const QList<std::pair<QString, QString>> foreign = {
            {otherStore, "error: --out '" + otherStore + "' is an SQLite database (another run store?)" + keep},
            {loose, "error: --out '" + loose + "' is a Mantissa checkpoint" + keep},
            {projectCopy, "error: --out '" + projectCopy + "' holds JSON (a project?)" + keep}};
        for (const auto& [out, message] : foreign) {
            const qint64 size = QFileInfo(out).size();
            for (const char* format : {"csv", "safetensors"}) {
                const auto r = run_cli({"export", "first", "--db", db_, "--format", format, "--out", out});
                QCOMPARE(r.exit_code, 2);
                QCOMPARE(r.err, message);
            }
            QCOMPARE(QFileInfo(out).size(), size);
        }
        QVERIFY(!QFile::exists(newcomer));
        QVERIFY(!QFile::exists(db_ + "-journal"));
        QVERIFY(QFileInfo(fifo).isFile() == false && QFileInfo(link).isSymLink());
        QFile kept(db_);
        QVERIFY(kept.open(QIODevice::ReadOnly));
        QCOMPARE(QCryptographicHash::hash(kept.readAll(), QCryptographicHash::Sha256), store_bytes);
        QVERIFY(QFileInfo(checkpoint).size() > 1000);

        // resume needs an existing store, and creates none.
        const auto none = run_cli({"resume", "first", "--db", dir_.filePath("empty.sqlite")});
        QCOMPARE(none.exit_code, 3);
        QVERIFY2(none.err.contains("empty.sqlite' does not exist (no runs stored yet)"), qPrintable(none.err));
        QVERIFY(!QFile::exists(dir_.filePath("empty.sqlite")));
    }

    // A store opened through a link to its file keeps its checkpoints beside the file it names.
    // A run trained through the link before 2026-12-07 kept them beside the link
    // (LINK.checkpoints): its resume, through the link or the file, reads them there.
    void aRunTrainedThroughALinkResumesFromItsCheckpoints()
    {
        const QString target = dir_.filePath("linked-real.sqlite"), link = dir_.filePath("linked.sqlite");
        QVERIFY(QFile::link("linked-real.sqlite", link));
        const auto first = run_cli({"run", project_, "--db", link, "--name", "linked", "--set", "training.steps=4"});
        QVERIFY2(first.exit_code == 0, qPrintable(first.err + first.out));
        QVERIFY(QFileInfo::exists(target + ".checkpoints/run-1/step-00000004.pt"));
        QVERIFY(!QFileInfo::exists(link + ".checkpoints"));
        // Where the earlier version kept them, and recorded them.
        QVERIFY(QDir().rename(target + ".checkpoints", link + ".checkpoints"));
        {
            RunStore store(target.toStdString());
            for (auto row : store.checkpoints(1)) {
                row.path = (link + ".checkpoints/run-1/" + QFileInfo(QString::fromStdString(row.path)).fileName()).toStdString();
                store.record_checkpoint(row);
            }
        }
        for (const QString& db : {link, target}) {
            const QString steps = db == link ? "6" : "8";
            const auto resumed = run_cli({"resume", "linked", "--db", db, "--set", "training.steps=" + steps});
            QVERIFY2(resumed.exit_code == 0, qPrintable(db + ": " + resumed.err + resumed.out));
            QCOMPARE(RunStore(target.toStdString()).list_runs().at(0).last_step, steps.toLongLong());
        }
        QVERIFY(QFileInfo::exists(target + ".checkpoints/run-1/step-00000008.pt"));
    }

    // ATen picks its CPU kernels by the vector instructions it finds: AVX2 and AVX-512 kernels
    // sum in different orders, so a run resumed where it picks others (here its portable ones,
    // forced) is not bit-identical, and its resume event says so, naming both.
    void aResumeOnOtherCpuKernelsSaysSo()
    {
        const auto first = run_cli({"run", project_, "--db", db_, "--name", "kernels", "--set", "training.steps=4"});
        QVERIFY2(first.exit_code == 0, qPrintable(first.err + first.out));
        QProcessEnvironment portable = QProcessEnvironment::systemEnvironment();
        portable.insert("ATEN_CPU_CAPABILITY", "default");
        const auto resumed =
            run_cli({"resume", "kernels", "--db", db_, "--set", "training.steps=6"}, 120000, {}, portable);
        QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err + resumed.out));
        RunStore store(db_.toStdString());
        std::string note = "no resume event";
        for (const auto& e : store.events(store.find_run("kernels")->id))
            if (e.event.kind == EventKind::ResumedFromCheckpoint) note = e.event.text;
        // ATen's AVX2 kernels need AVX2 and FMA: without them it runs its portable ones anyway.
        QFile cpuinfo("/proc/cpuinfo");
        const QByteArray flags = cpuinfo.open(QIODevice::ReadOnly) ? cpuinfo.readAll() : QByteArray();
        if (!flags.contains(" avx2") || !flags.contains(" fma")) QSKIP("this CPU has no AVX2 and FMA");
        const std::regex said("trained on the CPU \\(ATen's (AVX2|AVX512) kernels\\), the emulated executor, LibTorch "
                              "[^,]+, continuing on the CPU \\(ATen's DEFAULT kernels\\), the emulated executor, "
                              "LibTorch [^,]+: not bit-identical to a run never stopped(; .*)?");
        QVERIFY2(std::regex_match(note, said), note.c_str());
    }

    void sigkillLeavesAResumableInterruptedRun()
    {
        QProcess p;
        p.start(MANTISSA_TRAIN_EXE, {"run", project_, "--db", db_, "--name", "killed", "--set", "training.steps=1000000",
                                     "--set", "telemetry.log_interval=1", "--set", "training.checkpoint_interval=5"});
        QVERIFY(p.waitForStarted());
        QByteArray seen;
        QTRY_VERIFY_WITH_TIMEOUT((seen += p.readAllStandardOutput()).contains("step 12/"), 60000);
        // Step 12 committed by the store's writer (within ~250 ms, longer on a loaded machine).
        const auto committed = [&] {
            RunStore store(db_.toStdString(), OpenMode::ReadOnly);
            const auto run = store.find_run("killed");
            return run && run->last_step >= 12;
        };
        QTRY_VERIFY_WITH_TIMEOUT(committed(), 30000);
        ::kill(static_cast<pid_t>(p.processId()), SIGKILL); // no chance to clean up
        QVERIFY(p.waitForFinished(10000));

        int64_t id = 0, steps = 0;
        {
            RunStore store(db_.toStdString()); // opening it notices the dead run
            const auto run = store.find_run("killed");
            QVERIFY(run.has_value());
            QCOMPARE(status_text(run->status), std::string("interrupted"));
            QVERIFY(run->last_step >= 12);
            id = run->id;
            steps = run->last_step;
        }
        const auto resumed = run_cli({"resume", QString::number(id), "--db", db_, "--set", "training.steps=" +
                                                                                      QString::number(steps + 3)});
        QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err + resumed.out));
        RunStore store(db_.toStdString());
        QCOMPARE(status_text(store.find_run(std::to_string(id))->status), std::string("finished"));
    }

    // The real tensorboard package (installed into .venv by scripts/setup.sh) reads the export.
    void tensorboardReadsTheExport()
    {
        const auto r = run_cli({"run", project_, "--db", db_, "--name", "tb", "--set", "training.steps=6", "--set",
                                "telemetry.interval=5"});
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        int64_t tb_id = 0;
        {
            // A metric that went non-finite: exported as it is, not dropped (the curve would stop).
            RunStore store(db_.toStdString());
            tb_id = store.find_run("tb")->id;
            store.append_scalar(tb_id, 1, "custom/edge", 1.0);
            store.append_scalar(tb_id, 2, "custom/edge", std::nan(""));
            store.append_scalar(tb_id, 3, "custom/edge", -INFINITY);
        }
        const QString run_folder = QString("run%1-tb").arg(tb_id);
        const QString out = dir_.filePath("tb-export");
        const auto exp = run_cli({"export", "tb", "--format", "tensorboard", "--out", out, "--db", db_});
        QVERIFY2(exp.exit_code == 0, qPrintable(exp.err));
        QVERIFY2(QRegularExpression("^wrote " + QRegularExpression::escape(out + "/" + run_folder) +
                                    "/events\\.out\\.tfevents\\.\\d+\\.mantissa\n$")
                     .match(exp.err)
                     .hasMatch(),
                 qPrintable(exp.err));
        // TensorBoard's unit of a run is a folder: a second run exported into the same --out is a
        // run beside the first (not one series of both runs' steps), and the same run exported
        // again replaces its file whole (not every point twice).
        const QString twice = dir_.filePath("tb-twice");
        const auto first = run_cli({"export", "tb", "--format", "tensorboard", "--out", twice, "--db", db_});
        // An export under another name (an older version's), replaced too.
        QFile older(twice + "/" + run_folder + "/events.out.tfevents.1700000000.mantissa.run" + QString::number(tb_id));
        QVERIFY(older.open(QIODevice::WriteOnly));
        older.close();
        const auto second = run_cli({"export", "tb", "--format", "tensorboard", "--out", twice, "--db", db_});
        const auto other = run_cli({"export", "first", "--format", "tensorboard", "--out", twice, "--db", db_});
        QVERIFY2(first.exit_code == 0 && second.exit_code == 0 && other.exit_code == 0,
                 qPrintable(first.err + second.err + other.err));
        QCOMPARE(first.err, second.err);
        QCOMPARE(QDir(twice).entryList(QDir::Dirs | QDir::NoDotAndDotDot), (QStringList{"run1-first", run_folder}));
        QCOMPARE(QDir(twice + "/" + run_folder).entryList(QDir::Files | QDir::Hidden).size(), 1);
        // Renamed since, the run is exported into its new name's folder, and its old one goes.
        const QString renamed_db = dir_.filePath("tb-renamed.sqlite");
        QVERIFY(QFile::copy(db_, renamed_db));
        QCOMPARE(run_cli({"rename", "first", "second-name", "--db", renamed_db}).exit_code, 0);
        QCOMPARE(run_cli({"export", "1", "--format", "tensorboard", "--out", twice, "--db", renamed_db}).exit_code, 0);
        QCOMPARE(QDir(twice).entryList(QDir::Dirs | QDir::NoDotAndDotDot), (QStringList{"run1-second-name", run_folder}));
        // A folder that cannot be written is the output's problem: exit 2 with the OS's reason, as for CSV.
        const auto bad = run_cli({"export", "tb", "--format", "tensorboard", "--out", "/proc/no-such-dir", "--db", db_});
        QCOMPARE(bad.exit_code, 2);
        QVERIFY2(bad.err.startsWith("error: cannot write '/proc/no-such-dir/" + run_folder + "/events.out.tfevents."),
                 qPrintable(bad.err));
        QProcess py;
        py.start(MANTISSA_PYTHON, {MANTISSA_SOURCE_DIR "/tests/read_tensorboard.py", out + "/" + run_folder});
        QVERIFY(py.waitForFinished(120000));
        QVERIFY2(py.exitCode() == 0, py.readAllStandardError().constData());
        const auto json = QJsonDocument::fromJson(py.readAllStandardOutput()).object();

        RunStore store(db_.toStdString());
        const auto run = store.find_run("tb");
        const auto tb_losses = json["scalars"].toObject()["train/loss"].toArray();
        QCOMPARE(tb_losses.size(), 6);
        int i = 0;
        for (const auto& row : store.scalars(run->id)) {
            if (row.tag != "train/loss") continue;
            const auto point = tb_losses[i++].toArray();
            QCOMPARE(point[0].toInteger(), row.step);
            QCOMPARE(static_cast<float>(point[1].toDouble()), static_cast<float>(row.value)); // TB keeps float32
        }
        // Wall times are the run's: its start, then each step's time after the one before.
        const auto step_times = store.series(run->id, "step_time_ms");
        QCOMPARE(step_times.size(), size_t(6));
        for (size_t k = 1; k < step_times.size(); ++k) {
            const double gap = tb_losses[static_cast<qsizetype>(k)].toArray()[2].toDouble() -
                               tb_losses[static_cast<qsizetype>(k - 1)].toArray()[2].toDouble();
            QVERIFY2(std::abs(gap - step_times[k].second / 1000.0) < 1e-6,
                     qPrintable(QString("step %1: %2 s apart, step time %3 ms").arg(k + 1).arg(gap).arg(step_times[k].second)));
        }
        const QDateTime created = QDateTime::fromString(QString::fromStdString(run->created_at), Qt::ISODate);
        QVERIFY2(std::abs(tb_losses[0].toArray()[2].toDouble() - (created.toSecsSinceEpoch() + step_times[0].second / 1000.0)) < 1.0,
                 qPrintable(QString::fromStdString(run->created_at)));
        const auto edge = json["scalars"].toObject()["custom/edge"].toArray();
        QCOMPARE(edge.size(), 3);
        QCOMPARE(edge[0].toArray()[1].toDouble(), 1.0);
        QCOMPARE(edge[1].toArray()[1].toString(), QString("nan"));
        QCOMPARE(edge[2].toArray()[1].toString(), QString("-inf"));
        // Histograms: steps 1 and 5, bucket counts equal to the stored exponent histograms.
        // TensorBoard reads bucket i as (limit[i-1], limit[i]]: the bin of exponent e holds
        // [2^e, 2^(e+1)), so its limit is 2^(e+1), one binade above the exponent (a limit of 2^e
        // would draw every value at half its size). min is the first bin's floor, max the amax.
        const auto stats = store.layer_stats(run->id, "blocks.0.mlp.fc1");
        QVERIFY(!stats.empty());
        const auto histos = json["histograms"].toObject();
        int compared = 0;
        for (const auto& [step, t] : stats) {
            const auto series = histos["exponents/" + QString::fromStdString(t.layer + "/" + t.role)].toArray();
            for (const auto& entry : series) {
                const auto h = entry.toArray();
                if (h[0].toInteger() != step) continue;
                const auto buckets = h[1].toArray(), limits = h[2].toArray();
                QCOMPARE(static_cast<size_t>(buckets.size()), t.exponent_counts.size());
                QCOMPARE(static_cast<size_t>(limits.size()), t.exponent_counts.size());
                int64_t num = 0;
                for (size_t b = 0; b < t.exponent_counts.size(); ++b) {
                    const auto at = static_cast<qsizetype>(b);
                    QCOMPARE(static_cast<int64_t>(buckets[at].toDouble()), t.exponent_counts[b]);
                    QVERIFY2(limits[at].toDouble() == std::ldexp(1.0, t.first_exponent + static_cast<int>(b) + 1),
                             qPrintable(QString("bucket %1 of exponent %2: limit %3")
                                            .arg(b)
                                            .arg(t.first_exponent + static_cast<int>(b))
                                            .arg(limits[at].toDouble())));
                    num += t.exponent_counts[b];
                }
                QVERIFY2(h[3].toDouble() == std::ldexp(1.0, t.first_exponent),
                         qPrintable(QString::number(h[3].toDouble())));
                QVERIFY2(h[4].toDouble() == t.amax, qPrintable(QString::number(h[4].toDouble(), 'g', 17)));
                QCOMPARE(static_cast<int64_t>(h[5].toDouble()), num);
                ++compared;
            }
            // Beside each histogram, as scalars, what it cannot show: NaN + Inf (a layer that went
            // all NaN has no histogram at all), and the underflow and overflow fractions.
            const auto scalars = json["scalars"].toObject();
            const QString tensor = QString::fromStdString(t.layer + "/" + t.role);
            const auto at_step = [&](const QString& tag) {
                for (const auto& point : scalars[tag].toArray())
                    if (point.toArray()[0].toInteger() == step) return point.toArray()[1].toDouble();
                return -1.0;
            };
            QCOMPARE(at_step("nonfinite/" + tensor), static_cast<double>(t.nans + t.infs));
            QCOMPARE(static_cast<float>(at_step("underflow/" + tensor)), static_cast<float>(t.underflow));
            QCOMPARE(static_cast<float>(at_step("overflow/" + tensor)), static_cast<float>(t.overflow));
        }
        QCOMPARE(compared, 2 * 5); // two steps x five roles
        QCOMPARE(json["scalars"].toObject()["nonfinite/blocks.0.mlp.fc1/input"].toArray().size(), 2);

        // Run 1 of another store, exported into the same --out, is another run: its folder stays
        // (it was taken for an earlier export of this one and emptied). Runs are told apart by
        // their start, which names the event file.
        const QString elsewhere = dir_.filePath("tb-elsewhere.sqlite");
        {
            RunStore other(elsewhere.toStdString());
            const auto id = other.create_run("elsewhere", "", "{}");
            other.append_scalar(id, 1, "train/loss", 2.5);
            other.finish_run(id, RunStatus::Finished);
        }
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open(elsewhere.toUtf8().constData(), &db), SQLITE_OK);
        QCOMPARE(sqlite3_exec(db, "UPDATE runs SET created_at='2020-01-01T00:00:00Z'", nullptr, nullptr, nullptr),
                 SQLITE_OK);
        sqlite3_close(db);
        QCOMPARE(run_cli({"export", "1", "--format", "tensorboard", "--out", twice, "--db", elsewhere}).exit_code, 0);
        QCOMPARE(QDir(twice).entryList(QDir::Dirs | QDir::NoDotAndDotDot),
                 (QStringList{"run1-elsewhere", "run1-second-name", run_folder}));
        // A run with no metrics yet is no run for TensorBoard's list: said, and nothing written.
        {
            RunStore other(elsewhere.toStdString());
            other.finish_run(other.create_run("empty", "", "{}"), RunStatus::Stopped);
        }
        const auto empty = run_cli({"export", "empty", "--format", "tensorboard", "--out", twice, "--db", elsewhere});
        QCOMPARE(empty.exit_code, 2);
        QCOMPARE(empty.err, QString("error: run 2 has recorded no metrics yet: nothing was written\n"));
        QCOMPARE(QDir(twice).entryList(QDir::Dirs | QDir::NoDotAndDotDot).size(), 3);
    }

    void twoProcessesWriteOneStore()
    {
        QProcess a, b;
        const QStringList common = {"--db", db_, "--set", "training.steps=40", "--set", "telemetry.interval=10"};
        a.start(MANTISSA_TRAIN_EXE, QStringList{"run", project_, "--name", "twin-a"} + common);
        b.start(MANTISSA_TRAIN_EXE, QStringList{"run", project_, "--name", "twin-b"} + common);
        QVERIFY(a.waitForFinished(120000) && b.waitForFinished(120000));
        QVERIFY2(a.exitCode() == 0, a.readAllStandardError().constData());
        QVERIFY2(b.exitCode() == 0, b.readAllStandardError().constData());
        RunStore store(db_.toStdString());
        for (const char* name : {"twin-a", "twin-b"}) {
            const auto run = store.find_run(name);
            QVERIFY(run.has_value());
            QCOMPARE(status_text(run->status), std::string("finished"));
            QCOMPARE(run->last_step, int64_t(40));
            QCOMPARE(store.layer_stats(run->id, "lm_head").size(), size_t(5 * 5)); // steps 1, 10, 20, 30, 40
        }
    }

    // A run another process trains is refused before its checkpoint is loaded: the refusal
    // came after "run 1 'D' at step 600 from ..." and, where the reopen failed, wrote that
    // failure's notices into the live run.
    void aResumeOfARunTrainingElsewhereIsRefusedFirst()
    {
        const QString db = dir_.filePath("in-use.sqlite");
        RunStore training(db.toStdString()); // as a mantissa-train process holds it
        const auto id = training.create_run("busy", "", "{not a config");
        const auto r = run_cli({"resume", QString::number(id), "--db", db});
        QCOMPARE(r.exit_code, 3);
        QCOMPARE(r.err, QString("error: run %1 is in use by another process: stop it first\n").arg(id));
        QCOMPARE(r.out, QString());
        training.flush();
        QCOMPARE(training.events(id).size(), size_t(0));
    }

    // A resume's --set of the model's shape is refused as the setting it is: "checkpoint ... does
    // not fit this model" blamed the file.
    void aResumeThatChangesTheModelsShapeIsRefusedByItsSetting()
    {
        const QString db = dir_.filePath("shape.sqlite");
        QCOMPARE(run_cli({"run", project_, "--db", db, "--set", "training.steps=2", "--set",
                          "training.checkpoint_interval=2"})
                     .exit_code,
                 0);
        const auto r = run_cli({"resume", "1", "--db", db, "--set", "model.n_layer=3", "--set", "training.steps=4"});
        QCOMPARE(r.exit_code, 2);
        QCOMPARE(r.err, QString("error: model.n_layer: a resume keeps the model its checkpoints hold "
                                "(model.n_layer 1, not 3); resume without this --set, or start a new run\n"));
    }

    void renameAndDelete()
    {
        QVERIFY(run_cli({"run", project_, "--db", db_, "--name", "scratch", "--set", "training.steps=3"}).exit_code == 0);
        const auto renamed = run_cli({"rename", "scratch", "keeper", "--db", db_});
        QCOMPARE(renamed.exit_code, 0);
        RunStore store(db_.toStdString());
        const auto run = store.find_run("keeper");
        QVERIFY(run.has_value());
        QVERIFY(!store.find_run("scratch").has_value());
        QVERIFY(!store.scalars(run->id).empty());
        QCOMPARE(run_cli({"delete", "keeper", "--db", db_}).exit_code, 0);
        RunStore after(db_.toStdString());
        QVERIFY(!after.find_run("keeper").has_value());
        QVERIFY(after.scalars(run->id).empty()); // metrics went with it
        QVERIFY(after.events(run->id).empty());
    }

    // The sweep table: the lines after the "value run status ..." header, up to the blank line.
    static QList<QStringList> sweep_table(const QString& out)
    {
        const QStringList lines = out.split('\n');
        int header = -1;
        for (int i = 0; i < lines.size(); ++i)
            if (lines[i].startsWith("value ") && lines[i].contains("dval vs ref")) header = i;
        QList<QStringList> rows;
        if (header < 0) return rows;
        for (int i = header + 1; i < lines.size() && !lines[i].trimmed().isEmpty(); ++i)
            rows << lines[i].split(' ', Qt::SkipEmptyParts);
        return rows;
    }

    // A sweep without --name is tagged by the second it starts: one that starts in a second a
    // sweep of the store already took gets a tag of its own (two sweeps of a script's loop
    // shared one, and compared as one sweep).
    void sweepsStartedInOneSecondAreTaggedApart()
    {
        const QString db = dir_.filePath("sweep-tags.sqlite");
        {
            RunStore store(db.toStdString());
            const int64_t holder = store.create_run("holder", "", to_json_text(ProjectConfig{}));
            // The tags of this second and the next few: the sweep starts in one of them.
            const QDateTime now = QDateTime::currentDateTime();
            for (int s = 0; s < 30; ++s)
                store.add_tags(holder, {"sweep:" + now.addSecs(s).toString("yyyyMMdd-HHmmss").toStdString()});
            store.finish_run(holder, RunStatus::Finished);
        }
        const auto r = run_cli({"sweep", project_, "--vary", "training.steps=1,2", "--db", db});
        QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
        RunStore store(db.toStdString(), OpenMode::ReadOnly);
        const auto tags = store.tags(2);
        QCOMPARE(tags.size(), size_t(1));
        QVERIFY2(QString::fromStdString(tags[0]).endsWith("-2"), tags[0].c_str());
        QCOMPARE(store.tags(3), tags);
        QCOMPARE(store.tags(1).size(), size_t(30)); // the holder's, as they were
        // Final evaluations of different steps, because the steps are what varies: said so
        // (it read "a run stopped early").
        QVERIFY2(r.out.contains("* final evaluations of different steps (training.steps is what varies): not like "
                                "for like"),
                 qPrintable(r.out));
    }

    void sweepRunsEveryValueAndSummarises()
    {
        const QString db = dir_.filePath("sweep.sqlite");
        const auto r = run_cli({"sweep", project_, "--vary", "precision.preset=fp32,bf16,fp8-hybrid", "--set",
                                "training.steps=6", "--set", "telemetry.interval=3", "--db", db, "--name", "presets"});
        QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
        QVERIFY2(r.out.contains("sweep of precision.preset: 3 runs, relative to fp32 (run 1, fp32)"),
                 qPrintable(r.out));

        RunStore store(db.toStdString());
        RunFilter filter;
        filter.tags = {"sweep:presets"};
        const auto runs = store.list_run_summaries(filter);
        QCOMPARE(runs.size(), size_t(3));
        QCOMPARE(store.list_run_summaries().size(), size_t(3));
        const QStringList values = {"fp32", "bf16", "fp8-hybrid"};
        const auto table = sweep_table(r.out);
        QCOMPARE(table.size(), 3);
        for (int i = 0; i < 3; ++i) {
            const auto& run = runs[static_cast<size_t>(i)];
            QCOMPARE(run.name, "tiny [precision.preset=" + values[i].toStdString() + "]");
            QCOMPARE(run.preset, values[i].toStdString());
            QCOMPARE(status_text(run.status), std::string("finished"));
            QCOMPARE(run.steps_done, int64_t(6));
            QCOMPARE(run.tags, (std::vector<std::string>{"sweep:presets"}));
            QVERIFY(run.peak_resident_bytes > 0); // sampled at telemetry steps 1, 3 and 6
            // value, run, status, final val, dval, tokens/s, x ref, peak mem (2 words), x ref, skipped
            const QStringList& row = table[i];
            QCOMPARE(row.size(), 11);
            QCOMPARE(row[0], values[i]);
            QCOMPARE(row[1], QString::number(run.id));
            QCOMPARE(row[2], QString("finished"));
            QCOMPARE(row[3], QString::asprintf("%.4f", run.final_val_loss));
            QCOMPARE(row[4], QString::fromStdString(fmt_delta(run.final_val_loss - runs[0].final_val_loss)));
            QCOMPARE(row[5], QString::asprintf("%.0f", run.median_tokens_per_s));
            QCOMPARE(row[6], QString::asprintf("%.2fx", run.median_tokens_per_s / runs[0].median_tokens_per_s));
            QCOMPARE(row[9], QString::asprintf("%.2fx", double(run.peak_memory_bytes()) /
                                                            double(runs[0].peak_memory_bytes())));
            QCOMPARE(row[10], QString("0"));
        }
        QCOMPARE(table[0][4], QString("+0.0000"));
        QCOMPARE(table[0][6], QString("1.00x"));

        // compare: only the varied key differs between two runs of the sweep.
        const auto cmp = run_cli({"compare", QString::number(runs[0].id), QString::number(runs[1].id), "--db", db});
        QVERIFY2(cmp.exit_code == 0, qPrintable(cmp.err + cmp.out));
        const QStringList lines = cmp.out.split('\n');
        QCOMPARE(lines[0], QString("config differences (1 key):"));
        QCOMPARE(lines[1].split(' ', Qt::SkipEmptyParts), (QStringList{"key", "run", "1", "run", "2"}));
        QCOMPARE(lines[2].split(' ', Qt::SkipEmptyParts), (QStringList{"precision.preset", "fp32", "bf16"}));
        QCOMPARE(lines[3], QString());
        QVERIFY2(cmp.out.contains("train/loss divergence vs run 1 (tolerance 0.05, absolute):"), qPrintable(cmp.out));
        QVERIFY(cmp.out.contains("  run 2: "));
        const auto same = run_cli({"compare", "1", "1", "--db", db});
        QVERIFY2(same.out.startsWith("config differences: none\n"), qPrintable(same.out));
        QVERIFY(same.out.contains("run 1: within tolerance over 6 common steps"));

        const auto unknown = run_cli({"compare", "1", "nope", "--db", db});
        QCOMPARE(unknown.exit_code, 2);
        QVERIFY2(unknown.err.contains("no run 'nope'"), qPrintable(unknown.err));
        const auto single = run_cli({"compare", "1", "--db", db});
        QCOMPARE(single.exit_code, 2);
        QVERIFY(single.err.contains("compare needs at least two runs"));
    }

    void sweepRefusesABadValueBeforeRunningAnything()
    {
        const QString db = dir_.filePath("sweep-bad.sqlite");
        const auto r = run_cli({"sweep", project_, "--vary", "precision.preset=fp32,fp9", "--db", db});
        QCOMPARE(r.exit_code, 2);
        QVERIFY2(r.err.contains("--vary precision.preset=fp9 is rejected: ") &&
                     r.err.contains("precision.preset: 'fp9' is not one of fp32, bf16, fp16, fp8-hybrid"),
                 qPrintable(r.err));
        QVERIFY(!QFile::exists(db)); // not even the store was created
        // Data that is missing fails every run alike: refused before the store, like a bad value.
        const QString noData = dir_.filePath("no-such-data.txt");
        const auto missing = run_cli({"sweep", project_, "--vary", "training.seed=1,2", "--set", "data.kind=text",
                                      "--set", "data.path=" + noData, "--set", "training.seed=5", "--db", db});
        // --vary wins over a --set of its key, with a word (it won silently).
        QVERIFY2(missing.err.startsWith("note: --set training.seed=5 is replaced by --vary training.seed's values\n"),
                 qPrintable(missing.err));
        QCOMPARE(missing.exit_code, 2);
        QVERIFY2(missing.err.contains(noData), qPrintable(missing.err));
        QVERIFY(!QFile::exists(db));
        // A CUDA value on a machine without CUDA (a CPU build has none): known before anything trains.
        if (run_cli({"--version"}).out.contains("CUDA: none")) {
            const auto cuda = run_cli({"sweep", project_, "--vary", "training.device=cpu,cuda", "--db", db});
            QCOMPARE(cuda.exit_code, 2);
            QVERIFY2(cuda.err.contains("--vary training.device=cuda is rejected: training.device: 'cuda' was asked for"),
                     qPrintable(cuda.err));
            QVERIFY(!QFile::exists(db));
            // The device set for every value: --vary is not what is refused.
            const auto set = run_cli({"sweep", project_, "--vary", "training.seed=1,2", "--set", "training.device=cuda",
                                      "--db", db});
            QCOMPARE(set.exit_code, 2);
            QVERIFY2(set.err.contains("error: training.device: 'cuda' was asked for"), qPrintable(set.err));
            QVERIFY2(!set.err.contains("--vary"), qPrintable(set.err));
            QVERIFY(!QFile::exists(db));
        }
        // The project itself at fault, not the varied value: named as itself.
        const QString noProject = dir_.filePath("no-such-project.json");
        const auto absent = run_cli({"sweep", noProject, "--vary", "precision.preset=fp32,bf16", "--db", db});
        QCOMPARE(absent.exit_code, 2);
        QVERIFY2(absent.err.startsWith("error: project file '" + noProject + "' cannot be opened"),
                 qPrintable(absent.err));
        QVERIFY(!QFile::exists(db));
        // Names label runs: a sweep of them trained one run twice.
        const auto names = run_cli({"sweep", project_, "--vary", "name=a,b", "--db", db});
        QCOMPARE(names.exit_code, 2);
        QVERIFY2(names.err.startsWith("error: --vary name: the name only labels a run"), qPrintable(names.err));
        QVERIFY(!QFile::exists(db));
        // A watcher's pause would hold a headless sweep with nothing to resume it (it hung).
        const auto paused = run_cli({"sweep", project_, "--vary", "training.seed=1,2", "--set",
                                     "telemetry.watchers.actions.nonfinite=pause", "--db", db});
        QCOMPARE(paused.exit_code, 2);
        QVERIFY2(paused.err.startsWith("error: telemetry.watchers.actions.nonfinite: 'pause' would hold a headless "
                                       "sweep"),
                 qPrintable(paused.err));
        QVERIFY(!QFile::exists(db));
        const auto syntax = run_cli({"sweep", project_, "--vary", "precision.preset", "--db", db});
        QCOMPARE(syntax.exit_code, 2);
        QVERIFY2(syntax.err.contains("--vary 'precision.preset': expected dotted.key=value1,value2,..."),
                 qPrintable(syntax.err));
    }

    // A recipe setting that no layer reads: a sweep over it would train one run twice and is
    // refused before the store is made; a run trains and says what its --set does not change.
    void aSetThatNoLayerReadsIsNoted()
    {
        const QString db = dir_.filePath("unread.sqlite");
        const auto sweep = run_cli({"sweep", project_, "--vary", "precision.fp8.scaling=nvfp4,fp8-block", "--db", db});
        QCOMPARE(sweep.exit_code, 2);
        QVERIFY2(sweep.err.contains("--vary precision.fp8.scaling: values 'nvfp4' and 'fp8-block' would train the "
                                    "same run twice: no GEMM computes in FP8 under precision.preset=fp32"),
                 qPrintable(sweep.err));
        QVERIFY(!QFile::exists(db));

        const QString note = "note: --set precision.nvfp4.rht=false changes nothing this run computes as it starts: "
                             "the FP8 layers scale with delayed, which does not read precision.nvfp4.rht\n";
        const QStringList common = {"run", project_, "--db", db, "--set", "training.steps=1", "--set",
                                    "eval.interval=0", "--set", "precision.preset=fp8-hybrid", "--set",
                                    "precision.nvfp4.rht=false"};
        const auto delayed = run_cli(common);
        QVERIFY2(delayed.exit_code == 0, qPrintable(delayed.err));
        QCOMPARE(delayed.err.count("note: "), 1);
        QVERIFY2(delayed.err.contains(note), qPrintable(delayed.err));
        const auto nvfp4 = run_cli(common + QStringList{"--set", "precision.fp8.scaling=nvfp4"});
        QVERIFY2(nvfp4.exit_code == 0, qPrintable(nvfp4.err));
        QVERIFY2(!nvfp4.err.contains("note: "), qPrintable(nvfp4.err));
        // A part of the recipe that its layers cannot apply is said too: nvfp4's transform takes
        // a micro-batch's tokens 16 at a time.
        const auto odd = run_cli({"run", project_, "--db", db, "--set", "training.steps=1", "--set", "eval.interval=0",
                                  "--set", "precision.preset=fp8-hybrid", "--set", "precision.fp8.scaling=nvfp4",
                                  "--set", "training.batch_size=3", "--set", "model.context_length=7"});
        QVERIFY2(odd.exit_code == 0, qPrintable(odd.err));
        QCOMPARE(odd.err.count("note: "), 1);
        QVERIFY2(odd.err.contains("note: nvfp4's random Hadamard transform is not applied: a micro-batch of 21 tokens "
                                  "(training.batch_size 3 x model.context_length 7) is no multiple of 16, the "
                                  "transform's length\n"),
                 qPrintable(odd.err));

        // The project's own values are noted as well, where they differ from the defaults; a key
        // that a --set sets is the --set's note alone.
        const QString own = dir_.filePath("unread-own.json");
        QFile f(own);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(QByteArray(kTinyProject)
                    .replace(R"("telemetry")", R"("precision": {"preset": "fp8-hybrid", "nvfp4": {"rht": false, )"
                                               R"("weight_2d": false}}, "telemetry")"));
        f.close();
        const auto from_file = run_cli({"run", own, "--db", db, "--set", "training.steps=1", "--set", "eval.interval=0",
                                        "--set", "precision.nvfp4.weight_2d=true"});
        QVERIFY2(from_file.exit_code == 0, qPrintable(from_file.err));
        QCOMPARE(from_file.err.count("note: "), 2);
        QVERIFY2(from_file.err.contains("note: precision.nvfp4.rht=false, as the project sets it, changes nothing this "
                                        "run computes as it starts: the FP8 layers scale with delayed, which does not "
                                        "read precision.nvfp4.rht\n"),
                 qPrintable(from_file.err));
        QVERIFY2(from_file.err.contains("note: --set precision.nvfp4.weight_2d=true changes nothing"),
                 qPrintable(from_file.err));
    }

    // A value whose data is refused only when its run loads it (each value's data is loaded as
    // its run starts): the other values train, the table says "rejected", and the exit code is
    // a bad argument's (2), not a failed training's (1).
    void aSweepValueRefusedByItsDataExitsAsABadArgument()
    {
        const QString text = dir_.filePath("sweep-text.txt");
        QFile f(text);
        QVERIFY(f.open(QIODevice::WriteOnly));
        for (int i = 0; i < 400; ++i) f.write("the quick brown fox jumps over the lazy dog\n");
        f.close();
        const QString missing = dir_.filePath("sweep-missing.txt");
        const QString db = dir_.filePath("sweep-rejected.sqlite");
        const auto r = run_cli({"sweep", project_, "--vary", "data.path=" + text + "," + missing, "--set",
                                "data.kind=text", "--set", "training.steps=2", "--db", db});
        QCOMPARE(r.exit_code, 2);
        QVERIFY2(r.err.contains(missing), qPrintable(r.err));
        const auto table = sweep_table(r.out);
        QCOMPARE(table.size(), 2);
        QVERIFY2(table[1].contains("rejected"), qPrintable(r.out));
        RunStore store(db.toStdString(), OpenMode::ReadOnly);
        QCOMPARE(store.list_runs().size(), size_t(1));
        QCOMPARE(store.list_runs().front().status, RunStatus::Finished);
        // The refused value listed first: the same outcome (the whole sweep was refused, and
        // the good value never trained).
        const QString reversed = dir_.filePath("sweep-rejected-first.sqlite");
        const auto first = run_cli({"sweep", project_, "--vary", "data.path=" + missing + "," + text, "--set",
                                    "data.kind=text", "--set", "training.steps=2", "--db", reversed});
        QCOMPARE(first.exit_code, 2);
        const auto rows = sweep_table(first.out);
        QCOMPARE(rows.size(), 2);
        QVERIFY2(rows[0].contains("rejected") && !rows[1].contains("rejected"), qPrintable(first.out));
        // In one log (`> log 2>&1`) the lines come in the order they were printed: the refusal
        // came before the first value's summary and the "[2/2]" header printed ahead of it.
        QProcess merged;
        merged.setProcessChannelMode(QProcess::MergedChannels);
        merged.start(MANTISSA_TRAIN_EXE, {"sweep", project_, "--vary", "data.path=" + text + "," + missing, "--set",
                                          "data.kind=text", "--set", "training.steps=2", "--db",
                                          dir_.filePath("sweep-rejected-log.sqlite")});
        QVERIFY(merged.waitForFinished(120000));
        const QString log = QString::fromUtf8(merged.readAll());
        const auto at = [&](const QString& text) { return log.indexOf(text); };
        QVERIFY2(at("saved as run 1") >= 0 && at("saved as run 1") < at("[2/2]") && at("[2/2]") < at("error: "),
                 qPrintable(log));
        RunStore kept(reversed.toStdString(), OpenMode::ReadOnly);
        QCOMPARE(kept.list_runs().size(), size_t(1));
        QCOMPARE(kept.list_runs().front().status, RunStatus::Finished);
    }

    // A checkpoint folder that cannot be made (a file on its path) is refused before the run
    // is made: a long run would otherwise finish with every checkpoint failed.
    void anImpossibleCheckpointFolderIsRefusedBeforeTheRun()
    {
        const QString file = dir_.filePath("ckpt-blocker");
        QFile f(file);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.close();
        const QString db = dir_.filePath("ckpt-refused.sqlite");
        const auto r = run_cli({"run", project_, "--set", "training.steps=2", "--set",
                                "training.checkpoint_dir=" + file + "/sub", "--db", db});
        QCOMPARE(r.exit_code, 2);
        QVERIFY2(r.err.contains("training.checkpoint_dir: cannot make the folder '" + file + "/sub': "), qPrintable(r.err));
        RunStore store(db.toStdString(), OpenMode::ReadOnly);
        QCOMPARE(store.list_runs().size(), size_t(0)); // no run left behind
    }

    // Runs of one project share its name: a name that names several is read as the newest,
    // with a note, and changing one of them by name (delete!) is refused.
    void aNameThatNamesSeveralRunsChangesNone()
    {
        const QString db = dir_.filePath("same-names.sqlite");
        for (int i = 0; i < 2; ++i)
            QCOMPARE(run_cli({"run", project_, "--set", "training.steps=1", "--name", "twin", "--db", db}).exit_code, 0);
        for (const QStringList& change : {QStringList{"delete", "twin"}, QStringList{"rename", "twin", "other"},
                                          QStringList{"tag", "twin", "t"}}) {
            const auto r = run_cli(change + QStringList{"--db", db});
            QCOMPARE(r.exit_code, 2);
            QVERIFY2(r.err.contains("'twin' names 2 runs in " + db + " (1, 2): give the id of the one to change"),
                     qPrintable(r.err));
        }
        const auto shown = run_cli({"show", "twin", "--db", db});
        QCOMPARE(shown.exit_code, 0);
        QVERIFY2(shown.out.startsWith("run 2 'twin'"), qPrintable(shown.out));
        QVERIFY2(shown.err.contains("note: 'twin' names 2 runs (1, 2): this is the newest, run 2"), qPrintable(shown.err));
        const auto resumed = run_cli({"resume", "twin", "--db", db}); // the newest, said so
        QVERIFY2(resumed.err.contains("note: 'twin' names 2 runs (1, 2): this is the newest, run 2"),
                 qPrintable(resumed.err));
        {
            RunStore store(db.toStdString(), OpenMode::ReadOnly);
            QCOMPARE(store.list_runs().size(), size_t(2));
            QVERIFY(store.tags(1).empty() && store.tags(2).empty());
        }
        QCOMPARE(run_cli({"delete", "2", "--db", db}).exit_code, 0);
        const auto single = run_cli({"rename", "twin", "only", "--db", db}); // one run left of that name
        QCOMPARE(single.exit_code, 0);
        QVERIFY(single.err.isEmpty());
        // A name of digits (a project's name, a GUI rename) is another run's id: the id wins, said.
        QCOMPARE(run_cli({"run", project_, "--set", "training.steps=1", "--name", "digits", "--db", db}).exit_code, 0);
        int64_t digits = 0;
        {
            RunStore store(db.toStdString());
            digits = store.find_run("digits")->id;
            store.rename_run(digits, "1");
        }
        const auto by_id = run_cli({"show", "1", "--db", db});
        QCOMPARE(by_id.exit_code, 0);
        QVERIFY2(by_id.out.startsWith("run 1 'only'"), qPrintable(by_id.out));
        QCOMPARE(by_id.err,
                 QString("note: '1' is taken as run id 1; run %1 is named '1' (give its id)\n").arg(digits));
    }

    // --db "" and :memory: are SQLite's private databases, gone with the process: refused.
    // The default store: $XDG_DATA_HOME only where it is absolute, as the XDG spec says (a
    // relative one put the store wherever a command ran).
    void aRelativeXdgDataHomeIsIgnored()
    {
        QTemporaryDir home;
        auto env = QProcessEnvironment::systemEnvironment();
        env.remove("MANTISSA_DB");
        env.insert("HOME", home.path());
        env.insert("XDG_DATA_HOME", "relative-data");
        const auto relative = run_cli({"list"}, 60000, home.path(), env);
        QCOMPARE(relative.exit_code, 3);
        QVERIFY2(relative.err.contains("'" + home.path() + "/.local/share/mantissa/runs.sqlite' does not exist"),
                 qPrintable(relative.err));
        env.insert("XDG_DATA_HOME", home.filePath("data"));
        const auto absolute = run_cli({"list"}, 60000, home.path(), env);
        QVERIFY2(absolute.err.contains("'" + home.path() + "/data/mantissa/runs.sqlite' does not exist"),
                 qPrintable(absolute.err));
    }

    void aStoreThatIsNoFileIsRefused()
    {
        for (const QString& db : {QString(), QStringLiteral(":memory:")}) {
            // In dir_: a store accepted would leave "<db>.checkpoints" in the working folder.
            const auto r = run_cli({"run", project_, "--set", "training.steps=1", "--db", db}, 120000, dir_.path());
            QCOMPARE(r.exit_code, 2);
            QVERIFY2(r.err.contains("--db '" + db + "' is not a file"), qPrintable(r.err));
            QVERIFY(!QDir(dir_.path()).exists(db + ".checkpoints"));
            QCOMPARE(run_cli({"list", "--db", db}, 120000, dir_.path()).exit_code, 2);
            QVERIFY_THROWS_EXCEPTION(StoreArgumentError, RunStore(db.toStdString())); // the GUI's --db too
        }
        QCOMPARE(run_cli({"run", project_, "--set", "training.steps=1", "--no-store", "--db", ""}).exit_code, 0);
        // A folder, named as one ("new/", which used to be made before the open failed on it) or
        // one that exists: refused before anything is made.
        QVERIFY(QDir(dir_.path()).mkpath("existing"));
        for (const QString& db : {dir_.filePath("new/"), dir_.filePath("existing")}) {
            const auto r = run_cli({"run", project_, "--set", "training.steps=1", "--db", db}, 120000, dir_.path());
            QCOMPARE(r.exit_code, 2);
            QVERIFY2(r.err.contains("--db '" + db + "' is a folder: name the run store's file in it"), qPrintable(r.err));
            QVERIFY(!QDir(dir_.filePath("new")).exists());
            QVERIFY(QDir(dir_.filePath("existing")).isEmpty());
            QVERIFY_THROWS_EXCEPTION(StoreArgumentError, RunStore(db.toStdString())); // the GUI's --db too
        }
    }

    // A store that cannot make a run (its lock folder cannot be made: a file in its place) stops
    // the sweep with exit 3, still printing the table, and never aborts the process.
    void aSweepWhoseStoreCannotMakeRunsSaysSoInItsTable()
    {
        const QString db = dir_.filePath("sweep-nolocks.sqlite");
        { RunStore make(db.toStdString()); } // the store itself is fine
        QFile blocker(db + ".locks");
        QVERIFY(blocker.open(QIODevice::WriteOnly));
        blocker.close();
        const auto r = run_cli({"sweep", project_, "--vary", "training.seed=1,2", "--set", "training.steps=2",
                                "--db", db});
        QCOMPARE(r.exit_code, 3);
        QVERIFY2(r.err.contains("run store '" + db + "': cannot make the folder of its lock files '" + db + ".locks'"),
                 qPrintable(r.err));
        const auto table = sweep_table(r.out);
        QCOMPARE(table.size(), 2);
        QVERIFY2(table[0].join(' ').contains("failed") && table[1].join(' ').contains("skipped"),
                 qPrintable(r.out));
        QVERIFY(RunStore(db.toStdString(), OpenMode::ReadOnly).list_runs().empty()); // nothing half-made
    }

    // A point whose final checkpoint cannot be written (another sweep's file in its folder,
    // here a folder in its place) is that point's failure, not the store's: the next points
    // train. Every later point was "skipped" and the sweep exited 3, the store's code.
    void aSweepPointsLostCheckpointLetsTheRestTrain()
    {
        const QString ckpt = dir_.filePath("sweep-ckpt");
        QVERIFY(QDir().mkpath(ckpt + "/2-training.seed=2/step-00000002.pt"));
        const QString db = dir_.filePath("sweep-ckpt.sqlite");
        const QStringList args = {"sweep", project_, "--vary", "training.seed=1,2,3", "--set", "training.steps=2",
                                  "--set", "training.checkpoint_dir=" + ckpt, "--db", db, "--name", "ck"};
        const auto r = run_cli(args);
        QCOMPARE(r.exit_code, 1);
        QVERIFY2(r.err.contains("the final checkpoint could not be written"), qPrintable(r.err));
        const auto table = sweep_table(r.out);
        QCOMPARE(table.size(), 3);
        QCOMPARE(table[0].mid(0, 3), (QStringList{"1", "1", "finished"}));
        QVERIFY2(table[1].join(' ').startsWith("2 2 finished (final checkpoint not kept)"), qPrintable(r.out));
        QCOMPARE(table[2].mid(0, 3), (QStringList{"3", "3", "finished"}));
        QVERIFY(QFile::exists(ckpt + "/3-training.seed=3/step-00000002.pt"));
        // The same sweep again (after a Ctrl-C, say): every point trains, none can keep its final
        // checkpoint over the first sweep's, and the name's tag is noted as taken.
        const auto again = run_cli(args);
        QCOMPARE(again.exit_code, 1);
        QVERIFY2(again.err.contains("note: sweep:ck already tags 3 runs: this sweep's runs join them under one tag\n"),
                 qPrintable(again.err));
        const auto rows = sweep_table(again.out);
        QCOMPARE(rows.size(), 3);
        for (int i = 0; i < 3; ++i)
            QVERIFY2(rows[i].join(' ').contains("finished (final checkpoint not kept)"), qPrintable(again.out));
    }

    // A diverged run's losses read "nan" in every table: "-" means nothing was recorded.
    void aDivergedRunReadsNanNotNothing()
    {
        const QString db = dir_.filePath("sweep-diverged.sqlite");
        const auto r = run_cli({"sweep", project_, "--vary", "optimizer.learning_rate=0.001,1e30", "--set",
                                "training.steps=6", "--db", db});
        QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
        const auto table = sweep_table(r.out);
        QCOMPARE(table.size(), 2);
        QCOMPARE(table[0][3], QString::asprintf("%.4f", RunStore(db.toStdString()).list_run_summaries()[0].final_val_loss));
        QCOMPARE(table[1].mid(0, 5), (QStringList{"1e30", "2", "finished", "nan", "nan"}));

        const auto list = run_cli({"list", "--db", db});
        const QStringList lines = list.out.split('\n', Qt::SkipEmptyParts);
        QCOMPARE(lines.size(), 3);
        QVERIFY2(lines[2].split(' ', Qt::SkipEmptyParts).contains("nan"), qPrintable(list.out));
        QVERIFY2(!lines[1].split(' ', Qt::SkipEmptyParts).contains("nan"), qPrintable(list.out));

        const auto cmp = run_cli({"compare", "1", "2", "--db", db});
        QCOMPARE(cmp.exit_code, 0);
        for (const QString& line : cmp.out.split('\n'))
            if (line.trimmed().startsWith("final val") || line.trimmed().startsWith("final train"))
                QVERIFY2(line.split(' ', Qt::SkipEmptyParts).last() == "nan", qPrintable(cmp.out));
        QVERIFY2(QRegularExpression("run 2: diverges at step \\d+ \\(\\d\\.\\d{4} vs nan\\)").match(cmp.out).hasMatch(),
                 qPrintable(cmp.out));
    }

    // Runs whose steps hold different numbers of tokens are compared step by step: said.
    void compareSaysWhenStepsHoldDifferentTokens()
    {
        const QString db = dir_.filePath("sweep-batch.sqlite");
        const auto r = run_cli({"sweep", project_, "--vary", "training.batch_size=4,8", "--set", "training.steps=3",
                                "--db", db});
        QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
        const auto cmp = run_cli({"compare", "1", "2", "--db", db});
        QCOMPARE(cmp.exit_code, 0);
        QVERIFY2(cmp.out.contains("(tokens per step differ: compared step by step, not at equal tokens)"),
                 qPrintable(cmp.out));
        const auto same = run_cli({"compare", "1", "1", "--db", db});
        QVERIFY2(!same.out.contains("tokens per step differ"), qPrintable(same.out));
    }

    void ctrlCStopsTheSweepAndSkipsTheRest()
    {
        const QString db = dir_.filePath("sweep-int.sqlite");
        QProcess p;
        p.start(MANTISSA_TRAIN_EXE, {"sweep", project_, "--vary", "training.seed=1,2,3", "--set",
                                     "training.steps=1000000", "--set", "telemetry.log_interval=1", "--set",
                                     "eval.interval=2", "--db", db, "--name", "cut"});
        QVERIFY(p.waitForStarted());
        QByteArray seen;
        QTRY_VERIFY_WITH_TIMEOUT((seen += p.readAllStandardOutput()).contains("step 3/"), 60000);
        ::kill(static_cast<pid_t>(p.processId()), SIGINT);
        QVERIFY(p.waitForFinished(30000));
        // Saved, then ended by the signal it was stopped by (Qt gives the signal as the code).
        QCOMPARE(p.exitStatus(), QProcess::CrashExit);
        QCOMPARE(p.exitCode(), int(SIGINT));
        seen += p.readAllStandardOutput();
        // A stopped run is not evaluated where it stops: its val loss says which step it is
        // from (every second step here), where the two differ.
        const auto stopped = QRegularExpression(R"(stopped after (\d+) steps: train loss [0-9.]+, val loss [0-9.]+)"
                                                R"((?: \(at step (\d+)\))?\n)")
                                 .match(QString::fromUtf8(seen));
        QVERIFY2(stopped.hasMatch(), seen.constData());
        const int steps = stopped.captured(1).toInt();
        const int evaluated = stopped.captured(2).isEmpty() ? steps : stopped.captured(2).toInt();
        QVERIFY2(evaluated % 2 == 0 && (evaluated == steps) == stopped.captured(2).isEmpty() && steps - evaluated <= 1,
                 seen.constData());
        const auto table = sweep_table(QString::fromUtf8(seen));
        QCOMPARE(table.size(), 3);
        QCOMPARE(table[0].mid(0, 3), (QStringList{"1", "1", "stopped"}));
        QCOMPARE(table[1].mid(0, 3), (QStringList{"2", "-", "skipped"}));
        QCOMPARE(table[2].mid(0, 3), (QStringList{"3", "-", "skipped"}));
        RunStore store(db.toStdString());
        const auto runs = store.list_run_summaries();
        QCOMPARE(runs.size(), size_t(1));
        QCOMPARE(status_text(runs[0].status), std::string("stopped"));
        QCOMPARE(runs[0].tags, (std::vector<std::string>{"sweep:cut"}));
    }

    void tagsShowInTheList()
    {
        const QString db = dir_.filePath("sweep.sqlite"); // the three runs of the sweep test
        const auto tagged = run_cli({"tag", "2", "baseline", "keep", "--db", db});
        QVERIFY2(tagged.exit_code == 0, qPrintable(tagged.err));
        QCOMPARE(tagged.out, QString("run 2 'tiny [precision.preset=bf16]' tags: baseline, keep, sweep:presets\n"));
        const auto untagged = run_cli({"untag", "2", "keep", "kepe", "--db", db});
        QCOMPARE(untagged.out, QString("run 2 'tiny [precision.preset=bf16]' tags: baseline, sweep:presets\n"));
        QCOMPARE(untagged.err, QString("note: run 2 has no tag 'kepe'\n")); // a typo removed nothing, silently
        const auto list = run_cli({"list", "--db", db});
        QCOMPARE(list.exit_code, 0);
        const QStringList lines = list.out.split('\n', Qt::SkipEmptyParts);
        QCOMPARE(lines.size(), 4);
        QVERIFY2(lines[0].split(' ', Qt::SkipEmptyParts).startsWith("id"), qPrintable(list.out));
        QVERIFY2(lines[2].endsWith("baseline, sweep:presets"), qPrintable(list.out));
        QVERIFY2(lines[3].contains("fp8-hybrid (delayed)") && lines[3].endsWith("  sweep:presets"),
                 qPrintable(list.out));
        const auto bad = run_cli({"tag", "2", " ", "--db", db});
        QCOMPARE(bad.exit_code, 2);
        QCOMPARE(bad.err, QString("error: a tag cannot be empty\n"));
        const auto missing = run_cli({"tag", "77", "x", "--db", db});
        QCOMPARE(missing.exit_code, 2);
        QVERIFY(missing.err.contains("no run '77'"));
    }

    // A tiny negative rounded to zero has no sign in a table ("-0.0000" in a sweep's dval);
    // non-finite values are named.
    void tableNumbersReadAsTheyShould()
    {
        QCOMPARE(fmt_delta(-1e-6), std::string("+0.0000"));
        QCOMPARE(fmt_delta(-0.0), std::string("+0.0000"));
        QCOMPARE(fmt_delta(-0.00005), std::string("-0.0001"));
        QCOMPARE(fmt_loss(-1e-9), std::string("0.0000"));
        QCOMPARE(fmt_recorded_delta(-1e-6, true), std::string("+0.0000"));
        QCOMPARE(fmt_recorded_delta(-INFINITY, true), std::string("-inf"));
        QCOMPARE(fmt_recorded_loss(-std::numeric_limits<double>::quiet_NaN(), true), std::string("nan"));
        QCOMPARE(fmt_recorded_loss(2.0, false), std::string("-"));
    }

    // Usage errors exit 2 (README), whatever CLI11's own code for them; help and version 0.
    void usageErrorsExit2_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<int>("code");
        QTest::addColumn<QString>("message");
        QTest::newRow("no subcommand") << QStringList{} << 2 << "A subcommand is required";
        QTest::newRow("no project") << QStringList{"run"} << 2 << "project is required";
        QTest::newRow("unknown format") << QStringList{"export", "1", "--format", "xml"} << 2 << "xml not in";
        QTest::newRow("tolerance text") << QStringList{"compare", "1", "2", "--tolerance", "abc"} << 2 << "must be a number";
        QTest::newRow("tolerance < 0") << QStringList{"compare", "1", "2", "--tolerance", "-1"} << 2 << "finite number >= 0";
        QTest::newRow("tolerance NaN") << QStringList{"compare", "1", "2", "--tolerance", "nan"} << 2 << "finite number >= 0";
        QTest::newRow("tolerance 1x") << QStringList{"compare", "1", "2", "--tolerance", "1x"} << 2
                                      << "finite number >= 0";
        // NaN lifted the server's rate limit; 0 was refused as "not in range 0.000000 to 1797..."
        QTest::newRow("rate NaN") << QStringList{"serve", "--requests-per-s", "nan"} << 2
                                  << "--requests-per-s: must be a finite number > 0";
        QTest::newRow("rate 0") << QStringList{"serve", "--requests-per-s", "0"} << 2
                                << "--requests-per-s: must be a finite number > 0";
        QTest::newRow("help") << QStringList{"--help"} << 0 << "Usage:";
    }
    void usageErrorsExit2()
    {
        QFETCH(QStringList, args);
        QFETCH(int, code);
        QFETCH(QString, message);
        const auto r = run_cli(args + QStringList{"--db", dir_.filePath("usage.sqlite")});
        QCOMPARE(r.exit_code, code);
        QVERIFY2((r.err + r.out).contains(message), qPrintable(r.err + r.out));
        // Said as every other refusal is ("--tolerance: must be ..." had no prefix).
        if (code != 0) QVERIFY2(r.err.startsWith("error: "), qPrintable(r.err));
        QVERIFY(!QFile::exists(dir_.filePath("usage.sqlite")));
    }

    void readingCommandsNeverWrite_data()
    {
        QTest::addColumn<QByteArray>("content"); // "absent" = no file
        QTest::addColumn<QByteArray>("header");  // SQLite header + application id when set
        QTest::addColumn<QString>("message");
        QTest::newRow("absent") << QByteArray("absent") << QByteArray() << "does not exist (no runs stored yet)";
        QTest::newRow("empty") << QByteArray() << QByteArray() << "is empty: no runs stored yet";
        QTest::newRow("app id, no tables") << QByteArray() << QByteArray("PRAGMA application_id=1296125524; VACUUM;")
                                           << "has no Mantissa tables";
        QTest::newRow("foreign sqlite") << QByteArray() << QByteArray("CREATE TABLE t(x); INSERT INTO t VALUES(1);")
                                        << "is a SQLite database of another program";
        QTest::newRow("text") << QByteArray("garbage, not a database\n").repeated(50) << QByteArray()
                              << "is not a SQLite database";
    }
    void readingCommandsNeverWrite()
    {
        QFETCH(QByteArray, content);
        QFETCH(QByteArray, header);
        QFETCH(QString, message);
        QTemporaryDir dir;
        const QString db = dir.filePath("x.sqlite");
        if (content != "absent") {
            QFile f(db);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(content);
        }
        if (!header.isEmpty()) {
            sqlite3* raw = nullptr;
            QCOMPARE(sqlite3_open(db.toUtf8().constData(), &raw), SQLITE_OK);
            QCOMPARE(sqlite3_exec(raw, header.constData(), nullptr, nullptr, nullptr), SQLITE_OK);
            sqlite3_close(raw);
        }
        const QStringList before = snapshot(dir.path());
        for (const auto& command : kReadingCommands) {
            const auto r = run_cli(command + QStringList{"--db", db});
            QCOMPARE(r.exit_code, 3);
            QVERIFY2(r.err.contains("'" + db + "' ") && r.err.contains(message), qPrintable(command[0] + ": " + r.err));
            QVERIFY2(!r.err.contains("SQL error"), qPrintable(r.err));
            QCOMPARE(snapshot(dir.path()), before);
        }
    }

    void readOnlyStoreIsReadAndWritingCommandsAreRefused()
    {
        QTemporaryDir dir;
        const QString share = dir.filePath("share");
        QVERIFY(QDir().mkpath(share));
        const QString db = share + "/runs.sqlite";
        make_store(db);
        const QStringList before = snapshot(dir.path());
        if (run_cli_mounted(kReadOnlyBind, share, {"list", "--db", db}).exit_code == 97)
            QSKIP("cannot bind-mount read-only here (unshare -m needs CAP_SYS_ADMIN)");
        const auto list = run_cli_mounted(kReadOnlyBind, share, {"list", "--db", db});
        QVERIFY2(list.exit_code == 0, qPrintable(list.err));
        QCOMPARE(list.out.split('\n', Qt::SkipEmptyParts).size(), 3); // header + 2 runs
        const auto show = run_cli_mounted(kReadOnlyBind, share, {"show", "b", "--db", db});
        QVERIFY2(show.exit_code == 0 && show.out.contains("status: finished\n") && show.out.contains("note"),
                 qPrintable(show.err + show.out));
        const auto csv = run_cli_mounted(kReadOnlyBind, share, {"export", "1", "--db", db});
        QCOMPARE(csv.exit_code, 0);
        QCOMPARE(csv.out.count('\n'), 11); // header + 10 steps
        const auto cmp = run_cli_mounted(kReadOnlyBind, share, {"compare", "1", "2", "--db", db});
        QVERIFY2(cmp.exit_code == 0 && cmp.out.contains("within tolerance over 10 common steps"), qPrintable(cmp.out));

        const QList<QStringList> writes = {{"rename", "1", "z"}, {"delete", "2"},      {"tag", "1", "t"},
                                           {"untag", "1", "t"},  {"resume", "1"},      {"run", project_},
                                           {"sweep", project_, "--vary", "training.seed=1,2"}};
        for (const auto& command : writes) {
            const auto r = run_cli_mounted(kReadOnlyBind, share, command + QStringList{"--db", db});
            QCOMPARE(r.exit_code, 3);
            QVERIFY2(r.err.contains("run store '" + db + "' is read-only (Read-only file system)"),
                     qPrintable(command[0] + ": " + r.err));
        }
        QCOMPARE(snapshot(dir.path()), before);
    }

    void unwritableFileIsReadByAnotherUser()
    {
        // Permission bits bind a user other than root: the file 0444 in a 0555 folder, read as
        // nobody. Reading works and leaves nothing behind; writing says read-only.
        QTemporaryDir dir;
        QVERIFY(QFile::setPermissions(dir.path(), QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner |
                                                      QFile::ReadOther | QFile::ExeOther));
        const QString folder = dir.filePath("ro");
        QVERIFY(QDir().mkpath(folder));
        const QString db = folder + "/runs.sqlite";
        make_store(db);
        QVERIFY(QFile::setPermissions(db, QFile::ReadOwner | QFile::ReadOther));
        QVERIFY(QFile::setPermissions(folder, QFile::ReadOwner | QFile::ExeOwner | QFile::ReadOther | QFile::ExeOther));
        const QStringList before = snapshot(dir.path());
        const auto as_nobody = [](const QStringList& args) {
            QProcess p;
            p.start("setpriv",
                    QStringList{"--reuid=65534", "--regid=65534", "--clear-groups", MANTISSA_TRAIN_EXE} + args);
            p.waitForFinished(60000);
            return Result{p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1,
                          QString::fromUtf8(p.readAllStandardOutput()), QString::fromUtf8(p.readAllStandardError())};
        };
        const auto list = as_nobody({"list", "--db", db});
        if (list.exit_code == 126 || list.exit_code == 127 || list.exit_code == -1 || list.err.contains("setpriv"))
            QSKIP("cannot run as another user here (setpriv needs root)");
        QVERIFY2(list.exit_code == 0, qPrintable(list.err));
        QCOMPARE(list.out.split('\n', Qt::SkipEmptyParts).size(), 3);
        const auto rename = as_nobody({"rename", "1", "z", "--db", db});
        QCOMPARE(rename.exit_code, 3);
        QVERIFY2(rename.err.contains("run store '" + db + "' is read-only (Permission denied)"),
                 qPrintable(rename.err));
        QCOMPARE(snapshot(dir.path()), before);
        QFile::setPermissions(folder, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
    }

    void fullDiskListWorksAndWritesSayDiskFull()
    {
        QTemporaryDir dir;
        const auto [source, fs] = store_and_mount_point(dir);
        QVERIFY(QFileInfo(fs).isDir());
        const QString db = fs + "/runs.sqlite";
        const QString full = "mount -t tmpfs -o size=1m tmpfs \"$1\" && cp '" + source +
                             "' \"$1/runs.sqlite\" && { dd if=/dev/zero of=\"$1/fill\" bs=4096 2>/dev/null; true; }";
        const auto list = run_cli_mounted(full, fs, {"list", "--db", db});
        if (list.exit_code == 97) QSKIP("cannot mount a tmpfs here (unshare -m needs CAP_SYS_ADMIN)");
        QVERIFY2(list.exit_code == 0, qPrintable(list.err));
        QCOMPARE(list.out.split('\n', Qt::SkipEmptyParts).size(), 3);
        const auto rename = run_cli_mounted(full, fs, {"rename", "1", "z", "--db", db});
        QCOMPARE(rename.exit_code, 3);
        QVERIFY2(rename.err.contains("run store '" + db + "'") && rename.err.contains("disk full"),
                 qPrintable(rename.err));
        QVERIFY2(!rename.err.contains("not a"), qPrintable(rename.err));
        // A tag on a full disk: the store's failure (3), naming the store.
        const auto tag = run_cli_mounted(full, fs, {"tag", "1", "t", "--db", db});
        QCOMPARE(tag.exit_code, 3);
        QVERIFY2(tag.err.contains("run store '" + db + "'") && tag.err.contains("disk full"), qPrintable(tag.err));
    }

    // An export over an earlier file, on a full disk: refused with the OS's reason, and the
    // earlier file is as it was (no truncated file, no temporary one left).
    void fullDiskExportLeavesTheEarlierFileWhole()
    {
        QTemporaryDir dir;
        const auto [source, fs] = store_and_mount_point(dir);
        QVERIFY(QFileInfo(fs).isDir());
        // The listing is taken inside the mount namespace, before the tmpfs goes with it.
        const QString script = "d=\"$1\"; shift; mount -t tmpfs -o size=1m tmpfs \"$d\" || exit 97; cp '" + source +
                               "' \"$d/runs.sqlite\"; printf 'earlier export\\n' > \"$d/metrics.csv\"; "
                               "dd if=/dev/zero of=\"$d/fill\" bs=4096 2>/dev/null; \"$@\"; code=$?; "
                               "echo; echo \"== listing\"; ls \"$d\"; cat \"$d/metrics.csv\"; exit $code";
        QProcess p;
        p.start("unshare", QStringList{"-m", "sh", "-c", script, "sh", fs, MANTISSA_TRAIN_EXE, "export", "1", "--format",
                                       "csv", "--out", fs + "/metrics.csv", "--db", fs + "/runs.sqlite"});
        QVERIFY(p.waitForFinished(120000));
        if (p.exitCode() == 97) QSKIP("cannot mount a tmpfs here (unshare -m needs CAP_SYS_ADMIN)");
        const QString out = QString::fromUtf8(p.readAllStandardOutput()), err = QString::fromUtf8(p.readAllStandardError());
        QCOMPARE(p.exitCode(), 2);
        QVERIFY2(err.contains("cannot write '" + fs + "/metrics.csv': No space left on device"), qPrintable(err));
        const QString listing = out.section("== listing\n", 1);
        QCOMPARE(listing, QString("fill\nmetrics.csv\nruns.sqlite\nearlier export\n"));
    }

    // A writing command that fails on a full disk leaves an empty WAL and a 3-byte -shm, which
    // SQLite cannot grow: the readers still read the store (they refused it, "disk full",
    // until space was freed).
    void aWriteThatFailedOnAFullDiskLeavesTheStoreReadable()
    {
        QTemporaryDir dir;
        const auto [source, fs] = store_and_mount_point(dir);
        const QString script = "d=\"$1\"; t=\"$2\"; mount -t tmpfs -o size=1m tmpfs \"$d\" || exit 97; cp '" + source +
                               "' \"$d/runs.sqlite\"; dd if=/dev/zero of=\"$d/fill\" bs=4096 2>/dev/null; "
                               "\"$t\" tag 1 x --db \"$d/runs.sqlite\"; echo \"tag $?\"; ls \"$d\"; "
                               "\"$t\" list --db \"$d/runs.sqlite\" && \"$t\" show 2 --db \"$d/runs.sqlite\"";
        QProcess p;
        p.start("unshare", QStringList{"-m", "sh", "-c", script, "sh", fs, MANTISSA_TRAIN_EXE});
        QVERIFY(p.waitForFinished(120000));
        if (p.exitCode() == 97) QSKIP("cannot mount a tmpfs here (unshare -m needs CAP_SYS_ADMIN)");
        const QString out = QString::fromUtf8(p.readAllStandardOutput());
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(out.contains("tag 3\nfill\nruns.sqlite\nruns.sqlite-shm\nruns.sqlite-wal\n"), qPrintable(out + err));
        QVERIFY2(p.exitCode() == 0, qPrintable(out + err));
        QVERIFY2(out.contains("run 2 'b'\nstatus: finished"), qPrintable(out));
    }

    // Training into a store on a disk that fills up: checkpoint writes fail as events (no
    // temporary file left), the store's lost rows are reported as a disk-full warning, the
    // process ends by itself (no abort), and the run is never left "running".
    void trainingOnAFullDiskEndsCleanly()
    {
        QTemporaryDir dir;
        const QString fs = dir.filePath("small");
        QVERIFY(QDir().mkpath(fs));
        const QString db = fs + "/runs.sqlite";
        const QString listing = dir.filePath("listing.txt");
        QProcess p;
        // The listing is taken inside the mount namespace, before the tmpfs goes with it.
        const QString script = "d=\"$1\"; shift; mount -t tmpfs -o size=512k tmpfs \"$d\" || exit 97; "
                               "dd if=/dev/zero of=\"$d/fill\" bs=1024 count=380 2>/dev/null; "
                               "\"$@\"; rc=$?; find \"$d\" > '" + listing + "'; exit $rc";
        p.start("unshare", QStringList{"-m", "sh", "-c", script, "sh", fs, MANTISSA_TRAIN_EXE, "run", project_, "--db",
                                       db, "--set", "training.steps=200", "--set", "telemetry.interval=1", "--set",
                                       "training.checkpoint_interval=5"});
        QVERIFY(p.waitForFinished(300000));
        const QString err = QString::fromUtf8(p.readAllStandardError());
        const QString out = QString::fromUtf8(p.readAllStandardOutput());
        if (p.exitCode() == 97) QSKIP("cannot mount a tmpfs here (unshare -m needs CAP_SYS_ADMIN)");
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QVERIFY2(!err.contains("terminate called") && !err.contains("Aborted"), qPrintable(err));
        QVERIFY2(p.exitCode() == 0 || p.exitCode() == 3, qPrintable(QString::number(p.exitCode()) + err));
        // The disk filled: checkpoints failed as warnings, and what the store lost is named.
        QVERIFY2(out.contains("[checkpoint_failed]") || err.contains("disk full"), qPrintable(out + err));
        QVERIFY2(err.contains("disk full"), qPrintable(err));
        QFile list(listing);
        QVERIFY(list.open(QIODevice::ReadOnly));
        const QString files = QString::fromUtf8(list.readAll());
        QVERIFY2(!files.contains(".pt.tmp"), qPrintable(files)); // no half-written checkpoint left
    }

    // A new store on a disk that is already full: refused as a store failure (exit 3), and the
    // empty file SQLite began is not left behind (the next command would call it "empty").
    void aNewStoreOnAFullDiskLeavesNoFile()
    {
        QTemporaryDir dir;
        const QString fs = dir.filePath("full");
        QVERIFY(QDir().mkpath(fs));
        const QString listing = dir.filePath("listing.txt");
        const QString script = "d=\"$1\"; shift; mount -t tmpfs -o size=512k tmpfs \"$d\" || exit 97; "
                               "dd if=/dev/zero of=\"$d/fill\" bs=4096 2>/dev/null; "
                               "\"$@\"; rc=$?; ls \"$d\" > '" + listing + "'; exit $rc";
        QProcess p;
        p.start("unshare", QStringList{"-m", "sh", "-c", script, "sh", fs, MANTISSA_TRAIN_EXE, "run", project_, "--db",
                                       fs + "/new.sqlite", "--set", "training.steps=1"});
        QVERIFY(p.waitForFinished(120000));
        if (p.exitCode() == 97) QSKIP("cannot mount a tmpfs here (unshare -m needs CAP_SYS_ADMIN)");
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QCOMPARE(p.exitCode(), 3);
        QVERIFY2(err.contains("run store '" + fs + "/new.sqlite' cannot be written: disk full"), qPrintable(err));
        QFile list(listing);
        QVERIFY(list.open(QIODevice::ReadOnly));
        QCOMPARE(QString::fromUtf8(list.readAll()), QString("fill\n"));
    }

    // SQLite would take a file shorter than its header for an empty database and write a
    // store over it; `run` refuses it and leaves it as it was.
    void runNeverWritesOverAFileThatIsNotAStore()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath("notes.bin");
        {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write("x");
        }
        const auto r = run_cli({"run", project_, "--db", path, "--set", "training.steps=2"});
        QCOMPARE(r.exit_code, 3);
        QVERIFY2(r.err.contains("'" + path + "' is not a SQLite database"), qPrintable(r.err));
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll(), QByteArray("x"));
        QCOMPARE(QDir(dir.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot), QStringList{"notes.bin"});
    }

    // A watcher's pause waits for a resume a terminal cannot send: Ctrl-C still stops the run
    // cleanly, and it can be resumed later.
    void ctrlCStopsARunPausedByAWatcher()
    {
        QTemporaryDir dir;
        const QString db = dir.filePath("paused.sqlite");
        QProcess p;
        p.start(MANTISSA_TRAIN_EXE, {"run", project_, "--db", db, "--set", "training.steps=1000000", "--set",
                                     "precision.preset=fp8-hybrid", "--set", "telemetry.interval=1", "--set",
                                     "telemetry.watchers.fp8_underflow_max=0", "--set",
                                     "telemetry.watchers.actions.fp8_underflow=pause"});
        QVERIFY(p.waitForStarted());
        QByteArray seen;
        QTRY_VERIFY_WITH_TIMEOUT((seen += p.readAllStandardOutput()).contains("[paused]"), 60000);
        QVERIFY(seen.contains("Ctrl-C stops the run here"));
        ::kill(static_cast<pid_t>(p.processId()), SIGINT);
        QVERIFY2(p.waitForFinished(30000), "a paused run did not stop on Ctrl-C");
        QCOMPARE(p.exitStatus(), QProcess::CrashExit);
        QCOMPARE(p.exitCode(), int(SIGINT));
        RunStore store(db.toStdString(), OpenMode::ReadOnly);
        QCOMPARE(status_text(store.find_run("1")->status), std::string("stopped"));
    }

    // A run killed before its first checkpoint is trained again from step 0 by resume: the
    // seed makes it the same run, so its losses equal a straight run's, each step once.
    void runKilledBeforeItsFirstCheckpointStartsOver()
    {
        QTemporaryDir dir;
        const QString db = dir.filePath("early.sqlite"), reference = dir.filePath("reference.sqlite");
        QProcess p;
        p.start(MANTISSA_TRAIN_EXE, {"run", project_, "--db", db, "--set", "training.steps=1000000", "--set",
                                     "training.checkpoint_interval=100000", "--set", "telemetry.log_interval=1"});
        QVERIFY(p.waitForStarted());
        QByteArray seen;
        QTRY_VERIFY_WITH_TIMEOUT((seen += p.readAllStandardOutput()).contains("step 3/"), 60000);
        // The first attempt's start is in the store (the writer commits within ~250 ms), so
        // the count of starts below can tell a dropped attempt from a kept one.
        // Steps too: a start-over that drops recorded steps is asked for (--start-over), and a
        // run killed before its first step was committed has none to lose.
        const auto starts_recorded = [&] {
            RunStore store(db.toStdString(), OpenMode::ReadOnly);
            if (store.find_run("1")->last_step == 0) return false;
            for (const auto& e : store.events(1))
                if (e.event.kind == EventKind::RunStarted) return true;
            return false;
        };
        QTRY_VERIFY_WITH_TIMEOUT(starts_recorded(), 30000);
        ::kill(static_cast<pid_t>(p.processId()), SIGKILL);
        QVERIFY(p.waitForFinished(30000));
        QVERIFY(!QDir(db + ".checkpoints/run-1").exists() || QDir(db + ".checkpoints/run-1").isEmpty());

        // Dropping what it recorded is asked for: a plain resume is refused, and drops nothing.
        const auto counts = [&] { return RunStore(db.toStdString(), OpenMode::ReadOnly).row_counts(1).scalars; };
        const auto recorded = counts();
        const int64_t last_step = RunStore(db.toStdString(), OpenMode::ReadOnly).find_run("1")->last_step;
        const auto refused = run_cli({"resume", "1", "--db", db, "--set", "training.steps=20"});
        QCOMPARE(refused.exit_code, 2);
        QVERIFY2(refused.err.contains(QString("error: run 1 'tiny' has no checkpoint to resume from (it stopped at "
                                              "step %1, before its first was recorded): a resume trains it again "
                                              "from step 0 and drops the %1 steps it recorded; pass --start-over to "
                                              "do so (nothing was changed)\n")
                                          .arg(last_step)),
                 qPrintable(refused.err));
        QCOMPARE(counts(), recorded);
        QVERIFY2(!refused.out.contains("settings changed"), qPrintable(refused.out)); // none was stored
        const auto resumed = run_cli({"resume", "1", "--db", db, "--set", "training.steps=20", "--start-over"});
        QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err + resumed.out));
        QVERIFY2(resumed.out.contains("ended before its first checkpoint: training it again from step 0"),
                 qPrintable(resumed.out));
        const auto straight = run_cli({"run", project_, "--db", reference, "--set", "training.steps=20"});
        QCOMPARE(straight.exit_code, 0);
        auto losses = [](const QString& path) {
            std::vector<std::pair<int64_t, double>> out;
            RunStore store(path.toStdString(), OpenMode::ReadOnly);
            for (const auto& row : store.scalars(1))
                if (row.tag == "train/loss") out.emplace_back(row.step, row.value);
            return out;
        };
        const auto again = losses(db), expected = losses(reference);
        QCOMPARE(again.size(), size_t(20));
        QVERIFY(again == expected); // bit for bit, every step once
        RunStore store(db.toStdString(), OpenMode::ReadOnly);
        QCOMPARE(status_text(store.find_run("1")->status), std::string("finished"));
        int started = 0;
        std::vector<std::string> rewinds;
        for (const auto& e : store.events(1)) {
            started += e.event.kind == EventKind::RunStarted;
            if (e.event.kind == EventKind::ResumedFromCheckpoint && e.event.later_steps_dropped)
                rewinds.push_back(std::to_string(e.event.step) + " " + e.event.message());
        }
        QCOMPARE(started, 1); // the first attempt's records were dropped, not doubled
        // And it says so as a resume does, so that a window following the run, and a replica
        // of it, drop the killed attempt's steps too (they showed them, mixed with the new).
        QCOMPARE(rewinds, (std::vector<std::string>{
                              "0 continuing at step 0; settings changed: training.steps 1000000 -> 20; the "
                              "interrupted attempt ended before its first checkpoint: trained again from step 0"}));
    }

    void ctrlCStopsCleanlyAndKeepsMetrics()
    {
        QProcess p;
        p.start(MANTISSA_TRAIN_EXE, {"run", project_, "--db", db_, "--name", "interrupted", "--set",
                                     "training.steps=1000000", "--set", "telemetry.log_interval=1"});
        QVERIFY(p.waitForStarted());
        // Wait until it is really training, then interrupt it like a terminal would.
        QByteArray seen;
        QTRY_VERIFY_WITH_TIMEOUT((seen += p.readAllStandardOutput()).contains("step 3/"), 60000);
        ::kill(static_cast<pid_t>(p.processId()), SIGINT);
        QVERIFY(p.waitForFinished(30000));
        // Saved, then ended by the signal it was stopped by (Qt gives the signal as the code).
        QCOMPARE(p.exitStatus(), QProcess::CrashExit);
        QCOMPARE(p.exitCode(), int(SIGINT));
        QVERIFY(!QFile::exists(db_ + "-wal")); // the store was closed before the signal ended the process
        std::optional<RunInfo> run;
        {
            RunStore store(db_.toStdString());
            run = store.find_run("interrupted");
            QVERIFY(run.has_value());
            QCOMPARE(status_text(run->status), std::string("stopped"));
            QVERIFY(run->last_step >= 3);
            int train_rows = 0;
            for (const auto& s : store.scalars(run->id)) train_rows += s.tag == "train/loss";
            QCOMPARE(int64_t(train_rows), run->last_step); // every finished step was saved
        }

        // A resume stopped the same way: the store that main opened for it is closed too (its
        // newest steps stayed in runs.sqlite-wal, and a copy of the file alone read
        // "interrupted").
        QProcess resumed;
        resumed.start(MANTISSA_TRAIN_EXE, {"resume", "interrupted", "--db", db_, "--set", "telemetry.log_interval=1"});
        QVERIFY(resumed.waitForStarted());
        seen.clear();
        const QString next = QString("step %1/").arg(run->last_step + 3);
        QTRY_VERIFY_WITH_TIMEOUT((seen += resumed.readAllStandardOutput()).contains(next.toUtf8()), 60000);
        ::kill(static_cast<pid_t>(resumed.processId()), SIGTERM);
        QVERIFY(resumed.waitForFinished(30000));
        QCOMPARE(resumed.exitStatus(), QProcess::CrashExit);
        QCOMPARE(resumed.exitCode(), int(SIGTERM));
        QVERIFY(!QFile::exists(db_ + "-wal"));
        RunStore again(db_.toStdString(), OpenMode::ReadOnly);
        QCOMPARE(status_text(again.find_run("interrupted")->status), std::string("stopped"));
    }
};

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
