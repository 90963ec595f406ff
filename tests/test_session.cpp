// SPDX-License-Identifier: GPL-3.0-or-later
// One run session for the CLI and the GUI, and checkpoints that cannot be mixed up: each
// is checksummed in the store and carries its run's identity; each store has its own folder.

#include <QtTest>
#include <QRegularExpression>

#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include <sqlite3.h>
#include <unistd.h>

#include "event_helpers.h"
#include "checkpoint_file.h"
#include "controller/training_controller.h"
#include "project_config.h"
#include "run_session.h"
#include "cli_process.h"
#include "run_capture.h"
#include "private_mounts.h"
#include "run_store.h"
#include "stored_zip.h"

using namespace mantissa;
namespace fs = std::filesystem;

namespace {

using Result = CliResult;

// 30 steps, a checkpoint every 10: step-10, step-20 and the final step-30 are kept.
const char* kProject = R"({
  "name": "tiny",
  "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context_length": 16},
  "data": {"kind": "synthetic-addition", "digits": 2, "examples": 600},
  "training": {"steps": 30, "batch_size": 4, "seed": 7, "threads": 1, "checkpoint_interval": 10},
  "eval": {"interval": 10, "batches": 2},
  "telemetry": {"log_interval": 5}
})";

std::string write_project(const QTemporaryDir& dir)
{
    const std::string path = dir.filePath("tiny.json").toStdString();
    std::ofstream(path) << kProject;
    return path;
}

// `dir`'s runs.sqlite holding the project's run, trained to its end by mantissa-train: the
// store's path, or "" (what the CLI said printed) where the run did not finish.
std::string store_with_a_finished_run(const QTemporaryDir& dir)
{
    const std::string project = write_project(dir), db = dir.filePath("runs.sqlite").toStdString();
    const auto r = run_cli({"run", QString::fromStdString(project), "--db", QString::fromStdString(db)});
    if (r.exit_code == 0) return db;
    std::fprintf(stderr, "%s%s", qPrintable(r.out), qPrintable(r.err));
    return {};
}

// 32 consecutive bytes in the middle of the file, each inverted: the size stays the same.
void flip_32_bytes(const std::string& path)
{
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const auto middle = static_cast<std::streamoff>(f.tellg()) / 2;
    char bytes[32];
    f.seekg(middle);
    f.read(bytes, sizeof bytes);
    for (char& b : bytes) b = static_cast<char>(~b);
    f.seekp(middle);
    f.write(bytes, sizeof bytes);
}

Series train_losses(const std::string& db, int64_t run_id)
{
    RunStore store(db);
    return store.series(run_id, "train/loss");
}

std::vector<std::string> event_kinds(const std::string& db, int64_t run_id)
{
    RunStore store(db);
    std::vector<std::string> kinds;
    for (const auto& e : store.events(run_id)) kinds.push_back(e.kind);
    return kinds;
}

bool contains(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

// Throws at step 3, as a sink on a full disk might: training cannot go on.
class FailingSink : public TelemetrySink {
public:
    void on_step(const StepMetrics& m) override
    {
        if (m.step == 3) throw std::runtime_error("disk full");
    }
    void on_eval(const EvalMetrics&) override {}
    void on_event(const RunEvent&) override {}
};

} // namespace

class TestSession : public QObject {
    Q_OBJECT
private slots:
    void guiAndCliRunsGoThroughOneSession();
    void damagedNewestCheckpointFallsBackToThePreviousOne();
    void aFallBackPastAResumesSettingsSaysWhereTheyNowApply();
    void anUnreadableCheckpointIsNotDamage();
    void aRunWhoseFinalStateCannotBeKeptFails();
    void rotationKeepsTheFileJustWritten();
    void aDiskWithRoomForTheKeptCheckpointsTakesTheNext();
    void aFailedFinalCheckpointOfAResumeNamesTheOneItCameFrom();
    void aResumeWhoseCheckpointsAreAllGoneSaysTheyWereRecorded();
    void aDamagedCheckpointOfTheRunIsWrittenAgain();
    void aMovedStoresDamagedCheckpointIsWrittenAgain();
    void aResumeRefusesACheckpointFolderItCannotWriteIn();
    void aResumeThatChangesThePresetChangesTheLayers();
    void aResumeFromAnotherFolderFindsTheProjectsFolder();
    void aResumesOverridesAreStoredWithTheRun();
    void aCheckpointPastTheCommittedStepsIsNotResumedFrom();
    void noGoodCheckpointLeftExits3NamingTheFile();
    void strayFilesInTheFolderAreIgnored();
    void twoStoresInOneFolderKeepTheirOwnCheckpoints();
    void anotherRunsCheckpointIsRefused();
    void exportNeedsNeitherTheDataNorTheDevice();
    void aResumeOnChangedDataIsRefused();
    void sharedExplicitCheckpointDirIsRefused();
    void aSweepsPointsEachGetAFolderInTheProjectsCheckpointDir();
    void deletingARunTakesItsCheckpointsAndRetiresItsFolder();
    void relativeCheckpointDirIsTheProjectFilesFolder();
    void aResumeMakesTheInterruptedRunsPrecisionChangesAgain();
    void aResumesSettingsSupersedeLiveChangesOnlyWhereTheLayersChange();
    void aChangeAcceptedBehindAStopIsMadeAndKept();
    void ownershipIsReadFromTheValuesAlone();
    void version3StoreWithOldFolderStillResumes();
    void checkpointOfAnotherModelShapeIsRefused();
    void failedCheckpointWriteIsAnEventAndTrainingGoesOn();
    void anUnreadableFileInTheWayNamesNoOtherRun();
    void aCheckpointAfterLostRowsIsNotRecorded();
    void aRunDeletedBeforeItsClaimIsNotTrained();
    void aRunThatCannotGoOnEndsFailed();
    void damagedStoredSettingsNameTheStore();
};

void TestSession::guiAndCliRunsGoThroughOneSession()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const std::string db = dir.filePath("s.sqlite").toStdString();
    {
        TrainingController controller(QString::fromStdString(db));
        QSignalSpy finished(&controller, &TrainingController::finished);
        QVERIFY(controller.start(load_project_file(project), QString::fromStdString(project)));
        QVERIFY(finished.wait(120000));
        QVERIFY(controller.lastStatus() == RunStatus::Finished);
        QCOMPARE(controller.runId(), qint64(1));
    }
    const auto cli = run_cli({"run", QString::fromStdString(project), "--db", QString::fromStdString(db)});
    QVERIFY2(cli.exit_code == 0, qPrintable(cli.err + cli.out));

    RunStore store(db);
    const auto gui_run = store.find_run("1"), cli_run = store.find_run("2");
    QVERIFY(gui_run && cli_run);
    QCOMPARE(status_text(gui_run->status), std::string("finished"));
    QCOMPARE(status_text(cli_run->status), std::string("finished"));
    QCOMPARE(gui_run->config_json, cli_run->config_json);
    QCOMPARE(gui_run->uuid.size(), size_t(32));
    QCOMPARE(cli_run->uuid.size(), size_t(32));
    QVERIFY(gui_run->uuid != cli_run->uuid);
    QCOMPARE(store.series(1, "train/loss"), store.series(2, "train/loss")); // bit for bit
    for (const int64_t id : {1, 2}) {
        QCOMPARE(store.checkpoint_dir(id), fs::absolute(db).string() + ".checkpoints/run-" + std::to_string(id));
        const auto rows = store.checkpoints(id);
        QCOMPARE(rows.size(), size_t(3));
        for (size_t i = 0; i < rows.size(); ++i) {
            QCOMPARE(rows[i].step, int64_t(10 * (i + 1)));
            QCOMPARE(rows[i].path, store.checkpoint_dir(id) + "/" + checkpoint_file_name(rows[i].step));
            const auto sum = checksum_file(rows[i].path);
            QCOMPARE(sum.checksum, rows[i].checksum);
            QCOMPARE(sum.bytes, rows[i].bytes);
            const auto identity = read_checkpoint_identity(rows[i].path);
            QVERIFY(identity.has_value());
            QCOMPARE(identity->run_uuid, (id == 1 ? gui_run : cli_run)->uuid);
            QCOMPARE(identity->run_id, id);
        }
        const auto kinds = event_kinds(db, id);
        QCOMPARE(std::count(kinds.begin(), kinds.end(), std::string("checkpoint")), 3);
        QVERIFY(contains(kinds, "run_finished"));
    }
    QVERIFY(!fs::exists(dir.filePath("checkpoints").toStdString())); // the old shared folder is not used
}

void TestSession::damagedNewestCheckpointFallsBackToThePreviousOne()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    fs::create_directories(dir.filePath("a").toStdString());
    const std::string a = dir.filePath("a/runs.sqlite").toStdString();
    const auto first = run_cli({"run", QString::fromStdString(project), "--db", QString::fromStdString(a)});
    QVERIFY2(first.exit_code == 0, qPrintable(first.err));
    // b: the same run, where the newest checkpoint is simply missing.
    fs::copy(dir.filePath("a").toStdString(), dir.filePath("b").toStdString(), fs::copy_options::recursive);
    const std::string b = dir.filePath("b/runs.sqlite").toStdString();
    fs::remove(b + ".checkpoints/run-1/step-00000030.pt");
    const std::string damaged = fs::absolute(a).string() + ".checkpoints/run-1/step-00000030.pt";
    flip_32_bytes(damaged);

    const auto ra = run_cli({"resume", "1", "--db", QString::fromStdString(a), "--set", "training.steps=40"});
    QVERIFY2(ra.exit_code == 0, qPrintable(ra.err + ra.out));
    QVERIFY2(ra.out.contains("at step 20 from"), qPrintable(ra.out));
    QVERIFY2(ra.err.contains(QString::fromStdString("warning: checkpoint '" + damaged + "' is damaged")), qPrintable(ra.err));
    const auto rb = run_cli({"resume", "1", "--db", QString::fromStdString(b), "--set", "training.steps=40"});
    QVERIFY2(rb.exit_code == 0, qPrintable(rb.err + rb.out));
    QVERIFY(rb.out.contains("at step 20 from"));
    QVERIFY(!rb.err.contains("damaged"));
    // Not damage, but said: the steps after 20 are trained again.
    const std::string gone = fs::absolute(b).string() + ".checkpoints/run-1/step-00000030.pt";
    QVERIFY2(rb.err.contains(QString::fromStdString("note: newer checkpoint of this run is missing (deleted or moved): "
                                                    "step 30 ('" + gone + "'); the steps after step 20 are trained again")),
             qPrintable(rb.err));
    QVERIFY(!ra.err.contains("missing"));

    const Series la = train_losses(a, 1), lb = train_losses(b, 1);
    QCOMPARE(la.size(), size_t(40));
    QCOMPARE(la, lb); // steps 21..40 of both came from the same good step-20 checkpoint, bit for bit
    const auto kinds = event_kinds(a, 1);
    QCOMPARE(std::count(kinds.begin(), kinds.end(), std::string("checkpoint_damaged")), 1);
    QVERIFY(!contains(event_kinds(b, 1), "checkpoint_damaged"));
    RunStore store(a);
    QCOMPARE(status_text(store.find_run("1")->status), std::string("finished"));
}

// A run that trained but could not keep its final checkpoint cannot be resumed from its end:
// the command says which step it can be resumed from and exits 3 (it said "finished", exit 0).
// A default checkpoint folder that cannot be made is refused before the run, as a project's is.
void TestSession::aRunWhoseFinalStateCannotBeKeptFails()
{
    QTemporaryDir dir;
    const QString project = QString::fromStdString(write_project(dir)), db = dir.filePath("runs.sqlite");
    const std::string folder = fs::absolute(db.toStdString()).string() + ".checkpoints/run-1";
    fs::create_directories(folder + "/" + checkpoint_file_name(30) + "/in-the-way");
    const auto r = run_cli({"run", project, "--db", db});
    QCOMPARE(r.exit_code, 3);
    QVERIFY2(r.out.contains("finished after 30 steps"), qPrintable(r.out));
    QVERIFY2(r.err.contains("error: the final checkpoint could not be written (") &&
                 r.err.contains("); the newest this run saved is step 20, and a resume trains the steps after it "
                                "again\n"),
             qPrintable(r.err));
    QCOMPARE(status_text(RunStore(db.toStdString()).find_run("1")->status), std::string("finished"));
    // Resumed, it starts from step 20 and does not take the folder for another run's file when
    // step 30 comes again.
    const auto resumed = run_cli({"resume", "1", "--db", db, "--set", "training.steps=40"});
    QVERIFY2(resumed.exit_code == 0 && resumed.out.contains("at step 20 from"), qPrintable(resumed.err + resumed.out));
    const QString step30 = QString::fromStdString(folder + "/" + checkpoint_file_name(30));
    QVERIFY2(resumed.out.contains("[checkpoint_failed] checkpoint '" + step30 +
                                  "' could not be written: a folder is in its place; not overwritten"),
             qPrintable(resumed.out));
    // A recorded checkpoint with a folder put in its place is named as the steps trained again.
    const std::string step40 = folder + "/" + checkpoint_file_name(40);
    QVERIFY(fs::remove(step40) && fs::create_directory(step40));
    const auto past = run_cli({"resume", "1", "--db", db, "--set", "training.steps=50"});
    QVERIFY2(past.exit_code == 0 && past.out.contains("at step 20 from"), qPrintable(past.err + past.out));
    QVERIFY2(past.err.contains(QString::fromStdString("step 40 ('" + step40 + "', a folder in its place)")),
             qPrintable(past.err));

    QTemporaryDir other;
    const QString db2 = other.filePath("runs.sqlite");
    QVERIFY(QFile(db2 + ".checkpoints").open(QIODevice::WriteOnly)); // a file where the folder goes
    const auto refused = run_cli({"run", project, "--db", db2});
    QCOMPARE(refused.exit_code, 3);
    QVERIFY2(refused.err.contains("error: checkpoints beside the run store: cannot make the folder '" +
                                  QFileInfo(db2 + ".checkpoints").absoluteFilePath() + "'"),
             qPrintable(refused.err));
    QVERIFY(RunStore(db2.toStdString()).list_runs().empty()); // no run made
}

// A checkpoint this process cannot open was never read, so it is not damaged: the resume stops
// with exit 2, says why, and changes nothing. (Taken for damage, it made the run fall back to
// step 20, dropped the rows after it, and wrote the next checkpoint over the good file; found
// by an audit.) Root opens any file: there the commands run as the user nobody.
void TestSession::anUnreadableCheckpointIsNotDamage()
{
    QTemporaryDir dir;
    QVERIFY(QFile::setPermissions(dir.path(), QFileDevice::Permissions(0x7777))); // nobody may work in it
    const bool root = ::geteuid() == 0;
    const QString setpriv = QStandardPaths::findExecutable("setpriv");
    if (root && setpriv.isEmpty()) QSKIP("root reads any file, and there is no setpriv to run as another user");
    const QStringList as_nobody{"--reuid=65534", "--regid=65534", "--clear-groups"};
    // A TMPDIR under a private folder (/root/tmp): nobody could not reach the project at all.
    if (root && run_program(setpriv, as_nobody + QStringList{"test", "-w", dir.path()}).exit_code != 0)
        QSKIP("the user nobody cannot reach the temporary folder (TMPDIR)");
    const auto cli = [&](const QStringList& args) {
        return root ? run_program(setpriv, as_nobody + QStringList{MANTISSA_TRAIN_EXE} + args) : run_cli(args);
    };
    const QString project = QString::fromStdString(write_project(dir)), db = dir.filePath("runs.sqlite");
    const auto first = cli({"run", project, "--db", db});
    QVERIFY2(first.exit_code == 0, qPrintable(first.err));
    const std::string newest = db.toStdString() + ".checkpoints/run-1/" + checkpoint_file_name(30);
    const FileChecksum before = checksum_file(newest);
    fs::permissions(newest, fs::perms::none);
    const auto resumed = cli({"resume", "1", "--db", db, "--set", "training.steps=40"});
    fs::permissions(newest, fs::perms::owner_read | fs::perms::owner_write);
    QCOMPARE(resumed.exit_code, 2);
    const std::string said = "error: checkpoint '" + newest + "' cannot be read: Permission denied; it is not damaged, "
                             "and nothing was changed";
    QVERIFY2(resumed.err.contains(QString::fromStdString(said)), qPrintable(resumed.err));
    const FileChecksum after = checksum_file(newest);
    QCOMPARE(after.checksum, before.checksum);
    QCOMPARE(train_losses(db.toStdString(), 1).size(), size_t(30)); // no row dropped
    QVERIFY(!contains(event_kinds(db.toStdString(), 1), "checkpoint_damaged"));
    // A checkpoint folder that cannot be listed is said so, not called empty.
    const std::string folder = db.toStdString() + ".checkpoints/run-1";
    fs::permissions(folder, fs::perms::none);
    const auto unlisted = cli({"resume", "1", "--db", db, "--set", "training.steps=40"});
    fs::permissions(folder, fs::perms::owner_all);
    QCOMPARE(unlisted.exit_code, 2);
    QVERIFY2(unlisted.err.contains(QString::fromStdString("run 1's checkpoint folder '" + folder +
                                                          "' cannot be read: Permission denied")),
             qPrintable(unlisted.err));
    // A run store that cannot be opened is said so, not called "not a SQLite database".
    fs::permissions(db.toStdString(), fs::perms::none);
    const auto listed = cli({"list", "--db", db});
    fs::permissions(db.toStdString(), fs::perms::owner_read | fs::perms::owner_write);
    QVERIFY2(listed.exit_code != 0 && listed.err.contains("run store '" + db + "' cannot be read: Permission denied"),
             qPrintable(listed.err));
}

// A resume that changed settings (here at step 30) stored them as the run's. One that falls
// back to an older checkpoint (step 20: the newer ones gone) trains steps 21-30 again under
// them: it cannot train those steps as they were, and says so, in its event and on stderr.
void TestSession::aFallBackPastAResumesSettingsSaysWhereTheyNowApply()
{
    QTemporaryDir dir;
    const QString project = QString::fromStdString(write_project(dir)), db = dir.filePath("runs.sqlite");
    QCOMPARE(run_cli({"run", project, "--db", db}).exit_code, 0);
    const auto changed = run_cli({"resume", "1", "--db", db, "--set", "training.steps=40", "--set",
                                  "optimizer.learning_rate=0.002"});
    QVERIFY2(changed.exit_code == 0, qPrintable(changed.err + changed.out));
    QVERIFY2(!changed.err.contains("apply from step"), qPrintable(changed.err)); // nothing was moved
    const auto remove = [&](int step) {
        return fs::remove(db.toStdString() + ".checkpoints/run-1/" + checkpoint_file_name(step));
    };
    // Back to step 30, where the settings changed: they apply from step 31 as before.
    QVERIFY(remove(40));
    const auto again = run_cli({"resume", "1", "--db", db});
    QVERIFY2(again.exit_code == 0 && again.out.contains("at step 30 from"), qPrintable(again.err + again.out));
    QVERIFY2(!again.err.contains("apply from step"), qPrintable(again.err));
    QVERIFY(remove(30) && remove(40));
    const auto back = run_cli({"resume", "1", "--db", db});
    QVERIFY2(back.exit_code == 0, qPrintable(back.err + back.out));
    QVERIFY2(back.out.contains("at step 20 from"), qPrintable(back.out));
    const QRegularExpression said("the settings the resume at step 30 changed \\(optimizer.learning_rate [0-9.e-]+ -> "
                                  "0.002, training.steps 30 -> 40\\) apply from step 21 on");
    QVERIFY2(said.match(back.err).hasMatch(), qPrintable(back.err));
    RunStore store(db.toStdString());
    std::vector<std::string> resumes;
    for (const auto& e : store.events(1))
        if (e.event.kind == EventKind::ResumedFromCheckpoint) resumes.push_back(e.event.text);
    QCOMPARE(resumes.size(), size_t(3));
    QVERIFY2(!said.match(QString::fromStdString(resumes[0])).hasMatch(), resumes[0].c_str());
    QVERIFY2(!QString::fromStdString(resumes[1]).contains("apply from step"), resumes[1].c_str());
    QVERIFY2(said.match(QString::fromStdString(resumes[2])).hasMatch(), resumes[2].c_str());

    // A store from before the settings were a field of the event (2026-12-06) has them in its
    // text alone: a fallback past that resume reads them there, and says the same.
    {
        sqlite3* raw = nullptr;
        QCOMPARE(sqlite3_open(db.toUtf8().constData(), &raw), SQLITE_OK);
        QCOMPARE(sqlite3_exec(raw,
                              "UPDATE events SET fields = json_set(json_remove(fields, '$.settings_changed'), "
                              "'$.text', 'settings changed: optimizer.learning_rate 0.001 -> 0.002, "
                              "training.steps 30 -> 40') "
                              "WHERE kind = 'resumed_from_checkpoint' AND json_extract(fields, '$.settings_changed') "
                              "IS NOT NULL",
                              nullptr, nullptr, nullptr),
                 SQLITE_OK);
        QCOMPARE(sqlite3_changes(raw), 1);
        sqlite3_close(raw);
    }
    QVERIFY(remove(30) && remove(40)); // the resume at step 20 wrote them again
    const auto legacy = run_cli({"resume", "1", "--db", db});
    QVERIFY2(legacy.exit_code == 0 && legacy.out.contains("at step 20 from"), qPrintable(legacy.err + legacy.out));
    QVERIFY2(legacy.err.contains("the settings the resume at step 30 changed (optimizer.learning_rate 0.001 -> 0.002, "
                                 "training.steps 30 -> 40) apply from step 21 on"),
             qPrintable(legacy.err));

    // The layers' formats are not moved: their change is made again at step 30, as it was.
    QTemporaryDir other;
    const QString project2 = QString::fromStdString(write_project(other)), db2 = other.filePath("runs.sqlite");
    QCOMPARE(run_cli({"run", project2, "--db", db2}).exit_code, 0);
    QCOMPARE(run_cli({"resume", "1", "--db", db2, "--set", "training.steps=40", "--set", "precision.preset=bf16"})
                 .exit_code,
             0);
    for (const int step : {30, 40})
        QVERIFY(fs::remove(db2.toStdString() + ".checkpoints/run-1/" + checkpoint_file_name(step)));
    const auto formats = run_cli({"resume", "1", "--db", db2});
    QVERIFY2(formats.err.contains("note: the settings the resume at step 30 changed (precision.preset fp32 -> bf16, "
                                  "training.steps 30 -> 40) apply from step 21 on, but for the layers' formats, which "
                                  "change at step 30 as they did\n"),
             qPrintable(formats.err));
    RunStore store2(db2.toStdString());
    std::string replayed = "no resume event";
    for (const auto& e : store2.events(1))
        if (e.event.kind == EventKind::ResumedFromCheckpoint && e.step == 20) replayed = e.event.text;
    QVERIFY2(replayed.starts_with("makes the precision changes of the interrupted run again at step 30; the settings"),
             replayed.c_str());
}

// A resume that fell back past a damaged newest checkpoint (step 30) writes step 25 with
// checkpoint_keep=1: rotation keeps step 25, not the damaged file of the abandoned future.
void TestSession::rotationKeepsTheFileJustWritten()
{
    QTemporaryDir dir;
    const std::string db = store_with_a_finished_run(dir);
    QVERIFY(!db.empty());
    const std::string folder = fs::absolute(db).string() + ".checkpoints/run-1/";
    flip_32_bytes(folder + "step-00000030.pt");
    const auto r = run_cli({"resume", "1", "--db", QString::fromStdString(db), "--set", "training.steps=25", "--set",
                            "training.checkpoint_keep=1", "--set", "training.checkpoint_interval=5"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains("at step 20 from"), qPrintable(r.out));
    QVERIFY(fs::exists(folder + "step-00000025.pt"));
    QVERIFY(!fs::exists(folder + "step-00000020.pt")); // rotated: one kept up to step 25
    const auto again = run_cli({"resume", "1", "--db", QString::fromStdString(db), "--set", "training.steps=26"});
    QVERIFY2(again.exit_code == 0, qPrintable(again.err + again.out));
    QVERIFY2(again.out.contains("at step 25 from"), qPrintable(again.out));
}

// A disk with room for checkpoint_keep checkpoints and a little more: the next one's temporary
// file did not fit while the oldest was still there (rotation came after a write), so every
// checkpoint after the keep-th failed to the end of the run; and a temporary file that a killed
// write left blocked the next write until one succeeded (read-only audit 'ckpt-scale').
void TestSession::aDiskWithRoomForTheKeptCheckpointsTakesTheNext()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const std::string probe_db = dir.filePath("probe.sqlite").toStdString();
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", QString::fromStdString(probe_db), "--set",
                      "training.steps=10"})
                 .exit_code,
             0);
    const auto size = fs::file_size(fs::absolute(probe_db).string() + ".checkpoints/run-1/step-00000010.pt");
    const QString small = dir.filePath("small");
    QVERIFY(QDir().mkpath(small));
    // Two checkpoints and half of a third.
    const std::string room = std::to_string((size * 5 / 2 + 4095) / 4096 * 4) + "k";
    if (!test::mount_tmpfs(small, room.c_str())) QSKIP("cannot mount a tmpfs here (needs CAP_SYS_ADMIN)");
    const test::MountGuard mounted(small);
    const QString db = dir.filePath("runs.sqlite");
    const QString checkpoints = small + "/ck";
    const QStringList keep2{"--set", "training.checkpoint_keep=2", "--set", "training.checkpoint_dir=" + checkpoints};
    const auto r = run_cli(QStringList{"run", QString::fromStdString(project), "--db", db} + keep2);
    QVERIFY2(r.exit_code == 0 && !r.out.contains("checkpoint_failed"), qPrintable(r.err + r.out));
    const std::string folder = checkpoints.toStdString() + "/"; // a folder of its own: no run-N in it
    QVERIFY(!fs::exists(folder + "step-00000010.pt"));
    // The checksum recorded was made as the file was streamed out: the file's own.
    for (const auto& row : RunStore(db.toStdString()).checkpoints(1))
        if (fs::exists(row.path)) {
            const auto sum = checksum_file(row.path);
            QCOMPARE(row.checksum, sum.checksum);
            QCOMPARE(row.bytes, sum.bytes);
        }
    QVERIFY(fs::exists(folder + "step-00000020.pt") && fs::exists(folder + "step-00000030.pt"));

    // What a write killed half-way leaves (a process long gone): it makes way for the next one.
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    const std::string stale = folder + "step-00000040.pt.tmp." + host + ".999999.0";
    std::ofstream(stale) << std::string(size / 2, 'x');
    const auto again = run_cli(QStringList{"resume", "1", "--db", db, "--set", "training.steps=40"} + keep2);
    QVERIFY2(again.exit_code == 0 && !again.out.contains("checkpoint_failed"), qPrintable(again.err + again.out));
    QVERIFY(!fs::exists(stale));
    QVERIFY(fs::exists(folder + "step-00000040.pt"));
}

// Every recorded checkpoint deleted or moved: the resume says the store recorded them and
// where to put them back ("none in '...'" read as if there had never been any).
void TestSession::aResumeWhoseCheckpointsAreAllGoneSaysTheyWereRecorded()
{
    QTemporaryDir dir;
    const std::string db = store_with_a_finished_run(dir);
    QVERIFY(!db.empty());
    const std::string folder = fs::absolute(db).string() + ".checkpoints/run-1";
    for (const auto& e : fs::directory_iterator(folder)) fs::remove(e.path());
    const auto r = run_cli({"resume", "1", "--db", QString::fromStdString(db), "--set", "training.steps=35"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains("error: run 1's newest recorded checkpoint (step 30, '" + QString::fromStdString(folder) +
                            "/step-00000030.pt') is missing from '" + QString::fromStdString(folder) +
                            "', and no other of its checkpoints is there (deleted or moved): put it back there to "
                            "resume from it"),
             qPrintable(r.err));
}

// A resume whose final checkpoint cannot be written names the checkpoint it resumed from as the
// newest saved: it said "this run saved no checkpoint" of a run that had three (read-only audit
// 'ckpt-scale').
void TestSession::aFailedFinalCheckpointOfAResumeNamesTheOneItCameFrom()
{
    QTemporaryDir dir;
    const std::string db = store_with_a_finished_run(dir);
    QVERIFY(!db.empty());
    const std::string folder = fs::absolute(db).string() + ".checkpoints/run-1/";
    fs::create_directories(folder + "step-00000035.pt"); // a folder in its place: never written over
    const auto r = run_cli({"resume", "1", "--db", QString::fromStdString(db), "--set", "training.steps=35"});
    QCOMPARE(r.exit_code, 3);
    QVERIFY2(r.err.contains("; the newest this run saved is step 30, and a resume trains the steps after it again"),
             qPrintable(r.err));
}

// The run's final checkpoint cut short (it no longer reads, so it names no run): the resume
// trains steps 21..30 again and writes step 30 over it, as its store recorded the file as
// this run's. It used to be refused as "another run's", and every later resume began at 20.
void TestSession::aDamagedCheckpointOfTheRunIsWrittenAgain()
{
    QTemporaryDir dir;
    const std::string db = store_with_a_finished_run(dir);
    QVERIFY(!db.empty());
    const std::string last = fs::absolute(db).string() + ".checkpoints/run-1/step-00000030.pt";
    fs::resize_file(last, 1000);
    QVERIFY(!read_checkpoint_ownership(last).readable);
    const auto r = run_cli({"resume", "1", "--db", QString::fromStdString(db)});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains("at step 20 from"), qPrintable(r.out));
    QVERIFY2(!r.out.contains("checkpoint_failed"), qPrintable(r.out));
    QVERIFY(read_checkpoint_ownership(last).readable);
    const auto again = run_cli({"resume", "1", "--db", QString::fromStdString(db), "--set", "training.steps=31"});
    QVERIFY2(again.exit_code == 0, qPrintable(again.err + again.out));
    QVERIFY2(again.out.contains("at step 30 from"), qPrintable(again.out));
    QVERIFY(!again.err.contains("damaged"));
}

// A store moved with its folder keeps the old paths in its rows: its damaged file was not
// taken for its own, and the step's checkpoint was refused on every resume ("belongs to
// another run"), which then ended with exit 3.
void TestSession::aMovedStoresDamagedCheckpointIsWrittenAgain()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    fs::create_directories(dir.filePath("before").toStdString());
    const std::string before = dir.filePath("before/runs.sqlite").toStdString();
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", QString::fromStdString(before)}).exit_code, 0);
    fs::rename(dir.filePath("before").toStdString(), dir.filePath("after").toStdString());
    const std::string db = dir.filePath("after/runs.sqlite").toStdString();
    const std::string last = db + ".checkpoints/run-1/step-00000030.pt";
    fs::resize_file(last, 1000);
    const auto r = run_cli({"resume", "1", "--db", QString::fromStdString(db)});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains("at step 20 from"), qPrintable(r.out));
    QVERIFY2(!r.out.contains("checkpoint_failed"), qPrintable(r.out));
    QVERIFY(read_checkpoint_ownership(last).readable);
}

// `run` refuses a checkpoint folder it cannot write in before it trains; a resume trained to
// the end with every checkpoint failing (exit 3), and stored a --set's folder as the run's.
void TestSession::aResumeRefusesACheckpointFolderItCannotWriteIn()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const QString db = dir.filePath("runs.sqlite");
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", db, "--set", "training.steps=20"}).exit_code, 0);
    const std::string blocker = dir.filePath("a-file").toStdString();
    std::ofstream(blocker) << "in the way";
    const auto r = run_cli({"resume", "1", "--db", db, "--set", "training.steps=30", "--set",
                            QString::fromStdString("training.checkpoint_dir=" + blocker + "/sub")});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains(QString::fromStdString("training.checkpoint_dir: cannot make the folder '" + blocker +
                                                   "/sub': ")),
             qPrintable(r.err));
    RunStore store(db.toStdString());
    const auto info = store.find_run("1");
    QCOMPARE(info->last_step, int64_t(20));
    QVERIFY(info->config_json.find("a-file") == std::string::npos);
}

// A checkpoint holds its layers' formats; `resume --set precision.preset=bf16` used to keep
// them (fp16) while the run's settings said bf16. The change is made at the resume's first
// boundary and recorded as a user's precision change, one per layer that changes.
void TestSession::aResumeThatChangesThePresetChangesTheLayers()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const QString db = dir.filePath("runs.sqlite");
    const auto first = run_cli({"run", QString::fromStdString(project), "--db", db, "--set", "training.steps=10", "--set",
                                "precision.preset=fp16"});
    QVERIFY2(first.exit_code == 0, qPrintable(first.err));
    {
        // A user's live change after the checkpoint, as an interrupted run leaves it: a plain
        // resume makes it again at step 11; one that asks for other formats does not (it would
        // switch lm_head back from what was asked for).
        RunStore writer(db.toStdString());
        RunEvent change;
        change.step = 11;
        change.kind = EventKind::PrecisionChanged;
        change.cause = ChangeCause::User;
        change.pattern = "lm_head";
        change.new_formats = GemmFormats{NumberFormat::FP32, NumberFormat::FP32, NumberFormat::FP32};
        writer.append_event(1, change);
    }
    const auto r = run_cli({"resume", "1", "--db", db, "--set", "training.steps=12", "--set", "precision.preset=bf16"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains("precision.preset fp16 -> bf16"), qPrintable(r.out));
    // Fewer steps than the checkpoint's: refused (it used to "finish after 12 steps" and store
    // training.steps=5 as the run's), and the run is as it was.
    const auto fewer = run_cli({"resume", "1", "--db", db, "--set", "training.steps=5"});
    QCOMPARE(fewer.exit_code, 2);
    QVERIFY2(fewer.err.contains("error: training.steps=5 ends before step 12, where run 1 resumes (from '"),
             qPrintable(fewer.err));
    QVERIFY2(!fewer.err.contains("settings changed"), qPrintable(fewer.err));
    RunStore store(db.toStdString());
    QVERIFY(store.find_run("1")->config_json.find("\"steps\": 12") != std::string::npos);
    std::vector<std::string> changed;
    for (const auto& row : store.events(1)) {
        const RunEvent& e = row.event;
        if (e.kind != EventKind::PrecisionChanged) continue;
        QVERIFY(e.cause != ChangeCause::Resume); // the interrupted run's change is not replayed,
        QCOMPARE(e.step, int64_t(10));           // and its record goes with the steps after 10
        QCOMPARE(e.cause, ChangeCause::User);
        QVERIFY(e.new_formats && *e.new_formats == (GemmFormats{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16}));
        changed.push_back(e.pattern);
    }
    // Every GEMM layer of the 1-block model (qkv, sdpa, proj, fc1, fc2, lm_head) went fp16 -> bf16.
    QCOMPARE(changed.size(), size_t(6));
    QVERIFY(std::find(changed.begin(), changed.end(), "lm_head") != changed.end());
    // A resume that does not touch the formats changes none.
    const auto again = run_cli({"resume", "1", "--db", db, "--set", "training.steps=14"});
    QVERIFY2(again.exit_code == 0, qPrintable(again.err + again.out));
    int changes = 0;
    for (const auto& row : RunStore(db.toStdString()).events(1)) changes += row.event.kind == EventKind::PrecisionChanged;
    QCOMPARE(changes, 6); // the 6 at step 10

    // One that asks for another scaling recipe of layers with no FP8 GEMM changes none: the
    // recipe is an FP8 GEMM's (it used to switch all six to the same formats).
    const auto rescaled = run_cli({"resume", "1", "--db", db, "--set", "training.steps=16", "--set",
                                   "precision.fp8.scaling=nvfp4"});
    QVERIFY2(rescaled.exit_code == 0, qPrintable(rescaled.err + rescaled.out));
    changes = 0;
    for (const auto& row : RunStore(db.toStdString()).events(1))
        changes += row.event.kind == EventKind::PrecisionChanged;
    QCOMPARE(changes, 6);
    // With FP8 layers it changes theirs, at the resume's boundary, with the formats as they are:
    // the checkpoint holds the recipe the layers ran.
    const auto fp8 = run_cli({"resume", "1", "--db", db, "--set", "training.steps=18", "--set",
                              "precision.preset=fp8-hybrid"});
    QVERIFY2(fp8.exit_code == 0, qPrintable(fp8.err + fp8.out));
    const auto nvfp4 = run_cli({"resume", "1", "--db", db, "--set", "training.steps=20", "--set",
                                "precision.fp8.scaling=delayed"});
    QVERIFY2(nvfp4.exit_code == 0, qPrintable(nvfp4.err + nvfp4.out));
    std::vector<std::string> recipes;
    for (const auto& row : RunStore(db.toStdString()).events(1)) {
        const RunEvent& e = row.event;
        if (e.kind != EventKind::PrecisionChanged || e.step != 18) continue;
        QVERIFY(e.old_scaling == Fp8Scaling::NvFp4 && e.new_scaling == Fp8Scaling::Delayed);
        QVERIFY(e.new_formats && e.new_formats->any_fp8());
        recipes.push_back(e.pattern);
    }
    QVERIFY(!recipes.empty());
    // The next resume finds them in the checkpoint, as the settings now say: no change.
    const auto last = run_cli({"resume", "1", "--db", db, "--set", "training.steps=22"});
    QVERIFY2(last.exit_code == 0, qPrintable(last.err + last.out));
    int changes_after = 0;
    for (const auto& row : RunStore(db.toStdString()).events(1))
        changes_after += row.event.kind == EventKind::PrecisionChanged && row.event.step >= 20;
    QCOMPARE(changes_after, 0);
}

// `run tiny.json` in one folder, `resume` in another: the project's relative paths (here its
// checkpoint folder) still resolve against the project file's folder, which the store keeps.
void TestSession::aResumeFromAnotherFolderFindsTheProjectsFolder()
{
    QTemporaryDir dir;
    fs::create_directories(dir.filePath("project").toStdString());
    fs::create_directories(dir.filePath("elsewhere").toStdString());
    std::string text = kProject;
    text.replace(text.find("\"checkpoint_interval\": 10"), 25, "\"checkpoint_interval\": 10, \"checkpoint_dir\": \"ckpt\"");
    std::ofstream(dir.filePath("project/tiny.json").toStdString()) << text;
    const QString db = dir.filePath("runs.sqlite");
    const auto first = run_cli({"run", "tiny.json", "--db", db, "--set", "training.steps=20"}, 120000, dir.filePath("project"));
    QVERIFY2(first.exit_code == 0, qPrintable(first.err + first.out));
    QCOMPARE(RunStore(db.toStdString()).find_run("1")->project_path, fs::absolute(dir.filePath("project/tiny.json").toStdString()).string());
    const auto resumed = run_cli({"resume", "1", "--db", db, "--set", "training.steps=30"}, 120000, dir.filePath("elsewhere"));
    QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err + resumed.out));
    const QString from = QString::fromStdString(fs::absolute(dir.filePath("project/ckpt/step-00000020.pt").toStdString()).string());
    QVERIFY2(resumed.out.contains("at step 20 from " + from), qPrintable(resumed.out));
}

// `resume --set` trains with other settings: the store keeps them as the run's (show and
// compare describe what trained, a later resume goes on with them), and the resume event says
// what changed.
void TestSession::aResumesOverridesAreStoredWithTheRun()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const QString db = dir.filePath("runs.sqlite");
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", db, "--set", "training.steps=20"}).exit_code, 0);
    const auto r = run_cli({"resume", "1", "--db", db, "--set", "training.steps=25", "--set", "optimizer.learning_rate=0.5"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    const QString changed = "optimizer.learning_rate 0.001 -> 0.5, training.steps 20 -> 25";
    QVERIFY2(r.out.contains("settings changed (stored with the run): " + changed), qPrintable(r.out));
    {
        RunStore store(db.toStdString());
        const auto config = load_project_json(store.find_run("1")->config_json, dir.path().toStdString());
        QCOMPARE(config.optimizer.learning_rate, 0.5);
        QCOMPARE(config.training.steps, int64_t(25));
        bool said = false;
        for (const auto& e : store.events(1))
            said |= e.kind == "resumed_from_checkpoint" && QString::fromStdString(e.message).endsWith("; settings changed: " + changed);
        QVERIFY(said);
    }
    const auto again = run_cli({"resume", "1", "--db", db, "--set", "training.steps=30"});
    QVERIFY2(again.exit_code == 0, qPrintable(again.err + again.out));
    QVERIFY2(again.out.contains("settings changed (stored with the run): training.steps 25 -> 30"), qPrintable(again.out));
    {
        RunStore store(db.toStdString());
        QCOMPARE(load_project_json(store.find_run("1")->config_json, dir.path().toStdString()).optimizer.learning_rate,
                 0.5);
    }
    // Another checkpoint folder: read from where the run kept them, written into the new one
    // (the new one was stored as the run's, and ignored).
    const QString moved = dir.filePath("moved");
    const auto elsewhere = run_cli({"resume", "1", "--db", db, "--set", "training.steps=32", "--set",
                                    "training.checkpoint_dir=" + moved});
    QVERIFY2(elsewhere.exit_code == 0, qPrintable(elsewhere.err + elsewhere.out));
    QVERIFY2(elsewhere.out.contains("at step 30 from " + db + ".checkpoints/run-1/step-00000030.pt"),
             qPrintable(elsewhere.out));
    QVERIFY2(QFile::exists(moved + "/step-00000032.pt"), qPrintable(elsewhere.out));
    QVERIFY(!QFile::exists(db + ".checkpoints/run-1/step-00000032.pt"));
    const auto on = run_cli({"resume", "1", "--db", db, "--set", "training.steps=34"});
    QVERIFY2(on.out.contains("at step 32 from " + moved + "/step-00000032.pt"), qPrintable(on.err + on.out));
}

// Killed between writing a checkpoint and committing its steps' rows (the store flushes every
// 250 ms): the file is on disk, unrecorded, past the last committed step. Resuming from it
// would leave those steps unrecorded for good; the run starts over instead, and ends with
// every step recorded once, as a run never killed. (test_kill_resume's random kills found it.)
void TestSession::aCheckpointPastTheCommittedStepsIsNotResumedFrom()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const QString db = dir.filePath("runs.sqlite");
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", db, "--set", "training.steps=10"}).exit_code, 0);
    const Series straight = train_losses(db.toStdString(), 1);
    QCOMPARE(straight.size(), size_t(10));
    // As the kill left it: step-10 on disk, nothing recorded after step 6, the run interrupted.
    sqlite3* raw = nullptr;
    QCOMPARE(sqlite3_open(db.toUtf8().constData(), &raw), SQLITE_OK);
    QCOMPARE(sqlite3_exec(raw, "DELETE FROM checkpoints; DELETE FROM scalars WHERE step > 6; "
                               "UPDATE runs SET status='running', finished_at=NULL",
                          nullptr, nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(raw);
    // Starting over drops the steps recorded: asked for (a plain resume is refused).
    QCOMPARE(run_cli({"resume", "1", "--db", db}).exit_code, 2);
    const auto r = run_cli({"resume", "1", "--db", db, "--start-over"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(!r.out.contains("at step 10 from"), qPrintable(r.out));
    QCOMPARE(train_losses(db.toStdString(), 1), straight); // steps 1..10, each once, bit for bit
}

void TestSession::noGoodCheckpointLeftExits3NamingTheFile()
{
    QTemporaryDir dir;
    const std::string db = store_with_a_finished_run(dir);
    QVERIFY(!db.empty());
    const auto files = list_checkpoints(db + ".checkpoints/run-1");
    QCOMPARE(files.size(), size_t(3));
    for (const auto& f : files) flip_32_bytes(f);
    const auto r = run_cli({"resume", "1", "--db", QString::fromStdString(db), "--set", "training.steps=40"});
    QCOMPARE(r.exit_code, 3);
    QVERIFY2(r.err.contains("error: run 1 has no good checkpoint left to resume from: '" +
                            QString::fromStdString(fs::absolute(files[2]).string()) + "'"),
             qPrintable(r.err));
    QVERIFY(r.err.contains("step-00000010.pt' are damaged"));
    const auto kinds = event_kinds(db, 1);
    QCOMPARE(std::count(kinds.begin(), kinds.end(), std::string("checkpoint_damaged")), 3);
    // Exporting the weights says what it could not do (it said "to resume from").
    const auto exported = run_cli(
        {"export", "1", "--db", QString::fromStdString(db), "--format", "safetensors", "--out", dir.filePath("w.st")});
    QVERIFY2(exported.exit_code != 0 &&
                 exported.err.contains("error: run 1 has no good checkpoint left to export weights from: '"),
             qPrintable(exported.err));
    RunStore store(db);
    QCOMPARE(status_text(store.find_run("1")->status), std::string("finished")); // untouched: nothing was resumed
    QCOMPARE(store.find_run("1")->last_step, int64_t(30));
}

void TestSession::strayFilesInTheFolderAreIgnored()
{
    QTemporaryDir dir;
    const std::string db = store_with_a_finished_run(dir);
    QVERIFY(!db.empty());
    const std::string folder = db + ".checkpoints/run-1/";
    std::ofstream(folder + "step-abc.pt") << "not a checkpoint";
    std::ofstream(folder + "step-.pt") << "";
    fs::create_directories(folder + "step-00000099.pt"); // a folder with a checkpoint's name
    fs::copy_file(folder + "step-00000010.pt", folder + "step-10.pt"); // a user's copies
    fs::copy_file(folder + "step-00000020.pt", folder + "step-0000020.pt");
    QVERIFY(!checkpoint_step(folder + "step-abc.pt"));
    QCOMPARE(list_checkpoints(folder).size(), size_t(3));

    const auto exported = run_cli({"export", "1", "--format", "safetensors", "--out", dir.filePath("w.safetensors"),
                                   "--db", QString::fromStdString(db)});
    QVERIFY2(exported.exit_code == 0, qPrintable(exported.err + exported.out));
    const auto resumed = run_cli({"resume", "1", "--db", QString::fromStdString(db), "--set", "training.steps=35",
                                  "--set", "training.checkpoint_keep=1"});
    QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err + resumed.out));
    QVERIFY(resumed.out.contains("at step 30 from"));
    // Rotation kept one checkpoint, and left the copies alone.
    QCOMPARE(list_checkpoints(folder), std::vector<std::string>{folder + "step-00000035.pt"});
    QVERIFY(fs::exists(folder + "step-10.pt"));
    QVERIFY(fs::exists(folder + "step-0000020.pt"));
}

void TestSession::twoStoresInOneFolderKeepTheirOwnCheckpoints()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const QString a = dir.filePath("a.sqlite"), b = dir.filePath("b.sqlite");
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", a, "--set", "training.steps=20"}).exit_code, 0);
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", b, "--set", "training.steps=20", "--set",
                      "training.seed=8"})
                 .exit_code,
             0);
    const std::string a_dir = fs::absolute(a.toStdString()).string() + ".checkpoints/run-1";
    const std::string b_dir = fs::absolute(b.toStdString()).string() + ".checkpoints/run-1";
    QCOMPARE(list_checkpoints(a_dir).size(), size_t(2));
    QCOMPARE(list_checkpoints(b_dir).size(), size_t(2));
    QCOMPARE(read_checkpoint_identity(a_dir + "/step-00000020.pt")->run_uuid, RunStore(a.toStdString()).find_run("1")->uuid);
    QCOMPARE(read_checkpoint_identity(b_dir + "/step-00000020.pt")->run_uuid, RunStore(b.toStdString()).find_run("1")->uuid);

    const auto r = run_cli({"resume", "1", "--db", a, "--set", "training.steps=25"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains(QString::fromStdString("at step 20 from " + a_dir + "/step-00000020.pt")), qPrintable(r.out));
}

void TestSession::anotherRunsCheckpointIsRefused()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const QString a = dir.filePath("a.sqlite"), b = dir.filePath("b.sqlite");
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", a, "--set", "training.steps=20"}).exit_code, 0);
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", b, "--set", "training.steps=20"}).exit_code, 0);
    const std::string a_file = fs::absolute(a.toStdString()).string() + ".checkpoints/run-1/step-00000020.pt";
    const std::string b_file = fs::absolute(b.toStdString()).string() + ".checkpoints/run-1/step-00000020.pt";
    const std::string b_uuid = RunStore(b.toStdString()).find_run("1")->uuid;
    const std::string a_uuid = RunStore(a.toStdString()).find_run("1")->uuid;
    fs::copy_file(b_file, a_file, fs::copy_options::overwrite_existing);

    const auto r = run_cli({"resume", "1", "--db", a, "--set", "training.steps=25"});
    QCOMPARE(r.exit_code, 2);
    QVERIFY2(r.err.contains(QString::fromStdString("error: checkpoint '" + a_file + "' belongs to run 1 (uuid " + b_uuid +
                                                   "), not to run 1 (uuid " + a_uuid + ")")),
             qPrintable(r.err));
    // A copy under a name the store has no record of is refused by its identity, on load.
    // (Recorded checkpoints are tried first, so a's own ones go: the foreign file is all that is left.)
    fs::copy_file(b_file, fs::path(a_file).parent_path() / "step-00000015.pt");
    for (const auto& f : list_checkpoints(fs::path(a_file).parent_path().string()))
        if (fs::path(f).filename() != "step-00000015.pt") fs::remove(f);
    const auto r2 = run_cli({"export", "1", "--format", "safetensors", "--out", dir.filePath("w.safetensors"), "--db", a});
    QCOMPARE(r2.exit_code, 2);
    QVERIFY2(r2.err.contains("step-00000015.pt' belongs to run 1 (uuid " + QString::fromStdString(b_uuid) + ")"),
             qPrintable(r2.err));
    QVERIFY(!QFile::exists(dir.filePath("w.safetensors")));
}

// export --format safetensors reads the checkpoint file itself: a run whose data is gone, and
// one stored as trained on CUDA, still give their weights on this CPU machine, bit for bit the
// trainer's own, in its order; resume, which needs both, is refused.
void TestSession::exportNeedsNeitherTheDataNorTheDevice()
{
    QTemporaryDir dir;
    const QString data = dir.filePath("data.txt");
    {
        std::ofstream text(data.toStdString());
        for (int i = 0; i < 60; ++i) text << "the quick brown fox jumps over the lazy dog\n";
    }
    const std::string project = write_project(dir);
    const QString db = dir.filePath("runs.sqlite");
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", db, "--set", "data.kind=text", "--set",
                      "data.path=" + data})
                 .exit_code,
             0);
    QByteArray want;
    QString wantFile = dir.filePath("trainer.safetensors");
    {
        RunStore store(db.toStdString());
        const auto session = RunSession::reopen(store, *store.find_run("1"), {});
        QCOMPARE(session->trainer().step(), int64_t(30));
        session->trainer().export_safetensors(wantFile.toStdString());
        want = safetensors_data(wantFile);
        QVERIFY(!want.isEmpty());
        // The stored settings now say CUDA, which this machine does not have.
        QJsonObject config = QJsonDocument::fromJson(QByteArray::fromStdString(store.find_run("1")->config_json)).object();
        QJsonObject training = config["training"].toObject();
        training["device"] = "cuda";
        config["training"] = training;
        store.set_run_config(1, QJsonDocument(config).toJson().toStdString());
    }
    QVERIFY(QFile::remove(data));

    const QString out = dir.filePath("w.safetensors");
    const auto exported = run_cli({"export", "1", "--format", "safetensors", "--out", out, "--db", db});
    QVERIFY2(exported.exit_code == 0, qPrintable(exported.err + exported.out));
    QVERIFY2(exported.out.contains("at step 30 from "), qPrintable(exported.out));
    QVERIFY(safetensors_data(out) == want);
    // The same names in the same order; the step and the run's settings as metadata.
    const auto header = [](const QString& path) {
        QFile f(path);
        f.open(QIODevice::ReadOnly);
        const QByteArray bytes = f.readAll();
        quint64 length = 0;
        for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
        return bytes.mid(8, static_cast<qsizetype>(length));
    };
    QJsonObject got = QJsonDocument::fromJson(header(out)).object(), trainer = QJsonDocument::fromJson(header(wantFile)).object();
    const QJsonObject meta = got.take("__metadata__").toObject();
    trainer.remove("__metadata__");
    QVERIFY(got.contains("blocks.0.attn.qkv.weight"));
    QCOMPARE(got, trainer); // names, dtypes, shapes and offsets (so the order too)
    QCOMPARE(meta["step"].toString(), QStringLiteral("30"));
    QCOMPARE(meta["producer"].toString(), QStringLiteral("mantissa"));
    QVERIFY(meta["project"].toString().contains("\"cuda\""));

    const auto resumed = run_cli({"resume", "1", "--db", db, "--set", "training.steps=40"});
    QCOMPARE(resumed.exit_code, 2);
}

// The data changed under a stored run (an edited text keeps its vocabulary size, but every
// character between the old and the new one gets another id): the checkpoint's data
// fingerprint refuses the resume, naming both, and the store is left as it was. With the data
// restored the run resumes.
void TestSession::aResumeOnChangedDataIsRefused()
{
    QTemporaryDir dir;
    const QString data = dir.filePath("data.txt");
    const auto write_data = [&](char replace_z) {
        std::string text;
        for (int i = 0; i < 60; ++i) text += "the quick brown fox jumps over the lazy dog\n";
        std::replace(text.begin(), text.end(), 'z', replace_z);
        std::ofstream(data.toStdString()) << text;
    };
    write_data('z');
    const std::string project = write_project(dir);
    const QString db = dir.filePath("runs.sqlite");
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", db, "--set", "data.kind=text", "--set",
                      "data.path=" + data, "--set", "training.steps=20"})
                 .exit_code,
             0);
    write_data('#'); // '#' sorts before every letter: the ids of all 26 letters shift
    const auto refused = run_cli({"resume", "1", "--db", db, "--set", "training.steps=25"});
    QCOMPARE(refused.exit_code, 2);
    QVERIFY2(refused.err.contains("was trained on other data (train ") &&
                 refused.err.contains("restore the data the run was trained on, or start a new run"),
             qPrintable(refused.err));
    // A character more makes a larger vocabulary, and another shape of the embedding: the data
    // is named, not "does not fit this model (wte)", which sent users looking at the model.
    write_data('z');
    std::ofstream(data.toStdString(), std::ios::app) << "#\n";
    const auto larger = run_cli({"resume", "1", "--db", db, "--set", "training.steps=25"});
    QCOMPARE(larger.exit_code, 2);
    QVERIFY2(larger.err.contains("was trained on other data (train "), qPrintable(larger.err));
    {
        RunStore store(db.toStdString());
        QCOMPARE(store.find_run("1")->last_step, int64_t(20));
        QCOMPARE(status_text(store.find_run("1")->status), std::string("finished"));
    }
    write_data('z');
    const auto resumed = run_cli({"resume", "1", "--db", db, "--set", "training.steps=25"});
    QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err + resumed.out));
    QVERIFY(resumed.out.contains("at step 20 from"));

    // The resume's own --set made the other data (a synthetic set's seed): it is named, and
    // nothing on disk is to be restored.
    const QString synthetic = dir.filePath("synthetic.sqlite");
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", synthetic, "--set", "training.steps=10"}).exit_code,
             0);
    const auto reseeded =
        run_cli({"resume", "1", "--db", synthetic, "--set", "training.seed=8", "--set", "training.steps=15"});
    QCOMPARE(reseeded.exit_code, 2);
    QVERIFY2(reseeded.err.contains("was trained on other data: this resume's training.seed makes other data than the "
                                   "run trained on; resume without it, or start a new run"),
             qPrintable(reseeded.err));
}

// A sweep of a project with its own checkpoint_dir: every point keeps its checkpoints (none is
// refused as the first point's), and each can be resumed.
void TestSession::aSweepsPointsEachGetAFolderInTheProjectsCheckpointDir()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const QString db = dir.filePath("runs.sqlite");
    const auto swept = run_cli({"sweep", QString::fromStdString(project), "--db", db, "--vary", "training.seed=1,2",
                                "--set", "training.checkpoint_dir=" + dir.filePath("ckpt")});
    QVERIFY2(swept.exit_code == 0, qPrintable(swept.err + swept.out));
    QVERIFY2(!swept.out.contains("[checkpoint_failed]"), qPrintable(swept.out));
    for (const char* point : {"1-training.seed=1", "2-training.seed=2"})
        QVERIFY2(!list_checkpoints(dir.filePath("ckpt/%1").arg(point).toStdString()).empty(), point);
    const auto resumed = run_cli({"resume", "2", "--db", db, "--set", "training.steps=35"});
    QVERIFY2(resumed.exit_code == 0 && resumed.out.contains("at step 30 from"), qPrintable(resumed.err + resumed.out));
}

void TestSession::sharedExplicitCheckpointDirIsRefused()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const QString db = dir.filePath("runs.sqlite");
    const QString shared = "training.checkpoint_dir=" + dir.filePath("shared");
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", db, "--set", shared}).exit_code, 0);
    const std::string uuid1 = RunStore(db.toStdString()).find_run("1")->uuid;
    const QString folder = dir.filePath("shared");
    const auto names = [&] {
        QStringList out;
        for (const auto& f : list_checkpoints(folder.toStdString())) out << QString::fromStdString(fs::path(f).filename());
        return out;
    };
    const QStringList first = names();
    // A second run into the same folder overwrites none of the first run's files: its writes
    // under the same names fail as checkpoint_failed events, naming whose the files are. Its
    // final state is not kept, so the command fails (exit 3) and says so.
    const auto second = run_cli({"run", QString::fromStdString(project), "--db", db, "--set", shared, "--set",
                                 "training.seed=9"});
    QCOMPARE(second.exit_code, 3);
    QVERIFY2(second.err.contains("error: the final checkpoint could not be written (the file belongs to run 1") &&
                 second.err.contains("; this run saved no checkpoint\n"),
             qPrintable(second.err));
    QVERIFY2(second.out.contains("[checkpoint_failed]") &&
                 second.out.contains(QString::fromStdString("belongs to run 1 (uuid " + uuid1 + ")")),
             qPrintable(second.out));
    QCOMPARE(names(), first);
    // A third, longer one writes its later steps and rotates away none of the first run's.
    const auto third = run_cli({"run", QString::fromStdString(project), "--db", db, "--set", shared, "--set",
                                "training.seed=7", "--set", "training.steps=50"});
    QCOMPARE(third.exit_code, 0);
    QCOMPARE(names(), (first + QStringList{"step-00000040.pt", "step-00000050.pt"}));

    // Each resume finds its own run's checkpoints, or says whose the others are.
    const auto r1 = run_cli({"resume", "1", "--db", db, "--set", "training.steps=35"});
    QVERIFY2(r1.exit_code == 0, qPrintable(r1.err + r1.out));
    const auto r2 = run_cli({"resume", "2", "--db", db, "--set", "training.steps=35"});
    QCOMPARE(r2.exit_code, 2);
    QVERIFY2(r2.err.contains(QString::fromStdString("belongs to run 1 (uuid " + uuid1 + ")")), qPrintable(r2.err));
    const auto r3 = run_cli({"resume", "3", "--db", db, "--set", "training.steps=55"});
    QVERIFY2(r3.exit_code == 0 && r3.out.contains("at step 50 from"), qPrintable(r3.err + r3.out));

    // Deleting a run leaves a shared folder alone: other stores may use it too. Its files are
    // listed as kept.
    const auto deleted = run_cli({"delete", "3", "--db", db});
    QCOMPARE(deleted.exit_code, 0);
    QVERIFY2(deleted.out.startsWith("deleted run 3 'tiny'\n  kept '") && deleted.out.count("  kept '") == 3 &&
                 deleted.out.contains("step-00000055.pt': outside this store's folder '"),
             qPrintable(deleted.out));
    QCOMPARE(names().size(), 6); // run 1's three (step 35 now among them) and run 3's three
}

// Calls back at each step (a live change or a stop "from the GUI").
class StepHook : public TelemetrySink {
public:
    std::function<void(int64_t)> at_step;
    void on_step(const StepMetrics& m) override { at_step(m.step); }
    void on_eval(const EvalMetrics&) override {}
    void on_event(const RunEvent&) override {}
};

void TestSession::aResumeMakesTheInterruptedRunsPrecisionChangesAgain()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    const GemmFormats e4m3 = GemmFormats::all(NumberFormat::E4M3);
    // The user switches the MLP to NVFP4 after step 15 (made at the boundary of step 15): formats
    // and recipe, both of which the resume must make again.
    const auto train = [&](const std::string& name, int64_t stop_after) -> std::pair<int64_t, RunStatus> {
        RunStore store(db);
        RunSession session(load_project_file(project));
        const int64_t id = session.create_run(store, name, project);
        StepHook hook;
        hook.at_step = [&](int64_t step) {
            if (step == 15) session.request_layer_formats("blocks.*.mlp.*", e4m3, Fp8Scaling::NvFp4);
            if (step == stop_after) session.request_stop();
        };
        return {id, session.run({&hook}).status};
    };
    const auto [straight, straight_status] = train("straight", 0);
    QCOMPARE(int(straight_status), int(RunStatus::Finished));
    const auto [interrupted, interrupted_status] = train("interrupted", 18);
    QCOMPARE(int(interrupted_status), int(RunStatus::Stopped));
    // As if killed at step 18: its last checkpoint is step 10's, from before the change.
    const std::string folder = RunStore(db).checkpoint_dir(interrupted);
    fs::remove(folder + "/step-00000018.pt");
    {
        // While another process trains it, a resume is refused and drops nothing.
        RunStore training(db);
        training.claim_run(interrupted);
        RunStore store(db);
        const auto before = store.row_counts(interrupted);
        auto session = RunSession::reopen(store, *store.find_run(std::to_string(interrupted)), {}, {});
        QVERIFY_THROWS_EXCEPTION(StoreError, session->claim());
        QCOMPARE(store.row_counts(interrupted).scalars, before.scalars);
        QCOMPARE(store.row_counts(interrupted).events, before.events);
    }
    {
        RunStore store(db);
        auto session = RunSession::reopen(store, *store.find_run(std::to_string(interrupted)), {}, {});
        QCOMPARE(session->trainer().step(), int64_t(10));
        session->claim();
        QCOMPARE(int(session->run({}).status), int(RunStatus::Finished));
    }
    const Series want = train_losses(db, straight), got = train_losses(db, interrupted);
    QCOMPARE(got.size(), size_t(30));
    QCOMPARE(got, want); // steps 11 to 30 again, the change at 15 included: bit for bit
    RunStore store(db);
    // The change at 15: the user's, and the resume's making it again.
    const auto changes_at_15 = [&] {
        std::vector<std::string> causes;
        for (const auto& e : store.events(interrupted))
            if (e.event.kind == EventKind::PrecisionChanged && e.event.step == 15)
                causes.emplace_back(change_cause_name(e.event.cause));
        return causes;
    };
    // Every event that training a step makes is recorded once, and every step's rows are
    // there once, as in the run never stopped.
    const auto recorded_once = [&] {
        std::map<std::pair<int64_t, std::string>, int> seen;
        for (const auto& e : store.events(interrupted))
            if (retraining_reproduces(e.event) && ++seen[{e.event.step, e.event.message()}] > 1)
                return "twice at step " + std::to_string(e.event.step) + ": " + e.event.message();
        const auto mine = store.row_counts(interrupted), theirs = store.row_counts(straight);
        if (mine.scalars != theirs.scalars || mine.layer_stats != theirs.layer_stats)
            return std::string("scalar / layer rows ") + std::to_string(mine.scalars) + " / " +
                   std::to_string(mine.layer_stats) + ", never stopped " + std::to_string(theirs.scalars) + " / " +
                   std::to_string(theirs.layer_stats);
        return std::string();
    };
    int resumes = 0;
    for (const auto& e : store.events(interrupted))
        if (e.event.kind == EventKind::ResumedFromCheckpoint) {
            ++resumes;
            QCOMPARE(e.event.text, std::string("makes the precision changes of the interrupted run again at step 15"));
            QVERIFY(e.event.later_steps_dropped); // a replica drops them too
        }
    QCOMPARE(resumes, 1);
    QCOMPARE(changes_at_15(), (std::vector<std::string>{"user", "resume"}));
    QCOMPARE(recorded_once(), std::string());

    // Interrupted once more, back to step 10: the user's change is made again once more (the
    // first resume's making of it is dropped with the steps it trained), and the losses are
    // still the same.
    const auto resume = [&](int64_t from, int64_t stop_after) {
        for (const auto& f : list_checkpoints(folder))
            if (*checkpoint_step(f) > from) fs::remove(f);
        auto session = RunSession::reopen(store, *store.find_run(std::to_string(interrupted)), {}, {});
        QCOMPARE(session->trainer().step(), from);
        session->claim();
        StepHook hook;
        hook.at_step = [&](int64_t step) {
            if (step == stop_after) session->request_stop();
        };
        QCOMPARE(int(session->run({&hook}).status), int(stop_after ? RunStatus::Stopped : RunStatus::Finished));
    };
    resume(10, 0);
    const auto events = store.events(interrupted);
    QCOMPARE(events.back().event.kind, EventKind::RunFinished);
    QCOMPARE(changes_at_15(), (std::vector<std::string>{"user", "resume"}));
    QCOMPARE(recorded_once(), std::string());
    QCOMPARE(train_losses(db, interrupted), want);

    // Stopped again before it reached step 15 (and so saved at step 12): resumed from there,
    // it still makes the change at 15.
    resume(10, 12);
    QCOMPARE(changes_at_15(), (std::vector<std::string>{"user"}));
    QCOMPARE(train_losses(db, interrupted).size(), size_t(12)); // none left of the steps it did not reach
    resume(12, 0);
    QCOMPARE(changes_at_15(), (std::vector<std::string>{"user", "resume"}));
    QCOMPARE(recorded_once(), std::string());
    QCOMPARE(train_losses(db, interrupted), want);
}

// A resume whose --set changes what the layers compute in does not make the interrupted run's
// later live changes again, and drops their records, so that a later resume does not either.
// A --set of a format key that no layer follows (an FP8 recipe in an FP32 run) makes them
// again, as a plain resume does (it dropped them, and trained another run).
void TestSession::aResumesSettingsSupersedeLiveChangesOnlyWhereTheLayersChange()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    const auto train = [&](const std::string& name, int64_t stop_after) {
        RunStore store(db);
        RunSession session(load_project_file(project));
        const int64_t id = session.create_run(store, name, project);
        StepHook hook;
        hook.at_step = [&](int64_t step) {
            if (step == 15) session.request_layer_formats("blocks.*.mlp.*", GemmFormats::all(NumberFormat::BF16));
            if (step == stop_after) session.request_stop();
        };
        session.run({&hook});
        fs::remove(store.checkpoint_dir(id) + "/step-00000018.pt"); // as if killed at 18
        return id;
    };
    const int64_t straight = train("straight", 0), inert = train("inert", 18), bf16 = train("bf16", 18);
    RunStore store(db);
    const auto resume = [&](int64_t id, const std::vector<Override>& sets, int64_t stop_after) {
        auto session = RunSession::reopen(store, *store.find_run(std::to_string(id)), sets, {});
        session->claim();
        StepHook hook;
        hook.at_step = [&](int64_t step) {
            if (step == stop_after) session->request_stop();
        };
        session->run({&hook});
    };
    const auto changes = [&](int64_t id) {
        std::vector<std::string> out;
        for (const auto& e : store.events(id))
            if (e.event.kind == EventKind::PrecisionChanged)
                out.push_back(std::to_string(e.event.step) + " " + std::string(change_cause_name(e.event.cause)) + " " +
                              e.event.message());
        return out;
    };
    resume(inert, {{"precision.fp8.scaling", "current"}}, 0);
    QCOMPARE(train_losses(db, inert), train_losses(db, straight));
    // The change again at 15, and no recipe given to a layer with no FP8 GEMM.
    const std::string at_15 = "blocks.*.mlp.* -> bf16/bf16/bf16 (blocks.0.mlp.fc1, blocks.0.mlp.fc2)";
    QCOMPARE(changes(inert), (std::vector<std::string>{"15 user " + at_15,
                                                       "15 resume " + at_15 + " again, as the interrupted run did"}));

    resume(bf16, {{"precision.preset", "bf16"}}, 20);
    const std::string to_bf16 = " -> bf16/bf16/bf16 (";
    const std::vector<std::string> asked = {"10 user blocks.0.attn.qkv" + to_bf16 + "blocks.0.attn.qkv)",
                                            "10 user blocks.0.attn.sdpa" + to_bf16 + "blocks.0.attn.sdpa)",
                                            "10 user blocks.0.attn.proj" + to_bf16 + "blocks.0.attn.proj)",
                                            "10 user blocks.0.mlp.fc1" + to_bf16 + "blocks.0.mlp.fc1)",
                                            "10 user blocks.0.mlp.fc2" + to_bf16 + "blocks.0.mlp.fc2)",
                                            "10 user lm_head" + to_bf16 + "lm_head)"};
    QCOMPARE(changes(bf16), asked); // the interrupted run's change at 15 is gone with its steps
    int superseded = 0;
    for (const auto& e : store.events(bf16))
        superseded += e.event.kind == EventKind::ResumedFromCheckpoint && e.event.live_changes_superseded;
    QCOMPARE(superseded, 1);
    // Resumed again from its step 10 (its step-20 file lost): the resume's own changes at 10,
    // and nothing at 15.
    for (const auto& f : list_checkpoints(store.checkpoint_dir(bf16)))
        if (*checkpoint_step(f) > 10) fs::remove(f);
    resume(bf16, {}, 0);
    QCOMPARE(changes(bf16).size(), size_t(12));
    for (const auto& c : changes(bf16)) QVERIFY2(c.starts_with("10 "), c.c_str());
}

// A precision change that reaches the queue behind a Stop was accepted (the remote API
// answered 200): it is made at that boundary, so the final checkpoint holds it and a resume
// goes on with it. It used to be dropped with the queue. A pause behind the Stop waits for
// nothing.
void TestSession::aChangeAcceptedBehindAStopIsMadeAndKept()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RunStore store(db);
    RunSession session(load_project_file(project));
    const int64_t id = session.create_run(store, "stopped", project);
    const GemmFormats bf16 = GemmFormats::all(NumberFormat::BF16);
    StepHook hook;
    hook.at_step = [&](int64_t step) {
        if (step != 7) return;
        QVERIFY(session.request_stop());
        QVERIFY(session.request_layer_formats("lm_head", bf16));
        session.request_pause();
    };
    QCOMPARE(int(session.run({&hook}).status), int(RunStatus::Stopped));
    std::vector<std::string> changes;
    for (const auto& e : store.events(id))
        if (e.event.kind == EventKind::PrecisionChanged)
            changes.push_back(std::to_string(e.event.step) + " " + e.event.message());
    QCOMPARE(changes, (std::vector<std::string>{"7 lm_head -> bf16/bf16/bf16 (lm_head)"}));
    for (const auto& e : store.events(id)) QVERIFY(e.event.kind != EventKind::Paused);
    QVERIFY(session.trainer().layers().back().formats == bf16);
    QCOMPARE(session.trainer().step(), int64_t(7));
    auto resumed = RunSession::reopen(store, *store.find_run(std::to_string(id)), {}, {});
    QCOMPARE(resumed->trainer().step(), int64_t(7));
    for (const auto& l : resumed->trainer().layers())
        if (l.name == "lm_head") QVERIFY(l.formats == bf16); // in the final checkpoint

    // A stop right after a periodic checkpoint (every 10 steps) writes that state once; one
    // with a precision change at the boundary writes it again, with the change.
    const auto checkpoints_at = [&](int64_t run, int64_t step) {
        int n = 0;
        for (const auto& e : store.events(run)) n += e.event.kind == EventKind::Checkpoint && e.event.step == step;
        return n;
    };
    for (const bool change : {false, true}) {
        RunSession again(load_project_file(project));
        const int64_t run = again.create_run(store, change ? "changed at 10" : "stopped at 10", project);
        StepHook at_10;
        at_10.at_step = [&](int64_t step) {
            if (step != 10) return;
            again.request_stop();
            if (change) again.request_layer_formats("lm_head", bf16);
        };
        QCOMPARE(int(again.run({&at_10}).status), int(RunStatus::Stopped));
        QCOMPARE(checkpoints_at(run, 10), change ? 2 : 1);
    }
}

void TestSession::relativeCheckpointDirIsTheProjectFilesFolder()
{
    QTemporaryDir dir;
    const fs::path root = dir.path().toStdString();
    fs::create_directories(root / "proj");
    fs::create_directories(root / "elsewhere");
    std::string text = kProject;
    const std::string interval = R"("checkpoint_interval": 10)";
    text.replace(text.find(interval), interval.size(), interval + R"(, "checkpoint_dir": "ckpt")");
    std::ofstream((root / "proj" / "tiny.json").string()) << text;
    const QString project = QString::fromStdString((root / "proj" / "tiny.json").string());
    const QString db = QString::fromStdString((root / "runs.sqlite").string());
    const QString elsewhere = QString::fromStdString((root / "elsewhere").string());

    const auto r = run_cli({"run", project, "--db", db, "--set", "training.steps=20"}, 120000, elsewhere);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QCOMPARE(list_checkpoints((root / "proj" / "ckpt").string()).size(), size_t(2));
    QVERIFY(!fs::exists(root / "elsewhere" / "ckpt"));
    // Resumed from another folder again, it finds them and writes beside them.
    const auto resumed = run_cli({"resume", "1", "--db", db, "--set", "training.steps=25"}, 120000, dir.path());
    QVERIFY2(resumed.exit_code == 0, qPrintable(resumed.err));
    QVERIFY2(resumed.out.contains(QString::fromStdString("at step 20 from " + (root / "proj/ckpt/step-00000020.pt").string())),
             qPrintable(resumed.out));
    QCOMPARE(list_checkpoints((root / "proj" / "ckpt").string()).size(), size_t(3));

    // A run of an earlier version wrote them relative to where it started (and recorded them
    // so): its recorded files show the way, from where it is resumed.
    fs::rename(root / "proj" / "ckpt", root / "elsewhere" / "ckpt");
    sqlite3* sql = nullptr;
    QCOMPARE(sqlite3_open(db.toStdString().c_str(), &sql), SQLITE_OK);
    const std::string relative = "UPDATE checkpoints SET path = replace(path, '" + (root / "proj/ckpt/").string() +
                                 "', 'elsewhere/ckpt/')";
    QCOMPARE(sqlite3_exec(sql, relative.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(sql);
    QCOMPARE(RunStore(db.toStdString()).checkpoints(1).back().path, std::string("elsewhere/ckpt/step-00000025.pt"));
    const auto old = run_cli({"resume", "1", "--db", db, "--set", "training.steps=30"}, 120000, dir.path());
    QVERIFY2(old.exit_code == 0, qPrintable(old.err));
    QVERIFY2(old.out.contains(QString::fromStdString("at step 25 from " + (root / "elsewhere/ckpt/step-00000025.pt").string())),
             qPrintable(old.out));
    QVERIFY(fs::exists(root / "elsewhere/ckpt/step-00000030.pt"));
    QVERIFY(!fs::exists(root / "proj" / "ckpt"));
}

void TestSession::deletingARunTakesItsCheckpointsAndRetiresItsFolder()
{
    QTemporaryDir dir;
    const QString project = QString::fromStdString(write_project(dir));
    const QString db = dir.filePath("runs.sqlite");
    const auto run = [&] { return run_cli({"run", project, "--db", db, "--set", "training.steps=20"}); };
    QCOMPARE(run().exit_code, 0);
    QCOMPARE(run().exit_code, 0);
    const std::string store_path = fs::absolute(db.toStdString()).string();
    const fs::path folder1 = store_path + ".checkpoints/run-1", folder2 = store_path + ".checkpoints/run-2";
    const auto own_bytes = fs::file_size(folder2 / "step-00000010.pt") + fs::file_size(folder2 / "step-00000020.pt");
    // A copy of run 1's checkpoint in run 2's folder is not run 2's to delete.
    fs::copy_file(folder1 / "step-00000010.pt", folder2 / "step-00000005.pt");
    const std::string uuid1 = RunStore(db.toStdString()).find_run("1")->uuid;

    const auto deleted = run_cli({"delete", "2", "--db", db});
    QCOMPARE(deleted.exit_code, 0);
    QCOMPARE(deleted.out, QString::fromStdString("deleted run 2 'tiny' and its 2 checkpoints (" +
                                                 std::to_string(own_bytes) + " bytes)\n  kept '" +
                                                 (folder2 / "step-00000005.pt").string() + "': belongs to run 1 (uuid " +
                                                 uuid1 + ")\n"));
    QCOMPARE(list_checkpoints(folder2.string()), std::vector<std::string>{(folder2 / "step-00000005.pt").string()});
    QCOMPARE(list_checkpoints(folder1.string()).size(), size_t(2));

    // Run 2's folder still holds a file: the next run is not given id 2 (its checkpoints would
    // collide with the file there) but 3, and writes its own.
    const auto third = run();
    QCOMPARE(third.exit_code, 0);
    QVERIFY2(!third.out.contains("[checkpoint_failed]"), qPrintable(third.out));
    QVERIFY(RunStore(db.toStdString()).find_run("3"));
    QVERIFY(!RunStore(db.toStdString()).find_run("2"));
    QCOMPARE(list_checkpoints((store_path + ".checkpoints/run-3")).size(), size_t(2));

    // A copy of the store records the same runs and paths: deleting a run there takes none of
    // the original's files (the copy's own folder for it is elsewhere, and empty).
    const QString copy = dir.filePath("copy.sqlite");
    QVERIFY(QFile::copy(db, copy));
    const auto in_copy = run_cli({"delete", "3", "--db", copy});
    QCOMPARE(in_copy.exit_code, 0);
    QVERIFY2(in_copy.out.startsWith("deleted run 3 'tiny'\n  kept '") && in_copy.out.count("  kept '") == 2,
             qPrintable(in_copy.out));
    QCOMPARE(list_checkpoints((store_path + ".checkpoints/run-3")).size(), size_t(2));

    // A folder left empty goes with its run.
    const auto again = run_cli({"delete", "3", "--db", db});
    QCOMPARE(again.exit_code, 0);
    QVERIFY2(again.out.startsWith("deleted run 3 'tiny' and its 2 checkpoints (") && !again.out.contains("kept"),
             qPrintable(again.out));
    QVERIFY(!fs::exists(store_path + ".checkpoints/run-3"));
}

void TestSession::version3StoreWithOldFolderStillResumes()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const std::string db = dir.filePath("old.sqlite").toStdString();
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", QString::fromStdString(db), "--set",
                      "training.steps=20"})
                 .exit_code,
             0);
    // Make it what an earlier Mantissa left: schema 3, no identities, no checksums, and its
    // checkpoints (without identity) in checkpoints/run-1 beside the store.
    fs::remove_all(db + ".checkpoints");
    sqlite3* sql = nullptr;
    QCOMPARE(sqlite3_open(db.c_str(), &sql), SQLITE_OK);
    QCOMPARE(sqlite3_exec(sql,
                          "DROP TABLE checkpoints; ALTER TABLE runs DROP COLUMN uuid; "
                          "ALTER TABLE runs DROP COLUMN legacy_checkpoints; ALTER TABLE events DROP COLUMN fields; "
                          "PRAGMA user_version=3;",
                          nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(sql);
    const std::string legacy = dir.filePath("checkpoints/run-1").toStdString();
    {
        ProjectConfig config = load_project_file(project);
        config.training.steps = 20;
        config.training.checkpoint_dir = legacy;
        Trainer trainer(config);
        FanOutSink none({});
        trainer.run(none);
    }
    QCOMPARE(list_checkpoints(legacy).size(), size_t(2));
    QVERIFY(!read_checkpoint_identity(legacy + "/step-00000020.pt")); // as old checkpoints are

    const auto r = run_cli({"resume", "1", "--db", QString::fromStdString(db), "--set", "training.steps=25"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains(QString::fromStdString("at step 20 from " + legacy + "/step-00000020.pt")), qPrintable(r.out));
    RunStore store(db);
    QCOMPARE(store.schema_version(), RunStore::kSchemaVersion);
    const auto run = store.find_run("1");
    QCOMPARE(status_text(run->status), std::string("finished"));
    QCOMPARE(run->uuid.size(), size_t(32));
    QVERIFY(run->legacy_checkpoints);
    // New checkpoints go to the store's own folder, with this run's identity.
    const auto rows = store.checkpoints(1);
    QCOMPARE(rows.size(), size_t(1));
    QCOMPARE(rows[0].path, store.checkpoint_dir(1) + "/step-00000025.pt");
    QCOMPARE(read_checkpoint_identity(rows[0].path)->run_uuid, run->uuid);
    QCOMPARE(list_checkpoints(legacy).size(), size_t(2)); // the old folder is left as it was
}

void TestSession::checkpointOfAnotherModelShapeIsRefused()
{
    QTemporaryDir dir;
    const ProjectConfig a = load_project_file(write_project(dir));
    ProjectConfig b = a;
    b.model.n_head = 4; // every tensor has the same shape, but it is another model
    const std::string uuid = "0123456789abcdef0123456789abcdef";
    const std::string path = dir.filePath("a.pt").toStdString();
    Trainer ta(a);
    ta.set_checkpoint_identity(uuid, 5);
    ta.save_checkpoint(path);
    Trainer tb(b);
    tb.set_checkpoint_identity(uuid, 5);
    try {
        tb.load_checkpoint(path);
        QFAIL("loaded a checkpoint of another model");
    } catch (const CheckpointMismatch& e) {
        QCOMPARE(std::string(e.what()),
                 "checkpoint '" + path + "' does not fit this model; it holds the model of run 5 (uuid " + uuid +
                     "): n_layer=1 n_head=2 n_embd=16 context_length=16 vocab_size=13 bias=1, this one is "
                     "n_layer=1 n_head=4 n_embd=16 context_length=16 vocab_size=13 bias=1");
    }
    QCOMPARE(tb.step(), int64_t(0));
    // More layers: the checkpoint lacks the new layers' tensors. Another model, not damage (a
    // resume would otherwise skip, and record as damaged, every good checkpoint of the run).
    ProjectConfig deeper = a;
    deeper.model.n_layer = 2;
    Trainer td(deeper);
    td.set_checkpoint_identity(uuid, 5);
    try {
        td.load_checkpoint(path);
        QFAIL("loaded a checkpoint of a shallower model");
    } catch (const CheckpointMismatch& e) {
        QVERIFY2(QString(e.what()).startsWith(QString::fromStdString("checkpoint '" + path + "' does not fit this model (blocks.1.")),
                 e.what());
        QVERIFY2(QString(e.what()).contains("this one is n_layer=2"), e.what());
    }
}

// Whose a checkpoint is comes from its pickled values alone (the archive's data.pkl), not from
// loading its tensors: a damaged tensor does not hide it, a damaged record of values does.
void TestSession::ownershipIsReadFromTheValuesAlone()
{
    QTemporaryDir dir;
    const ProjectConfig config = load_project_file(write_project(dir));
    const std::string uuid = "0123456789abcdef0123456789abcdef";
    const std::string path = dir.filePath("step-00000001.pt").toStdString();
    Trainer trainer(config);
    trainer.set_checkpoint_identity(uuid, 5);
    trainer.save_checkpoint(path);
    const auto read = [](const std::string& p) {
        std::ifstream in(p, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const auto write = [](const std::string& p, const std::string& bytes) { std::ofstream(p, std::ios::binary) << bytes; };
    const auto mine = read_checkpoint_ownership(path);
    QVERIFY(mine.readable && mine.identity);
    QCOMPARE(mine.identity->run_uuid, uuid);
    QCOMPARE(mine.identity->run_id, int64_t(5));
    QCOMPARE(mine.identity->model_shape, std::string("n_layer=1 n_head=2 n_embd=16 context_length=16 vocab_size=13 bias=1"));

    // The first record is a tensor (LibTorch writes them first): one byte of it flipped.
    const std::string good = read(path);
    QCOMPARE(good.substr(0, 4), std::string("PK\x03\x04"));
    const size_t name_length = size_t(uint8_t(good[26])) | size_t(uint8_t(good[27])) << 8;
    const size_t extra_length = size_t(uint8_t(good[28])) | size_t(uint8_t(good[29])) << 8;
    QVERIFY(good.substr(30, name_length).find("/data/") != std::string::npos);
    std::string bytes = good;
    bytes[30 + name_length + extra_length] ^= 0x40;
    write(path, bytes);
    const auto damaged_tensor = read_checkpoint_ownership(path);
    QVERIFY(damaged_tensor.readable && damaged_tensor.identity);
    QCOMPARE(damaged_tensor.identity->run_uuid, uuid);

    // A byte of the identity itself: the values' record fails its CRC-32, so nothing is read.
    bytes = good;
    bytes[good.find(uuid) + 3] ^= 0x01;
    write(path, bytes);
    QVERIFY(!read_checkpoint_ownership(path).readable);

    // Written without an identity (before identities existed): readable, nobody's.
    Trainer anonymous(config);
    anonymous.save_checkpoint(path);
    const auto old = read_checkpoint_ownership(path);
    QVERIFY(old.readable && !old.identity);
    // Not a checkpoint at all.
    write(path, "step-00000001.pt is not a zip");
    QVERIFY(!read_checkpoint_ownership(path).readable);
    // Another program's archive (as Python's torch.save writes one: a data.pkl record, stored)
    // is not one of ours either, so rotation never takes it for an old checkpoint of this run.
    const std::string values = "\x80\x02}q\x00X\x06\x00\x00\x00weightsq\x01.";
    write(path, tiny_stored_zip_of("archive/data.pkl", values));
    QVERIFY(!read_checkpoint_ownership(path).readable);
}

void TestSession::failedCheckpointWriteIsAnEventAndTrainingGoesOn()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    // A folder where step-10's file should go: the temporary file is written, the rename fails.
    const std::string folder = fs::absolute(db).string() + ".checkpoints/run-1";
    fs::create_directories(folder + "/step-00000010.pt/in-the-way");
    const auto r = run_cli({"run", QString::fromStdString(project), "--db", QString::fromStdString(db)});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains("[checkpoint_failed] checkpoint '" + QString::fromStdString(folder) +
                            "/step-00000010.pt' could not be written"),
             qPrintable(r.out));
    QVERIFY(r.out.contains("finished after 30 steps"));
    QVERIFY2(r.err.contains("note: 1 checkpoint could not be written (its checkpoint_failed event says why); the final "
                            "one was\n"),
             qPrintable(r.err));
    for (const auto& entry : fs::directory_iterator(folder)) // no temporary file left
        QVERIFY2(entry.path().filename().string().find(".tmp") == std::string::npos, entry.path().c_str());
    RunStore store(db);
    QCOMPARE(status_text(store.find_run("1")->status), std::string("finished"));
    const auto rows = store.checkpoints(1);
    QCOMPARE(rows.size(), size_t(2));
    QCOMPARE(rows[0].step, int64_t(20));
    QCOMPARE(rows[1].step, int64_t(30));
    int failed = 0;
    for (const auto& e : store.events(1))
        if (e.kind == "checkpoint_failed") {
            ++failed;
            QCOMPARE(e.step, int64_t(10));
        }
    QCOMPARE(failed, 1);
}

// An empty file where a checkpoint goes says what it is, not that two runs share a folder
// (the run's own folder, where no other run writes).
void TestSession::anUnreadableFileInTheWayNamesNoOtherRun()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    const std::string folder = fs::absolute(db).string() + ".checkpoints/run-1";
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", QString::fromStdString(db), "--set",
                      "training.steps=5"})
                 .exit_code,
             0);
    std::ofstream(folder + "/step-00000010.pt").flush();
    const auto r = run_cli({"resume", "1", "--db", QString::fromStdString(db), "--set", "training.steps=30"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains("[checkpoint_failed] checkpoint '" + QString::fromStdString(folder) +
                            "/step-00000010.pt' could not be written: a file that does not read as a checkpoint is "
                            "in its place (it may be another run's); not overwritten: move it away"),
             qPrintable(r.out));
    QCOMPARE(fs::file_size(folder + "/step-00000010.pt"), uintmax_t(0));
}

// A run's settings in the store that no longer read as JSON are named as the store's, not
// as a project file's ("not valid JSON (in model)" alone sent users to their project file).
void TestSession::damagedStoredSettingsNameTheStore()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    RunStore store(dir.filePath("runs.sqlite").toStdString());
    RunSession session(load_project_file(project));
    const int64_t id = session.create_run(store, "stored", project);
    session.run({});
    store.set_run_config(id, R"({"model": {)");
    try {
        RunSession::reopen(store, *store.find_run(std::to_string(id)), {});
        QFAIL("reopened a run whose settings do not read");
    } catch (const ConfigError& e) {
        QVERIFY2(std::string(e.what()).starts_with("run " + std::to_string(id) +
                                                   "'s settings in the run store are damaged: not valid JSON (in "
                                                   "model): parse error at line 1, column 12"),
                 e.what());
    }
}

void TestSession::aRunThatCannotGoOnEndsFailed()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    RunStore store(db);
    RunSession session(load_project_file(project));
    const int64_t id = session.create_run(store, "doomed", project);
    FailingSink failing;
    const SessionOutcome outcome = session.run({&failing});
    QCOMPARE(status_text(outcome.status), std::string("failed"));
    QCOMPARE(outcome.error, std::string("disk full"));
    const auto info = store.find_run(std::to_string(id));
    QCOMPARE(status_text(info->status), std::string("failed"));
    const auto events = store.events(id);
    QVERIFY(!events.empty());
    QCOMPARE(events.back().kind, std::string("run_failed"));
    QCOMPARE(events.back().message, std::string("disk full"));
    QCOMPARE(events.back().step, int64_t(3));
}

// A batch the store cannot write (here a row of a run that is not there: its foreign key
// fails) loses every row in it. A checkpoint after that is not recorded: a resume would take
// it and leave those steps missing for good. The outcome counts the rows (exit 3).
void TestSession::aCheckpointAfterLostRowsIsNotRecorded()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    RunStore store(dir.filePath("runs.sqlite").toStdString());
    RunSession session(load_project_file(project));
    const int64_t id = session.create_run(store, "lossy", project);
    store.append_scalar(id + 100, 1, "x", 1.0); // the next batch fails with it
    const SessionOutcome outcome = session.run({});
    QCOMPARE(int(outcome.status), int(RunStatus::Finished));
    QVERIFY2(outcome.rows_lost > 0, qPrintable(QString::number(outcome.rows_lost)));
    QVERIFY2(outcome.store_error.find("FOREIGN KEY") != std::string::npos, outcome.store_error.c_str());
    QCOMPARE(store.checkpoints(id).size(), size_t(0)); // 10, 20 and 30 came after the loss
    // Not whole: recorded as interrupted, which a resume takes up, not "finished".
    QCOMPARE(status_text(store.find_run(std::to_string(id))->status), std::string("interrupted"));
    int unrecorded = 0;
    for (const auto& e : store.events(id)) unrecorded += e.kind == "checkpoint_unrecorded";
    QCOMPARE(unrecorded, 3);
    // A run whose store lost nothing counts nothing.
    RunSession clean(load_project_file(project));
    clean.create_run(store, "clean", project);
    const SessionOutcome fine = clean.run({});
    QCOMPARE(fine.rows_lost, int64_t(0));
    QCOMPARE(fine.store_error, std::string());
    QCOMPARE(store.checkpoints(clean.run_id()).size(), size_t(3));
    QCOMPARE(status_text(store.find_run(std::to_string(clean.run_id()))->status), std::string("finished"));
}

// Deleted between a resume's load and its claim: the claim refuses (it used to go on, every
// row failing its foreign key, and the resume ended with exit 0 and nothing recorded).
void TestSession::aRunDeletedBeforeItsClaimIsNotTrained()
{
    QTemporaryDir dir;
    const std::string project = write_project(dir);
    const std::string db = dir.filePath("runs.sqlite").toStdString();
    QCOMPARE(run_cli({"run", QString::fromStdString(project), "--db", QString::fromStdString(db), "--set",
                      "training.steps=10"})
                 .exit_code,
             0);
    RunStore store(db);
    auto session = RunSession::reopen(store, *store.find_run("1"), {{"training.steps", "20"}}, {});
    store.delete_run(1);
    try {
        session->claim();
        QFAIL("claimed a deleted run");
    } catch (const StoreError& e) {
        QVERIFY2(std::string(e.what()).ends_with("run 1 is no longer in the store"), e.what());
    }
    QVERIFY_THROWS_EXCEPTION(StoreError, store.finish_run(1, RunStatus::Finished));
}

QTEST_GUILESS_MAIN(TestSession)
#include "test_session.moc"
