// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The workbench window. It only composes widgets and routes signals: training lives in
// TrainingController, the curve in LossPlot, the tables in their models.

#include <QMainWindow>
#include <QString>

#include <optional>
#include <vector>

#include "project_config.h"
#include "snapshot_buffer.h"

class QAction;
class QCheckBox;
class QCloseEvent;
class QLabel;
class QTableView;
class QTreeView;

namespace mantissa {

class EventLogModel;
class LossPlot;
class ProjectTreeModel;
class TrainingController;

class MainWindow : public QMainWindow {
    Q_OBJECT

public:
    // `storePath` empty: the controller's default store.
    explicit MainWindow(const QString& storePath = {}, QWidget* parent = nullptr);
    ~MainWindow() override;

    // Loads and validates a project file. On failure the previous project stays, the error
    // shows in the status bar and the side panel, and lastError() holds it; no dialog opens,
    // so this is safe to call headless. Refused while a run is going.
    bool openProject(const QString& path, const std::vector<Override>& overrides = {});
    // A project built in code (tests, scripts); `path` is only recorded with the run.
    void setProject(const ProjectConfig& config, const QString& path = {});
    bool hasProject() const { return project_.has_value(); }
    QString projectPath() const { return projectPath_; }

    bool startTraining();
    void stopTraining();
    void togglePause();

    QString lastError() const { return lastError_; }
    qint64 lastStep() const { return lastStep_; }
    TrainingController* controller() const { return controller_; }
    LossPlot* lossPlot() const { return plot_; }
    ProjectTreeModel* projectTreeModel() const { return treeModel_; }
    EventLogModel* eventLogModel() const { return eventModel_; }

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    QWidget* buildProjectPanel();
    QWidget* buildRunPanel();
    void buildMenus();

    void chooseProject(); // File > Open Project...: the interactive path, with a dialog on failure
    void showError(const QString& message);
    void clearError();
    void onStarted(qint64 runId);
    void onDrained(const TelemetryBatch& batch);
    void onFinished(const QString& status);
    void updateActions();
    void updateStatusLabels();

    TrainingController* controller_ = nullptr;
    ProjectTreeModel* treeModel_ = nullptr;
    EventLogModel* eventModel_ = nullptr;
    LossPlot* plot_ = nullptr;

    QTreeView* treeView_ = nullptr;
    QTableView* eventView_ = nullptr;
    QLabel* projectLabel_ = nullptr;
    QLabel* errorLabel_ = nullptr;
    QLabel* runLabel_ = nullptr;
    QCheckBox* logScaleBox_ = nullptr;
    QLabel* stepLabel_ = nullptr;
    QLabel* lossLabel_ = nullptr;
    QLabel* valLabel_ = nullptr;
    QLabel* speedLabel_ = nullptr;

    QAction* openAction_ = nullptr;
    QAction* startAction_ = nullptr;
    QAction* pauseAction_ = nullptr;
    QAction* stopAction_ = nullptr;

    std::optional<ProjectConfig> project_;
    QString projectPath_;
    QString lastError_;
    qint64 lastStep_ = 0;
    double lastTrainLoss_ = -1.0;
    double lastValLoss_ = -1.0;
    double tokensPerS_ = 0.0;
    double stepTimeMs_ = 0.0;
};

} // namespace mantissa
