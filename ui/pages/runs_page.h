// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The Runs page: every run in the store, filterable and sortable, with rename (edit the
// name cell), tag / untag, delete, CSV export and "compare these". Every action has a
// headless method (tests, scripts) that reports failures through its return value and
// lastError(); the interactive path adds the dialogs. Reads go through
// RunStore::list_run_summaries only, so hundreds of runs list in a few milliseconds.

#include <QList>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <cstdint>
#include <vector>

#include "run_store.h"

class QAction;
class QLabel;
class QLineEdit;
class QTableView;
class QTimer;

namespace mantissa {

class RunFilterProxyModel;
class RunListModel;
class StoreConnection;

class RunsPage : public QWidget {
    Q_OBJECT

public:
    explicit RunsPage(StoreConnection* store, QWidget* parent = nullptr);

    // Reloads the list, keeping the selection. False (message in lastError() and on the page)
    // when the store cannot be read; a store that does not exist yet lists nothing and is
    // not an error.
    bool refresh();

    // The run this window trains (-1: none). While there is one the page reads that run's row
    // again every second it is shown, and every run when it is shown: it listed the run as it
    // was at its start (step 0, its first evaluation) until the run ended or Refresh was pressed.
    void setTrainingRun(qint64 runId);
    void setTrainingRunPaused(bool paused);
    void refreshTrainingRun(); // that run's row alone, from the store

    void setFilterText(const QString& text);
    // Selected runs in the table's order (as sorted).
    std::vector<int64_t> selectedRunIds() const;
    void selectRuns(const std::vector<int64_t>& ids);

    // Headless actions: they change the store, refresh and announce the change.
    bool renameRun(int64_t id, const QString& name);
    bool deleteRuns(const std::vector<int64_t>& ids); // refuses runs still running
    bool addTags(const std::vector<int64_t>& ids, const QStringList& tags);
    bool removeTags(const std::vector<int64_t>& ids, const QStringList& tags);
    bool exportCsv(const QString& path); // the rows as filtered and sorted
    // Asks for Compare with the selection (2+ runs; 1 is shown too). False when empty.
    bool compareSelected();
    // Asks for the Monitor to show the (first) selected run. False when none is selected.
    bool showSelectedInMonitor();

    QString lastError() const { return lastError_; }
    QString statusText() const;

    RunListModel* model() const { return model_; }
    RunFilterProxyModel* proxy() const { return proxy_; }
    QTableView* view() const { return view_; }
    QLineEdit* filterEdit() const { return filterEdit_; }

signals:
    void compareRequested(const QList<qint64>& runIds);
    // A run was double-clicked: show it alone.
    void openRunRequested(qint64 runId);
    // Show in Monitor: the Monitor follows the run (live while it runs).
    void showInMonitorRequested(qint64 runId);

protected:
    void showEvent(QShowEvent* event) override;
    bool eventFilter(QObject* watched, QEvent* event) override; // the table's resizes: fitNameColumn

private:
    // The Name column takes the width the others leave, but never less than a name's worth: a
    // stretched section under 1600 px cut every name to "add…" while an empty Tags column kept
    // 190 px. Below that the table scrolls sideways.
    void fitNameColumn();
    void buildActions();
    void updateActions();
    void updateStatus();
    bool fail(const QString& message);
    void succeed();
    void note(const QString& message); // not an error: shown, lastError() stays empty
    void showContextMenu(const QPoint& pos);

    // The interactive paths.
    void confirmDelete();
    void askTags();
    void askUntag();
    void askExport();
    void editName();

    StoreConnection* store_ = nullptr;
    RunListModel* model_ = nullptr;
    // Each run's tokens/s values as last read: a refresh (every second while a run trains or
    // a remote one is mirrored) reads only the rows added since.
    TokensMedianCache medianCache_;
    RunFilterProxyModel* proxy_ = nullptr;
    QTableView* view_ = nullptr;
    QTimer* refreshAfterEdit_ = nullptr; // a refresh put off while a run's name is edited
    QTimer* trainingTick_ = nullptr;     // while this window trains a run
    qint64 trainingRun_ = -1;
    QLineEdit* filterEdit_ = nullptr;
    QLabel* countLabel_ = nullptr;
    QLabel* messageLabel_ = nullptr;

    QAction* refreshAction_ = nullptr;
    QAction* compareAction_ = nullptr;
    QAction* monitorAction_ = nullptr;
    QAction* renameAction_ = nullptr;
    QAction* tagAction_ = nullptr;
    QAction* untagAction_ = nullptr;
    QAction* deleteAction_ = nullptr;
    QAction* exportAction_ = nullptr;

    QString lastError_;
    QString emptyReason_; // why nothing is listed (no store yet)
};

} // namespace mantissa
