// SPDX-License-Identifier: GPL-3.0-or-later
// The monitor's numerics plots: the layer x step heatmap and the exponent histogram, fed
// from a RunHistory built out of crafted telemetry with known values. Runs with
// QT_QPA_PLATFORM=offscreen. Set MANTISSA_PLOT_SNAPSHOT_DIR to also save the realistic
// renderings as PNGs for a look by eye.

#include <QSignalSpy>
#include <QTest>

#include <cmath>
#include <limits>
#include <vector>

#include "legacy_events.h"
#include "common/dark_palette.h"
#include "plots/exponent_histogram_plot.h"
#include "plots/layer_heatmap_plot.h"
#include "models/run_history.h"

using namespace mantissa;

Q_DECLARE_METATYPE(mantissa::LayerStat)
Q_DECLARE_METATYPE(mantissa::NumberFormat)

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// A two-block model: 5 GEMM layers per block and the LM head, as gemm_layer_names() lists them.
std::vector<std::string> model_layers(int blocks)
{
    std::vector<std::string> names;
    for (int b = 0; b < blocks; ++b)
        for (const char* part : {".attn.qkv", ".attn.sdpa", ".attn.proj", ".mlp.fc1", ".mlp.fc2"})
            names.push_back("blocks." + std::to_string(b) + part);
    names.push_back("lm_head");
    return names;
}

bool is_sdpa(const std::string& layer) { return layer.ends_with(".attn.sdpa"); }

const std::vector<int64_t> kFrameSteps{1, 50, 100, 200}; // unevenly spaced on purpose
constexpr int64_t kSteps = 200;

// The crafted values, as functions of (layer index, frame index) so the tests can recompute them.
double grad_underflow(size_t layer, size_t frame) { return 0.001 * double(layer + 1) + 0.01 * double(frame); }
// Layer 2's gradient is cast under per-block scales: no subnormal share (-1). fc1 (layer 3)
// keeps its crafted tensor's 31%.
double grad_subnormal(size_t layer, size_t frame)
{
    return layer == 2 ? -1.0 : layer == 3 ? 0.31 : 0.002 * double(layer + 1) + 0.02 * double(frame);
}
double grad_overflow(size_t layer, size_t frame) { return layer == 3 && frame == 2 ? 0.25 : 0.0; }
// Quantization SNR in dB; layer 2's cast is exact (+inf), which the heatmap shows as no value.
double grad_snr(size_t layer, size_t frame)
{
    return layer == 2 ? std::numeric_limits<double>::infinity() : 20.0 + double(layer) + 0.5 * double(frame);
}
double weight_amax(size_t layer, size_t frame) { return std::ldexp(1.0, int(layer) - 3) * double(frame + 1); }
double layer_grad_norm(size_t layer, int64_t step) { return 0.1 * double(layer + 1) + 1e-3 * double(step); }
double attention_logit(int block, size_t frame) { return 10.0 * (block + 1) + 3.0 * double(frame); }

// The histogram of blocks.0.mlp.fc1's grad_output at a frame.
TensorStats fc1_grad_output(size_t frame)
{
    TensorStats t;
    t.layer = "blocks.0.mlp.fc1";
    t.role = "grad_output";
    t.format = "fp16";
    t.first_exponent = -30 + int(frame);
    t.exponent_counts = {5, 0, 7, 100, 1000, 300, 2};
    t.zeros = 250;
    t.infs = 0;
    t.nans = 0;
    t.count = 5 + 7 + 100 + 1000 + 300 + 2 + t.zeros;
    t.underflow = 0.0042;
    t.subnormal = 0.31;
    t.overflow = 0.0;
    t.amax = 0.5;
    return t;
}

// Steps 1..200 with per-layer gradient norms (sdpa has no parameters), frames at kFrameSteps:
// grad_output (fp16) on every layer but lm_head at the first frame, weights (e4m3) on every
// layer but sdpa, the attention logit of both blocks.
RunHistory crafted_history()
{
    RunHistory history(1024);
    const auto layers = model_layers(2);
    history.setLayers(layers);
    TelemetryBatch batch;
    for (int64_t s = 1; s <= kSteps; ++s) {
        StepMetrics m;
        m.step = s;
        m.train_loss = 3.0;
        for (size_t i = 0; i < layers.size(); ++i)
            if (!is_sdpa(layers[i])) m.layer_grad_norms.emplace_back(layers[i], layer_grad_norm(i, s));
        batch.steps.push_back(m);
    }
    for (size_t j = 0; j < kFrameSteps.size(); ++j) {
        LayerStatsFrame f;
        f.step = kFrameSteps[j];
        for (size_t i = 0; i < layers.size(); ++i) {
            if (!(layers[i] == "lm_head" && j == 0)) {
                TensorStats g = layers[i] == "blocks.0.mlp.fc1" ? fc1_grad_output(j) : TensorStats{};
                g.layer = layers[i];
                g.role = "grad_output";
                g.format = "fp16";
                g.underflow = grad_underflow(i, j);
                g.subnormal = grad_subnormal(i, j);
                g.overflow = grad_overflow(i, j);
                g.quant_snr_db = grad_snr(i, j);
                f.tensors.push_back(g);
            }
            if (!is_sdpa(layers[i])) {
                TensorStats w;
                w.layer = layers[i];
                w.role = "weight";
                w.format = "e4m3";
                w.amax = weight_amax(i, j);
                f.tensors.push_back(w);
            }
        }
        f.attention_max_logit = {{"blocks.0.attn", attention_logit(0, j)}, {"blocks.1.attn", attention_logit(1, j)}};
        batch.layer_frames.push_back(f);
    }
    batch.events.push_back(legacy_event(100, "precision_changed", "blocks.1.mlp.* -> bf16 (blocks.1.mlp.fc1, blocks.1.mlp.fc2)"));
    batch.events.push_back(legacy_event(120, "sample", "unrelated"));
    history.append(batch);
    return history;
}

// A history with one frame holding one tensor in `format` at `scale`.
RunHistory one_tensor_history(const std::string& format, double scale, std::vector<int64_t> counts, int first,
                              const std::string& role = "input")
{
    RunHistory history;
    TelemetryBatch batch;
    LayerStatsFrame f;
    f.step = 10;
    TensorStats t;
    t.layer = "blocks.0.attn.qkv";
    t.role = role;
    t.format = format;
    t.scale = scale;
    t.first_exponent = first;
    t.exponent_counts = std::move(counts);
    for (auto c : t.exponent_counts) t.count += c;
    f.tensors.push_back(t);
    batch.layer_frames.push_back(f);
    history.append(batch);
    return history;
}

// The heatmap laid out at a fixed size, ready for pixel-level checks.
void lay_out(QCustomPlot& plot, int w = 800, int h = 500)
{
    plot.resize(w, h);
    plot.grab(); // delivers the pending resize to a hidden widget: QCustomPlot's viewport follows it
    plot.replot();
    plot.replot(); // the row labels depend on the axis height of the previous layout
}

QCPItemStraightLine* dashed_line(const QCustomPlot& plot, int index)
{
    int seen = 0;
    for (int i = 0; i < plot.itemCount(); ++i) {
        auto* line = qobject_cast<QCPItemStraightLine*>(plot.item(i));
        if (line && line->pen().style() == Qt::DashLine && line->visible() && seen++ == index) return line;
    }
    return nullptr;
}

} // namespace

class TestPlots : public QObject {
    Q_OBJECT

private slots:
    void heatmapShowsCraftedValues_data();
    void heatmapShowsCraftedValues();
    void heatmapDrawsMissingCellsGrey();
    void heatmapDrawsNonFiniteTensorsDark();
    void heatmapSaysWhyNothingIsMeasured();
    void heatmapDrawsInfiniteValuesAtTheTop();
    void heatmapClickEmitsCellAndSelects();
    void heatmapMarksCursorAndPrecisionChanges();
    void heatmapRefreshOnlyWhenSomethingChanged();
    void heatmapLabelsEverySwitchedLayer();
    void heatmapLabelsRowsWithoutOverlap();

    void histogramBarsAreTheCounts_data();
    void histogramBarsAreTheCounts();
    void histogramBandsFollowFormatAndScale_data();
    void histogramBandsFollowFormatAndScale();
    void histogramBandsOfE8m0Scales();
    void histogramPicksNearestFrame_data();
    void histogramPicksNearestFrame();
    void histogramTitleAndSpecials();
    void histogramRefreshOnlyWhenSomethingChanged();

    void realisticRunRenders();
};

void TestPlots::heatmapShowsCraftedValues_data()
{
    QTest::addColumn<LayerStat>("stat");
    QTest::addColumn<QString>("role");
    QTest::addColumn<QString>("label");
    QTest::addColumn<bool>("logScale");
    QTest::newRow("underflow") << LayerStat::UnderflowPercent << "grad_output" << "underflow % of grad_output" << false;
    QTest::newRow("overflow") << LayerStat::OverflowPercent << "grad_output" << "overflow % of grad_output" << false;
    QTest::newRow("amax") << LayerStat::Amax << "weight" << "amax of weight" << true;
    QTest::newRow("grad norm") << LayerStat::GradNorm << "grad_output" << "grad L2 norm" << true;
    QTest::newRow("attention logit") << LayerStat::AttentionMaxLogit << "grad_output" << "max |q·k|/√d" << false;
    QTest::newRow("quantization snr") << LayerStat::QuantSnrDb << "grad_output" << "quantization SNR (dB) of grad_output" << false;
    QTest::newRow("nan/inf") << LayerStat::NonFinitePercent << "grad_output" << "NaN/Inf % of grad_output" << false;
    QTest::newRow("subnormal") << LayerStat::SubnormalPercent << "grad_output" << "subnormal % of grad_output" << false;
}

void TestPlots::heatmapShowsCraftedValues()
{
    QFETCH(LayerStat, stat);
    QFETCH(QString, role);
    QFETCH(QString, label);
    QFETCH(bool, logScale);
    const RunHistory history = crafted_history();
    const auto layers = model_layers(2);
    LayerHeatmapPlot plot;
    plot.setHistory(&history);
    // Switching from another statistic must rebuild everything.
    plot.setStatistic(stat == LayerStat::Amax ? LayerStat::GradNorm : LayerStat::Amax, QStringLiteral("weight"));
    QVERIFY(plot.refresh());
    plot.setStatistic(stat, role);
    QVERIFY(plot.refresh());

    const bool perStep = stat == LayerStat::GradNorm;
    QCOMPARE(plot.columnCount(), perStep ? int(kSteps) : int(kFrameSteps.size()));
    QCOMPARE(plot.colorMap()->colorScale()->axis()->label(), label);
    QCOMPARE(plot.colorMap()->dataScaleType(), logScale ? QCPAxis::stLogarithmic : QCPAxis::stLinear);
    QCOMPARE(plot.colorMap()->gradient().nanHandling(), QCPColorGradient::nhNanColor);

    auto expect = [&](size_t layer, size_t frame, int64_t step) -> double {
        const std::string& name = layers[layer];
        switch (stat) {
        case LayerStat::UnderflowPercent:
            return name == "lm_head" && frame == 0 ? kNaN : double(float(100.0 * grad_underflow(layer, frame)));
        case LayerStat::OverflowPercent:
            return name == "lm_head" && frame == 0 ? kNaN : double(float(100.0 * grad_overflow(layer, frame)));
        case LayerStat::Amax: return is_sdpa(name) ? kNaN : double(float(weight_amax(layer, frame)));
        case LayerStat::GradNorm: return is_sdpa(name) ? kNaN : double(float(layer_grad_norm(layer, step)));
        case LayerStat::AttentionMaxLogit:
            return name == "blocks.0.attn.sdpa"   ? double(float(attention_logit(0, frame)))
                   : name == "blocks.1.attn.sdpa" ? double(float(attention_logit(1, frame)))
                                                  : kNaN;
        case LayerStat::QuantSnrDb:
            return (name == "lm_head" && frame == 0) || layer == 2 ? kNaN : double(float(grad_snr(layer, frame)));
        case LayerStat::NonFinitePercent: // only fc1's tensors count values, none of them NaN or Inf
            return name == "blocks.0.mlp.fc1" ? 0.0 : kNaN;
        case LayerStat::SubnormalPercent:
            return (name == "lm_head" && frame == 0) || layer == 2 ? kNaN
                                                                   : double(float(100.0 * grad_subnormal(layer, frame)));
        }
        return kNaN;
    };
    int checked = 0, missing = 0;
    // A row for each layer with a value at some frame (of 11): one that can hold none of the
    // statistic is left out, so that every row drawn is one the axis can label.
    int rowsWithValues = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
        bool any = false;
        for (size_t j = 0; j < (perStep ? size_t(kSteps) : kFrameSteps.size()); ++j)
            any = any || !std::isnan(perStep ? expect(i, 0, int64_t(j) + 1) : expect(i, j, kFrameSteps[j]));
        rowsWithValues += any ? 1 : 0;
    }
    QCOMPARE(plot.rowCount(), rowsWithValues);
    if (stat == LayerStat::AttentionMaxLogit) QCOMPARE(rowsWithValues, 2); // the sdpa rows alone
    for (size_t i = 0; i < layers.size(); ++i) {
        const QString layer = QString::fromStdString(layers[i]);
        if (perStep) {
            for (int64_t s = 1; s <= kSteps; ++s) {
                const double want = expect(i, 0, s), got = plot.valueAt(s, layer);
                if (std::isnan(want)) QVERIFY2(std::isnan(got), qPrintable(layer));
                else QCOMPARE(got, want);
                ++(std::isnan(want) ? missing : checked);
            }
        } else {
            for (size_t j = 0; j < kFrameSteps.size(); ++j) {
                const double want = expect(i, j, kFrameSteps[j]), got = plot.valueAt(kFrameSteps[j], layer);
                if (std::isnan(want))
                    QVERIFY2(std::isnan(got), qPrintable(layer + QStringLiteral(" @ %1").arg(kFrameSteps[j])));
                else QCOMPARE(got, want);
                ++(std::isnan(want) ? missing : checked);
            }
        }
    }
    QVERIFY(checked > 0);
    QVERIFY(missing > 0);
    // A step between frames, and a layer the history does not know, have no cell.
    if (!perStep) QVERIFY(std::isnan(plot.valueAt(75, QStringLiteral("blocks.0.attn.qkv"))));
    QVERIFY(std::isnan(plot.valueAt(50, QStringLiteral("blocks.9.attn.qkv"))));
    // The drawn map holds the same numbers: column = frame, row = layer.
    if (stat == LayerStat::OverflowPercent) {
        QCOMPARE(plot.colorMap()->data()->cell(2, 3), 25.0);
        QCOMPARE(plot.colorMap()->dataRange(), QCPRange(0, 50));
    }
}

// The colour drawn at the centre of a heatmap cell.
QColor cell_pixel(const LayerHeatmapPlot& plot, const QImage& image, int64_t step, const char* layer)
{
    const QPointF c = plot.cellCenter(step, QString::fromLatin1(layer));
    return image.pixelColor(QPoint(int(plot.xAxis->coordToPixel(c.x())), int(plot.yAxis->coordToPixel(c.y()))));
}

// A cell whose tensor held NaN or Inf is drawn dark whatever the statistic, with a note: a
// diverged run's all-NaN gradients read as 0% underflow, the white of a healthy tensor.
void TestPlots::heatmapDrawsNonFiniteTensorsDark()
{
    RunHistory history(64);
    history.setLayers({"blocks.0.attn.qkv", "blocks.0.mlp.fc1"});
    TelemetryBatch batch;
    for (const int64_t step : {1, 2}) {
        LayerStatsFrame f;
        f.step = step;
        for (const char* layer : {"blocks.0.attn.qkv", "blocks.0.mlp.fc1"}) {
            TensorStats t;
            t.layer = layer;
            t.role = "grad_output";
            t.format = "fp16";
            t.count = 100;
            t.nans = step == 2 && std::string(layer) == "blocks.0.mlp.fc1" ? 100 : 0; // dead from step 2
            f.tensors.push_back(t);
        }
        batch.layer_frames.push_back(f);
    }
    history.append(batch);
    LayerHeatmapPlot plot;
    plot.setHistory(&history);
    plot.setStatistic(LayerStat::UnderflowPercent, QStringLiteral("grad_output"));
    QVERIFY(plot.refresh());
    lay_out(plot);
    QImage image = plot.grab().toImage();
    QCOMPARE(plot.valueAt(2, QStringLiteral("blocks.0.mlp.fc1")), 0.0); // the statistic says nothing
    QVERIFY(plot.nonFiniteAt(2, QStringLiteral("blocks.0.mlp.fc1")));
    QVERIFY(!plot.nonFiniteAt(1, QStringLiteral("blocks.0.mlp.fc1")));
    QCOMPARE(cell_pixel(plot, image, 2, "blocks.0.mlp.fc1"), QColor(25, 25, 25));
    QCOMPARE(cell_pixel(plot, image, 1, "blocks.0.mlp.fc1"), QColor(Qt::white));
    QCOMPARE(cell_pixel(plot, image, 2, "blocks.0.attn.qkv"), QColor(Qt::white));
    QVERIFY(plot.showsNonFiniteNote());
    // On a dark palette near-black is the background: the cells and their key take magenta.
    plot.setPalette(dark_palette());
    plot.replot(QCustomPlot::rpImmediateRefresh);
    const QImage dark = plot.grab().toImage();
    QCOMPARE(plot.nonFiniteColor(), QColor(255, 64, 255));
    QCOMPARE(cell_pixel(plot, dark, 2, "blocks.0.mlp.fc1"), QColor(255, 64, 255));
    plot.setPalette(QPalette());
    QCOMPARE(plot.nonFiniteColor(), QColor(25, 25, 25));
    // As its own statistic the share is coloured as the other percentages, and a statistic of
    // another role, or of the layer, has no such cells.
    plot.setStatistic(LayerStat::NonFinitePercent, QStringLiteral("grad_output"));
    QVERIFY(plot.refresh());
    QCOMPARE(plot.valueAt(2, QStringLiteral("blocks.0.mlp.fc1")), 100.0);
    QVERIFY(!plot.showsNonFiniteNote());
    plot.setStatistic(LayerStat::UnderflowPercent, QStringLiteral("weight"));
    QVERIFY(plot.refresh());
    QVERIFY(!plot.nonFiniteAt(2, QStringLiteral("blocks.0.mlp.fc1")));
    QVERIFY(!plot.showsNonFiniteNote());

    // Frames keep only the roles the run records, each its slot as it first came: a role that
    // comes late leaves the earlier frames as they were.
    TelemetryBatch later;
    later.layer_frames.push_back({});
    later.layer_frames.back().step = 3;
    TensorStats input;
    input.layer = "blocks.0.mlp.fc1";
    input.role = "input";
    input.format = "fp16";
    input.count = 10;
    input.underflow = 0.5;
    later.layer_frames.back().tensors.push_back(input);
    input.layer = "blocks.0.attn.qkv";
    input.underflow = -1; // not measured: the cell has no value, not -100%
    later.layer_frames.back().tensors.push_back(input);
    history.append(later);
    const auto under = history.columns(LayerStat::UnderflowPercent, "input");
    QCOMPARE(under.size(), size_t(3));
    QVERIFY(std::isnan(under[0].values[1]) && std::isnan(under[1].values[1]));
    QCOMPARE(under[2].values[1], 50.0f);
    const int qkv = history.layerIndex("blocks.0.attn.qkv");
    QVERIFY(qkv >= 0);
    QVERIFY(std::isnan(under[2].values[size_t(qkv)]));
    const auto dead = history.columns(LayerStat::NonFinitePercent, "grad_output");
    QCOMPARE(dead[1].values[1], 100.0f);
    QVERIFY(std::isnan(dead[2].values[1])); // step 3 has no grad_output
    QVERIFY(history.histogram("blocks.0.mlp.fc1", "grad_output", 2) != nullptr);
    QCOMPARE(history.histogram("blocks.0.mlp.fc1", "grad_output", 2)->nans, int64_t(100));
    QVERIFY(history.histogram("blocks.0.mlp.fc1", "input", 1) == nullptr);
}

void TestPlots::heatmapDrawsMissingCellsGrey()
{
    const RunHistory history = crafted_history();
    LayerHeatmapPlot plot;
    plot.setHistory(&history);
    plot.setStatistic(LayerStat::OverflowPercent);
    plot.refresh();
    lay_out(plot);
    const QImage image = plot.grab().toImage();
    auto pixel = [&](int64_t step, const char* layer) { return cell_pixel(plot, image, step, layer); };
    // 0% reads as empty (white); no value is neutral grey, not the lowest colour; 25% is red.
    QCOMPARE(pixel(1, "blocks.0.attn.qkv"), QColor(Qt::white));
    QCOMPARE(pixel(1, "lm_head"), plot.colorMap()->gradient().nanColor());
    QVERIFY(plot.colorMap()->gradient().nanColor() != QColor(Qt::white));
    const QColor hot = pixel(100, "blocks.0.mlp.fc1");
    QVERIFY2(hot.red() > 200 && hot.green() < 150 && hot.blue() < 120, qPrintable(hot.name()));
    const QString dir = qEnvironmentVariable("MANTISSA_PLOT_SNAPSHOT_DIR");
    if (!dir.isEmpty()) image.save(dir + QStringLiteral("/heatmap_small.png"));

    // The very first frame alone still fills its whole cell, edge to edge.
    RunHistory first;
    TelemetryBatch batch;
    batch.layer_frames.push_back({});
    batch.layer_frames.back().step = 1;
    batch.layer_frames.back().tensors.push_back({});
    batch.layer_frames.back().tensors.back().layer = "lm_head";
    batch.layer_frames.back().tensors.back().role = "grad_output";
    batch.layer_frames.back().tensors.back().overflow = 0.5;
    first.append(batch);
    plot.setHistory(&first);
    QVERIFY(plot.refresh());
    lay_out(plot);
    QCOMPARE(plot.columnCount(), 1);
    QCOMPARE(plot.rowCount(), 1);
    QCOMPARE(plot.valueAt(1, QStringLiteral("lm_head")), 50.0);
    const QImage one = plot.grab().toImage();
    const QRect r = plot.axisRect()->rect();
    const QColor full = plot.colorMap()->gradient().color(50.0, plot.colorMap()->dataRange());
    for (const QPoint p : {r.center(), r.topLeft() + QPoint(3, 3), r.bottomRight() - QPoint(3, 3)})
        QCOMPARE(one.pixelColor(p), full);
}

// A native 16-bit run's gradient rows measure no underflow (-1: their cast ran in the op
// before): a map of such a statistic is all grey, and says why rather than reading as a bug.
void TestPlots::heatmapSaysWhyNothingIsMeasured()
{
    LayerHeatmapPlot plot;
    QCOMPARE(plot.noValueNote(), QStringLiteral("no layer statistics yet"));
    RunHistory history;
    TelemetryBatch batch;
    for (int64_t step : {1, 5}) {
        LayerStatsFrame frame;
        frame.step = step;
        for (const char* layer : {"blocks.0.mlp.fc1", "lm_head"}) {
            TensorStats t;
            t.layer = layer;
            t.role = "grad_output";
            t.format = "bf16";
            t.count = 64;
            t.underflow = -1.0;
            t.overflow = -1.0;
            t.subnormal = 0.25;
            t.quant_snr_db = std::numeric_limits<double>::quiet_NaN();
            frame.tensors.push_back(t);
        }
        batch.layer_frames.push_back(frame);
    }
    history.append(batch);
    plot.setHistory(&history);
    plot.setStatistic(LayerStat::UnderflowPercent, QStringLiteral("grad_output"));
    QVERIFY(plot.refresh());
    QCOMPARE(plot.columnCount(), 2);
    QVERIFY(std::isnan(plot.valueAt(5, QStringLiteral("lm_head"))));
    QCOMPARE(plot.noValueNote(), QStringLiteral("underflow % of grad_output: not measured, the values came already "
                                                "in 16-bit\n(their cast ran where no row sees it); Subnormal % "
                                                "shows what they hold"));
    plot.setStatistic(LayerStat::QuantSnrDb, QStringLiteral("grad_output"));
    plot.refresh();
    QVERIFY(plot.noValueNote().startsWith(QStringLiteral("quantization SNR (dB) of grad_output: not measured")));
    // What they hold is drawn, and nothing is said over it.
    plot.setStatistic(LayerStat::SubnormalPercent, QStringLiteral("grad_output"));
    plot.refresh();
    QCOMPARE(plot.valueAt(5, QStringLiteral("lm_head")), 25.0);
    QCOMPARE(plot.noValueNote(), QString());
    // A role no layer records: no value, and no 16-bit story.
    plot.setStatistic(LayerStat::OverflowPercent, QStringLiteral("weight"));
    plot.refresh();
    QCOMPARE(plot.noValueNote(), QStringLiteral("overflow % of weight: no layer has a value"));
}

// An infinite grad norm (an overflowing FP16 gradient on a skipped step) is the top of the
// scale, not the bottom: QCustomPlot would draw infinity in the lowest colour, the overflowing
// layer as the calmest one.
void TestPlots::heatmapDrawsInfiniteValuesAtTheTop()
{
    RunHistory history;
    TelemetryBatch batch;
    for (int64_t step = 1; step <= 3; ++step) {
        StepMetrics m;
        m.step = step;
        m.train_loss = 1.0;
        m.layer_grad_norms = {{"blocks.0.mlp.fc1", step == 2 ? INFINITY : 1.0}, {"lm_head", 10.0}};
        batch.steps.push_back(m);
    }
    history.append(batch);
    LayerHeatmapPlot plot;
    plot.setHistory(&history);
    plot.setStatistic(LayerStat::GradNorm);
    plot.refresh();
    lay_out(plot);
    const QImage image = plot.grab().toImage();
    auto pixel = [&](int64_t step, const char* layer) { return cell_pixel(plot, image, step, layer); };
    const QCPRange range = plot.colorMap()->dataRange();
    QCOMPARE(range.lower, 1.0);
    QCOMPARE(range.upper, 10.0);
    QCPColorGradient gradient = plot.colorMap()->gradient(); // color() is not const
    QCOMPARE(pixel(2, "blocks.0.mlp.fc1"), gradient.color(range.upper, range, /*logarithmic=*/true));
    QCOMPARE(pixel(1, "blocks.0.mlp.fc1"), gradient.color(range.lower, range, true));
    QVERIFY(pixel(2, "blocks.0.mlp.fc1") != pixel(1, "blocks.0.mlp.fc1"));
}

void TestPlots::heatmapClickEmitsCellAndSelects()
{
    const RunHistory history = crafted_history();
    LayerHeatmapPlot plot;
    plot.setHistory(&history);
    plot.refresh();
    lay_out(plot);
    QSignalSpy spy(&plot, &LayerHeatmapPlot::cellClicked);
    const struct {
        int64_t step;
        const char* layer;
    } cells[] = {{100, "blocks.1.attn.proj"}, {1, "blocks.0.attn.qkv"}, {200, "lm_head"}, {50, "blocks.0.mlp.fc2"}};
    for (const auto& cell : cells) {
        const QString layer = QString::fromLatin1(cell.layer);
        const QPointF c = plot.cellCenter(cell.step, layer);
        const QPoint at(int(std::lround(plot.xAxis->coordToPixel(c.x()))),
                        int(std::lround(plot.yAxis->coordToPixel(c.y()))));
        QTest::mouseClick(&plot, Qt::LeftButton, Qt::NoModifier, at);
        QCOMPARE(spy.count(), 1);
        const auto args = spy.takeFirst();
        QCOMPARE(args.at(0).toLongLong(), qint64(cell.step));
        QCOMPARE(args.at(1).toString(), layer);
        QCOMPARE(plot.selectedLayer(), layer);
    }
    // Outside the cells (the colour scale on the right): nothing.
    QTest::mouseClick(&plot, Qt::LeftButton, Qt::NoModifier, QPoint(plot.width() - 5, plot.height() / 2));
    QCOMPARE(spy.count(), 0);
    QCOMPARE(plot.selectedLayer(), QStringLiteral("blocks.0.mlp.fc2"));
    // A right click asks for the row's layer menu, and neither selects nor moves the cursor.
    QSignalSpy menus(&plot, &LayerHeatmapPlot::layerMenuRequested);
    const QPointF c = plot.cellCenter(100, QStringLiteral("blocks.1.attn.proj"));
    const QPoint at(int(std::lround(plot.xAxis->coordToPixel(c.x()))), int(std::lround(plot.yAxis->coordToPixel(c.y()))));
    QTest::mouseClick(&plot, Qt::RightButton, Qt::NoModifier, at);
    QCOMPARE(menus.count(), 1);
    QCOMPARE(menus.at(0).at(0).toString(), QStringLiteral("blocks.1.attn.proj"));
    QCOMPARE(spy.count(), 0);
    QCOMPARE(plot.selectedLayer(), QStringLiteral("blocks.0.mlp.fc2"));
}

void TestPlots::heatmapMarksCursorAndPrecisionChanges()
{
    const RunHistory history = crafted_history();
    LayerHeatmapPlot plot;
    plot.setHistory(&history);
    plot.refresh();
    // One precision change at step 100 = column 2; the "sample" event draws nothing.
    QCPItemStraightLine* event = dashed_line(plot, 0);
    QVERIFY(event);
    QCOMPARE(event->point1->key(), 2.0);
    QVERIFY(!dashed_line(plot, 1));
    // The cursor between frames 100 (column 2) and 200 (column 3) sits in proportion.
    plot.setCursorStep(150);
    bool found = false;
    for (int i = 0; i < plot.itemCount(); ++i) {
        auto* line = qobject_cast<QCPItemStraightLine*>(plot.item(i));
        if (line && line->visible() && line->pen().style() == Qt::SolidLine) {
            QCOMPARE(line->point1->key(), 2.5);
            found = true;
        }
    }
    QVERIFY(found);
}

void TestPlots::heatmapRefreshOnlyWhenSomethingChanged()
{
    RunHistory history = crafted_history();
    LayerHeatmapPlot plot;
    plot.setHistory(&history);
    QVERIFY(plot.refresh());
    QVERIFY(!plot.refresh());
    plot.setStatistic(LayerStat::UnderflowPercent, QStringLiteral("grad_output")); // the default
    QVERIFY(!plot.refresh());
    plot.setStatistic(LayerStat::Amax, QStringLiteral("weight"));
    QVERIFY(plot.refresh());
    QVERIFY(!plot.refresh());
    plot.setCursorStep(50);
    QVERIFY(plot.refresh());
    plot.setCursorStep(50);
    QVERIFY(!plot.refresh());
    plot.setSelectedLayer(QStringLiteral("lm_head"));
    QVERIFY(plot.refresh());
    QVERIFY(!plot.refresh());

    // Steps without frames bump the revision but change nothing the amax map shows.
    TelemetryBatch steps;
    steps.steps.push_back({});
    steps.steps.back().step = kSteps + 1;
    history.append(steps);
    QVERIFY(!plot.refresh());
    TelemetryBatch frame;
    frame.layer_frames.push_back({});
    frame.layer_frames.back().step = 250;
    frame.layer_frames.back().tensors.push_back({});
    frame.layer_frames.back().tensors.back().layer = "lm_head";
    frame.layer_frames.back().tensors.back().role = "weight";
    frame.layer_frames.back().tensors.back().amax = 3.0;
    history.append(frame);
    QVERIFY(plot.refresh());
    QCOMPARE(plot.columnCount(), 5);
    QCOMPARE(plot.valueAt(250, QStringLiteral("lm_head")), 3.0);
    QVERIFY(std::isnan(plot.valueAt(250, QStringLiteral("blocks.0.attn.qkv"))));
}

// Two layers switched at one step, told apart in two drains: both rows say what they run now.
void TestPlots::heatmapLabelsEverySwitchedLayer()
{
    RunHistory history = crafted_history();
    LayerHeatmapPlot plot;
    plot.setHistory(&history);
    plot.refresh();
    const auto switched = [&](const std::string& layer, std::optional<Fp8Scaling> scaling = std::nullopt) {
        TelemetryBatch batch;
        RunEvent e;
        e.step = 150;
        e.kind = EventKind::PrecisionChanged;
        e.layers = {layer};
        e.new_formats = GemmFormats{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16};
        if (scaling) { // the engine names the recipe of an FP8 layer
            e.new_formats = GemmFormats::all(NumberFormat::E4M3);
            e.new_scaling = scaling;
            e.layer_states = {{layer, *e.new_formats, fp8_scaling_name(*scaling), ""}};
        }
        batch.events.push_back(e);
        history.append(batch);
        plot.refresh();
    };
    const auto label = [&](const QString& layer) {
        for (int r = 0; r < plot.rowCount(); ++r)
            if (plot.rowLabel(r).startsWith(layer + QLatin1Char(' ')) || plot.rowLabel(r) == layer) return plot.rowLabel(r);
        return QString();
    };
    switched("blocks.0.mlp.fc1");
    QCOMPARE(label("blocks.0.mlp.fc1"), QStringLiteral("blocks.0.mlp.fc1 \u2192 bf16/bf16/bf16"));
    switched("blocks.0.mlp.fc2");
    QCOMPARE(label("blocks.0.mlp.fc2"), QStringLiteral("blocks.0.mlp.fc2 \u2192 bf16/bf16/bf16"));
    // What the engine computes in: nvfp4 takes E2M1 elements whatever FP8 format was asked.
    switched("blocks.1.mlp.fc1", Fp8Scaling::NvFp4);
    QCOMPARE(label("blocks.1.mlp.fc1"), QStringLiteral("blocks.1.mlp.fc1 \u2192 e2m1/e2m1/e2m1 nvfp4"));
}

void TestPlots::heatmapLabelsRowsWithoutOverlap()
{
    // 48 blocks: 241 rows. Labels are spaced at least one text line apart, and once fewer
    // than one per block fit, they name blocks at their first row.
    RunHistory history;
    history.setLayers(model_layers(48));
    LayerHeatmapPlot plot;
    plot.setHistory(&history);
    plot.refresh();
    QCOMPARE(plot.rowCount(), 241);
    lay_out(plot, 900, 500);
    QVector<double> ticks;
    QVector<QString> labels;
    plot.yAxis->ticker()->generate(plot.yAxis->range(), plot.locale(), QLatin1Char('g'), 6, ticks, nullptr, &labels);
    QVERIFY(ticks.size() >= 8);
    const double lineHeight = QFontMetrics(plot.yAxis->tickLabelFont()).height();
    for (int i = 1; i < ticks.size(); ++i)
        QVERIFY(std::abs(plot.yAxis->coordToPixel(ticks[i]) - plot.yAxis->coordToPixel(ticks[i - 1])) >= lineHeight);
    QCOMPARE(labels.front(), QStringLiteral("blocks.0"));
    for (int i = 0; i < ticks.size(); ++i) {
        const auto row = size_t(std::lround(ticks[i]));
        if (row < 240) QCOMPARE(row % 5, size_t(0));
    }

    // Two blocks fit every row, with full names.
    RunHistory small;
    small.setLayers(model_layers(2));
    plot.setHistory(&small);
    plot.refresh();
    lay_out(plot, 900, 500);
    plot.yAxis->ticker()->generate(plot.yAxis->range(), plot.locale(), QLatin1Char('g'), 6, ticks, nullptr, &labels);
    QCOMPARE(ticks.size(), 11);
    QCOMPARE(labels.at(1), QStringLiteral("blocks.0.attn.sdpa"));
}

void TestPlots::histogramBarsAreTheCounts_data()
{
    QTest::addColumn<QString>("format");
    QTest::addColumn<int>("first");
    QTest::newRow("fp16") << "fp16" << -30;
    QTest::newRow("bf16") << "bf16" << -140;
    QTest::newRow("e4m3") << "e4m3" << -12;
    QTest::newRow("e5m2") << "e5m2" << -20;
    QTest::newRow("fp32") << "fp32" << 3;
}

void TestPlots::histogramBarsAreTheCounts()
{
    QFETCH(QString, format);
    QFETCH(int, first);
    const std::vector<int64_t> counts{3, 0, 40, 500, 0, 0, 12, 1};
    const RunHistory history = one_tensor_history(format.toStdString(), 1.0, counts, first);
    ExponentHistogramPlot plot;
    plot.setHistory(&history);
    plot.setTensor(QStringLiteral("blocks.0.attn.qkv"), QStringLiteral("input"));
    QVERIFY(plot.refresh());
    QCOMPARE(plot.shownStep(), int64_t(10));
    // Bar e covers [e, e+1) in log2|x|; empty bins draw nothing (a log count axis).
    QVector<double> keys, values, wantKeys, wantValues;
    for (auto it = plot.bars()->data()->constBegin(); it != plot.bars()->data()->constEnd(); ++it) {
        keys.push_back(it->key);
        values.push_back(it->value);
    }
    for (size_t i = 0; i < counts.size(); ++i) {
        if (counts[i] == 0) continue;
        wantKeys.push_back(first + int(i) + 0.5);
        wantValues.push_back(double(counts[i]));
    }
    QCOMPARE(keys, wantKeys);
    QCOMPARE(values, wantValues);
    QVERIFY(plot.title().contains(QStringLiteral(" · ") + format + QStringLiteral(" · step 10")));
}

void TestPlots::histogramBandsFollowFormatAndScale_data()
{
    QTest::addColumn<QString>("format");
    QTest::addColumn<double>("scale");
    QTest::addColumn<double>("subLow");
    QTest::addColumn<double>("normLow");
    QTest::addColumn<double>("normHigh");
    QTest::addColumn<QString>("titleNote");
    QTest::newRow("fp16") << "fp16" << 1.0 << -24.0 << -14.0 << std::log2(65504.0) << "";
    QTest::newRow("bf16") << "bf16" << 1.0 << -133.0 << -126.0 << std::log2(3.3895313892515355e38) << "";
    QTest::newRow("fp32") << "fp32" << 1.0 << -149.0 << -126.0 << std::log2(3.4028234663852886e38) << "";
    // TF32's cast keeps 10 mantissa bits of subnormals too: nothing below 2^-136 survives it.
    QTest::newRow("tf32") << "tf32" << 1.0 << -136.0 << -126.0 << std::log2(3.4011621342146535e38) << "";
    QTest::newRow("e4m3") << "e4m3" << 1.0 << -9.0 << -6.0 << std::log2(448.0) << "";
    // The cast sees x * 16: in the tensor's units every edge moves down by 4 binades.
    QTest::newRow("e4m3 scale 2^4") << "e4m3" << 16.0 << -13.0 << -10.0 << std::log2(448.0) - 4 << " · scale 2^4";
    QTest::newRow("e5m2 scale 2^-3") << "e5m2" << 0.125 << -13.0 << -11.0 << std::log2(57344.0) + 3 << " · scale 2^-3";
    QTest::newRow("e4m3 per-block") << "e4m3" << 0.0 << -9.0 << -6.0 << std::log2(448.0) << " · per-block scales";
    // nvfp4/mxfp4 elements: E2M1's 0.5 subnormal, 1 .. 6 normal.
    QTest::newRow("e2m1 per-block") << "e2m1" << 0.0 << -1.0 << 0.0 << std::log2(6.0) << " · per-block scales";
}

// MX block scales (E8M0) have neither zero nor subnormals: below 2^-127 they are clamped up,
// so the histogram shows a clamp band, the normal range and overflow, and no underflow.
void TestPlots::histogramBandsOfE8m0Scales()
{
    const RunHistory history = one_tensor_history("e8m0", 1.0, {1, 0, 0, 4, 9}, -130, "input_scale");
    ExponentHistogramPlot plot;
    plot.setHistory(&history);
    plot.setTensor(QStringLiteral("blocks.0.attn.qkv"), QStringLiteral("input_scale"));
    plot.refresh();
    const auto bands = plot.bands();
    QCOMPARE(bands.size(), 3);
    QCOMPARE(bands[0].name, QStringLiteral("clamped"));
    QCOMPARE(bands[0].highExponent, -127.0);
    QCOMPARE(bands[1].name, QStringLiteral("normal"));
    QCOMPARE(bands[1].highExponent, 127.0);
    QCOMPARE(bands[2].name, QStringLiteral("overflow"));
    QVERIFY(plot.title().startsWith(QStringLiteral("blocks.0.attn.qkv · input_scale · e8m0 · step 10")));
}

void TestPlots::histogramBandsFollowFormatAndScale()
{
    QFETCH(QString, format);
    QFETCH(double, scale);
    QFETCH(double, subLow);
    QFETCH(double, normLow);
    QFETCH(double, normHigh);
    QFETCH(QString, titleNote);
    const RunHistory history = one_tensor_history(format.toStdString(), scale, {1, 2, 3}, -5);
    ExponentHistogramPlot plot;
    plot.setHistory(&history);
    plot.setTensor(QStringLiteral("blocks.0.attn.qkv"), QStringLiteral("input"));
    plot.refresh();
    const auto bands = plot.bands();
    const QString head = plot.title().section(QLatin1Char('\n'), 0, 0);
    QCOMPARE(head, QStringLiteral("blocks.0.attn.qkv · input · ") + format + QStringLiteral(" · step 10") + titleNote);
    if (scale == 0.0) { // a scale per block: no band of the format would be in the right place
        QCOMPARE(bands.size(), 0);
        return;
    }
    QCOMPARE(bands.size(), 5);
    const double inf = std::numeric_limits<double>::infinity();
    QCOMPARE(bands[0].name, QStringLiteral("underflow"));
    QCOMPARE(bands[0].lowExponent, -inf);
    QCOMPARE(bands[0].highExponent, subLow - 1); // below min_subnormal / 2 becomes zero
    QCOMPARE(bands[1].name, QStringLiteral("rounds to min subnormal"));
    QCOMPARE(bands[1].lowExponent, subLow - 1);
    QCOMPARE(bands[1].highExponent, subLow);
    QCOMPARE(bands[2].name, QStringLiteral("subnormal"));
    QCOMPARE(bands[2].lowExponent, subLow);
    QCOMPARE(bands[2].highExponent, normLow);
    QCOMPARE(bands[3].name, QStringLiteral("normal"));
    QCOMPARE(bands[3].lowExponent, normLow);
    QCOMPARE(bands[3].highExponent, normHigh);
    QCOMPARE(bands[4].name, QStringLiteral("overflow"));
    QCOMPARE(bands[4].lowExponent, normHigh);
    QCOMPARE(bands[4].highExponent, inf);
}

void TestPlots::histogramPicksNearestFrame_data()
{
    QTest::addColumn<qint64>("step");
    QTest::addColumn<qint64>("shown");
    QTest::addColumn<int>("firstExponent");
    QTest::newRow("before the first") << qint64(0) << qint64(1) << -30;
    QTest::newRow("exact") << qint64(50) << qint64(50) << -29;
    QTest::newRow("nearer the earlier") << qint64(120) << qint64(100) << -28;
    QTest::newRow("nearer the later") << qint64(160) << qint64(200) << -27;
    QTest::newRow("after the last") << qint64(10000) << qint64(200) << -27;
}

void TestPlots::histogramPicksNearestFrame()
{
    QFETCH(qint64, step);
    QFETCH(qint64, shown);
    QFETCH(int, firstExponent);
    const RunHistory history = crafted_history();
    ExponentHistogramPlot plot;
    plot.setHistory(&history);
    plot.setTensor(QStringLiteral("blocks.0.mlp.fc1"), QStringLiteral("grad_output"));
    plot.setStep(step);
    QVERIFY(plot.refresh());
    QCOMPARE(plot.shownStep(), int64_t(shown));
    QCOMPARE(plot.bars()->data()->constBegin()->key, firstExponent + 0.5);
    QVERIFY(plot.title().startsWith(QStringLiteral("blocks.0.mlp.fc1 · grad_output · fp16 · step %1\n").arg(shown)));

    // A tensor that was never measured shows nothing.
    plot.setTensor(QStringLiteral("blocks.0.attn.sdpa"), QStringLiteral("weight"));
    QVERIFY(plot.refresh());
    QCOMPARE(plot.shownStep(), int64_t(-1));
    QCOMPARE(plot.bars()->dataCount(), 0);
    QVERIFY(plot.bands().isEmpty());
}

void TestPlots::histogramTitleAndSpecials()
{
    RunHistory history = crafted_history();
    TelemetryBatch batch;
    LayerStatsFrame f;
    f.step = 300;
    TensorStats t;
    t.layer = "blocks.1.mlp.fc2";
    t.role = "weight_grad";
    t.format = "e5m2";
    t.exponent_counts = {10};
    t.zeros = 4;
    t.infs = 2;
    t.nans = 1;
    t.count = 17;
    t.underflow = 0.05;
    t.subnormal = -1; // per-block recipes cannot say
    t.overflow = 0.125;
    t.scale = 0.0;
    f.tensors.push_back(t);
    // The native executor's FP16 gradient: it came in FP16, its cast unseen (-1: not measured).
    TensorStats native = t;
    native.role = "grad_output";
    native.format = "fp16";
    native.infs = native.nans = 0;
    native.underflow = -1;
    native.subnormal = 0.25;
    native.overflow = -1;
    native.scale = 1.0;
    f.tensors.push_back(native);
    TensorStats forward = native; // a forward tensor: not multiplied by the loss scale
    forward.role = "input";
    f.tensors.push_back(forward);
    batch.layer_frames.push_back(f);
    history.append(batch);

    ExponentHistogramPlot plot;
    plot.setHistory(&history);
    plot.setTensor(QStringLiteral("blocks.1.mlp.fc2"), QStringLiteral("grad_output"));
    plot.setStep(300);
    plot.refresh();
    QVERIFY(!plot.title().contains("loss scale")); // the step's metrics have not come yet
    // They come after the frame (a replica's pages, a store read in two parts): the title follows.
    TelemetryBatch metrics;
    StepMetrics scaled; // the step's loss scale: its gradients are measured multiplied by it
    scaled.step = 300;
    scaled.loss_scale = 65536.0;
    metrics.steps.push_back(scaled);
    history.append(metrics);
    plot.refresh();
    QCOMPARE(plot.title(), QStringLiteral("blocks.1.mlp.fc2 · grad_output · fp16 · step 300 · × loss scale 2^16\n"
                                          "cast not seen, values already fp16: underflow n/a · subnormal 25.0% · "
                                          "overflow n/a"));
    plot.setTensor(QStringLiteral("blocks.1.mlp.fc2"), QStringLiteral("input"));
    plot.refresh();
    QVERIFY2(plot.title().startsWith("blocks.1.mlp.fc2 · input · fp16 · step 300\n"), qPrintable(plot.title()));
    plot.setTensor(QStringLiteral("blocks.0.mlp.fc1"), QStringLiteral("grad_output"));
    plot.setStep(100);
    plot.refresh();
    QCOMPARE(plot.title(), QStringLiteral("blocks.0.mlp.fc1 · grad_output · fp16 · step 100\n"
                                          "measured by the cast: underflow 2.40% · subnormal 31.0% · overflow 25.0%"));
    QCOMPARE(plot.specialsText(), QStringLiteral("zeros 15.0% · inf 0 · NaN 0")); // 250 of 1664

    plot.setTensor(QStringLiteral("blocks.1.mlp.fc2"), QStringLiteral("weight_grad"));
    plot.setStep(300);
    plot.refresh();
    QCOMPARE(plot.title(), QStringLiteral("blocks.1.mlp.fc2 · weight_grad · e5m2 · step 300 · per-block scales · "
                                          "× loss scale 2^16\n"
                                          "measured by the cast: underflow 5.00% · subnormal n/a · overflow 12.5% · "
                                          "NaN/Inf 17.6%")); // 3 of 17
    QCOMPARE(plot.specialsText(), QStringLiteral("zeros 23.5% · inf 2 · NaN 1"));
    QVERIFY(plot.yAxis->range().upper >= 20.0); // two decades at least: no label twice

    // A rowwise layer's tensor has a scale per row, not per block.
    RunHistory rowwise;
    rowwise.setInitialLayerStates(
        {LayerState{"blocks.1.mlp.fc2", {NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2}, "rowwise", ""}});
    rowwise.append(batch);
    plot.setHistory(&rowwise);
    plot.setTensor(QStringLiteral("blocks.1.mlp.fc2"), QStringLiteral("weight_grad"));
    plot.setStep(300);
    plot.refresh();
    QVERIFY2(plot.title().startsWith(QStringLiteral("blocks.1.mlp.fc2 · weight_grad · e5m2 · step 300 · per-row scales")),
             qPrintable(plot.title()));

    // A tensor that underflows whole (e4m3 at scale 1, values 2^-20 to 2^-14, below its 2^-9):
    // the view runs on to where e4m3's normal values begin (2^-6), or only the red band showed.
    RunHistory flushed;
    TelemetryBatch low;
    LayerStatsFrame lf;
    lf.step = 1;
    TensorStats g;
    g.layer = "lm_head";
    g.role = "grad_output";
    g.format = "e4m3";
    g.first_exponent = -20;
    g.exponent_counts = {5, 9, 20, 40, 30, 9, 2};
    g.count = 115;
    g.underflow = 1.0;
    g.subnormal = 0.0;
    g.scale = 1.0;
    lf.tensors.push_back(g);
    low.layer_frames.push_back(lf);
    flushed.append(low);
    plot.setHistory(&flushed);
    plot.setTensor(QStringLiteral("lm_head"), QStringLiteral("grad_output"));
    plot.setStep(1);
    plot.refresh();
    QVERIFY2(plot.xAxis->range().upper >= -5.0, qPrintable(QString::number(plot.xAxis->range().upper)));
    QVERIFY(plot.xAxis->range().lower <= -20.0);
}

void TestPlots::histogramRefreshOnlyWhenSomethingChanged()
{
    RunHistory history = crafted_history();
    ExponentHistogramPlot plot;
    QVERIFY(plot.refresh()); // the empty state is drawn once
    QVERIFY(!plot.refresh());
    plot.setHistory(&history);
    plot.setTensor(QStringLiteral("blocks.0.mlp.fc1"), QStringLiteral("grad_output"));
    plot.setStep(100);
    QVERIFY(plot.refresh());
    QVERIFY(!plot.refresh());
    plot.setStep(100);
    QVERIFY(!plot.refresh());
    plot.setStep(110); // still nearest to the frame at 100
    QVERIFY(!plot.refresh());
    QCOMPARE(plot.shownStep(), int64_t(100));
    plot.setStep(190);
    QVERIFY(plot.refresh());
    QCOMPARE(plot.shownStep(), int64_t(200));

    // New steps without frames leave the shown histogram as it is.
    TelemetryBatch steps;
    steps.steps.push_back({});
    steps.steps.back().step = kSteps + 1;
    history.append(steps);
    QVERIFY(!plot.refresh());
}

void TestPlots::realisticRunRenders()
{
    // 48 blocks, 300 frames every 50 steps with a gap after a resume; an FP16 grad_output
    // histogram partly under 2^-24; an e4m3 input with a per-tensor scale of 2^5.
    const auto layers = model_layers(48);
    RunHistory history(8192);
    history.setLayers(layers);
    TelemetryBatch batch;
    for (int j = 0; j < 300; ++j) {
        LayerStatsFrame f;
        f.step = j < 150 ? 1 + 50 * j : 10000 + 50 * j;
        for (size_t i = 0; i < layers.size(); ++i) {
            TensorStats g;
            g.layer = layers[i];
            g.role = "grad_output";
            g.format = "fp16";
            const double depth = double(i) / double(layers.size());
            const double hot = layers[i].ends_with("fc2") ? 3.0 : 1.0;
            g.underflow = std::clamp(0.002 * j * (1.0 - depth) * hot - 0.05, 0.0, 1.0);
            g.overflow = 0.0;
            g.amax = std::ldexp(1.0, -int(i % 20)) * (1 + 0.01 * j);
            if (layers[i] == "blocks.3.mlp.fc1") {
                g.first_exponent = -34;
                g.exponent_counts.resize(30);
                for (int e = 0; e < 30; ++e)
                    g.exponent_counts[size_t(e)] = int64_t(200000.0 * std::exp(-0.5 * std::pow((e - 16.0) / 4.0, 2)));
                g.zeros = 30000;
                g.count = 30000;
                for (auto c : g.exponent_counts) g.count += c;
                g.underflow = 0.021;
                g.subnormal = 0.18;
            }
            f.tensors.push_back(g);
            if (layers[i] == "blocks.3.mlp.fc1") {
                TensorStats x;
                x.layer = layers[i];
                x.role = "input";
                x.format = "e4m3";
                x.scale = 32.0;
                x.first_exponent = -22;
                x.exponent_counts.resize(26);
                for (int e = 0; e < 26; ++e)
                    x.exponent_counts[size_t(e)] = int64_t(300000.0 * std::exp(-0.5 * std::pow((e - 17.0) / 3.5, 2)));
                for (auto c : x.exponent_counts) x.count += c;
                x.zeros = 0;
                x.underflow = 0.0031;
                x.subnormal = 0.042;
                x.amax = 13.5;
                f.tensors.push_back(x);
            }
        }
        for (int b = 0; b < 48; ++b)
            f.attention_max_logit.emplace_back("blocks." + std::to_string(b) + ".attn", 5.0 + 0.1 * j * (b % 7));
        batch.layer_frames.push_back(std::move(f));
    }
    batch.events.push_back(legacy_event(5001, "precision_changed", "blocks.3.* -> bf16"));
    batch.events.push_back(legacy_event(13001, "precision_changed", "blocks.7.* -> fp16"));
    history.append(batch);

    LayerHeatmapPlot heatmap;
    heatmap.setHistory(&history);
    heatmap.refresh();
    heatmap.setSelectedLayer(QStringLiteral("blocks.3.mlp.fc1"));
    heatmap.setCursorStep(12000);
    QCOMPARE(heatmap.rowCount(), 241);
    QCOMPARE(heatmap.columnCount(), 300);
    lay_out(heatmap, 900, 500);
    // The x axis reads in steps, round numbers, in order, across the gap.
    QVector<double> ticks;
    QVector<QString> labels;
    heatmap.xAxis->ticker()->generate(heatmap.xAxis->range(), heatmap.locale(), QLatin1Char('g'), 6, ticks, nullptr,
                                      &labels);
    QVERIFY(labels.size() >= 4);
    for (int i = 1; i < labels.size(); ++i) QVERIFY(labels[i].toLongLong() > labels[i - 1].toLongLong());

    ExponentHistogramPlot gradHist, inputHist;
    gradHist.setHistory(&history);
    gradHist.setTensor(QStringLiteral("blocks.3.mlp.fc1"), QStringLiteral("grad_output"));
    gradHist.setStep(12000);
    gradHist.refresh();
    lay_out(gradHist, 900, 500);
    inputHist.setHistory(&history);
    inputHist.setTensor(QStringLiteral("blocks.3.mlp.fc1"), QStringLiteral("input"));
    inputHist.setStep(12000);
    inputHist.refresh();
    lay_out(inputHist, 900, 500);
    QCOMPARE(inputHist.bands()[3].lowExponent, -11.0);

    const QString dir = qEnvironmentVariable("MANTISSA_PLOT_SNAPSHOT_DIR");
    if (!dir.isEmpty()) {
        heatmap.grab().save(dir + QStringLiteral("/heatmap.png"));
        heatmap.setStatistic(LayerStat::Amax);
        heatmap.refresh();
        heatmap.replot();
        heatmap.grab().save(dir + QStringLiteral("/heatmap_amax.png"));
        heatmap.setStatistic(LayerStat::AttentionMaxLogit);
        heatmap.refresh();
        heatmap.replot();
        heatmap.grab().save(dir + QStringLiteral("/heatmap_logit.png"));
        gradHist.grab().save(dir + QStringLiteral("/histogram_fp16.png"));
        inputHist.grab().save(dir + QStringLiteral("/histogram_e4m3.png"));
    }
}

QTEST_MAIN(TestPlots)
#include "test_plots.moc"
