// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The Runs page's table: one row per saved run, filled in one go from
// RunStore::list_run_summaries (three queries however many runs), so data() never touches
// the store. DisplayRole is for reading (human units), Qt::UserRole the exact value to sort
// by, kCsvExportRole the exact value as text. The name cell is editable: an edit is handed
// on as renameRequested() and shows at once.

#include <QAbstractTableModel>

#include <vector>

#include "run_summary.h"

namespace mantissa {

class RunListModel : public QAbstractTableModel {
    Q_OBJECT

public:
    enum Column {
        Id,
        Status,
        Created,
        Name,
        Tags,
        Recipe,
        Steps,
        FinalVal,
        BestVal,
        TokensPerS,
        Skipped,
        PeakMemory,
        ColumnCount
    };
    static constexpr int SortRole = Qt::UserRole;
    static constexpr int RunIdRole = Qt::UserRole + 1;

    explicit RunListModel(QObject* parent = nullptr);

    // The same runs as before (a refresh while one trains) change their cells in place: a reset
    // would close an open editor and move the view's current row.
    void setRuns(std::vector<RunSummaryRow> runs);
    // The run this window trains is paused: its status reads "paused" (the store says running).
    void setPausedRun(int64_t id);
    // One run's row read again (false when it is not listed): the rest stay as they were.
    bool updateRun(RunSummaryRow run);
    const std::vector<RunSummaryRow>& runs() const { return runs_; }
    const RunSummaryRow& run(int row) const { return runs_.at(static_cast<size_t>(row)); }
    int rowOfRun(int64_t id) const; // -1 if not listed

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

signals:
    void renameRequested(qint64 runId, const QString& name);

private:
    std::vector<RunSummaryRow> runs_;
    int64_t pausedRun_ = -1;
};

} // namespace mantissa
