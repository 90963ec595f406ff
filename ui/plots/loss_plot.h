// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The live loss curve: per-step training loss (raw, faint, plus TensorBoard-smoothed, bold)
// and periodic validation loss, against step / tokens / training time, with the common
// cursor and event markers of TimeSeriesPlot. Long runs are decimated (min/max per bucket)
// to about 4 points per pixel before QCustomPlot sees them.
//
// Two ways to feed it: setHistory() with the monitor page's RunHistory (refresh() rebuilds,
// the page replots), or the older appendBatch(), which keeps an internal history and
// replots (queued) by itself.

#include <memory>
#include <vector>

#include "plots/time_series_plot.h"

namespace mantissa {

class LossPlot : public TimeSeriesPlot {
    Q_OBJECT

public:
    explicit LossPlot(QWidget* parent = nullptr);
    ~LossPlot() override;

    // The appendBatch() path: forgets the internal history. With an external history it only
    // resets the view.
    void clear();
    // Appends to the internal history (ignored while an external history is set) and queues
    // one replot per call that carried data.
    void appendBatch(const std::vector<StepMetrics>& steps, const std::vector<EvalMetrics>& evals);
    int batchCount() const { return batches_; }

    void setLogScale(bool enabled);
    bool logScale() const { return logScale_; }

    // TensorBoard's smoothing weight, 0 (raw only) .. 0.999.
    void setSmoothing(double weight);
    double smoothing() const { return smoothing_; }

    QCPGraph* trainGraph() const { return train_; }   // raw training loss
    QCPGraph* valGraph() const { return val_; }       // validation loss
    QCPGraph* smoothedGraph() const { return smooth_; } // nullptr until smoothing is first set
    // "train loss NaN/Inf since step 2" (or "at 3 steps, first at step 5"), "" while every
    // loss is finite: a diverged run's curve is otherwise an empty plot.
    QString nonFiniteNote() const;

private:
    void rebuild(const RunHistory& history, bool full) override;
    void fitToData() override;
    void clearData() override;
    void styleTrainGraphs();
    void replotIfStandalone();

    std::unique_ptr<RunHistory> owned_; // the appendBatch() path
    QCPGraph* train_ = nullptr;
    QCPGraph* val_ = nullptr;
    QCPGraph* smooth_ = nullptr;
    QCPItemText* nonFiniteText_ = nullptr;
    // Over the train losses drawn: how many are NaN or Inf, the first, and where the run of
    // them at the end began (-1: the last is finite).
    int64_t nonFiniteCount_ = 0, firstNonFinite_ = -1, nonFiniteSince_ = -1;
    bool logScale_ = false;
    double smoothing_ = 0.0;
    int batches_ = 0;

    // What the raw graph holds, so new steps can be appended without a rebuild.
    size_t builtSteps_ = 0;
    int64_t builtLastStep_ = 0;
    bool builtDecimated_ = false;
};

} // namespace mantissa
