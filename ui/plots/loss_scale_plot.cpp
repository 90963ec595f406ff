// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/loss_scale_plot.h"

#include <QRegularExpression>

#include <algorithm>
#include <cmath>

#include "plots/smoothing.h"

namespace mantissa {

namespace {

const QColor kScaleColor(31, 119, 180);
const QColor kBackoffColor(214, 39, 40);
const QColor kGrowthColor(44, 160, 44);
const QColor kSkippedColor(120, 30, 30);

// Ticks at powers of two only, labelled 2ⁿ; the stride grows so that about six fit, or as
// many as the axis has room for at a label per 20 px (a short plot printed six labels over
// each other).
class Pow2Ticker : public QCPAxisTicker {
public:
    QCPAxis* axis = nullptr;

protected:
    double getTickStep(const QCPRange& range) override
    {
        const double lo = std::log2(std::max(range.lower, 1e-300));
        const double hi = std::log2(std::max(range.upper, 1e-300));
        const int pixels = axis && axis->axisRect() ? axis->axisRect()->height() : 0;
        const double fit = pixels > 0 ? std::clamp(pixels / 20.0, 2.0, 6.0) : 6.0;
        return std::max(1.0, std::ceil((hi - lo) / fit));
    }
    int getSubTickCount(double) override { return 0; }
    QVector<double> createTickVector(double tickStep, const QCPRange& range) override
    {
        QVector<double> ticks;
        if (range.upper <= 0) return ticks;
        const int stride = std::max(1, static_cast<int>(tickStep));
        const int lo = static_cast<int>(std::floor(std::log2(std::max(range.lower, 1e-300)) / stride)) * stride;
        const int hi = static_cast<int>(std::ceil(std::log2(range.upper)));
        for (int e = lo; e <= hi; e += stride) ticks.push_back(std::ldexp(1.0, e));
        return ticks;
    }
    QString getTickLabel(double tick, const QLocale&, QChar, int) override
    {
        static const QString digits = QStringLiteral("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079");
        const int e = static_cast<int>(std::lround(std::log2(tick)));
        QString exponent;
        for (const QChar c : QString::number(std::abs(e))) exponent += digits[c.digitValue()];
        return QStringLiteral("2") + (e < 0 ? QStringLiteral("\u207b") : QString()) + exponent;
    }
};

// The scale a step used; `fallback` when the step is not (yet) in the history.
double scale_at(const std::vector<StepPoint>& steps, int64_t step, double fallback)
{
    const auto it = std::lower_bound(steps.begin(), steps.end(), step,
                                     [](const StepPoint& p, int64_t s) { return p.step < s; });
    return it != steps.end() && it->step == step ? it->loss_scale : fallback;
}

QString joined(const std::vector<std::string>& names)
{
    QStringList out;
    for (const auto& n : names) out << QString::fromStdString(n);
    return out.join(QStringLiteral(", "));
}

} // namespace

LossScalePlot::LossScalePlot(QWidget* parent) : TimeSeriesPlot(parent)
{
    yAxis->setScaleType(QCPAxis::stLogarithmic);
    auto ticker = QSharedPointer<Pow2Ticker>::create();
    ticker->axis = yAxis;
    yAxis->setTicker(ticker);
    yAxis->setLabel(QStringLiteral("loss scale"));
    yAxis->setRange(0.5, 2.0);

    scale_ = addGraph();
    scale_->setName(QStringLiteral("scale"));
    scale_->setPen(curvePen(kScaleColor, 1.5));
    scale_->setLineStyle(QCPGraph::lsStepLeft);

    skipped_ = addGraph();
    skipped_->setName(QStringLiteral("skipped step"));
    skipped_->setLineStyle(QCPGraph::lsNone);
    skipped_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCross, QPen(kSkippedColor, 1.5), Qt::NoBrush, 8));

    growth_ = addGraph();
    growth_->setName(QStringLiteral("growth"));
    growth_->setLineStyle(QCPGraph::lsNone);
    growth_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangle, kGrowthColor, kGrowthColor, 8));

    backoff_ = addGraph();
    backoff_->setName(QStringLiteral("backoff"));
    backoff_->setLineStyle(QCPGraph::lsNone);
    backoff_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssTriangleInverted, kBackoffColor, kBackoffColor, 9));

    notice_ = new QCPItemText(this);
    notice_->position->setType(QCPItemPosition::ptAxisRectRatio);
    notice_->position->setCoords(0.5, 0.3);
    notice_->setPositionAlignment(Qt::AlignCenter);
    notice_->setText(QStringLiteral("loss scaling off"));
    notice_->setColor(QColor(110, 110, 110));
    QFont f = font();
    f.setItalic(true);
    notice_->setFont(f);
    notice_->setVisible(false);

    legend->setVisible(true);
    placeLegendAbove();
}

QString LossScalePlot::noticeText() const { return notice_->visible() ? notice_->text() : QString(); }

bool LossScalePlot::wantsEventMarker(const RunEvent& event) const
{
    // A user's change that a resume made again is marked once, as the user's.
    return event.kind == EventKind::PrecisionChanged && event.cause != ChangeCause::Resume;
}

void LossScalePlot::clearData()
{
    for (QCPGraph* g : {scale_, backoff_, growth_, skipped_}) g->data()->clear();
    for (QCPItemText* t : backoffLabels_) removeItem(t);
    backoffLabels_.clear();
    backoffs_.clear();
    growths_.clear();
    scalingOff_ = false;
    notice_->setVisible(false);
}

void LossScalePlot::rebuild(const RunHistory& history, bool)
{
    // Markers follow the events, which are few; the scale curve is decimated like the loss.
    const auto& steps = history.steps();
    const XAxisMode mode = xAxisMode();
    std::vector<double> xs, ys;
    xs.reserve(steps.size());
    ys.reserve(steps.size());
    QVector<double> skipX, skipY;
    bool scaled = false;
    for (const StepPoint& p : steps) {
        const double x = mode == XAxisMode::Step     ? static_cast<double>(p.step)
                         : mode == XAxisMode::Tokens ? p.tokens
                                                     : p.seconds;
        xs.push_back(x);
        ys.push_back(p.loss_scale);
        scaled = scaled || p.loss_scale != 1.0;
        if (p.skipped) {
            skipX.push_back(x);
            skipY.push_back(p.loss_scale);
        }
    }
    const DecimatedSeries d = decimate_min_max(xs, ys, std::max<size_t>(1, size_t(pointBudget()) / 4));
    scale_->setData(QVector<double>(d.xs.begin(), d.xs.end()), QVector<double>(d.ys.begin(), d.ys.end()), true);
    // A cross for every skipped step of a run that skips every step drew 50,000 of them each
    // frame: at most one in each of pointBudget()/4 columns of the run's x range (a few a
    // pixel), the newest of its column. A lone skip keeps its cross.
    const qsizetype columns = std::max(1, pointBudget() / 4);
    if (skipX.size() > columns && !xs.empty()) {
        const double x0 = xs.front(), width = std::max(xs.back() - x0, 1e-12);
        QVector<double> keptX, keptY;
        qsizetype lastColumn = -1;
        for (qsizetype i = 0; i < skipX.size(); ++i) {
            const auto column = static_cast<qsizetype>((skipX[i] - x0) / width * double(columns - 1));
            if (column == lastColumn) {
                keptX.back() = skipX[i]; // the newest of the column
                keptY.back() = skipY[i];
                continue;
            }
            lastColumn = column;
            keptX.push_back(skipX[i]);
            keptY.push_back(skipY[i]);
        }
        skipX = std::move(keptX);
        skipY = std::move(keptY);
    }
    skipped_->setData(skipX, skipY, true);

    for (QCPItemText* t : backoffLabels_) removeItem(t);
    backoffLabels_.clear();
    backoffs_.clear();
    growths_.clear();
    QVector<double> bx, by, gx, gy;
    const auto& events = history.events();
    for (size_t i = 0; i < events.size(); ++i) {
        const RunEvent& e = events[i];
        const bool backoff = e.kind == EventKind::LossScaleBackoff;
        if (!backoff && e.kind != EventKind::LossScaleGrowth) continue;
        ScaleMarker m;
        m.step = e.step;
        m.x = history.xOf(e.step, mode);
        m.event = i; // formatting every message every frame took 3.9 us an event
        // The marker sits on the scale the step used; an event without its step's metrics
        // (a store cut short) falls back to the scale the event names.
        m.scale = scale_at(steps, e.step, e.old_scale > 0 ? e.old_scale : 1.0);
        if (backoff) {
            m.layers = joined(e.layers);
            m.label = m.layers.isEmpty() ? QStringLiteral("backoff") : m.layers;
            bx.push_back(m.x);
            by.push_back(m.scale);
            backoffs_.push_back(std::move(m));
        } else {
            gx.push_back(m.x);
            gy.push_back(m.scale);
            growths_.push_back(std::move(m));
        }
        scaled = true;
    }
    backoff_->setData(bx, by, true);
    growth_->setData(gx, gy, true);

    // Labels for the newest backoffs; overlapping ones are hidden at draw time, and every
    // marker names its layers on hover.
    constexpr size_t kMaxLabels = 40;
    QFont f = font();
    f.setPointSizeF(std::max(7.0, f.pointSizeF() - 1.5));
    for (size_t i = backoffs_.size() > kMaxLabels ? backoffs_.size() - kMaxLabels : 0; i < backoffs_.size(); ++i) {
        const ScaleMarker& m = backoffs_[i];
        auto* label = new QCPItemText(this);
        label->position->setCoords(m.x, m.scale);
        label->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
        label->setPadding(QMargins(6, 4, 2, 0));
        label->setFont(f);
        label->setColor(kBackoffColor.darker(120));
        label->setText(m.label.size() > 48 ? m.label.left(47) + QChar(0x2026) : m.label);
        label->setSelectable(false);
        backoffLabels_.push_back(label);
    }
    setDeclutteredLabels(backoffLabels_);
    setLabelObstacles({backoff_, growth_, skipped_});

    scalingOff_ = !steps.empty() && !scaled;
    notice_->setVisible(scalingOff_);
}

QStringList LossScalePlot::shownLabels() const
{
    QStringList shown;
    for (const QCPItemText* t : backoffLabels_)
        if (t->visible()) shown << t->text();
    return shown;
}

void LossScalePlot::fitToData()
{
    fitGraphs({scale_, backoff_, growth_, skipped_}, true, false, 1.4); // room for the markers
    if (scalingOff_ || scale_->data()->isEmpty()) {
        yAxis->setRange(0.5, 2.0);
        return;
    }
    // A scale that fell 80 octaves (an init_scale of 1e30) left 1.4x as half a pixel: the
    // markers at either end were cut in half. Pad by a share of the span too.
    const QCPRange r = yAxis->range();
    const double pad = std::exp2(0.06 * std::log2(r.upper / r.lower));
    if (pad > 1.0) yAxis->setRange(r.lower / pad, r.upper * pad);
}

QString LossScalePlot::hoverText(const QPointF& pixel) const
{
    QString text = TimeSeriesPlot::hoverText(pixel);
    auto near = [&](const ScaleMarker& m) {
        return std::abs(xAxis->coordToPixel(m.x) - pixel.x()) <= 6.0 &&
               std::abs(yAxis->coordToPixel(m.scale) - pixel.y()) <= 8.0;
    };
    // The history may have thinned its events since the markers were made: an index that no
    // longer names the marker's event shows the step alone.
    const std::vector<RunEvent> none;
    const auto& events = history() ? history()->events() : none;
    for (const auto* list : {&backoffs_, &growths_})
        for (const ScaleMarker& m : *list) {
            if (!near(m)) continue;
            if (!text.isEmpty()) text += QLatin1Char('\n');
            const EventKind kind = m.label.isEmpty() ? EventKind::LossScaleGrowth : EventKind::LossScaleBackoff;
            const bool same =
                m.event < events.size() && events[m.event].step == m.step && events[m.event].kind == kind;
            const QString what = same ? QString::fromStdString(events[m.event].message())
                                      : QStringLiteral("loss scale %1").arg(m.label.isEmpty() ? "growth" : "backoff");
            text += QStringLiteral("step %1: %2").arg(m.step).arg(what);
        }
    return text;
}

} // namespace mantissa
