// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The memory bill of the edited recipe (estimate_memory), as Component / Size / Share rows,
// recomputed on every edit so the effect of a format change is visible before a run.
// Activations show their total, the largest block and the logits: one row per block would
// be 48 rows for a 48-layer model.

#include <QAbstractTableModel>
#include <QString>

#include "memory_model.h"

namespace mantissa {

class ProjectDocument;

class MemoryEstimateModel : public QAbstractTableModel {
    Q_OBJECT

public:
    enum Column { ComponentColumn = 0, SizeColumn, ShareColumn, ColumnCount };
    enum Row {
        MasterWeightsRow = 0,
        LowPrecisionWeightsRow,
        GradientsRow,
        OptimizerStateRow,
        ActivationsRow,
        LargestBlockRow,
        LogitsRow,
        TotalRow,
        RowCount
    };
    // Qt::UserRole carries the exact bytes of a row (every column); DisplayRole is for people.

    explicit MemoryEstimateModel(ProjectDocument* document, QObject* parent = nullptr);

    const MemoryBreakdown& breakdown() const { return breakdown_; }
    qint64 vocabSize() const { return vocabSize_; }
    // Why the data could not be loaded for the vocabulary size; empty when it could.
    QString vocabError() const { return vocabError_; }
    // The vocabulary of the current data is still being counted; vocabSize() is the previous one.
    bool vocabCounting() const { return vocabCounting_; }
    qint64 bytesAt(int row) const;

    // "1.50 MiB": binary units, as GPU memory is sold.
    static QString formatBytes(qint64 bytes);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

signals:
    // After every recomputation, for labels that summarise the table.
    void estimateChanged();

private:
    void refresh();
    QString componentName(int row) const;
    QString componentToolTip(int row) const;

    ProjectDocument* document_;
    bool valid_ = false;
    MemoryBreakdown breakdown_;
    QString largestBlock_;
    qint64 largestBlockBytes_ = 0;
    qint64 logitsBytes_ = 0;
    qint64 vocabSize_ = 0;
    QString vocabError_;
    bool vocabCounting_ = false;
};

} // namespace mantissa
