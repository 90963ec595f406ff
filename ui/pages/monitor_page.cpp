// SPDX-License-Identifier: GPL-3.0-or-later
#include "pages/monitor_page.h"

#include <QCheckBox>
#include <QAbstractItemView>
#include <QComboBox>
#include <QFrame>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QScrollBar>
#include <QSignalBlocker>
#include <QSlider>
#include <QSplitter>
#include <QStyledItemDelegate>
#include <QTableView>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "common/secondary_text.h"
#include "models/event_log_model.h"
#include "plots/communication_plot.h"
#include "plots/exponent_histogram_plot.h"
#include "pages/layer_switch_menu.h"
#include "plots/layer_heatmap_plot.h"
#include "plots/loss_plot.h"
#include "plots/loss_scale_plot.h"
#include "plots/memory_plot.h"
#include "plots/time_series_plot.h"

namespace mantissa {

namespace {

// A role picker as wide as the roles a run usually records ("grad_output"), not as its longest
// ("grad_scores_wgrad_no_rht"), which with the rest of the row made the window 1193 px wide at
// least; the list still shows every name whole.
void fit_to_common_roles(QComboBox* combo)
{
    combo->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    combo->setMinimumContentsLength(12);
    combo->view()->setMinimumWidth(combo->view()->sizeHintForColumn(0) + 24);
}

QFrame* separator(QWidget* parent)
{
    auto* line = new QFrame(parent);
    line->setFrameShape(QFrame::VLine);
    line->setFrameShadow(QFrame::Sunken);
    return line;
}

QLabel* caption(const QString& text, QWidget* parent)
{
    auto* label = new QLabel(text, parent);
    QFont f = label->font();
    f.setBold(true);
    label->setFont(f);
    return label;
}

// The heatmap's attention rows ("blocks.0.attn.sdpa"): tensors to histogram only where the
// attention runs unfused (its probabilities and dS); the fused kernel's show the max logit alone.
bool is_attention_row(const std::string& layer) { return layer.ends_with(".sdpa"); }

// Colours the event list's text by the event's kind (see MonitorPage::eventKindColor). A
// delegate rather than a proxy model, so the view shows the EventLogModel itself.
class EventKindDelegate : public QStyledItemDelegate {
public:
    using QStyledItemDelegate::QStyledItemDelegate;

protected:
    void initStyleOption(QStyleOptionViewItem* option, const QModelIndex& index) const override
    {
        QStyledItemDelegate::initStyleOption(option, index);
        const auto* events = qobject_cast<const EventLogModel*>(index.model());
        if (!events) return;
        const QColor color = MonitorPage::eventKindColor(events->event(index.row()).kind);
        if (color.isValid()) option->palette.setColor(QPalette::Text, color);
    }
};

} // namespace

MonitorPage::MonitorPage(QWidget* parent) : QWidget(parent), eventModel_(new EventLogModel(this))
{
    clock_.start();
    deferred_.setSingleShot(true);
    connect(&deferred_, &QTimer::timeout, this, [this] { renderFrame(false); });

    lossPlot_ = new LossPlot(this);
    lossScalePlot_ = new LossScalePlot(this);
    memoryPlot_ = new MemoryPlot(this);
    communicationPlot_ = new CommunicationPlot(this);
    communicationPlot_->setVisible(false);
    heatmap_ = new LayerHeatmapPlot(this);
    histogram_ = new ExponentHistogramPlot(this);
    lossPlot_->setHistory(&history_);
    lossScalePlot_->setHistory(&history_);
    memoryPlot_->setHistory(&history_);
    communicationPlot_->setHistory(&history_);
    heatmap_->setHistory(&history_);
    histogram_->setHistory(&history_);
    const QString panHint = tr("Drag to pan, wheel to zoom, double-click to follow the run again");
    for (QWidget* w : std::initializer_list<QWidget*>{lossPlot_, lossScalePlot_, memoryPlot_, communicationPlot_})
        w->setToolTip(panHint);
    // Small enough that the window fits a 1366 x 768 screen (it could not be made smaller than
    // 1193 x 785); the splitters share out whatever room there is.
    lossPlot_->setMinimumHeight(140);
    for (TimeSeriesPlot* p : std::initializer_list<TimeSeriesPlot*>{lossScalePlot_, memoryPlot_, communicationPlot_}) {
        p->setMinimumHeight(95);
        p->setXAxisTitleShown(false); // the loss plot above and the heatmap below say it
    }
    heatmap_->setMinimumHeight(175);
    histogram_->setMinimumHeight(180);

    // The heatmap first: its layout sets the margins the curves above it align to.
    plots_.push_back({heatmap_, [this] { return heatmap_->refresh(); }});
    plots_.push_back({lossPlot_, [this] { return lossPlot_->refresh(); }});
    plots_.push_back({lossScalePlot_, [this] { return lossScalePlot_->refresh(); }});
    plots_.push_back({memoryPlot_, [this] { return memoryPlot_->refresh(); }});
    plots_.push_back({communicationPlot_, [this] { return communicationPlot_->refresh(); }});
    plots_.push_back({histogram_, [this] { return histogram_->refresh(); }});

    eventView_ = new QTableView(this);
    eventView_->setModel(eventModel_);
    eventView_->setItemDelegate(new EventKindDelegate(eventView_));
    eventView_->verticalHeader()->hide();
    eventView_->verticalHeader()->setDefaultSectionSize(eventView_->fontMetrics().height() + 6);
    eventView_->setSelectionBehavior(QAbstractItemView::SelectRows);
    eventView_->setSelectionMode(QAbstractItemView::SingleSelection);
    eventView_->setWordWrap(false);
    eventView_->setAlternatingRowColors(true);
    eventView_->horizontalHeader()->setStretchLastSection(true);
    eventView_->setColumnWidth(EventLogModel::StepColumn, 60);
    // Wide enough for the longest kinds ("alert_fp8_underflow", "loss_scale_growth"): at 140 px
    // they were cut.
    const int kindWidth = eventView_->fontMetrics().horizontalAdvance(QStringLiteral("alert_loss_scale_collapse"));
    eventView_->setColumnWidth(EventLogModel::KindColumn, kindWidth + 16);
    eventView_->setToolTip(tr("Click an event to put the cursor on its step and select the layer it names"));
    connect(eventView_, &QTableView::clicked, this, &MonitorPage::activateEvent);
    connect(eventView_, &QTableView::activated, this, &MonitorPage::activateEvent);
    connect(heatmap_, &QCustomPlot::afterLayout, this, &MonitorPage::alignCurvesToHeatmap);
    connect(heatmap_, &LayerHeatmapPlot::cellClicked, this, [this](qint64 step, const QString& layer) {
        // A cell of a per-tensor statistic ("underflow % of input") is about that tensor: the
        // histogram opens on the same one, not on whichever role it showed before.
        if (heatmapRoleCombo_->isEnabled()) setHistogramRole(heatmap_->role());
        activate(step, layer);
    });
    connect(heatmap_, &LayerHeatmapPlot::layerMenuRequested, this, [this](const QString& layer, const QPoint& at) {
        if (const QString target = switchableLayer(layer); !target.isEmpty()) layerMenu(target)->popup(at);
    });

    // Curves that share the step axis stack in one column; what is not against steps (the
    // histogram, the events) goes to the right.
    auto* curves = new QSplitter(Qt::Vertical, this);
    curves->setObjectName(QStringLiteral("monitor.curves")); // the key of its saved sizes (window_state.h)
    curves->setChildrenCollapsible(false);
    curves->addWidget(lossPlot_);
    curves->addWidget(lossScalePlot_);
    curves->addWidget(memoryPlot_);
    curves->addWidget(communicationPlot_);
    curves->addWidget(heatmap_);
    curves->setStretchFactor(0, 5);
    curves->setStretchFactor(1, 2);
    curves->setStretchFactor(2, 2);
    curves->setStretchFactor(3, 2);
    curves->setStretchFactor(4, 4);
    curves->setSizes({400, 160, 160, 160, 300});

    auto* side = new QSplitter(Qt::Vertical, this);
    side->setObjectName(QStringLiteral("monitor.side"));
    side->setChildrenCollapsible(false);
    side->addWidget(buildHistogramPanel());
    side->addWidget(eventView_);
    side->setStretchFactor(0, 1);
    side->setStretchFactor(1, 1);
    side->setSizes({500, 400});

    auto* main = new QSplitter(Qt::Horizontal, this);
    main->setObjectName(QStringLiteral("monitor.main"));
    main->setChildrenCollapsible(false);
    main->addWidget(curves);
    main->addWidget(side);
    main->setStretchFactor(0, 3);
    main->setStretchFactor(1, 2);
    main->setSizes({1000, 600});

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->setSpacing(4);
    layout->addWidget(buildControls());
    layout->addWidget(main, 1);

    syncControls();
}

MonitorPage::~MonitorPage() = default;

QWidget* MonitorPage::buildControls()
{
    auto* bar = new QWidget(this);
    auto* row = new QHBoxLayout(bar);
    row->setContentsMargins(0, 0, 0, 0);
    row->setSpacing(6);

    row->addWidget(caption(tr("Curves"), bar));
    row->addWidget(new QLabel(tr("Smoothing"), bar));
    smoothingSlider_ = new QSlider(Qt::Horizontal, bar);
    smoothingSlider_->setRange(0, 99);
    smoothingSlider_->setFixedWidth(120);
    smoothingSlider_->setToolTip(tr("TensorBoard's smoothing weight: a debiased exponential moving average"));
    row->addWidget(smoothingSlider_);
    smoothingLabel_ = new QLabel(QStringLiteral("0.00"), bar);
    smoothingLabel_->setMinimumWidth(smoothingLabel_->fontMetrics().horizontalAdvance(QStringLiteral("0.000")));
    row->addWidget(smoothingLabel_);
    connect(smoothingSlider_, &QSlider::valueChanged, this, [this](int value) {
        const double weight = value / 100.0;
        smoothingLabel_->setText(QString::number(weight, 'f', 2));
        lossPlot_->setSmoothing(weight);
        scheduleFrame();
    });

    logScaleBox_ = new QCheckBox(tr("Log scale"), bar);
    logScaleBox_->setToolTip(tr("Logarithmic loss axis"));
    row->addWidget(logScaleBox_);
    connect(logScaleBox_, &QCheckBox::toggled, this, &MonitorPage::setLogScale);

    row->addWidget(new QLabel(tr("X axis"), bar));
    xAxisCombo_ = new QComboBox(bar);
    xAxisCombo_->addItem(tr("Step"), int(XAxisMode::Step));
    xAxisCombo_->addItem(tr("Tokens"), int(XAxisMode::Tokens));
    xAxisCombo_->addItem(tr("Time"), int(XAxisMode::Seconds));
    xAxisCombo_->setToolTip(tr("Optimizer steps, tokens trained on, or training wall time (evaluations excluded)"));
    row->addWidget(xAxisCombo_);
    connect(xAxisCombo_, &QComboBox::currentIndexChanged, this,
            [this](int) { setXAxisMode(static_cast<XAxisMode>(xAxisCombo_->currentData().toInt())); });

    row->addSpacing(6);
    row->addWidget(separator(bar));
    row->addSpacing(6);
    row->addWidget(caption(tr("Heatmap"), bar));
    heatmapStatCombo_ = new QComboBox(bar);
    heatmapStatCombo_->addItem(tr("Underflow %"), int(LayerStat::UnderflowPercent));
    heatmapStatCombo_->addItem(tr("Overflow %"), int(LayerStat::OverflowPercent));
    heatmapStatCombo_->addItem(tr("Amax"), int(LayerStat::Amax));
    heatmapStatCombo_->addItem(tr("Grad norm"), int(LayerStat::GradNorm));
    heatmapStatCombo_->addItem(tr("Attention max logit"), int(LayerStat::AttentionMaxLogit));
    heatmapStatCombo_->addItem(tr("Quantization SNR (dB)"), int(LayerStat::QuantSnrDb));
    heatmapStatCombo_->addItem(tr("NaN/Inf %"), int(LayerStat::NonFinitePercent));
    heatmapStatCombo_->addItem(tr("Subnormal %"), int(LayerStat::SubnormalPercent));
    row->addWidget(heatmapStatCombo_);
    heatmapRoleCombo_ = new QComboBox(bar);
    for (const std::string& role : RunHistory::roles()) heatmapRoleCombo_->addItem(QString::fromStdString(role));
    heatmapRoleCombo_->setCurrentText(QStringLiteral("grad_output"));
    heatmapRoleCombo_->setToolTip(tr("The tensor the per-tensor statistics are about"));
    fit_to_common_roles(heatmapRoleCombo_);
    row->addWidget(heatmapRoleCombo_);
    auto applyHeatmap = [this] {
        setHeatmapStatistic(static_cast<LayerStat>(heatmapStatCombo_->currentData().toInt()),
                            heatmapRoleCombo_->currentText());
    };
    connect(heatmapStatCombo_, &QComboBox::currentIndexChanged, this, applyHeatmap);
    connect(heatmapRoleCombo_, &QComboBox::currentIndexChanged, this, applyHeatmap);

    row->addStretch(1);
    frameLabel_ = new QLabel(bar);
    show_as_secondary(frameLabel_);
    // Kept as wide as its text while there is room, and the first to give way when there is not.
    frameLabel_->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Preferred);
    frameLabel_->setMinimumWidth(frameLabel_->fontMetrics().horizontalAdvance(tr("frame 00.0 ms")));
    frameLabel_->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
    frameLabel_->setToolTip(tr("Time the GUI thread spends drawing one monitor frame (median, 95th percentile)"));
    row->addWidget(frameLabel_);
    return bar;
}

QWidget* MonitorPage::buildHistogramPanel()
{
    auto* panel = new QWidget(this);
    auto* layout = new QVBoxLayout(panel);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->setSpacing(2);
    auto* row = new QHBoxLayout;
    row->setSpacing(6);
    row->addWidget(caption(tr("Histogram"), panel));
    histogramLayerCombo_ = new QComboBox(panel);
    histogramLayerCombo_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    histogramLayerCombo_->setMinimumContentsLength(14);
    histogramLayerCombo_->setToolTip(tr("Layer"));
    row->addWidget(histogramLayerCombo_);
    histogramRoleCombo_ = new QComboBox(panel);
    for (const std::string& role : RunHistory::roles()) histogramRoleCombo_->addItem(QString::fromStdString(role));
    histogramRoleCombo_->setCurrentText(QStringLiteral("grad_output"));
    histogramRoleCombo_->setToolTip(tr("Tensor"));
    fit_to_common_roles(histogramRoleCombo_);
    row->addWidget(histogramRoleCombo_);
    histogramStepSlider_ = new QSlider(Qt::Horizontal, panel);
    histogramStepSlider_->setRange(0, 0);
    histogramStepSlider_->setMinimumWidth(80);
    histogramStepSlider_->setToolTip(tr("Telemetry frame; moves the cursor on every plot"));
    row->addWidget(histogramStepSlider_, 1);
    histogramStepLabel_ = new QLabel(tr("no frames"), panel);
    const QFontMetrics metrics = histogramStepLabel_->fontMetrics();
    histogramStepLabel_->setMinimumWidth(metrics.horizontalAdvance(QStringLiteral("step 0000000")));
    row->addWidget(histogramStepLabel_);
    liveButton_ = new QToolButton(panel);
    liveButton_->setText(tr("Latest"));
    liveButton_->setToolTip(tr("Clear the cursor and follow the newest frame"));
    row->addWidget(liveButton_);
    layout->addLayout(row);
    layout->addWidget(histogram_, 1);

    connect(histogramLayerCombo_, &QComboBox::currentIndexChanged, this, [this](int index) {
        if (index >= 0) selectLayer(histogramLayerCombo_->itemText(index));
    });
    connect(histogramRoleCombo_, &QComboBox::currentIndexChanged, this,
            [this](int) { setHistogramRole(histogramRoleCombo_->currentText()); });
    connect(histogramStepSlider_, &QSlider::valueChanged, this, [this](int index) {
        if (index >= 0 && size_t(index) < histogramSteps_.size()) setCursorStep(histogramSteps_[size_t(index)]);
    });
    connect(liveButton_, &QToolButton::clicked, this, [this] { setCursorStep(-1); });
    return panel;
}

void MonitorPage::reset(int64_t tokensPerStep, const std::vector<std::string>& layers)
{
    history_.reset(tokensPerStep);
    if (!layers.empty()) history_.setLayers(layers);
    eventModel_->clear();
    for (TimeSeriesPlot* p : std::initializer_list<TimeSeriesPlot*>{lossPlot_, lossScalePlot_, memoryPlot_, communicationPlot_}) {
        p->invalidate();
        p->setFollowing(true);
    }
    histogramSteps_.clear();
    listedLayers_ = size_t(-1); // rebuild the layer list
    setCursorStep(-1);
    syncControls();
    scheduleFrame();
}

void MonitorPage::setInitialLayerStates(const std::vector<LayerState>& states)
{
    history_.setInitialLayerStates(states);
    scheduleFrame();
}

void MonitorPage::ingest(const TelemetryBatch& batch)
{
    if (batch.empty()) return;
    QElapsedTimer cost;
    cost.start();
    history_.append(batch);
    if (!batch.events.empty()) {
        // Keep showing the newest events unless the user scrolled back.
        const QScrollBar* bar = eventView_->verticalScrollBar();
        const bool atEnd = bar->value() >= bar->maximum();
        eventModel_->appendEvents(batch.events);
        if (atEnd) eventView_->scrollToBottom();
    }
    ingestStats_.record(static_cast<double>(cost.nsecsElapsed()) / 1e6);
    scheduleFrame();
}

void MonitorPage::renderNow() { renderFrame(true); }

void MonitorPage::setMaxFrameRateHz(double hz) { maxFrameRateHz_ = std::max(0.1, hz); }

void MonitorPage::setFrameBudget(double fraction) { frameBudget_ = std::clamp(fraction, 1e-4, 1.0); }

void MonitorPage::scheduleFrame()
{
    // The next frame may start once both the rate cap and the cost budget allow it.
    const double interval = std::max(1000.0 / maxFrameRateHz_, frameStats_.last() / frameBudget_);
    const double since = lastFrameStartMs_ < 0 ? interval : double(clock_.elapsed() - lastFrameStartMs_);
    if (since >= interval) {
        renderFrame(false);
        return;
    }
    if (!deferred_.isActive()) deferred_.start(static_cast<int>(std::ceil(interval - since)));
}

void MonitorPage::renderFrame(bool force)
{
    QElapsedTimer cost;
    cost.start();
    lastFrameStartMs_ = clock_.elapsed();
    deferred_.stop();
    inFrame_ = true;
    syncControls();
    // Compute beside communication, for data-parallel runs (the history says which).
    if (communicationPlot_->isHidden() == history_.hasCommunication())
        communicationPlot_->setVisible(history_.hasCommunication());
    int drawn = 0;
    for (PlotSlot& slot : plots_) {
        // A hidden plot is not even brought up to date: showing the page draws a frame
        // (showEvent), so data for plots nobody looks at costs nothing.
        if (!force && !slot.plot->isVisible()) continue;
        if (slot.refresh()) {
            slot.plot->replot(QCustomPlot::rpImmediateRefresh);
            ++drawn;
        }
    }
    inFrame_ = false;
    ++framesRendered_;
    // Only frames that drew count: the frames of a hidden page cost nothing, and kept, they
    // read "frame 0.0 ms" on a page that had just drawn in tens of milliseconds.
    if (drawn > 0) {
        frameStats_.record(static_cast<double>(cost.nsecsElapsed()) / 1e6);
        if (frameStats_.total() % 10 == 1) updateFrameLabel();
    }
    emit frameRendered(history_.lastStep());
}

QColor MonitorPage::eventKindColor(EventKind kind)
{
    switch (kind) {
    case EventKind::Alert:
    case EventKind::RunFailed:
    case EventKind::CheckpointFailed:
    case EventKind::CheckpointDamaged:
        return QColor(190, 30, 30);
    case EventKind::LossScaleBackoff:
    case EventKind::StepSkipped:
        return QColor(175, 95, 0);
    case EventKind::PrecisionChanged:
    case EventKind::WatchAction:
        return QColor(25, 90, 170);
    default:
        return {};
    }
}

void MonitorPage::alignCurvesToHeatmap()
{
    // The curves sit in the heatmap's column, and equal margins give them one width (the
    // heatmap's labels and colour scale set the margins). They put a step at one x on all the
    // curves, not on the heatmap: its columns are frames (thinned ones covering more steps), and
    // its cursor line, not its x, is where the curves' step is.
    const QRect area = heatmap_->axisRect()->rect();
    if (area.width() < 50) return;
    const int left = area.left();
    const int right = heatmap_->width() - area.right() - 1;
    for (TimeSeriesPlot* p : std::initializer_list<TimeSeriesPlot*>{lossPlot_, lossScalePlot_, memoryPlot_, communicationPlot_}) {
        const QMargins before = p->axisRect()->margins();
        p->setPlotMargins(left, right);
        // Within a frame the plot is replotted next; otherwise (a resize) this is layout, not
        // data, and needs no frame of its own.
        if (!inFrame_ && p->axisRect()->margins() != before) p->replot(QCustomPlot::rpQueuedReplot);
    }
}

void MonitorPage::updateFrameLabel()
{
    if (frameStats_.count() == 0) {
        frameLabel_->clear();
        return;
    }
    frameLabel_->setText(tr("frame %1 ms (p95 %2 ms)")
                             .arg(frameStats_.percentile(50), 0, 'f', 1)
                             .arg(frameStats_.percentile(95), 0, 'f', 1));
}

void MonitorPage::showEvent(QShowEvent* event)
{
    QWidget::showEvent(event);
    // Plots refreshed while hidden were not drawn; draw them once the page is up.
    deferred_.start(0);
}

void MonitorPage::syncControls()
{
    // The histogram's layer list grows with the layers the history learns about, and with the
    // attention rows that turn out to hold tensors.
    const auto& layers = history_.layers();
    if (layers.size() != listedLayers_ || history_.layersWithTensors() != listedTensorLayers_) {
        listedLayers_ = layers.size();
        listedTensorLayers_ = history_.layersWithTensors();
        const QSignalBlocker block(histogramLayerCombo_);
        histogramLayerCombo_->clear();
        for (const std::string& layer : layers)
            if (!is_attention_row(layer) || history_.hasTensors(layer))
                histogramLayerCombo_->addItem(QString::fromStdString(layer));
        const int selected = histogramLayerCombo_->findText(selectedLayer_);
        histogramLayerCombo_->setCurrentIndex(selected >= 0 ? selected : 0);
        if (histogramLayerCombo_->currentIndex() >= 0)
            histogram_->setTensor(histogramLayerCombo_->currentText(), histogramRoleCombo_->currentText());
    }
    syncHistogramSlider();
}

void MonitorPage::syncHistogramSlider()
{
    histogramSteps_ = history_.histogramSteps();
    const QSignalBlocker block(histogramStepSlider_);
    const int frames = static_cast<int>(histogramSteps_.size());
    histogramStepSlider_->setEnabled(frames > 1);
    histogramStepSlider_->setRange(0, std::max(0, frames - 1));
    if (frames == 0) {
        histogramStepLabel_->setText(tr("no frames"));
        return;
    }
    int index = frames - 1; // no cursor: the newest frame
    if (cursorStep_ >= 0) {
        const auto it = std::lower_bound(histogramSteps_.begin(), histogramSteps_.end(), cursorStep_);
        index = static_cast<int>(it - histogramSteps_.begin());
        if (index == frames || (index > 0 && cursorStep_ - histogramSteps_[size_t(index - 1)] <
                                                 histogramSteps_[size_t(index)] - cursorStep_))
            --index;
    } else {
        histogram_->setStep(histogramSteps_.back());
    }
    histogramStepSlider_->setValue(index);
    histogramStepLabel_->setText(tr("step %1").arg(histogramSteps_[size_t(index)]));
}

void MonitorPage::setCursorStep(int64_t step)
{
    cursorStep_ = std::max<int64_t>(-1, step);
    lossPlot_->setCursorStep(cursorStep_);
    lossScalePlot_->setCursorStep(cursorStep_);
    memoryPlot_->setCursorStep(cursorStep_);
    communicationPlot_->setCursorStep(cursorStep_);
    heatmap_->setCursorStep(cursorStep_);
    if (cursorStep_ >= 0) histogram_->setStep(cursorStep_);
    liveButton_->setEnabled(cursorStep_ >= 0);
    syncHistogramSlider();
    scheduleFrame();
}

QString MonitorPage::switchableLayer(const QString& row) const
{
    const LiveLayers& live = history_.liveLayers();
    if (live.empty() || live.find(row.toStdString())) return row; // unknown yet: the engine says
    if (row == QLatin1String("wte") && live.find("lm_head")) return QStringLiteral("lm_head"); // tied
    return {};
}

QMenu* MonitorPage::layerMenu(const QString& layer)
{
    if (layerMenu_) layerMenu_->deleteLater();
    layerMenu_ = make_layer_switch_menu(layer, this, [this, layer](const LayerSwitchChoice& c) {
        const QString scaling = c.scaling ? QString::fromLatin1(fp8_scaling_name(*c.scaling)) : QString();
        emit layerSwitchRequested(layer, c.formats, scaling);
    });
    return layerMenu_;
}

void MonitorPage::selectLayer(const QString& layer)
{
    if (layer == selectedLayer_) return;
    selectedLayer_ = layer;
    heatmap_->setSelectedLayer(layer);
    const int index = histogramLayerCombo_->findText(layer);
    if (index >= 0) {
        const QSignalBlocker block(histogramLayerCombo_);
        histogramLayerCombo_->setCurrentIndex(index);
        histogram_->setTensor(layer, histogramRoleCombo_->currentText());
    }
    emit layerSelected(layer);
    scheduleFrame();
}

void MonitorPage::setSmoothing(double weight)
{
    smoothingSlider_->setValue(static_cast<int>(std::lround(std::clamp(weight, 0.0, 0.99) * 100.0)));
}

void MonitorPage::setLogScale(bool enabled)
{
    if (logScaleBox_->isChecked() != enabled) {
        logScaleBox_->setChecked(enabled); // comes back here through toggled()
        return;
    }
    lossPlot_->setLogScale(enabled);
    scheduleFrame();
}

void MonitorPage::setXAxisMode(XAxisMode mode)
{
    const int index = xAxisCombo_->findData(int(mode));
    if (index != xAxisCombo_->currentIndex()) {
        xAxisCombo_->setCurrentIndex(index); // comes back here through currentIndexChanged()
        return;
    }
    lossPlot_->setXAxisMode(mode);
    lossScalePlot_->setXAxisMode(mode);
    memoryPlot_->setXAxisMode(mode);
    communicationPlot_->setXAxisMode(mode);
    scheduleFrame();
}

void MonitorPage::setHeatmapStatistic(LayerStat stat, const QString& role)
{
    {
        const QSignalBlocker blockStat(heatmapStatCombo_);
        const QSignalBlocker blockRole(heatmapRoleCombo_);
        heatmapStatCombo_->setCurrentIndex(heatmapStatCombo_->findData(int(stat)));
        heatmapRoleCombo_->setCurrentText(role);
    }
    // Grad norms and attention logits are per layer, not per tensor.
    heatmapRoleCombo_->setEnabled(stat == LayerStat::UnderflowPercent || stat == LayerStat::OverflowPercent ||
                                  stat == LayerStat::Amax || stat == LayerStat::QuantSnrDb ||
                                  stat == LayerStat::NonFinitePercent || stat == LayerStat::SubnormalPercent);
    heatmap_->setStatistic(stat, role);
    scheduleFrame();
}

void MonitorPage::setHistogramRole(const QString& role)
{
    {
        const QSignalBlocker block(histogramRoleCombo_);
        histogramRoleCombo_->setCurrentText(role);
    }
    if (histogramLayerCombo_->currentIndex() >= 0) histogram_->setTensor(histogramLayerCombo_->currentText(), role);
    scheduleFrame();
}

void MonitorPage::activateEvent(const QModelIndex& index)
{
    if (!index.isValid() || index.row() >= eventModel_->rowCount()) return;
    const RunEvent& event = eventModel_->event(index.row());
    activate(event.step, event.layers.empty() ? QString() : QString::fromStdString(event.layers.front()));
}

void MonitorPage::activate(int64_t step, const QString& layer)
{
    setCursorStep(step);
    if (!layer.isEmpty()) selectLayer(layer);
    emit eventActivated(step, layer);
}

} // namespace mantissa
