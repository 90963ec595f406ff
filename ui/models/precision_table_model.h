// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The recipe as a table: one row per GEMM-bearing layer with its parameter count, the format
// of each of its three GEMMs and its FP8 scaling. Cells that differ from the preset are bold
// and FP8 cells tinted, so a recipe reads at a glance. Edits go through ProjectDocument.
// During a run the format cells show what the engine runs (LiveLayers): a watcher's switch
// to BF16 appears in italics, with the project's value in the tooltip and in EditRole.

#include <QAbstractTableModel>
#include <QMetaType>
#include <QString>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "models/choice_delegate.h"
#include "models/live_layers.h"
#include "models/project_document.h"
#include "memory_model.h"
#include "precision_policy.h"

namespace mantissa {

class PrecisionTableModel : public QAbstractTableModel {
    Q_OBJECT

public:
    enum Column {
        LayerColumn = 0,
        ParametersColumn,
        ForwardColumn,
        DgradColumn,
        WgradColumn,
        ScalingColumn,
        RunningColumn, // during a run: what the engine runs, its backend and the last switch
        ColumnCount
    };
    static constexpr int ChoicesRole = ChoiceDelegate::ChoicesRole;

    explicit PrecisionTableModel(ProjectDocument* document, QObject* parent = nullptr);

    QString layerAt(int row) const;
    int rowForLayer(const QString& layer) const; // -1 when there is no such layer
    GemmFormats formatsAt(int row) const;
    // What the engine runs now; nullptr when no run is going. Not owned.
    void setLiveLayers(const LiveLayers* live);
    // The live layers may have changed (call after each drain): repaints the cells that did.
    void liveLayersChanged();

    // While a run goes, an edit of formats or of the scaling recipe reaches the trainer too
    // (layerFormatsEdited), which takes it at its next step boundary.
    void setRunning(bool running)
    {
        running_ = running;
        if (!running) unconfirmed_.clear();
    }

    // The page's preset and fill-by-pattern buttons: like the document's calls, plus
    // layerFormatsEdited for every layer whose formats changed.
    bool applyPreset(const QString& preset, QString* error);
    bool fillByPattern(const QString& glob, std::optional<NumberFormat> forward, std::optional<NumberFormat> dgrad,
                       std::optional<NumberFormat> wgrad, std::optional<Fp8Scaling> scaling, QString* error);
    // precision.keep_last_bf16, the same way: during a run the blocks it moves switch live.
    bool setKeepLastBf16(int blocks, QString* error);
    // A switch sent to the engine from elsewhere (the Monitor's layer menu): a table edit made
    // before the engine reports it builds on it, as on the table's own.
    void noteSentToEngine(const QString& layer, const GemmFormats& formats);
    // Called from a layerFormatsEdited slot: the engine refused that switch (the run is
    // finishing), so the next edit of the layer does not build on it.
    void refuseSent() { refused_ = true; }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;

signals:
    // After a user edit changed a layer's formats or its scaling recipe (`scaling`: the recipe's
    // name, "" where the edit left it); a running trainer can take it at the next step.
    void layerFormatsEdited(const QString& layer, const mantissa::GemmFormats& formats, const QString& scaling);

private:
    struct Row {
        std::string layer;
        int64_t parameters = 0;
        bool tied = false;
        GemmFormats formats;
        GemmFormats presetFormats; // what the preset alone gives, for the bold "overridden" cells
        GemmFormats keptFormats;   // the preset with precision.keep_last_bf16, without the layers entries
        Fp8Scaling scaling = Fp8Scaling::Delayed;
    };

    void refresh();
    const LiveLayer* liveOf(const Row& row) const;
    // A cell edit's layer and GEMM.
    using Touched = std::optional<std::pair<std::string, ProjectDocument::Gemm>>;
    // Runs a document edit; where it succeeds, layerFormatsEdited for each layer whose formats
    // or recipe it changed (the preset, fill-by-pattern, keep-last-BF16 and cell edits alike).
    // During a run the formats sent are the engine's with only the edited GEMMs (and `touched`)
    // replaced. `scalingTouched` (a glob): the layers whose recipe the edit set, sent also where
    // the project already said it but the engine runs another (or none it names: no FP8 GEMM),
    // which is how a user takes back a recipe switched from the Monitor or a server.
    bool editFormats(const std::function<bool()>& edit, const Touched& touched = std::nullopt,
                     const std::string& scalingTouched = {});

    ProjectDocument* document_;
    std::vector<Row> rows_;
    Fp8Scaling defaultScaling_ = Fp8Scaling::Delayed; // precision.fp8.scaling
    const LiveLayers* live_ = nullptr;
    bool running_ = false;
    uint64_t liveRevision_ = 0;
    // Formats sent to the engine and not yet reported back: the engine applies them at its next
    // step boundary, and a second edit before that must build on them, not on the stale report.
    // An entry holds until the layer's next reported switch (ours, or a watcher's).
    struct Unconfirmed {
        GemmFormats formats;
        int64_t switched_at = -1; // the layer's last reported switch when they were sent
    };
    std::map<std::string, Unconfirmed> unconfirmed_;
    bool refused_ = false; // set by refuseSent() during the emit
};

} // namespace mantissa

Q_DECLARE_METATYPE(mantissa::GemmFormats)
