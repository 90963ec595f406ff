// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The Runs page's filter and sort: every blank-separated word of the filter text must occur
// (case-insensitively) in the run's name, recipe, tags or status; columns sort by the
// model's exact values (RunListModel::SortRole), not by their display text.

#include <QSortFilterProxyModel>
#include <QStringList>

namespace mantissa {

class RunFilterProxyModel : public QSortFilterProxyModel {
    Q_OBJECT

public:
    explicit RunFilterProxyModel(QObject* parent = nullptr);

    void setFilterText(const QString& text);
    QString filterText() const { return text_; }

protected:
    bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

private:
    QString text_;
    QStringList words_;
};

} // namespace mantissa
