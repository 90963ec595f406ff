// SPDX-License-Identifier: GPL-3.0-or-later
// The desktop side of the application: the compiled-in icons load at every size, the window
// uses them, the format capability table answers per compute capability, the About dialog
// shows versions, GPU and that table, and the desktop entry, AppStream metainfo and MIME type
// pass the freedesktop validators (skipped where a validator is not installed), and the
// screenshot mode's `--show` names a tensor the run recorded.

#include <QAction>
#include <QApplication>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QMimeData>
#include <QSettings>
#include <QMap>
#include <QSplitter>
#include <QTabWidget>
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QLabel>
#include <QRegularExpression>
#include <QSet>
#include <QStandardPaths>
#include <QHeaderView>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QToolBar>
#include <QtTest>

#include <cstddef>
#include <cstring>
#include <optional>
#include <utility>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <sqlite3.h>

#include "build_info.h"
#include "common/app_icons.h"
#include "format_support.h"
#include "version_report.h"
#include "window/about_dialog.h"
#include "common/dark_palette.h"
#include "models/run_list_model.h"
#include "pages/monitor_page.h"
#include "pages/runs_page.h"
#include "plots/loss_plot.h"
#include "window/main_window.h"
#include "window/window_state.h"
#include "x_display_probe.h"

using namespace mantissa;

namespace {

const QString kResources = QStringLiteral(MANTISSA_SOURCE_DIR "/resources");

// Runs a validator; "" when it passed, else what it said.
QString validate(const QString& tool, const QStringList& args)
{
    QProcess p;
    p.start(tool, args);
    if (!p.waitForFinished(60000)) return tool + QStringLiteral(" did not finish");
    const QString out = QString::fromUtf8(p.readAllStandardOutput() + p.readAllStandardError());
    return p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0 ? QString() : out;
}

// The GUI on the golden project with its own store in `dir`, and `extra` arguments; its exit
// code (-1 for a crash or a hang) and what it printed.
std::pair<int, QString> run_gui_on_golden(const QTemporaryDir& dir, const QStringList& extra)
{
    QProcess p;
    p.setProcessChannelMode(QProcess::MergedChannels);
    p.start(QStringLiteral(MANTISSA_GUI_EXE),
            QStringList{QStringLiteral(MANTISSA_SOURCE_DIR "/tests/data/golden_project.json"), QStringLiteral("--db"),
                        dir.filePath(QStringLiteral("runs.sqlite"))} +
                extra);
    const bool finished = p.waitForFinished(120000);
    const QString out = QString::fromUtf8(p.readAll());
    return {finished && p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, out};
}

bool write_file(const QString& path, const QByteArray& bytes)
{
    QFile f(path);
    return f.open(QIODevice::WriteOnly) && f.write(bytes) == bytes.size();
}

QByteArray read_file(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

QStringList column(const QTableWidget* table, int c)
{
    QStringList values;
    for (int r = 0; r < table->rowCount(); ++r) values << table->item(r, c)->text();
    return values;
}

} // namespace

// scripts/setup.sh installs the validators: in CI a missing one fails, instead of a skip that
// CTest counts as a pass having checked nothing.
#define MISSING_TOOL(message)                                                                              \
    do {                                                                                                   \
        if (qEnvironmentVariable("CI") == QLatin1String("true")) QFAIL(message);                          \
        QSKIP(message);                                                                                    \
    } while (false)

class TestDesktop : public QObject {
    Q_OBJECT

private slots:
    void appIconHasEverySize()
    {
        const QIcon icon = app_icon();
        QVERIFY(!icon.isNull());
        QCOMPARE(icon.availableSizes(), (QList<QSize>{{16, 16}, {22, 22}, {24, 24}, {32, 32}, {48, 48}, {64, 64},
                                                      {128, 128}, {256, 256}}));
        for (const QSize& size : icon.availableSizes()) {
            const QPixmap pixmap = icon.pixmap(size);
            QVERIFY(!pixmap.isNull());
            QCOMPARE(pixmap.size(), size);
        }
    }

    void actionIconsLoad_data()
    {
        QTest::addColumn<int>("which");
        QTest::newRow("start") << int(ActionIcon::Start);
        QTest::newRow("pause") << int(ActionIcon::Pause);
        QTest::newRow("stop") << int(ActionIcon::Stop);
        QTest::newRow("checkpoint") << int(ActionIcon::Checkpoint);
        QTest::newRow("sweep") << int(ActionIcon::Sweep);
        QTest::newRow("open") << int(ActionIcon::Open);
        QTest::newRow("save") << int(ActionIcon::Save);
    }
    void actionIconsLoad()
    {
        QFETCH(int, which);
        const QIcon icon = action_icon(static_cast<ActionIcon>(which));
        QVERIFY(!icon.isNull());
        QCOMPARE(icon.availableSizes(), (QList<QSize>{{16, 16}, {24, 24}, {32, 32}, {48, 48}}));
        for (const QSize& size : icon.availableSizes()) {
            const QImage image = icon.pixmap(size).toImage();
            QCOMPARE(image.size(), size);
            // Drawn, not blank: some pixel is opaque.
            bool opaque = false;
            for (int y = 0; y < image.height() && !opaque; ++y)
                for (int x = 0; x < image.width() && !opaque; ++x) opaque = qAlpha(image.pixel(x, y)) == 255;
            QVERIFY2(opaque, qPrintable(QStringLiteral("blank at %1 px").arg(size.width())));
        }
    }

    void windowUsesTheIcons()
    {
        QTemporaryDir tmp;
        MainWindow window(tmp.filePath(QStringLiteral("test_desktop_icons.sqlite")));
        const auto* bar = window.findChild<QToolBar*>(QStringLiteral("runToolBar"));
        QVERIFY(bar);
        QStringList withIcons;
        for (const QAction* a : bar->actions())
            if (!a->isSeparator() && !a->icon().isNull()) withIcons << a->text();
        QCOMPARE(withIcons, (QStringList{QStringLiteral("&Open Project…"), QStringLiteral("&Save Project"),
                                         QStringLiteral("&Start"), QStringLiteral("&Pause"), QStringLiteral("S&top"),
                                         QStringLiteral("&Checkpoint Now"), QStringLiteral("S&weep…")}));
        QCOMPARE(window.windowIcon().availableSizes().size(), 8);
        QVERIFY(window.findChild<QAction*>(QStringLiteral("aboutAction")));
        QFile::remove(QDir::temp().filePath(QStringLiteral("test_desktop_icons.sqlite")));
    }

    void formatSupportPerComputeCapability()
    {
        const auto here = [](ComputeCapability device) {
            QStringList v;
            for (const auto& row : format_support_table(device)) v << QString::fromLatin1(execution_name(row.execution));
            return v;
        };
        QStringList names;
        for (const auto& row : format_support_table({})) names << QString::fromStdString(row.format);
        QCOMPARE(names, (QStringList{"FP32", "TF32", "BF16", "FP16", "FP8 E4M3", "FP8 E5M2", "MXFP8",
                                      "FP8 block (fp8-block)", "NVFP4", "MXFP4"}));
        const QString n = QStringLiteral("native"), e = QStringLiteral("emulated");
        // TF32 and MXFP8 are emulated everywhere: the engine has no native path for them.
        QCOMPARE(here({}), (QStringList{n, e, e, e, e, e, e, e, e, e}));          // CPU
        QCOMPARE(here({7, 5}), (QStringList{n, e, e, n, e, e, e, e, e, e}));      // Turing
        QCOMPARE(here({8, 0}), (QStringList{n, e, n, n, e, e, e, e, e, e}));      // A100
        QCOMPARE(here({8, 6}), (QStringList{n, e, n, n, e, e, e, e, e, e}));      // RTX 30xx: no FP8
        QCOMPARE(here({8, 9}), (QStringList{n, e, n, n, n, n, e, e, e, e}));      // Ada
        QCOMPARE(here({9, 0}), (QStringList{n, e, n, n, n, n, e, n, e, e}));      // H100: blockwise cuBLAS
        QCOMPARE(here({10, 0}), (QStringList{n, e, n, n, n, n, e, e, n, n}));     // B200: FP4 GEMMs, untested
        QCOMPARE(here({12, 0}), (QStringList{n, e, n, n, n, n, e, e, e, e}));     // RTX 50xx: not taken
        QCOMPARE(format_execution(NumberFormat::E4M3, {8, 9}), Execution::Native);
        QCOMPARE(format_execution(NumberFormat::E5M2, {8, 7}), Execution::Emulated);
        QCOMPARE(format_execution(NumberFormat::E2M1, {10, 0}), Execution::Native);
        QCOMPARE(format_execution(NumberFormat::E2M1, {9, 0}), Execution::Emulated);
        QCOMPARE(mxfp8_execution({10, 0}), Execution::Emulated);
    }

    void versionStrings()
    {
        QCOMPARE(cuda_version_string(12080), std::string("12.8"));
        QCOMPARE(cuda_version_string(11080), std::string("11.8"));
        QCOMPARE(cuda_version_string(0), std::string("none"));
        QCOMPARE(cudnn_version_string(90800), std::string("9.8.0"));
        QCOMPARE(cudnn_version_string(8907), std::string("8.9.7"));
        QCOMPARE(cudnn_version_string(0), std::string("none"));

        QStringList components;
        for (const auto& [component, version] : version_lines("6.x")) {
            components << QString::fromStdString(component);
            QVERIFY2(!version.empty(), component.c_str());
        }
        QCOMPARE(components, (QStringList{"Mantissa", "LibTorch", "CUDA", "cuDNN", "Qt", "SQLite"}));
        const std::string text = version_text("mantissa-train", "6.x");
        QCOMPARE(QString::fromStdString(text).section(QLatin1Char('\n'), 0, 1),
                 QStringLiteral("mantissa-train " MANTISSA_VERSION "\nMantissa: " MANTISSA_VERSION));
        QVERIFY(text.find("\nQt: 6.x\nSQLite: " + std::string(sqlite3_libversion())) != std::string::npos);
        QCOMPARE(engine_versions().mantissa, std::string(MANTISSA_VERSION));
    }

    void aboutDialogOnAGpu()
    {
        GpuInfo h100;
        h100.present = true;
        h100.name = "NVIDIA H100 80GB HBM3";
        h100.capability = {9, 0};
        AboutDialog dialog(h100);
        const QTableWidget* versions = dialog.versionTable();
        QCOMPARE(column(versions, 0), (QStringList{"Mantissa", "LibTorch", "CUDA", "cuDNN", "Qt", "SQLite", "GPU"}));
        QCOMPARE(versions->item(0, 1)->text(), QStringLiteral(MANTISSA_VERSION));
        QCOMPARE(versions->item(4, 1)->text(), QString::fromLatin1(qVersion()));
        QCOMPARE(versions->item(5, 1)->text(), QString::fromLatin1(sqlite3_libversion()));
        QCOMPARE(versions->item(6, 1)->text(), QStringLiteral("NVIDIA H100 80GB HBM3 (sm_90)"));
        const QTableWidget* formats = dialog.formatTable();
        QCOMPARE(column(formats, 1), (QStringList{"native", "emulated", "native", "native", "native", "native", "emulated",
                                                  "native", "emulated", "emulated"}));
        QCOMPARE(column(formats, 2)[1], QStringLiteral("emulated only (hardware: sm_80)"));
        QCOMPARE(column(formats, 2)[6], QStringLiteral("emulated only (hardware: sm_100)"));
        QVERIFY(column(formats, 2).last().startsWith(QStringLiteral("sm_100 GEMMs, UNTESTED")));
    }

    void aboutDialogOnTheCpu()
    {
        AboutDialog dialog(GpuInfo{});
        QCOMPARE(dialog.versionTable()->item(6, 1)->text(), QStringLiteral("none (CPU)"));
        QCOMPARE(column(dialog.formatTable(), 1),
                 (QStringList{"native", "emulated", "emulated", "emulated", "emulated", "emulated", "emulated",
                              "emulated", "emulated", "emulated"}));
        // A card LibTorch cannot use (no CUDA build) counts as the CPU.
        GpuInfo unusable;
        unusable.capability = {9, 0};
        AboutDialog cpu(unusable);
        QCOMPARE(column(cpu.formatTable(), 1).count(QStringLiteral("native")), 1);
    }

    void desktopEntryValidates()
    {
        const QString tool = QStandardPaths::findExecutable(QStringLiteral("desktop-file-validate"));
        if (tool.isEmpty()) MISSING_TOOL("desktop-file-validate missing (Debian: desktop-file-utils; scripts/setup.sh installs it)");
        const QString out = validate(tool, {kResources + QStringLiteral("/io.github.mantissa.Mantissa.desktop")});
        QVERIFY2(out.isEmpty(), qPrintable(out));
    }

    void metainfoValidates()
    {
        const QString tool = QStandardPaths::findExecutable(QStringLiteral("appstreamcli"));
        if (tool.isEmpty()) MISSING_TOOL("appstreamcli missing (Debian: appstream; scripts/setup.sh installs it)");
        // The configured file: the source has the version as a placeholder.
        const QString metainfo = QStringLiteral(MANTISSA_BINARY_DIR "/resources/io.github.mantissa.Mantissa.metainfo.xml");
        QVERIFY(QFile::exists(metainfo));
        const QString out = validate(tool, {QStringLiteral("validate"), QStringLiteral("--no-net"), metainfo});
        QVERIFY2(out.isEmpty(), qPrintable(out));
    }

    void droppedProjectOpens()
    {
        QTemporaryDir dir;
        const QString project = dir.filePath(QStringLiteral("dropped.mantissa.json"));
        QVERIFY(QFile::copy(QStringLiteral(MANTISSA_SOURCE_DIR "/projects/default.json"), project));
        const QString text = dir.filePath(QStringLiteral("notes.txt"));
        QFile(text).open(QIODevice::WriteOnly);
        MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
        QVERIFY(!window.hasProject());

        const auto drag = [&](const QList<QUrl>& urls) {
            QMimeData mime;
            mime.setUrls(urls);
            QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
            QApplication::sendEvent(&window, &enter);
            if (!enter.isAccepted()) return false;
            QDropEvent drop(QPointF(10, 10), Qt::CopyAction, &mime, Qt::LeftButton, Qt::NoModifier);
            QApplication::sendEvent(&window, &drop);
            return drop.isAccepted();
        };
        // Not a project, or more than one file: refused at the door, nothing opens.
        QVERIFY(!drag({QUrl::fromLocalFile(text)}));
        QVERIFY(!drag({QUrl::fromLocalFile(project), QUrl::fromLocalFile(project)}));
        QVERIFY(!drag({QUrl(QStringLiteral("https://example.org/p.json"))}));
        QVERIFY(!window.hasProject());
        QVERIFY(drag({QUrl::fromLocalFile(project)}));
        QVERIFY(window.hasProject());
        QCOMPARE(QFileInfo(window.projectPath()).fileName(), QStringLiteral("dropped.mantissa.json"));
    }

    // The screenshot mode that draws the docs' pictures: `--show LAYER:ROLE` must name a role
    // (exit 2 before any training) and a tensor the run recorded (exit 1 and no picture, rather
    // than a picture of some other tensor).
    void screenshotShowsTheNamedTensor_data()
    {
        QTest::addColumn<QString>("show");
        QTest::addColumn<int>("exitCode");
        QTest::addColumn<QString>("message");
        QTest::newRow("recorded") << "blocks.1.attn.qkv:grad_output" << 0 << "wrote ";
        QTest::newRow("not a role") << "blocks.1.attn.qkv:gradient" << 2
                                    << "mantissa: --show: 'gradient' is not a role; roles: weight, input, output, ";
        QTest::newRow("not LAYER:ROLE") << "grad_output" << 2 << "mantissa: --show: 'grad_output' is not LAYER:ROLE";
        QTest::newRow("no such layer") << "blocks.7.attn.qkv:grad_output" << 1
                                       << "mantissa: --show: the run has no grad_output of 'blocks.7.attn.qkv' by step 2";
        // FP32 attention runs fused: it forms no probabilities.
        QTest::newRow("not recorded") << "blocks.1.attn.sdpa:probs" << 1
                                      << "mantissa: --show: the run has no probs of 'blocks.1.attn.sdpa' by step 2";
    }
    void screenshotShowsTheNamedTensor()
    {
        QFETCH(QString, show);
        QFETCH(int, exitCode);
        QFETCH(QString, message);
        QTemporaryDir dir;
        const QString png = dir.filePath(QStringLiteral("shot.png"));
        const auto [code, out] =
            run_gui_on_golden(dir, {QStringLiteral("--set"), QStringLiteral("training.steps=2"), QStringLiteral("--set"),
                                    QStringLiteral("telemetry.interval=1"), QStringLiteral("--screenshot"), png,
                                    QStringLiteral("--show"), show});
        QVERIFY2(code == exitCode, qPrintable(out));
        QVERIFY2(out.contains(message), qPrintable(out));
        QCOMPARE(QImage(png).isNull(), exitCode != 0);
    }

    // --screenshot-dir grabs its four pages at one step: the run is paused first. Training went
    // on under the grabs (--steps 14 gave a Project page at step 16 and a Monitor page at the
    // run's end, 20).
    void screenshotPagesShowOneStep()
    {
        QTemporaryDir dir;
        const auto [code, out] =
            run_gui_on_golden(dir, {QStringLiteral("--set"), QStringLiteral("training.steps=400"),
                                    QStringLiteral("--screenshot-dir"), dir.path(), QStringLiteral("--steps"),
                                    QStringLiteral("3")});
        QVERIFY2(code == 0, qPrintable(out));
        static const QRegularExpression wrote("wrote \\S+/(\\w+)\\.png at step (\\d+)");
        QStringList pages;
        QSet<qint64> steps;
        for (auto it = wrote.globalMatch(out); it.hasNext();) {
            const auto m = it.next();
            pages << m.captured(1);
            steps << m.captured(2).toLongLong();
        }
        QCOMPARE(pages, (QStringList{"project", "monitor", "runs", "compare"}));
        QVERIFY2(steps.size() == 1, qPrintable(out));
        const qint64 step = *steps.begin();
        QVERIFY2(step >= 3 && step < 400, qPrintable(out)); // paused on the way, not at the run's end
        // The run stopped where the pictures were taken: no step trained under the grabs.
        sqlite3* db = nullptr;
        QCOMPARE(sqlite3_open_v2(dir.filePath(QStringLiteral("runs.sqlite")).toUtf8().constData(), &db,
                                 SQLITE_OPEN_READONLY, nullptr),
                 SQLITE_OK);
        sqlite3_stmt* last = nullptr;
        QCOMPARE(sqlite3_prepare_v2(db, "SELECT max(step) FROM scalars WHERE tag = 'train/loss'", -1, &last, nullptr),
                 SQLITE_OK);
        QCOMPARE(sqlite3_step(last), SQLITE_ROW);
        const qint64 trained = sqlite3_column_int64(last, 0);
        sqlite3_finalize(last);
        sqlite3_close(db);
        QCOMPARE(trained, step);
    }

    // Headless, a setting the engine refuses as the run starts exits as mantissa-train does: 2,
    // a bad argument (it exited 1, as a run that failed in training).
    // The earlier picture is kept: a window at step 0 replaced it.
    void aRefusedSettingExitsAsABadArgument()
    {
        QTemporaryDir dir;
        const QString shot = dir.filePath(QStringLiteral("shot.png"));
        QVERIFY(write_file(shot, "an earlier picture"));
        const auto [code, out] = run_gui_on_golden(dir, {QStringLiteral("--set"), QStringLiteral("training.steps=2"),
                                                          QStringLiteral("--set"),
                                                          QStringLiteral("training.device=cuda"),
                                                          QStringLiteral("--screenshot"), shot});
        if (code == 0) QSKIP("this LibTorch has a CUDA device");
        QVERIFY2(code == 2, qPrintable(out));
        QVERIFY2(out.contains("training.device: 'cuda' was asked for, but this LibTorch has no CUDA device"),
                 qPrintable(out));
        QCOMPARE(read_file(shot), QByteArray("an earlier picture"));
    }

    // A picture that cannot be saved is refused before the run (it trained the whole run, then
    // said "cannot write"), and no store is made for it.
    void aScreenshotThatCannotBeSavedIsRefusedFirst()
    {
        QTemporaryDir dir;
        const QString missing = dir.filePath(QStringLiteral("no-such-folder/shot.png"));
        const auto [code, out] = run_gui_on_golden(dir, {QStringLiteral("--screenshot"), missing});
        QVERIFY2(code == 2, qPrintable(out));
        QVERIFY2(out.contains(QStringLiteral("--screenshot '%1': no picture can be saved there: '%2' does not exist")
                                  .arg(missing, dir.filePath(QStringLiteral("no-such-folder")))),
                 qPrintable(out));
        QVERIFY(!QFileInfo::exists(dir.filePath(QStringLiteral("runs.sqlite"))));
        // A --screenshot-dir is made where it can be: not inside a file.
        QVERIFY(write_file(dir.filePath(QStringLiteral("notes.txt")), "x"));
        const QString deep = dir.filePath(QStringLiteral("notes.txt/a/b"));
        const auto [dirCode, dirOut] = run_gui_on_golden(dir, {QStringLiteral("--screenshot-dir"), deep});
        QVERIFY2(dirCode == 2, qPrintable(dirOut));
        QVERIFY2(dirOut.contains(QStringLiteral("--screenshot-dir '%1': no picture can be saved there: '%2' is not a folder")
                                     .arg(deep, dir.filePath(QStringLiteral("notes.txt")))),
                 qPrintable(dirOut));
        QVERIFY(!QFileInfo::exists(dir.filePath(QStringLiteral("runs.sqlite"))));
    }

    // A store that is no store: exit 3 as mantissa-train's (it exited 1), the picture kept.
    void aDamagedStoreExitsAsAStoreProblem()
    {
        QTemporaryDir dir;
        const QString shot = dir.filePath(QStringLiteral("shot.png"));
        QVERIFY(write_file(shot, "an earlier picture"));
        QVERIFY(write_file(dir.filePath(QStringLiteral("runs.sqlite")), QByteArray(3000, 'x')));
        const auto [code, out] = run_gui_on_golden(dir, {QStringLiteral("--set"), QStringLiteral("training.steps=2"),
                                                          QStringLiteral("--screenshot"), shot});
        QVERIFY2(code == 3, qPrintable(out));
        QVERIFY2(out.contains("is not a SQLite database"), qPrintable(out));
        QCOMPARE(read_file(shot), QByteArray("an earlier picture"));
    }

    // Bad arguments exit 2, as the header's codes say (QCommandLineParser's own exit was 1);
    // with no display the window is refused with what to do instead (Qt aborted: "Reinstalling
    // the application may fix this problem"), while a screenshot takes the offscreen platform.
    // A DISPLAY whose local X server is gone (ssh and tmux sessions that outlived their X
    // forwarding): the window is refused the same way, and help and screenshots, which need no
    // server, still work (all three aborted in Qt's xcb plugin, exit 134).
    void badArgumentsAndNoDisplayExitTwo_data()
    {
        QTest::addColumn<QStringList>("args");
        QTest::addColumn<QString>("display"); // "keep": this environment's; else DISPLAY's value, "" unset
        QTest::addColumn<int>("exitCode");
        QTest::addColumn<QString>("message");
        const QString golden = QStringLiteral(MANTISSA_SOURCE_DIR "/tests/data/golden_project.json");
        const QString shot = QStringLiteral("SHOT");
        QTest::newRow("unknown option") << QStringList{"--bogus"} << "keep" << 2 << "mantissa: Unknown option 'bogus'.";
        QTest::newRow("missing value") << QStringList{"--db"} << "keep" << 2 << "mantissa: Missing value after '--db'.";
        QTest::newRow("no display") << QStringList{golden} << "" << 2
                                    << "mantissa: no display to open the window on (DISPLAY and WAYLAND_DISPLAY are "
                                       "unset): train headless with mantissa-train";
        QTest::newRow("screenshot, no display")
            << QStringList{golden, "--set", "training.steps=1", "--screenshot", shot} << "" << 0 << "wrote ";
        QTest::newRow("a display that is gone") << QStringList{golden} << ":7391" << 2
                                                << "mantissa: DISPLAY=:7391 names an X server that does not answer";
        QTest::newRow("screenshot, a display that is gone")
            << QStringList{golden, "--set", "training.steps=1", "--screenshot", shot} << ":7391.0" << 0 << "wrote ";
        QTest::newRow("help, a display that is gone") << QStringList{"--help"} << "unix:7391" << 0 << "Usage: ";
        // As mantissa-train: a bad argument, not a store that failed (it exited 1).
        QTest::newRow("an in-memory store") << QStringList{golden, "--db", ":memory:", "--screenshot", shot} << "keep"
                                            << 2 << "mantissa: --db ':memory:' is not a file";
    }
    void badArgumentsAndNoDisplayExitTwo()
    {
        QFETCH(QStringList, args);
        QFETCH(QString, display);
        QFETCH(int, exitCode);
        QFETCH(QString, message);
        QTemporaryDir dir;
        args.replaceInStrings(QStringLiteral("SHOT"), dir.filePath(QStringLiteral("shot.png")));
        args.prepend(dir.filePath(QStringLiteral("runs.sqlite")));
        args.prepend(QStringLiteral("--db"));
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        if (display != QLatin1String("keep")) {
            for (const char* name : {"QT_QPA_PLATFORM", "DISPLAY", "WAYLAND_DISPLAY"})
                env.remove(QString::fromLatin1(name));
            if (!display.isEmpty()) env.insert(QStringLiteral("DISPLAY"), display);
        }
        QProcess p;
        p.setProcessEnvironment(env);
        p.setProcessChannelMode(QProcess::MergedChannels);
        p.start(QStringLiteral(MANTISSA_GUI_EXE), args);
        QVERIFY(p.waitForFinished(120000));
        const QString out = QString::fromUtf8(p.readAll());
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QVERIFY2(p.exitCode() == exitCode, qPrintable(out));
        QVERIFY2(out.contains(message), qPrintable(out));
    }

    // The probe connects to a local display's socket; other forms are left to Qt.
    void theDisplayProbeConnectsToALocalServer()
    {
        QCOMPARE(local_x_display_answers("localhost:10.0"), std::nullopt); // ssh -X: not probed
        QCOMPARE(local_x_display_answers("host.example:0"), std::nullopt);
        QCOMPARE(local_x_display_answers(":x"), std::nullopt);
        QCOMPARE(local_x_display_answers(":12x"), std::nullopt);
        QCOMPARE(local_x_display_answers(":7392"), std::optional<bool>(false));
        // A server on the abstract socket that Xorg and Xvfb open.
        const int server = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        QVERIFY(server >= 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        const char name[] = "/tmp/.X11-unix/X7392";
        std::memcpy(address.sun_path + 1, name, sizeof name - 1);
        const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + sizeof name - 1);
        QCOMPARE(::bind(server, reinterpret_cast<const sockaddr*>(&address), length), 0);
        QCOMPARE(::listen(server, 4), 0);
        QCOMPARE(local_x_display_answers(":7392"), std::optional<bool>(true));
        QCOMPARE(local_x_display_answers(":7392.1"), std::optional<bool>(true));
        QCOMPARE(local_x_display_answers("unix:7392"), std::optional<bool>(true));
        QCOMPARE(local_x_display_answers(":7393"), std::optional<bool>(false));
        ::close(server);
        // A server on TCP only (-listen tcp, WSL with VcXsrv): libxcb goes to 127.0.0.1's port
        // 6000 + n for ":n" when there is no socket, but not for "unix:n".
        const int tcp = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        QVERIFY(tcp >= 0);
        sockaddr_in loopback{};
        loopback.sin_family = AF_INET;
        loopback.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        QCOMPARE(::bind(tcp, reinterpret_cast<const sockaddr*>(&loopback), sizeof loopback), 0);
        QCOMPARE(::listen(tcp, 4), 0);
        socklen_t size = sizeof loopback;
        QCOMPARE(::getsockname(tcp, reinterpret_cast<sockaddr*>(&loopback), &size), 0);
        const int port = ntohs(loopback.sin_port);
        if (port > 6000) {
            const std::string n = std::to_string(port - 6000);
            QCOMPARE(local_x_display_answers(":" + n), std::optional<bool>(true));
            QCOMPARE(local_x_display_answers(":" + n + ".0"), std::optional<bool>(true));
            QCOMPARE(local_x_display_answers("unix:" + n), std::optional<bool>(false));
        }
        ::close(tcp);
    }

    // Each splitter's sizes come back to it, whichever page was shown at exit: a tab widget
    // raises its current page, which changes findChildren's order, and the states were kept by
    // that order until 2026-12-07 (after quitting on the Monitor, the next start laid its
    // vertical stack of plots out side by side, and saved that again; a read-only GUI audit).
    void windowStateIsRestored_data()
    {
        QTest::addColumn<int>("page");
        QTest::newRow("project") << int(MainWindow::Page::Project);
        QTest::newRow("monitor") << int(MainWindow::Page::Monitor);
        QTest::newRow("runs") << int(MainWindow::Page::Runs);
        QTest::newRow("compare") << int(MainWindow::Page::Compare);
    }
    void windowStateIsRestored()
    {
        QFETCH(int, page);
        QTemporaryDir dir;
        QSettings settings(dir.filePath(QStringLiteral("settings.ini")), QSettings::IniFormat);
        QMap<QString, QByteArray> arranged;
        QMap<QString, Qt::Orientation> orientations;
        {
            MainWindow window(dir.filePath(QStringLiteral("runs.sqlite")));
            window.resize(1400, 900); // above the window's minimum
            window.show();
            const QList<QSplitter*> splitters = window.findChildren<QSplitter*>();
            QCOMPARE(splitters.size(), 6);
            for (QSplitter* s : splitters) {
                QVERIFY2(!s->objectName().isEmpty() && !arranged.contains(s->objectName()),
                         qPrintable(s->objectName()));
                QList<int> sizes; // a size of its own for every splitter
                for (int i = 0; i < s->count(); ++i) sizes << 100 + 37 * i + 11 * int(arranged.size());
                s->setSizes(sizes);
                arranged[s->objectName()] = s->saveState();
                orientations[s->objectName()] = s->orientation();
            }
            window.showPage(static_cast<MainWindow::Page>(page));
            save_window_state(window, settings);
        }
        MainWindow restored(dir.filePath(QStringLiteral("runs.sqlite")));
        restored.show();
        restore_window_state(restored, settings);
        QCOMPARE(int(restored.currentPage()), page);
        QCOMPARE(restored.size(), QSize(1400, 900));
        for (const QSplitter* s : restored.findChildren<QSplitter*>()) {
            QCOMPARE(s->orientation(), orientations.value(s->objectName()));
            QVERIFY2(s->saveState() == arranged.value(s->objectName()), qPrintable(s->objectName()));
        }
        // A state of the other orientation, or of another number of panes (another version's
        // layout), leaves the default.
        settings.setValue(QStringLiteral("window/splitter/monitor.curves"),
                          arranged.value(QStringLiteral("monitor.main")));
        settings.setValue(QStringLiteral("window/splitter-panes/monitor.curves"),
                          restored.findChild<QSplitter*>(QStringLiteral("monitor.curves"))->count());
        const int panes = restored.findChild<QSplitter*>(QStringLiteral("project.split"))->count();
        settings.setValue(QStringLiteral("window/splitter-panes/project.split"), panes + 1);
        MainWindow third(dir.filePath(QStringLiteral("runs.sqlite")));
        const QByteArray project_default = third.findChild<QSplitter*>(QStringLiteral("project.split"))->saveState();
        restore_window_state(third, settings);
        QCOMPARE(third.findChild<QSplitter*>(QStringLiteral("monitor.curves"))->orientation(), Qt::Vertical);
        QCOMPARE(third.findChild<QSplitter*>(QStringLiteral("project.split"))->saveState(), project_default);
        QVERIFY(project_default != arranged.value(QStringLiteral("project.split")));
    }

    // No caption keeps a fixed colour (not palette(...)) without its own background: under a dark palette a fixed
    // grey (#444 to #777 until 2026-12-07) was dark grey on dark grey (a read-only GUI audit).
    // Secondary text takes the palette's PlaceholderText, light under the dark palette.
    void captionsFollowThePalette()
    {
        QTemporaryDir tmp;
        MainWindow window(tmp.filePath(QStringLiteral("captions.sqlite")));
        window.setPalette(dark_palette());
        const QColor window_colour = dark_palette().color(QPalette::Window);
        int secondary = 0;
        for (const QLabel* label : window.findChildren<QLabel*>()) {
            const QString css = label->styleSheet();
            static const QRegularExpression fixed(QStringLiteral("(^|[^-])color\\s*:(?!\\s*palette\\()"));
            const bool fixed_colour = css.contains(fixed);
            QVERIFY2(!fixed_colour || css.contains(QStringLiteral("background")), qPrintable(css));
            static const QRegularExpression span_colour(QStringLiteral("color:\\s*(#[0-9a-fA-F]{6})"));
            for (auto m = span_colour.globalMatch(label->text()); m.hasNext();) {
                const QColor c(m.next().captured(1));
                QVERIFY2(std::abs(c.lightness() - window_colour.lightness()) > 60, qPrintable(label->text()));
            }
            if (label->foregroundRole() != QPalette::PlaceholderText) continue;
            ++secondary;
            QVERIFY2(label->palette().color(QPalette::PlaceholderText).lightness() > 110,
                     qPrintable(label->objectName() + QLatin1Char(' ') +
                                label->palette().color(QPalette::PlaceholderText).name()));
        }
        QVERIFY(secondary >= 6); // the Monitor's frame, the Runs count and note, three Compare captions
    }

    // The Runs table's Name column fills what the others leave, and keeps about 24 characters
    // in a narrow window (the table scrolls then): stretched, it cut every name to "add…" below
    // 1600 px while an empty Tags column kept its 190 (a read-only GUI audit, 2026-12-07).
    void runNamesKeepTheirWidth()
    {
        QTemporaryDir tmp;
        MainWindow window(tmp.filePath(QStringLiteral("names.sqlite")));
        window.showPage(MainWindow::Page::Runs);
        window.show();
        QTableView* view = window.runsPage()->view();
        QHeaderView* header = view->horizontalHeader();
        const int least = view->fontMetrics().horizontalAdvance(QLatin1Char('x')) * 24;
        const auto others = [&] {
            int sum = 0;
            for (int c = 0; c < header->count(); ++c)
                if (c != RunListModel::Name && !header->isSectionHidden(c)) sum += header->sectionSize(c);
            return sum;
        };
        window.resize(2400, 900);
        QTRY_COMPARE(header->sectionSize(RunListModel::Name), view->viewport()->width() - others());
        QVERIFY(header->sectionSize(RunListModel::Name) > least);
        window.resize(window.minimumSizeHint().width(), 900);
        QTRY_COMPARE(header->sectionSize(RunListModel::Name), least);
        QVERIFY(view->viewport()->width() < least + others()); // the table scrolls sideways instead
        header->resizeSection(RunListModel::Tags, 40); // a user narrows a column: Name takes it
        QCOMPARE(header->sectionSize(RunListModel::Name), std::max(least, view->viewport()->width() - others()));
    }

    void plotsFollowThePalette()
    {
        QTemporaryDir tmp;
        MainWindow window(tmp.filePath(QStringLiteral("test_desktop_palette.sqlite")));
        LossPlot* plot = window.monitorPage()->lossPlot();
        // The corner of a rendering lies outside the axis rect: the plot's background.
        const auto background = [plot] { return plot->toPixmap(200, 150).toImage().pixelColor(1, 1); };
        const QColor lightBase = plot->palette().color(QPalette::Base);
        QCOMPARE(background(), lightBase);
        const QPalette dark = dark_palette();
        window.setPalette(dark); // propagates to every child, as a desktop palette change does
        QCOMPARE(background(), dark.color(QPalette::Base));
        QVERIFY(plot->xAxis->tickLabelColor().lightness() > 150); // light text on the dark base
        QVERIFY(plot->xAxis->grid()->pen().color().lightness() < 100);
        window.setPalette(QPalette());
        QCOMPARE(background(), lightBase);
        QFile::remove(QDir::temp().filePath(QStringLiteral("test_desktop_palette.sqlite")));
    }

    void mimeTypeRegisters()
    {
        const QString tool = QStandardPaths::findExecutable(QStringLiteral("update-mime-database"));
        if (tool.isEmpty()) MISSING_TOOL("update-mime-database missing (Debian: shared-mime-info)");
        QTemporaryDir dir;
        QVERIFY(QDir().mkpath(dir.filePath(QStringLiteral("packages"))));
        QVERIFY(QFile::copy(kResources + QStringLiteral("/io.github.mantissa.Mantissa.mime.xml"),
                            dir.filePath(QStringLiteral("packages/io.github.mantissa.Mantissa.xml"))));
        const QString out = validate(tool, {dir.path()});
        QVERIFY2(out.isEmpty(), qPrintable(out));
        QFile globs(dir.filePath(QStringLiteral("globs2")));
        QVERIFY(globs.open(QIODevice::ReadOnly));
        QVERIFY(globs.readAll().contains("60:application/x-mantissa-project:*.mantissa.json\n"));
    }
};

QTEST_MAIN(TestDesktop)
#include "test_desktop.moc"
