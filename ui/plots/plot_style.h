// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Pieces every Mantissa plot shares, so the monitor and the Compare page read alike: the
// axes, large counts as 1.5M rather than 1.5·10⁶, and the colour scale beside a
// layer × step map.

#include <qcustomplot.h>

#include <functional>

namespace mantissa {

// Large counts (tokens) read better as 1.5M than as 1.5·10⁶.
class SiAxisTicker : public QCPAxisTicker {
protected:
    QString getTickLabel(double tick, const QLocale& locale, QChar formatChar, int precision) override;
};

// The shared axis look on both axes of the plot's main axis rect: dotted grid, slightly
// smaller tick labels; colours from the palette (follow_palette).
void style_axes(QCustomPlot* plot);

// Background, axes, grid, legend and colour-scale text in the widget's palette (Base and
// Text), now and whenever the palette changes, so plots follow a light or dark desktop.
void follow_palette(QCustomPlot* plot);

// A colour scale on the right of `plot`, driving `map`, with the map's axis rect and the
// scale sharing top and bottom margins so their edges line up.
QCPColorScale* attach_color_scale(QCustomPlot* plot, QCPColorMap* map);

// Fills `map` with nx × ny cells centred on 0 … nx-1 and 0 … ny-1, value(c, r) each.
// QCPColorMap cannot draw a single cell along an axis (its cell width comes from the spacing of
// the cell centres), so a lone column or row is stored twice, a quarter cell either side of its
// centre. With nx or ny 0 every cell is NaN.
void fill_color_map(QCPColorMap* map, int nx, int ny, const std::function<double(int c, int r)>& value);

} // namespace mantissa
