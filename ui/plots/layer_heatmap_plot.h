// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The layer x step heatmap of the monitor: one statistic (underflow/overflow % of a tensor
// role, amax, per-layer gradient norm, attention logit) for every layer at every telemetry
// frame the RunHistory kept. Rebuilt from the history on refresh(), never pushed to.

#include <qcustomplot.h>

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "models/run_history.h"

namespace mantissa {

class LayerHeatmapPlot : public QCustomPlot {
    Q_OBJECT

public:
    explicit LayerHeatmapPlot(QWidget* parent = nullptr);

    void setHistory(const RunHistory* history); // not owned
    void setStatistic(LayerStat stat, const QString& role = QStringLiteral("grad_output"));
    LayerStat statistic() const { return stat_; }
    QString role() const { return role_; }

    // Rebuilds from the history if its revision or a setting changed; true when a replot is
    // needed. Never replots itself.
    bool refresh();

    // Decorations: applied at once and drawn by a queued replot (cheap, coalesced); the next
    // refresh() also reports them.
    void setCursorStep(int64_t step);             // a vertical line; between frames it is interpolated
    void setSelectedLayer(const QString& layer); // a band on the row; clicks select too
    QString selectedLayer() const { return selectedLayer_; }

    // For tests.
    QCPColorMap* colorMap() const { return map_; }
    int rowCount() const { return static_cast<int>(layerNames_.size()); }
    int columnCount() const { return static_cast<int>(columnSteps_.size()); }
    double valueAt(int64_t step, const QString& layer) const; // the cell's value (NaN when none)
    bool nonFiniteAt(int64_t step, const QString& layer) const; // drawn dark: its tensor held NaN or Inf
    bool showsNonFiniteNote() const { return nonFiniteNote_->visible(); }
    // The text over a map with no value at all (none yet, or none measured); "" when hidden.
    QString noValueNote() const { return emptyText_->visible() ? emptyText_->text() : QString(); }
    // The plot coordinates of a cell's centre (x = column index, y = row key), for hit tests.
    QPointF cellCenter(int64_t step, const QString& layer) const;
    // " · bf16/bf16/bf16 emulated · switched at step 17: watcher nonfinite": the engine's live
    // state of a layer, shown beside the selected row; "" when unknown.
    QString liveStateText(const QString& layer) const;
    QString rowLabel(int row) const; // the y-axis label of a row
    QColor nonFiniteColor() const;   // of the cells whose tensor held NaN or Inf, and their key

signals:
    void cellClicked(qint64 step, const QString& layer);
    // A right click on a layer's row (anywhere along it), at `globalPos`.
    void layerMenuRequested(const QString& layer, const QPoint& globalPos);

protected:
    void changeEvent(QEvent* event) override; // a palette change recolours the NaN/Inf cells

private:
    void colorNonFinite();
    void rebuild();
    void updateCursor();
    void updateSelection();
    void updateEvents();
    void onMousePress(QMouseEvent* event);
    QString noValueText() const;          // why every cell of the statistic is grey
    double keyOfStep(int64_t step) const; // fractional column coordinate of a step
    int columnOfStep(int64_t step) const; // nearest column, -1 if none
    // (column, row) of a step's frame and a layer; none when either is not shown.
    std::optional<std::pair<size_t, size_t>> cellOf(int64_t step, const QString& layer) const;

    const RunHistory* history_ = nullptr;
    LayerStat stat_ = LayerStat::UnderflowPercent;
    QString role_ = QStringLiteral("grad_output");
    QString selectedLayer_;
    int64_t cursorStep_ = -1;

    uint64_t builtRevision_ = 0;
    bool dirty_ = true;        // the history or a setting changed: rebuild on refresh()
    bool needsReplot_ = false; // something drawn changed since the last refresh()
    bool built_ = false;
    LayerStat builtStat_ = LayerStat::UnderflowPercent;
    QString builtRole_;
    uint64_t builtLiveRevision_ = 0; // the live layers the row labels were made from

    std::vector<QString> layerNames_;   // rows, forward order (row 0 is drawn at the top)
    std::vector<int64_t> columnSteps_;  // one per column, ascending
    std::vector<float> values_;         // [column * rows + row]
    std::vector<char> nonFinite_;       // [column * rows + row]: the tensor held NaN or Inf
    std::vector<int64_t> eventSteps_;   // precision changes

    QCPColorMap* map_ = nullptr;
    QCPColorMap* nonFiniteMap_ = nullptr; // above map_: the cells whose tensor held NaN or Inf
    QCPItemText* nonFiniteNote_ = nullptr; // its legend, shown while there is one
    QCPColorScale* colorScale_ = nullptr;
    QCPItemStraightLine* cursor_ = nullptr;
    QCPItemRect* selection_ = nullptr;
    QCPItemText* selectionLabel_ = nullptr;
    std::vector<QCPItemStraightLine*> eventLines_;
    QCPItemText* emptyText_ = nullptr;
};

} // namespace mantissa
