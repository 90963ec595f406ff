// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/choice_delegate.h"

#include <QComboBox>
#include <QLineEdit>
#include <QTimer>

namespace mantissa {

namespace {
// Set on a combo once the user chose an item in it (the mouse, or Enter or an arrow key).
constexpr const char* kPicked = "mantissaPicked";
} // namespace

ChoiceDelegate::ChoiceDelegate(QObject* parent) : QStyledItemDelegate(parent) {}

QWidget* ChoiceDelegate::createEditor(QWidget* parent, const QStyleOptionViewItem&, const QModelIndex& index) const
{
    const QStringList choices = index.data(ChoicesRole).toStringList();
    if (choices.isEmpty()) {
        auto* edit = new QLineEdit(parent);
        edit->setFrame(false);
        return edit;
    }
    auto* combo = new QComboBox(parent);
    combo->addItems(choices);
    // A pick is the whole edit: commit at once instead of waiting for focus to leave.
    connect(combo, &QComboBox::activated, this, [this, combo] {
        combo->setProperty(kPicked, true);
        emit const_cast<ChoiceDelegate*>(this)->commitData(combo);
        emit const_cast<ChoiceDelegate*>(this)->closeEditor(combo);
    });
    // Opening the list right away saves the user a second click on a cell they meant to change.
    QTimer::singleShot(0, combo, [combo] {
        if (combo->isVisible()) combo->showPopup();
    });
    return combo;
}

void ChoiceDelegate::setEditorData(QWidget* editor, const QModelIndex& index) const
{
    const QString current = index.data(Qt::EditRole).toString();
    if (auto* combo = qobject_cast<QComboBox*>(editor)) {
        const int at = combo->findText(current);
        combo->setCurrentIndex(at >= 0 ? at : 0);
    } else if (auto* edit = qobject_cast<QLineEdit*>(editor)) {
        edit->setText(current);
        edit->selectAll();
    }
}

void ChoiceDelegate::setModelData(QWidget* editor, QAbstractItemModel* model, const QModelIndex& index) const
{
    // The model validates; a refused value simply leaves the cell as it was. Even the value the
    // cell already holds is handed on when the user picked it: in the precision table, picking
    // the project's format again is how a watcher's switch is taken back in the running engine.
    // A combo that merely lost focus (opened, then a click elsewhere) still shows the value it
    // opened on, and is no pick: handing that on would undo the watcher's switch unasked.
    if (auto* combo = qobject_cast<QComboBox*>(editor)) {
        if (combo->property(kPicked).toBool() || combo->currentText() != index.data(Qt::EditRole).toString())
            model->setData(index, combo->currentText(), Qt::EditRole);
    } else if (auto* edit = qobject_cast<QLineEdit*>(editor)) model->setData(index, edit->text(), Qt::EditRole);
}

} // namespace mantissa
