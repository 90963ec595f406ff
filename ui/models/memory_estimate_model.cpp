// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/memory_estimate_model.h"

#include <QFont>
#include <QLocale>

#include "models/project_document.h"

namespace mantissa {

MemoryEstimateModel::MemoryEstimateModel(ProjectDocument* document, QObject* parent)
    : QAbstractTableModel(parent), document_(document)
{
    connect(document_, &ProjectDocument::changed, this, &MemoryEstimateModel::refresh);
    connect(document_, &ProjectDocument::vocabChanged, this, &MemoryEstimateModel::refresh);
    refresh();
}

void MemoryEstimateModel::refresh()
{
    const bool wasValid = valid_;
    // rowCount() follows valid_: the reset must begin before it changes (proxies and
    // persistent indexes read the old rows during beginResetModel).
    const bool reset = wasValid != document_->hasProject();
    if (reset) beginResetModel();
    valid_ = document_->hasProject();
    if (valid_) {
        vocabSize_ = document_->vocabSize();
        vocabError_ = document_->vocabError();
        vocabCounting_ = document_->vocabCounting();
        breakdown_ = estimate_memory(document_->config(), vocabSize_);
    } else {
        vocabSize_ = 0;
        vocabError_.clear();
        vocabCounting_ = false;
        breakdown_ = {};
    }
    largestBlock_.clear();
    largestBlockBytes_ = 0;
    logitsBytes_ = 0;
    for (const auto& [name, bytes] : breakdown_.activations_by_layer) {
        if (name == "logits") {
            logitsBytes_ = bytes;
        } else if (bytes > largestBlockBytes_) {
            largestBlockBytes_ = bytes;
            largestBlock_ = QString::fromStdString(name);
        }
    }
    if (reset) {
        endResetModel();
    } else if (valid_) {
        emit dataChanged(index(0, 0), index(RowCount - 1, ColumnCount - 1));
    }
    emit estimateChanged();
}

qint64 MemoryEstimateModel::bytesAt(int row) const
{
    switch (row) {
    case MasterWeightsRow: return breakdown_.master_weights_bytes;
    case LowPrecisionWeightsRow: return breakdown_.low_precision_weights_bytes;
    case GradientsRow: return breakdown_.gradients_bytes;
    case OptimizerStateRow: return breakdown_.optimizer_state_bytes;
    case ActivationsRow: return breakdown_.activations_bytes;
    case LargestBlockRow: return largestBlockBytes_;
    case LogitsRow: return logitsBytes_;
    case TotalRow: return breakdown_.total_bytes();
    default: return 0;
    }
}

QString MemoryEstimateModel::formatBytes(qint64 bytes)
{
    return QLocale().formattedDataSize(bytes, 2, QLocale::DataSizeIecFormat);
}

QString MemoryEstimateModel::componentName(int row) const
{
    switch (row) {
    case MasterWeightsRow: return tr("Master weights (FP32)");
    case LowPrecisionWeightsRow: return tr("Low-precision weight copies");
    case GradientsRow: return tr("Gradients (FP32)");
    case OptimizerStateRow: return tr("Optimizer state (AdamW m, v)");
    case ActivationsRow: return tr("Activations");
    case LargestBlockRow:
        // Indented: a part of the activations above, not another component.
        return largestBlock_.isEmpty() ? tr("    largest block") : tr("    largest block (%1)").arg(largestBlock_);
    case LogitsRow: return tr("    logits");
    case TotalRow: return tr("Total");
    default: return {};
    }
}

QString MemoryEstimateModel::componentToolTip(int row) const
{
    switch (row) {
    case MasterWeightsRow:
        return tr("%1 parameters at 4 bytes").arg(QLocale().toString(static_cast<qint64>(breakdown_.parameters)));
    case LowPrecisionWeightsRow:
        return tr("The weight copy each GEMM reads: 2 bytes an element for BF16/FP16, 1 byte plus a 4-byte scale "
                  "for FP8, none for FP32");
    case GradientsRow: return tr("One FP32 gradient per parameter");
    case OptimizerStateRow: return tr("AdamW's first and second moments, FP32, 8 bytes a parameter");
    case ActivationsRow:
        return tr("Saved for the backward pass at batch size %1, no recomputation")
            .arg(document_->hasProject() ? document_->config().training.batch_size : 0);
    case LargestBlockRow: return tr("The transformer block that saves the most activations");
    case LogitsRow: return tr("The final norm's and lm_head's inputs and the FP32 logits (vocabulary %1)")
            .arg(vocabSize_);
    case TotalRow: return tr("Everything above except the two indented rows, which are part of Activations");
    default: return {};
    }
}

int MemoryEstimateModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() || !valid_ ? 0 : RowCount;
}

int MemoryEstimateModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant MemoryEstimateModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const int row = index.row();
    const qint64 bytes = bytesAt(row);
    const qint64 total = breakdown_.total_bytes();
    switch (role) {
    case Qt::DisplayRole:
        switch (index.column()) {
        case ComponentColumn: return componentName(row);
        case SizeColumn: return formatBytes(bytes);
        case ShareColumn:
            if (total <= 0) return QStringLiteral("—");
            return QStringLiteral("%1 %").arg(100.0 * static_cast<double>(bytes) / static_cast<double>(total), 0, 'f',
                                              1);
        default: return {};
        }
    case Qt::UserRole: return QVariant::fromValue<qint64>(bytes);
    case Qt::ToolTipRole:
        return index.column() == SizeColumn ? tr("%1 bytes").arg(QLocale().toString(bytes)) : componentToolTip(row);
    case Qt::TextAlignmentRole:
        if (index.column() != ComponentColumn) return (Qt::AlignRight | Qt::AlignVCenter).toInt();
        return {};
    case Qt::FontRole:
        if (row == TotalRow) {
            QFont bold;
            bold.setBold(true);
            return bold;
        }
        if (row == LargestBlockRow || row == LogitsRow) {
            QFont italic;
            italic.setItalic(true);
            return italic;
        }
        return {};
    default:
        return {};
    }
}

QVariant MemoryEstimateModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case ComponentColumn: return tr("Component");
    case SizeColumn: return tr("Size");
    case ShareColumn: return tr("Share");
    default: return {};
    }
}

} // namespace mantissa
