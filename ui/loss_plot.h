// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The live loss curve: per-step training loss and periodic validation loss against the
// step. Data arrives in batches from the drain timer and each batch costs exactly one
// (queued) replot, however many points it carries.

#include <qcustomplot.h>

#include <vector>

#include "telemetry.h"

namespace mantissa {

class LossPlot : public QCustomPlot {
    Q_OBJECT

public:
    explicit LossPlot(QWidget* parent = nullptr);

    void clear();
    void appendBatch(const std::vector<StepMetrics>& steps, const std::vector<EvalMetrics>& evals);

    void setLogScale(bool enabled);
    bool logScale() const { return logScale_; }

    // While following, every batch rescales the axes to show all data. Dragging or zooming
    // stops that; a double-click resumes it.
    void setFollowing(bool enabled);
    bool following() const { return following_; }

    QCPGraph* trainGraph() const { return train_; }
    QCPGraph* valGraph() const { return val_; }
    int batchCount() const { return batches_; }

private:
    void fitToData();

    QCPGraph* train_ = nullptr;
    QCPGraph* val_ = nullptr;
    bool logScale_ = false;
    bool following_ = true;
    int batches_ = 0;
};

} // namespace mantissa
