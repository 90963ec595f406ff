// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/project_settings_model.h"

#include <QBrush>
#include <QFont>
#include <QJsonArray>
#include <QJsonObject>
#include <QLocale>
#include <QPalette>

#include <cmath>
#include <limits>
#include <vector>

#include "models/project_document.h"
#include "unread_settings.h"
#include "watchers.h"

namespace mantissa {

struct ProjectSettingsModel::Node {
    QString key;
    QString path; // dotted, for tooltips, lookups and ProjectDocument::setValue
    QJsonValue value;
    bool isLayersSummary = false; // precision.layers: a list, edited in the precision table
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
    bool isLeaf() const { return !value.isObject(); }
};

namespace {

// Sections in the order a user reads a project (QJsonObject itself sorts keys); keys the
// list does not know follow alphabetically, so a new engine section still shows up.
const QStringList kSectionOrder = {QStringLiteral("name"),     QStringLiteral("model"),
                                   QStringLiteral("data"),     QStringLiteral("optimizer"),
                                   QStringLiteral("training"), QStringLiteral("eval"),
                                   QStringLiteral("precision"), QStringLiteral("telemetry")};

// Integers print as integers (JSON numbers are doubles in Qt), other numbers in their
// shortest round-trip form: fixed where that reads like the project file (0.0003), exponents
// only for the really small or large (eps = 1e-08).
QString number_text(double v)
{
    constexpr double kExactIntegerLimit = 9007199254740992.0; // 2^53
    if (std::isfinite(v) && std::floor(v) == v && std::fabs(v) < kExactIntegerLimit)
        return QString::number(static_cast<qint64>(v));
    const double magnitude = std::fabs(v);
    const char format = magnitude >= 1e-4 && magnitude < 1e15 ? 'f' : 'g';
    return QString::number(v, format, QLocale::FloatingPointShortest);
}

QString layers_summary(const QJsonArray& layers)
{
    if (layers.isEmpty()) return ProjectSettingsModel::tr("no overrides — edit in the precision table");
    if (layers.size() == 1) return ProjectSettingsModel::tr("1 override — edit in the precision table");
    return ProjectSettingsModel::tr("%1 overrides — edit in the precision table").arg(layers.size());
}

QString value_text(const QJsonValue& value, bool isLayersSummary)
{
    if (isLayersSummary) return layers_summary(value.toArray());
    switch (value.type()) {
    case QJsonValue::Bool: return value.toBool() ? QStringLiteral("true") : QStringLiteral("false");
    case QJsonValue::Double: {
        // A 64-bit integer (a seed of 17 digits) as the project says it: through a double its
        // last digits would read as another seed.
        constexpr qint64 kNotAnInteger = std::numeric_limits<qint64>::min();
        if (const qint64 i = value.toInteger(kNotAnInteger); i != kNotAnInteger) return QString::number(i);
        return number_text(value.toDouble());
    }
    case QJsonValue::String: return value.toString();
    case QJsonValue::Null: return QStringLiteral("null");
    default: return {};
    }
}

void build(ProjectSettingsModel::Node& node, const QJsonObject& object, bool topLevel);

void add_child(ProjectSettingsModel::Node& node, const QString& key, const QJsonValue& value)
{
    auto* child = node.add(key);
    child->value = value;
    if (value.isObject()) build(*child, value.toObject(), false);
    else if (value.isArray()) child->isLayersSummary = true;
}

void build(ProjectSettingsModel::Node& node, const QJsonObject& object, bool topLevel)
{
    if (topLevel) {
        for (const QString& key : kSectionOrder)
            if (object.contains(key)) add_child(node, key, object.value(key));
        for (auto it = object.constBegin(); it != object.constEnd(); ++it)
            if (!kSectionOrder.contains(it.key())) add_child(node, it.key(), it.value());
        return;
    }
    for (auto it = object.constBegin(); it != object.constEnd(); ++it) add_child(node, it.key(), it.value());
}

// Same keys in the same places: then an edit is a value change, not a new tree.
bool same_shape(const ProjectSettingsModel::Node& a, const ProjectSettingsModel::Node& b)
{
    if (a.key != b.key || a.children.size() != b.children.size() || a.isLeaf() != b.isLeaf()) return false;
    for (size_t i = 0; i < a.children.size(); ++i)
        if (!same_shape(*a.children[i], *b.children[i])) return false;
    return true;
}

QStringList to_list(const std::vector<std::string>& names)
{
    QStringList out;
    for (const auto& n : names) out << QString::fromStdString(n);
    return out;
}

} // namespace

ProjectSettingsModel::ProjectSettingsModel(ProjectDocument* document, QObject* parent)
    : QAbstractItemModel(parent), document_(document), root_(std::make_unique<Node>())
{
    root_->value = QJsonObject();
    connect(document_, &ProjectDocument::changed, this, &ProjectSettingsModel::rebuild);
    rebuild();
}

ProjectSettingsModel::~ProjectSettingsModel() = default;

void ProjectSettingsModel::rebuild()
{
    auto fresh = std::make_unique<Node>();
    fresh->value = QJsonObject();
    if (document_->hasProject()) build(*fresh, document_->json(), true);
    QHash<QString, QString> unread;
    if (document_->hasProject())
        for (const auto& u : recipe_settings_read_by_no_layer(document_->config()))
            unread.insert(QString::fromStdString(u.key), QString::fromStdString(u.why));

    if (!same_shape(*fresh, *root_)) {
        beginResetModel();
        root_ = std::move(fresh);
        unread_ = std::move(unread);
        endResetModel();
        return;
    }
    // A key that no layer reads now, or reads again, repaints as its value would.
    QStringList repaint;
    for (auto it = unread.constBegin(); it != unread.constEnd(); ++it)
        if (unread_.value(it.key()) != it.value()) repaint << it.key();
    for (auto it = unread_.constBegin(); it != unread_.constEnd(); ++it)
        if (!unread.contains(it.key())) repaint << it.key();
    unread_ = std::move(unread);
    for (const QString& key : repaint)
        if (const QModelIndex at = indexForKey(key); at.isValid())
            emit dataChanged(at, at.siblingAtColumn(ValueColumn));
    // Keep the view's expansion, selection and scroll position: update the values in place.
    std::vector<std::pair<Node*, const Node*>> pending = {{root_.get(), fresh.get()}};
    while (!pending.empty()) {
        auto [mine, theirs] = pending.back();
        pending.pop_back();
        for (size_t i = 0; i < mine->children.size(); ++i)
            pending.emplace_back(mine->children[i].get(), theirs->children[i].get());
        if (mine == root_.get() || mine->value == theirs->value) continue;
        mine->value = theirs->value;
        if (mine->isLeaf()) {
            const QModelIndex at = valueIndex(mine);
            emit dataChanged(at, at);
        }
    }
}

void ProjectSettingsModel::setReadOnly(bool readOnly)
{
    if (readOnly_ == readOnly) return;
    readOnly_ = readOnly;
    // Checkboxes and greyed text follow the flags; repaint the values so they show it.
    for (const auto& section : root_->children) {
        std::vector<const Node*> pending = {section.get()};
        while (!pending.empty()) {
            const Node* node = pending.back();
            pending.pop_back();
            for (const auto& c : node->children) pending.push_back(c.get());
            if (node->isLeaf()) {
                const QModelIndex at = valueIndex(node);
                emit dataChanged(at, at);
            }
        }
    }
}

QStringList ProjectSettingsModel::choicesForKey(const QString& key)
{
    if (key == QLatin1String("data.kind"))
        return {QStringLiteral("synthetic-addition"), QStringLiteral("text"), QStringLiteral("bin")};
    if (key == QLatin1String("data.tokenizer")) return {QStringLiteral("char"), QStringLiteral("byte")};
    if (key == QLatin1String("training.device"))
        return {QStringLiteral("auto"), QStringLiteral("cpu"), QStringLiteral("cuda")};
    if (key == QLatin1String("precision.preset")) return to_list(precision_preset_names());
    if (key == QLatin1String("precision.fp8.scaling")) {
        QStringList out;
        for (auto s : fp8_scalings())
            out << QString::fromLatin1(fp8_scaling_name(s));
        return out;
    }
    if (key == QLatin1String("precision.fp8.amax_compute_algo"))
        return {QStringLiteral("max"), QStringLiteral("most_recent")};
    if (key == QLatin1String("precision.fp8.mx_scale_rounding")) return {QStringLiteral("floor"), QStringLiteral("up")};
    if (key == QLatin1String("precision.fp8.block_scales"))
        return {QStringLiteral("power-of-two"), QStringLiteral("fp32")};
    if (key == QLatin1String("precision.loss_scaling.mode"))
        return {QStringLiteral("auto"), QStringLiteral("dynamic"), QStringLiteral("static"), QStringLiteral("off")};
    if (key == QLatin1String("precision.backend"))
        return {QStringLiteral("auto"), QStringLiteral("emulated"), QStringLiteral("native")};
    if (key.startsWith(QLatin1String("telemetry.watchers.actions.")))
        return {QString::fromLatin1(watch_action_name(WatchAction::None)),
                QString::fromLatin1(watch_action_name(WatchAction::Pause)),
                QString::fromLatin1(watch_action_name(WatchAction::SwitchToBf16))};
    return {};
}

ProjectSettingsModel::Node* ProjectSettingsModel::nodeFor(const QModelIndex& index) const
{
    return index.isValid() ? static_cast<Node*>(index.internalPointer()) : root_.get();
}

QModelIndex ProjectSettingsModel::valueIndex(const Node* node) const
{
    return createIndex(node->row, ValueColumn, const_cast<Node*>(node));
}

QModelIndex ProjectSettingsModel::indexForKey(const QString& dottedKey) const
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

QString ProjectSettingsModel::valueForKey(const QString& dottedKey) const
{
    const QModelIndex found = indexForKey(dottedKey);
    if (!found.isValid()) return {};
    const Node* node = nodeFor(found);
    if (!node->isLeaf()) return QStringLiteral("");
    return value_text(node->value, node->isLayersSummary);
}

QString ProjectSettingsModel::keyForIndex(const QModelIndex& index) const
{
    return index.isValid() ? nodeFor(index)->path : QString();
}

QModelIndex ProjectSettingsModel::index(int row, int column, const QModelIndex& parent) const
{
    if (!hasIndex(row, column, parent)) return {};
    Node* owner = nodeFor(parent);
    return createIndex(row, column, owner->children[static_cast<size_t>(row)].get());
}

QModelIndex ProjectSettingsModel::parent(const QModelIndex& child) const
{
    if (!child.isValid()) return {};
    const Node* owner = nodeFor(child)->parent;
    if (!owner || owner == root_.get()) return {};
    return createIndex(owner->row, SettingColumn, const_cast<Node*>(owner));
}

int ProjectSettingsModel::rowCount(const QModelIndex& parent) const
{
    // Only the first column has children, as QAbstractItemModelTester expects.
    if (parent.isValid() && parent.column() != SettingColumn) return 0;
    return static_cast<int>(nodeFor(parent)->children.size());
}

int ProjectSettingsModel::columnCount(const QModelIndex&) const
{
    return ColumnCount;
}

QVariant ProjectSettingsModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid()) return {};
    const Node* node = nodeFor(index);
    const bool isValue = index.column() == ValueColumn;
    const bool isBool = node->value.isBool();
    switch (role) {
    case Qt::DisplayRole:
        if (!isValue) return node->key;
        // A checkbox says it already; the word beside it keeps the column readable in a screenshot.
        return node->isLeaf() ? value_text(node->value, node->isLayersSummary) : QString();
    case Qt::EditRole:
        if (!isValue) return node->key;
        if (isBool) return node->value.toBool();
        return node->isLeaf() ? value_text(node->value, node->isLayersSummary) : QString();
    case Qt::CheckStateRole:
        if (isValue && isBool) return node->value.toBool() ? Qt::Checked : Qt::Unchecked;
        return {};
    case Qt::ToolTipRole:
        if (node->isLayersSummary)
            return node->path + tr(": per-layer formats and scaling; edit them in the precision table");
        if (!node->isLeaf()) return node->path;
        if (const auto why = unread_.constFind(node->path); why != unread_.constEnd())
            return tr("%1 = %2\nNo layer reads it: %3").arg(node->path, value_text(node->value, false), *why);
        return node->path + QStringLiteral(" = ") + value_text(node->value, false);
    case ChoicesRole:
        if (!isValue || !node->isLeaf()) return {};
        {
            const QStringList choices = choicesForKey(node->path);
            return choices.isEmpty() ? QVariant() : QVariant(choices);
        }
    case Qt::FontRole:
        if (!isValue && !node->isLeaf() && node->parent == root_.get()) {
            QFont bold;
            bold.setBold(true);
            return bold;
        }
        return {};
    case Qt::ForegroundRole:
        if ((isValue && (node->isLayersSummary || readOnly_)) || unread_.contains(node->path))
            return QBrush(QPalette().color(QPalette::PlaceholderText));
        return {};
    default:
        return {};
    }
}

QJsonValue ProjectSettingsModel::toJsonValue(const QJsonValue& current, const QVariant& edited)
{
    const QMetaType::Type type = static_cast<QMetaType::Type>(edited.typeId());
    const bool numeric = type == QMetaType::Int || type == QMetaType::LongLong || type == QMetaType::UInt ||
                         type == QMetaType::ULongLong || type == QMetaType::Double || type == QMetaType::Float;
    if (current.isBool()) {
        if (type == QMetaType::Bool) return edited.toBool();
        const QString text = edited.toString().trimmed().toLower();
        if (text == QLatin1String("true")) return true;
        if (text == QLatin1String("false")) return false;
        return edited.toString(); // the engine names the key and says it wants a boolean
    }
    if (current.isDouble()) {
        if (numeric) {
            if (type == QMetaType::Double || type == QMetaType::Float) return edited.toDouble();
            return edited.toLongLong();
        }
        // Typed text: an integer stays an integer, so integer keys accept it.
        const QString text = edited.toString().trimmed();
        bool ok = false;
        const qint64 asInteger = text.toLongLong(&ok);
        if (ok) return asInteger;
        const double asDouble = text.toDouble(&ok);
        if (ok) return asDouble;
        return edited.toString(); // the engine names the key and says it wants a number
    }
    return edited.toString();
}

bool ProjectSettingsModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (!index.isValid() || index.column() != ValueColumn || readOnly_) return false;
    const Node* node = nodeFor(index);
    if (!node->isLeaf() || node->isLayersSummary) return false;
    QJsonValue edited;
    if (role == Qt::CheckStateRole && node->value.isBool())
        edited = value.toInt() == Qt::Checked;
    else if (role == Qt::EditRole)
        edited = toJsonValue(node->value, value);
    else
        return false;
    // The document emits changed(), and rebuild() updates this cell and any others.
    return document_->setValue(node->path, edited, nullptr);
}

QVariant ProjectSettingsModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
    switch (section) {
    case SettingColumn: return tr("Setting");
    case ValueColumn: return tr("Value");
    default: return {};
    }
}

Qt::ItemFlags ProjectSettingsModel::flags(const QModelIndex& index) const
{
    if (!index.isValid()) return Qt::NoItemFlags;
    const Node* node = nodeFor(index);
    Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable;
    if (node->children.empty()) f |= Qt::ItemNeverHasChildren;
    if (index.column() == ValueColumn && node->isLeaf() && !node->isLayersSummary && !readOnly_)
        f |= node->value.isBool() ? Qt::ItemIsUserCheckable : Qt::ItemIsEditable;
    return f;
}

} // namespace mantissa
