// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/run_filter_proxy.h"

#include "models/run_list_model.h"

namespace mantissa {

RunFilterProxyModel::RunFilterProxyModel(QObject* parent) : QSortFilterProxyModel(parent)
{
    setSortRole(RunListModel::SortRole);
    setDynamicSortFilter(true);
}

void RunFilterProxyModel::setFilterText(const QString& text)
{
    if (text == text_) return;
    text_ = text;
    words_ = text.simplified().split(QLatin1Char(' '), Qt::SkipEmptyParts);
    invalidateFilter();
}

bool RunFilterProxyModel::filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const
{
    if (words_.isEmpty()) return true;
    const QAbstractItemModel* m = sourceModel();
    QString haystack;
    for (const int column : {RunListModel::Name, RunListModel::Recipe, RunListModel::Tags, RunListModel::Status})
        haystack += m->index(sourceRow, column, sourceParent).data().toString() + QLatin1Char('\n');
    for (const QString& word : words_)
        if (!haystack.contains(word, Qt::CaseInsensitive)) return false;
    return true;
}

} // namespace mantissa
