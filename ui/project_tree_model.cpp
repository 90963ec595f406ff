// SPDX-License-Identifier: GPL-3.0-or-later
#include "project_tree_model.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QJsonValue>

#include <cmath>

namespace mantissa {

struct ProjectTreeModel::Node {
    QString key;
    QString value; // empty for objects and arrays: their children carry the values
    QString path;  // dotted, for tooltips and lookups
    Node* parent = nullptr;
    int row = 0;
    std::vector<std::unique_ptr<Node>> children;

    Node* add(const QString& childKey)
    {
        auto child = std::make_unique<Node>();
        child->key = childKey;
        child->path = path.isEmpty() ? childKey : path + QLatin1Char('.') + childKey;
        child->parent = this;
        child->row = static_cast<int>(children.size());
        children.push_back(std::move(child));
        return children.back().get();
    }
};

namespace {

// Integers print as integers (JSON numbers are doubles in Qt) and other numbers in their
// shortest round-trip form: fixed notation where that reads like the project file (0.0003,
// not 3e-04), exponents only for the really small or large (eps = 1e-08).
QString number_text(double v)
{
    constexpr double kExactIntegerLimit = 9007199254740992.0; // 2^53
    if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) < kExactIntegerLimit)
        return QString::number(static_cast<qint64>(v));
    const double magnitude = std::fabs(v);
    const char format = magnitude >= 1e-4 && magnitude < 1e15 ? 'f' : 'g';
    return QString::number(v, format, QLocale::FloatingPointShortest);
}

} // namespace

ProjectTreeModel::ProjectTreeModel(QObject* parent) : QAbstractItemModel(parent), root_(std::make_unique<Node>()) {}

ProjectTreeModel::~ProjectTreeModel() = default;

void ProjectTreeModel::setConfig(const ProjectConfig& config)
{
    setJsonText(QString::fromStdString(to_json_text(config)));
}

bool ProjectTreeModel::setJsonText(const QString& json)
{
    QJsonParseError error{};
    const QJsonDocument document = QJsonDocument::fromJson(json.toUtf8(), &error);
    beginResetModel();
    root_ = std::make_unique<Node>();
    const bool ok = error.error == QJsonParseError::NoError && document.isObject();
    if (ok) build(*root_, document.object());
    endResetModel();
    return ok;
}

void ProjectTreeModel::clear()
{
    beginResetModel();
    root_ = std::make_unique<Node>();
    endResetModel();
}

void ProjectTreeModel::build(Node& node, const QJsonValue& value)
{
    switch (value.type()) {
    case QJsonValue::Object: {
        const QJsonObject object = value.toObject();
        for (auto it = object.constBegin(); it != object.constEnd(); ++it)
            build(*node.add(it.key()), it.value());
        break;
    }
    case QJsonValue::Array: {
        const QJsonArray array = value.toArray();
        for (qsizetype i = 0; i < array.size(); ++i)
            build(*node.add(QStringLiteral("[%1]").arg(i)), array.at(i));
        break;
    }
    case QJsonValue::Bool:
        node.value = value.toBool() ? QStringLiteral("true") : QStringLiteral("false");
        break;
    case QJsonValue::Double:
        node.value = number_text(value.toDouble());
        break;
    case QJsonValue::String:
        node.value = value.toString();
        break;
    case QJsonValue::Null:
        node.value = QStringLiteral("null");
        break;
    case QJsonValue::Undefined:
        break;
    }
}

ProjectTreeModel::Node* ProjectTreeModel::nodeFor(const QModelIndex& index) const
{
    return index.isValid() ? static_cast<Node*>(index.internalPointer()) : root_.get();
}

QModelIndex ProjectTreeModel::indexForKey(const QString& dottedKey) const
{
    const Node* node = root_.get();
    for (const QString& part : dottedKey.split(QLatin1Char('.'))) {
        const Node* next = nullptr;
        for (const auto& child : node->children)
            if (child->key == part) {
                next = child.get();
                break;
            }
        if (!next) return {};
        node = next;
    }
    if (node == root_.get()) return {};
    return createIndex(node->row, SettingColumn, const_cast<Node*>(node));
}

QString ProjectTreeModel::valueForKey(const QString& dottedKey) const
{
    const QModelIndex found = indexForKey(dottedKey);
    if (!found.isValid()) return {};
    return nodeFor(found)->value;
}

QModelIndex ProjectTreeModel::index(int row, int column, const QModelIndex& parent) const
{
    if (!hasIndex(row, column, parent)) return {};
    Node* owner = nodeFor(parent);
    return createIndex(row, column, owner->children[static_cast<size_t>(row)].get());
}

QModelIndex ProjectTreeModel::parent(const QModelIndex& child) const
{
    if (!child.isValid()) return {};
    const Node* owner = nodeFor(child)->parent;
    if (!owner || owner == root_.get()) return {};
    return createIndex(owner->row, SettingColumn, const_cast<Node*>(owner));
}

int ProjectTreeModel::rowCount(const QModelIndex& parent) const
{
    // Only the first column has children, as QAbstractItemModelTester expects.
    if (parent.isValid() && parent.column() != SettingColumn) return 0;
    return static_cast<int>(nodeFor(parent)->children.size());
}

int ProjectTreeModel::columnCount(const QModelIndex&) const
{
    return ColumnCount;
}

QVariant ProjectTreeModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid()) return {};
    const Node* node = nodeFor(index);
    switch (role) {
    case Qt::DisplayRole:
        return index.column() == SettingColumn ? node->key : node->value;
    case Qt::ToolTipRole:
        return node->children.empty() ? node->path + QStringLiteral(" = ") + node->value : node->path;
    default:
        return {};
    }
}

QVariant ProjectTreeModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case SettingColumn:
        return tr("Setting");
    case ValueColumn:
        return tr("Value");
    default:
        return {};
    }
}

Qt::ItemFlags ProjectTreeModel::flags(const QModelIndex& index) const
{
    if (!index.isValid()) return Qt::NoItemFlags;
    Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
    if (nodeFor(index)->children.empty()) f |= Qt::ItemNeverHasChildren;
    return f;
}

} // namespace mantissa
