// SPDX-License-Identifier: GPL-3.0-or-later
#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenuBar>
#include <QMessageBox>
#include <QScrollBar>
#include <QSplitter>
#include <QStatusBar>
#include <QTableView>
#include <QToolButton>
#include <QTreeView>
#include <QVBoxLayout>

#include "event_log_model.h"
#include "loss_plot.h"
#include "project_tree_model.h"
#include "training_controller.h"

namespace mantissa {

namespace {

QToolButton* action_button(QAction* action, QWidget* parent)
{
    auto* button = new QToolButton(parent);
    button->setDefaultAction(action);
    button->setToolButtonStyle(Qt::ToolButtonTextOnly);
    button->setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
    button->setMinimumHeight(28);
    return button;
}

} // namespace

MainWindow::MainWindow(const QString& storePath, QWidget* parent)
    : QMainWindow(parent), controller_(new TrainingController(storePath, this)), treeModel_(new ProjectTreeModel(this)),
      eventModel_(new EventLogModel(this))
{
    setWindowTitle(tr("Mantissa"));

    openAction_ = new QAction(tr("&Open Project…"), this);
    openAction_->setShortcut(QKeySequence::Open);
    connect(openAction_, &QAction::triggered, this, &MainWindow::chooseProject);
    startAction_ = new QAction(tr("&Start"), this);
    startAction_->setShortcut(QKeySequence(Qt::Key_F5));
    connect(startAction_, &QAction::triggered, this, &MainWindow::startTraining);
    pauseAction_ = new QAction(tr("&Pause"), this);
    pauseAction_->setShortcut(QKeySequence(Qt::Key_F6));
    connect(pauseAction_, &QAction::triggered, this, &MainWindow::togglePause);
    stopAction_ = new QAction(tr("S&top"), this);
    stopAction_->setShortcut(QKeySequence(Qt::SHIFT | Qt::Key_F5));
    connect(stopAction_, &QAction::triggered, this, &MainWindow::stopTraining);
    buildMenus();

    auto* splitter = new QSplitter(Qt::Horizontal, this);
    splitter->addWidget(buildProjectPanel());
    splitter->addWidget(buildRunPanel());
    splitter->setStretchFactor(0, 0);
    splitter->setStretchFactor(1, 1);
    splitter->setSizes({400, 880});
    setCentralWidget(splitter);

    stepLabel_ = new QLabel(this);
    lossLabel_ = new QLabel(this);
    valLabel_ = new QLabel(this);
    speedLabel_ = new QLabel(this);
    for (QLabel* label : {stepLabel_, lossLabel_, valLabel_, speedLabel_}) {
        label->setMinimumWidth(110);
        label->setObjectName(QStringLiteral("statusField"));
        statusBar()->addPermanentWidget(label);
    }

    connect(controller_, &TrainingController::started, this, &MainWindow::onStarted);
    connect(controller_, &TrainingController::drained, this, &MainWindow::onDrained);
    connect(controller_, &TrainingController::failed, this, &MainWindow::showError);
    connect(controller_, &TrainingController::finished, this, &MainWindow::onFinished);
    connect(controller_, &TrainingController::pausedChanged, this, &MainWindow::updateActions);

    updateActions();
    updateStatusLabels();
    statusBar()->showMessage(tr("Open a project to start"));
    resize(1280, 800);
}

// The controller is a child: QObject's destructor stops the run and joins the worker.
MainWindow::~MainWindow() = default;

void MainWindow::buildMenus()
{
    QMenu* file = menuBar()->addMenu(tr("&File"));
    file->addAction(openAction_);
    file->addSeparator();
    auto* quit = new QAction(tr("&Quit"), this);
    quit->setShortcut(QKeySequence::Quit);
    connect(quit, &QAction::triggered, this, &QWidget::close);
    file->addAction(quit);

    QMenu* run = menuBar()->addMenu(tr("&Run"));
    run->addAction(startAction_);
    run->addAction(pauseAction_);
    run->addAction(stopAction_);
}

QWidget* MainWindow::buildProjectPanel()
{
    auto* panel = new QWidget(this);
    auto* layout = new QVBoxLayout(panel);
    layout->setContentsMargins(8, 8, 4, 8);

    projectLabel_ = new QLabel(tr("No project"), panel);
    QFont bold = projectLabel_->font();
    bold.setBold(true);
    projectLabel_->setFont(bold);
    projectLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(projectLabel_);

    treeView_ = new QTreeView(panel);
    treeView_->setModel(treeModel_);
    treeView_->setAlternatingRowColors(true);
    treeView_->setUniformRowHeights(true);
    treeView_->header()->setSectionResizeMode(ProjectTreeModel::SettingColumn, QHeaderView::ResizeToContents);
    treeView_->header()->setStretchLastSection(true);
    layout->addWidget(treeView_, 1);

    auto* buttons = new QHBoxLayout;
    for (QAction* action : {openAction_, startAction_, pauseAction_, stopAction_})
        buttons->addWidget(action_button(action, panel));
    layout->addLayout(buttons);

    errorLabel_ = new QLabel(panel);
    errorLabel_->setObjectName(QStringLiteral("errorLabel"));
    errorLabel_->setWordWrap(true);
    errorLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    errorLabel_->setStyleSheet(QStringLiteral("QLabel { color: #b00020; background: #fdecee;"
                                              " border: 1px solid #f5c2c7; border-radius: 3px; padding: 6px; }"));
    errorLabel_->hide();
    layout->addWidget(errorLabel_);

    panel->setMinimumWidth(280);
    return panel;
}

QWidget* MainWindow::buildRunPanel()
{
    auto* splitter = new QSplitter(Qt::Vertical, this);

    auto* top = new QWidget(splitter);
    auto* topLayout = new QVBoxLayout(top);
    topLayout->setContentsMargins(4, 8, 8, 0);
    auto* header = new QHBoxLayout;
    runLabel_ = new QLabel(tr("No run yet"), top);
    header->addWidget(runLabel_, 1);
    logScaleBox_ = new QCheckBox(tr("Log scale"), top);
    header->addWidget(logScaleBox_);
    topLayout->addLayout(header);
    plot_ = new LossPlot(top);
    plot_->setToolTip(tr("Drag to pan, wheel to zoom, double-click to follow the run again"));
    topLayout->addWidget(plot_, 1);
    connect(logScaleBox_, &QCheckBox::toggled, plot_, &LossPlot::setLogScale);

    eventView_ = new QTableView(splitter);
    eventView_->setModel(eventModel_);
    eventView_->verticalHeader()->hide();
    eventView_->verticalHeader()->setDefaultSectionSize(eventView_->fontMetrics().height() + 6);
    eventView_->setSelectionBehavior(QAbstractItemView::SelectRows);
    eventView_->setWordWrap(false);
    eventView_->setAlternatingRowColors(true);
    eventView_->horizontalHeader()->setStretchLastSection(true);
    eventView_->setColumnWidth(EventLogModel::StepColumn, 70);
    eventView_->setColumnWidth(EventLogModel::KindColumn, 120);

    splitter->addWidget(top);
    splitter->addWidget(eventView_);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 1);
    splitter->setSizes({560, 180});
    return splitter;
}

bool MainWindow::openProject(const QString& path, const std::vector<Override>& overrides)
{
    if (controller_->isRunning()) {
        showError(tr("Stop the current run before opening another project."));
        return false;
    }
    try {
        ProjectConfig config = load_project_file(path.toStdString(), overrides);
        setProject(config, QFileInfo(path).absoluteFilePath());
        statusBar()->showMessage(tr("Loaded %1").arg(QDir::toNativeSeparators(path)), 5000);
        return true;
    } catch (const ConfigError& e) {
        showError(QString::fromStdString(e.what()));
        return false;
    } catch (const std::exception& e) { // a parser bug must not take the workbench down
        showError(tr("%1: %2").arg(path, QString::fromStdString(e.what())));
        return false;
    }
}

void MainWindow::setProject(const ProjectConfig& config, const QString& path)
{
    project_ = config;
    projectPath_ = path;
    treeModel_->setConfig(config);
    treeView_->expandToDepth(0); // sections open, nested groups (precision.fp8, ...) folded
    const QString name = QString::fromStdString(config.name);
    projectLabel_->setText(path.isEmpty() ? name : tr("%1  (%2)").arg(name, QFileInfo(path).fileName()));
    projectLabel_->setToolTip(path);
    setWindowTitle(tr("Mantissa — %1").arg(name));
    clearError();
    updateActions();
}

bool MainWindow::startTraining()
{
    if (!project_) {
        showError(tr("Open a project first."));
        return false;
    }
    if (controller_->isRunning()) return false;
    clearError();
    plot_->clear();
    eventModel_->clear();
    lastStep_ = 0;
    lastTrainLoss_ = lastValLoss_ = -1.0;
    tokensPerS_ = stepTimeMs_ = 0.0;
    if (!controller_->start(*project_, projectPath_)) return false;
    runLabel_->setText(tr("Starting…"));
    statusBar()->showMessage(tr("Building the model…"));
    updateActions();
    updateStatusLabels();
    return true;
}

void MainWindow::stopTraining()
{
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

void MainWindow::closeEvent(QCloseEvent* event)
{
    // Ask now so the worker is already winding down while the window goes away.
    controller_->stop();
    QMainWindow::closeEvent(event);
}

void MainWindow::chooseProject()
{
    const QString start = projectPath_.isEmpty() ? QString() : QFileInfo(projectPath_).absolutePath();
    const QString path =
        QFileDialog::getOpenFileName(this, tr("Open Project"), start, tr("Mantissa projects (*.json);;All files (*)"));
    if (path.isEmpty()) return;
    if (!openProject(path)) QMessageBox::warning(this, tr("Cannot open project"), lastError_);
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
    runLabel_->setText(tr("Run %1 · %2 · store %3")
                           .arg(QString::number(runId),
                                QString::fromStdString(project_ ? project_->name : std::string()),
                                QDir::toNativeSeparators(controller_->storePath())));
    statusBar()->showMessage(tr("Training…"));
}

void MainWindow::onDrained(const TelemetryBatch& batch)
{
    plot_->appendBatch(batch.steps, batch.evals);

    const QScrollBar* scroll = eventView_->verticalScrollBar();
    const bool atBottom = scroll->value() == scroll->maximum();
    eventModel_->appendEvents(batch.events);
    if (atBottom && !batch.events.empty()) eventView_->scrollToBottom();

    if (!batch.steps.empty()) {
        const StepMetrics& last = batch.steps.back();
        lastStep_ = last.step;
        lastTrainLoss_ = last.train_loss;
        // Averaged over the batch: single steps jitter too much to read at 25 Hz.
        double tokens = 0.0, ms = 0.0;
        for (const auto& m : batch.steps) {
            tokens += m.tokens_per_s;
            ms += m.step_time_ms;
        }
        tokensPerS_ = tokens / static_cast<double>(batch.steps.size());
        stepTimeMs_ = ms / static_cast<double>(batch.steps.size());
    }
    if (!batch.evals.empty()) lastValLoss_ = batch.evals.back().val_loss;
    updateStatusLabels();
}

void MainWindow::onFinished(const QString& status)
{
    const qint64 runId = controller_->runId();
    const QString what = runId >= 0 ? tr("Run %1").arg(runId) : tr("Run");
    runLabel_->setText(tr("%1 %2 after %3 steps").arg(what, status).arg(controller_->lastSummary().steps_done));
    if (status != QLatin1String("failed"))
        statusBar()->showMessage(tr("%1 %2 at step %3").arg(what, status).arg(controller_->lastSummary().steps_done));
    updateActions();
}

void MainWindow::updateActions()
{
    const bool running = controller_->isRunning();
    openAction_->setEnabled(!running);
    startAction_->setEnabled(!running && project_.has_value());
    pauseAction_->setEnabled(running);
    pauseAction_->setText(controller_->isPaused() ? tr("&Resume") : tr("&Pause"));
    stopAction_->setEnabled(running);
}

void MainWindow::updateStatusLabels()
{
    const qint64 total = project_ ? project_->training.steps : 0;
    stepLabel_->setText(tr("step %L1 / %L2").arg(lastStep_).arg(total));
    lossLabel_->setText(lastTrainLoss_ >= 0 ? tr("loss %1").arg(lastTrainLoss_, 0, 'f', 4) : tr("loss –"));
    valLabel_->setText(lastValLoss_ >= 0 ? tr("val %1").arg(lastValLoss_, 0, 'f', 4) : tr("val –"));
    speedLabel_->setText(tokensPerS_ > 0
                             ? tr("%L1 tokens/s · %2 ms/step").arg(tokensPerS_, 0, 'f', 0).arg(stepTimeMs_, 0, 'f', 1)
                             : tr("– tokens/s"));
}

} // namespace mantissa
