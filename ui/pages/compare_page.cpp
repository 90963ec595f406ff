// SPDX-License-Identifier: GPL-3.0-or-later
#include "pages/compare_page.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFont>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSlider>
#include <QSplitter>
#include <QStandardItemModel>
#include <QTabWidget>
#include <QItemSelectionModel>
#include <QSet>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "plots/compare_plot.h"
#include "config_diff.h"
#include "plots/layer_diff_plot.h"
#include "plots/plot_export.h"
#include "precision_policy.h"
#include "project_config.h"
#include "common/secondary_text.h"
#include "common/run_format.h"
#include "run_store.h"
#include "controller/store_connection.h"
#include "sweep.h"
#include "common/table_export.h"

namespace mantissa {

namespace {

// Tableau 10: distinct on screen and in print, and readable as thin lines.
const QColor kPalette[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),  QColor(214, 39, 40),
                           QColor(148, 103, 189), QColor(140, 86, 75),  QColor(227, 119, 194), QColor(127, 127, 127),
                           QColor(188, 189, 34),  QColor(23, 190, 207)};

QColor run_color(size_t i) { return kPalette[i % std::size(kPalette)]; }

QString exact(double v) { return std::isfinite(v) ? QString::number(v, 'g', 17) : QString(); }

QStandardItem* cell(const QString& text, const QVariant& exactValue = {}, bool number = false)
{
    auto* item = new QStandardItem(text);
    item->setEditable(false);
    if (exactValue.isValid()) {
        item->setData(exactValue, kCsvExportRole);
        item->setData(exactValue, Qt::UserRole);
    }
    if (number) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    return item;
}

std::vector<std::string> layer_order_of(const std::string& config_json)
{
    try {
        return gemm_layer_names(load_run_config(config_json).model.n_layer);
    } catch (const ConfigError&) {
        return {}; // an unreadable config: no layer order, the heatmap lists layers by name
    }
}

QString stat_label(LayerDiffStat stat, const QString& role)
{
    switch (stat) {
    case LayerDiffStat::UnderflowPercent: return QObject::tr("Δ underflow of %1 (% points)").arg(role);
    case LayerDiffStat::OverflowPercent: return QObject::tr("Δ overflow of %1 (% points)").arg(role);
    case LayerDiffStat::AmaxLog10Ratio: return QObject::tr("log10 amax ratio of %1").arg(role);
    case LayerDiffStat::GradNorm: return QObject::tr("Δ gradient norm");
    }
    return {};
}

QTableView* make_table(QAbstractItemModel* model, QWidget* parent)
{
    auto* view = new QTableView(parent);
    view->setModel(model);
    view->setSelectionBehavior(QAbstractItemView::SelectRows);
    view->setEditTriggers(QAbstractItemView::NoEditTriggers);
    view->setAlternatingRowColors(true);
    view->setWordWrap(false);
    view->verticalHeader()->hide();
    view->verticalHeader()->setDefaultSectionSize(view->fontMetrics().height() + 8);
    view->horizontalHeader()->setHighlightSections(false);
    view->horizontalHeader()->setStretchLastSection(true);
    return view;
}

} // namespace

ComparePage::ComparePage(StoreConnection* store, QWidget* parent) : QWidget(parent), store_(store)
{
    // The local run and another process's write no "changed" signal: a shown run that trains
    // is read again (only when its steps, status or evaluation moved; see reload()).
    followTimer_ = new QTimer(this);
    followTimer_->setInterval(2000);
    connect(followTimer_, &QTimer::timeout, this, &ComparePage::followTick);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(8, 6, 8, 6);
    layout->setSpacing(6);

    headerLabel_ = new QLabel(this);
    headerLabel_->setObjectName(QStringLiteral("compareHeader"));
    headerLabel_->setTextFormat(Qt::RichText);
    headerLabel_->setWordWrap(true);
    layout->addWidget(headerLabel_);
    layout->addWidget(buildControls());
    messageLabel_ = new QLabel(this);
    messageLabel_->setObjectName(QStringLiteral("compareMessage"));
    messageLabel_->setWordWrap(true);
    messageLabel_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    messageLabel_->hide();
    layout->addWidget(messageLabel_);

    auto* splitter = new QSplitter(Qt::Vertical, this);
    splitter->setObjectName(QStringLiteral("compare.split")); // the key of its saved sizes (window_state.h)
    splitter->setChildrenCollapsible(false);
    plot_ = new ComparePlot(splitter);
    plot_->setObjectName(QStringLiteral("comparePlot"));
    plot_->setSmoothing(smoothing_);
    install_plot_export_menu(plot_, QStringLiteral("compare"));
    splitter->addWidget(plot_);

    tabs_ = new QTabWidget(splitter);
    tabs_->setDocumentMode(true);
    // Summary.
    auto* summaryTab = new QWidget(tabs_);
    auto* summaryLayout = new QVBoxLayout(summaryTab);
    summaryLayout->setContentsMargins(0, 4, 0, 0);
    auto* summaryTop = new QHBoxLayout;
    referenceLabel_ = new QLabel(summaryTab);
    show_as_secondary(referenceLabel_);
    summaryTop->addWidget(referenceLabel_, 1);
    auto* summaryExport = new QPushButton(tr("Export CSV…"), summaryTab);
    connect(summaryExport, &QPushButton::clicked, this, [this] { askExportTable(true); });
    summaryTop->addWidget(summaryExport);
    summaryLayout->addLayout(summaryTop);
    summaryModel_ = new QStandardItemModel(0, SumColumnCount, this);
    summaryModel_->setHorizontalHeaderLabels({tr("Run"), tr("Name"), tr("Recipe"), tr("Status"), tr("Steps"),
                                              tr("Final val"), tr("Best val"), tr("Δ val vs ref"), tr("Tokens/s"),
                                              tr("× ref"), tr("Peak memory"), tr("× ref"), tr("Skipped"),
                                              tr("Diverges at")});
    summaryView_ = make_table(summaryModel_, summaryTab);
    summaryView_->setObjectName(QStringLiteral("summaryTable"));
    summaryView_->horizontalHeader()->setStretchLastSection(false);
    summaryView_->horizontalHeader()->setSectionResizeMode(SumName, QHeaderView::Stretch);
    const std::pair<int, int> widths[] = {{SumRun, 52},        {SumName, 330},       {SumRecipe, 170},
                                          {SumStatus, 76},     {SumSteps, 60},       {SumFinalVal, 80},
                                          {SumBestVal, 80},    {SumDeltaVal, 92},    {SumTokensPerS, 78},
                                          {SumTokensRatio, 62}, {SumPeakMemory, 96}, {SumMemoryRatio, 62},
                                          {SumSkipped, 64},       {SumDiverges, 120}};
    for (const auto& [column, width] : widths) summaryView_->setColumnWidth(column, width);
    summaryLayout->addWidget(summaryView_, 1);
    tabs_->addTab(summaryTab, tr("Summary"));

    // Config diff.
    auto* diffTab = new QWidget(tabs_);
    auto* diffLayout = new QVBoxLayout(diffTab);
    diffLayout->setContentsMargins(0, 4, 0, 0);
    auto* diffTop = new QHBoxLayout;
    diffLabel_ = new QLabel(diffTab);
    show_as_secondary(diffLabel_);
    diffTop->addWidget(diffLabel_, 1);
    auto* diffExport = new QPushButton(tr("Export CSV…"), diffTab);
    connect(diffExport, &QPushButton::clicked, this, [this] { askExportTable(false); });
    diffTop->addWidget(diffExport);
    diffLayout->addLayout(diffTop);
    diffModel_ = new QStandardItemModel(this);
    diffView_ = make_table(diffModel_, diffTab);
    diffView_->setObjectName(QStringLiteral("configDiffTable"));
    diffLayout->addWidget(diffView_, 1);
    tabs_->addTab(diffTab, tr("Config diff"));

    tabs_->addTab(buildLayerTab(), tr("Layer statistics"));
    connect(tabs_, &QTabWidget::currentChanged, this, [this](int index) {
        if (index == int(Tab::LayerStats) && layerDirty_) updateLayerDiff();
    });
    splitter->addWidget(tabs_);
    splitter->setStretchFactor(0, 3);
    splitter->setStretchFactor(1, 2);
    layout->addWidget(splitter, 1);

    rebuildHeader();
    rebuildSummary();
    rebuildConfigDiff();
}

ComparePage::~ComparePage() = default;

QWidget* ComparePage::buildControls()
{
    auto* bar = new QWidget(this);
    auto* row = new QHBoxLayout(bar);
    row->setContentsMargins(0, 0, 0, 0);
    row->setSpacing(6);

    row->addWidget(new QLabel(tr("Metric"), bar));
    metricCombo_ = new QComboBox(bar);
    metricCombo_->setObjectName(QStringLiteral("metricCombo"));
    metricCombo_->setMinimumContentsLength(18);
    metricCombo_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    metricCombo_->setToolTip(tr("Any scalar the shown runs recorded"));
    row->addWidget(metricCombo_);
    connect(metricCombo_, &QComboBox::currentTextChanged, this, [this](const QString& tag) {
        if (!syncing_ && !tag.isEmpty()) setMetric(tag);
    });

    row->addSpacing(8);
    row->addWidget(new QLabel(tr("X axis"), bar));
    xAxisCombo_ = new QComboBox(bar);
    xAxisCombo_->addItem(tr("Step"), int(XAxisMode::Step));
    xAxisCombo_->addItem(tr("Tokens"), int(XAxisMode::Tokens));
    xAxisCombo_->addItem(tr("Time"), int(XAxisMode::Seconds));
    xAxisCombo_->setToolTip(tr("Optimizer steps, tokens trained on, or training wall time (evaluations excluded)"));
    row->addWidget(xAxisCombo_);
    connect(xAxisCombo_, &QComboBox::currentIndexChanged, this, [this](int index) {
        if (!syncing_) setXAxisMode(static_cast<XAxisMode>(xAxisCombo_->itemData(index).toInt()));
    });

    row->addSpacing(8);
    row->addWidget(new QLabel(tr("Smoothing"), bar));
    smoothingSlider_ = new QSlider(Qt::Horizontal, bar);
    smoothingSlider_->setRange(0, 99);
    smoothingSlider_->setFixedWidth(120);
    smoothingSlider_->setValue(static_cast<int>(std::lround(smoothing_ * 100)));
    smoothingSlider_->setToolTip(tr("TensorBoard's smoothing weight: a debiased exponential moving average"));
    row->addWidget(smoothingSlider_);
    smoothingLabel_ = new QLabel(QString::number(smoothing_, 'f', 2), bar);
    smoothingLabel_->setMinimumWidth(smoothingLabel_->fontMetrics().horizontalAdvance(QStringLiteral("0.000")));
    row->addWidget(smoothingLabel_);
    connect(smoothingSlider_, &QSlider::valueChanged, this, [this](int value) {
        if (!syncing_) setSmoothing(value / 100.0);
    });
    logScaleBox_ = new QCheckBox(tr("Log scale"), bar);
    row->addWidget(logScaleBox_);
    connect(logScaleBox_, &QCheckBox::toggled, this, [this](bool on) {
        if (!syncing_) setLogScale(on);
    });

    row->addSpacing(16);
    row->addWidget(new QLabel(tr("Divergence tolerance"), bar));
    toleranceSpin_ = new QDoubleSpinBox(bar);
    toleranceSpin_->setObjectName(QStringLiteral("toleranceSpin"));
    toleranceSpin_->setDecimals(4);
    toleranceSpin_->setRange(0.0, 1e6);
    toleranceSpin_->setSingleStep(0.01);
    toleranceSpin_->setValue(tolerance_);
    toleranceSpin_->setToolTip(tr("The first step where a run's train loss differs from the reference run's (bold "
                                  "in the summary: the FP32 run where one is shown) by more than this is marked"));
    row->addWidget(toleranceSpin_);
    relativeBox_ = new QCheckBox(tr("Relative"), bar);
    relativeBox_->setToolTip(tr("Tolerance as a fraction of the larger loss instead of an absolute difference"));
    row->addWidget(relativeBox_);
    connect(toleranceSpin_, &QDoubleSpinBox::valueChanged, this, [this](double v) {
        if (!syncing_) setTolerance(v, relative_);
    });
    connect(relativeBox_, &QCheckBox::toggled, this, [this](bool on) {
        if (!syncing_) setTolerance(tolerance_, on);
    });

    row->addStretch(1);
    auto* exportButton = new QPushButton(tr("Export plot…"), bar);
    exportButton->setToolTip(tr("Save the curves as PNG or PDF"));
    connect(exportButton, &QPushButton::clicked, this, [this] { askExportPlot(false); });
    row->addWidget(exportButton);
    return bar;
}

QWidget* ComparePage::buildLayerTab()
{
    auto* tab = new QWidget(tabs_);
    auto* layout = new QVBoxLayout(tab);
    layout->setContentsMargins(0, 4, 0, 0);
    auto* row = new QHBoxLayout;
    row->setSpacing(6);
    row->addWidget(new QLabel(tr("Statistic"), tab));
    layerStatCombo_ = new QComboBox(tab);
    layerStatCombo_->addItem(tr("Underflow %"), int(LayerDiffStat::UnderflowPercent));
    layerStatCombo_->addItem(tr("Overflow %"), int(LayerDiffStat::OverflowPercent));
    layerStatCombo_->addItem(tr("Amax (log10 ratio)"), int(LayerDiffStat::AmaxLog10Ratio));
    layerStatCombo_->addItem(tr("Gradient norm"), int(LayerDiffStat::GradNorm));
    row->addWidget(layerStatCombo_);
    row->addWidget(new QLabel(tr("Tensor"), tab));
    layerRoleCombo_ = new QComboBox(tab);
    for (const auto& role : RunHistory::roles()) layerRoleCombo_->addItem(QString::fromStdString(role));
    layerRoleCombo_->setCurrentText(layerRole_);
    row->addWidget(layerRoleCombo_);
    row->addWidget(new QLabel(tr("First run minus"), tab));
    layerOtherCombo_ = new QComboBox(tab);
    // Room for "#12 name [precision.preset=fp8-hybrid]"; longer names elide. At 44 characters, with
    // the label beside it, the row held the window wider than the screen once this tab was shown.
    layerOtherCombo_->setMinimumContentsLength(28);
    layerOtherCombo_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    row->addWidget(layerOtherCombo_);
    layerLabel_ = new QLabel(tab);
    show_as_secondary(layerLabel_);
    // Takes the room left and no more (the whole text is its tooltip): a label's minimum is its
    // text's width otherwise.
    layerLabel_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    row->addWidget(layerLabel_, 1);
    auto* exportButton = new QPushButton(tr("Export plot…"), tab);
    connect(exportButton, &QPushButton::clicked, this, [this] { askExportPlot(true); });
    row->addWidget(exportButton);
    layout->addLayout(row);
    layerPlot_ = new LayerDiffPlot(tab);
    layerPlot_->setObjectName(QStringLiteral("layerDiffPlot"));
    install_plot_export_menu(layerPlot_, QStringLiteral("layer-diff"));
    layout->addWidget(layerPlot_, 1);

    connect(layerStatCombo_, &QComboBox::currentIndexChanged, this, [this](int index) {
        if (!syncing_) setLayerStat(static_cast<LayerDiffStat>(layerStatCombo_->itemData(index).toInt()), layerRole_);
    });
    connect(layerRoleCombo_, &QComboBox::currentTextChanged, this, [this](const QString& role) {
        if (!syncing_) setLayerStat(layerStat_, role);
    });
    connect(layerOtherCombo_, &QComboBox::currentIndexChanged, this, [this](int index) {
        if (!syncing_ && index >= 0) setLayerDiffOther(layerOtherCombo_->itemData(index).toLongLong());
    });
    return tab;
}

// ---- data ----------------------------------------------------------------------------

bool ComparePage::setRuns(const std::vector<int64_t>& ids) { return loadRuns(ids, std::nullopt); }

bool ComparePage::loadRuns(const std::vector<int64_t>& ids, std::optional<std::vector<RunSummaryRow>> rows)
{
    clearMessage();
    std::vector<RunData> previous = std::move(runs_);
    runs_.clear();
    metrics_.clear();
    divergence_.clear();
    layerDirty_ = true;
    if (ids.empty()) {
        rebuildHeader();
        rebuildCurves();
        rebuildSummary();
        rebuildConfigDiff();
        syncLayerControls();
        return fail(tr("Select one or more runs on the Runs page to compare them."));
    }
    QString error;
    RunStore* store = store_->store(&error);
    if (!store) {
        rebuildHeader();
        rebuildCurves();
        rebuildSummary();
        rebuildConfigDiff();
        syncLayerControls();
        return fail(error);
    }
    QStringList missing;
    try {
        RunFilter filter;
        filter.ids = ids;
        std::map<int64_t, RunSummaryRow> byId;
        if (!rows) rows = store->list_run_summaries(filter, &medianCache_);
        for (auto& r : *rows) byId[r.id] = std::move(r);
        std::vector<std::string> tags;
        for (const int64_t id : ids) {
            const auto it = byId.find(id);
            if (it == byId.end()) {
                missing << QString::number(id);
                continue;
            }
            if (std::any_of(runs_.begin(), runs_.end(), [id](const RunData& r) { return r.row.id == id; })) continue;
            RunData run;
            run.row = it->second;
            try {
                run.tokensPerStep = tokens_per_step(run.row.config_json);
            } catch (const std::exception&) {
                run.tokensPerStep = 0.0; // an unreadable config: no tokens axis for this run
            }
            run.layerOrder = layer_order_of(run.row.config_json);
            run.storePath = store_->path();
            // Same run, not running: its series cannot have changed, keep what was read. The
            // same id is another run in another store (a remote one's replica, switched to) or
            // after a delete elsewhere; a replica's last evaluation can land after its status.
            for (RunData& old : previous)
                if (old.row.id == id && old.storePath == run.storePath && old.row.created_at == run.row.created_at &&
                    old.row.status == run.row.status && old.row.steps_done == run.row.steps_done &&
                    old.row.final_val_step == run.row.final_val_step && run.row.status != RunStatus::Running) {
                    run.series = std::move(old.series);
                    run.stepTimes = std::move(old.stepTimes);
                }
            for (auto& t : store->scalar_tags(id)) tags.push_back(std::move(t));
            runs_.push_back(std::move(run));
        }
        std::sort(tags.begin(), tags.end());
        tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
        for (const char* first : {"train/loss", "val/loss"})
            if (std::binary_search(tags.begin(), tags.end(), std::string(first))) metrics_ << QString::fromLatin1(first);
        for (const auto& t : tags)
            if (t != "train/loss" && t != "val/loss") metrics_ << QString::fromStdString(t);
        if (!metrics_.contains(metric_)) metric_ = metrics_.isEmpty() ? QStringLiteral("train/loss") : metrics_.first();
        computeDivergence();
    } catch (const std::exception& e) {
        store_->close();
        runs_.clear();
        metrics_.clear();
        rebuildHeader();
        rebuildCurves();
        rebuildSummary();
        rebuildConfigDiff();
        syncLayerControls();
        return fail(tr("Cannot read the run store: %1").arg(QString::fromStdString(e.what())));
    }

    syncing_ = true;
    metricCombo_->clear();
    metricCombo_->addItems(metrics_);
    metricCombo_->setCurrentText(metric_);
    syncing_ = false;
    if (runs_.size() < 2) layerOther_ = -1;
    else if (std::none_of(runs_.begin() + 1, runs_.end(), [this](const RunData& r) { return r.row.id == layerOther_; }))
        layerOther_ = runs_[1].row.id;
    rebuildHeader();
    rebuildCurves();
    rebuildSummary();
    rebuildConfigDiff();
    syncLayerControls();
    if (tabs_->currentIndex() == int(Tab::LayerStats)) updateLayerDiff();

    if (runs_.empty())
        return fail(missing.size() == 1 ? tr("Run %1 is no longer in the store.").arg(missing.first())
                                        : tr("Runs %1 are no longer in the store.").arg(missing.join(QStringLiteral(", "))));
    if (!missing.isEmpty())
        note(tr("Left out, no longer in the store: run %1.").arg(missing.join(QStringLiteral(", "))));
    lastError_.clear();
    followRunningRuns();
    return true;
}

std::vector<int64_t> ComparePage::runIds() const
{
    std::vector<int64_t> ids;
    for (const RunData& r : runs_) ids.push_back(r.row.id);
    return ids;
}

bool ComparePage::reload()
{
    if (runs_.empty()) return true;
    if (!isVisible()) {
        reloadWhenShown_ = true;
        return true;
    }
    reloadWhenShown_ = false;
    std::optional<std::vector<RunSummaryRow>> rows;
    return runsChangedInStore(rows) ? loadRuns(runIds(), std::move(rows)) : true;
}

void ComparePage::followTick()
{
    if (!isVisible() || runs_.empty()) return;
    // A read that fails on a tick (the store busy or replaced a moment) keeps what the page
    // shows: through reload() it emptied the page, and the runs had to be picked again.
    std::optional<std::vector<RunSummaryRow>> rows;
    bool failed = false;
    if (runsChangedInStore(rows, &failed) && !failed) loadRuns(runIds(), std::move(rows));
}

bool ComparePage::runsChangedInStore(std::optional<std::vector<RunSummaryRow>>& rows, bool* readFailed) const
{
    RunStore* store = store_->store();
    if (!store) {
        if (readFailed) *readFailed = true;
        return true; // loadRuns says why
    }
    try {
        RunFilter filter;
        filter.ids = runIds();
        rows = store->list_run_summaries(filter, &medianCache_); // loadRuns takes them: one read
        if (rows->size() != runs_.size()) return true;
        for (const auto& now : *rows) {
            const auto was = std::find_if(runs_.begin(), runs_.end(), [&](const RunData& r) { return r.row.id == now.id; });
            if (was == runs_.end() || was->storePath != store_->path()) return true;
            const RunSummaryRow& w = was->row;
            if (w.status != now.status || w.steps_done != now.steps_done || w.final_val_step != now.final_val_step ||
                w.name != now.name || w.tags != now.tags || w.created_at != now.created_at)
                return true;
        }
        return false;
    } catch (const std::exception&) {
        if (readFailed) *readFailed = true;
        return true;
    }
}

void ComparePage::showEvent(QShowEvent* event)
{
    QWidget::showEvent(event);
    // A run that was training when last shown has grown since, though nothing said so.
    if (reloadWhenShown_ || showsTrainingRun()) reload();
    followRunningRuns();
}

void ComparePage::changeEvent(QEvent* event)
{
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange && runs_.empty()) rebuildHeader();
}

void ComparePage::hideEvent(QHideEvent* event)
{
    QWidget::hideEvent(event);
    followRunningRuns();
}

bool ComparePage::showsTrainingRun() const
{
    return std::any_of(runs_.begin(), runs_.end(),
                       [](const RunData& r) { return r.row.status == RunStatus::Running; });
}

void ComparePage::followRunningRuns()
{
    if (showsTrainingRun() && isVisible()) {
        if (!followTimer_->isActive()) followTimer_->start();
    } else {
        followTimer_->stop();
    }
}

const Series& ComparePage::seriesOf(RunData& run, const std::string& tag)
{
    auto it = run.series.find(tag);
    if (it != run.series.end()) return it->second;
    Series s;
    if (RunStore* store = store_->store()) {
        try {
            s = store->series(run.row.id, tag);
        } catch (const std::exception& e) {
            fail(tr("Cannot read %1 of run %2: %3")
                     .arg(QString::fromStdString(tag))
                     .arg(run.row.id)
                     .arg(QString::fromStdString(e.what())));
        }
    }
    return run.series.emplace(tag, std::move(s)).first->second;
}

std::vector<XYPoint> ComparePage::pointsOf(RunData& run, const Series& series)
{
    switch (mode_) {
    case XAxisMode::Tokens: // the run's own record: a resume may have changed the batch
        return series_by_recorded_tokens(series, seriesOf(run, "tokens_per_s"), seriesOf(run, "step_time_ms"),
                                         run.tokensPerStep);
    case XAxisMode::Seconds:
        if (!run.stepTimes) run.stepTimes = seriesOf(run, "step_time_ms");
        return series_by_seconds(series, *run.stepTimes);
    case XAxisMode::Step:
    default: {
        std::vector<XYPoint> points;
        points.reserve(series.size());
        for (const auto& [step, value] : series) points.push_back({double(step), value});
        return points;
    }
    }
}

double ComparePage::xOfStep(RunData& run, int64_t step)
{
    const auto points = pointsOf(run, Series{{step, 0.0}});
    return points.empty() ? double(step) : points.front().x;
}

void ComparePage::computeDivergence()
{
    divergence_.clear();
    if (runs_.size() < 2) return;
    // Against the summary's reference (the FP32 run where one is shown): against the first run
    // in the Runs page's order, the bold FP32 row read "diverges at 37" from a BF16 run.
    std::vector<std::pair<std::string, RunSummaryRow>> input;
    for (const RunData& r : runs_) input.emplace_back(r.row.recipe, r.row);
    const size_t reference = summarize_sweep(input).reference;
    const Series& base = seriesOf(runs_[reference], "train/loss");
    for (size_t i = 0; i < runs_.size(); ++i)
        if (i != reference)
            divergence_[runs_[i].row.id] =
                first_divergence_step(base, seriesOf(runs_[i], "train/loss"), tolerance_, relative_);
}

std::optional<int64_t> ComparePage::divergenceStep(int64_t runId) const
{
    const auto it = divergence_.find(runId);
    return it == divergence_.end() ? std::nullopt : it->second;
}

// ---- views ---------------------------------------------------------------------------

QString ComparePage::labelOf(const RunData& run) const
{
    const QString label = run_label(run.row.id, QString::fromStdString(run.row.name));
    const bool shared = std::any_of(runs_.begin(), runs_.end(), [&](const RunData& other) {
        return &other != &run && other.row.name == run.row.name;
    });
    return shared && !run.row.recipe.empty() ? label + QStringLiteral(" · ") + QString::fromStdString(run.row.recipe)
                                             : label;
}

void ComparePage::rebuildHeader()
{
    if (runs_.empty()) {
        headerLabel_->setText(QStringLiteral("<b>%1</b> &nbsp;<span style='color:%2'>%3</span>")
                                  .arg(tr("Compare"), secondary_text_color(palette()).name(),
                                       tr("No runs selected: select two or more on the Runs page (Ctrl+3) and "
                                          "press Compare, or run a sweep (Run ▸ Sweep…).")));
        return;
    }
    QStringList names;
    for (size_t i = 0; i < runs_.size(); ++i)
        names << QStringLiteral("<span style='color:%1'>■</span> %2")
                     .arg(run_color(i).name(),
                          labelOf(runs_[i]).toHtmlEscaped());
    headerLabel_->setText(tr("<b>Comparing %1</b> &nbsp; ").arg(count_text(int64_t(runs_.size()), tr("run"), tr("runs"))) +
                          names.join(QStringLiteral(" &nbsp; ")));
}

void ComparePage::rebuildCurves()
{
    std::vector<ComparePlot::Curve> curves;
    const std::string tag = metric_.toStdString();
    const bool sparse = metric_.startsWith(QLatin1String("val/")) || metric_.startsWith(QLatin1String("eval/"));
    for (size_t i = 0; i < runs_.size(); ++i) {
        RunData& run = runs_[i];
        const Series& s = seriesOf(run, tag);
        if (s.empty()) continue;
        ComparePlot::Curve c;
        c.runId = run.row.id;
        c.label = labelOf(run);
        c.color = run_color(i);
        c.markers = sparse;
        const auto points = pointsOf(run, s);
        c.xs.reserve(points.size());
        c.ys.reserve(points.size());
        for (const auto& p : points) {
            c.xs.push_back(p.x);
            c.ys.push_back(p.y);
        }
        curves.push_back(std::move(c));
    }
    std::vector<ComparePlot::Marker> markers;
    for (size_t i = 0; i < runs_.size(); ++i) { // the reference has none
        const auto step = divergenceStep(runs_[i].row.id);
        if (!step) continue;
        // Divergence is train loss's: said so over any other metric's curves.
        markers.push_back({xOfStep(runs_[i], *step), run_color(i),
                           metric_ == QLatin1String("train/loss")
                               ? tr("#%1 diverges @ %2").arg(runs_[i].row.id).arg(*step)
                               : tr("#%1 train loss diverges @ %2").arg(runs_[i].row.id).arg(*step)});
    }
    const QString xLabel = mode_ == XAxisMode::Tokens    ? tr("tokens")
                           : mode_ == XAxisMode::Seconds ? tr("training time (s)")
                                                         : tr("step");
    plot_->setEmptyText(runs_.empty() ? tr("Select runs on the Runs page and press Compare")
                                      : tr("None of these runs recorded %1").arg(metric_));
    plot_->setCurves(std::move(curves), xLabel, metric_);
    plot_->setMarkers(std::move(markers));
    applyPlotScales();
    plot_->rebuild();
}

void ComparePage::applyPlotScales()
{
    // A loss scale moves by factors of 2 over decades: smoothed, a halving was drawn as a slow
    // decay, and on a linear axis every run but the largest-scaled sat on 0. The user's
    // settings stay for the other metrics.
    const bool scale_like = metric_.endsWith(QLatin1String("loss_scale"));
    plot_->setSmoothing(scale_like ? 0.0 : smoothing_);
    plot_->setLogScale(logScale_ || scale_like);
    // Controls that would do nothing say so rather than show a setting that is not applied.
    smoothingSlider_->setEnabled(!scale_like);
    logScaleBox_->setEnabled(!scale_like);
}

QString ComparePage::referenceText() const { return referenceLabel_->text(); }

void ComparePage::rebuildSummary()
{
    // Rebuilt every 2 s while a shown run trains (followTick): the rows the user selected stay.
    QSet<qint64> selected;
    if (const QItemSelectionModel* selection = summaryView_ ? summaryView_->selectionModel() : nullptr)
        for (const QModelIndex& index : selection->selectedRows(SumRun))
            selected.insert(index.data(Qt::UserRole).toLongLong());
    summaryModel_->removeRows(0, summaryModel_->rowCount());
    std::vector<std::pair<std::string, RunSummaryRow>> input;
    for (const RunData& r : runs_) input.emplace_back(r.row.recipe, r.row);
    const SweepSummary summary = summarize_sweep(input);
    referenceRow_ = static_cast<int>(summary.reference);
    if (runs_.empty()) {
        referenceLabel_->clear();
        return;
    }
    const RunSummaryRow& ref = runs_[summary.reference].row;
    const QString text =
        ref.is_fp32() ? tr("Relative to the FP32 run #%1 (bold), train-loss divergence too.")
        : summary.reference_passed_over
            ? tr("Relative to run #%1 (bold), the first shown with a val loss, train-loss divergence too.")
            : tr("Relative to the first run #%1 (bold; no FP32 run shown), train-loss divergence too.");
    referenceLabel_->setText(text.arg(ref.id));
    for (size_t i = 0; i < summary.rows.size(); ++i) {
        const SweepRow& s = summary.rows[i];
        const RunSummaryRow& r = s.run;
        const auto div = divergenceStep(r.id);
        QString divText = i == summary.reference ? tr("(reference)") : div ? QString::number(*div)
                                                                             : tr("within tolerance");
        QList<QStandardItem*> row = {
            cell(QString::number(r.id), QVariant::fromValue<qint64>(r.id), true),
            cell(QString::fromStdString(r.name)),
            cell(QString::fromStdString(r.recipe)),
            cell(format_status(r.status)),
            cell(QString::number(r.steps_done), QVariant::fromValue<qint64>(r.steps_done), true),
            cell(format_loss(r.final_val_loss, r.final_val_step >= 0),
                 exact_loss(r.final_val_loss, r.final_val_step >= 0), true),
            cell(format_loss(r.best_val_loss, r.best_val_step >= 0), exact_loss(r.best_val_loss, r.best_val_step >= 0),
                 true),
            cell(format_delta(s.val_loss_delta), exact(s.val_loss_delta), true),
            cell(format_rate(r.median_tokens_per_s), exact(r.median_tokens_per_s), true),
            cell(format_ratio(s.tokens_per_s_ratio), exact(s.tokens_per_s_ratio), true),
            cell(format_bytes(r.peak_memory_bytes()),
                 r.peak_memory_bytes() >= 0 ? QString::number(r.peak_memory_bytes()) : QString(), true),
            cell(format_ratio(s.peak_memory_ratio), exact(s.peak_memory_ratio), true),
            cell(QString::number(r.skipped_steps), QVariant::fromValue<qint64>(r.skipped_steps), true),
            cell(divText, i == summary.reference || !div ? QString() : QString::number(*div),
                 i != summary.reference && div.has_value())};
        row[SumRun]->setForeground(run_color(i));
        if (i == summary.reference)
            for (QStandardItem* item : row) {
                QFont f = item->font();
                f.setBold(true);
                item->setFont(f);
            }
        if (s.val_at_another_step) {
            row[SumDeltaVal]->setText(row[SumDeltaVal]->text() + QStringLiteral("*"));
            row[SumDeltaVal]->setToolTip(tr("Final evaluations of different steps: this run's at step %1, the "
                                            "reference's at step %2")
                                             .arg(r.final_val_step)
                                             .arg(runs_[summary.reference].row.final_val_step));
        }
        if (r.skipped_steps > 0) row[SumSkipped]->setForeground(QColor(170, 20, 30));
        if (div) row[SumDiverges]->setForeground(QColor(170, 20, 30));
        summaryModel_->appendRow(row);
    }
    if (QItemSelectionModel* selection = summaryView_ ? summaryView_->selectionModel() : nullptr)
        for (int r = 0; r < summaryModel_->rowCount(); ++r)
            if (selected.contains(summaryModel_->index(r, SumRun).data(Qt::UserRole).toLongLong()))
                selection->select(summaryModel_->index(r, SumRun),
                                  QItemSelectionModel::Select | QItemSelectionModel::Rows);
}

void ComparePage::rebuildConfigDiff()
{
    diffModel_->clear();
    QStringList headers{tr("Key")};
    std::vector<std::string> configs;
    for (const RunData& r : runs_) {
        headers << labelOf(r);
        configs.push_back(r.row.config_json);
    }
    diffModel_->setHorizontalHeaderLabels(headers);
    if (runs_.size() < 2) {
        diffLabel_->setText(runs_.empty() ? QString() : tr("Select a second run to see how the configs differ."));
        return;
    }
    std::vector<ConfigDifferenceN> diff;
    try {
        diff = diff_configs(configs);
    } catch (const std::exception& e) {
        diffLabel_->setText(tr("Cannot compare the configs: %1").arg(QString::fromStdString(e.what())));
        return;
    }
    diffLabel_->setText(diff.empty() ? tr("The configs are identical.")
                                     : (diff.size() == 1 ? tr("%1 differs; keys all runs share are not shown.")
                                                       : tr("%1 differ; keys all runs share are not shown."))
                                           .arg(count_text(int64_t(diff.size()), tr("key"), tr("keys"))));
    for (const auto& d : diff) {
        QList<QStandardItem*> row{cell(QString::fromStdString(d.key))};
        QFont mono = row[0]->font();
        mono.setFamily(QStringLiteral("monospace"));
        mono.setStyleHint(QFont::Monospace);
        row[0]->setFont(mono);
        for (const auto& v : d.values) {
            auto* item = cell(v ? QString::fromStdString(*v) : tr("(absent)"), v ? QString::fromStdString(*v) : QString());
            if (!v) {
                item->setForeground(QColor(130, 130, 130));
                QFont f = item->font();
                f.setItalic(true);
                item->setFont(f);
            }
            row << item;
        }
        diffModel_->appendRow(row);
    }
    // As wide as their text, at most 300 px (a long value is elided, whole in its tooltip): at a
    // fixed 300 px each, a 5-run diff of short values put the fifth run off the page.
    diffView_->resizeColumnsToContents();
    for (int c = 0; c < diffModel_->columnCount(); ++c)
        diffView_->setColumnWidth(c, std::min(diffView_->columnWidth(c), c == 0 ? 280 : 300));
}

void ComparePage::syncLayerControls()
{
    syncing_ = true;
    layerOtherCombo_->clear();
    for (size_t i = 1; i < runs_.size(); ++i)
        layerOtherCombo_->addItem(labelOf(runs_[i]),
                                  QVariant::fromValue<qint64>(runs_[i].row.id));
    const int index = layerOtherCombo_->findData(QVariant::fromValue<qint64>(layerOther_));
    layerOtherCombo_->setCurrentIndex(index);
    layerStatCombo_->setCurrentIndex(layerStatCombo_->findData(int(layerStat_)));
    layerRoleCombo_->setCurrentText(layerRole_);
    layerRoleCombo_->setEnabled(layerStat_ != LayerDiffStat::GradNorm);
    syncing_ = false;
}

void ComparePage::updateLayerDiff()
{
    layerDirty_ = false;
    if (runs_.size() < 2 || layerOther_ < 0) {
        layerLabel_->clear();
        layerPlot_->setEmptyText(runs_.empty() ? tr("No runs selected")
                                               : tr("Select a second run to compare per-layer statistics"));
        layerPlot_->setGrid({}, {});
        return;
    }
    RunData& a = runs_[0];
    auto other = std::find_if(runs_.begin(), runs_.end(), [this](const RunData& r) { return r.row.id == layerOther_; });
    if (other == runs_.end()) return;
    RunData& b = *other;
    LayerDiffGrid grid;
    QString error;
    RunStore* store = store_->store(&error);
    if (!store) {
        fail(error);
        return;
    }
    bool aHas = true, bHas = true; // each run recorded what is compared
    try {
        if (layerStat_ == LayerDiffStat::GradNorm) {
            std::map<std::string, Series> sa, sb;
            for (const RunData* run : {&a, &b}) {
                auto& target = run == &a ? sa : sb;
                for (const auto& tag : store->scalar_tags(run->row.id))
                    if (tag.rfind("grad_norm/", 0) == 0) target[tag.substr(10)] = store->series(run->row.id, tag);
            }
            aHas = !sa.empty();
            bHas = !sb.empty();
            grid = layer_series_difference(sa, sb, a.layerOrder);
        } else {
            const std::string role = layerRole_.toStdString();
            const auto ra = store->layer_stats_without_histograms(a.row.id, role);
            const auto rb = store->layer_stats_without_histograms(b.row.id, role);
            aHas = !ra.empty();
            bHas = !rb.empty();
            grid = layer_stat_difference(ra, rb, layerStat_, role, a.layerOrder);
        }
    } catch (const std::exception& e) {
        fail(tr("Cannot read layer statistics: %1").arg(QString::fromStdString(e.what())));
        return;
    }
    layerLabel_->setText(tr("#%1 − #%2 · red: #%1 higher · %3 layers × %4 common steps")
                             .arg(a.row.id)
                             .arg(b.row.id)
                             .arg(grid.layers.size())
                             .arg(grid.steps.size()));
    layerLabel_->setToolTip(layerLabel_->text());
    // Why it is empty: a run that records no such tensor (an FP32 run has no block scales) was
    // sent to telemetry.interval, which was not the cause (read-only audit 'gui-deep').
    const QString what = layerStat_ == LayerDiffStat::GradNorm ? tr("per-layer gradient norms") : layerRole_;
    const auto named = [](const RunData& r) {
        return QStringLiteral("#%1 (%2)").arg(r.row.id).arg(QString::fromStdString(r.row.recipe));
    };
    if (!aHas && !bHas)
        layerPlot_->setEmptyText(tr("Neither %1 nor %2 recorded %3").arg(named(a), named(b), what));
    else if (!aHas || !bHas)
        layerPlot_->setEmptyText(tr("%1 recorded no %2: its recipe has no such tensor, or its telemetry was off")
                                     .arg(named(aHas ? b : a), what));
    else
        layerPlot_->setEmptyText(tr("The two runs share no step with per-layer statistics (telemetry.interval)"));
    layerPlot_->setGrid(std::move(grid), stat_label(layerStat_, layerRole_));
}

// ---- settings ------------------------------------------------------------------------

QStringList ComparePage::metrics() const { return metrics_; }

bool ComparePage::setMetric(const QString& tag)
{
    if (!metrics_.contains(tag)) return fail(tr("None of the shown runs recorded %1.").arg(tag));
    metric_ = tag;
    syncing_ = true;
    metricCombo_->setCurrentText(tag);
    syncing_ = false;
    rebuildCurves();
    return true;
}

void ComparePage::setXAxisMode(XAxisMode mode)
{
    mode_ = mode;
    syncing_ = true;
    xAxisCombo_->setCurrentIndex(xAxisCombo_->findData(int(mode)));
    syncing_ = false;
    rebuildCurves();
}

void ComparePage::setSmoothing(double weight)
{
    smoothing_ = std::clamp(weight, 0.0, 0.99);
    syncing_ = true;
    smoothingSlider_->setValue(static_cast<int>(std::lround(smoothing_ * 100)));
    smoothingLabel_->setText(QString::number(smoothing_, 'f', 2));
    syncing_ = false;
    applyPlotScales();
    plot_->rebuild();
}

void ComparePage::setLogScale(bool enabled)
{
    logScale_ = enabled;
    syncing_ = true;
    logScaleBox_->setChecked(enabled);
    syncing_ = false;
    applyPlotScales();
    plot_->rebuild();
}

void ComparePage::setTolerance(double tolerance, bool relative)
{
    tolerance_ = std::max(0.0, tolerance);
    relative_ = relative;
    syncing_ = true;
    toleranceSpin_->setValue(tolerance_);
    relativeBox_->setChecked(relative);
    syncing_ = false;
    computeDivergence();
    rebuildCurves();
    rebuildSummary();
}

void ComparePage::setLayerStat(LayerDiffStat stat, const QString& role)
{
    layerStat_ = stat;
    layerRole_ = role;
    syncLayerControls();
    layerDirty_ = true;
    if (tabs_->currentIndex() == int(Tab::LayerStats)) updateLayerDiff();
}

bool ComparePage::setLayerDiffOther(int64_t runId)
{
    if (runs_.empty() || runId == runs_[0].row.id ||
        std::none_of(runs_.begin(), runs_.end(), [runId](const RunData& r) { return r.row.id == runId; }))
        return fail(tr("Run %1 is not one of the other shown runs.").arg(runId));
    layerOther_ = runId;
    syncLayerControls();
    layerDirty_ = true;
    if (tabs_->currentIndex() == int(Tab::LayerStats)) updateLayerDiff();
    return true;
}

void ComparePage::showTab(Tab tab) { tabs_->setCurrentIndex(int(tab)); }
ComparePage::Tab ComparePage::currentTab() const { return static_cast<Tab>(tabs_->currentIndex()); }

// ---- export and messages -------------------------------------------------------------

bool ComparePage::exportCurves(const QString& path)
{
    QString error;
    if (!export_plot(*plot_, path, &error)) return fail(error);
    return true;
}

bool ComparePage::exportLayerDiff(const QString& path)
{
    if (layerDirty_) updateLayerDiff();
    QString error;
    if (!export_plot(*layerPlot_, path, &error)) return fail(error);
    return true;
}

bool ComparePage::exportSummaryCsv(const QString& path)
{
    QString error;
    if (!export_model_csv(*summaryModel_, path, &error)) return fail(error);
    return true;
}

bool ComparePage::exportConfigDiffCsv(const QString& path)
{
    QString error;
    if (!export_model_csv(*diffModel_, path, &error)) return fail(error);
    return true;
}

void ComparePage::askExportPlot(bool heatmap)
{
    if (heatmap && layerDirty_) updateLayerDiff();
    export_plot_interactively(heatmap ? static_cast<QCustomPlot&>(*layerPlot_) : static_cast<QCustomPlot&>(*plot_),
                              this, heatmap ? QStringLiteral("layer-diff") : QStringLiteral("compare"));
}

void ComparePage::askExportTable(bool summary)
{
    const QString name = summary ? QStringLiteral("summary.csv") : QStringLiteral("config-diff.csv");
    const QString path = QFileDialog::getSaveFileName(this, tr("Export table as CSV"), QDir::home().filePath(name),
                                                      tr("CSV files (*.csv)"));
    if (path.isEmpty()) return;
    if (!(summary ? exportSummaryCsv(path) : exportConfigDiffCsv(path)))
        QMessageBox::warning(this, tr("Export table"), lastError_);
}

QString ComparePage::message() const { return messageLabel_->isHidden() ? QString() : messageLabel_->text(); }

bool ComparePage::fail(const QString& message)
{
    lastError_ = message;
    messageLabel_->setText(message);
    messageLabel_->setStyleSheet(QStringLiteral("QLabel { color: #8a0015; background: #fdecee;"
                                                " border: 1px solid #f5c2c7; padding: 4px 8px; }"));
    messageLabel_->setVisible(true);
    return false;
}

void ComparePage::note(const QString& message)
{
    messageLabel_->setText(message);
    messageLabel_->setStyleSheet(QStringLiteral("QLabel { color: #5c4400; background: #fff6dc;"
                                                " border: 1px solid #f0dc9c; padding: 4px 8px; }"));
    messageLabel_->setVisible(true);
}

void ComparePage::clearMessage()
{
    lastError_.clear();
    messageLabel_->clear();
    messageLabel_->hide();
}

} // namespace mantissa
