// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The resolved project as a read-only "Setting / Value" tree. It shows what the engine will
// actually use (defaults filled in), so it is fed from to_json_text, not from the file the
// user wrote.

#include <QAbstractItemModel>
#include <QString>

#include <memory>
#include <vector>

#include "project_config.h"

class QJsonValue;

namespace mantissa {

class ProjectTreeModel : public QAbstractItemModel {
    Q_OBJECT

public:
    enum Column { SettingColumn = 0, ValueColumn = 1, ColumnCount = 2 };

    explicit ProjectTreeModel(QObject* parent = nullptr);
    ~ProjectTreeModel() override;

    void setConfig(const ProjectConfig& config);
    // Returns false and leaves the model empty if `json` is not a JSON object.
    bool setJsonText(const QString& json);
    void clear();

    // "model.n_layer" -> its index in the Setting column; invalid if there is no such key.
    QModelIndex indexForKey(const QString& dottedKey) const;
    // The Value column's text for a dotted key; a null QString if there is no such key.
    QString valueForKey(const QString& dottedKey) const;

    QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
    QModelIndex parent(const QModelIndex& child) const override;
    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;

private:
    struct Node;

    Node* nodeFor(const QModelIndex& index) const;
    static void build(Node& node, const QJsonValue& value);

    std::unique_ptr<Node> root_;
};

} // namespace mantissa
