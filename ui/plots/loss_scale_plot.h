// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The dynamic loss scale per step on a log2 axis, with what moved it: backoffs (red down
// triangles, labelled with the layers whose gradients were non-finite), growths (green up
// triangles) and skipped steps (crosses). With scaling off it is a flat 1, and says so.

#include "plots/time_series_plot.h"

namespace mantissa {

class LossScalePlot : public TimeSeriesPlot {
    Q_OBJECT

public:
    struct ScaleMarker {
        int64_t step = 0;
        double x = 0.0;
        double scale = 1.0;  // where the marker sits: the scale the step used
        QString layers;      // blamed layers, "" when the message names none
        QString label;       // the text drawn next to the marker ("" for growths)
        size_t event = 0;    // its index in the history's events: the text is made on hover only
    };

    explicit LossScalePlot(QWidget* parent = nullptr);

    QCPGraph* scaleGraph() const { return scale_; }
    QCPGraph* backoffGraph() const { return backoff_; }
    QCPGraph* growthGraph() const { return growth_; }
    QCPGraph* skippedGraph() const { return skipped_; }
    const std::vector<ScaleMarker>& backoffs() const { return backoffs_; }
    const std::vector<ScaleMarker>& growths() const { return growths_; }
    bool scalingOff() const { return scalingOff_; }
    QString noticeText() const; // "loss scaling off" when shown, "" otherwise
    QStringList shownLabels() const; // the backoff labels the last draw kept, oldest first

private:
    void rebuild(const RunHistory& history, bool full) override;
    void fitToData() override;
    void clearData() override;
    bool wantsEventMarker(const RunEvent& event) const override;
    QString hoverText(const QPointF& pixel) const override;

    QCPGraph* scale_ = nullptr;
    QCPGraph* backoff_ = nullptr;
    QCPGraph* growth_ = nullptr;
    QCPGraph* skipped_ = nullptr;
    QCPItemText* notice_ = nullptr;
    std::vector<ScaleMarker> backoffs_;
    std::vector<ScaleMarker> growths_;
    std::vector<QCPItemText*> backoffLabels_;
    bool scalingOff_ = false;
};

} // namespace mantissa
