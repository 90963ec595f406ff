// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/plot_style.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace mantissa {

QString SiAxisTicker::getTickLabel(double tick, const QLocale& locale, QChar formatChar, int precision)
{
    const double a = std::abs(tick);
    static const std::pair<double, const char*> units[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
    for (const auto& [scale, suffix] : units)
        if (a >= scale) return locale.toString(tick / scale, 'g', 4) + QLatin1String(suffix);
    return QCPAxisTicker::getTickLabel(tick, locale, formatChar, precision);
}

void style_axes(QCustomPlot* plot)
{
    QFont tickFont = plot->font();
    tickFont.setPointSizeF(std::max(7.0, tickFont.pointSizeF() - 1.0));
    for (QCPAxis* axis : {plot->xAxis, plot->yAxis}) {
        axis->grid()->setPen(QPen(QColor(225, 225, 225), 1, Qt::DotLine));
        axis->setTickLabelFont(tickFont);
        axis->setLabelFont(plot->font());
        axis->setBasePen(QPen(QColor(120, 120, 120)));
        axis->setTickPen(QPen(QColor(120, 120, 120)));
        axis->setSubTickPen(QPen(QColor(150, 150, 150)));
        axis->setTickLabelColor(QColor(60, 60, 60));
        axis->setLabelColor(QColor(40, 40, 40));
    }
}

QCPColorScale* attach_color_scale(QCustomPlot* plot, QCPColorMap* map)
{
    auto* scale = new QCPColorScale(plot);
    plot->plotLayout()->addElement(0, 1, scale);
    scale->setType(QCPAxis::atRight);
    scale->setBarWidth(12);
    map->setColorScale(scale);
    auto* group = new QCPMarginGroup(plot);
    plot->axisRect()->setMarginGroup(QCP::msTop | QCP::msBottom, group);
    scale->setMarginGroup(QCP::msTop | QCP::msBottom, group);
    return scale;
}

} // namespace mantissa
