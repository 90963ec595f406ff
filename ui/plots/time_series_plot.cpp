// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/time_series_plot.h"

#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "plots/plot_style.h"

namespace mantissa {

namespace {

const QColor kCursorColor(148, 103, 189);
const QColor kMarkerColor(110, 110, 110);
constexpr int kLeftMarginPx = 72;

QString elide(QString text, int chars)
{
    text = text.simplified();
    return text.size() <= chars ? text : text.left(chars - 1) + QChar(0x2026);
}

// What changed, in a few words: "blocks.*.mlp.* → e4m3/e5m2/e5m2" (then "nvfp4" where the
// recipe changed too), "watch: nonfinite: switched blocks.1.mlp.fc1 to bf16".
QString short_label(const RunEvent& event)
{
    QString text;
    if (event.kind == EventKind::PrecisionChanged) {
        // A recipe's formats as it computes them (e2m1 under nvfp4), as the event's message says.
        const auto shown = event.new_formats && event.new_scaling
                               ? formats_as_computed(*event.new_formats, *event.new_scaling)
                               : event.new_formats;
        text = QString::fromStdString(event.pattern) + QStringLiteral(" \u2192 ") +
               QString::fromStdString(shown ? shown->describe() : std::string("?")) +
               (event.new_scaling ? QLatin1Char(' ') + QLatin1String(fp8_scaling_name(*event.new_scaling)) : QString());
    } else if (event.kind == EventKind::WatchAction)
        text = QStringLiteral("watch: ") + QString::fromStdString(event.message());
    else
        text = QString::fromStdString(event.tag());
    return elide(text, 34);
}

} // namespace

TimeSeriesPlot::TimeSeriesPlot(QWidget* parent) : QCustomPlot(parent)
{
    setMinimumSize(240, 120);
    setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    // Antialiasing is dropped while dragging so panning a long run stays fluid.
    setNoAntialiasingOnDrag(true);
    // Lines as separate segments, not one stroked polyline: Qt's raster engine strokes a wide
    // pen's joins slowly, and a long run's noisy train curve (8,192 points or more) took
    // 420 ms a replot with the 1.5-px pen; the Monitor then drew a frame every ~28 s
    // (bench/monitor_long_run.cpp). The joins are a little less smooth.
    setPlottingHint(QCP::phFastPolylines, true);
    setMouseTracking(true);

    style_axes(this);
    // One fixed left margin, so the stacked plots' step axes line up.
    axisRect()->setAutoMargins(QCP::msTop | QCP::msRight | QCP::msBottom);
    axisRect()->setMargins(QMargins(kLeftMarginPx, 0, 0, 0));
    xAxis->setLabel(xAxisLabel(mode_));
    xAxis->setRange(0, 1);
    yAxis->setRange(0, 1);
    legend->setBrush(QColor(255, 255, 255, 220));
    legend->setBorderPen(QPen(QColor(190, 190, 190)));
    legend->setFont(xAxis->tickLabelFont()); // the smaller font style_axes() chose
    legend->setIconSize(18, 10);
    legend->setRowSpacing(-2);
    axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);

    // The cursor on its own layer above the curves and markers.
    addLayer(QStringLiteral("cursor"), layer(QStringLiteral("main")), limAbove);
    cursor_ = new QCPItemLine(this);
    cursor_->setLayer(QStringLiteral("cursor"));
    for (QCPItemPosition* p : {cursor_->start, cursor_->end}) {
        p->setTypeX(QCPItemPosition::ptPlotCoords);
        p->setTypeY(QCPItemPosition::ptAxisRectRatio);
    }
    cursor_->start->setCoords(0, 0);
    cursor_->end->setCoords(0, 1);
    cursor_->setPen(QPen(kCursorColor, 1.5));
    cursor_->setSelectable(false);
    cursor_->setVisible(false);

    // A plain click should not freeze the view; only an actual drag (a move with a button
    // down, which QCustomPlot turns into a pan) or the wheel does.
    connect(this, &QCustomPlot::mouseMove, this, [this](QMouseEvent* event) {
        if (event->buttons() != Qt::NoButton)
            following_ = false;
        else
            showHoverTip(event);
    });
    connect(this, &QCustomPlot::mouseWheel, this, [this] { following_ = false; });
    connect(this, &QCustomPlot::mouseDoubleClick, this, [this] {
        setFollowing(true);
        replot(rpQueuedReplot);
    });
    connect(this, &QCustomPlot::afterLayout, this, &TimeSeriesPlot::declutter);
    follow_palette(this); // after the plot's own legend and axis set-up
}

QString TimeSeriesPlot::xAxisLabel(XAxisMode mode)
{
    switch (mode) {
    case XAxisMode::Tokens:
        return QStringLiteral("tokens");
    case XAxisMode::Seconds:
        return QStringLiteral("training time (s)");
    case XAxisMode::Step:
        break;
    }
    return QStringLiteral("step");
}

QPen TimeSeriesPlot::curvePen(const QColor& color, double width) { return QPen(color, width); }

void TimeSeriesPlot::setHistory(const RunHistory* history)
{
    if (history == history_) return;
    history_ = history;
    settingsChanged_ = true;
}

void TimeSeriesPlot::setXAxisTitleShown(bool shown)
{
    xTitleShown_ = shown;
    xAxis->setLabel(shown ? xAxisLabel(mode_) : QString());
}

void TimeSeriesPlot::resizeEvent(QResizeEvent* event)
{
    // About a value label per 28 px of height: a short plot printed five over each other.
    valueTicks_ = std::clamp((event->size().height() - 40) / 28, 2, 5);
    fitValueTicks();
    QCustomPlot::resizeEvent(event);
}

void TimeSeriesPlot::fitValueTicks() { yAxis->ticker()->setTickCount(valueTicks_); }

void TimeSeriesPlot::setXAxisMode(XAxisMode mode)
{
    if (mode == mode_) return;
    mode_ = mode;
    setXAxisTitleShown(xTitleShown_); // the new mode's title, where one is shown
    if (mode == XAxisMode::Tokens)
        xAxis->setTicker(QSharedPointer<SiAxisTicker>::create());
    else
        xAxis->setTicker(QSharedPointer<QCPAxisTicker>::create());
    // Other units: the old view means nothing any more.
    following_ = true;
    settingsChanged_ = true;
}

void TimeSeriesPlot::setCursorStep(int64_t step)
{
    if (step == cursorStep_) return;
    cursorStep_ = step;
    updateCursor();
    needsReplot_ = true;
}

void TimeSeriesPlot::setFollowing(bool enabled)
{
    following_ = enabled;
    if (enabled) {
        fitToData();
        needsReplot_ = true;
    }
}

void TimeSeriesPlot::invalidate() { settingsChanged_ = true; }

void TimeSeriesPlot::setPlotMargins(int left, int right)
{
    left = std::max(left, kLeftMarginPx);
    right = std::max(right, 0);
    const QMargins margins(left, 0, right, 0);
    if (axisRect()->margins().left() == left && axisRect()->margins().right() == right) return;
    axisRect()->setAutoMargins(QCP::msTop | QCP::msBottom);
    axisRect()->setMargins(margins);
    needsReplot_ = true;
}

double TimeSeriesPlot::xOfStep(int64_t step) const
{
    return history_ ? history_->xOf(step, mode_) : static_cast<double>(step);
}

int TimeSeriesPlot::pointBudget() const
{
    int pixels = axisRect()->width();
    if (pixels < 50) pixels = width() - 80; // not laid out yet
    return std::max(4 * pixels, minPointBudget_);
}

bool TimeSeriesPlot::refresh()
{
    bool changed = needsReplot_;
    needsReplot_ = false;
    if (!history_) {
        if (hadData_) {
            clearData();
            markers_.clear();
            for (QCPAbstractItem* item : markerItems_) removeItem(item);
            markerItems_.clear();
            markerLabels_.clear();
            hadData_ = false;
            changed = true;
        }
        return changed;
    }
    // A much wider or narrower plot wants another decimation.
    const int budget = pointBudget();
    if (builtBudget_ > 0 && (budget > builtBudget_ * 5 / 4 || budget < builtBudget_ * 3 / 4)) settingsChanged_ = true;
    if (!settingsChanged_ && history_->revision() == builtRevision_) return changed;

    const bool full = settingsChanged_;
    rebuild(*history_, full);
    if (full || history_->eventsRevision() != builtEvents_) rebuildMarkers(*history_);
    builtRevision_ = history_->revision();
    builtEvents_ = history_->eventsRevision();
    builtBudget_ = budget;
    settingsChanged_ = false;
    hadData_ = true;
    updateCursor();
    if (following_) fitToData();
    return true;
}

bool TimeSeriesPlot::wantsEventMarker(const RunEvent& event) const
{
    // A watcher's switch shows once, as its watch action, not again as the change it made; a
    // user's change that a resume made again shows once, as the user's.
    if (event.kind == EventKind::PrecisionChanged) return event.cause == ChangeCause::User;
    return event.kind == EventKind::WatchAction;
}

void TimeSeriesPlot::rebuildMarkers(const RunHistory& history)
{
    for (QCPAbstractItem* item : markerItems_) removeItem(item);
    markerItems_.clear();
    markerLabels_.clear();
    markers_.clear();
    for (const RunEvent& e : history.events()) {
        if (!wantsEventMarker(e)) continue;
        EventMarker m;
        m.step = e.step;
        m.x = history.xOf(e.step, mode_);
        m.kind = QString::fromStdString(e.tag());
        m.label = short_label(e);
        m.message = QString::fromStdString(e.message());
        markers_.push_back(std::move(m));
    }
    // A run that changes precision every few steps would draw a fence; the newest ones matter.
    constexpr size_t kMaxDrawn = 200;
    const size_t first = markers_.size() > kMaxDrawn ? markers_.size() - kMaxDrawn : 0;
    for (size_t i = first; i < markers_.size(); ++i) {
        const EventMarker& m = markers_[i];
        const QColor color = m.kind == QLatin1String("watch_action") ? QColor(188, 120, 30) : kMarkerColor;
        auto* line = new QCPItemLine(this);
        for (QCPItemPosition* p : {line->start, line->end}) {
            p->setTypeX(QCPItemPosition::ptPlotCoords);
            p->setTypeY(QCPItemPosition::ptAxisRectRatio);
        }
        line->start->setCoords(m.x, 0);
        line->end->setCoords(m.x, 1);
        line->setPen(QPen(color, 1, Qt::DashLine));
        line->setSelectable(false);
        markerItems_.push_back(line);

        // Vertical text along the line's left side, reading upwards from near the top.
        auto* label = new QCPItemText(this);
        label->position->setTypeX(QCPItemPosition::ptPlotCoords);
        label->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
        label->position->setCoords(m.x, 0.02);
        label->setRotation(-90);
        label->setPositionAlignment(Qt::AlignRight | Qt::AlignBottom);
        label->setPadding(QMargins(2, 0, 2, 1));
        QFont f = font();
        f.setPointSizeF(std::max(7.0, f.pointSizeF() - 1.5));
        label->setFont(f);
        label->setColor(color.darker(130));
        label->setText(m.label);
        label->setSelectable(false);
        markerItems_.push_back(label);
        markerLabels_.push_back(label);
    }
}

void TimeSeriesPlot::updateCursor()
{
    const bool show = cursorStep_ >= 0;
    cursor_->setVisible(show);
    if (!show) return;
    const double x = xOfStep(cursorStep_);
    cursor_->start->setCoords(x, 0);
    cursor_->end->setCoords(x, 1);
}

void TimeSeriesPlot::setDeclutteredLabels(std::vector<QCPItemText*> labels)
{
    labels_ = std::move(labels);
    preferred_.clear();
    for (const QCPItemText* l : labels_) preferred_.push_back({l->positionAlignment(), l->padding()});
}

void TimeSeriesPlot::declutter()
{
    const QRectF area = axisRect()->rect();
    std::vector<QPointF> points; // the obstacles' markers in pixels, those in the plot area
    for (QCPGraph* g : obstacles_)
        for (auto d = g->data()->constBegin(); d != g->data()->constEnd(); ++d) {
            const QPointF p(xAxis->coordToPixel(d->key), yAxis->coordToPixel(d->value));
            if (area.contains(p)) points.push_back(p);
        }
    std::vector<QRectF> kept;
    // Whether the label, placed as it is now, lies in the plot area clear of kept labels and
    // of other markers; if so it is kept.
    const auto place = [&](QCPItemText* label) {
        // The corners' bounding box (the text may be rotated).
        double left = INFINITY, top = INFINITY, right = -INFINITY, bottom = -INFINITY;
        for (QCPItemAnchor* a : {label->topLeft, label->topRight, label->bottomLeft, label->bottomRight}) {
            const QPointF p = a->pixelPosition();
            left = std::min(left, p.x());
            right = std::max(right, p.x());
            top = std::min(top, p.y());
            bottom = std::max(bottom, p.y());
        }
        const QRectF r(QPointF(left, top), QPointF(right, bottom));
        if (!area.contains(r)) return false; // a label cut by the plot's edge is noise
        if (std::any_of(kept.begin(), kept.end(), [&](const QRectF& k) { return k.intersects(r); })) return false;
        const QPointF anchor = label->position->pixelPosition();
        // The text itself, without the padding that keeps it off its own marker's line.
        const QMargins pad = label->padding();
        const QRectF text = r.adjusted(pad.left(), pad.top(), -pad.right(), -pad.bottom());
        const bool covers = std::any_of(points.begin(), points.end(), [&](const QPointF& p) {
            // A marker is drawn about 8 px wide: one whose centre is 4 px off still shows.
            return text.adjusted(-4, -4, 4, 4).contains(p) &&
                   std::abs(p.x() - anchor.x()) + std::abs(p.y() - anchor.y()) > 1.0;
        });
        if (covers) return false;
        kept.push_back(r.adjusted(-2, -2, 2, 2));
        return true;
    };
    // Newest first: a label survives unless it overlaps one that was kept already. A marker's
    // label that does not fit where it was placed is tried flipped: above its marker instead
    // of below (a scale on the plot's floor has no room below), then to its left (a marker at
    // the right edge), then both.
    for (size_t i = labels_.size(); i-- > 0;) {
        QCPItemText* label = labels_[i];
        const Placement& want = preferred_[i];
        bool shown = false;
        for (int flip = 0; flip < 4 && !shown; ++flip) {
            Qt::Alignment a = want.alignment;
            QMargins m = want.padding;
            if (flip & 1) {
                if (!(a & (Qt::AlignTop | Qt::AlignBottom))) continue;
                a = (a & ~Qt::Alignment(Qt::AlignVertical_Mask)) | (a & Qt::AlignTop ? Qt::AlignBottom : Qt::AlignTop);
                m = QMargins(m.left(), m.bottom(), m.right(), m.top());
            }
            if (flip & 2) {
                if (!(a & (Qt::AlignLeft | Qt::AlignRight))) continue;
                a = (a & ~Qt::Alignment(Qt::AlignHorizontal_Mask)) |
                    (a & Qt::AlignLeft ? Qt::AlignRight : Qt::AlignLeft);
                m = QMargins(m.right(), m.top(), m.left(), m.bottom());
            }
            label->setPositionAlignment(a);
            label->setPadding(m);
            shown = place(label);
        }
        label->setVisible(shown);
    }
    for (auto it = markerLabels_.rbegin(); it != markerLabels_.rend(); ++it) (*it)->setVisible(place(*it));
}

QString TimeSeriesPlot::hoverText(const QPointF& pixel) const
{
    QString text;
    for (const EventMarker& m : markers_) {
        const double px = xAxis->coordToPixel(m.x);
        if (std::abs(px - pixel.x()) > 4.0) continue;
        if (!text.isEmpty()) text += QLatin1Char('\n');
        text += QStringLiteral("step %1 \u2014 %2: %3").arg(m.step).arg(m.kind, m.message);
    }
    return text;
}

void TimeSeriesPlot::showHoverTip(QMouseEvent* event)
{
    const QPointF pos = event->position();
    if (!axisRect()->rect().contains(pos.toPoint())) {
        QToolTip::hideText();
        return;
    }
    const QString text = hoverText(pos);
    if (text.isEmpty())
        QToolTip::hideText();
    else
        QToolTip::showText(event->globalPosition().toPoint(), text, this);
}

void TimeSeriesPlot::placeLegendAbove()
{
    axisRect()->insetLayout()->take(legend);
    plotLayout()->insertRow(0);
    // The legend at its natural width on the left, an empty element taking the rest.
    auto* row = new QCPLayoutGrid;
    plotLayout()->addElement(0, 0, row);
    row->addElement(0, 0, legend);
    row->addElement(0, 1, new QCPLayoutElement(this));
    row->setColumnStretchFactor(0, 0.001);
    row->setColumnSpacing(0);
    plotLayout()->setRowStretchFactor(0, 0.001);
    plotLayout()->setRowSpacing(0);
    legend->setFillOrder(QCPLegend::foColumnsFirst);
    legend->setBrush(Qt::NoBrush);
    legend->setBorderPen(Qt::NoPen);
    legend->setColumnSpacing(12);
    legend->setMargins(QMargins(48, 2, 4, 0));
}

void TimeSeriesPlot::fitGraphs(const QList<QCPGraph*>& graphs, bool logY, bool yFromZero, double logPad)
{
    double kLo = INFINITY, kHi = -INFINITY, vLo = INFINITY, vHi = -INFINITY;
    for (const QCPGraph* g : graphs) {
        if (!g || !g->visible()) continue;
        for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) {
            if (!std::isfinite(it->key)) continue;
            kLo = std::min(kLo, it->key);
            kHi = std::max(kHi, it->key);
            // Non-finite values (a NaN loss) and, on a log axis, non-positive ones are gaps.
            if (!std::isfinite(it->value) || (logY && it->value <= 0)) continue;
            vLo = std::min(vLo, it->value);
            vHi = std::max(vHi, it->value);
        }
    }
    // The stacked curves read down one column: each ends where the run is, not where its own
    // series ends (memory comes on telemetry steps only, and its axis ran to step 15 of 19).
    if (history() && !history()->steps().empty()) {
        const double last = xOfStep(history()->lastStep());
        if (std::isfinite(last)) {
            kHi = std::max(kHi, last);
            kLo = std::min(kLo, last);
        }
    }
    if (kLo > kHi) return;
    // A little room on the right keeps markers on the newest step whole.
    const double xLo = std::min(0.0, kLo);
    const double xHi = kHi > xLo ? kHi : xLo + 1.0;
    xAxis->setRange(xLo, xHi + 0.01 * (xHi - xLo));
    if (vLo > vHi) return;
    if (logY) {
        if (vHi / vLo < 1.5) {
            vLo /= 1.5;
            vHi *= 1.5;
        }
        yAxis->setRange(vLo / logPad, vHi * logPad);
        return;
    }
    const double pad = std::max({(vHi - vLo) * 0.05, std::abs(vHi) * 1e-3, 1e-9});
    double lo = vLo - pad;
    if (vLo >= 0) lo = std::max(0.0, lo);
    if (yFromZero) lo = std::min(0.0, lo);
    yAxis->setRange(lo, vHi + pad);
}

} // namespace mantissa
