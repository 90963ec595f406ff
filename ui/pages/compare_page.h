// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The Compare page: saved runs side by side. Above, one metric of every run overlaid (by
// step, tokens or training time, with the monitor's smoothing) and a dashed line where each
// run's train loss first leaves the first run's by more than the tolerance. Below, three
// tabs: the summary (final / best val, speed, memory, skipped steps, relative to the FP32
// run or else the first, and the divergence step), the config keys that differ, and a
// layer x step heatmap of one per-layer statistic, first run minus another.
//
// Series are read from the store once per run and tag and kept while the same runs are
// shown; every control only redraws. Every control has a method, so tests and scripts
// drive the page without clicks.

#include <QString>
#include <QStringList>
#include <QWidget>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/layer_diff.h"
#include "run_compare.h"
#include "run_store.h"
#include "models/run_history.h"
#include "run_summary.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QSlider;
class QStandardItemModel;
class QTabWidget;
class QTableView;
class QTimer;

namespace mantissa {

class ComparePlot;
class LayerDiffPlot;
class StoreConnection;

class ComparePage : public QWidget {
    Q_OBJECT

public:
    enum class Tab { Summary = 0, ConfigDiff = 1, LayerStats = 2 };
    enum SummaryColumn {
        SumRun,
        SumName,
        SumRecipe,
        SumStatus,
        SumSteps,
        SumFinalVal,
        SumBestVal,
        SumDeltaVal,
        SumTokensPerS,
        SumTokensRatio,
        SumPeakMemory,
        SumMemoryRatio,
        SumSkipped,
        SumDiverges,
        SumColumnCount
    };
    static constexpr double kDefaultSmoothing = 0.6;
    static constexpr double kDefaultTolerance = kDefaultDivergenceTolerance; // as the CLI's compare

    explicit ComparePage(StoreConnection* store, QWidget* parent = nullptr);
    ~ComparePage() override;

    // Shows these runs, in this order (the first is the divergence reference and run A of
    // the layer heatmap). Runs no longer in the store are left out with a message; false
    // when none is left or the store cannot be read.
    bool setRuns(const std::vector<int64_t>& ids);
    std::vector<int64_t> runIds() const;
    // Reads the same runs again (renamed, tagged, deleted or grown meanwhile). The store says
    // "changed" about once a second while a remote run trains: a hidden page reads again when
    // it is shown, and a shown one only when one of its runs changed. A run that trains here
    // or in another process says nothing: a shown page with one reads again every 2 s.
    bool reload();

    // The scalar tags the shown runs have (train/loss and val/loss first).
    QStringList metrics() const;
    bool setMetric(const QString& tag); // false when no shown run has it
    QString metric() const { return metric_; }
    void setXAxisMode(XAxisMode mode);
    XAxisMode xAxisMode() const { return mode_; }
    void setSmoothing(double weight);
    void setLogScale(bool enabled);

    // Divergence of each run's train/loss from the first run's (first_divergence_step).
    void setTolerance(double tolerance, bool relative);
    double tolerance() const { return tolerance_; }
    bool relativeTolerance() const { return relative_; }
    std::optional<int64_t> divergenceStep(int64_t runId) const;

    void setLayerStat(LayerDiffStat stat, const QString& role = QStringLiteral("grad_output"));
    bool setLayerDiffOther(int64_t runId); // run B of the heatmap (not the first)
    int64_t layerDiffOther() const { return layerOther_; }
    // Rebuilds the heatmap now (it is otherwise built when its tab is first shown).
    void updateLayerDiff();

    void showTab(Tab tab);
    Tab currentTab() const;
    // The summary's reference row: the FP32 run if one is shown, else the first.
    int referenceRow() const { return referenceRow_; }

    bool exportCurves(const QString& path);    // .png or .pdf
    bool exportLayerDiff(const QString& path); // .png or .pdf
    bool exportSummaryCsv(const QString& path);
    bool exportConfigDiffCsv(const QString& path);

    QString lastError() const { return lastError_; }
    QString message() const; // what the page's message line says ("" when hidden)

    ComparePlot* curvePlot() const { return plot_; }
    LayerDiffPlot* layerDiffPlot() const { return layerPlot_; }
    QStandardItemModel* summaryModel() const { return summaryModel_; }
    QString referenceText() const; // "Relative to the FP32 run #1 (bold), …"
    QStandardItemModel* configDiffModel() const { return diffModel_; }
    QComboBox* metricCombo() const { return metricCombo_; }
    QComboBox* xAxisCombo() const { return xAxisCombo_; }
    QSlider* smoothingSlider() const { return smoothingSlider_; }
    QCheckBox* logScaleBox() const { return logScaleBox_; }
    QDoubleSpinBox* toleranceSpin() const { return toleranceSpin_; }
    QCheckBox* relativeBox() const { return relativeBox_; }
    QTableView* summaryView() const { return summaryView_; }
    QTableView* configDiffView() const { return diffView_; }

protected:
    void showEvent(QShowEvent* event) override;
    void hideEvent(QHideEvent* event) override;
    void changeEvent(QEvent* event) override; // a palette change recolours the header's hint

private:
    // setRuns, with the store's rows for `ids` when already read (nullopt: read them here).
    bool loadRuns(const std::vector<int64_t>& ids, std::optional<std::vector<RunSummaryRow>> rows);
    // Whether a shown run changed in the store (or the store cannot say); `rows`: what was read.
    // `readFailed`: set when the store could not be read (the answer is then true).
    bool runsChangedInStore(std::optional<std::vector<RunSummaryRow>>& rows, bool* readFailed = nullptr) const;
    void followTick();
    struct RunData {
        RunSummaryRow row;
        QString storePath; // with row.id and row.created_at: which run this is, across stores
        double tokensPerStep = 0.0;
        std::vector<std::string> layerOrder; // forward order, from the config
        std::map<std::string, Series> series; // by tag, read once
        std::optional<Series> stepTimes;
    };

    // "#3 addition-default", with the recipe where another compared run has the same name
    // ("#3 addition-default · fp16"): a precision comparison starts from one project.
    QString labelOf(const RunData& run) const;
    QWidget* buildControls();
    QWidget* buildLayerTab();
    const Series& seriesOf(RunData& run, const std::string& tag);
    std::vector<XYPoint> pointsOf(RunData& run, const Series& series);
    double xOfStep(RunData& run, int64_t step);
    void rebuildCurves();
    void computeDivergence();
    void rebuildSummary();
    void rebuildConfigDiff();
    void rebuildHeader();
    void applyPlotScales(); // smoothing and log axis, as the metric allows (loss_scale: none, log)
    void syncLayerControls();
    bool fail(const QString& message);
    void note(const QString& message); // informational, not an error
    void clearMessage();
    void askExportPlot(bool heatmap);
    void askExportTable(bool summary);
    void followRunningRuns();
    bool showsTrainingRun() const;

    StoreConnection* store_ = nullptr;
    mutable TokensMedianCache medianCache_; // the compared runs' tokens/s as last read (see RunsPage)
    std::vector<RunData> runs_;
    bool reloadWhenShown_ = false;
    QTimer* followTimer_ = nullptr; // reloads while a shown run still trains
    QStringList metrics_;
    QString metric_ = QStringLiteral("train/loss");
    XAxisMode mode_ = XAxisMode::Step;
    double smoothing_ = kDefaultSmoothing;
    bool logScale_ = false;
    double tolerance_ = kDefaultTolerance;
    bool relative_ = false;
    std::map<int64_t, std::optional<int64_t>> divergence_;
    LayerDiffStat layerStat_ = LayerDiffStat::UnderflowPercent;
    QString layerRole_ = QStringLiteral("grad_output");
    int64_t layerOther_ = -1;
    bool layerDirty_ = true;
    int referenceRow_ = 0;
    QString lastError_;
    bool syncing_ = false;

    QLabel* headerLabel_ = nullptr;
    QLabel* messageLabel_ = nullptr;
    ComparePlot* plot_ = nullptr;
    QComboBox* metricCombo_ = nullptr;
    QComboBox* xAxisCombo_ = nullptr;
    QSlider* smoothingSlider_ = nullptr;
    QLabel* smoothingLabel_ = nullptr;
    QCheckBox* logScaleBox_ = nullptr;
    QDoubleSpinBox* toleranceSpin_ = nullptr;
    QCheckBox* relativeBox_ = nullptr;
    QTabWidget* tabs_ = nullptr;
    QStandardItemModel* summaryModel_ = nullptr;
    QTableView* summaryView_ = nullptr;
    QLabel* referenceLabel_ = nullptr;
    QStandardItemModel* diffModel_ = nullptr;
    QTableView* diffView_ = nullptr;
    QLabel* diffLabel_ = nullptr;
    LayerDiffPlot* layerPlot_ = nullptr;
    QComboBox* layerStatCombo_ = nullptr;
    QComboBox* layerRoleCombo_ = nullptr;
    QComboBox* layerOtherCombo_ = nullptr;
    QLabel* layerLabel_ = nullptr;
};

} // namespace mantissa
