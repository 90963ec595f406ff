// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The Compare page's overlay: one metric of several runs, one colour per run, against step,
// tokens or training time, with the monitor's smoothing (raw faint, smoothed bold), an
// optional log axis and dashed vertical markers (where a run leaves the first one). Each
// curve is smoothed over all its points and then decimated (min/max per pixel bucket), so a
// million-point run costs a few thousand points to draw.

#include <qcustomplot.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace mantissa {

class ComparePlot : public QCustomPlot {
    Q_OBJECT

public:
    struct Curve {
        int64_t runId = 0;
        QString label; // the legend entry
        QColor color;
        std::vector<double> xs, ys; // every point, x ascending
        bool markers = false;       // sparse series (evaluations): dots on the line
    };
    struct Marker {
        double x = 0.0;
        QColor color;
        QString label;
    };

    explicit ComparePlot(QWidget* parent = nullptr);

    void setCurves(std::vector<Curve> curves, const QString& xLabel, const QString& yLabel);
    void setMarkers(std::vector<Marker> markers);
    void setSmoothing(double weight); // 0 .. 0.99
    void setLogScale(bool enabled);
    void setEmptyText(const QString& text); // shown when there is no curve
    // Rebuilds the graphs and replots (queued unless `now`). The axes fit the curves, unless
    // the user has zoomed or dragged since the curves last changed runs, metric or axis: a
    // live run's new points must not throw away the range the user is reading.
    void rebuild(bool now = false);
    bool userMovedAxes() const { return userMoved_; }

    int curveCount() const { return static_cast<int>(curves_.size()); }
    const Curve& curve(int i) const { return curves_.at(static_cast<size_t>(i)); }
    QCPGraph* rawGraph(int i) const { return raw_.at(static_cast<size_t>(i)); }
    QCPGraph* smoothedGraph(int i) const; // nullptr when not smoothed
    int markerCount() const { return static_cast<int>(markers_.size()); }
    const Marker& marker(int i) const { return markers_.at(static_cast<size_t>(i)); }
    double smoothing() const { return smoothing_; }
    bool logScale() const { return logScale_; }

    // The most points one curve hands to QCustomPlot.
    int pointBudget() const;

private:
    void fit();
    // The steps the curves span, from 0 or below: {x0, x1}, x1 -inf when there is no point.
    std::pair<double, double> stepExtent() const;

    std::vector<Curve> curves_;
    std::vector<Marker> markers_;
    std::vector<QCPGraph*> raw_, smooth_;
    std::vector<QCPAbstractItem*> markerItems_;
    QCPItemText* emptyText_ = nullptr;
    double smoothing_ = 0.0;
    bool logScale_ = false;
    bool userMoved_ = false;   // zoomed or dragged: keep the range; a double click fits again
    QString curvesIdentity_;   // runs, metric and axis the range was chosen for
};

} // namespace mantissa
