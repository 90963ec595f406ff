// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Editors for the project page's models: a combo box where the model lists the allowed
// values (ChoicesRole), a plain line edit everywhere else. A line edit, not Qt's default
// spin boxes, because a spin box rounds eps = 1e-8 to two decimals and hides the engine's
// own error for a value it would refuse.

#include <QStyledItemDelegate>

namespace mantissa {

class ChoiceDelegate : public QStyledItemDelegate {
    Q_OBJECT

public:
    // A QStringList of the values a cell accepts; the models share this role.
    static constexpr int ChoicesRole = Qt::UserRole + 64;

    explicit ChoiceDelegate(QObject* parent = nullptr);

    QWidget* createEditor(QWidget* parent, const QStyleOptionViewItem& option,
                          const QModelIndex& index) const override;
    void setEditorData(QWidget* editor, const QModelIndex& index) const override;
    void setModelData(QWidget* editor, QAbstractItemModel* model, const QModelIndex& index) const override;
};

} // namespace mantissa
