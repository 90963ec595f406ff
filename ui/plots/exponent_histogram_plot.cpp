// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/exponent_histogram_plot.h"
#include "plots/plot_style.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mantissa {

namespace {

// The loss scale a gradient's row was measured under (its step's), 1 for other roles or where
// the step is not known (yet): a gradient is measured as its cast saw it, multiplied by the
// loss scale, so the axis is in those units, 2^16 from the gradient itself under FP16's
// default scale, and the title says so, as it says an FP8 scale.
double gradient_loss_scale(const RunHistory& history, const QString& role, int64_t step)
{
    if (!role.startsWith(QLatin1String("grad_")) && role != QLatin1String("weight_grad")) return 1.0;
    const auto& steps = history.steps();
    const auto at = std::lower_bound(steps.begin(), steps.end(), step,
                                     [](const StepPoint& p, int64_t s) { return p.step < s; });
    return at != steps.end() && at->step == step && at->loss_scale > 0 ? at->loss_scale : 1.0;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// x is log2|x|: the bar of exponent e covers [e, e+1), and a tick at e marks the value 2^e,
// which is also where the format's band edges fall.
class ExponentTicker : public QCPAxisTicker {
public:
    QCPAxis* axis = nullptr;

protected:
    double getTickStep(const QCPRange& range) override
    {
        const double pixels = axis && axis->axisRect() ? std::max(100, axis->axisRect()->width()) : 600.0;
        const double raw = range.size() / std::max(2.0, pixels / 55.0);
        for (double s : {1.0, 2.0, 4.0, 5.0, 10.0, 20.0, 25.0, 50.0})
            if (s >= raw) return s;
        return 100.0;
    }
    int getSubTickCount(double tickStep) override { return tickStep <= 10 ? int(tickStep) - 1 : 0; }
    QString getTickLabel(double tick, const QLocale&, QChar, int) override
    {
        return QStringLiteral("2^%1").arg(std::lround(tick));
    }
};

QString percent(double fraction)
{
    const double p = 100.0 * fraction;
    if (p == 0.0) return QStringLiteral("0%");
    if (p >= 10.0) return QString::number(p, 'f', 1) + QLatin1Char('%');
    if (p >= 0.1) return QString::number(p, 'f', 2) + QLatin1Char('%');
    return QString::number(p, 'g', 2) + QLatin1Char('%');
}

struct BandStyle {
    QColor fill;
    QColor edge;
    QString label;
};

BandStyle style_of(const QString& name)
{
    const QColor red(214, 39, 40), amber(255, 170, 0), green(44, 160, 44);
    auto alpha = [](QColor c, int a) {
        c.setAlpha(a);
        return c;
    };
    if (name == QLatin1String("underflow")) return {alpha(red, 46), alpha(red, 160), QStringLiteral("underflow → 0")};
    if (name == QLatin1String("rounds to min subnormal")) return {alpha(amber, 30), alpha(amber, 120), {}};
    if (name == QLatin1String("subnormal"))
        return {alpha(amber, 56), QColor(230, 140, 0, 170), QStringLiteral("subnormal")};
    if (name == QLatin1String("normal")) return {alpha(green, 16), alpha(green, 150), QStringLiteral("normal")};
    if (name == QLatin1String("clamped")) return {alpha(amber, 56), QColor(230, 140, 0, 170), QStringLiteral("clamped up to min")};
    return {alpha(red, 46), alpha(red, 160), QStringLiteral("overflow")};
}

} // namespace

ExponentHistogramPlot::ExponentHistogramPlot(QWidget* parent) : QCustomPlot(parent)
{
    setMinimumSize(320, 220);
    setInteractions(QCP::Interactions());
    // Axis-aligned rectangles gain nothing from antialiasing, and it is most of a live frame's
    // cost on a CPU that the training shares; text stays antialiased.
    setNotAntialiasedElements(QCP::AntialiasedElements(QCP::aeAll) & ~QCP::AntialiasedElements(QCP::aeItems));

    // Bands go on their own layer under the grid, so bars and grid lines stay on top.
    addLayer(QStringLiteral("bands"), layer(QStringLiteral("grid")), limBelow);

    plotLayout()->insertRow(0);
    QFont bold = font();
    bold.setBold(true);
    title_ = new QCPTextElement(this, QString(), bold);
    title_->setTextColor(QColor(40, 40, 40));
    plotLayout()->addElement(0, 0, title_);
    subtitle_ = new QCPTextElement(this, QString(), font());
    subtitle_->setTextColor(QColor(90, 90, 90));
    plotLayout()->insertRow(1);
    plotLayout()->addElement(1, 0, subtitle_);
    plotLayout()->setRowSpacing(0);

    bars_ = new QCPBars(xAxis, yAxis);
    bars_->setWidth(0.86);
    bars_->setPen(QPen(QColor(38, 70, 120), 0.8));
    bars_->setBrush(QColor(70, 110, 170));

    auto ticker = QSharedPointer<ExponentTicker>::create();
    ticker->axis = xAxis;
    xAxis->setTicker(ticker);
    xAxis->setLabel(QStringLiteral("|x| by binade: the bar at 2^e counts 2^e ≤ |x| < 2^(e+1)"));
    // Exponent histograms span many decades of counts: the tails (what is about to underflow)
    // are the point, so the count axis is logarithmic.
    yAxis->setScaleType(QCPAxis::stLogarithmic);
    yAxis->setTicker(QSharedPointer<QCPAxisTickerLog>::create());
    yAxis->setNumberFormat(QStringLiteral("eb"));
    yAxis->setNumberPrecision(0);
    yAxis->setLabel(QStringLiteral("values (count, log)"));
    const QColor grid(225, 225, 225);
    xAxis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    yAxis->grid()->setPen(QPen(grid, 1, Qt::DotLine));
    xAxis->setRange(-30, 20);
    yAxis->setRange(0.5, 1000);

    specials_ = new QCPItemText(this);
    specials_->position->setType(QCPItemPosition::ptAxisRectRatio);
    specials_->position->setCoords(0.99, 0.02);
    specials_->setPositionAlignment(Qt::AlignRight | Qt::AlignTop);
    specials_->setBrush(QColor(255, 255, 255, 230));
    specials_->setPen(QPen(QColor(190, 190, 190)));
    specials_->setPadding(QMargins(4, 2, 4, 2));
    specials_->setColor(QColor(50, 50, 50));
    specials_->setVisible(false);

    emptyText_ = new QCPItemText(this);
    emptyText_->position->setType(QCPItemPosition::ptAxisRectRatio);
    emptyText_->position->setCoords(0.5, 0.5);
    emptyText_->setColor(QColor(110, 110, 110));
    rebuild();
    built_ = false; // the first refresh() still reports the empty state as something to draw
    dirty_ = true;
    follow_palette(this); // after the plot's own legend and axis set-up
}

void ExponentHistogramPlot::setHistory(const RunHistory* history)
{
    history_ = history;
    dirty_ = true;
}

void ExponentHistogramPlot::setTensor(const QString& layer, const QString& role)
{
    if (layer == layer_ && role == role_) return;
    layer_ = layer;
    role_ = role;
    dirty_ = true;
}

void ExponentHistogramPlot::setStep(int64_t step)
{
    if (step == step_) return;
    step_ = step;
    dirty_ = true;
}

bool ExponentHistogramPlot::refresh()
{
    if (history_ && history_->revision() != builtRevision_) dirty_ = true;
    if (!dirty_) return false;
    return rebuild();
}

QString ExponentHistogramPlot::title() const { return title_->text() + QLatin1Char('\n') + subtitle_->text(); }

QString ExponentHistogramPlot::specialsText() const { return specials_->visible() ? specials_->text() : QString(); }

void ExponentHistogramPlot::clearBands()
{
    for (auto* item : bandItems_) removeItem(item);
    bandItems_.clear();
    bands_.clear();
}

bool ExponentHistogramPlot::rebuild()
{
    dirty_ = false;
    builtRevision_ = history_ ? history_->revision() : 0;
    int64_t frameStep = -1;
    const ExponentHistogram* h = nullptr;
    if (history_ && !layer_.isEmpty()) {
        // No step chosen yet: the newest frame.
        const int64_t want = step_ >= 0 ? step_ : std::numeric_limits<int64_t>::max();
        h = history_->histogram(layer_.toStdString(), role_.toStdString(), want, &frameStep);
    }
    Shown shown{history_, h ? frameStep : -1, layer_, role_};
    if (h)
        shown = {history_, frameStep, layer_, role_, h->first_exponent, h->counts, h->count, h->zeros, h->infs, h->nans,
                 h->format, h->scale, h->underflow, h->subnormal, h->overflow,
                 gradient_loss_scale(*history_, role_, frameStep)};
    if (built_ && shown == shown_) return false;
    built_ = true;
    shown_ = shown;
    shownStep_ = shown.frameStep;

    bars_->data()->clear();
    clearBands();
    if (!h) {
        title_->setText(layer_.isEmpty() ? QStringLiteral("exponent histogram")
                                         : layer_ + QStringLiteral(" · ") + role_);
        subtitle_->setText(QString());
        emptyText_->setText(layer_.isEmpty() ? QStringLiteral("select a layer")
                                             : QStringLiteral("no exponent histogram for this tensor yet"));
        emptyText_->setVisible(true);
        specials_->setVisible(false);
        xAxis->setRange(-30, 20);
        yAxis->setRange(0.5, 1000);
        return true;
    }
    emptyText_->setVisible(false);

    double maxCount = 1.0, dataLo = kInf, dataHi = -kInf;
    QVector<double> keys, counts;
    for (size_t i = 0; i < h->counts.size(); ++i) {
        if (h->counts[i] <= 0) continue; // nothing to draw on a log axis
        const double e = double(h->first_exponent) + double(i);
        keys.push_back(e + 0.5);
        counts.push_back(double(h->counts[i]));
        maxCount = std::max(maxCount, double(h->counts[i]));
        dataLo = std::min(dataLo, e);
        dataHi = std::max(dataHi, e + 1.0);
    }
    bars_->setData(keys, counts, /*alreadySorted=*/true);

    // The bands as the cast sees them. The engine casts x * scale, so in the tensor's own
    // units every edge moves by -log2(scale). Per-row/block recipes (scale 0) have a scale
    // per row or block: no band would be in the right place, so none is drawn and the title
    // says why (the block recipes' "<role>_scale" histograms show the scales' own range).
    const FormatInfo& info = format_info(h->format);
    const bool perBlock = h->scale == 0.0;
    const double shift = std::isfinite(h->scale) && h->scale > 0 ? -std::log2(h->scale) : 0.0;
    // TF32 keeps no subnormals of its own, but its cast (round_to_tf32) keeps 10 mantissa bits
    // of FP32's subnormals too: the smallest it leaves is 2^-126 * 2^-10 = 2^-136, not 2^-149.
    const double minSub = info.min_subnormal > 0 ? info.min_subnormal : std::ldexp(info.min_normal, -info.mantissa_bits);
    const double lsub = std::log2(minSub), lnorm = std::log2(info.min_normal), lmax = std::log2(info.max_finite);
    // [min_subnormal/2, min_subnormal) rounds to the smallest subnormal (exactly half goes to
    // zero, ties to even); only what lies below it becomes zero.
    bands_ = {{QStringLiteral("underflow"), -kInf, lsub - 1 + shift},
              {QStringLiteral("rounds to min subnormal"), lsub - 1 + shift, lsub + shift},
              {QStringLiteral("subnormal"), lsub + shift, lnorm + shift},
              {QStringLiteral("normal"), lnorm + shift, lmax + shift},
              {QStringLiteral("overflow"), lmax + shift, kInf}};
    // E8M0 (MX block scales) has neither zero nor subnormals: a scale below 2^-127 is clamped up.
    if (h->format == NumberFormat::E8M0)
        bands_ = {{QStringLiteral("clamped"), -kInf, lnorm + shift},
                  {QStringLiteral("normal"), lnorm + shift, lmax + shift},
                  {QStringLiteral("overflow"), lmax + shift, kInf}};
    if (perBlock) bands_.clear();

    // The view: the data, plus the format's edges when they are near enough to matter
    // (for FP32/BF16 they are ~100 binades away and would squash the data into a sliver).
    double lo = std::isfinite(dataLo) ? dataLo : lnorm + shift;
    double hi = std::isfinite(dataHi) ? dataHi : lmax + shift;
    constexpr double kReach = 16.0;
    if (!perBlock && lsub - 1 + shift >= lo - kReach) lo = std::min(lo, lsub - 1 + shift);
    if (!perBlock && lmax + shift <= hi + kReach) hi = std::max(hi, lmax + shift);
    // A tensor that mostly underflows ends below the format's smallest value: the view runs on
    // to where the format's normal values begin, or it showed the red band alone, the edge it
    // missed out of sight (read-only audit 'guiwalk').
    else if (!perBlock && lsub + shift <= hi + kReach) hi = std::max(hi, lnorm + shift + 1.0);
    xAxis->setRange(std::floor(lo) - 2.0, std::ceil(hi) + 2.0);
    // At least two decades: with a count of 1 (a tensor of NaN and a value) the log ticker
    // labelled 2, 3 and 4 twice each at one digit.
    yAxis->setRange(0.5, std::max(maxCount * 4.0, 20.0));

    const QCPRange view = xAxis->range();
    for (const Band& b : bands_) {
        const BandStyle st = style_of(b.name);
        auto* rect = new QCPItemRect(this);
        rect->setLayer(QStringLiteral("bands"));
        rect->topLeft->setTypeY(QCPItemPosition::ptAxisRectRatio);
        rect->bottomRight->setTypeY(QCPItemPosition::ptAxisRectRatio);
        rect->topLeft->setCoords(std::max(b.lowExponent, view.lower - 100.0), 0.0);
        rect->bottomRight->setCoords(std::min(b.highExponent, view.upper + 100.0), 1.0);
        rect->setPen(Qt::NoPen);
        rect->setBrush(st.fill);
        bandItems_.push_back(rect);
        if (std::isfinite(b.lowExponent)) {
            auto* edge = new QCPItemStraightLine(this);
            edge->setLayer(QStringLiteral("bands"));
            edge->point1->setCoords(b.lowExponent, 0);
            edge->point2->setCoords(b.lowExponent, 1);
            edge->setPen(QPen(st.edge, 1.0, b.name == QLatin1String("normal") ? Qt::SolidLine : Qt::DashLine));
            bandItems_.push_back(edge);
        }
        const double visLo = std::max(b.lowExponent, view.lower), visHi = std::min(b.highExponent, view.upper);
        if (!st.label.isEmpty() && visHi - visLo >= 3.0) {
            auto* text = new QCPItemText(this);
            text->setLayer(QStringLiteral("bands"));
            text->position->setTypeY(QCPItemPosition::ptAxisRectRatio);
            // At the band's left edge: the zeros/inf/NaN box sits top right, and a centred
            // "normal" ran under it whenever the bars filled the right half.
            text->position->setCoords(visLo + 0.4, 0.015);
            text->setPositionAlignment(Qt::AlignLeft | Qt::AlignTop);
            QColor c = st.edge;
            c.setAlpha(255);
            text->setColor(c.darker(130));
            QFont f = font();
            f.setPointSizeF(std::max(6.5, f.pointSizeF() * 0.85));
            text->setFont(f);
            text->setText(st.label);
            bandItems_.push_back(text);
        }
    }

    QString head = QStringLiteral("%1 · %2 · %3 · step %4")
                       .arg(layer_, role_, QString::fromLatin1(info.name))
                       .arg(shownStep_);
    if (perBlock) {
        // rowwise scales each row; the MX and block recipes each block (the title said "per-block"
        // of a rowwise tensor).
        const LiveLayer* live = history_ ? history_->liveLayers().find(layer_.toStdString()) : nullptr;
        head += live && live->state.recipe == "rowwise" ? QStringLiteral(" · per-row scales")
                                                         : QStringLiteral(" · per-block scales");
    } else if (h->scale != 1.0 && std::isfinite(h->scale) && h->scale > 0) {
        const double l = std::log2(h->scale);
        head += std::abs(l - std::round(l)) < 1e-9 ? QStringLiteral(" · scale 2^%1").arg(std::lround(l))
                                                   : QStringLiteral(" · scale %1").arg(h->scale, 0, 'g', 4);
    }
    if (const double ls = shown.lossScale; ls != 1.0) {
        const double l = std::log2(ls);
        head += std::abs(l - std::round(l)) < 1e-9 ? QStringLiteral(" · × loss scale 2^%1").arg(std::lround(l))
                                                   : QStringLiteral(" · × loss scale %1").arg(ls, 0, 'g', 4);
    }
    title_->setText(head);
    // Underflow -1: the tensor came in this format, its cast made by the op before (the native
    // executor's 16-bit activations, gradients and GEMM outputs): its values show where they lie,
    // not what the cast lost.
    const QString measured = h->underflow < 0 ? QStringLiteral("cast not seen, values already %1: ")
                                                    .arg(QString::fromLatin1(info.name))
                                              : QStringLiteral("measured by the cast: ");
    subtitle_->setText(measured +
                       QStringLiteral("underflow %1 · subnormal %2 · overflow %3")
                           .arg(h->underflow < 0 ? QStringLiteral("n/a") : percent(h->underflow),
                                h->subnormal < 0 ? QStringLiteral("n/a") : percent(h->subnormal),
                                h->overflow < 0 ? QStringLiteral("n/a") : percent(h->overflow)) +
                        // Beside a dead tensor's "underflow 0%": the cast measured only what was finite.
                        (h->count > 0 && h->nans + h->infs > 0
                             ? QStringLiteral(" · NaN/Inf %1")
                                   .arg(percent(double(h->nans + h->infs) / double(h->count)))
                             : QString()));
    const double zeros = h->count > 0 ? double(h->zeros) / double(h->count) : 0.0;
    specials_->setText(QStringLiteral("zeros %1 · inf %2 · NaN %3").arg(percent(zeros)).arg(h->infs).arg(h->nans));
    specials_->setColor(h->infs > 0 || h->nans > 0 ? QColor(180, 20, 20) : QColor(50, 50, 50));
    specials_->setVisible(true);
    return true;
}

} // namespace mantissa
