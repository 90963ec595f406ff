// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The project being edited. It keeps the resolved JSON (defaults filled in, as
// to_json_text writes it) next to the validated ProjectConfig, and every edit goes through
// the engine's own loader, so the editor can never hold a project the trainer would refuse.

#include <QByteArray>
#include <QHash>
#include <QJsonObject>
#include <QObject>
#include <QString>
#include <QStringList>

#include <functional>
#include <optional>

#include "project_config.h"

namespace mantissa {

class ProjectDocument : public QObject {
    Q_OBJECT

public:
    // The three GEMMs of a layer (see precision_policy.h).
    enum class Gemm { Forward, Dgrad, Wgrad };
    static constexpr int kMaxRecentProjects = 8;

    explicit ProjectDocument(QObject* parent = nullptr);

    // Loads with load_project_file; on failure returns false with the message and changes nothing.
    bool open(const QString& path, QString* error);
    // Writes the resolved project to path(); false when there is none yet or the write fails,
    // and when the file changed on disk since it was read or written here (another editor, a
    // git checkout: Save replaced it without a word) unless `overwriteChangedFile`;
    // savedOverAChange() then says that was the reason.
    bool save(QString* error, bool overwriteChangedFile = false);
    bool savedOverAChange() const { return changedOnDisk_; }
    // Atomic (temporary file + rename). Relative data.path / data.dir are rewritten so they
    // still name the same files from the new folder.
    bool saveAs(const QString& path, QString* error);
    // A project made elsewhere (a run's stored config, a new project); not dirty unless
    // `unsaved` (a file opened with --set overrides: it differs from the file). An empty
    // config.base_dir is taken from `path`'s folder.
    void setConfig(const ProjectConfig& config, const QString& path = {}, bool unsaved = false);

    bool hasProject() const { return hasProject_; }
    const ProjectConfig& config() const { return config_; }
    QString path() const { return path_; }
    bool isDirty() const { return dirty_; }
    // The resolved project as JSON (what to_json_text(config()) says).
    const QJsonObject& json() const { return json_; }
    // One dotted key's value; Undefined when there is no such key.
    QJsonValue value(const QString& dottedKey) const;

    // One edit, validated by the engine. Refused edits change nothing, return the engine's
    // message (it names the key) and emit validationFailed; accepted ones emit changed().
    bool setValue(const QString& dottedKey, const QJsonValue& value, QString* error);

    // Precision edits. A one-layer edit updates that layer's exact-match entry in
    // precision.layers, or appends one where a later entry would otherwise shadow it. An edit
    // back to what the layer gets without its entry's key drops the key (and the entry, once
    // it sets nothing): such entries stayed, and refused a smaller model.n_layer.
    bool setLayerFormat(const QString& layer, Gemm which, NumberFormat format, QString* error);
    bool setLayerScaling(const QString& layer, Fp8Scaling scaling, QString* error);
    // Appends one precision.layers entry for `glob`; unset values keep what layers have.
    bool fillByPattern(const QString& glob, std::optional<NumberFormat> forward, std::optional<NumberFormat> dgrad,
                       std::optional<NumberFormat> wgrad, std::optional<Fp8Scaling> scaling, QString* error);
    // Replaces precision.preset and drops every precision.layers entry.
    bool setPreset(const QString& preset, QString* error);

    // Every accepted edit that changed the project can be undone, and an undone one redone,
    // until another project is opened or set, or saved as into another folder (earlier states
    // may spell relative paths from the old one). A new edit drops what was undone.
    // Each emits changed() as an edit does, and undoChanged() when what can be undone changes.
    bool canUndo() const { return !undo_.isEmpty(); }
    bool canRedo() const { return !redo_.isEmpty(); }
    bool undo();
    bool redo();
    static constexpr int kMaxUndo = 200;

    // The vocabulary the data gives the model, for parameter counts and memory estimates.
    // Counting it reads and tokenises the whole corpus, so it is done on a worker thread
    // whenever the data (or what the loader checks it against) changes; these calls never
    // wait for it. While a count is under way vocabCounting() is true and vocabSize() keeps
    // the previous value; vocabChanged() is emitted when the count for the current data
    // arrives. A count for data that is no longer current is never shown. Counts are cached
    // per data section, so going back to earlier data is immediate. When the data cannot be
    // loaded, vocabError() says why and the size falls back to data.vocab_size (0 unless the
    // data is token files).
    qint64 vocabSize() const { return hasProject_ ? vocabSize_ : 0; }
    QString vocabError() const { return hasProject_ ? vocabError_ : QString(); }
    bool vocabCounting() const { return hasProject_ && vocabCounting_; }

    // Most recent first, files that no longer exist left out.
    QStringList recentProjects() const;
    void clearRecentProjects();

signals:
    void changed();
    void validationFailed(const QString& key, const QString& message);
    // An edit that changed nothing was accepted (the value it already had, typed back after a
    // refusal): as changed() for the messages of earlier refusals.
    void settled();
    void dirtyChanged(bool dirty);
    void pathChanged(const QString& path);
    // The vocabulary count for the current data arrived (vocabSize(), vocabError()).
    void vocabChanged();
    void undoChanged();

private:
    bool apply(const QJsonObject& json, const QString& key, QString* error);
    // Validates and takes `json`; the edits and undo/redo all end here.
    bool take(const QJsonObject& json, const QString& key, QString* error);
    bool step(QList<QJsonObject>& from, QList<QJsonObject>& to);
    void clearUndo();
    bool applyLayerEntry(const QString& pattern, const QJsonObject& fields, QString* error);
    // The project without `key` in `layer`'s own (exact-match, last) entry, and without the
    // entry if that leaves it empty; nullopt when the entry does not set the key.
    std::optional<QJsonObject> withoutOwnKey(const QString& layer, const QString& key) const;
    // That project, when it gives `layer` what `gives` asks for; nullopt otherwise.
    std::optional<QJsonObject> restoredWithoutOwnKey(const QString& layer, const QString& key,
                                                     const std::function<bool(const ProjectConfig&)>& gives) const;
    bool fail(const QString& key, const QString& message, QString* error);
    bool writeFile(const QString& path, const ProjectConfig& config, QString* error);
    static QByteArray fileHash(const QString& path); // empty when it cannot be read
    void setDirty(bool dirty);
    QByteArray diskHash_;     // of path_'s content as last read or written here
    QJsonObject savedJson_;   // json_ as last read or saved (empty: never, or with overrides)
    bool changedOnDisk_ = false;
    void addRecent(const QString& path);
    // After every change of config_: shows the cached count or starts counting.
    void updateVocab();
    void startVocabCount();
    void onVocabCounted(const QByteArray& key, qint64 size, const QString& error);

    ProjectConfig config_;
    QJsonObject json_;
    QList<QJsonObject> undo_, redo_; // earlier projects, newest last; undone ones, newest last
    QString path_;
    bool hasProject_ = false;
    bool dirty_ = false;

    QByteArray vocabKey_; // the data inputs the vocabulary is (being) counted for
    qint64 vocabSize_ = 0;
    QString vocabError_;
    bool vocabCounting_ = false;
    bool vocabWorkerBusy_ = false;
    QHash<QByteArray, qint64> vocabCache_; // successful counts by data inputs
};

} // namespace mantissa
