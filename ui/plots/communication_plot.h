// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Data-parallel runs: rank 0's step time split into compute and the communication the
// backward did not hide (the allreduce wait after it), in ms per step. A rank that lags shows
// here as rank 0 waiting longer. The Monitor shows this plot only for runs that record
// `dp/allreduce_ms`; single-process runs keep their layout.

#include "plots/time_series_plot.h"

namespace mantissa {

class CommunicationPlot : public TimeSeriesPlot {
    Q_OBJECT

public:
    explicit CommunicationPlot(QWidget* parent = nullptr);

    QCPGraph* computeGraph() const { return compute_; }
    QCPGraph* allreduceGraph() const { return allreduce_; }

private:
    void rebuild(const RunHistory& history, bool full) override;
    void fitToData() override;
    void clearData() override;

    QCPGraph* compute_ = nullptr;
    QCPGraph* allreduce_ = nullptr;
};

} // namespace mantissa
