// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/project_document.h"

#include <QCryptographicHash>
#include <QDir>
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QSaveFile>
#include <QSettings>
#include <QThread>

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dataset.h"

namespace mantissa {
namespace {

const QString kRecentKey = QStringLiteral("recentProjects");
// Vocabulary counts kept; a handful covers switching back and forth between corpora.
constexpr qsizetype kVocabCacheEntries = 16;

QSettings app_settings()
{
    // The organization and application names are spelled out rather than taken from
    // QCoreApplication so tests and the app share one list whatever the executable is called.
    return QSettings(QStringLiteral("Mantissa"), QStringLiteral("Mantissa"));
}

QJsonObject parse_object(const std::string& text)
{
    return QJsonDocument::fromJson(QByteArray::fromStdString(text)).object();
}

QJsonObject with_value(QJsonObject object, QStringList parts, const QJsonValue& value)
{
    const QString head = parts.takeFirst();
    if (parts.isEmpty()) object.insert(head, value);
    else object.insert(head, with_value(object.value(head).toObject(), parts, value));
    return object;
}

const char* gemm_key(ProjectDocument::Gemm which)
{
    switch (which) {
    case ProjectDocument::Gemm::Forward: return "forward";
    case ProjectDocument::Gemm::Dgrad: return "dgrad";
    case ProjectDocument::Gemm::Wgrad: return "wgrad";
    }
    return "forward";
}

// Does a precision.layers entry set `key`? "format" sets all three GEMMs.
bool entry_sets(const QJsonObject& entry, const QString& key)
{
    if (entry.contains(key)) return true;
    return key != QLatin1String("scaling") && entry.contains(QLatin1String("format"));
}

} // namespace

ProjectDocument::ProjectDocument(QObject* parent) : QObject(parent) {}

QJsonValue ProjectDocument::value(const QString& dottedKey) const
{
    QJsonValue node = json_;
    for (const QString& part : dottedKey.split(QLatin1Char('.'))) {
        if (!node.isObject() || !node.toObject().contains(part)) return QJsonValue(QJsonValue::Undefined);
        node = node.toObject().value(part);
    }
    return node;
}

bool ProjectDocument::open(const QString& path, QString* error)
{
    ProjectConfig loaded;
    try {
        loaded = load_project_file(QFile::encodeName(path).toStdString());
    } catch (const ConfigError& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    const QString absolute = QFileInfo(path).absoluteFilePath();
    setConfig(loaded, absolute);
    addRecent(absolute);
    return true;
}

void ProjectDocument::setConfig(const ProjectConfig& config, const QString& path, bool unsaved)
{
    config_ = config;
    if (config_.base_dir.empty() && !path.isEmpty())
        config_.base_dir = QFile::encodeName(QFileInfo(path).absolutePath()).toStdString();
    json_ = parse_object(to_json_text(config_));
    hasProject_ = true;
    updateVocab();
    const bool pathMoved = path_ != path;
    path_ = path;
    diskHash_ = path.isEmpty() ? QByteArray() : fileHash(path); // as it was read
    savedJson_ = unsaved ? QJsonObject() : json_; // with overrides it differs from its file
    setDirty(unsaved);
    clearUndo();
    if (pathMoved) emit pathChanged(path_);
    emit changed();
}

bool ProjectDocument::save(QString* error, bool overwriteChangedFile)
{
    if (!hasProject_ || path_.isEmpty()) {
        if (error) *error = tr("The project has no file yet: use Save As.");
        return false;
    }
    changedOnDisk_ = false;
    if (!overwriteChangedFile && !diskHash_.isEmpty()) {
        const QByteArray now = fileHash(path_);
        if (!now.isEmpty() && now != diskHash_) {
            changedOnDisk_ = true;
            if (error)
                *error = tr("'%1' changed on disk since it was opened or saved here: saving would replace that "
                            "change. Save As keeps both; opening it again shows the file's.")
                             .arg(path_);
            return false;
        }
    }
    if (!writeFile(path_, config_, error)) return false;
    savedJson_ = json_;
    setDirty(false);
    addRecent(path_);
    return true;
}

QByteArray ProjectDocument::fileHash(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) return {};
    return QCryptographicHash::hash(file.readAll(), QCryptographicHash::Sha256);
}

bool ProjectDocument::saveAs(const QString& path, QString* error)
{
    if (!hasProject_) {
        if (error) *error = tr("There is no project to save.");
        return false;
    }
    const QString absolute = QFileInfo(path).absoluteFilePath();
    const QString newBase = QFileInfo(absolute).absolutePath();
    const QString oldBase =
        config_.base_dir.empty() ? QDir::currentPath() : QFile::decodeName(QByteArray::fromStdString(config_.base_dir));

    // Relative data and checkpoint paths resolve against the project file's folder, so a copy
    // in another folder must spell them from there to keep naming the same files.
    QJsonObject json = json_;
    const std::pair<const char*, const char*> pathKeys[] = {
        {"data", "path"}, {"data", "dir"}, {"training", "checkpoint_dir"}};
    for (const auto& [sectionName, key] : pathKeys) {
        QJsonObject section = json.value(QLatin1String(sectionName)).toObject();
        const QString given = section.value(QLatin1String(key)).toString();
        if (given.isEmpty() || QDir::isAbsolutePath(given)) continue;
        const QString target = QDir::cleanPath(QDir(oldBase).absoluteFilePath(given));
        section.insert(QLatin1String(key), QDir(newBase).relativeFilePath(target));
        json.insert(QLatin1String(sectionName), section);
    }

    ProjectConfig moved;
    try {
        moved = load_project_json(QJsonDocument(json).toJson().toStdString(),
                                  QFile::encodeName(newBase).toStdString());
    } catch (const ConfigError& e) {
        if (error) *error = QString::fromStdString(e.what());
        return false;
    }
    if (!writeFile(absolute, moved, error)) return false;

    const bool contentMoved = json != json_;
    config_ = moved;
    json_ = parse_object(to_json_text(config_));
    updateVocab();
    const bool pathMoved = path_ != absolute;
    path_ = absolute;
    savedJson_ = json_;
    setDirty(false);
    // Earlier states may spell data paths from the old folder (a relative data.path since made
    // absolute would come back and resolve against the new one).
    if (contentMoved || newBase != oldBase) clearUndo();
    addRecent(absolute);
    if (pathMoved) emit pathChanged(path_);
    if (contentMoved) emit changed();
    return true;
}

bool ProjectDocument::writeFile(const QString& path, const ProjectConfig& config, QString* error)
{
    // QSaveFile writes a temporary file beside the target and renames it over the target on
    // commit, so a crash or a full disk never leaves a half-written project behind.
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        if (error) *error = tr("Cannot write '%1': %2").arg(path, file.errorString());
        return false;
    }
    const QByteArray text = QByteArray::fromStdString(to_json_text(config)) + '\n';
    if (file.write(text) != text.size() || !file.commit()) {
        if (error) *error = tr("Cannot write '%1': %2").arg(path, file.errorString());
        return false;
    }
    diskHash_ = QCryptographicHash::hash(text, QCryptographicHash::Sha256);
    return true;
}

bool ProjectDocument::setValue(const QString& dottedKey, const QJsonValue& value, QString* error)
{
    if (!hasProject_) return fail(dottedKey, tr("no project is open"), error);
    const QStringList parts = dottedKey.split(QLatin1Char('.'));
    if (dottedKey.isEmpty() || parts.contains(QString()))
        return fail(dottedKey, tr("'%1' is not a dotted key").arg(dottedKey), error);
    if (this->value(dottedKey) == value) {
        emit settled(); // the value typed back after a refusal: the refusal's message is out of date
        return true;
    }
    return apply(with_value(json_, parts, value), dottedKey, error);
}

bool ProjectDocument::apply(const QJsonObject& json, const QString& key, QString* error)
{
    const QJsonObject before = json_;
    if (!take(json, key, error)) return false;
    if (json_ == before) return true; // the loader resolved it to the same project
    undo_.append(before);
    if (undo_.size() > kMaxUndo) undo_.removeFirst();
    redo_.clear();
    emit undoChanged();
    return true;
}

bool ProjectDocument::undo() { return step(undo_, redo_); }
bool ProjectDocument::redo() { return step(redo_, undo_); }

bool ProjectDocument::step(QList<QJsonObject>& from, QList<QJsonObject>& to)
{
    if (from.isEmpty()) return false;
    const QJsonObject current = json_;
    // A state this document held validates again (same base folder), unless the machine
    // changed under it (its memory check): then it stays where it is and says why.
    if (!take(from.last(), QString(), nullptr)) return false;
    from.removeLast();
    to.append(current);
    emit undoChanged();
    return true;
}

void ProjectDocument::clearUndo()
{
    if (undo_.isEmpty() && redo_.isEmpty()) return;
    undo_.clear();
    redo_.clear();
    emit undoChanged();
}

bool ProjectDocument::take(const QJsonObject& json, const QString& key, QString* error)
{
    ProjectConfig validated;
    try {
        validated = load_project_json(QJsonDocument(json).toJson().toStdString(), config_.base_dir);
    } catch (const ConfigError& e) {
        return fail(key, QString::fromStdString(e.what()), error);
    }
    config_ = validated;
    json_ = parse_object(to_json_text(config_));
    updateVocab();
    setDirty(json_ != savedJson_); // edited back to what was saved: nothing to save
    emit changed();
    return true;
}

bool ProjectDocument::fail(const QString& key, const QString& message, QString* error)
{
    if (error) *error = message;
    emit validationFailed(key, message);
    return false;
}

bool ProjectDocument::setLayerFormat(const QString& layer, Gemm which, NumberFormat format, QString* error)
{
    if (!hasProject_) return fail(QStringLiteral("precision.layers"), tr("no project is open"), error);
    const std::string name = layer.toStdString();
    const auto names = gemm_layer_names(config_.model.n_layer);
    if (std::find(names.begin(), names.end(), name) == names.end())
        return fail(QStringLiteral("precision.layers"), tr("precision.layers: there is no layer '%1'").arg(layer),
                    error);
    const GemmFormats now = resolve_layer_formats(config_.precision, name, config_.model.n_layer);
    const NumberFormat current =
        which == Gemm::Forward ? now.forward : (which == Gemm::Dgrad ? now.dgrad : now.wgrad);
    if (current == format) {
        emit settled();
        return true;
    }
    const auto back = restoredWithoutOwnKey(layer, QLatin1String(gemm_key(which)), [&](const ProjectConfig& c) {
        const GemmFormats f = resolve_layer_formats(c.precision, name, c.model.n_layer);
        return (which == Gemm::Forward ? f.forward : (which == Gemm::Dgrad ? f.dgrad : f.wgrad)) == format;
    });
    if (back) return apply(*back, QStringLiteral("precision.layers"), error);
    QJsonObject fields;
    fields.insert(QLatin1String(gemm_key(which)), QLatin1String(format_name(format)));
    return applyLayerEntry(layer, fields, error);
}

std::optional<QJsonObject> ProjectDocument::withoutOwnKey(const QString& layer, const QString& key) const
{
    QJsonObject precision = json_.value(QLatin1String("precision")).toObject();
    QJsonArray layers = precision.value(QLatin1String("layers")).toArray();
    for (qsizetype i = layers.size() - 1; i >= 0; --i) {
        QJsonObject entry = layers.at(i).toObject();
        if (entry.value(QLatin1String("match")).toString() != layer) continue;
        if (!entry.contains(key)) return std::nullopt;
        entry.remove(key);
        if (entry.size() == 1) layers.removeAt(i); // only "match" is left
        else layers.replace(i, entry);
        precision.insert(QLatin1String("layers"), layers);
        QJsonObject json = json_;
        json.insert(QLatin1String("precision"), precision);
        return json;
    }
    return std::nullopt;
}

std::optional<QJsonObject> ProjectDocument::restoredWithoutOwnKey(
    const QString& layer, const QString& key, const std::function<bool(const ProjectConfig&)>& gives) const
{
    const auto json = withoutOwnKey(layer, key);
    if (!json) return std::nullopt;
    try {
        const ProjectConfig without =
            load_project_json(QJsonDocument(*json).toJson().toStdString(), config_.base_dir);
        if (gives(without)) return json;
    } catch (const ConfigError&) { // validated as an ordinary edit instead
    }
    return std::nullopt;
}

bool ProjectDocument::setLayerScaling(const QString& layer, Fp8Scaling scaling, QString* error)
{
    if (!hasProject_) return fail(QStringLiteral("precision.layers"), tr("no project is open"), error);
    const std::string name = layer.toStdString();
    const auto names = gemm_layer_names(config_.model.n_layer);
    if (std::find(names.begin(), names.end(), name) == names.end())
        return fail(QStringLiteral("precision.layers"), tr("precision.layers: there is no layer '%1'").arg(layer),
                    error);
    if (resolve_layer_recipe(config_.precision, name).scaling == scaling) {
        emit settled();
        return true;
    }
    const auto back = restoredWithoutOwnKey(layer, QStringLiteral("scaling"), [&](const ProjectConfig& c) {
        return resolve_layer_recipe(c.precision, name).scaling == scaling;
    });
    if (back) return apply(*back, QStringLiteral("precision.layers"), error);
    QJsonObject fields;
    fields.insert(QLatin1String("scaling"), QLatin1String(fp8_scaling_name(scaling)));
    return applyLayerEntry(layer, fields, error);
}

bool ProjectDocument::fillByPattern(const QString& glob, std::optional<NumberFormat> forward,
                                    std::optional<NumberFormat> dgrad, std::optional<NumberFormat> wgrad,
                                    std::optional<Fp8Scaling> scaling, QString* error)
{
    const QString key = QStringLiteral("precision.layers");
    if (!hasProject_) return fail(key, tr("no project is open"), error);
    const QString pattern = glob.trimmed();
    if (pattern.isEmpty()) return fail(key, tr("precision.layers: the pattern is empty"), error);
    if (!forward && !dgrad && !wgrad && !scaling)
        return fail(key, tr("precision.layers: choose at least one format or a scaling to set"), error);
    const auto names = gemm_layer_names(config_.model.n_layer);
    const bool matches = std::any_of(names.begin(), names.end(),
                                     [&](const std::string& n) { return glob_match(pattern.toStdString(), n); });
    if (!matches)
        return fail(key,
                    tr("precision.layers: pattern '%1' matches no layer (layers are named like "
                       "blocks.0.attn.qkv, blocks.0.mlp.fc1, lm_head)")
                        .arg(pattern),
                    error);
    QJsonObject fields;
    if (forward) fields.insert(QLatin1String("forward"), QLatin1String(format_name(*forward)));
    if (dgrad) fields.insert(QLatin1String("dgrad"), QLatin1String(format_name(*dgrad)));
    if (wgrad) fields.insert(QLatin1String("wgrad"), QLatin1String(format_name(*wgrad)));
    if (scaling) fields.insert(QLatin1String("scaling"), QLatin1String(fp8_scaling_name(*scaling)));
    return applyLayerEntry(pattern, fields, error);
}

bool ProjectDocument::applyLayerEntry(const QString& pattern, const QJsonObject& fields, QString* error)
{
    QJsonObject precision = json_.value(QLatin1String("precision")).toObject();
    QJsonArray layers = precision.value(QLatin1String("layers")).toArray();

    std::vector<std::string> covered;
    for (const std::string& name : gemm_layer_names(config_.model.n_layer))
        if (glob_match(pattern.toStdString(), name)) covered.push_back(name);

    // Reuse the pattern's own entry so repeated edits of one cell do not pile up entries,
    // unless a later entry sets the same thing for one of its layers: the last match wins.
    qsizetype target = -1;
    for (qsizetype i = layers.size() - 1; i >= 0; --i)
        if (layers.at(i).toObject().value(QLatin1String("match")).toString() == pattern) {
            target = i;
            break;
        }
    for (qsizetype j = target + 1; target >= 0 && j < layers.size(); ++j) {
        const QJsonObject later = layers.at(j).toObject();
        const std::string match = later.value(QLatin1String("match")).toString().toStdString();
        const bool overlaps =
            std::any_of(covered.begin(), covered.end(), [&](const std::string& n) { return glob_match(match, n); });
        const QStringList keys = fields.keys();
        const bool shadows =
            std::any_of(keys.begin(), keys.end(), [&](const QString& k) { return entry_sets(later, k); });
        if (overlaps && shadows) target = -1;
    }

    QJsonObject entry = target >= 0 ? layers.at(target).toObject() : QJsonObject{{QStringLiteral("match"), pattern}};
    for (auto it = fields.constBegin(); it != fields.constEnd(); ++it) entry.insert(it.key(), it.value());
    if (target >= 0) layers.replace(target, entry);
    else layers.append(entry);

    precision.insert(QLatin1String("layers"), layers);
    QJsonObject json = json_;
    json.insert(QLatin1String("precision"), precision);
    return apply(json, QStringLiteral("precision.layers"), error);
}

bool ProjectDocument::setPreset(const QString& preset, QString* error)
{
    if (!hasProject_) return fail(QStringLiteral("precision.preset"), tr("no project is open"), error);
    QJsonObject precision = json_.value(QLatin1String("precision")).toObject();
    precision.insert(QLatin1String("preset"), preset);
    precision.insert(QLatin1String("layers"), QJsonArray());
    QJsonObject json = json_;
    json.insert(QLatin1String("precision"), precision);
    if (json == json_) return true;
    return apply(json, QStringLiteral("precision.preset"), error);
}

void ProjectDocument::updateVocab()
{
    // Everything load_token_splits reads: the data section, the context length it checks the
    // splits against, the seed of the synthetic data, and the folder relative paths start from.
    QJsonObject inputs;
    inputs.insert(QLatin1String("data"), json_.value(QLatin1String("data")));
    inputs.insert(QLatin1String("context_length"), value(QStringLiteral("model.context_length")));
    inputs.insert(QLatin1String("seed"), value(QStringLiteral("training.seed")));
    inputs.insert(QLatin1String("base_dir"), QString::fromStdString(config_.base_dir));
    const QByteArray key = QJsonDocument(inputs).toJson(QJsonDocument::Compact);
    if (key == vocabKey_) return;
    vocabKey_ = key;
    vocabError_.clear(); // an error was about the previous data
    if (const auto cached = vocabCache_.constFind(key); cached != vocabCache_.constEnd()) {
        vocabSize_ = cached.value();
        vocabCounting_ = false;
        return;
    }
    vocabCounting_ = true; // vocabSize_ keeps the previous count meanwhile
    startVocabCount();
}

void ProjectDocument::startVocabCount()
{
    // One worker at a time: quick successive edits would otherwise tokenise several corpora
    // at once on the cores the GUI needs. The running one starts the next when it reports.
    if (vocabWorkerBusy_) return;
    vocabWorkerBusy_ = true;
    struct Result {
        qint64 size = 0;
        std::string error;
    };
    auto result = std::make_shared<Result>();
    QThread* worker = QThread::create([config = config_, result] {
        try {
            result->size = project_vocab_size(config);
        } catch (const std::exception& e) {
            // ConfigError for missing or short data; anything else is still no reason to crash an editor.
            result->error = e.what();
        }
    });
    // Queued to the GUI thread (the document lives there); dropped if the document is gone.
    connect(worker, &QThread::finished, this, [this, key = vocabKey_, result] {
        onVocabCounted(key, result->size, QString::fromStdString(result->error));
    });
    connect(worker, &QThread::finished, worker, &QObject::deleteLater);
    worker->start(QThread::LowPriority);
}

void ProjectDocument::onVocabCounted(const QByteArray& key, qint64 size, const QString& error)
{
    vocabWorkerBusy_ = false;
    // Failures are not cached: the missing file may be there the next time.
    if (error.isEmpty()) {
        if (vocabCache_.size() >= kVocabCacheEntries) vocabCache_.clear();
        vocabCache_.insert(key, size);
    }
    if (!vocabCounting_) return;
    if (key != vocabKey_) {
        startVocabCount(); // the data changed while this was counted: count the current data
        return;
    }
    vocabCounting_ = false;
    vocabSize_ = error.isEmpty() ? size : config_.data.vocab_size;
    vocabError_ = error;
    emit vocabChanged();
}

void ProjectDocument::setDirty(bool dirty)
{
    if (dirty_ == dirty) return;
    dirty_ = dirty;
    emit dirtyChanged(dirty_);
}

QStringList ProjectDocument::recentProjects() const
{
    QStringList existing;
    for (const QString& path : app_settings().value(kRecentKey).toStringList())
        if (QFileInfo::exists(path) && !existing.contains(path)) existing.append(path);
    return existing.mid(0, kMaxRecentProjects);
}

void ProjectDocument::clearRecentProjects()
{
    app_settings().remove(kRecentKey);
}

void ProjectDocument::addRecent(const QString& path)
{
    // The stored list, not recentProjects(): a project on a drive that is not mounted now is
    // only hidden from the menu, not forgotten.
    QStringList list = app_settings().value(kRecentKey).toStringList();
    list.removeAll(path);
    list.prepend(path);
    QSettings settings = app_settings();
    settings.setValue(kRecentKey, list.mid(0, kMaxRecentProjects));
}

} // namespace mantissa
