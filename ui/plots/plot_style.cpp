// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/plot_style.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

namespace {

// `t` of the way from `a` to `b`: greys that sit between the background and the text.
QColor mix(const QColor& a, const QColor& b, double t)
{
    return QColor::fromRgbF(static_cast<float>(a.redF() + (b.redF() - a.redF()) * t),
                            static_cast<float>(a.greenF() + (b.greenF() - a.greenF()) * t),
                            static_cast<float>(a.blueF() + (b.blueF() - a.blueF()) * t));
}

void color_axis(QCPAxis* axis, const QColor& base, const QColor& text)
{
    axis->grid()->setPen(QPen(mix(base, text, 0.13), 1, Qt::DotLine));
    axis->setBasePen(QPen(mix(base, text, 0.5)));
    axis->setTickPen(QPen(mix(base, text, 0.5)));
    axis->setSubTickPen(QPen(mix(base, text, 0.4)));
    axis->setTickLabelColor(mix(base, text, 0.8));
    axis->setLabelColor(mix(base, text, 0.9));
}

void apply_palette(QCustomPlot* plot)
{
    const QColor base = plot->palette().color(QPalette::Base);
    const QColor text = plot->palette().color(QPalette::Text);
    plot->setBackground(base);
    for (QCPLayoutElement* element : plot->plotLayout()->elements(true)) {
        if (auto* rect = qobject_cast<QCPAxisRect*>(element)) {
            for (QCPAxis* axis : rect->axes()) color_axis(axis, base, text);
        } else if (auto* scale = qobject_cast<QCPColorScale*>(element)) {
            color_axis(scale->axis(), base, text);
        } else if (auto* title = qobject_cast<QCPTextElement*>(element)) {
            title->setTextColor(text);
        }
    }
    // A legend keeps its own choice of frame or none; only the colours follow.
    if (QCPLegend* legend = plot->legend) {
        if (legend->brush().style() != Qt::NoBrush) {
            QColor fill = base;
            fill.setAlpha(220);
            legend->setBrush(fill);
        }
        if (legend->borderPen().style() != Qt::NoPen) legend->setBorderPen(QPen(mix(base, text, 0.3)));
        legend->setTextColor(text);
    }
}

// Re-applies the palette when it changes (the desktop switched to dark, or a test set one).
class PaletteFollower : public QObject {
public:
    explicit PaletteFollower(QCustomPlot* plot) : QObject(plot), plot_(plot) { plot->installEventFilter(this); }

protected:
    bool eventFilter(QObject* watched, QEvent* event) override
    {
        if (watched == plot_ && event->type() == QEvent::PaletteChange) {
            apply_palette(plot_);
            plot_->replot(QCustomPlot::rpQueuedReplot);
        }
        return false;
    }

private:
    QCustomPlot* plot_;
};

} // namespace

void follow_palette(QCustomPlot* plot)
{
    // One follower per plot (style_axes and the plot's constructor may both ask). PaletteFollower
    // has no meta-object of its own, so findChild could not tell it apart: a property marks it.
    if (!plot->property("mantissaFollowsPalette").toBool()) {
        new PaletteFollower(plot);
        plot->setProperty("mantissaFollowsPalette", true);
    }
    apply_palette(plot);
}

void style_axes(QCustomPlot* plot)
{
    QFont tickFont = plot->font();
    tickFont.setPointSizeF(std::max(7.0, tickFont.pointSizeF() - 1.0));
    for (QCPAxis* axis : {plot->xAxis, plot->yAxis}) {
        axis->setTickLabelFont(tickFont);
        axis->setLabelFont(plot->font());
    }
    follow_palette(plot);
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

void fill_color_map(QCPColorMap* map, int nx, int ny, const std::function<double(int c, int r)>& value)
{
    const int kx = std::max(nx, 2), ky = std::max(ny, 2);
    auto* data = map->data();
    data->setSize(kx, ky);
    data->setRange(nx > 1 ? QCPRange(0, nx - 1) : QCPRange(-0.25, 0.25),
                   ny > 1 ? QCPRange(0, ny - 1) : QCPRange(-0.25, 0.25));
    for (int ix = 0; ix < kx; ++ix) {
        const int c = std::min(ix, std::max(nx - 1, 0));
        for (int iy = 0; iy < ky; ++iy) {
            const int r = std::min(iy, std::max(ny - 1, 0));
            data->setCell(ix, iy, nx > 0 && ny > 0 ? value(c, r) : std::numeric_limits<double>::quiet_NaN());
        }
    }
}

} // namespace mantissa
