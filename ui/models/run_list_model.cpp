// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/run_list_model.h"

#include <QBrush>
#include <QColor>
#include <QFont>
#include <QStringList>

#include <algorithm>
#include <cmath>

#include "common/run_format.h"
#include "common/table_export.h"

namespace mantissa {

namespace {

QString tags_text(const RunSummaryRow& r)
{
    QStringList tags;
    for (const auto& t : r.tags) tags << QString::fromStdString(t);
    return tags.join(QStringLiteral(", "));
}

QString exact(double v) { return std::isfinite(v) ? QString::number(v, 'g', 17) : QString(); }

// NaN sorts last whichever way: a huge sentinel ascending is good enough for a table.
QVariant sort_value(double v) { return std::isfinite(v) ? v : std::numeric_limits<double>::max(); }

QColor status_color(RunStatus status)
{
    switch (status) {
    case RunStatus::Finished: return QColor(0, 110, 50);
    case RunStatus::Running: return QColor(0, 90, 180);
    case RunStatus::Failed:
    case RunStatus::Interrupted: return QColor(170, 20, 30);
    case RunStatus::Stopped: return QColor(160, 100, 0);
    }
    return {};
}

} // namespace

RunListModel::RunListModel(QObject* parent) : QAbstractTableModel(parent) {}

void RunListModel::setRuns(std::vector<RunSummaryRow> runs)
{
    const bool same_runs = std::equal(runs.begin(), runs.end(), runs_.begin(), runs_.end(),
                                      [](const RunSummaryRow& a, const RunSummaryRow& b) { return a.id == b.id; });
    if (same_runs && !runs_.empty()) {
        runs_ = std::move(runs);
        emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
        return;
    }
    beginResetModel();
    runs_ = std::move(runs);
    endResetModel();
}

bool RunListModel::updateRun(RunSummaryRow run)
{
    const int row = rowOfRun(run.id);
    if (row < 0) return false;
    runs_[static_cast<size_t>(row)] = std::move(run);
    emit dataChanged(index(row, 0), index(row, ColumnCount - 1));
    return true;
}

void RunListModel::setPausedRun(int64_t id)
{
    if (id == pausedRun_) return;
    const int rows[] = {rowOfRun(pausedRun_), rowOfRun(id)};
    pausedRun_ = id;
    for (const int row : rows)
        if (row >= 0) emit dataChanged(index(row, Status), index(row, Status));
}

int RunListModel::rowOfRun(int64_t id) const
{
    for (size_t i = 0; i < runs_.size(); ++i)
        if (runs_[i].id == id) return static_cast<int>(i);
    return -1;
}

int RunListModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}

int RunListModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant RunListModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const RunSummaryRow& r = runs_[static_cast<size_t>(index.row())];
    const int column = index.column();
    if (role == RunIdRole) return QVariant::fromValue<qint64>(r.id);

    if (role == Qt::DisplayRole || role == Qt::EditRole) {
        switch (column) {
        case Id: return QVariant::fromValue<qint64>(r.id);
        case Status:
            return r.id == pausedRun_ && r.status == RunStatus::Running ? tr("paused") : format_status(r.status);
        case Created: return format_created(QString::fromStdString(r.created_at));
        case Name: return QString::fromStdString(r.name);
        case Tags: return tags_text(r);
        case Recipe: return QString::fromStdString(r.recipe);
        case Steps: return QVariant::fromValue<qint64>(r.steps_done);
        case FinalVal: return format_loss(r.final_val_loss, r.final_val_step >= 0);
        case BestVal: return format_loss(r.best_val_loss, r.best_val_step >= 0);
        case TokensPerS: return format_rate(r.median_tokens_per_s);
        case Skipped: return QVariant::fromValue<qint64>(r.skipped_steps);
        case PeakMemory: return format_bytes(r.peak_memory_bytes());
        default: return {};
        }
    }
    if (role == SortRole) {
        switch (column) {
        case Id: return QVariant::fromValue<qint64>(r.id);
        case Created: return QString::fromStdString(r.created_at);
        case Steps: return QVariant::fromValue<qint64>(r.steps_done);
        case FinalVal: return sort_value(r.final_val_loss);
        case BestVal: return sort_value(r.best_val_loss);
        case TokensPerS: return sort_value(r.median_tokens_per_s);
        case Skipped: return QVariant::fromValue<qint64>(r.skipped_steps);
        case PeakMemory: return QVariant::fromValue<qint64>(r.peak_memory_bytes());
        default: return data(index, Qt::DisplayRole).toString().toLower();
        }
    }
    if (role == kCsvExportRole) {
        switch (column) {
        case Created: return QString::fromStdString(r.created_at);
        case FinalVal: return exact_loss(r.final_val_loss, r.final_val_step >= 0);
        case BestVal: return exact_loss(r.best_val_loss, r.best_val_step >= 0);
        case TokensPerS: return exact(r.median_tokens_per_s);
        case PeakMemory: return r.peak_memory_bytes() >= 0 ? QString::number(r.peak_memory_bytes()) : QString();
        default: return data(index, Qt::DisplayRole).toString();
        }
    }
    if (role == Qt::TextAlignmentRole) {
        switch (column) {
        case Id:
        case Steps:
        case FinalVal:
        case BestVal:
        case TokensPerS:
        case Skipped:
        case PeakMemory: return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
        default: return QVariant::fromValue(Qt::AlignLeft | Qt::AlignVCenter);
        }
    }
    if (role == Qt::ForegroundRole) {
        if (column == Status) {
            const QColor c = status_color(r.status);
            if (c.isValid()) return QBrush(c);
        }
        if (column == Skipped && r.skipped_steps > 0) return QBrush(QColor(170, 20, 30));
        if (column == Tags) return QBrush(QColor(60, 60, 140));
        return {};
    }
    if (role == Qt::ToolTipRole) {
        switch (column) {
        case Created: return QString::fromStdString(r.created_at) + QStringLiteral(" (UTC)");
        case FinalVal:
            return r.final_val_step >= 0 ? tr("at step %1: %2").arg(r.final_val_step).arg(exact(r.final_val_loss))
                                         : tr("no evaluation");
        case BestVal:
            return r.best_val_step >= 0 ? tr("at step %1: %2").arg(r.best_val_step).arg(exact(r.best_val_loss))
                                        : tr("no evaluation");
        case TokensPerS: return tr("median over the run's steps");
        case PeakMemory:
            if (r.peak_memory_bytes() < 0) return tr("no memory samples");
            return tr("%1 bytes (%2)")
                .arg(r.peak_memory_bytes())
                .arg(r.peak_cuda_bytes >= 0 ? tr("CUDA allocator peak") : tr("process RSS"));
        case Name: return QString::fromStdString(r.project_path);
        case Tags: return tags_text(r);
        default: return {};
        }
    }
    return {};
}

QVariant RunListModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal) return {};
    if (role == Qt::DisplayRole) {
        switch (section) {
        case Id: return tr("Run");
        case Status: return tr("Status");
        case Created: return tr("Created");
        case Name: return tr("Name");
        case Tags: return tr("Tags");
        case Recipe: return tr("Recipe");
        case Steps: return tr("Steps");
        case FinalVal: return tr("Final val");
        case BestVal: return tr("Best val");
        case TokensPerS: return tr("Tokens/s");
        case Skipped: return tr("Skipped");
        case PeakMemory: return tr("Peak memory");
        default: return {};
        }
    }
    if (role == Qt::ToolTipRole) {
        switch (section) {
        case FinalVal: return tr("Validation loss at the last evaluation");
        case BestVal: return tr("Lowest validation loss of the run");
        case TokensPerS: return tr("Median training throughput");
        case Skipped: return tr("Optimizer steps skipped for non-finite gradients");
        case PeakMemory: return tr("CUDA allocator peak on a GPU, else the process's resident memory");
        default: return {};
        }
    }
    return {};
}

Qt::ItemFlags RunListModel::flags(const QModelIndex& index) const
{
    Qt::ItemFlags f = QAbstractTableModel::flags(index);
    if (index.isValid() && index.column() == Name) f |= Qt::ItemIsEditable;
    return f;
}

bool RunListModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (role != Qt::EditRole || !checkIndex(index, CheckIndexOption::IndexIsValid) || index.column() != Name)
        return false;
    const QString name = value.toString().trimmed();
    RunSummaryRow& r = runs_[static_cast<size_t>(index.row())];
    if (name.isEmpty() || name.toStdString() == r.name) return false;
    r.name = name.toStdString();
    emit dataChanged(index, index, {Qt::DisplayRole, Qt::EditRole});
    emit renameRequested(r.id, name);
    return true;
}

} // namespace mantissa
