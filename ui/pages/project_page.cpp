// SPDX-License-Identifier: GPL-3.0-or-later
#include "pages/project_page.h"

#include <QApplication>
#include <QComboBox>
#include <QFileInfo>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QSplitter>
#include <QTableView>
#include <QTreeView>
#include <QVBoxLayout>

#include "models/choice_delegate.h"
#include "models/memory_estimate_model.h"
#include "models/project_document.h"
#include "models/project_settings_model.h"
#include "unread_settings.h"

namespace mantissa {
namespace {

const char* kErrorBoxStyle = "QLabel { background: #fdecea; color: #8a1c1c; border: 1px solid #e6a4a4;"
                             " border-radius: 4px; padding: 6px; }";
const char* kWarningBoxStyle = "QLabel { background: #fff4e0; color: #6b4500; border: 1px solid #e8c48a;"
                               " border-radius: 4px; padding: 6px; }";

QLabel* chip(const QString& text, const char* background, QWidget* parent)
{
    auto* label = new QLabel(text, parent);
    label->setStyleSheet(QStringLiteral("QLabel { background: %1; color: black; border-radius: 3px;"
                                        " padding: 1px 6px; }")
                             .arg(QLatin1String(background)));
    return label;
}

QComboBox* keep_combo(const QStringList& choices, QWidget* parent)
{
    auto* combo = new QComboBox(parent);
    combo->addItem(ProjectPage::tr("keep"));
    combo->addItems(choices);
    return combo;
}

// A refusal's red box, hidden until there is one; its text can be selected and copied.
QLabel* error_box(const QString& name, QWidget* parent)
{
    auto* label = new QLabel(parent);
    label->setObjectName(name);
    label->setWordWrap(true);
    label->setTextInteractionFlags(Qt::TextSelectableByMouse);
    label->setStyleSheet(QLatin1String(kErrorBoxStyle));
    label->hide();
    return label;
}

void compact_rows(QTableView* view)
{
    view->verticalHeader()->hide();
    view->verticalHeader()->setDefaultSectionSize(view->fontMetrics().height() + 8);
}

} // namespace

ProjectPage::ProjectPage(ProjectDocument* document, QWidget* parent)
    : QWidget(parent),
      document_(document),
      settingsModel_(new ProjectSettingsModel(document, this)),
      precisionModel_(new PrecisionTableModel(document, this)),
      memoryModel_(new MemoryEstimateModel(document, this)),
      delegate_(new ChoiceDelegate(this))
{
    // Header: which project, where, and whether it has unsaved edits.
    titleLabel_ = new QLabel(this);
    QFont titleFont = titleLabel_->font();
    titleFont.setPointSizeF(titleFont.pointSizeF() * 1.4);
    titleFont.setBold(true);
    titleLabel_->setFont(titleFont);
    pathLabel_ = new QLabel(this);
    pathLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    pathLabel_->setStyleSheet(QStringLiteral("QLabel { color: palette(placeholder-text); }"));
    runningLabel_ = new QLabel(tr("Run in progress: settings are locked; precision edits apply at the next step."),
                               this);
    runningLabel_->setStyleSheet(QLatin1String(kWarningBoxStyle));
    runningLabel_->hide();
    auto* header = new QHBoxLayout;
    header->addWidget(titleLabel_);
    header->addSpacing(12);
    header->addWidget(pathLabel_, 1);
    header->addWidget(runningLabel_);

    // Left: every setting, editable in place.
    settingsView_ = new QTreeView(this);
    settingsView_->setModel(settingsModel_);
    settingsView_->setItemDelegate(delegate_);
    settingsView_->setAlternatingRowColors(true);
    settingsView_->setUniformRowHeights(true);
    settingsView_->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::SelectedClicked |
                                   QAbstractItemView::EditKeyPressed);
    validationLabel_ = error_box(QStringLiteral("validationMessage"), this);
    auto* settingsBox = new QGroupBox(tr("Settings"), this);
    auto* left = new QVBoxLayout(settingsBox);
    left->addWidget(settingsView_, 1);
    left->addWidget(validationLabel_);

    // Right, top: the per-layer recipe and the tools that write many layers at once.
    presetCombo_ = new QComboBox(this);
    for (const auto& name : precision_preset_names()) presetCombo_->addItem(QString::fromStdString(name));
    applyPresetButton_ = new QPushButton(tr("Apply preset"), this);
    applyPresetButton_->setToolTip(tr("Sets precision.preset and removes every per-layer override"));
    auto* presetRow = new QHBoxLayout;
    presetRow->addWidget(new QLabel(tr("Preset"), this));
    presetRow->addWidget(presetCombo_);
    presetRow->addWidget(applyPresetButton_);
    keepLastBf16Spin_ = new QSpinBox(this);
    keepLastBf16Spin_->setRange(0, 0);
    keepLastBf16Spin_->setPrefix(tr("last "));
    keepLastBf16Spin_->setSuffix(tr(" blocks in BF16"));
    // "last 1 blocks" read as a slip: the suffix follows the count, also where the document sets it.
    connect(keepLastBf16Spin_, &QSpinBox::valueChanged, this, &ProjectPage::fitKeepLastBf16Suffix);
    keepLastBf16Spin_->setToolTip(tr("precision.keep_last_bf16: the last N transformer blocks run in BF16 whatever "
                                     "the preset, as the NVFP4 paper keeps them; per-layer entries still win"));
    presetRow->addWidget(keepLastBf16Spin_);
    presetRow->addStretch(1);
    presetRow->addWidget(chip(tr("FP8 / FP4"), "#ffd699", this)); // nvfp4 and mxfp4 cells (e2m1) take the FP8 tint
    presetRow->addWidget(chip(tr("BF16 / FP16"), "#d6e8fa", this));
    presetRow->addWidget(new QLabel(tr("<b>bold</b> = differs from the preset"), this));

    QStringList formats;
    for (const auto& n : number_format_names()) formats << QString::fromStdString(n);
    QStringList scalings;
    for (auto s : fp8_scalings())
        scalings << QString::fromLatin1(fp8_scaling_name(s));
    patternEdit_ = new QLineEdit(this);
    patternEdit_->setPlaceholderText(QStringLiteral("blocks.*.mlp.*"));
    patternEdit_->setToolTip(tr("A layer-name pattern; * matches any run of characters"));
    patternEdit_->setMinimumWidth(140);
    auto* fillRow = new QHBoxLayout;
    fillRow->addWidget(new QLabel(tr("Fill"), this));
    fillRow->addWidget(patternEdit_, 1);
    const QString fillLabels[4] = {tr("fwd"), tr("dgrad"), tr("wgrad"), tr("scaling")};
    for (int i = 0; i < 4; ++i) {
        fillCombos_[i] = keep_combo(i < 3 ? formats : scalings, this);
        fillRow->addWidget(new QLabel(fillLabels[i], this));
        fillRow->addWidget(fillCombos_[i]);
    }
    fillButton_ = new QPushButton(tr("Apply"), this);
    fillButton_->setToolTip(tr("Adds one precision.layers entry for the pattern; later entries win"));
    fillRow->addWidget(fillButton_);

    precisionView_ = new QTableView(this);
    precisionView_->setModel(precisionModel_);
    precisionView_->setItemDelegate(delegate_);
    precisionView_->setSelectionBehavior(QAbstractItemView::SelectItems);
    precisionView_->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::SelectedClicked |
                                    QAbstractItemView::EditKeyPressed);
    compact_rows(precisionView_);
    QHeaderView* precisionHeader = precisionView_->horizontalHeader();
    precisionHeader->setSectionResizeMode(QHeaderView::Stretch);
    precisionHeader->setSectionResizeMode(PrecisionTableModel::LayerColumn, QHeaderView::ResizeToContents);
    precisionHeader->setSectionResizeMode(PrecisionTableModel::ParametersColumn, QHeaderView::ResizeToContents);

    auto* precisionBox = new QGroupBox(tr("Precision per layer"), this);
    auto* precisionLayout = new QVBoxLayout(precisionBox);
    precisionLayout->addLayout(presetRow);
    precisionLayout->addLayout(fillRow);
    precisionLayout->addWidget(precisionView_, 1);
    // The table's own refusals (Fill, a typed cell, last blocks in BF16) beside the table: they
    // showed under the Settings tree across the page (read-only audit 'gui-deep').
    precisionValidationLabel_ = error_box(QStringLiteral("precisionValidationMessage"), this);
    precisionLayout->insertWidget(2, precisionValidationLabel_); // under the Fill row
    recipeNoteLabel_ = new QLabel(this);
    recipeNoteLabel_->setObjectName(QStringLiteral("recipeNote"));
    recipeNoteLabel_->setWordWrap(true);
    recipeNoteLabel_->setStyleSheet(QLatin1String(kWarningBoxStyle));
    recipeNoteLabel_->hide();
    precisionLayout->addWidget(recipeNoteLabel_);

    // Right, bottom: what the recipe costs in memory.
    memoryView_ = new QTableView(this);
    memoryView_->setModel(memoryModel_);
    memoryView_->setSelectionMode(QAbstractItemView::NoSelection);
    memoryView_->setFocusPolicy(Qt::NoFocus);
    compact_rows(memoryView_);
    QHeaderView* memoryHeader = memoryView_->horizontalHeader();
    memoryHeader->setSectionResizeMode(MemoryEstimateModel::ComponentColumn, QHeaderView::Stretch);
    memoryHeader->setSectionResizeMode(MemoryEstimateModel::SizeColumn, QHeaderView::ResizeToContents);
    memoryHeader->setSectionResizeMode(MemoryEstimateModel::ShareColumn, QHeaderView::ResizeToContents);
    // Tall enough for every row, so the estimate never needs a scroll bar.
    memoryView_->setMinimumHeight(memoryView_->verticalHeader()->defaultSectionSize() * MemoryEstimateModel::RowCount +
                                  memoryHeader->sizeHint().height() + 2 * memoryView_->frameWidth() + 2);
    memoryView_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    totalLabel_ = new QLabel(this);
    totalLabel_->setWordWrap(true);
    dataMessageLabel_ = new QLabel(this);
    dataMessageLabel_->setObjectName(QStringLiteral("dataMessage"));
    dataMessageLabel_->setWordWrap(true);
    dataMessageLabel_->setStyleSheet(QLatin1String(kWarningBoxStyle));
    dataMessageLabel_->hide();
    auto* memoryBox = new QGroupBox(tr("Memory estimate (one GPU, per micro-batch)"), this);
    auto* memoryLayout = new QVBoxLayout(memoryBox);
    memoryLayout->addWidget(memoryView_, 1);
    memoryLayout->addWidget(totalLabel_);
    memoryLayout->addWidget(dataMessageLabel_);

    auto* right = new QSplitter(Qt::Vertical, this);
    right->setObjectName(QStringLiteral("project.right")); // the key of its saved sizes (window_state.h)
    right->addWidget(precisionBox);
    right->addWidget(memoryBox);
    right->setStretchFactor(0, 3);
    right->setStretchFactor(1, 1);
    right->setChildrenCollapsible(false);

    auto* split = new QSplitter(Qt::Horizontal, this);
    split->setObjectName(QStringLiteral("project.split"));
    split->addWidget(settingsBox);
    split->addWidget(right);
    split->setStretchFactor(0, 2);
    split->setStretchFactor(1, 3);
    split->setChildrenCollapsible(false);
    // Wide enough for a setting's name and its value side by side; the splitter scales these
    // to the page's real width when it is first laid out.
    settingsBox->setMinimumWidth(360);
    split->setSizes({440, 960});

    auto* outer = new QVBoxLayout(this);
    outer->addLayout(header);
    outer->addWidget(split, 1);

    connect(applyPresetButton_, &QPushButton::clicked, this, &ProjectPage::applyPreset);
    connect(fillButton_, &QPushButton::clicked, this, &ProjectPage::fillByPattern);
    connect(keepLastBf16Spin_, &QSpinBox::valueChanged, this, &ProjectPage::setKeepLastBf16);
    connect(patternEdit_, &QLineEdit::returnPressed, this, &ProjectPage::fillByPattern);
    connect(precisionModel_, &PrecisionTableModel::layerFormatsEdited, this, &ProjectPage::layerFormatsEdited);
    connect(memoryModel_, &MemoryEstimateModel::estimateChanged, this, &ProjectPage::refreshTotals);
    connect(document_, &ProjectDocument::validationFailed, this,
            [this](const QString& key, const QString& message) { showValidation(key, message); });
    // A message stays until the next accepted edit, so the user can read it while fixing the value.
    const auto clearValidation = [this] {
        for (QLabel* label : {validationLabel_, precisionValidationLabel_}) {
            label->clear();
            label->hide();
        }
    };
    connect(document_, &ProjectDocument::changed, this, [this, clearValidation] {
        clearValidation();
        refreshHeader();
    });
    connect(document_, &ProjectDocument::settled, this, clearValidation); // it stayed, red, over a valid value
    connect(document_, &ProjectDocument::dirtyChanged, this, &ProjectPage::refreshHeader);
    connect(document_, &ProjectDocument::pathChanged, this, &ProjectPage::refreshHeader);
    // A new project (a reset) starts with its sections open and nested objects folded.
    connect(settingsModel_, &QAbstractItemModel::modelReset, this, [this] {
        settingsView_->expandToDepth(0);
        settingsView_->resizeColumnToContents(ProjectSettingsModel::SettingColumn);
    });
    settingsView_->expandToDepth(0);
    settingsView_->resizeColumnToContents(ProjectSettingsModel::SettingColumn);

    refreshHeader();
    refreshTotals();
}

QString ProjectPage::runningText() const { return runningLabel_->isHidden() ? QString() : runningLabel_->text(); }

void ProjectPage::setRunning(bool running, bool sweep)
{
    running_ = running;
    runningLabel_->setText(sweep ? tr("Sweep in progress: settings are locked; precision edits change the project "
                                      "only, not the sweep's runs.")
                                 : tr("Run in progress: settings are locked; precision edits apply at the next "
                                      "step."));
    settingsModel_->setReadOnly(running);
    settingsView_->setEditTriggers(running ? QAbstractItemView::NoEditTriggers
                                           : QAbstractItemView::DoubleClicked | QAbstractItemView::SelectedClicked |
                                                 QAbstractItemView::EditKeyPressed);
    runningLabel_->setVisible(running);
    precisionModel_->setRunning(running); // formats and recipes switch live
}

void ProjectPage::selectLayer(const QString& layer)
{
    const int row = precisionModel_->rowForLayer(layer);
    if (row < 0) return;
    const QModelIndex at = precisionModel_->index(row, PrecisionTableModel::LayerColumn);
    precisionView_->selectionModel()->setCurrentIndex(
        at, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    precisionView_->scrollTo(at, QAbstractItemView::PositionAtCenter);
}

void ProjectPage::applyPreset()
{
    precisionModel_->applyPreset(presetCombo_->currentText(), nullptr);
}

void ProjectPage::fillByPattern()
{
    const auto format = [this](int i) -> std::optional<NumberFormat> {
        if (fillCombos_[i]->currentIndex() <= 0) return std::nullopt;
        return parse_number_format(fillCombos_[i]->currentText().toStdString());
    };
    std::optional<Fp8Scaling> scaling;
    if (fillCombos_[3]->currentIndex() > 0) scaling = parse_fp8_scaling(fillCombos_[3]->currentText().toStdString());
    precisionModel_->fillByPattern(patternEdit_->text(), format(0), format(1), format(2), scaling, nullptr);
}

void ProjectPage::fitKeepLastBf16Suffix(int blocks)
{
    keepLastBf16Spin_->setSuffix(blocks == 1 ? tr(" block in BF16") : tr(" blocks in BF16"));
}

void ProjectPage::setKeepLastBf16(int blocks)
{
    if (!document_->hasProject() || document_->config().precision.keep_last_bf16 == blocks) return;
    QString error;
    if (!precisionModel_->setKeepLastBf16(blocks, &error))
        showValidation(QStringLiteral("precision.keep_last_bf16"), error);
}

void ProjectPage::refreshHeader()
{
    if (!document_->hasProject()) {
        titleLabel_->setText(tr("No project"));
        pathLabel_->clear();
        recipeNoteLabel_->hide();
        return;
    }
    const ProjectConfig& config = document_->config();
    QStringList notes;
    for (const auto& note : recipe_parts_left_out(config)) notes << QString::fromStdString(note);
    recipeNoteLabel_->setText(notes.join(QLatin1Char('\n')));
    recipeNoteLabel_->setVisible(!notes.isEmpty());
    const QString name = QString::fromStdString(config.name);
    titleLabel_->setText(document_->isDirty() ? tr("%1 •").arg(name) : name);
    titleLabel_->setToolTip(document_->isDirty() ? tr("Unsaved changes") : QString());
    const QString path = document_->path();
    pathLabel_->setText(path.isEmpty() ? tr("not saved yet")
                                       : (document_->isDirty() ? tr("%1 (modified)").arg(path) : path));
    const int presetAt = presetCombo_->findText(QString::fromStdString(config.precision.preset));
    if (presetAt >= 0) presetCombo_->setCurrentIndex(presetAt);
    const QSignalBlocker quiet(keepLastBf16Spin_); // showing the document's value is no edit
    keepLastBf16Spin_->setRange(0, static_cast<int>(config.model.n_layer));
    keepLastBf16Spin_->setValue(static_cast<int>(config.precision.keep_last_bf16));
    fitKeepLastBf16Suffix(keepLastBf16Spin_->value());
}

void ProjectPage::refreshTotals()
{
    if (!document_->hasProject()) {
        totalLabel_->clear();
        dataMessageLabel_->hide();
        return;
    }
    const MemoryBreakdown& b = memoryModel_->breakdown();
    const QString vocab = QLocale().toString(memoryModel_->vocabSize());
    totalLabel_->setText(tr("<b>Estimated total: %1</b> — %2 parameters, vocabulary %3, batch %4 × %5 tokens")
                             .arg(MemoryEstimateModel::formatBytes(b.total_bytes()),
                                  QLocale().toString(static_cast<qint64>(b.parameters)),
                                  memoryModel_->vocabCounting() ? tr("being counted (%1 until then)").arg(vocab) : vocab,
                                  QLocale().toString(static_cast<qint64>(document_->config().training.batch_size)),
                                  QLocale().toString(static_cast<qint64>(document_->config().model.context_length))));
    const QString error = memoryModel_->vocabError();
    dataMessageLabel_->setText(error.isEmpty() ? QString()
                                               : tr("The data could not be loaded, so the vocabulary size is "
                                                    "unknown (using %1): %2")
                                                     .arg(memoryModel_->vocabSize())
                                                     .arg(error));
    dataMessageLabel_->setVisible(!error.isEmpty());
}

void ProjectPage::showValidation(const QString& key, const QString& message)
{
    // What the table writes (its cells and Fill: precision.layers; the last blocks in BF16); the
    // same keys typed in the Settings tree are said there.
    const bool table = (key.startsWith(QLatin1String("precision.layers")) ||
                        key == QLatin1String("precision.keep_last_bf16")) &&
                       !settingsView_->hasFocus() && !settingsView_->isAncestorOf(QApplication::focusWidget());
    QLabel* shown = table ? precisionValidationLabel_ : validationLabel_;
    QLabel* other = table ? validationLabel_ : precisionValidationLabel_;
    other->clear();
    other->hide();
    shown->setText(message);
    shown->show();
}

} // namespace mantissa
