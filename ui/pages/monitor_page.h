// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The live Monitor page: loss, loss scale and memory against step / tokens / time, the layer
// x step heatmap, one tensor's exponent histogram and the event list, all reading one
// RunHistory. The main window hands it everything drained (ingest()); the page draws at its
// own pace: at most maxFrameRateHz frames a second, and no more often than a frame's cost
// divided by the frame budget, so a slow machine gets fewer frames instead of a slower run
// (training shares the cores). Data that arrives between frames is drawn by a single-shot
// timer, so the last state always shows.
//
// A cursor step and a selected layer tie the views together: clicking an event or a heatmap
// cell moves the cursor on every plot, selects the layer in the heatmap and the histogram,
// and tells the main window (eventActivated, layerSelected).

#include <QColor>
#include <QElapsedTimer>
#include <QTimer>
#include <QWidget>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plots/frame_stats.h"
#include "models/run_history.h"
#include "controller/snapshot_buffer.h"

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QLabel;
class QMenu;
class QModelIndex;
class QSlider;
class QTableView;
class QToolButton;

namespace mantissa {

class EventLogModel;
class ExponentHistogramPlot;
class LayerHeatmapPlot;
class LossPlot;
class LossScalePlot;
class CommunicationPlot;
class MemoryPlot;

class MonitorPage : public QWidget {
    Q_OBJECT

public:
    static constexpr double kDefaultMaxFrameRateHz = 25.0;
    // Fractions of the GUI thread's time that drawing may take (bench/gui_monitor): small when
    // training runs on every core (a drawing GUI thread stalls one of its threads), larger
    // when a core is free for the GUI.
    static constexpr double kSharedCoreFrameBudget = 0.015;
    static constexpr double kSpareCoreFrameBudget = 0.25;
    static constexpr double kDefaultFrameBudget = kSharedCoreFrameBudget;

    explicit MonitorPage(QWidget* parent = nullptr);
    ~MonitorPage() override;

    // A new run: forgets everything shown. `layers` (forward order) fixes the heatmap's rows
    // before the first telemetry frame.
    void reset(int64_t tokensPerStep, const std::vector<std::string>& layers);
    // The layers' formats as the run starts them; the run's events keep them current.
    void setInitialLayerStates(const std::vector<LayerState>& states);
    // Everything drained since the last call; draws a frame if the scheduler allows.
    void ingest(const TelemetryBatch& batch);
    // Draws a frame now, whatever the scheduler says (tests, screenshots).
    void renderNow();

    void setMaxFrameRateHz(double hz);
    double maxFrameRateHz() const { return maxFrameRateHz_; }
    void setFrameBudget(double fraction);
    double frameBudget() const { return frameBudget_; }
    const FrameStats& frameStats() const { return frameStats_; }
    // Time spent taking in each drained batch (appending to the history and the event list).
    const FrameStats& ingestStats() const { return ingestStats_; }
    int framesRendered() const { return framesRendered_; }

    // Moves every plot's cursor there (and the histogram to the nearest frame); -1 clears it
    // and the histogram follows the newest frame again.
    void setCursorStep(int64_t step);
    int64_t cursorStep() const { return cursorStep_; }
    // Selects the layer's heatmap row and shows its histogram.
    void selectLayer(const QString& layer);
    // The GEMM layer a heatmap row's menu switches: the row's own, lm_head for the tied wte (as the
    // watchers take it), "" for a row with no GEMM (wpe, ln_f, a block's norms), whose every pick
    // failed with "no layer matches". Any row while the run's layers are not known.
    QString switchableLayer(const QString& row) const;
    // The menu a right click on the layer's heatmap row opens (replaced by the next; owned by
    // the page): one action per layer_switch_choices(), each emitting layerSwitchRequested.
    QMenu* layerMenu(const QString& layer);
    QString selectedLayer() const { return selectedLayer_; }

    // The controls, also reachable from code.
    void setSmoothing(double weight);
    void setLogScale(bool enabled);
    void setXAxisMode(XAxisMode mode);
    void setHeatmapStatistic(LayerStat stat, const QString& role = QStringLiteral("grad_output"));
    void setHistogramRole(const QString& role);

    // The event list's text colour for an event kind: alerts red, loss-scale trouble orange,
    // precision changes and watcher actions blue; invalid (the palette's) for the rest.
    static QColor eventKindColor(EventKind kind);

    const RunHistory& history() const { return history_; }
    EventLogModel* eventModel() const { return eventModel_; }
    QTableView* eventView() const { return eventView_; }
    LossPlot* lossPlot() const { return lossPlot_; }
    LossScalePlot* lossScalePlot() const { return lossScalePlot_; }
    MemoryPlot* memoryPlot() const { return memoryPlot_; }
    CommunicationPlot* communicationPlot() const { return communicationPlot_; }
    LayerHeatmapPlot* heatmap() const { return heatmap_; }
    ExponentHistogramPlot* histogramPlot() const { return histogram_; }
    QSlider* smoothingSlider() const { return smoothingSlider_; }
    QCheckBox* logScaleBox() const { return logScaleBox_; }
    QComboBox* xAxisCombo() const { return xAxisCombo_; }
    QComboBox* heatmapStatCombo() const { return heatmapStatCombo_; }
    QComboBox* heatmapRoleCombo() const { return heatmapRoleCombo_; }
    QComboBox* histogramLayerCombo() const { return histogramLayerCombo_; }
    QComboBox* histogramRoleCombo() const { return histogramRoleCombo_; }
    QSlider* histogramStepSlider() const { return histogramStepSlider_; }

signals:
    // An event row or a heatmap cell was activated: the step it is about and the layer it
    // names ("" when none).
    void eventActivated(qint64 step, const QString& layer);
    void layerSelected(const QString& layer);
    // The layer's menu (a right click on its heatmap row) picked a precision for it: the main
    // window switches the run it shows, trained here or on a server (`scaling` "" keeps the
    // layer's recipe).
    void layerSwitchRequested(const QString& layer, const mantissa::GemmFormats& formats, const QString& scaling);
    // A frame was drawn (on screen, immediately) with the history up to `lastStep`.
    void frameRendered(qint64 lastStep);

protected:
    void showEvent(QShowEvent* event) override;

private:
    struct PlotSlot {
        QCustomPlot* plot = nullptr;
        std::function<bool()> refresh;
    };

    QWidget* buildControls();
    QWidget* buildHistogramPanel();
    void scheduleFrame();
    void renderFrame(bool force);
    void syncControls();
    void syncHistogramSlider();
    void activateEvent(const QModelIndex& index);
    void activate(int64_t step, const QString& layer);
    void updateFrameLabel();
    void alignCurvesToHeatmap();

    RunHistory history_;
    EventLogModel* eventModel_ = nullptr;

    LossPlot* lossPlot_ = nullptr;
    LossScalePlot* lossScalePlot_ = nullptr;
    MemoryPlot* memoryPlot_ = nullptr;
    CommunicationPlot* communicationPlot_ = nullptr; // shown for data-parallel runs only
    LayerHeatmapPlot* heatmap_ = nullptr;
    ExponentHistogramPlot* histogram_ = nullptr;
    QTableView* eventView_ = nullptr;
    std::vector<PlotSlot> plots_;

    QSlider* smoothingSlider_ = nullptr;
    QLabel* smoothingLabel_ = nullptr;
    QCheckBox* logScaleBox_ = nullptr;
    QComboBox* xAxisCombo_ = nullptr;
    QComboBox* heatmapStatCombo_ = nullptr;
    QComboBox* heatmapRoleCombo_ = nullptr;
    QComboBox* histogramLayerCombo_ = nullptr;
    QComboBox* histogramRoleCombo_ = nullptr;
    QSlider* histogramStepSlider_ = nullptr;
    QLabel* histogramStepLabel_ = nullptr;
    QToolButton* liveButton_ = nullptr;
    QLabel* frameLabel_ = nullptr;

    int64_t cursorStep_ = -1;
    QString selectedLayer_;
    QMenu* layerMenu_ = nullptr; // the last layer menu made (layerMenu)
    size_t listedLayers_ = 0;           // history layers the histogram combo was built from
    size_t listedTensorLayers_ = 0;     // and history_.layersWithTensors() then
    std::vector<int64_t> histogramSteps_; // the slider's frames

    double maxFrameRateHz_ = kDefaultMaxFrameRateHz;
    double frameBudget_ = kDefaultFrameBudget;
    FrameStats frameStats_;
    FrameStats ingestStats_;
    int framesRendered_ = 0;
    QElapsedTimer clock_;
    qint64 lastFrameStartMs_ = -1; // on clock_, -1 before the first frame
    QTimer deferred_;              // single shot: draws data that arrived between frames
    bool inFrame_ = false;
};

} // namespace mantissa
