// SPDX-License-Identifier: GPL-3.0-or-later
// mantissa: the workbench GUI.
//   mantissa [PROJECT] [--db PATH] [--set key=value ...]
//   mantissa ... --dark                                 (a dark palette instead of the desktop's: screenshots)
//   mantissa --version                                  (Mantissa, LibTorch, CUDA, cuDNN, Qt, SQLite versions)
//   mantissa PROJECT --screenshot out.png [--steps N]   (pauses the run after N steps, where the step in
//                                                        flight ends, renders the window, then stops the run;
//                                                        used for the docs, works with QT_QPA_PLATFORM=offscreen)
//   mantissa PROJECT --screenshot-dir DIR [--steps N]   (the same, one PNG per page: project.png, monitor.png,
//                                                        runs.png, compare.png with the latest runs of the store)
//   mantissa ... --show LAYER:ROLE                      (with a screenshot: the Monitor's underflow heatmap of
//                                                        ROLE, LAYER selected, its histogram of ROLE; exit 1
//                                                        and no picture when the run recorded no such tensor)
// Exit codes: 0 ok, 1 the run or the screenshot failed, 2 bad project, settings or arguments,
// 3 the run store or the final checkpoint lost something (as mantissa-train's).

#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QPixmap>
#include <QSettings>
#include <QStyleFactory>
#include <QTimer>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <vector>

#include "determinism.h"
#include "run_store.h"
#include "x_display_probe.h"
#include "telemetry.h"
#include "pages/compare_page.h"
#include "window/main_window.h"
#include "window/run_status_widget.h"
#include "pages/monitor_page.h"
#include "models/run_list_model.h"
#include "pages/runs_page.h"
#include "controller/training_controller.h"
#include "common/app_icons.h"
#include "common/dark_palette.h"
#include "window/window_state.h"
#include "version_report.h"

using namespace mantissa;

namespace {

// The executable lives somewhere under the build tree, which usually sits inside the source
// tree; walk up until a projects/default.json turns up, then try the working directory.
QString find_default_project()
{
    QDir dir(QCoreApplication::applicationDirPath());
    // Installed: <prefix>/bin/mantissa next to <prefix>/share/mantissa/projects.
    const QString installed = dir.filePath(QStringLiteral("../share/mantissa/projects/default.json"));
    if (QFileInfo::exists(installed)) return QDir::cleanPath(installed);
    for (int level = 0; level < 6; ++level) {
        const QString candidate = dir.filePath(QStringLiteral("projects/default.json"));
        if (QFileInfo::exists(candidate)) return candidate;
        if (!dir.cdUp()) break;
    }
    const QString local = QDir::current().filePath(QStringLiteral("projects/default.json"));
    return QFileInfo::exists(local) ? local : QString();
}

void fail(const QString& message)
{
    std::fprintf(stderr, "mantissa: %s\n", qPrintable(message));
}

} // namespace

int main(int argc, char* argv[])
{
    prepare_cublas_for_determinism(); // before any thread starts (determinism.h)
    // Before QApplication: --version must work without a display.
    bool needs_no_display = false; // help, or screenshots
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--version") == 0) {
            std::printf("%s\n", version_text("mantissa", qVersion()).c_str());
            return 0;
        }
        const std::string_view arg = argv[i];
        needs_no_display |= arg == "--help" || arg == "-h" || arg == "--help-all" || arg.starts_with("--screenshot");
    }
    // The application aborts with no display ("Reinstalling the application may fix this
    // problem") unless a platform that needs none is named: help and screenshots take the
    // offscreen one where there is no display or the one named is gone (a grab needs no
    // server); the window is refused with what to do instead.
    if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM")) {
        const bool wayland = qEnvironmentVariableIsSet("WAYLAND_DISPLAY");
        const QByteArray display = qgetenv("DISPLAY");
        const bool gone = !wayland && (display.isEmpty() || local_x_display_answers(display.toStdString()) == false);
        if (needs_no_display) {
            if (gone) qputenv("QT_QPA_PLATFORM", "offscreen"); // else the desktop's platform, and its theme
        } else if (display.isEmpty() && !wayland) {
            std::fprintf(stderr, "mantissa: no display to open the window on (DISPLAY and WAYLAND_DISPLAY are "
                                 "unset): train headless with mantissa-train, or take --screenshot-dir pictures of "
                                 "the pages\n");
            return 2;
        } else if (gone) {
            std::fprintf(stderr, "mantissa: DISPLAY=%s names an X server that does not answer (a session that "
                                 "outlived its X forwarding?): unset DISPLAY, or set it to a running server "
                                 "(QT_QPA_PLATFORM=xcb skips this check); train headless with mantissa-train, or "
                                 "take --screenshot-dir pictures of the pages\n", display.constData());
            return 2;
        }
    }
    QApplication app(argc, argv);
    QApplication::setApplicationName(QStringLiteral("Mantissa"));
    QApplication::setApplicationVersion(QString::fromStdString(version_lines(qVersion()).front().second));
    QApplication::setWindowIcon(app_icon());
    QGuiApplication::setDesktopFileName(QStringLiteral("io.github.mantissa.Mantissa"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Mixed-precision transformer training workbench"));
    const QCommandLineOption helpOption = parser.addHelpOption();
    parser.addPositionalArgument(QStringLiteral("project"),
                                 QStringLiteral("Project file (default: projects/default.json)"),
                                 QStringLiteral("[project]"));
    const QCommandLineOption dbOption(QStringLiteral("db"), QStringLiteral("Run store (SQLite) to record runs in."),
                                      QStringLiteral("path"));
    const QCommandLineOption setOption(QStringLiteral("set"),
                                       QStringLiteral("Override a project key, e.g. training.steps=100."),
                                       QStringLiteral("key=value"));
    const QCommandLineOption shotOption(QStringLiteral("screenshot"),
                                        QStringLiteral("Start the run, save the window as a PNG and quit."),
                                        QStringLiteral("png"));
    const QCommandLineOption stepsOption(
        QStringLiteral("steps"),
        QStringLiteral("With --screenshot: take it after this many steps (default: at the end)."), QStringLiteral("n"),
        QStringLiteral("0"));
    const QCommandLineOption shotDirOption(QStringLiteral("screenshot-dir"),
                                           QStringLiteral("Like --screenshot, one PNG per page into this folder."),
                                           QStringLiteral("dir"));
    const QCommandLineOption versionOption(QStringLiteral("version"),
                                           QStringLiteral("Print the versions of Mantissa and its libraries."));
    const QCommandLineOption darkOption(QStringLiteral("dark"),
                                        QStringLiteral("Use a dark palette instead of the desktop's (screenshots)."));
    const QCommandLineOption showOption(
        QStringLiteral("show"),
        QStringLiteral("With a screenshot: the Monitor shows this tensor (underflow heatmap of the role, the layer's "
                       "histogram), e.g. blocks.1.attn.sdpa:grad_scores."),
        QStringLiteral("layer:role"));
    parser.addOptions(
        {dbOption, setOption, shotOption, shotDirOption, stepsOption, versionOption, darkOption, showOption});
    // Not process(): its own errors exit 1, where a bad argument is 2 (the header's codes).
    if (!parser.parse(QCoreApplication::arguments())) {
        fail(parser.errorText());
        return 2;
    }
    if (parser.isSet(helpOption) || parser.isSet(QStringLiteral("help-all"))) parser.showHelp(0);
    if (parser.isSet(darkOption)) {
        QApplication::setStyle(QStyleFactory::create(QStringLiteral("Fusion")));
        QApplication::setPalette(dark_palette());
    }

    if (parser.positionalArguments().size() > 1) {
        fail(QStringLiteral("expected at most one project file"));
        return 2;
    }
    bool stepsOk = false;
    const qint64 shotSteps = parser.value(stepsOption).toLongLong(&stepsOk);
    if (!stepsOk || shotSteps < 0) {
        fail(QStringLiteral("--steps: '%1' is not a step count").arg(parser.value(stepsOption)));
        return 2;
    }
    const QString shown = parser.value(showOption);
    const qsizetype colon = shown.lastIndexOf(QLatin1Char(':'));
    if (!shown.isEmpty() && (colon <= 0 || colon == shown.size() - 1)) {
        fail(QStringLiteral("--show: '%1' is not LAYER:ROLE").arg(shown));
        return 2;
    }
    const QString shownLayer = shown.left(colon), shownRole = shown.mid(colon + 1);
    if (!shown.isEmpty()) {
        const auto& roles = tensor_roles();
        if (std::find(roles.begin(), roles.end(), shownRole.toStdString()) == roles.end()) {
            QStringList names;
            for (const auto& r : roles) names << QString::fromStdString(r);
            fail(QStringLiteral("--show: '%1' is not a role; roles: %2").arg(shownRole, names.join(u", ")));
            return 2;
        }
        if (!parser.isSet(shotOption) && !parser.isSet(shotDirOption)) {
            fail(QStringLiteral("--show needs --screenshot or --screenshot-dir"));
            return 2;
        }
    }
    std::vector<Override> overrides;
    try {
        for (const QString& text : parser.values(setOption))
            overrides.push_back(parse_override(text.toStdString()));
    } catch (const ConfigError& e) {
        fail(QString::fromStdString(e.what()));
        return 2;
    }

    // As mantissa-train refuses them: bad arguments (exit 2), not a store that failed.
    const std::string db = parser.value(dbOption).toStdString();
    if (parser.isSet(dbOption) && RunStore::is_private_database(db)) {
        fail(QStringLiteral("--db '%1' is not a file: name the run store's file (default %2)")
                 .arg(parser.value(dbOption), QString::fromStdString(default_store_path())));
        return 2;
    }
    if (parser.isSet(dbOption) && RunStore::names_a_folder(db)) {
        fail(QStringLiteral("--db '%1' is a folder: name the run store's file in it").arg(parser.value(dbOption)));
        return 2;
    }
    // A picture that cannot be saved is said before the run, not after it trained to its end.
    for (const QCommandLineOption* option : {&shotOption, &shotDirOption}) {
        const QString target = parser.value(*option);
        if (target.isEmpty()) continue;
        // A --screenshot-dir is made (mkpath): its nearest folder that is there must take it.
        const bool folder = option == &shotDirOption;
        QString where = folder ? QFileInfo(target).absoluteFilePath() : QFileInfo(target).absolutePath();
        while (folder && !QFileInfo::exists(where) && QFileInfo(where).absolutePath() != where)
            where = QFileInfo(where).absolutePath();
        const QFileInfo at(where);
        if (!at.isDir() || !at.isWritable()) {
            fail(QStringLiteral("--%1 '%2': no picture can be saved there: '%3' %4")
                     .arg(option->names().first(), target, where,
                          !at.exists()  ? QStringLiteral("does not exist")
                          : !at.isDir() ? QStringLiteral("is not a folder")
                                        : QStringLiteral("is a folder that cannot be written")));
            return 2;
        }
    }
    MainWindow window(parser.value(dbOption));
    const QString project =
        parser.positionalArguments().isEmpty() ? find_default_project() : parser.positionalArguments().first();
    const bool loaded = !project.isEmpty() && window.openProject(project, overrides);

    const QString shotPath = parser.value(shotOption);
    const QString shotDir = parser.value(shotDirOption);
    if (shotPath.isEmpty() && shotDir.isEmpty()) {
        QSettings settings(QStringLiteral("Mantissa"), QStringLiteral("Mantissa"));
        restore_window_state(window, settings);
        window.show();
        const int code = QApplication::exec();
        save_window_state(window, settings);
        return code;
    }

    // Screenshot mode: no user, so every failure ends the process with a message.
    if (!loaded) {
        fail(project.isEmpty() ? QStringLiteral("no project file given and projects/default.json not found")
                               : window.lastError());
        return 2;
    }
    window.show();
    TrainingController* controller = window.controller();
    bool shotTaken = false;
    bool shotSaved = false;
    auto save = [&](const QString& path) {
        if (!shown.isEmpty()) {
            window.monitorPage()->setHeatmapStatistic(LayerStat::UnderflowPercent, shownRole);
            window.monitorPage()->setHistogramRole(shownRole);
            window.monitorPage()->selectLayer(shownLayer);
        }
        window.monitorPage()->renderNow(); // the frame budget may have skipped the latest data
        window.statusWidget()->refreshLabels(); // its timer had left "step 0 / 20, loss –" in the picture
        const bool ok = window.grab().save(path, "PNG");
        if (!ok)
            fail(QStringLiteral("cannot write '%1'").arg(path));
        else
            std::printf("wrote %s at step %lld\n", qPrintable(path), static_cast<long long>(window.lastStep()));
        return ok;
    };
    // A layer the run does not have, or a tensor it never recorded (a role of another recipe,
    // no telemetry step yet), would give a picture of something else.
    auto shownWasRecorded = [&] {
        if (shown.isEmpty()) return true;
        const RunHistory& history = window.monitorPage()->history();
        if (history.histogram(shownLayer.toStdString(), shownRole.toStdString(), history.lastStep())) return true;
        fail(QStringLiteral("--show: the run has no %1 of '%2' by step %3")
                 .arg(shownRole, shownLayer)
                 .arg(history.lastStep()));
        return false;
    };
    auto takeShot = [&] {
        shotTaken = true;
        shotSaved = shownWasRecorded();
        if (!shotSaved) return;
        if (!shotPath.isEmpty()) shotSaved = save(shotPath);
        if (!shotDir.isEmpty()) {
            QDir().mkpath(shotDir);
            const MainWindow::Page shown = window.currentPage();
            // The Compare page gets the latest runs (up to 4), the one just trained among them.
            window.runsPage()->refresh();
            std::vector<int64_t> latest;
            const auto& runs = window.runsPage()->model()->runs();
            for (auto it = runs.rbegin(); it != runs.rend() && latest.size() < 4; ++it)
                if (it->id != controller->runId() || it->status != RunStatus::Running) latest.insert(latest.begin(), it->id);
            window.runsPage()->selectRuns(latest);
            window.comparePage()->setRuns(latest);
            for (const auto& [page, name] : {std::pair{MainWindow::Page::Project, "project.png"},
                                             std::pair{MainWindow::Page::Monitor, "monitor.png"},
                                             std::pair{MainWindow::Page::Runs, "runs.png"},
                                             std::pair{MainWindow::Page::Compare, "compare.png"}}) {
                window.showPage(page);
                QApplication::processEvents();
                shotSaved = save(QDir(shotDir).filePath(QString::fromLatin1(name))) && shotSaved;
            }
            window.showPage(shown);
        }
    };
    // Paused first, grabbed once the engine says it paused (its Paused event, after the step in
    // flight): training went on while the pages were grabbed one after another, so --steps 14
    // gave a Project page at step 16 and a Monitor page at the run's end (step 20). A pause refused
    // at the last step leaves the shot to `finished`.
    bool shotPending = false;
    QObject::connect(controller, &TrainingController::drained, &window, [&](const TelemetryBatch& batch) {
        if (shotTaken || shotSteps <= 0 || window.lastStep() < shotSteps) return;
        if (!shotPending) {
            shotPending = true;
            controller->pause();
        }
        const bool paused = std::any_of(batch.events.begin(), batch.events.end(),
                                        [](const RunEvent& e) { return e.kind == EventKind::Paused; });
        if (!paused) return;
        takeShot();
        controller->stop();
    });
    QObject::connect(controller, &TrainingController::finished, &window, [&](RunStatus status) {
        // A run that failed before a step was done (its settings or store refused, a failure in
        // step 1) leaves an earlier picture as it was: a window at step 0 replaced it.
        const bool refused = status == RunStatus::Failed && window.lastStep() <= 0;
        if (!shotTaken && !refused) takeShot();
        // As mantissa-train exits: 2 for settings refused before training, 3 for a run whose
        // store or final checkpoint lost something (it exited 1 and 0).
        if (status == RunStatus::Failed) {
            fail(controller->lastError());
            QCoreApplication::exit(controller->lastRefusedSettings() ? 2 : controller->lastStoreFailed() ? 3 : 1);
            return;
        }
        if (!controller->lastError().isEmpty()) {
            fail(controller->lastError());
            QCoreApplication::exit(3);
            return;
        }
        QCoreApplication::exit(shotSaved ? 0 : 1);
    });
    // Start once the window has been laid out, as a user would.
    QTimer::singleShot(0, &window, [&] {
        if (!window.startTraining()) QCoreApplication::exit(1);
    });
    return QApplication::exec();
}
