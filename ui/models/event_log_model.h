// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The run's events (start, evaluations' samples, pause/resume, stop, failure) as a table:
// Step, Kind, Message. Bounded, so a long run that samples at every evaluation does not
// grow the GUI's memory without limit; the run store keeps the full history.

#include <QAbstractTableModel>

#include <deque>
#include <vector>

#include "telemetry.h"

namespace mantissa {

class EventLogModel : public QAbstractTableModel {
    Q_OBJECT

public:
    enum Column { StepColumn = 0, KindColumn = 1, MessageColumn = 2, ColumnCount = 3 };
    static constexpr int kDefaultMaxRows = 5000;

    explicit EventLogModel(QObject* parent = nullptr);

    // Appends in order; drops the oldest rows beyond maxRows().
    void appendEvents(const std::vector<RunEvent>& events);
    void clear();
    void setMaxRows(int rows);
    int maxRows() const { return maxRows_; }
    const RunEvent& event(int row) const { return events_.at(static_cast<size_t>(row)); }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    void trimTo(int rows);

    std::deque<RunEvent> events_;
    int maxRows_ = kDefaultMaxRows;
};

} // namespace mantissa
