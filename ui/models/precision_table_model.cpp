// SPDX-License-Identifier: GPL-3.0-or-later
#include "models/precision_table_model.h"

#include <QBrush>
#include <QColor>
#include <QFont>
#include <QLocale>
#include <QPalette>

#include <optional>

#include "models/project_document.h"

namespace mantissa {
namespace {

// nvfp4 and mxfp4 take any FP8 format of the table as "low precision": the GEMM runs E2M1.
bool runs_e2m1(NumberFormat format, std::optional<Fp8Scaling> scaling)
{
    return format_info(format).is_fp8 && (scaling == Fp8Scaling::NvFp4 || scaling == Fp8Scaling::MxFp4);
}

// Light enough to read the default text on, in light and dark themes alike (the text is
// forced dark on tinted cells).
const QColor kFp8Tint(255, 214, 153);
const QColor kHalfTint(214, 232, 250);
const QColor kSwitchedTint(232, 205, 250); // the run differs from the project: a watcher switched it

const std::vector<Fp8Scaling> kScalings = fp8_scalings();

QStringList scaling_names()
{
    QStringList out;
    for (auto s : kScalings) out << QString::fromLatin1(fp8_scaling_name(s));
    return out;
}

QStringList format_names()
{
    QStringList out;
    for (const auto& n : number_format_names()) out << QString::fromStdString(n);
    return out;
}

std::optional<ProjectDocument::Gemm> gemm_of(int column)
{
    switch (column) {
    case PrecisionTableModel::ForwardColumn: return ProjectDocument::Gemm::Forward;
    case PrecisionTableModel::DgradColumn: return ProjectDocument::Gemm::Dgrad;
    case PrecisionTableModel::WgradColumn: return ProjectDocument::Gemm::Wgrad;
    default: return std::nullopt;
    }
}

NumberFormat pick(const GemmFormats& f, ProjectDocument::Gemm which)
{
    switch (which) {
    case ProjectDocument::Gemm::Forward: return f.forward;
    case ProjectDocument::Gemm::Dgrad: return f.dgrad;
    case ProjectDocument::Gemm::Wgrad: return f.wgrad;
    }
    return f.forward;
}

void put(GemmFormats& f, ProjectDocument::Gemm which, NumberFormat format)
{
    switch (which) {
    case ProjectDocument::Gemm::Forward: f.forward = format; return;
    case ProjectDocument::Gemm::Dgrad: f.dgrad = format; return;
    case ProjectDocument::Gemm::Wgrad: f.wgrad = format; return;
    }
}

} // namespace

PrecisionTableModel::PrecisionTableModel(ProjectDocument* document, QObject* parent)
    : QAbstractTableModel(parent), document_(document)
{
    qRegisterMetaType<mantissa::GemmFormats>();
    connect(document_, &ProjectDocument::changed, this, &PrecisionTableModel::refresh);
    connect(document_, &ProjectDocument::vocabChanged, this, &PrecisionTableModel::refresh); // lm_head's parameters
    refresh();
}

void PrecisionTableModel::refresh()
{
    std::vector<Row> fresh;
    if (document_->hasProject()) {
        const ProjectConfig& config = document_->config();
        // The preset alone, and with keep_last_bf16: a row that policy keeps in BF16 read
        // "bf16 (from the preset)" under an FP8 preset, and was not bold.
        PrecisionConfig kept = config.precision;
        kept.layers.clear();
        PrecisionConfig presetOnly = kept;
        presetOnly.keep_last_bf16 = 0;
        const int64_t n = config.model.n_layer;
        for (const LayerShape& shape : gemm_layer_shapes(config.model, document_->vocabSize())) {
            Row row;
            row.layer = shape.name;
            row.parameters = shape.parameters;
            row.tied = shape.tied;
            row.formats = resolve_layer_formats(config.precision, shape.name, n);
            row.presetFormats = resolve_layer_formats(presetOnly, shape.name, n);
            row.keptFormats = resolve_layer_formats(kept, shape.name, n);
            row.scaling = resolve_layer_recipe(config.precision, shape.name).scaling;
            fresh.push_back(std::move(row));
        }
        defaultScaling_ = config.precision.fp8.scaling;
    }
    if (fresh.size() != rows_.size()) {
        beginResetModel();
        rows_ = std::move(fresh);
        endResetModel();
        return;
    }
    rows_ = std::move(fresh);
    if (!rows_.empty()) emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
}

bool PrecisionTableModel::editFormats(const std::function<bool()>& edit, const Touched& touched,
                                      const std::string& scalingTouched)
{
    const std::vector<Row> before = rows_;
    if (!edit()) return false;
    // Only when the layer list stayed the same: a trainer cannot take a new model shape live.
    if (before.size() != rows_.size()) return true;
    constexpr ProjectDocument::Gemm kGemms[] = {ProjectDocument::Gemm::Forward, ProjectDocument::Gemm::Dgrad,
                                                ProjectDocument::Gemm::Wgrad};
    for (size_t i = 0; i < rows_.size(); ++i) {
        const Row& row = rows_[i];
        if (row.layer != before[i].layer) continue;
        // During a run the edit reaches only the GEMMs it set: the others keep what the engine
        // runs, so a watcher's switch of another GEMM of this layer is not undone.
        const LiveLayer* live = liveOf(row);
        GemmFormats running = live ? live->state.formats : before[i].formats;
        const int64_t switched_at = live ? live->switched_at : -1;
        if (const auto it = unconfirmed_.find(row.layer); it != unconfirmed_.end()) {
            if (it->second.switched_at == switched_at) running = it->second.formats; // still on its way
            else unconfirmed_.erase(it); // reported since: the engine's report is current
        }
        GemmFormats sent = running;
        for (const auto g : kGemms) {
            const bool set = pick(row.formats, g) != pick(before[i].formats, g) ||
                             (touched && touched->first == row.layer && touched->second == g);
            if (set) put(sent, g, pick(row.formats, g));
        }
        const bool engineMayDiffer = live && !scalingTouched.empty() && glob_match(scalingTouched, row.layer) &&
                                     live->state.recipe != fp8_scaling_name(row.scaling);
        const QString scaling = row.scaling != before[i].scaling || engineMayDiffer
                                    ? QString::fromLatin1(fp8_scaling_name(row.scaling))
                                    : QString();
        if (sent == running && scaling.isEmpty()) continue;
        std::optional<Unconfirmed> previous;
        if (const auto it = unconfirmed_.find(row.layer); it != unconfirmed_.end()) previous = it->second;
        if (live) unconfirmed_[row.layer] = {sent, switched_at};
        refused_ = false;
        emit layerFormatsEdited(QString::fromStdString(row.layer), sent, scaling);
        if (refused_) { // remembered as sent, the refused formats were sent again with the next edit
            if (previous) unconfirmed_[row.layer] = *previous;
            else unconfirmed_.erase(row.layer);
        }
    }
    return true;
}

bool PrecisionTableModel::applyPreset(const QString& preset, QString* error)
{
    return editFormats([&] { return document_->setPreset(preset, error); });
}

bool PrecisionTableModel::fillByPattern(const QString& glob, std::optional<NumberFormat> forward,
                                        std::optional<NumberFormat> dgrad, std::optional<NumberFormat> wgrad,
                                        std::optional<Fp8Scaling> scaling, QString* error)
{
    return editFormats([&] { return document_->fillByPattern(glob, forward, dgrad, wgrad, scaling, error); },
                       std::nullopt, scaling ? glob.trimmed().toStdString() : std::string());
}

bool PrecisionTableModel::setKeepLastBf16(int blocks, QString* error)
{
    return editFormats([&] { return document_->setValue(QStringLiteral("precision.keep_last_bf16"), blocks, error); });
}

void PrecisionTableModel::noteSentToEngine(const QString& layer, const GemmFormats& formats)
{
    const LiveLayer* live = live_ ? live_->find(layer.toStdString()) : nullptr;
    if (live) unconfirmed_[layer.toStdString()] = {formats, live->switched_at};
}

QString PrecisionTableModel::layerAt(int row) const
{
    if (row < 0 || row >= rowCount()) return {};
    return QString::fromStdString(rows_[static_cast<size_t>(row)].layer);
}

int PrecisionTableModel::rowForLayer(const QString& layer) const
{
    const std::string name = layer.toStdString();
    for (size_t i = 0; i < rows_.size(); ++i)
        if (rows_[i].layer == name) return static_cast<int>(i);
    return -1;
}

void PrecisionTableModel::setLiveLayers(const LiveLayers* live)
{
    live_ = live;
    liveRevision_ = live ? live->revision() : 0;
    unconfirmed_.clear();
    if (!rows_.empty()) emit dataChanged(index(0, ForwardColumn), index(rowCount() - 1, RunningColumn));
}

void PrecisionTableModel::liveLayersChanged()
{
    if (!live_ || live_->revision() == liveRevision_) return;
    liveRevision_ = live_->revision();
    if (!rows_.empty()) emit dataChanged(index(0, ForwardColumn), index(rowCount() - 1, RunningColumn));
}

const LiveLayer* PrecisionTableModel::liveOf(const Row& row) const
{
    return live_ ? live_->find(row.layer) : nullptr;
}

GemmFormats PrecisionTableModel::formatsAt(int row) const
{
    if (row < 0 || row >= rowCount()) return {};
    return rows_[static_cast<size_t>(row)].formats;
}

int PrecisionTableModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int PrecisionTableModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant PrecisionTableModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const Row& row = rows_[static_cast<size_t>(index.row())];
    const int column = index.column();
    const auto gemm = gemm_of(column);
    const bool usesFp8 = row.formats.any_fp8();
    const LiveLayer* live = liveOf(row);
    // The format a cell shows: the engine's while a run is going, else the project's.
    const GemmFormats& shown = live ? live->state.formats : row.formats;
    // The engine names a layer's recipe only where one of its GEMMs is FP8.
    const std::string projectRecipe = fp8_scaling_name(row.scaling);
    const std::string& shownRecipe = live && !live->state.recipe.empty() ? live->state.recipe : projectRecipe;
    const bool differs = (gemm && live && pick(shown, *gemm) != pick(row.formats, *gemm)) ||
                         (column == ScalingColumn && shownRecipe != projectRecipe);

    switch (role) {
    case Qt::DisplayRole:
    case Qt::EditRole:
        switch (column) {
        case LayerColumn: return QString::fromStdString(row.layer);
        case ParametersColumn:
            if (role == Qt::EditRole) return QVariant::fromValue<qint64>(row.parameters);
            if (row.parameters == 0) return QStringLiteral("—"); // attention core: no weights
            return row.tied ? tr("%1 (tied)").arg(QLocale().toString(static_cast<qint64>(row.parameters)))
                            : QLocale().toString(static_cast<qint64>(row.parameters));
        case ScalingColumn: return QString::fromStdString(role == Qt::EditRole ? projectRecipe : shownRecipe);
        case RunningColumn: {
            if (!live || role == Qt::EditRole) return QString();
            // No backend yet: before the first step, or after a switch until the next step ran.
            const char* unknown = live->switched_at >= 0 ? "pending" : "starting";
            QString text = QString::fromStdString(live->state.backend.empty() ? std::string(unknown)
                                                                              : live->state.backend);
            if (live->switched_at >= 0) text += QStringLiteral(" \u00b7 ") + QString::fromStdString(live->last_switch());
            return text;
        }
        default: {
            // Editing starts from the project's value: an edit changes the project (and the run).
            if (role == Qt::EditRole) return QString::fromLatin1(format_name(pick(row.formats, *gemm)));
            // The cell says what the GEMM runs; its tooltip and editor keep the stored format.
            const NumberFormat f = pick(shown, *gemm);
            const bool fp4 = runs_e2m1(f, parse_fp8_scaling(shownRecipe));
            return QString::fromLatin1(format_name(fp4 ? NumberFormat::E2M1 : f));
        }
        }
    case Qt::UserRole:
        if (column == ParametersColumn) return QVariant::fromValue<qint64>(row.parameters);
        return {};
    case ChoicesRole:
        if (gemm) return format_names();
        if (column == ScalingColumn) return scaling_names();
        return {};
    case Qt::FontRole: {
        if (differs) {
            QFont italic;
            italic.setItalic(true);
            italic.setBold(true);
            return italic;
        }
        const bool overridden = (gemm && pick(row.formats, *gemm) != pick(row.presetFormats, *gemm)) ||
                                (column == ScalingColumn && row.scaling != defaultScaling_);
        if (!overridden) return {};
        QFont bold;
        bold.setBold(true);
        return bold;
    }
    case Qt::BackgroundRole:
        if (differs) return QBrush(kSwitchedTint);
        if (gemm) {
            const NumberFormat f = pick(shown, *gemm);
            if (format_info(f).is_fp8) return QBrush(kFp8Tint);
            if (f == NumberFormat::BF16 || f == NumberFormat::FP16) return QBrush(kHalfTint);
        }
        return {};
    case Qt::ForegroundRole:
        if (gemm) {
            const NumberFormat f = pick(shown, *gemm);
            if (differs || format_info(f).is_fp8 || f == NumberFormat::BF16 || f == NumberFormat::FP16)
                return QBrush(Qt::black);
        }
        // The recipe only matters where a GEMM runs in FP8; still editable for when one does.
        if (column == ScalingColumn && !usesFp8) return QBrush(QPalette().color(QPalette::PlaceholderText));
        if (column == ParametersColumn && row.parameters == 0)
            return QBrush(QPalette().color(QPalette::PlaceholderText));
        return {};
    case Qt::TextAlignmentRole:
        if (column == ParametersColumn) return (Qt::AlignRight | Qt::AlignVCenter).toInt();
        return {};
    case Qt::ToolTipRole:
        switch (column) {
        case LayerColumn: return QString::fromStdString(row.layer);
        case ParametersColumn:
            return row.tied ? tr("Shares its weight with the token embedding: counted once in the estimate")
                            : tr("%1 trainable parameters (weight and bias)")
                                  .arg(QLocale().toString(static_cast<qint64>(row.parameters)));
        case ScalingColumn:
            if (differs) {
                const QString when = live->switched_at >= 0
                                         ? QStringLiteral(" (%1)").arg(QString::fromStdString(live->last_switch()))
                                         : QString();
                return tr("The run scales this layer with %1%2; the project says %3")
                    .arg(QString::fromStdString(shownRecipe), when, QString::fromStdString(projectRecipe));
            }
            return usesFp8 ? tr("FP8 scaling recipe of %1").arg(QString::fromStdString(row.layer))
                           : tr("No GEMM of this layer runs in FP8, so its scaling recipe is unused");
        case RunningColumn:
            if (!live) return tr("Shows what the engine runs while a run is going");
            return tr("%1 runs %2%3 on the %4 backend%5")
                .arg(QString::fromStdString(row.layer), QString::fromStdString(formats_as_run(live->state).describe()),
                     live->state.recipe.empty() ? QString() : QStringLiteral(" (%1 scaling)").arg(QString::fromStdString(live->state.recipe)),
                     QString::fromStdString(live->state.backend.empty() ? std::string("(not yet known)") : live->state.backend),
                     live->switched_at >= 0 ? tr("; last switched at %1").arg(QString::fromStdString(live->last_switch()))
                                            : QString());
        default: {
            if (differs)
                return tr("The run switched this GEMM to %1 (%2); the project says %3")
                    .arg(QString::fromLatin1(format_name(pick(shown, *gemm))),
                         QString::fromStdString(live->last_switch()),
                         QString::fromLatin1(format_name(pick(row.formats, *gemm))));
            const NumberFormat f = pick(row.formats, *gemm);
            const NumberFormat preset = pick(row.presetFormats, *gemm);
            const QString recipe = QLatin1String(fp8_scaling_name(row.scaling));
            const QString elements =
                runs_e2m1(f, row.scaling) ? tr("; under %1 the GEMM runs E2M1").arg(recipe) : QString();
            if (f == preset) return tr("%1 (from the preset)%2").arg(QString::fromLatin1(format_name(f)), elements);
            if (f == pick(row.keptFormats, *gemm))
                return tr("%1 (precision.keep_last_bf16 keeps this block in BF16; the preset says %2)")
                    .arg(QString::fromLatin1(format_name(f)), QString::fromLatin1(format_name(preset)));
            return tr("%1 (the preset says %2)%3")
                .arg(QString::fromLatin1(format_name(f)), QString::fromLatin1(format_name(preset)), elements);
        }
        }
    default:
        return {};
    }
}

bool PrecisionTableModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (role != Qt::EditRole ||
        !checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return false;
    const QString layer = layerAt(index.row());
    const std::string text = value.toString().trimmed().toStdString();
    QString error;
    if (const auto gemm = gemm_of(index.column())) {
        const auto format = parse_number_format(text);
        if (!format || !format_info(*format).gemm_operand) {
            emit document_->validationFailed(QStringLiteral("precision.layers"),
                                             tr("precision.layers: '%1' is not one of %2")
                                                 .arg(value.toString(), format_names().join(QStringLiteral(", "))));
            return false;
        }
        // The cell's own GEMM is sent even where the project already says this format: picking
        // the project's FP8 again is how a user takes back a watcher's switch to BF16.
        return editFormats([&] { return document_->setLayerFormat(layer, *gemm, *format, &error); },
                           std::make_pair(layer.toStdString(), *gemm));
    }
    if (index.column() == ScalingColumn) {
        const auto scaling = parse_fp8_scaling(text);
        if (!scaling) {
            emit document_->validationFailed(QStringLiteral("precision.layers"),
                                             tr("precision.layers: '%1' is not one of %2")
                                                 .arg(value.toString(), scaling_names().join(QStringLiteral(", "))));
            return false;
        }
        return editFormats([&] { return document_->setLayerScaling(layer, *scaling, &error); }, std::nullopt,
                           layer.toStdString());
    }
    return false;
}

QVariant PrecisionTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal) return {};
    if (role == Qt::DisplayRole) {
        switch (section) {
        case LayerColumn: return tr("Layer");
        case ParametersColumn: return tr("Parameters");
        case ForwardColumn: return tr("Forward");
        case DgradColumn: return tr("Dgrad");
        case WgradColumn: return tr("Wgrad");
        case ScalingColumn: return tr("Scaling");
        case RunningColumn: return tr("Running");
        default: return {};
        }
    }
    if (role == Qt::ToolTipRole) {
        switch (section) {
        case ForwardColumn: return tr("y = x Wᵀ: input × weight");
        case DgradColumn: return tr("dx = dy W: grad-output × weight");
        case WgradColumn: return tr("dW = dyᵀ x: grad-output × input");
        case ScalingColumn:
            return tr("How the layer's FP8 GEMMs are scaled: delayed (amax history), current, rowwise, mxfp8, "
                      "fp8-block; or nvfp4 and mxfp4, which cast them to FP4 instead. During a run a change "
                      "applies at the next step");
        case RunningColumn: return tr("During a run: the backend each layer runs on and its last precision switch");
        default: return {};
        }
    }
    return {};
}

Qt::ItemFlags PrecisionTableModel::flags(const QModelIndex& index) const
{
    if (!index.isValid()) return Qt::NoItemFlags;
    Qt::ItemFlags f = Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemNeverHasChildren;
    if (gemm_of(index.column()) || index.column() == ScalingColumn) f |= Qt::ItemIsEditable;
    return f;
}

} // namespace mantissa
