// SPDX-License-Identifier: GPL-3.0-or-later
#include "window/main_window.h"

#include <QAbstractButton>
#include <QAction>
#include <QCloseEvent>
#include <QDir>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QMimeData>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
#include <QTabWidget>
#include <QThread>
#include <QToolBar>
#include <QVBoxLayout>

#include "pages/compare_page.h"
#include "plots/exponent_histogram_plot.h"
#include "plots/layer_heatmap_plot.h"
#include "plots/loss_plot.h"
#include "plots/loss_scale_plot.h"
#include "plots/memory_plot.h"
#include <algorithm>
#include <utility>

#include "pages/monitor_page.h"
#include "plots/plot_export.h"
#include "precision_policy.h"
#include "models/precision_table_model.h"
#include "models/project_document.h"
#include "pages/project_page.h"
#include "common/run_format.h"
#include "window/about_dialog.h"
#include "common/app_icons.h"
#include "window/run_status_widget.h"
#include "pages/runs_page.h"
#include "controller/run_follower.h"
#include "controller/store_connection.h"
#include "run_store.h"
#include "remote/connect_dialog.h"
#include "remote/remote_connector.h"
#include "remote/remote_mirror.h"
#include "remote/remote_status_label.h"
#include "window/monitor_feed.h"
#include "window/sweep_dialog.h"
#include "controller/sweep_runner.h"
#include "controller/training_controller.h"

namespace mantissa {

MainWindow::MainWindow(const QString& storePath, QWidget* parent)
    : QMainWindow(parent), controller_(new TrainingController(storePath, this)), document_(new ProjectDocument(this)),
      store_(new StoreConnection(controller_->storePath(), this))
{
    sweepRunner_ = new SweepRunner(
        controller_, store_,
        [this](const ProjectConfig& config, const QString& runName) { return startRun(config, runName); }, this);
    setWindowTitle(tr("Mantissa"));
    setWindowIcon(app_icon());
    setAcceptDrops(true);
    createActions();
    buildMenus();
    buildToolBar();

    auto* central = new QWidget(this);
    auto* layout = new QVBoxLayout(central);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(0);
    // Errors stay on screen until the next successful action: a status-bar message alone is
    // gone before anyone reads it.
    errorLabel_ = new QLabel(central);
    errorLabel_->setObjectName(QStringLiteral("errorLabel"));
    errorLabel_->setWordWrap(true);
    errorLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    errorLabel_->setStyleSheet(QStringLiteral("QLabel { color: #8a0015; background: #fdecee;"
                                              " border-bottom: 1px solid #f5c2c7; padding: 6px 10px; }"));
    errorLabel_->hide();
    layout->addWidget(errorLabel_);
    pages_ = new QTabWidget(central);
    pages_->setDocumentMode(true);
    projectPage_ = new ProjectPage(document_, pages_);
    monitorPage_ = new MonitorPage(pages_);
    runsPage_ = new RunsPage(store_, pages_);
    comparePage_ = new ComparePage(store_, pages_);
    pages_->addTab(projectPage_, tr("Project"));
    pages_->addTab(monitorPage_, tr("Monitor"));
    pages_->addTab(runsPage_, tr("Runs"));
    pages_->addTab(comparePage_, tr("Compare"));
    install_plot_export_menu(monitorPage_->lossPlot(), QStringLiteral("loss"));
    install_plot_export_menu(monitorPage_->lossScalePlot(), QStringLiteral("loss-scale"));
    install_plot_export_menu(monitorPage_->memoryPlot(), QStringLiteral("memory"));
    install_plot_export_menu(monitorPage_->heatmap(), QStringLiteral("layer-heatmap"));
    install_plot_export_menu(monitorPage_->histogramPlot(), QStringLiteral("exponent-histogram"));
    layout->addWidget(pages_, 1);
    setCentralWidget(central);

    statusWidget_ = new RunStatusWidget(this);
    statusBar()->addPermanentWidget(statusWidget_);
    remote_ = new RemoteConnector(store_, {}, this);
    remoteStatus_ = new RemoteStatusLabel(this);
    statusBar()->addPermanentWidget(remoteStatus_);
    feed_ = new MonitorFeed(monitorPage_, store_, this);
    feed_->setStatusWidget(statusWidget_);
    connect(feed_, &MonitorFeed::message, this, [this](const QString& text) { statusBar()->showMessage(text, 8000); });
    connect(feed_, &MonitorFeed::failed, this, &MainWindow::showError);
    connect(store_, &StoreConnection::runsChanged, feed_, &MonitorFeed::followNewest);
    connect(remote_, &RemoteConnector::mirrorChanged, this, [this](RemoteMirror* mirror) {
        remoteStatus_->setMirror(mirror);
        feed_->setRemote(mirror);
        if (disconnectAction_) disconnectAction_->setEnabled(mirror != nullptr);
        if (remoteMenu_) remoteMenu_->setEnabled(mirror != nullptr);
        updateActions();
        if (mirror) {
            connect(mirror, &RemoteMirror::commandAnswered, this,
                    [this](qint64, const QString&, bool accepted, const QString& message) {
                        if (!accepted) return showError(message);
                        clearError(); // an earlier refusal's, which this command's acceptance outdates
                        statusBar()->showMessage(message, 8000);
                    });
            connect(mirror, &RemoteMirror::replicaDiffers, this,
                    [this](qint64, const QString& message) { showError(message); });
        }
    });

    connect(controller_, &TrainingController::started, this, &MainWindow::onStarted);
    connect(controller_, &TrainingController::drained, this, &MainWindow::onDrained);
    connect(controller_, &TrainingController::failed, this, &MainWindow::showError);
    connect(controller_, &TrainingController::finished, this, &MainWindow::onFinished);
    connect(controller_, &TrainingController::pausedChanged, this, [this](bool paused) {
        statusWidget_->setPaused(paused);
        runsPage_->setTrainingRunPaused(paused);
        updateActions();
    });
    connect(document_, &ProjectDocument::changed, this, [this] {
        updateTitle();
        updateActions();
        // The readout's total is the project's only while it shows no run: a followed run
        // (Runs ▸ Show in Monitor, a remote run) keeps its own.
        if (!controller_->isRunning() && feed_->followedRun() < 0)
            statusWidget_->setTotalSteps(document_->config().training.steps);
    });
    connect(document_, &ProjectDocument::undoChanged, this, &MainWindow::updateActions);
    connect(document_, &ProjectDocument::validationFailed, this,
            [this](const QString&, const QString& message) { statusBar()->showMessage(message, 8000); });
    connect(projectPage_, &ProjectPage::layerFormatsEdited, this,
            [this](const QString& layer, const GemmFormats& f, const QString& scaling) {
        if (!controller_->isRunning()) return;
        // A sweep's runs differ only in the swept setting: an edit goes to the project alone.
        if (sweepRunner_->isRunning())
            statusBar()->showMessage(tr("Changed in the project only (not saved): the sweep's runs keep their "
                                        "settings."),
                                     8000);
        else if (!changeLayerFormats(layer, f, scaling))
            projectPage_->precisionModel()->refuseSent();
    });
    connect(monitorPage_, &MonitorPage::layerSwitchRequested, this, &MainWindow::switchLayer);
    // One selection everywhere: a layer picked on the monitor is shown in the precision table.
    connect(monitorPage_, &MonitorPage::layerSelected, projectPage_, &ProjectPage::selectLayer);
    connect(runsPage_, &RunsPage::compareRequested, this, &MainWindow::showComparison);
    connect(runsPage_, &RunsPage::openRunRequested, this, [this](qint64 id) { showComparison({id}); });
    connect(runsPage_, &RunsPage::showInMonitorRequested, this, &MainWindow::showRunInMonitor);
    connect(store_, &StoreConnection::runsChanged, comparePage_, &ComparePage::reload);
    connect(sweepRunner_, &SweepRunner::runStarting, this, [this](int index, int count, const QString& name) {
        statusBar()->showMessage(tr("Sweep %1/%2: %3").arg(index + 1).arg(count).arg(name));
    });
    connect(sweepRunner_, &SweepRunner::finished, this, &MainWindow::onSweepFinished);
    runsPage_->refresh();

    updateActions();
    updateTitle();
    statusBar()->showMessage(tr("Open a project to start"));
    resize(1600, 1000);
}

// The controller is a child: QObject's destructor stops the run and joins the worker.
MainWindow::~MainWindow() = default;

void MainWindow::createActions()
{
    const auto make = [this](const QString& text, const QKeySequence& keys, auto slot) {
        auto* action = new QAction(text, this);
        action->setShortcut(keys);
        connect(action, &QAction::triggered, this, slot);
        return action;
    };
    openAction_ = make(tr("&Open Project…"), QKeySequence::Open, &MainWindow::chooseProject);
    saveAction_ = make(tr("&Save Project"), QKeySequence::Save, &MainWindow::saveProject);
    saveAsAction_ = make(tr("Save Project &As…"), QKeySequence::SaveAs, &MainWindow::saveProjectAs);
    startAction_ = make(tr("&Start"), QKeySequence(Qt::Key_F5), &MainWindow::startTraining);
    pauseAction_ = make(tr("&Pause"), QKeySequence(Qt::Key_F6), &MainWindow::togglePause);
    stopAction_ = make(tr("S&top"), QKeySequence(Qt::SHIFT | Qt::Key_F5), &MainWindow::stopTraining);
    checkpointAction_ = make(tr("&Checkpoint Now"), QKeySequence(Qt::CTRL | Qt::Key_K), &MainWindow::checkpointNow);
    projectPageAction_ = make(tr("&Project"), QKeySequence(Qt::CTRL | Qt::Key_1), [this] { showPage(Page::Project); });
    monitorPageAction_ = make(tr("&Monitor"), QKeySequence(Qt::CTRL | Qt::Key_2), [this] { showPage(Page::Monitor); });
    runsPageAction_ = make(tr("&Runs"), QKeySequence(Qt::CTRL | Qt::Key_3), [this] { showPage(Page::Runs); });
    comparePageAction_ = make(tr("&Compare"), QKeySequence(Qt::CTRL | Qt::Key_4), [this] { showPage(Page::Compare); });
    sweepAction_ = make(tr("S&weep…"), QKeySequence(), &MainWindow::chooseSweep);
    // The project's edits; a focused cell editor keeps Ctrl+Z for its own text.
    undoAction_ = make(tr("&Undo Project Edit"), QKeySequence::Undo, [this] { document_->undo(); });
    redoAction_ = make(tr("&Redo Project Edit"), QKeySequence::Redo, [this] { document_->redo(); });
    for (const auto& [action, icon] : {std::pair{openAction_, ActionIcon::Open}, std::pair{saveAction_, ActionIcon::Save},
                                       std::pair{startAction_, ActionIcon::Start},
                                       std::pair{pauseAction_, ActionIcon::Pause}, std::pair{stopAction_, ActionIcon::Stop},
                                       std::pair{checkpointAction_, ActionIcon::Checkpoint},
                                       std::pair{sweepAction_, ActionIcon::Sweep}})
        action->setIcon(action_icon(icon));
    sweepAction_->setToolTip(tr("Run the project once per value of one setting, then compare the runs"));
    startAction_->setToolTip(tr("Start a run of this project (F5)"));
    pauseAction_->setToolTip(tr("Pause or resume at the next step boundary (F6)"));
    stopAction_->setToolTip(tr("Stop at the next step boundary and keep a checkpoint (Shift+F5)"));
    checkpointAction_->setToolTip(tr("Write a checkpoint at the next step boundary (Ctrl+K)"));
}

void MainWindow::buildMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(openAction_);
    recentMenu_ = file->addMenu(tr("Open &Recent"));
    recentMenu_->setObjectName(QStringLiteral("recentMenu"));
    connect(recentMenu_, &QMenu::aboutToShow, this, &MainWindow::rebuildRecentMenu);
    file->addAction(saveAction_);
    file->addAction(saveAsAction_);
    file->addSeparator();
    auto* connectAction = new QAction(tr("&Connect…"), this);
    connectAction->setObjectName(QStringLiteral("connectAction"));
    connectAction->setToolTip(tr("Watch the runs of a remote store (mantissa-train serve), e.g. through ssh -L"));
    connect(connectAction, &QAction::triggered, this, &MainWindow::chooseRemote);
    file->addAction(connectAction);
    disconnectAction_ = new QAction(tr("&Disconnect"), this);
    connect(disconnectAction_, &QAction::triggered, this, &MainWindow::disconnectRemote);
    file->addAction(disconnectAction_);
    disconnectAction_->setObjectName(QStringLiteral("disconnectAction"));
    disconnectAction_->setEnabled(false);
    file->addSeparator();
    auto* quit = new QAction(tr("&Quit"), this);
    quit->setShortcut(QKeySequence::Quit);
    connect(quit, &QAction::triggered, this, &QWidget::close);
    file->addAction(quit);

    QMenu* edit = menuBar()->addMenu(tr("&Edit"));
    edit->addAction(undoAction_);
    edit->addAction(redoAction_);

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    for (QAction* a : {startAction_, pauseAction_, stopAction_, checkpointAction_}) run->addAction(a);
    run->addSeparator();
    run->addAction(sweepAction_);
    remoteMenu_ = run->addMenu(tr("Re&mote Run"));
    remoteMenu_->setObjectName(QStringLiteral("remoteMenu"));
    remoteMenu_->setEnabled(false);
    const std::pair<QString, QString> commands[] = {{"pause", tr("&Pause")}, {"resume", tr("&Resume")},
                                                    {"stop", tr("&Stop")}, {"checkpoint", tr("&Checkpoint Now")}};
    for (const auto& [command, label] : commands) {
        QAction* a = remoteMenu_->addAction(label);
        connect(a, &QAction::triggered, this, [this, command = command] { sendRemoteCommand(command); });
    }

    QMenu* view = menuBar()->addMenu(tr("&View"));
    view->addAction(projectPageAction_);
    view->addAction(monitorPageAction_);
    view->addAction(runsPageAction_);
    view->addAction(comparePageAction_);

    QMenu* help = menuBar()->addMenu(tr("&Help"));
    QAction* about = help->addAction(tr("&About Mantissa"));
    about->setObjectName(QStringLiteral("aboutAction"));
    connect(about, &QAction::triggered, this, [this] {
        AboutDialog dialog(current_gpu(), this);
        dialog.exec();
    });
}

void MainWindow::buildToolBar()
{
    QToolBar* bar = addToolBar(tr("Run"));
    bar->setObjectName(QStringLiteral("runToolBar"));
    bar->setMovable(false);
    bar->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
    bar->addAction(openAction_);
    bar->addAction(saveAction_);
    bar->addSeparator();
    for (QAction* a : {startAction_, pauseAction_, stopAction_, checkpointAction_}) bar->addAction(a);
    bar->addSeparator();
    bar->addAction(sweepAction_);
}

void MainWindow::rebuildRecentMenu()
{
    recentMenu_->clear();
    const QStringList recent = document_->recentProjects();
    for (const QString& path : recent) {
        QAction* a = recentMenu_->addAction(QDir::toNativeSeparators(path));
        connect(a, &QAction::triggered, this, [this, path] {
            if (!confirmReplaceProject()) return;
            if (!openProject(path)) QMessageBox::warning(this, tr("Cannot open project"), lastError_);
        });
    }
    if (recent.isEmpty()) recentMenu_->addAction(tr("(none)"))->setEnabled(false);
}

bool MainWindow::openProject(const QString& path, const std::vector<Override>& overrides)
{
    if (controller_->isRunning()) {
        showError(tr("Stop the current run before opening another project."));
        return false;
    }
    if (overrides.empty()) {
        QString error;
        if (!document_->open(path, &error)) {
            showError(error);
            return false;
        }
    } else {
        // --set overrides: the document holds the overridden project, unsaved (the title says
        // so, and a later Save writes the overrides into the file knowingly).
        try {
            document_->setConfig(load_project_file(path.toStdString(), overrides), QFileInfo(path).absoluteFilePath(),
                                 /*unsaved=*/true);
        } catch (const std::exception& e) {
            showError(QString::fromStdString(e.what()));
            return false;
        }
    }
    clearError();
    resetReadoutToProject();
    statusBar()->showMessage(tr("Loaded %1").arg(QDir::toNativeSeparators(path)), 5000);
    updateTitle();
    updateActions();
    return true;
}

void MainWindow::setProject(const ProjectConfig& config, const QString& path)
{
    document_->setConfig(config, path);
    clearError();
    resetReadoutToProject();
    updateTitle();
    updateActions();
}

void MainWindow::resetReadoutToProject()
{
    // The readout is the project's only while the Monitor shows no run: it showed "step 0 / 1,500"
    // of a project just opened beside the plots of the run followed, and nothing said which.
    if (controller_->isRunning() || feed_->followedRun() >= 0) return;
    statusWidget_->reset(document_->config().training.steps);
}

bool MainWindow::hasProject() const { return document_->hasProject(); }
QString MainWindow::projectPath() const { return document_->path(); }
qint64 MainWindow::lastStep() const { return statusWidget_->step(); }
LossPlot* MainWindow::lossPlot() const { return monitorPage_->lossPlot(); }
EventLogModel* MainWindow::eventLogModel() const { return monitorPage_->eventModel(); }

bool MainWindow::startTraining()
{
    if (!document_->hasProject()) {
        showError(tr("Open a project first."));
        return false;
    }
    if (controller_->isRunning() || sweepRunner_->isRunning()) return false;
    clearError();
    return startRun(document_->config());
}

bool MainWindow::startRun(const ProjectConfig& config, const QString& runName)
{
    if (!controller_->start(config, document_->path(), runName)) return false;
    feed_->setLocalTraining(true); // the Monitor shows this run, whatever it followed
    monitorPage_->reset(config.training.batch_size * config.model.context_length * config.training.grad_accum,
                        gemm_layer_names(config.model.n_layer));
    monitorPage_->setInitialLayerStates(LiveLayers::from_project(config));
    // The table's rows are the open project's; a sweep's run is another project (the swept
    // value), and every cell would read as a switch the run never made.
    if (!sweepRunner_->isRunning()) projectPage_->precisionModel()->setLiveLayers(&monitorPage_->history().liveLayers());
    // When training takes every core, each millisecond the GUI draws stalls a training thread
    // (bench/gui_monitor): draw within a small budget. With a core to spare, draw freely.
    const int cores = std::max(1, QThread::idealThreadCount());
    const bool sharesCores = config.training.threads <= 0 || config.training.threads >= cores;
    monitorPage_->setFrameBudget(sharesCores ? MonitorPage::kSharedCoreFrameBudget : MonitorPage::kSpareCoreFrameBudget);
    statusWidget_->reset(config.training.steps);
    projectPage_->setRunning(true, sweepRunner_->isRunning());
    showPage(Page::Monitor);
    statusBar()->showMessage(tr("Building the model…"));
    updateActions();
    return true;
}

bool MainWindow::startSweep(const QString& key, const QString& values, const QString& name)
{
    if (!document_->hasProject()) {
        showError(tr("Open a project first."));
        return false;
    }
    if (controller_->isRunning() || sweepRunner_->isRunning()) {
        showError(tr("Stop the current run before starting a sweep."));
        return false;
    }
    // A sweep tags and compares its runs through the window's store connection, which shows
    // the remote store's replica while connected: the sweep's runs are in the local store.
    if (remote_->mirror()) {
        showError(tr("Disconnect from the remote store before starting a sweep: its runs train into the local store."));
        return false;
    }
    std::vector<SweepRunPlan> plans;
    QString error;
    if (!SweepRunner::plan(document_->config(), key, values, &plans, &error) ||
        !sweepRunner_->start(std::move(plans), name.isEmpty() ? SweepRunner::defaultName() : name, &error)) {
        showError(error);
        return false;
    }
    updateActions();
    return true;
}

void MainWindow::chooseSweep()
{
    if (!document_->hasProject()) return;
    SweepDialog dialog(document_->config(), this);
    if (RunStore* store = store_->store()) {
        try {
            dialog.setTagsInUse(store->all_tags());
        } catch (const StoreError&) { // the note is a courtesy: the sweep itself says what fails
        }
    }
    if (dialog.exec() != QDialog::Accepted) return;
    if (!startSweep(dialog.key(), dialog.values(), dialog.sweepName()))
        QMessageBox::warning(this, tr("Cannot start the sweep"), lastError_);
}

void MainWindow::showComparison(const QList<qint64>& runIds)
{
    comparePage_->setRuns(std::vector<int64_t>(runIds.begin(), runIds.end()));
    showPage(Page::Compare);
}

void MainWindow::onSweepFinished(const QList<qint64>& runIds, bool stopped)
{
    runsPage_->refresh();
    runsPage_->selectRuns(std::vector<int64_t>(runIds.begin(), runIds.end()));
    const QStringList problems = sweepRunner_->problems();
    if (!problems.isEmpty()) showError(tr("Sweep %1: %2").arg(sweepRunner_->name(), problems.join(QStringLiteral("; "))));
    if (!runIds.isEmpty()) {
        showComparison(runIds);
        comparePage_->showTab(ComparePage::Tab::Summary);
    }
    statusBar()->showMessage(stopped ? tr("Sweep %1 stopped after %2")
                                           .arg(sweepRunner_->name(), count_text(runIds.size(), tr("run"), tr("runs")))
                                     : tr("Sweep %1 done: %2, tagged %3")
                                           .arg(sweepRunner_->name(), count_text(runIds.size(), tr("run"), tr("runs")),
                                                sweepRunner_->tag()));
    updateActions();
}

void MainWindow::stopTraining()
{
    sweepRunner_->stop();
    if (!controller_->isRunning()) return;
    controller_->stop();
    statusBar()->showMessage(tr("Stopping at the next step boundary…"));
}

void MainWindow::togglePause()
{
    if (!controller_->isRunning()) return;
    if (controller_->isPaused())
        controller_->resume();
    else
        controller_->pause();
}

bool MainWindow::checkpointNow()
{
    QString error;
    if (!controller_->requestCheckpoint(&error)) {
        showError(error);
        return false;
    }
    statusBar()->showMessage(tr("A checkpoint will be written at the next step boundary"), 5000);
    return true;
}

bool MainWindow::changeLayerFormats(const QString& pattern, const GemmFormats& formats, const QString& scaling)
{
    QString error;
    if (!controller_->setLayerFormats(pattern, formats, scaling, &error)) {
        showError(error);
        return false;
    }
    const QString recipe = scaling.isEmpty() ? QString() : tr(" with %1 scaling").arg(scaling);
    // The formats as the recipe computes them (e2m1 under nvfp4), as the event will say.
    const auto parsed = scaling.isEmpty() ? std::nullopt : parse_fp8_scaling(scaling.toStdString());
    const GemmFormats shown = parsed ? formats_as_computed(formats, *parsed) : formats;
    statusBar()->showMessage(tr("%1 → %2%3 at the next step boundary")
                                 .arg(pattern, QString::fromStdString(shown.describe()), recipe),
                             5000);
    return true;
}

void MainWindow::showPage(Page page) { pages_->setCurrentIndex(static_cast<int>(page)); }
MainWindow::Page MainWindow::currentPage() const { return static_cast<Page>(pages_->currentIndex()); }

bool MainWindow::connectRemote(const QUrl& server, const QString& token, const QByteArray& certificateSha256)
{
    if (sweepRunner_->isRunning()) {
        showError(tr("A sweep is running into the local store: connect to a remote store once it has ended."));
        return false;
    }
    QString error;
    if (!remote_->connectTo(server, token, &error, certificateSha256)) {
        showError(error);
        return false;
    }
    clearError();
    showPage(Page::Runs);
    return true;
}

void MainWindow::disconnectRemote()
{
    remote_->disconnectFromServer();
    statusBar()->showMessage(tr("Showing the local run store again"), 5000);
}

bool MainWindow::sendRemoteCommand(const QString& command)
{
    RemoteMirror* mirror = remote_->mirror();
    const qint64 run = mirror ? remote_->runningRun() : -1;
    if (run < 0) {
        showError(mirror ? tr("No remote run is training") : tr("Not connected to a remote store"));
        return false;
    }
    mirror->sendCommand(run, command);
    return true;
}

QString MainWindow::projectRecipe(const PrecisionConfig& precision, const QString& layer)
{
    return QString::fromLatin1(fp8_scaling_name(resolve_layer_recipe(precision, layer.toStdString()).scaling));
}

bool MainWindow::switchLayer(const QString& layer, const GemmFormats& formats, const QString& scaling)
{
    if (controller_->isRunning()) {
        if (sweepRunner_->isRunning()) {
            showError(tr("A sweep's runs differ only in the swept setting: its layers are not switched"));
            return false;
        }
        const QString recipe = scaling.isEmpty() ? projectRecipe(document_->config().precision, layer) : scaling;
        if (!changeLayerFormats(layer, formats, recipe)) return false;
        projectPage_->precisionModel()->noteSentToEngine(layer, formats); // a table edit builds on it
        return true;
    }
    RemoteMirror* mirror = remote_->mirror();
    const qint64 run = mirror ? remote_->runningRun() : -1;
    if (run < 0) {
        showError(mirror ? tr("No remote run is training")
                         : tr("No run is training here: a run started here (Run ▸ Start), or one on a server "
                              "(File ▸ Connect), can be switched"));
        return false;
    }
    if (feed_->followedRun() != run) {
        showError(tr("The Monitor shows run %1; the server trains run %2").arg(feed_->followedRun()).arg(run));
        return false;
    }
    QVariantMap fields{{QStringLiteral("pattern"), layer},
                       {QStringLiteral("forward"), QLatin1String(format_name(formats.forward))},
                       {QStringLiteral("dgrad"), QLatin1String(format_name(formats.dgrad))},
                       {QStringLiteral("wgrad"), QLatin1String(format_name(formats.wgrad))}};
    // The recipe of the project the server's run was started with, as stored with the run (a
    // run whose config cannot be read keeps the layer's recipe, as before).
    const auto& stored = feed_->follower()->run().precision;
    const QString recipe = scaling.isEmpty() && stored ? projectRecipe(*stored, layer) : scaling;
    if (!recipe.isEmpty()) fields.insert(QStringLiteral("scaling"), recipe);
    mirror->sendCommand(run, QStringLiteral("layer_formats"), fields);
    return true;
}

bool MainWindow::showRunInMonitor(qint64 runId)
{
    QString error;
    if (!feed_->showRun(runId, &error)) {
        showError(error);
        return false;
    }
    clearError();
    showPage(Page::Monitor);
    return true;
}

void MainWindow::chooseRemote()
{
    QSettings settings;
    ConnectDialog dialog(settings, this);
    if (dialog.exec() != QDialog::Accepted) return;
    dialog.remember();
    connectRemote(dialog.url(), dialog.token(), dialog.certificateSha256());
}

void MainWindow::closeEvent(QCloseEvent* event)
{
    if (isVisible() && !confirmClose()) {
        event->ignore();
        return;
    }
    // Ask now so the worker is already winding down while the window goes away.
    sweepRunner_->stop();
    controller_->stop();
    QMainWindow::closeEvent(event);
}

bool MainWindow::confirmClose()
{
    const bool sweeping = sweepRunner_->isRunning();
    const bool running = sweeping || controller_->isRunning();
    const bool dirty = document_->isDirty();
    if (!running && !dirty) return true;
    // A run stopped by quitting keeps its last step as a checkpoint; edits (a live precision
    // change is one) would be gone without a word.
    QStringList text;
    if (running)
        text << (sweeping ? tr("A sweep is in progress. Quitting stops its current run, recorded as stopped with a "
                               "checkpoint to resume from, and skips the rest.")
                          : tr("A run is in progress. Quitting stops it: it is recorded as stopped, with a checkpoint "
                               "of its last step to resume from."));
    if (dirty) text << tr("The project has unsaved changes. Save them?");
    QMessageBox box(QMessageBox::Question, running ? tr("Run in progress") : tr("Unsaved project"),
                    text.join(QStringLiteral("\n\n")), QMessageBox::Cancel, this);
    QAbstractButton* quit = nullptr;
    if (dirty) {
        box.addButton(QMessageBox::Save);
        box.addButton(QMessageBox::Discard);
        box.setDefaultButton(QMessageBox::Save);
    } else {
        quit = box.addButton(tr("Stop and Quit"), QMessageBox::DestructiveRole);
        box.setDefaultButton(QMessageBox::Cancel);
    }
    box.exec();
    if (quit) return box.clickedButton() == quit;
    return editsSavedOrDiscarded(box.standardButton(box.clickedButton()));
}

bool MainWindow::confirmReplaceProject()
{
    if (!document_->isDirty() || controller_->isRunning()) return true; // openProject refuses during a run
    QMessageBox box(QMessageBox::Question, tr("Unsaved project"),
                    tr("The project has unsaved changes. Save them before opening another project?"),
                    QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, this);
    box.setDefaultButton(QMessageBox::Save);
    box.exec();
    return editsSavedOrDiscarded(box.standardButton(box.clickedButton()));
}

bool MainWindow::editsSavedOrDiscarded(QMessageBox::StandardButton answer)
{
    if (answer == QMessageBox::Discard) return true;
    if (answer != QMessageBox::Save) return false; // Cancel, or the box was closed
    saveProject();
    // Not saved (the file could not be written, Save As was cancelled): the edits stay where
    // they are; the warning has said why.
    return !document_->isDirty();
}

namespace {

// The one local .json file a drag carries, or "" when it carries anything else.
QString dropped_project(const QMimeData* mime)
{
    if (mime == nullptr || !mime->hasUrls() || mime->urls().size() != 1) return {};
    const QUrl url = mime->urls().first();
    if (!url.isLocalFile() || !url.toLocalFile().endsWith(QLatin1String(".json"), Qt::CaseInsensitive)) return {};
    return url.toLocalFile();
}

} // namespace

void MainWindow::dragEnterEvent(QDragEnterEvent* event)
{
    if (!dropped_project(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event)
{
    const QString path = dropped_project(event->mimeData());
    if (path.isEmpty()) return;
    event->acceptProposedAction();
    // openProject() refuses while a run goes and shows why; the dragged file is not touched.
    if (confirmReplaceProject()) openProject(path);
}

void MainWindow::chooseProject()
{
    const QString start = document_->path().isEmpty() ? QString() : QFileInfo(document_->path()).absolutePath();
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open Project"), start, tr("Mantissa projects (*.json);;All files (*)"));
    if (path.isEmpty() || !confirmReplaceProject()) return;
    if (!openProject(path)) QMessageBox::warning(this, tr("Cannot open project"), lastError_);
}

void MainWindow::saveProject()
{
    if (document_->path().isEmpty()) {
        saveProjectAs();
        return;
    }
    QString error;
    bool saved = document_->save(&error);
    if (!saved && document_->savedOverAChange() &&
        QMessageBox::question(this, tr("Project changed on disk"),
                              error + QStringLiteral("\n\n") + tr("Replace the file with this window's project?"),
                              QMessageBox::Save | QMessageBox::Cancel, QMessageBox::Cancel) == QMessageBox::Save)
        saved = document_->save(&error, /*overwriteChangedFile=*/true);
    else if (!saved && document_->savedOverAChange())
        return; // kept as it is on disk, and here
    if (!saved)
        QMessageBox::warning(this, tr("Cannot save project"), error);
    else
        statusBar()->showMessage(tr("Saved %1").arg(QDir::toNativeSeparators(document_->path())), 5000);
    updateTitle();
}

void MainWindow::saveProjectAs()
{
    const QString path = QFileDialog::getSaveFileName(this, tr("Save Project As"), document_->path(),
                                                      tr("Mantissa projects (*.json)"));
    if (path.isEmpty()) return;
    QString error;
    if (!document_->saveAs(path, &error))
        QMessageBox::warning(this, tr("Cannot save project"), error);
    else
        statusBar()->showMessage(tr("Saved %1").arg(QDir::toNativeSeparators(path)), 5000);
    updateTitle();
}

void MainWindow::showError(const QString& message)
{
    lastError_ = message;
    errorLabel_->setText(message);
    errorLabel_->show();
    statusBar()->showMessage(message);
}

void MainWindow::clearError()
{
    lastError_.clear();
    errorLabel_->clear();
    errorLabel_->hide();
}

void MainWindow::onStarted(qint64 runId)
{
    statusBar()->showMessage(tr("Run %1 · store %2").arg(runId).arg(QDir::toNativeSeparators(controller_->storePath())));
    runsPage_->setTrainingRun(runId); // listed (running) while it trains, and read again while shown
}

void MainWindow::onDrained(const TelemetryBatch& batch)
{
    monitorPage_->ingest(batch);
    projectPage_->precisionModel()->liveLayersChanged();
    statusWidget_->update(batch);
}

void MainWindow::onFinished(RunStatus status)
{
    const qint64 runId = controller_->runId();
    const QString what = runId >= 0 ? tr("Run %1").arg(runId) : tr("Run");
    monitorPage_->renderNow(); // the last state, whatever the frame budget skipped
    // "stopped" or "failed" is not "done"
    statusWidget_->finish(status == RunStatus::Finished ? QString() : format_status(status));
    projectPage_->setRunning(false);
    projectPage_->precisionModel()->setLiveLayers(nullptr); // the table shows the project again
    runsPage_->setTrainingRun(-1); // the store closed the run before finished() came
    comparePage_->reload(); // a page comparing this run shows it finished, with its last points
    feed_->setLocalTraining(false);
    if (status != RunStatus::Failed)
        statusBar()->showMessage(tr("%1 %2 at step %3")
                                     .arg(what, format_status(status))
                                     .arg(controller_->lastSummary().steps_done));
    if (status != RunStatus::Failed && !controller_->lastError().isEmpty()) showError(controller_->lastError());
    updateActions();
}

void MainWindow::updateActions()
{
    const bool running = controller_->isRunning();
    openAction_->setEnabled(!running);
    saveAction_->setEnabled(document_->hasProject());
    saveAsAction_->setEnabled(document_->hasProject());
    const bool sweeping = sweepRunner_->isRunning();
    startAction_->setEnabled(!running && !sweeping && document_->hasProject());
    sweepAction_->setEnabled(!running && !sweeping && !remote_->mirror() && document_->hasProject());
    pauseAction_->setEnabled(running);
    pauseAction_->setText(controller_->isPaused() ? tr("&Resume") : tr("&Pause"));
    stopAction_->setEnabled(running);
    checkpointAction_->setEnabled(running);
    // During a run the settings are locked, and an undone precision edit would leave the run
    // on what the edit sent: undo waits for the run's end.
    undoAction_->setEnabled(!running && !sweeping && document_->canUndo());
    redoAction_->setEnabled(!running && !sweeping && document_->canRedo());
}

void MainWindow::updateTitle()
{
    if (!document_->hasProject()) {
        setWindowTitle(tr("Mantissa"));
        return;
    }
    const QString name = QString::fromStdString(document_->config().name);
    setWindowTitle(tr("%1%2 — Mantissa").arg(name, document_->isDirty() ? QStringLiteral(" *") : QString()));
}

} // namespace mantissa
