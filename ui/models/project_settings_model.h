// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The project's settings as an editable "Setting / Value" tree: sections, then keys, with
// nested objects (precision.fp8, telemetry.watchers, ...) as sub-trees. It shows the resolved
// project (defaults filled in) and every edit goes through ProjectDocument::setValue, so the
// engine's validator decides and its message reaches the user unchanged.

#include <QAbstractItemModel>
#include <QHash>
#include <QJsonValue>
#include <QString>

#include <memory>

#include "models/choice_delegate.h"

namespace mantissa {

class ProjectDocument;

class ProjectSettingsModel : public QAbstractItemModel {
    Q_OBJECT

public:
    enum Column { SettingColumn = 0, ValueColumn = 1, ColumnCount = 2 };
    static constexpr int ChoicesRole = ChoiceDelegate::ChoicesRole;

    explicit ProjectSettingsModel(ProjectDocument* document, QObject* parent = nullptr);
    ~ProjectSettingsModel() override;

    // While a run is going the settings are fixed: nothing is editable or checkable.
    void setReadOnly(bool readOnly);
    bool isReadOnly() const { return readOnly_; }

    // "model.n_layer" -> its index in the Setting column; invalid if there is no such key.
    QModelIndex indexForKey(const QString& dottedKey) const;
    // The Value column's text for a dotted key; a null QString if there is no such key.
    QString valueForKey(const QString& dottedKey) const;
    // The dotted key of any index; empty for the root.
    QString keyForIndex(const QModelIndex& index) const;
    // The values a key accepts, when the engine allows only a fixed set; empty otherwise.
    static QStringList choicesForKey(const QString& dottedKey);

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;

    struct Node; // one key; defined in the .cpp, named here so its tree-building helpers can use it

private:

    void rebuild();
    Node* nodeFor(const QModelIndex& index) const;
    QModelIndex valueIndex(const Node* node) const;
    static QJsonValue toJsonValue(const QJsonValue& current, const QVariant& edited);

    ProjectDocument* document_;
    std::unique_ptr<Node> root_;
    // Recipe keys that no layer reads (recipe_settings_read_by_no_layer): greyed, and the
    // tooltip says why. Key -> why.
    QHash<QString, QString> unread_;
    bool readOnly_ = false;
};

} // namespace mantissa
