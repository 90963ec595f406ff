// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The common ground of the monitor's per-step plots (loss, loss scale, memory): they read a
// RunHistory, draw against step / tokens / training time, show a cursor step and vertical
// markers at precision changes and watch actions, and follow the data until the user pans
// or zooms (a double-click follows again). refresh() rebuilds only when the history's
// revision or a setting changed and never replots: the monitor page's frame scheduler
// decides when pixels are drawn.

#include <qcustomplot.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/run_history.h"

namespace mantissa {

class TimeSeriesPlot : public QCustomPlot {
    Q_OBJECT

public:
    // An event drawn as a dashed vertical line with a short label.
    struct EventMarker {
        int64_t step = 0;
        double x = 0.0; // in the current x-axis mode
        QString kind;
        QString label;   // drawn next to the line
        QString message; // the whole event text (tooltip)
    };

    explicit TimeSeriesPlot(QWidget* parent = nullptr);

    void setHistory(const RunHistory* history); // not owned; nullptr shows nothing
    const RunHistory* history() const { return history_; }

    void setXAxisMode(XAxisMode mode);
    XAxisMode xAxisMode() const { return mode_; }
    // Off for a plot stacked between others on one x axis: "step" once is enough, and a short
    // plot keeps the room for its curve.
    void setXAxisTitleShown(bool shown);
    static QString xAxisLabel(XAxisMode mode);

    // A vertical line at this step; -1 hides it.
    void setCursorStep(int64_t step);
    int64_t cursorStep() const { return cursorStep_; }
    QCPItemLine* cursorLine() const { return cursor_; }

    // While following, every refresh fits the axes to all data. Dragging or zooming stops
    // that; a double-click resumes it.
    void setFollowing(bool enabled);
    bool following() const { return following_; }

    // Rebuilds the plot data when the history or a setting changed; true when a replot is
    // needed. Never replots.
    bool refresh();
    // Forces the next refresh() to rebuild everything (after the history was reset).
    void invalidate();

    // Fixed pixel margins of the plot area (at least the default left margin), so plots
    // stacked above another one (the heatmap) put the same step at the same x.
    void setPlotMargins(int left, int right);

    const std::vector<EventMarker>& eventMarkers() const { return markers_; }

    // The most points a curve hands to QCustomPlot: about 4 per horizontal pixel, and never
    // fewer than the minimum (8192 by default).
    int pointBudget() const;
    void setMinPointBudget(int points) { minPointBudget_ = points; }

    // The x of a step in the current mode (tokens / interpolated training time).
    double xOfStep(int64_t step) const;

protected:
    void resizeEvent(QResizeEvent* event) override;
    void fitValueTicks(); // the count resizeEvent chose, on the y ticker (again after a new ticker)
    // Brings the plottables up to date with `history`. `full` is set when a setting changed
    // (x mode, budget, invalidate()) and everything must be rebuilt; otherwise a subclass may
    // append only what is new.
    virtual void rebuild(const RunHistory& history, bool full) = 0;
    // Fits the axes to the data (called after a rebuild while following).
    virtual void fitToData() = 0;
    // Empties the plottables (no history).
    virtual void clearData() = 0;
    // Whether an event of this kind gets a vertical marker.
    virtual bool wantsEventMarker(const RunEvent& event) const;
    // Extra tooltip text for a mouse position in pixels ("" for none); the event markers are
    // handled here.
    virtual QString hoverText(const QPointF& pixel) const;

    // A setting changed: the next refresh() rebuilds everything.
    void markSettingsChanged() { settingsChanged_ = true; }
    // Only decoration changed: the next refresh() asks for a replot.
    void markNeedsReplot() { needsReplot_ = true; }

    // Labels that must not overlap: before each draw, a label that would overlap a later
    // (newer) one in the list is hidden. One that does not fit where it is placed is tried
    // flipped vertically, then horizontally, then both (padding mirrored).
    void setDeclutteredLabels(std::vector<QCPItemText*> labels);
    // Graphs whose points those labels must not cover either: a label over another marker is
    // hidden too (its own marker, at the label's anchor, does not count).
    void setLabelObstacles(QList<QCPGraph*> graphs) { obstacles_ = std::move(graphs); }

    // Axis-range fitting for graphs: x from min(0, first key) to the last key, y padded (on a
    // log axis, positive values only, by the factor `logPad` either side).
    void fitGraphs(const QList<QCPGraph*>& graphs, bool logY, bool yFromZero, double logPad = 1.15);

    // Moves the legend out of the plot area into one row above it (small plots, where an
    // inset legend would hide data).
    void placeLegendAbove();

    // Shared look: grid, legend, fonts.
    static QPen curvePen(const QColor& color, double width = 1.5);

private:
    void rebuildMarkers(const RunHistory& history);
    void updateCursor();
    void declutter();
    void showHoverTip(QMouseEvent* event);

    const RunHistory* history_ = nullptr;
    XAxisMode mode_ = XAxisMode::Step;
    int64_t cursorStep_ = -1;
    bool following_ = true;
    bool xTitleShown_ = true;
    int valueTicks_ = 5;
    bool settingsChanged_ = true;
    bool needsReplot_ = false;
    bool hadData_ = false;
    uint64_t builtRevision_ = 0;
    uint64_t builtEvents_ = 0; // the history's eventsRevision() the markers show
    int builtBudget_ = 0;
    int minPointBudget_ = 8192; // QCustomPlot draws this many easily; below it nothing is dropped

    QCPItemLine* cursor_ = nullptr;
    std::vector<EventMarker> markers_;
    std::vector<QCPAbstractItem*> markerItems_;
    std::vector<QCPItemText*> labels_;
    struct Placement {
        Qt::Alignment alignment;
        QMargins padding;
    };
    std::vector<Placement> preferred_; // labels_' own placements, as they were handed over
    std::vector<QCPItemText*> markerLabels_;
    QList<QCPGraph*> obstacles_;
};

} // namespace mantissa
