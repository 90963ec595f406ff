// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/layer_heatmap_plot.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "plots/plot_style.h"

namespace mantissa {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const QColor kNonFiniteColor(25, 25, 25);
// On a dark palette near-black is the background itself: the cells and their key vanished
// (read-only audit 'guiwalk'). Magenta is no colour of the maps' scales.
const QColor kNonFiniteOnDark(255, 64, 255);

// Columns are cells 0..n-1, one per telemetry frame, rather than cells at step resolution:
// after thinning, or around a resume or an eval gap, the frames are not evenly spaced, and a
// step-resolution map would either be mostly empty (50 steps per frame) or smear frames
// across their neighbours. So every frame gets one equally wide column, and this ticker maps
// the axis back to steps: ticks sit at round step numbers, placed by interpolating between
// the neighbouring columns' steps, so the axis always reads in steps.
class StepTicker : public QCPAxisTicker {
public:
    std::vector<int64_t> steps; // one per column, ascending
    QCPAxis* axis = nullptr;

    // The fractional column of a step (linear between column centres, extrapolated outside).
    double keyOf(double step) const
    {
        const size_t n = steps.size();
        if (n == 0) return 0.0;
        if (n == 1) return step - double(steps[0]);
        const auto it = std::lower_bound(steps.begin(), steps.end(), step,
                                         [](int64_t s, double v) { return double(s) < v; });
        size_t hi = size_t(it - steps.begin());
        hi = std::clamp<size_t>(hi, 1, n - 1);
        const size_t lo = hi - 1;
        const double span = std::max(1.0, double(steps[hi] - steps[lo]));
        return double(lo) + (step - double(steps[lo])) / span;
    }
    double stepAt(double key) const
    {
        const size_t n = steps.size();
        if (n == 0) return 0.0;
        if (n == 1) return double(steps[0]) + key;
        const double clamped = std::clamp(key, 0.0, double(n - 1));
        const size_t lo = std::min(size_t(std::floor(clamped)), n - 2);
        const double span = double(steps[lo + 1] - steps[lo]);
        return double(steps[lo]) + (key - double(lo)) * span;
    }

protected:
    int getSubTickCount(double) override { return 0; }
    QVector<double> createTickVector(double, const QCPRange& range) override
    {
        QVector<double> ticks;
        if (steps.empty()) return ticks;
        const double pixels = axis && axis->axisRect() ? std::max(100, axis->axisRect()->width()) : 600.0;
        // Only steps that lie between frames: past the last frame there is nothing to read.
        const double lo = std::max(stepAt(range.lower), double(steps.front()));
        const double hi = std::min(stepAt(range.upper), double(steps.back()));
        // The spacing follows the typical column width in steps (the median gap between
        // visible frames), not the whole span: one resume gap must not thin out the ticks
        // everywhere else.
        const size_t n = steps.size();
        const auto first = size_t(std::clamp(std::ceil(range.lower), 0.0, double(n - 1)));
        const auto lastColumn = size_t(std::clamp(std::floor(range.upper), 0.0, double(n - 1)));
        std::vector<double> gaps;
        for (size_t c = first; c < lastColumn; ++c) gaps.push_back(double(steps[c + 1] - steps[c]));
        double typical = 1.0;
        if (!gaps.empty()) {
            std::nth_element(gaps.begin(), gaps.begin() + std::ptrdiff_t(gaps.size() / 2), gaps.end());
            typical = std::max(1.0, gaps[gaps.size() / 2]);
        }
        const double raw = std::max(1.0, typical * 90.0 * range.size() / pixels);
        const double decade = std::pow(10.0, std::floor(std::log10(raw)));
        double spacing = decade * 10.0;
        for (double m : {1.0, 2.0, 5.0, 10.0})
            if (decade * m >= raw) {
                spacing = decade * m;
                break;
            }
        while ((hi - lo) / spacing > 2000) spacing *= 10; // a huge gap: keep the loop short
        // Columns covering more steps each (thinned history) squeeze the ticks there: drop any
        // tick closer than ~55 px to the last one kept.
        const double minGap = 55.0 * range.size() / pixels;
        double last = -std::numeric_limits<double>::infinity();
        for (double s = std::ceil(lo / spacing) * spacing; s <= hi + 0.5; s += spacing) {
            const double key = keyOf(s);
            if (key - last < minGap) continue;
            ticks.push_back(key);
            last = key;
        }
        return ticks;
    }
    QString getTickLabel(double tick, const QLocale&, QChar, int) override
    {
        return QString::number(std::llround(stepAt(tick)));
    }
};

// Layer names on the y axis, as many as fit without overlapping. When fewer than one label
// per block fits, only block starts are labelled ("blocks.12") so the labels stay aligned
// with the model's structure instead of landing on arbitrary sub-layers.
class RowTicker : public QCPAxisTicker {
public:
    std::vector<QString> names;
    std::vector<int> block; // block index per row, -1 for rows outside the blocks
    QCPAxis* axis = nullptr;

protected:
    int getSubTickCount(double) override { return 0; }
    QVector<double> createTickVector(double, const QCPRange&) override
    {
        QVector<double> ticks;
        blockLabels_ = false;
        const int n = static_cast<int>(names.size());
        if (n == 0) return ticks;
        const double pixels = axis && axis->axisRect() ? std::max(60, axis->axisRect()->height()) : 300.0;
        const double labelPx = axis ? QFontMetrics(axis->tickLabelFont()).height() + 1.0 : 14.0;
        const int k = std::max(1, int(std::ceil(labelPx / (pixels / n))));
        int rowsPerBlock = 0;
        for (int b : block) rowsPerBlock += b == 0 ? 1 : 0;
        blockLabels_ = rowsPerBlock > 0 && k > 1 && k >= rowsPerBlock;
        int last = -k;
        for (int row = 0; row < n; ++row) {
            const bool anchor = !blockLabels_ || block[size_t(row)] < 0 ||
                                row == 0 || block[size_t(row)] != block[size_t(row - 1)];
            if (!anchor || row - last < k) continue;
            ticks.push_back(row);
            last = row;
        }
        return ticks;
    }
    QString getTickLabel(double tick, const QLocale&, QChar, int) override
    {
        const long row = std::lround(tick);
        if (row < 0 || row >= long(names.size())) return {};
        if (blockLabels_ && block[size_t(row)] >= 0) return QStringLiteral("blocks.%1").arg(block[size_t(row)]);
        return names[size_t(row)];
    }

private:
    bool blockLabels_ = false;
};

int block_of(const QString& name)
{
    static const QString prefix = QStringLiteral("blocks.");
    if (!name.startsWith(prefix)) return -1;
    const int dot = name.indexOf(QLatin1Char('.'), prefix.size());
    bool ok = false;
    const int b = name.mid(prefix.size(), dot < 0 ? -1 : dot - prefix.size()).toInt(&ok);
    return ok ? b : -1;
}

bool is_log_stat(LayerStat stat) { return stat == LayerStat::Amax || stat == LayerStat::GradNorm; }
bool is_percent_stat(LayerStat stat)
{
    return stat == LayerStat::UnderflowPercent || stat == LayerStat::OverflowPercent ||
           stat == LayerStat::NonFinitePercent || stat == LayerStat::SubnormalPercent;
}

// A statistic of one tensor role, beside which the role's NaN and Inf can be shown.
bool is_tensor_stat(LayerStat stat)
{
    return stat == LayerStat::UnderflowPercent || stat == LayerStat::OverflowPercent || stat == LayerStat::Amax ||
           stat == LayerStat::QuantSnrDb || stat == LayerStat::SubnormalPercent;
}

// The smallest of 1, 2, 5 x 10^k that is >= v.
double nice_ceil(double v)
{
    if (!(v > 0)) return 1.0;
    const double decade = std::pow(10.0, std::floor(std::log10(v)));
    for (double m : {1.0, 2.0, 5.0, 10.0})
        if (decade * m >= v * (1 - 1e-9)) return decade * m;
    return decade * 10.0;
}

QCPColorGradient make_gradient(LayerStat stat)
{
    QCPColorGradient g;
    g.clearColorStops();
    g.setLevelCount(1000);
    if (is_percent_stat(stat)) {
        // "No problem" must read as empty: exactly 0 is white, anything above it is tinted.
        g.setColorStopAt(0.0, QColor(255, 255, 255));
        g.setColorStopAt(0.002, QColor(255, 240, 200));
        g.setColorStopAt(0.2, QColor(253, 174, 97));
        g.setColorStopAt(0.5, QColor(215, 48, 31));
        g.setColorStopAt(1.0, QColor(103, 0, 13));
    } else if (stat == LayerStat::AttentionMaxLogit) {
        g.setColorStopAt(0.0, QColor(252, 251, 253));
        g.setColorStopAt(0.35, QColor(188, 189, 220));
        g.setColorStopAt(0.7, QColor(117, 107, 177));
        g.setColorStopAt(1.0, QColor(63, 0, 125));
    } else { // magnitudes over decades: viridis, perceptually even
        g.setColorStopAt(0.0, QColor(68, 1, 84));
        g.setColorStopAt(0.25, QColor(59, 82, 139));
        g.setColorStopAt(0.5, QColor(33, 145, 140));
        g.setColorStopAt(0.75, QColor(94, 201, 98));
        g.setColorStopAt(1.0, QColor(253, 231, 37));
    }
    // A layer without a value (no weight on sdpa rows, logits only there) is neither good
    // nor bad: neutral grey, never the lowest colour.
    g.setNanHandling(QCPColorGradient::nhNanColor);
    g.setNanColor(QColor(214, 214, 214));
    return g;
}

QString stat_label(LayerStat stat, const QString& role)
{
    switch (stat) {
    case LayerStat::UnderflowPercent: return QStringLiteral("underflow % of %1").arg(role);
    case LayerStat::OverflowPercent: return QStringLiteral("overflow % of %1").arg(role);
    case LayerStat::Amax: return QStringLiteral("amax of %1").arg(role);
    case LayerStat::GradNorm: return QStringLiteral("grad L2 norm");
    case LayerStat::AttentionMaxLogit: return QStringLiteral("max |q·k|/√d");
    case LayerStat::QuantSnrDb: return QStringLiteral("quantization SNR (dB) of %1").arg(role);
    case LayerStat::NonFinitePercent: return QStringLiteral("NaN/Inf % of %1").arg(role);
    case LayerStat::SubnormalPercent: return QStringLiteral("subnormal % of %1").arg(role);
    }
    return {};
}

} // namespace

LayerHeatmapPlot::LayerHeatmapPlot(QWidget* parent) : QCustomPlot(parent)
{
    setMinimumSize(320, 220);
    // The map always shows the whole run; clicks select cells, so no drag/zoom to fight them.
    setInteractions(QCP::Interactions());
    // Axis-aligned rectangles gain nothing from antialiasing, and it is most of a live frame's
    // cost on a CPU that the training shares; text stays antialiased.
    setNotAntialiasedElements(QCP::AntialiasedElements(QCP::aeAll) & ~QCP::AntialiasedElements(QCP::aeItems));

    map_ = new QCPColorMap(xAxis, yAxis);
    map_->setInterpolate(false);
    map_->setTightBoundary(false);

    colorScale_ = attach_color_scale(this, map_);

    // Above the map: the cells whose tensor held NaN or Inf, in one dark colour whatever the
    // statistic. A diverged run's dead gradients read as 0% underflow, the white of a healthy
    // tensor (read-only audit 'gui-look').
    nonFiniteMap_ = new QCPColorMap(xAxis, yAxis);
    nonFiniteMap_->setInterpolate(false);
    nonFiniteMap_->setTightBoundary(false);
    nonFiniteMap_->setDataRange(QCPRange(0.0, 1.0));

    QFont small = font();
    small.setPointSizeF(std::max(6.5, small.pointSizeF() * 0.85));
    auto stepTicker = QSharedPointer<StepTicker>::create();
    stepTicker->axis = xAxis;
    xAxis->setTicker(stepTicker);
    xAxis->setLabel(QStringLiteral("step"));
    xAxis->setTickLabelFont(small);
    auto rowTicker = QSharedPointer<RowTicker>::create();
    rowTicker->axis = yAxis;
    yAxis->setTicker(rowTicker);
    yAxis->setTickLabelFont(small);
    yAxis->setRangeReversed(true); // the first layer at the top, as the model reads
    yAxis->setTickLength(0, 2);
    for (QCPAxis* a : {xAxis, yAxis}) a->grid()->setVisible(false);
    // A frame around the map, so an all-white (problem-free) map still reads as a map.
    for (QCPAxis* a : {xAxis2, yAxis2}) {
        a->setVisible(true);
        a->setTicks(false);
        a->setTickLabels(false);
    }
    axisRect()->setBackground(QBrush(QColor(214, 214, 214)));

    // Decorations on the overlay-free "main" layer, drawn after (above) the map.
    cursor_ = new QCPItemStraightLine(this);
    cursor_->setPen(QPen(QColor(20, 20, 20, 200), 1.2));
    cursor_->setClipToAxisRect(true);
    cursor_->setVisible(false);

    selection_ = new QCPItemRect(this);
    selection_->setPen(QPen(QColor(0, 102, 204), 1.6));
    selection_->setBrush(QColor(0, 102, 204, 28));
    selection_->topLeft->setTypeX(QCPItemPosition::ptAxisRectRatio);
    selection_->bottomRight->setTypeX(QCPItemPosition::ptAxisRectRatio);
    selection_->setVisible(false);
    selectionLabel_ = new QCPItemText(this);
    selectionLabel_->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
    selectionLabel_->setPositionAlignment(Qt::AlignRight | Qt::AlignVCenter);
    selectionLabel_->setFont(small);
    selectionLabel_->setColor(QColor(0, 70, 150));
    selectionLabel_->setBrush(QColor(255, 255, 255, 225));
    selectionLabel_->setPen(QPen(QColor(0, 102, 204), 0.8));
    selectionLabel_->setPadding(QMargins(3, 1, 3, 1));
    selectionLabel_->setVisible(false);

    nonFiniteNote_ = new QCPItemText(this);
    nonFiniteNote_->position->setType(QCPItemPosition::ptAxisRectRatio);
    nonFiniteNote_->position->setCoords(0.0, 0.0);
    nonFiniteNote_->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    nonFiniteNote_->setClipToAxisRect(false);
    nonFiniteNote_->setFont(small);
    nonFiniteNote_->setText(QStringLiteral("\u25a0 NaN/Inf in the tensor"));
    nonFiniteNote_->setVisible(false);

    emptyText_ = new QCPItemText(this);
    emptyText_->position->setType(QCPItemPosition::ptAxisRectRatio);
    emptyText_->position->setCoords(0.5, 0.5);
    emptyText_->setText(QStringLiteral("no layer statistics yet"));
    emptyText_->setColor(QColor(110, 110, 110));

    // What the colours other than the scale's mean (grey had no legend).
    setToolTip(tr("Grey: the layer records no such tensor (or the statistic does not apply); dark: the tensor held "
                  "NaN or Inf. Click a cell to show its histogram; right-click a row to switch the layer."));
    connect(this, &QCustomPlot::mousePress, this, &LayerHeatmapPlot::onMousePress);
    rebuild();
    follow_palette(this); // after the plot's own legend and axis set-up
    colorNonFinite();
}

QColor LayerHeatmapPlot::nonFiniteColor() const
{
    return palette().color(QPalette::Base).lightness() < 128 ? kNonFiniteOnDark : kNonFiniteColor;
}

void LayerHeatmapPlot::colorNonFinite()
{
    if (!nonFiniteMap_ || !nonFiniteNote_) return; // a palette change during construction
    const QColor color = nonFiniteColor();
    QCPColorGradient dead;
    dead.clearColorStops();
    dead.setColorStopAt(0.0, color);
    dead.setColorStopAt(1.0, color);
    dead.setNanHandling(QCPColorGradient::nhTransparent);
    nonFiniteMap_->setGradient(dead);
    nonFiniteNote_->setColor(color);
}

void LayerHeatmapPlot::changeEvent(QEvent* event)
{
    QCustomPlot::changeEvent(event);
    if (event->type() == QEvent::PaletteChange) {
        colorNonFinite();
        replot(rpQueuedReplot);
    }
}

void LayerHeatmapPlot::setHistory(const RunHistory* history)
{
    history_ = history;
    dirty_ = true;
}

void LayerHeatmapPlot::setStatistic(LayerStat stat, const QString& role)
{
    if (stat == stat_ && role == role_) return;
    stat_ = stat;
    role_ = role;
    dirty_ = true;
}

bool LayerHeatmapPlot::refresh()
{
    if (history_ && history_->revision() != builtRevision_) dirty_ = true;
    if (dirty_) rebuild();
    const bool replot = needsReplot_;
    needsReplot_ = false;
    return replot;
}

void LayerHeatmapPlot::rebuild()
{
    dirty_ = false;
    builtRevision_ = history_ ? history_->revision() : 0;

    std::vector<QString> names;
    std::vector<int64_t> steps;
    std::vector<float> values;
    std::vector<char> nonFinite; // per cell: the tensor held NaN or Inf (tensor statistics only)
    std::vector<int64_t> events;
    if (history_) {
        for (const auto& n : history_->layers()) names.push_back(QString::fromStdString(n));
        const auto cols = history_->columns(stat_, role_.toStdString());
        values.assign(cols.size() * names.size(), std::numeric_limits<float>::quiet_NaN());
        for (size_t c = 0; c < cols.size(); ++c) {
            steps.push_back(cols[c].step);
            const size_t n = std::min(cols[c].values.size(), names.size());
            std::copy_n(cols[c].values.begin(), n, values.begin() + std::ptrdiff_t(c * names.size()));
        }
        if (is_tensor_stat(stat_)) {
            const auto dead = history_->columns(LayerStat::NonFinitePercent, role_.toStdString());
            nonFinite.assign(dead.size() * names.size(), 0);
            for (size_t c = 0; c < dead.size(); ++c)
                for (size_t r = 0; r < std::min(dead[c].values.size(), names.size()); ++r)
                    nonFinite[c * names.size() + r] = dead[c].values[r] > 0.0f;
        }
        // Rows that can hold no value of this statistic (no underflow of grad_output for wte
        // or a layer norm) are left out: a third of the rows were always grey, the axis labelled
        // every second or third row, and a row that lit up was often an unlabelled one (read-only
        // audit 'guiwalk'). A map with no value at all keeps its rows, under its note.
        const size_t rows = names.size(), columns = steps.size();
        std::vector<size_t> kept;
        for (size_t r = 0; r < rows; ++r)
            for (size_t c = 0; c < columns; ++c)
                if (!std::isnan(values[c * rows + r]) || (c * rows + r < nonFinite.size() && nonFinite[c * rows + r])) {
                    kept.push_back(r);
                    break;
                }
        if (!kept.empty() && kept.size() < rows) {
            std::vector<QString> keptNames;
            std::vector<float> keptValues;
            std::vector<char> keptNonFinite;
            for (size_t r : kept) keptNames.push_back(names[r]);
            for (size_t c = 0; c < columns; ++c)
                for (size_t r : kept) keptValues.push_back(values[c * rows + r]);
            for (size_t c = 0; c < nonFinite.size() / std::max<size_t>(rows, 1); ++c)
                for (size_t r : kept) keptNonFinite.push_back(nonFinite[c * rows + r]);
            names = std::move(keptNames);
            values = std::move(keptValues);
            nonFinite = std::move(keptNonFinite);
        }
        for (const auto& e : history_->events())
            if (e.kind == EventKind::PrecisionChanged) events.push_back(e.step);
        std::sort(events.begin(), events.end());
        events.erase(std::unique(events.begin(), events.end()), events.end());
    }
    const bool styleChanged = builtStat_ != stat_ || builtRole_ != role_ || !built_;
    const bool dataChanged =
        names != layerNames_ || steps != columnSteps_ || values.size() != values_.size() ||
        (!values.empty() && std::memcmp(values.data(), values_.data(), values.size() * sizeof(float)) != 0) ||
        nonFinite != nonFinite_;
    const bool eventsChanged = events != eventSteps_;
    // A second layer switched at a step that already had a switch changes no event step, only
    // the labels ("→ bf16/…"): the live layers' revision says so.
    const uint64_t liveRevision = history_ ? history_->liveLayers().revision() : 0;
    const bool labelsChanged = liveRevision != builtLiveRevision_;
    if (!styleChanged && !dataChanged && !eventsChanged && !labelsChanged) return;
    built_ = true;
    builtLiveRevision_ = liveRevision;
    builtStat_ = stat_;
    builtRole_ = role_;
    layerNames_ = std::move(names);
    columnSteps_ = std::move(steps);
    values_ = std::move(values);
    nonFinite_ = std::move(nonFinite);
    eventSteps_ = std::move(events);
    needsReplot_ = true;

    const int nx = columnCount(), ny = rowCount();
    auto* stepTicker = static_cast<StepTicker*>(xAxis->ticker().data());
    stepTicker->steps = columnSteps_;
    auto* rowTicker = static_cast<RowTicker*>(yAxis->ticker().data());
    rowTicker->names = layerNames_;
    // A layer switched during the run says to what (with the recipe of an FP8 layer: a switch
    // may change only that), so the row reads as what the engine runs.
    for (size_t i = 0; history_ && i < layerNames_.size(); ++i) {
        const LiveLayer* live = history_->liveLayers().find(layerNames_[i].toStdString());
        if (!live || live->switched_at < 0) continue;
        rowTicker->names[i] +=
            QStringLiteral(" \u2192 ") + QString::fromStdString(formats_as_run(live->state).describe());
        if (!live->state.recipe.empty())
            rowTicker->names[i] += QLatin1Char(' ') + QString::fromStdString(live->state.recipe);
    }
    rowTicker->block.clear();
    for (const auto& n : layerNames_) rowTicker->block.push_back(block_of(n));

    // The colour range. Percentages start at exactly 0 (white) and end at a round number
    // at least 5% (the FP8 underflow watcher's default), so a rare 0.1% still shows and a
    // column at 100% saturates; magnitudes use whole decades on a log scale.
    const bool logScale = is_log_stat(stat_);
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (float v : values_) {
        if (!std::isfinite(v) || (logScale && v <= 0)) continue;
        lo = std::min(lo, double(v));
        hi = std::max(hi, double(v));
    }
    QCPRange range;
    if (is_percent_stat(stat_)) {
        range = QCPRange(0.0, std::isfinite(hi) ? std::min(100.0, std::max(5.0, nice_ceil(hi))) : 5.0);
    } else if (logScale) {
        if (!std::isfinite(lo)) lo = hi = 1.0;
        range = QCPRange(std::pow(10.0, std::floor(std::log10(lo))), std::pow(10.0, std::ceil(std::log10(hi))));
        if (range.upper <= range.lower) range.upper = range.lower * 10.0;
    } else {
        range = QCPRange(0.0, std::isfinite(hi) && hi > 0 ? nice_ceil(hi) : 1.0);
    }

    fill_color_map(map_, nx, ny, [&](int c, int r) {
        double v = double(values_[size_t(c) * size_t(ny) + size_t(r)]);
        // Zero on a log scale (an all-zero tensor) is a real value: the lowest colour.
        if (logScale && std::isfinite(v) && v < range.lower) v = range.lower;
        // An infinite grad norm or logit is the top of the scale: handed on as it is, QCustomPlot
        // turns it into its lowest colour, and the overflowing layer reads as the calmest.
        if (std::isinf(v)) v = v > 0 ? range.upper : range.lower;
        return v;
    });
    const bool anyNonFinite = std::find(nonFinite_.begin(), nonFinite_.end(), 1) != nonFinite_.end();
    fill_color_map(nonFiniteMap_, nx, ny, [&](int c, int r) {
        const size_t at = size_t(c) * size_t(ny) + size_t(r);
        return at < nonFinite_.size() && nonFinite_[at] ? 1.0 : kNaN;
    });
    nonFiniteMap_->setVisible(anyNonFinite && nx > 0 && ny > 0);
    nonFiniteNote_->setVisible(anyNonFinite && nx > 0 && ny > 0);
    map_->setGradient(make_gradient(stat_));
    colorScale_->setDataScaleType(logScale ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    if (logScale) colorScale_->axis()->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
    else colorScale_->axis()->setTicker(QSharedPointer<QCPAxisTicker>::create());
    colorScale_->axis()->setNumberFormat(logScale ? QStringLiteral("eb") : QStringLiteral("g"));
    colorScale_->axis()->setNumberPrecision(logScale ? 0 : 4);
    map_->setDataRange(range);
    colorScale_->axis()->setLabel(stat_label(stat_, role_));

    xAxis->setRange(-0.5, std::max(nx, 1) - 0.5);
    yAxis->setRange(-0.5, std::max(ny, 1) - 0.5);
    // Columns whose every cell is grey say why, or the map reads as a bug: a native 16-bit
    // run's underflow is not measured (its cast ran in the op before, where no row sees it).
    const bool anyValue = std::any_of(values_.begin(), values_.end(), [](float v) { return !std::isnan(v); });
    // (Asked only then: it reads the subnormal columns of the whole history.)
    if (nx == 0 || ny == 0) emptyText_->setText(QStringLiteral("no layer statistics yet"));
    else if (!anyValue) emptyText_->setText(noValueText());
    emptyText_->setVisible(nx == 0 || ny == 0 || !anyValue);
    map_->setVisible(nx > 0 && ny > 0);

    updateEvents();
    updateCursor();
    updateSelection();
}

void LayerHeatmapPlot::updateEvents()
{
    while (eventLines_.size() > eventSteps_.size()) {
        removeItem(eventLines_.back());
        eventLines_.pop_back();
    }
    while (eventLines_.size() < eventSteps_.size()) {
        auto* line = new QCPItemStraightLine(this);
        line->setPen(QPen(QColor(0, 128, 128, 210), 1.0, Qt::DashLine));
        eventLines_.push_back(line);
    }
    for (size_t i = 0; i < eventSteps_.size(); ++i) {
        const double x = keyOfStep(eventSteps_[i]);
        eventLines_[i]->point1->setCoords(x, 0);
        eventLines_[i]->point2->setCoords(x, 1);
        eventLines_[i]->setVisible(!columnSteps_.empty());
    }
}

QString LayerHeatmapPlot::noValueText() const
{
    const QString what = stat_label(stat_, role_);
    const bool castVerdict = stat_ == LayerStat::UnderflowPercent || stat_ == LayerStat::OverflowPercent ||
                             stat_ == LayerStat::QuantSnrDb;
    bool subnormalsCounted = false;
    if (castVerdict && history_)
        for (const auto& col : history_->columns(LayerStat::SubnormalPercent, role_.toStdString()))
            subnormalsCounted = subnormalsCounted ||
                                std::any_of(col.values.begin(), col.values.end(), [](float v) { return !std::isnan(v); });
    if (subnormalsCounted)
        return QStringLiteral("%1: not measured, the values came already in 16-bit\n"
                              "(their cast ran where no row sees it); Subnormal % shows what they hold")
            .arg(what);
    return QStringLiteral("%1: no layer has a value").arg(what);
}

double LayerHeatmapPlot::keyOfStep(int64_t step) const
{
    return static_cast<const StepTicker*>(xAxis->ticker().data())->keyOf(double(step));
}

int LayerHeatmapPlot::columnOfStep(int64_t step) const
{
    const auto it = std::find(columnSteps_.begin(), columnSteps_.end(), step);
    return it == columnSteps_.end() ? -1 : static_cast<int>(it - columnSteps_.begin());
}

void LayerHeatmapPlot::setCursorStep(int64_t step)
{
    if (step == cursorStep_) return;
    cursorStep_ = step;
    updateCursor();
    needsReplot_ = true;
    replot(rpQueuedReplot);
}

void LayerHeatmapPlot::updateCursor()
{
    const bool visible = cursorStep_ >= 0 && !columnSteps_.empty();
    cursor_->setVisible(visible);
    if (!visible) return;
    const double x = keyOfStep(cursorStep_);
    cursor_->point1->setCoords(x, 0);
    cursor_->point2->setCoords(x, 1);
}

void LayerHeatmapPlot::setSelectedLayer(const QString& layer)
{
    if (layer == selectedLayer_) return;
    selectedLayer_ = layer;
    updateSelection();
    needsReplot_ = true;
    replot(rpQueuedReplot);
}

void LayerHeatmapPlot::updateSelection()
{
    const auto it = std::find(layerNames_.begin(), layerNames_.end(), selectedLayer_);
    const bool visible = !selectedLayer_.isEmpty() && it != layerNames_.end() && !columnSteps_.empty();
    selection_->setVisible(visible);
    selectionLabel_->setVisible(visible);
    if (!visible) return;
    const double row = double(it - layerNames_.begin());
    selection_->topLeft->setCoords(0.0, row - 0.5);
    selection_->bottomRight->setCoords(1.0, row + 0.5);
    selectionLabel_->position->setCoords(0.995, row);
    selectionLabel_->setText(selectedLayer_ + liveStateText(selectedLayer_));
}

QString LayerHeatmapPlot::liveStateText(const QString& layer) const
{
    const LiveLayer* live = history_ ? history_->liveLayers().find(layer.toStdString()) : nullptr;
    if (!live) return {};
    QString text = QStringLiteral(" \u00b7 ") + QString::fromStdString(formats_as_run(live->state).describe());
    if (!live->state.recipe.empty()) text += QLatin1Char(' ') + QString::fromStdString(live->state.recipe);
    if (!live->state.backend.empty()) text += QLatin1Char(' ') + QString::fromStdString(live->state.backend);
    if (live->switched_at >= 0) text += QStringLiteral(" \u00b7 switched at ") + QString::fromStdString(live->last_switch());
    return text;
}

std::optional<std::pair<size_t, size_t>> LayerHeatmapPlot::cellOf(int64_t step, const QString& layer) const
{
    const int c = columnOfStep(step);
    const auto it = std::find(layerNames_.begin(), layerNames_.end(), layer);
    if (c < 0 || it == layerNames_.end()) return std::nullopt;
    return std::make_pair(size_t(c), size_t(it - layerNames_.begin()));
}

bool LayerHeatmapPlot::nonFiniteAt(int64_t step, const QString& layer) const
{
    const auto cell = cellOf(step, layer);
    if (!cell) return false;
    const size_t at = cell->first * layerNames_.size() + cell->second;
    return at < nonFinite_.size() && nonFinite_[at];
}

double LayerHeatmapPlot::valueAt(int64_t step, const QString& layer) const
{
    const auto cell = cellOf(step, layer);
    return cell ? double(values_[cell->first * layerNames_.size() + cell->second]) : kNaN;
}

QPointF LayerHeatmapPlot::cellCenter(int64_t step, const QString& layer) const
{
    const auto cell = cellOf(step, layer);
    if (!cell) return {kNaN, kNaN};
    return {double(cell->first), double(cell->second)};
}

QString LayerHeatmapPlot::rowLabel(int row) const
{
    const auto* ticker = static_cast<const RowTicker*>(yAxis->ticker().data());
    return row >= 0 && size_t(row) < ticker->names.size() ? ticker->names[size_t(row)] : QString();
}

void LayerHeatmapPlot::onMousePress(QMouseEvent* event)
{
    const QPointF pos = event->position();
    if (layerNames_.empty() || !axisRect()->rect().contains(pos.toPoint())) return;
    const long r = std::lround(yAxis->pixelToCoord(pos.y()));
    if (event->button() == Qt::RightButton && r >= 0 && r < long(layerNames_.size())) {
        emit layerMenuRequested(layerNames_[size_t(r)], event->globalPosition().toPoint());
        return;
    }
    if (event->button() != Qt::LeftButton || columnSteps_.empty()) return;
    const long c = std::lround(xAxis->pixelToCoord(pos.x()));
    if (c < 0 || r < 0 || c >= long(columnSteps_.size()) || r >= long(layerNames_.size())) return;
    const QString layer = layerNames_[size_t(r)];
    setSelectedLayer(layer);
    emit cellClicked(qint64(columnSteps_[size_t(c)]), layer);
}

} // namespace mantissa
