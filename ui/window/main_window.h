// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The workbench window. It composes the pages, owns the run actions and routes signals
// between them; the pages do their own work: ProjectPage edits the project, MonitorPage
// shows the run, TrainingController runs it, RunStatusWidget reads it out, RunsPage lists
// the store's runs, ComparePage sets runs side by side, SweepRunner queues a sweep.

#include <QList>
#include <QMainWindow>
#include <QMessageBox>
#include <QString>

#include <vector>

#include "project_config.h"
#include "run_status.h"

class QAction;
class QCloseEvent;
class QDragEnterEvent;
class QDropEvent;
class QLabel;
class QMenu;
class QTabWidget;
class QUrl;

namespace mantissa {

class ComparePage;
class EventLogModel;
class LossPlot;
class MonitorFeed;
class MonitorPage;
class ProjectDocument;
class ProjectPage;
class RemoteConnector;
class RemoteStatusLabel;
class RunStatusWidget;
class RunsPage;
class StoreConnection;
class SweepRunner;
class TrainingController;
struct GemmFormats;
struct TelemetryBatch;

class MainWindow : public QMainWindow {
    Q_OBJECT

public:
    enum class Page { Project = 0, Monitor = 1, Runs = 2, Compare = 3 };

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
    void stopTraining(); // also ends a sweep: the current run stops, the rest are skipped
    // Runs the project once per value of `key` (comma-separated `values`), one after another;
    // validated first (nothing runs on an error, see lastError()). The Compare page opens
    // with the runs and their summary when the last one is done.
    bool startSweep(const QString& key, const QString& values, const QString& name = {});
    void togglePause();
    bool checkpointNow();
    // Forwards a precision change to the running trainer (the project page's table does this).
    // `scaling`: a recipe's name, or "" to keep the layers' own.
    bool changeLayerFormats(const QString& pattern, const GemmFormats& formats, const QString& scaling = {});

    // File > Connect…: mirrors a remote run store (docs/REMOTE.md) and shows it on the Runs
    // and Compare pages until disconnectRemote(). False with lastError() when the replica
    // cannot be opened; connection trouble shows in the status bar and is retried.
    bool connectRemote(const QUrl& server, const QString& token, const QByteArray& certificateSha256 = {});
    void disconnectRemote();
    // Run > Remote: pause, resume, stop or checkpoint the remote run that is training
    // (RemoteConnector::runningRun); the server's answer shows in the status bar.
    bool sendRemoteCommand(const QString& command);
    // The Monitor's layer menu: switches `layer` of the run the Monitor shows, trained here
    // (as the precision table does, but the project stays as it is) or on the connected server
    // (its `layer_formats` command). `scaling` "" (a 16- or 32-bit choice) gives the layer its
    // project's recipe back: this window's project, or the one stored with the server's run.
    // The engine names no recipe of a layer without FP8 GEMMs, so one kept from an earlier
    // switch would come back unseen with the layer's next FP8 format.
    bool switchLayer(const QString& layer, const GemmFormats& formats, const QString& scaling);
    RemoteConnector* remoteConnector() const { return remote_; }
    // Runs ▸ Show in Monitor: the Monitor follows that run of the store the pages show (live
    // while it runs). Refused while a run trains in this window; the reason in lastError().
    bool showRunInMonitor(qint64 runId);
    MonitorFeed* monitorFeed() const { return feed_; }

    void showPage(Page page);
    Page currentPage() const;

    QString lastError() const { return lastError_; }
    qint64 lastStep() const;
    TrainingController* controller() const { return controller_; }
    ProjectDocument* document() const { return document_; }
    ProjectPage* projectPage() const { return projectPage_; }
    MonitorPage* monitorPage() const { return monitorPage_; }
    RunsPage* runsPage() const { return runsPage_; }
    ComparePage* comparePage() const { return comparePage_; }
    SweepRunner* sweepRunner() const { return sweepRunner_; }
    StoreConnection* storeConnection() const { return store_; }
    QAction* undoAction() const { return undoAction_; }
    QAction* redoAction() const { return redoAction_; }
    RunStatusWidget* statusWidget() const { return statusWidget_; }
    LossPlot* lossPlot() const;
    EventLogModel* eventLogModel() const;

protected:
    void closeEvent(QCloseEvent* event) override;
    // A project file dropped on the window opens as if chosen in File > Open.
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;

private:
    // The FP8 scaling recipe `precision` gives `layer` ("delayed", "nvfp4", ...).
    static QString projectRecipe(const PrecisionConfig& precision, const QString& layer);
    // Asks before a close would stop a run or drop unsaved edits; true when the window may close.
    bool confirmClose();
    // Before another project replaces this one (Open, Open Recent, a drop): asks about unsaved
    // edits; true when they were saved or the user chose to drop them.
    bool confirmReplaceProject();
    // The answer to a Save / Discard / Cancel question: true when nothing unsaved is left to lose.
    bool editsSavedOrDiscarded(QMessageBox::StandardButton answer);
    void createActions();
    void buildMenus();
    void buildToolBar();
    void rebuildRecentMenu();

    void chooseProject(); // File > Open: the interactive path, with a dialog on failure
    void chooseSweep();   // Run > Sweep…: the dialog
    void chooseRemote();  // File > Connect…: the dialog
    bool startRun(const ProjectConfig& config, const QString& runName = {});
    void showComparison(const QList<qint64>& runIds);
    void onSweepFinished(const QList<qint64>& runIds, bool stopped);
    void saveProject();
    void saveProjectAs();
    void showError(const QString& message);
    void clearError();
    void resetReadoutToProject();
    void onStarted(qint64 runId);
    void onDrained(const TelemetryBatch& batch);
    void onFinished(RunStatus status);
    void updateActions();
    void updateTitle();

    TrainingController* controller_ = nullptr;
    ProjectDocument* document_ = nullptr;
    QTabWidget* pages_ = nullptr;
    ProjectPage* projectPage_ = nullptr;
    MonitorPage* monitorPage_ = nullptr;
    RunsPage* runsPage_ = nullptr;
    ComparePage* comparePage_ = nullptr;
    StoreConnection* store_ = nullptr;
    RemoteConnector* remote_ = nullptr;
    MonitorFeed* feed_ = nullptr; // what the Monitor shows when no run trains here
    RemoteStatusLabel* remoteStatus_ = nullptr;
    QAction* disconnectAction_ = nullptr;
    QMenu* remoteMenu_ = nullptr;
    SweepRunner* sweepRunner_ = nullptr;
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
    QAction* runsPageAction_ = nullptr;
    QAction* comparePageAction_ = nullptr;
    QAction* sweepAction_ = nullptr;
    QAction* undoAction_ = nullptr;
    QAction* redoAction_ = nullptr;

    QString lastError_;
};

} // namespace mantissa
