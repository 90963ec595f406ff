// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Memory at every telemetry frame, in MiB: the process's resident set, and on CUDA the
// caching allocator's allocated and reserved bytes and the device's NVML total. A line is
// shown only when its measurement exists (the engine reports -1 otherwise).

#include "plots/time_series_plot.h"

namespace mantissa {

class MemoryPlot : public TimeSeriesPlot {
    Q_OBJECT

public:
    explicit MemoryPlot(QWidget* parent = nullptr);

    QCPGraph* residentGraph() const { return resident_; }
    QCPGraph* cudaAllocatedGraph() const { return allocated_; }
    QCPGraph* cudaReservedGraph() const { return reserved_; }
    QCPGraph* nvmlGraph() const { return nvml_; }

private:
    void rebuild(const RunHistory& history, bool full) override;
    void fitToData() override;
    void clearData() override;

    QCPGraph* resident_ = nullptr;
    QCPGraph* allocated_ = nullptr;
    QCPGraph* reserved_ = nullptr;
    QCPGraph* nvml_ = nullptr;
};

} // namespace mantissa
