// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/event_log_model.h"

#include <algorithm>

namespace mantissa {

EventLogModel::EventLogModel(QObject* parent) : QAbstractTableModel(parent) {}

void EventLogModel::appendEvents(const std::vector<RunEvent>& events)
{
    if (events.empty()) return;
    // Only the newest maxRows_ of this batch can survive; skip the rest up front.
    const auto keep = std::min<size_t>(events.size(), static_cast<size_t>(maxRows_));
    const auto first = events.end() - static_cast<std::ptrdiff_t>(keep);
    trimTo(maxRows_ - static_cast<int>(keep));
    const int row = static_cast<int>(events_.size());
    beginInsertRows({}, row, row + static_cast<int>(keep) - 1);
    events_.insert(events_.end(), first, events.end());
    endInsertRows();
}

void EventLogModel::clear()
{
    if (events_.empty()) return;
    beginResetModel();
    events_.clear();
    endResetModel();
}

void EventLogModel::setMaxRows(int rows)
{
    maxRows_ = std::max(1, rows);
    trimTo(maxRows_);
}

void EventLogModel::trimTo(int rows)
{
    const int excess = static_cast<int>(events_.size()) - std::max(0, rows);
    if (excess <= 0) return;
    beginRemoveRows({}, 0, excess - 1);
    events_.erase(events_.begin(), events_.begin() + excess);
    endRemoveRows();
}

int EventLogModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(events_.size());
}

int EventLogModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant EventLogModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const RunEvent& e = events_[static_cast<size_t>(index.row())];
    const QString message = QString::fromStdString(e.message());
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case StepColumn:
            return QVariant::fromValue(static_cast<qlonglong>(e.step));
        case KindColumn:
            return QString::fromStdString(e.tag());
        // Samples span several lines; keep rows one line high and show the rest on hover.
        case MessageColumn:
            return QString(message).replace(QLatin1Char('\n'), QStringLiteral(" \u21b5 "));
        default:
            return {};
        }
    case Qt::ToolTipRole:
        return index.column() == MessageColumn ? message : QVariant();
    case Qt::TextAlignmentRole:
        return index.column() == StepColumn ? QVariant(static_cast<int>(Qt::AlignRight | Qt::AlignVCenter))
                                            : QVariant();
    default:
        return {};
    }
}

QVariant EventLogModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case StepColumn:
        return tr("Step");
    case KindColumn:
        return tr("Kind");
    case MessageColumn:
        return tr("Message");
    default:
        return {};
    }
}

} // namespace mantissa
