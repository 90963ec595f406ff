// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The Compare page's per-layer heatmap: a LayerDiffGrid (run A minus run B, layers x common
// steps) on a diverging colour scale centred on zero: red where A is higher, blue where B
// is, grey where either run has no value.

#include <qcustomplot.h>

#include "models/layer_diff.h"

namespace mantissa {

class LayerDiffPlot : public QCustomPlot {
    Q_OBJECT

public:
    explicit LayerDiffPlot(QWidget* parent = nullptr);

    // `label`: what the colour scale measures. Replots (queued).
    void setGrid(LayerDiffGrid grid, const QString& label);
    const LayerDiffGrid& grid() const { return grid_; }
    void setEmptyText(const QString& text);

    QCPColorMap* colorMap() const { return map_; }
    QString emptyText() const { return emptyText_->visible() ? emptyText_->text() : QString(); }
    bool saysIdentical() const { return sameText_->visible(); } // every cell is 0
    int rowCount() const { return static_cast<int>(grid_.layers.size()); }
    int columnCount() const { return static_cast<int>(grid_.steps.size()); }

private:
    LayerDiffGrid grid_;
    QCPColorMap* map_ = nullptr;
    QCPColorScale* colorScale_ = nullptr;
    QCPItemText* emptyText_ = nullptr;
    QCPItemText* sameText_ = nullptr;
};

} // namespace mantissa
