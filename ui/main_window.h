// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The workbench window. It composes the pages, owns the run actions and routes signals
// between them; the pages do their own work: ProjectPage edits the project, MonitorPage
// shows the run, TrainingController runs it, RunStatusWidget reads it out.

#include <QMainWindow>
#include <QString>

#include <vector>

#include "project_config.h"

class QAction;
class QCloseEvent;
class QLabel;
class QMenu;
class QTabWidget;

namespace mantissa {

class EventLogModel;
class LossPlot;
class MonitorPage;
class ProjectDocument;
class ProjectPage;
class RunStatusWidget;
class TrainingController;
struct GemmFormats;
struct TelemetryBatch;

class MainWindow : public QMainWindow {
    Q_OBJECT

public:
    enum class Page { Project = 0, Monitor = 1 };

    // `storePath` empty: the controller's default store.
    explicit MainWindow(const QString& storePath = {}, QWidget* parent = nullptr);
    ~MainWindow() override;

    // Loads and validates a project file. On failure the previous project stays, the error
    // shows in the status bar and lastError() holds it; no dialog opens, so this is safe to
    // call headless. Refused while a run is going.
    bool openProject(const QString& path, const std::vector<Override>& overrides = {});
    // A project built in code (tests, scripts); `path` is only recorded with the run.
    void setProject(const ProjectConfig& config, const QString& path = {});
    bool hasProject() const;
    QString projectPath() const;

    bool startTraining();
    void stopTraining();
    void togglePause();
    bool checkpointNow();
    // Forwards a precision change to the running trainer (the project page's table does this).
    bool changeLayerFormats(const QString& pattern, const GemmFormats& formats);

    void showPage(Page page);
    Page currentPage() const;

    QString lastError() const { return lastError_; }
    qint64 lastStep() const;
    TrainingController* controller() const { return controller_; }
    ProjectDocument* document() const { return document_; }
    ProjectPage* projectPage() const { return projectPage_; }
    MonitorPage* monitorPage() const { return monitorPage_; }
    RunStatusWidget* statusWidget() const { return statusWidget_; }
    LossPlot* lossPlot() const;
    EventLogModel* eventLogModel() const;

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void createActions();
    void buildMenus();
    void buildToolBar();
    void rebuildRecentMenu();

    void chooseProject(); // File > Open: the interactive path, with a dialog on failure
    void saveProject();
    void saveProjectAs();
    void showError(const QString& message);
    void clearError();
    void onStarted(qint64 runId);
    void onDrained(const TelemetryBatch& batch);
    void onFinished(const QString& status);
    void updateActions();
    void updateTitle();

    TrainingController* controller_ = nullptr;
    ProjectDocument* document_ = nullptr;
    QTabWidget* pages_ = nullptr;
    ProjectPage* projectPage_ = nullptr;
    MonitorPage* monitorPage_ = nullptr;
    RunStatusWidget* statusWidget_ = nullptr;
    QMenu* recentMenu_ = nullptr;
    QLabel* errorLabel_ = nullptr;

    QAction* openAction_ = nullptr;
    QAction* saveAction_ = nullptr;
    QAction* saveAsAction_ = nullptr;
    QAction* startAction_ = nullptr;
    QAction* pauseAction_ = nullptr;
    QAction* stopAction_ = nullptr;
    QAction* checkpointAction_ = nullptr;
    QAction* projectPageAction_ = nullptr;
    QAction* monitorPageAction_ = nullptr;

    QString lastError_;
};

} // namespace mantissa
