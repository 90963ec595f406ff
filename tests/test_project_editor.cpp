// SPDX-License-Identifier: GPL-3.0-or-later
// The Project page: ProjectDocument's validated edits, save/open and recent projects; the
// settings tree, the per-layer precision table and the memory estimate under
// QAbstractItemModelTester; the page's validation message. Runs with QT_QPA_PLATFORM=offscreen.

#include <QAbstractItemModelTester>
#include <QBrush>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QPalette>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>
#include <QTreeView>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "dataset.h"
#include "memory_model.h"
#include "models/choice_delegate.h"
#include "models/memory_estimate_model.h"
#include "models/precision_table_model.h"
#include "models/project_document.h"
#include "models/project_settings_model.h"
#include "pages/project_page.h"
#include "project_config.h"

using namespace mantissa;
using Gemm = ProjectDocument::Gemm;

namespace {

// Small enough that the synthetic data (and so the vocabulary) is generated in milliseconds.
ProjectConfig tiny_config(int64_t n_layer = 2)
{
    ProjectConfig c;
    c.name = "editor-test";
    c.model.n_layer = n_layer;
    c.model.n_head = 2;
    c.model.n_embd = 16;
    c.model.context_length = 16;
    c.data.kind = DataKind::SyntheticAddition;
    c.data.examples = 500;
    c.training.batch_size = 4;
    return c;
}

std::string json_of(const ProjectDocument& doc)
{
    return to_json_text(doc.config());
}

QModelIndex value_index(const ProjectSettingsModel& model, const QString& key)
{
    const QModelIndex setting = model.indexForKey(key);
    return setting.sibling(setting.row(), ProjectSettingsModel::ValueColumn);
}

std::vector<GemmFormats> all_formats(const ProjectConfig& config)
{
    std::vector<GemmFormats> out;
    for (const auto& name : gemm_layer_names(config.model.n_layer))
        out.push_back(resolve_layer_formats(config.precision, name, config.model.n_layer));
    return out;
}

std::optional<NumberFormat> format_or_keep(const QString& text)
{
    if (text.isEmpty()) return std::nullopt;
    return parse_number_format(text.toStdString());
}

const GemmFormats kHybrid{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2};

void write_file(const QString& path, const QByteArray& bytes)
{
    QFile file(path);
    QVERIFY2(file.open(QIODevice::WriteOnly), qPrintable(path));
    QCOMPARE(file.write(bytes), bytes.size());
}

QByteArray read_file(const QString& path)
{
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// The vocabulary is counted on a worker thread: lets the event loop run until the count for
// the document's current data has arrived. The timeout only bounds a hang.
bool vocab_settled(const ProjectDocument& doc)
{
    return QTest::qWaitFor([&] { return !doc.vocabCounting(); }, 120000);
}

// `distinct` different characters from U+0100 on (two UTF-8 bytes each) cycled through
// `length` characters, with a newline after every 64: a char vocabulary of distinct + 1.
QByteArray generated_corpus(int distinct, int length)
{
    QString text;
    text.reserve(length + length / 64 + 1);
    for (int i = 0; i < length; ++i) {
        text += QChar(0x100 + i % distinct);
        if (i % 64 == 63) text += QLatin1Char('\n');
    }
    return text.toUtf8();
}

} // namespace

class TestProjectEditor : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();

    void modelsPassTesterAcrossEdits();
    void settingsTreeShowsResolvedProject();
    void settingsEditUpdatesInPlace();
    void choicesForFixedKeys_data();
    void choicesForFixedKeys();
    void boolSettingByCheckState();

    void precisionCellEdit_data();
    void precisionCellEdit();
    void aCellSetBackToThePresetDropsItsEntry();
    void precisionScalingEdit();
    void repeatedEditsReuseOrAppendEntries();
    void editingNLayerResizesTable_data();
    void editingNLayerResizesTable();
    void lmHeadShowsTiedParameters();

    void invalidValuesRefused_data();
    void invalidValuesRefused();
    void validationMessageClearsOnSuccess();
    void undoAndRedoWalkTheEdits();

    void fillByPattern_data();
    void fillByPattern();
    void fillDuringARunSendsTheScaling();
    void noProjectNoLayerEdits();
    void fillPatternMatchingNothingRefused();
    void presetApply_data();
    void presetApply();
    void keepLastBlocksInBf16();
    void recipeNoteSaysWhatTheLayersCannotApply();
    void settingsNoLayerReadsAreGreyed();

    void memoryEstimateMatchesEngine_data();
    void memoryEstimateMatchesEngine();
    void memoryEstimateFollowsPreset();
    void memoryEstimateShowsDataError();
    void vocabCountedOffGuiThread();
    void staleVocabCountDropped();

    void saveOpenRoundTrip();
    void openFailureChangesNothing();
    void recentProjectsOrder();

    void layerFormatsEditedSignal();
    void aRunningEditKeepsTheWatchersOtherSwitches();
    void scalingShowsTheRunsRecipe();
    void runningLocksSettingsOnly();
    void selectLayerScrollsToRow();
    void delegateEditors();
};

void TestProjectEditor::initTestCase()
{
    // Recent projects live in QSettings: test mode keeps the user's own list untouched.
    QStandardPaths::setTestModeEnabled(true);
    ProjectDocument doc;
    doc.clearRecentProjects();
}

void TestProjectEditor::modelsPassTesterAcrossEdits()
{
    ProjectDocument doc;
    ProjectSettingsModel settings(&doc);
    PrecisionTableModel table(&doc);
    MemoryEstimateModel memory(&doc);
    QCOMPARE(settings.rowCount(), 0);
    QCOMPARE(table.rowCount(), 0);
    QCOMPARE(memory.rowCount(), 0);

    const auto mode = QAbstractItemModelTester::FailureReportingMode::QtTest;
    QAbstractItemModelTester settingsTester(&settings, mode);
    QAbstractItemModelTester tableTester(&table, mode);
    QAbstractItemModelTester memoryTester(&memory, mode);

    doc.setConfig(tiny_config(2));
    QCOMPARE(settings.rowCount(), 8); // name and seven sections
    QCOMPARE(table.rowCount(), 11);
    QCOMPARE(memory.rowCount(), int(MemoryEstimateModel::RowCount));

    QVERIFY(settings.setData(value_index(settings, "model.n_layer"), QStringLiteral("3")));
    QCOMPARE(table.rowCount(), 16);
    QVERIFY(doc.setPreset("fp8-hybrid", nullptr));
    QVERIFY(table.setData(table.index(table.rowForLayer("blocks.1.mlp.fc1"), PrecisionTableModel::DgradColumn),
                          QStringLiteral("bf16")));
    QVERIFY(!settings.setData(value_index(settings, "model.n_head"), QStringLiteral("0")));
    QVERIFY(doc.fillByPattern("blocks.*.attn.qkv", NumberFormat::BF16, std::nullopt, std::nullopt,
                              Fp8Scaling::Current, nullptr));
    QCOMPARE(settings.valueForKey("precision.layers"), QStringLiteral("2 overrides — edit in the precision table"));
    doc.setConfig(tiny_config(1));
    QCOMPARE(table.rowCount(), 6);
    QCOMPARE(settings.valueForKey("precision.layers"), QStringLiteral("no overrides — edit in the precision table"));
    QVERIFY(vocab_settled(doc));
    QCOMPARE(memory.bytesAt(MemoryEstimateModel::TotalRow),
             estimate_memory(doc.config(), project_vocab_size(doc.config())).total_bytes());
}

void TestProjectEditor::settingsTreeShowsResolvedProject()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectSettingsModel model(&doc);
    QCOMPARE(model.index(0, 0).data().toString(), QStringLiteral("name"));
    QCOMPARE(model.index(1, 0).data().toString(), QStringLiteral("model"));
    QCOMPARE(model.index(6, 0).data().toString(), QStringLiteral("precision"));
    QCOMPARE(model.valueForKey("name"), QStringLiteral("editor-test"));
    QCOMPARE(model.valueForKey("model.n_layer"), QStringLiteral("2"));
    QCOMPARE(model.valueForKey("optimizer.eps"), QStringLiteral("1e-08"));
    QCOMPARE(model.valueForKey("optimizer.learning_rate"), QStringLiteral("0.001"));
    QCOMPARE(model.valueForKey("precision.fp8.scaling"), QStringLiteral("delayed"));
    QCOMPARE(model.valueForKey("precision.loss_scaling.mode"), QStringLiteral("auto"));
    QCOMPARE(model.valueForKey("telemetry.watchers.actions.nonfinite"), QStringLiteral("none"));
    QVERIFY(model.valueForKey("no.such.key").isNull());
    // A seed past 2^53 reads as the project says it, every digit (a double would show ...568).
    ProjectConfig big = tiny_config(2);
    big.training.seed = 12345678901234567ULL;
    doc.setConfig(big);
    QCOMPARE(model.valueForKey("training.seed"), QStringLiteral("12345678901234567"));
    QCOMPARE(doc.config().training.seed, uint64_t(12345678901234567ULL));

    // Nested objects are sub-trees; precision.layers is a read-only summary leaf.
    const QModelIndex fp8 = model.indexForKey("precision.fp8");
    QCOMPARE(model.rowCount(fp8), 9);
    const QModelIndex layers = value_index(model, "precision.layers");
    QCOMPARE(model.rowCount(model.indexForKey("precision.layers")), 0);
    QVERIFY(!(model.flags(layers) & Qt::ItemIsEditable));
    QVERIFY(!model.setData(layers, QStringLiteral("[]")));
    QVERIFY(model.flags(value_index(model, "model.n_layer")) & Qt::ItemIsEditable);
    QCOMPARE(model.indexForKey("model.n_layer").data(Qt::ToolTipRole).toString(), QStringLiteral("model.n_layer = 2"));
    QCOMPARE(model.keyForIndex(value_index(model, "precision.fp8.margin")), QStringLiteral("precision.fp8.margin"));
}

void TestProjectEditor::settingsEditUpdatesInPlace()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectSettingsModel model(&doc);
    QSignalSpy resets(&model, &QAbstractItemModel::modelReset);
    QSignalSpy changes(&model, &QAbstractItemModel::dataChanged);
    const QModelIndex lr = value_index(model, "optimizer.learning_rate");
    QVERIFY(model.setData(lr, QStringLiteral("0.0003")));
    QCOMPARE(doc.config().optimizer.learning_rate, 0.0003);
    QCOMPARE(model.valueForKey("optimizer.learning_rate"), QStringLiteral("0.0003"));
    QVERIFY(doc.isDirty());
    // The tree keeps its shape, so the view keeps its expansion and selection.
    QCOMPARE(resets.count(), 0);
    QCOMPARE(changes.count(), 1);
    QCOMPARE(changes.at(0).at(0).value<QModelIndex>(), lr);
    // Edited back to the value it was opened with: nothing to save (it stayed "unsaved").
    QVERIFY(model.setData(lr, QString::number(tiny_config(2).optimizer.learning_rate, 'g', 17)));
    QVERIFY(!doc.isDirty());
}

void TestProjectEditor::choicesForFixedKeys_data()
{
    QTest::addColumn<QString>("key");
    QTest::addColumn<QStringList>("choices");
    QTest::addColumn<QString>("pick");
    QTest::newRow("data.kind") << "data.kind" << QStringList{"synthetic-addition", "text", "bin"}
                               << "synthetic-addition";
    QTest::newRow("data.tokenizer") << "data.tokenizer" << QStringList{"char", "byte"} << "byte";
    QTest::newRow("training.device") << "training.device" << QStringList{"auto", "cpu", "cuda"} << "cpu";
    QTest::newRow("precision.preset") << "precision.preset"
                                      << QStringList{"fp32", "bf16", "fp16", "fp8-hybrid", "fp8-hybrid-keep-ends",
                                                     "fp8-e4m3"}
                                      << "bf16";
    QTest::newRow("precision.fp8.scaling")
        << "precision.fp8.scaling"
        << QStringList{"delayed", "current", "rowwise", "mxfp8", "fp8-block", "nvfp4", "mxfp4"} << "nvfp4";
    QTest::newRow("precision.fp8.block_scales")
        << "precision.fp8.block_scales" << QStringList{"power-of-two", "fp32"} << "fp32";
    QTest::newRow("precision.fp8.amax_compute_algo")
        << "precision.fp8.amax_compute_algo" << QStringList{"max", "most_recent"} << "most_recent";
    QTest::newRow("precision.loss_scaling.mode")
        << "precision.loss_scaling.mode" << QStringList{"auto", "dynamic", "static", "off"} << "static";
    QTest::newRow("precision.backend") << "precision.backend" << QStringList{"auto", "emulated", "native"}
                                       << "emulated";
    QTest::newRow("watcher action") << "telemetry.watchers.actions.loss_spike"
                                    << QStringList{"none", "pause", "bf16"} << "pause";
    QTest::newRow("free number") << "model.n_embd" << QStringList{} << "32";
}

void TestProjectEditor::choicesForFixedKeys()
{
    QFETCH(QString, key);
    QFETCH(QStringList, choices);
    QFETCH(QString, pick);
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectSettingsModel model(&doc);
    const QModelIndex at = value_index(model, key);
    QVERIFY(at.isValid());
    QCOMPARE(at.data(ChoiceDelegate::ChoicesRole).toStringList(), choices);
    QCOMPARE(ProjectSettingsModel::choicesForKey(key), choices);
    QVERIFY(model.setData(at, pick));
    QCOMPARE(model.valueForKey(key), pick);
    QCOMPARE(doc.value(key).toVariant().toString(), pick);
}

void TestProjectEditor::boolSettingByCheckState()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectSettingsModel model(&doc);
    const QModelIndex saturate = value_index(model, "precision.fp8.saturate");
    QVERIFY(model.flags(saturate) & Qt::ItemIsUserCheckable);
    QCOMPARE(saturate.data(Qt::CheckStateRole).toInt(), int(Qt::Checked));
    QVERIFY(model.setData(saturate, int(Qt::Unchecked), Qt::CheckStateRole));
    QCOMPARE(doc.config().precision.fp8.saturate, false);
    QCOMPARE(saturate.data(Qt::CheckStateRole).toInt(), int(Qt::Unchecked));
    QVERIFY(model.setData(value_index(model, "model.bias"), QStringLiteral("false")));
    QCOMPARE(doc.config().model.bias, false);
}

void TestProjectEditor::precisionCellEdit_data()
{
    QTest::addColumn<QString>("layer");
    QTest::addColumn<int>("column");
    QTest::addColumn<QString>("format");
    QTest::newRow("fc1 forward e4m3") << "blocks.1.mlp.fc1" << int(PrecisionTableModel::ForwardColumn) << "e4m3";
    QTest::newRow("fc1 dgrad bf16") << "blocks.1.mlp.fc1" << int(PrecisionTableModel::DgradColumn) << "bf16";
    QTest::newRow("fc1 wgrad e5m2") << "blocks.1.mlp.fc1" << int(PrecisionTableModel::WgradColumn) << "e5m2";
    QTest::newRow("qkv forward fp16") << "blocks.0.attn.qkv" << int(PrecisionTableModel::ForwardColumn) << "fp16";
    QTest::newRow("sdpa dgrad tf32") << "blocks.0.attn.sdpa" << int(PrecisionTableModel::DgradColumn) << "tf32";
    QTest::newRow("lm_head wgrad bf16") << "lm_head" << int(PrecisionTableModel::WgradColumn) << "bf16";
}

void TestProjectEditor::precisionCellEdit()
{
    QFETCH(QString, layer);
    QFETCH(int, column);
    QFETCH(QString, format);
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    PrecisionTableModel table(&doc);
    const auto before = all_formats(doc.config());
    const int row = table.rowForLayer(layer);
    QVERIFY(row >= 0);
    const QModelIndex cell = table.index(row, column);
    QVERIFY(table.flags(cell) & Qt::ItemIsEditable);
    QCOMPARE(cell.data(ChoiceDelegate::ChoicesRole).toStringList(),
             QStringList({"fp32", "tf32", "bf16", "fp16", "e4m3", "e5m2"}));
    QVERIFY(!cell.data(Qt::FontRole).value<QFont>().bold());
    QVERIFY(!cell.data(Qt::BackgroundRole).isValid()); // fp32: no tint

    QVERIFY(table.setData(cell, format));

    const NumberFormat want = *parse_number_format(format.toStdString());
    const int64_t n = doc.config().model.n_layer;
    GemmFormats expected = before[static_cast<size_t>(row)];
    if (column == PrecisionTableModel::ForwardColumn) expected.forward = want;
    if (column == PrecisionTableModel::DgradColumn) expected.dgrad = want;
    if (column == PrecisionTableModel::WgradColumn) expected.wgrad = want;
    const GemmFormats got = resolve_layer_formats(doc.config().precision, layer.toStdString(), n);
    QVERIFY2(got == expected, got.describe().c_str());
    const auto after = all_formats(doc.config());
    for (size_t i = 0; i < after.size(); ++i)
        if (static_cast<int>(i) != row) QVERIFY2(after[i] == before[i], gemm_layer_names(n)[i].c_str());

    QCOMPARE(cell.data().toString(), format);
    QVERIFY(cell.data(Qt::FontRole).value<QFont>().bold()); // differs from the fp32 preset
    QCOMPARE(cell.data(Qt::BackgroundRole).isValid(), want != NumberFormat::TF32);
    QCOMPARE(doc.config().precision.layers.size(), size_t(1));
    QCOMPARE(doc.config().precision.layers[0].match, layer.toStdString());
    QVERIFY(doc.isDirty());
}

// A cell set back to the preset's value takes its entry's key away, and the entry once empty:
// such an entry stayed, and a smaller model.n_layer was refused for a pattern the user never
// wrote ("precision.layers[0].match: 'blocks.3.mlp.fc2' matches no layer").
void TestProjectEditor::aCellSetBackToThePresetDropsItsEntry()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(4));
    QVERIFY(doc.setPreset("fp8-hybrid", nullptr));
    PrecisionTableModel table(&doc);
    const int row = table.rowForLayer("blocks.3.mlp.fc2");
    const QModelIndex wgrad = table.index(row, PrecisionTableModel::WgradColumn);
    const QModelIndex forward = table.index(row, PrecisionTableModel::ForwardColumn);
    const QModelIndex scaling = table.index(row, PrecisionTableModel::ScalingColumn);
    QVERIFY(table.setData(wgrad, QStringLiteral("bf16")));
    QVERIFY(table.setData(forward, QStringLiteral("e5m2")));
    QVERIFY(table.setData(scaling, QStringLiteral("current")));
    QCOMPARE(doc.config().precision.layers.size(), size_t(1));
    QVERIFY(table.setData(wgrad, QStringLiteral("e5m2"))); // the preset's: the key goes, the entry stays
    QCOMPARE(doc.config().precision.layers.size(), size_t(1));
    QCOMPARE(doc.config().precision.layers[0].wgrad, std::nullopt);
    QVERIFY(!wgrad.data(Qt::FontRole).value<QFont>().bold());
    QVERIFY(table.setData(forward, QStringLiteral("e4m3")));
    QVERIFY(table.setData(scaling, QStringLiteral("delayed")));
    QVERIFY(doc.config().precision.layers.empty()); // nothing left to set
    QString error;
    QVERIFY2(doc.setValue(QStringLiteral("model.n_layer"), 2, &error), qPrintable(error));
    QCOMPARE(doc.config().model.n_layer, int64_t(2));
}

void TestProjectEditor::precisionScalingEdit()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    QVERIFY(doc.setPreset("fp8-hybrid", nullptr));
    PrecisionTableModel table(&doc);
    const int row = table.rowForLayer("blocks.0.attn.qkv");
    const QModelIndex cell = table.index(row, PrecisionTableModel::ScalingColumn);
    QCOMPARE(cell.data().toString(), QStringLiteral("delayed"));
    QCOMPARE(cell.data(ChoiceDelegate::ChoicesRole).toStringList(),
             QStringList({"delayed", "current", "rowwise", "mxfp8", "fp8-block", "nvfp4", "mxfp4"}));
    QVERIFY(table.setData(cell, QStringLiteral("rowwise")));
    for (const auto& name : gemm_layer_names(2))
        QCOMPARE(resolve_layer_recipe(doc.config().precision, name).scaling,
                 name == "blocks.0.attn.qkv" ? Fp8Scaling::PerRow : Fp8Scaling::Delayed);
    QCOMPARE(cell.data().toString(), QStringLiteral("rowwise"));
    QVERIFY(cell.data(Qt::FontRole).value<QFont>().bold());
    QVERIFY(!table.setData(cell, QStringLiteral("tensorwise")));
    QCOMPARE(resolve_layer_recipe(doc.config().precision, "blocks.0.attn.qkv").scaling, Fp8Scaling::PerRow);

    // A layer with no FP8 GEMM shows its recipe greyed and still takes an edit.
    const QModelIndex sdpa = table.index(table.rowForLayer("blocks.0.attn.sdpa"), PrecisionTableModel::ScalingColumn);
    QVERIFY(sdpa.data(Qt::ForegroundRole).isValid());
    QVERIFY(table.flags(sdpa) & Qt::ItemIsEditable);
    QVERIFY(table.setData(sdpa, QStringLiteral("current")));
    QCOMPARE(resolve_layer_recipe(doc.config().precision, "blocks.0.attn.sdpa").scaling, Fp8Scaling::Current);
}

void TestProjectEditor::repeatedEditsReuseOrAppendEntries()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    const std::string fc1 = "blocks.1.mlp.fc1";
    QVERIFY(doc.setLayerFormat("blocks.1.mlp.fc1", Gemm::Forward, NumberFormat::E4M3, nullptr));
    QVERIFY(doc.setLayerFormat("blocks.1.mlp.fc1", Gemm::Dgrad, NumberFormat::E5M2, nullptr));
    QVERIFY(doc.setLayerFormat("blocks.1.mlp.fc1", Gemm::Forward, NumberFormat::BF16, nullptr));
    QCOMPARE(doc.config().precision.layers.size(), size_t(1));
    QVERIFY((resolve_layer_formats(doc.config().precision, fc1, 2) ==
             GemmFormats{NumberFormat::BF16, NumberFormat::E5M2, NumberFormat::FP32}));

    // A later pattern entry sets forward for this layer too, so the next one-layer edit must
    // come after it to win.
    QVERIFY(doc.fillByPattern("blocks.*", NumberFormat::FP16, std::nullopt, std::nullopt, std::nullopt, nullptr));
    QCOMPARE(doc.config().precision.layers.size(), size_t(2));
    QVERIFY(doc.setLayerFormat("blocks.1.mlp.fc1", Gemm::Forward, NumberFormat::E4M3, nullptr));
    QCOMPARE(doc.config().precision.layers.size(), size_t(3));
    QVERIFY((resolve_layer_formats(doc.config().precision, fc1, 2) ==
             GemmFormats{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::FP32}));
    // ... but an edit of a GEMM the pattern leaves alone updates the exact entry in place.
    QVERIFY(doc.setLayerFormat("blocks.1.mlp.fc1", Gemm::Wgrad, NumberFormat::BF16, nullptr));
    QCOMPARE(doc.config().precision.layers.size(), size_t(3));
    QVERIFY((resolve_layer_formats(doc.config().precision, fc1, 2) ==
             GemmFormats{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::BF16}));

    // Setting what a layer already has records nothing.
    QVERIFY(doc.setLayerFormat("blocks.0.mlp.fc2", Gemm::Dgrad, NumberFormat::FP32, nullptr));
    QCOMPARE(doc.config().precision.layers.size(), size_t(3));
    QString error;
    QVERIFY(!doc.setLayerFormat("blocks.7.mlp.fc2", Gemm::Dgrad, NumberFormat::BF16, &error));
    QCOMPARE(error, QStringLiteral("precision.layers: there is no layer 'blocks.7.mlp.fc2'"));
}

void TestProjectEditor::editingNLayerResizesTable_data()
{
    QTest::addColumn<int>("nLayer");
    QTest::newRow("1") << 1;
    QTest::newRow("3") << 3;
    QTest::newRow("6") << 6;
}

void TestProjectEditor::editingNLayerResizesTable()
{
    QFETCH(int, nLayer);
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectSettingsModel settings(&doc);
    PrecisionTableModel table(&doc);
    QAbstractItemModelTester tester(&table, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QVERIFY(settings.setData(value_index(settings, "model.n_layer"), QString::number(nLayer)));
    QCOMPARE(doc.config().model.n_layer, int64_t(nLayer));
    QCOMPARE(settings.valueForKey("model.n_layer"), QString::number(nLayer));
    QCOMPARE(table.rowCount(), 5 * nLayer + 1);
    QCOMPARE(table.layerAt(0), QStringLiteral("blocks.0.attn.qkv"));
    QCOMPARE(table.layerAt(5 * (nLayer - 1) + 3), QStringLiteral("blocks.%1.mlp.fc1").arg(nLayer - 1));
    QCOMPARE(table.layerAt(5 * nLayer), QStringLiteral("lm_head"));
}

void TestProjectEditor::lmHeadShowsTiedParameters()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    PrecisionTableModel table(&doc);
    QVERIFY(vocab_settled(doc));
    const int64_t vocab = project_vocab_size(doc.config());
    const auto shapes = gemm_layer_shapes(doc.config().model, vocab);
    for (int row = 0; row < table.rowCount(); ++row)
        QCOMPARE(table.index(row, PrecisionTableModel::ParametersColumn).data(Qt::UserRole).toLongLong(),
                 shapes[static_cast<size_t>(row)].parameters);
    const QModelIndex head = table.index(table.rowForLayer("lm_head"), PrecisionTableModel::ParametersColumn);
    QCOMPARE(head.data().toString(), QStringLiteral("%1 (tied)").arg(QLocale().toString(qint64(vocab * 16))));
    const QModelIndex fc1 = table.index(table.rowForLayer("blocks.0.mlp.fc1"), PrecisionTableModel::ParametersColumn);
    QCOMPARE(fc1.data(Qt::UserRole).toLongLong(), qint64(4 * 16 * 16 + 4 * 16));
    QCOMPARE(table.index(table.rowForLayer("blocks.0.attn.sdpa"), PrecisionTableModel::ParametersColumn)
                 .data()
                 .toString(),
             QStringLiteral("—"));
}

void TestProjectEditor::invalidValuesRefused_data()
{
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("value");
    QTest::addColumn<QString>("message");
    QTest::newRow("negative n_layer") << "model.n_layer" << "-1" << "model.n_layer: must be at least 1";
    QTest::newRow("string for an integer") << "model.n_layer" << "four"
                                           << "model.n_layer: expected an integer, got a string";
    QTest::newRow("fraction for an integer") << "model.n_layer" << "2.5"
                                             << "model.n_layer: expected an integer, got a number";
    QTest::newRow("string for a number") << "optimizer.learning_rate" << "fast"
                                         << "optimizer.learning_rate: expected a number, got a string";
    QTest::newRow("string for a boolean") << "model.bias" << "maybe"
                                          << "model.bias: expected a boolean, got a string";
    QTest::newRow("n_embd not divisible") << "model.n_embd" << "17"
                                          << "model.n_embd: 17 is not divisible by model.n_head (2)";
    QTest::newRow("unknown data kind") << "data.kind" << "csv"
                                       << "data.kind: 'csv' is not one of synthetic-addition, text, bin";
    QTest::newRow("unknown device") << "training.device" << "tpu"
                                    << "training.device: 'tpu' is not one of auto, cpu, cuda";
    QTest::newRow("unknown preset") << "precision.preset" << "fp4"
                                    << "precision.preset: 'fp4' is not one of fp32, bf16, fp16, fp8-hybrid, "
                                       "fp8-hybrid-keep-ends, fp8-e4m3";
    QTest::newRow("unknown scaling") << "precision.fp8.scaling" << "tensorwise"
                                     << "precision.fp8.scaling: 'tensorwise' is not one of delayed, current, "
                                        "rowwise, mxfp8, fp8-block, nvfp4, mxfp4";
    QTest::newRow("unknown watcher action") << "telemetry.watchers.actions.loss_spike" << "explode"
                                            << "telemetry.watchers.actions.loss_spike: 'explode' is not one of "
                                               "none, pause, bf16";
    QTest::newRow("too few examples") << "data.examples" << "5" << "data.examples: must be at least 10";
    QTest::newRow("dropout out of range") << "model.dropout" << "1" << "model.dropout: must be in [0, 1)";
}

void TestProjectEditor::invalidValuesRefused()
{
    QFETCH(QString, key);
    QFETCH(QString, value);
    QFETCH(QString, message);
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectPage page(&doc);
    ProjectSettingsModel* model = page.settingsModel();
    QSignalSpy failures(&doc, &ProjectDocument::validationFailed);
    QSignalSpy changes(&doc, &ProjectDocument::changed);
    const std::string before = json_of(doc);
    const QString shownBefore = model->valueForKey(key);

    QVERIFY(!model->setData(value_index(*model, key), value));

    QCOMPARE(json_of(doc), before);
    QCOMPARE(model->valueForKey(key), shownBefore);
    QVERIFY(!doc.isDirty());
    QCOMPARE(changes.count(), 0);
    QCOMPARE(failures.count(), 1);
    QCOMPARE(failures.at(0).at(0).toString(), key);
    QCOMPARE(failures.at(0).at(1).toString(), message);
    QCOMPARE(page.validationLabel()->objectName(), QStringLiteral("validationMessage"));
    QCOMPARE(page.validationLabel()->text(), message);
    QVERIFY(!page.validationLabel()->isHidden());

}

void TestProjectEditor::validationMessageClearsOnSuccess()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectPage page(&doc);
    QVERIFY(!page.settingsModel()->setData(value_index(*page.settingsModel(), "model.n_head"), QStringLiteral("3")));
    QCOMPARE(page.validationLabel()->text(), QStringLiteral("model.n_embd: 16 is not divisible by model.n_head (3)"));
    QVERIFY(!page.validationLabel()->isHidden());
    QVERIFY(page.settingsModel()->setData(value_index(*page.settingsModel(), "model.n_head"), QStringLiteral("4")));
    QCOMPARE(doc.config().model.n_head, int64_t(4));
    QVERIFY(page.validationLabel()->text().isEmpty());
    QVERIFY(page.validationLabel()->isHidden());
    // Refused, then the value it has typed back: nothing changes, and the message goes too (it
    // stayed, red, over a valid value).
    QVERIFY(!page.settingsModel()->setData(value_index(*page.settingsModel(), "model.n_head"), QStringLiteral("3")));
    QVERIFY(!page.validationLabel()->isHidden());
    QVERIFY(page.settingsModel()->setData(value_index(*page.settingsModel(), "model.n_head"), QStringLiteral("4")));
    QVERIFY(page.validationLabel()->isHidden());
}

// Every accepted edit that changed the project can be undone and redone; refused ones and
// those that change nothing leave no step, and another project starts afresh.
void TestProjectEditor::undoAndRedoWalkTheEdits()
{
    ProjectDocument doc;
    QVERIFY(!doc.canUndo() && !doc.undo());
    doc.setConfig(tiny_config(2));
    const ProjectConfig start = doc.config();
    QVERIFY(!doc.canUndo());
    QVERIFY(doc.setPreset(QString::fromStdString(start.precision.preset), nullptr)); // the same project
    QVERIFY(!doc.canUndo());
    QSignalSpy undoChanged(&doc, &ProjectDocument::undoChanged);
    QVERIFY(doc.setValue(QStringLiteral("training.steps"), QJsonValue(7), nullptr));
    QVERIFY(doc.setPreset(QStringLiteral("bf16"), nullptr));
    QVERIFY(
        doc.setLayerFormat(QStringLiteral("lm_head"), ProjectDocument::Gemm::Forward, NumberFormat::FP32, nullptr));
    QCOMPARE(undoChanged.count(), 3);
    QVERIFY(!doc.setValue(QStringLiteral("model.n_head"), QJsonValue(3), nullptr)); // refused
    QVERIFY(doc.setValue(QStringLiteral("training.steps"), QJsonValue(7), nullptr)); // what it has
    QCOMPARE(undoChanged.count(), 3);
    QVERIFY(doc.isDirty());

    QVERIFY(doc.undo());
    QCOMPARE(doc.config().precision.layers.size(), size_t(0));
    QCOMPARE(doc.config().precision.preset, std::string("bf16"));
    QVERIFY(doc.undo());
    QCOMPARE(doc.config().precision.preset, start.precision.preset);
    QCOMPARE(doc.config().training.steps, int64_t(7));
    QVERIFY(doc.undo());
    QCOMPARE(doc.config().training.steps, start.training.steps);
    QCOMPARE(json_of(doc), to_json_text(start));
    QVERIFY(!doc.isDirty()); // back to what it was: nothing to save
    QVERIFY(!doc.canUndo() && !doc.undo());
    QVERIFY(doc.canRedo());
    QVERIFY(doc.redo());
    QCOMPARE(doc.config().training.steps, int64_t(7));
    QVERIFY(doc.isDirty());
    // A new edit drops what was undone.
    QVERIFY(doc.setValue(QStringLiteral("training.batch_size"), QJsonValue(2), nullptr));
    QVERIFY(!doc.canRedo() && !doc.redo());
    QVERIFY(doc.undo());
    QCOMPARE(doc.config().training.batch_size, int64_t(4));
    QCOMPARE(doc.config().training.steps, int64_t(7));
    // Saved as into another folder: earlier states may spell relative paths from the old one.
    QTemporaryDir here, there;
    doc.setConfig(tiny_config(2), here.filePath(QStringLiteral("p.json")));
    QVERIFY(doc.setValue(QStringLiteral("training.seed"), QJsonValue(9), nullptr));
    QVERIFY(doc.saveAs(here.filePath(QStringLiteral("q.json")), nullptr)); // the same folder: kept
    QVERIFY(doc.canUndo());
    QVERIFY(doc.saveAs(there.filePath(QStringLiteral("q.json")), nullptr));
    QVERIFY(!doc.canUndo());
    // Another project starts with nothing to undo or redo.
    QVERIFY(doc.setValue(QStringLiteral("training.seed"), QJsonValue(10), nullptr));
    doc.setConfig(tiny_config(1));
    QVERIFY(!doc.canUndo() && !doc.canRedo());
}

void TestProjectEditor::fillByPattern_data()
{
    QTest::addColumn<QString>("pattern");
    QTest::addColumn<QString>("forward");
    QTest::addColumn<QString>("dgrad");
    QTest::addColumn<QString>("wgrad");
    QTest::addColumn<QString>("scaling");
    QTest::newRow("mlp forward only") << "blocks.*.mlp.*" << "e4m3" << "" << "" << "";
    QTest::newRow("everything hybrid") << "*" << "e4m3" << "e5m2" << "e5m2" << "current";
    QTest::newRow("lm_head bf16") << "lm_head" << "bf16" << "bf16" << "bf16" << "";
    QTest::newRow("one block's attention scaling") << "blocks.1.attn.*" << "" << "" << "" << "mxfp8";
    QTest::newRow("backward of the last block") << "blocks.2.*" << "" << "bf16" << "fp16" << "";
}

void TestProjectEditor::fillByPattern()
{
    QFETCH(QString, pattern);
    QFETCH(QString, forward);
    QFETCH(QString, dgrad);
    QFETCH(QString, wgrad);
    QFETCH(QString, scaling);
    ProjectDocument doc;
    doc.setConfig(tiny_config(3));
    ProjectPage page(&doc);
    const auto before = all_formats(doc.config());

    // Through the page's fill row, as a user does it.
    page.patternEdit()->setText(pattern);
    const QString picks[4] = {forward, dgrad, wgrad, scaling};
    for (int i = 0; i < 4; ++i) {
        const int at = picks[i].isEmpty() ? 0 : page.fillCombo(i)->findText(picks[i]);
        QVERIFY(at >= 0);
        page.fillCombo(i)->setCurrentIndex(at);
    }
    page.fillButton()->click();
    QVERIFY2(page.validationLabel()->isHidden(), qPrintable(page.validationLabel()->text()));

    const auto names = gemm_layer_names(3);
    const auto after = all_formats(doc.config());
    for (size_t i = 0; i < names.size(); ++i) {
        GemmFormats expected = before[i];
        const bool hit = glob_match(pattern.toStdString(), names[i]);
        if (hit) {
            expected.forward = format_or_keep(forward).value_or(expected.forward);
            expected.dgrad = format_or_keep(dgrad).value_or(expected.dgrad);
            expected.wgrad = format_or_keep(wgrad).value_or(expected.wgrad);
        }
        QVERIFY2(after[i] == expected, (names[i] + ": " + after[i].describe()).c_str());
        QVERIFY(page.precisionModel()->formatsAt(static_cast<int>(i)) == expected);
        const Fp8Scaling wantScaling = hit && !scaling.isEmpty() ? *parse_fp8_scaling(scaling.toStdString())
                                                                 : Fp8Scaling::Delayed;
        QCOMPARE(resolve_layer_recipe(doc.config().precision, names[i]).scaling, wantScaling);
    }
    QCOMPARE(doc.config().precision.layers.size(), size_t(1));
    QCOMPARE(doc.config().precision.layers[0].match, pattern.toStdString());
}

// During a run a fill with a scaling recipe reaches the trainer as one change per layer,
// formats and recipe together (a trainer switches both live); layers it leaves are not sent.
void TestProjectEditor::fillDuringARunSendsTheScaling()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectPage page(&doc);
    QSignalSpy edited(&page, &ProjectPage::layerFormatsEdited);
    page.patternEdit()->setText(QStringLiteral("blocks.1.mlp.*"));
    page.fillCombo(0)->setCurrentIndex(page.fillCombo(0)->findText(QStringLiteral("e4m3")));
    page.fillCombo(3)->setCurrentIndex(page.fillCombo(3)->findText(QStringLiteral("nvfp4")));
    page.setRunning(true);
    QVERIFY(page.fillCombo(3)->isEnabled());
    page.fillButton()->click();
    QVERIFY2(page.validationLabel()->isHidden(), qPrintable(page.validationLabel()->text()));
    QCOMPARE(resolve_layer_formats(doc.config().precision, "blocks.1.mlp.fc1", 2).forward, NumberFormat::E4M3);
    QCOMPARE(resolve_layer_recipe(doc.config().precision, "blocks.1.mlp.fc1").scaling, Fp8Scaling::NvFp4);
    QCOMPARE(resolve_layer_recipe(doc.config().precision, "blocks.0.mlp.fc1").scaling, Fp8Scaling::Delayed);
    QCOMPARE(edited.count(), 2);
    for (int i = 0; i < 2; ++i) {
        QCOMPARE(edited.at(i).at(0).toString(), QStringLiteral("blocks.1.mlp.fc%1").arg(i + 1));
        QVERIFY((edited.at(i).at(1).value<GemmFormats>() ==
                 GemmFormats{NumberFormat::E4M3, NumberFormat::FP32, NumberFormat::FP32}));
        QCOMPARE(edited.at(i).at(2).toString(), QStringLiteral("nvfp4"));
    }
    // The same fill again changes nothing, and sends nothing.
    page.fillButton()->click();
    QCOMPARE(edited.count(), 2);
    page.setRunning(false);
}

// With no project open there is nothing to edit: a fill (the row is there, enabled) or a cell
// edit is refused instead of making an unsaved project that cannot be saved.
void TestProjectEditor::noProjectNoLayerEdits()
{
    ProjectDocument doc;
    QVERIFY(!doc.hasProject());
    QString error;
    QVERIFY(!doc.fillByPattern("blocks.*", NumberFormat::BF16, std::nullopt, std::nullopt, std::nullopt, &error));
    QCOMPARE(error, QStringLiteral("no project is open"));
    QVERIFY(!doc.setLayerFormat(QStringLiteral("lm_head"), ProjectDocument::Gemm::Forward, NumberFormat::BF16, &error));
    QVERIFY(!doc.setLayerScaling(QStringLiteral("lm_head"), Fp8Scaling::Current, &error));
    QCOMPARE(error, QStringLiteral("no project is open"));
    QVERIFY(!doc.isDirty());
}

void TestProjectEditor::fillPatternMatchingNothingRefused()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectPage page(&doc);
    const std::string before = json_of(doc);
    QString error;
    QVERIFY(!doc.fillByPattern("blocks.9.*", NumberFormat::E4M3, std::nullopt, std::nullopt, std::nullopt, &error));
    QCOMPARE(error, QStringLiteral("precision.layers: pattern 'blocks.9.*' matches no layer (layers are named like "
                                   "blocks.0.attn.qkv, blocks.0.mlp.fc1, lm_head)"));
    QCOMPARE(json_of(doc), before);
    // Said by the table, under the Fill row, not under the Settings tree across the page.
    QCOMPARE(page.precisionValidationLabel()->text(), error);
    QVERIFY(!page.precisionValidationLabel()->isHidden());
    QVERIFY(page.validationLabel()->isHidden());

    QVERIFY(!doc.fillByPattern("*", std::nullopt, std::nullopt, std::nullopt, std::nullopt, &error));
    QCOMPARE(error, QStringLiteral("precision.layers: choose at least one format or a scaling to set"));
    page.patternEdit()->setText(QStringLiteral("mlp"));
    page.fillCombo(0)->setCurrentIndex(page.fillCombo(0)->findText(QStringLiteral("bf16")));
    page.fillButton()->click();
    QVERIFY(page.precisionValidationLabel()->text().startsWith(
        QStringLiteral("precision.layers: pattern 'mlp' matches no layer")));
    QCOMPARE(json_of(doc), before);
}

void TestProjectEditor::presetApply_data()
{
    QTest::addColumn<QString>("preset");
    QTest::addColumn<QString>("layer");
    QTest::addColumn<GemmFormats>("expected");
    QTest::newRow("fp32") << "fp32" << "blocks.1.mlp.fc1" << GemmFormats::all(NumberFormat::FP32);
    QTest::newRow("bf16") << "bf16" << "blocks.1.mlp.fc1" << GemmFormats::all(NumberFormat::BF16);
    QTest::newRow("fp16 lm_head") << "fp16" << "lm_head" << GemmFormats::all(NumberFormat::FP16);
    QTest::newRow("hybrid fc1") << "fp8-hybrid" << "blocks.1.mlp.fc1" << kHybrid;
    QTest::newRow("hybrid sdpa stays bf16")
        << "fp8-hybrid" << "blocks.1.attn.sdpa" << GemmFormats::all(NumberFormat::BF16);
    QTest::newRow("hybrid lm_head") << "fp8-hybrid" << "lm_head" << kHybrid;
    QTest::newRow("keep-ends first block") << "fp8-hybrid-keep-ends" << "blocks.0.attn.qkv"
                                           << GemmFormats::all(NumberFormat::BF16);
    QTest::newRow("keep-ends last block") << "fp8-hybrid-keep-ends" << "blocks.2.mlp.fc2"
                                          << GemmFormats::all(NumberFormat::BF16);
    QTest::newRow("keep-ends middle") << "fp8-hybrid-keep-ends" << "blocks.1.attn.proj" << kHybrid;
    QTest::newRow("keep-ends lm_head") << "fp8-hybrid-keep-ends" << "lm_head" << GemmFormats::all(NumberFormat::BF16);
}

void TestProjectEditor::presetApply()
{
    QFETCH(QString, preset);
    QFETCH(QString, layer);
    QFETCH(GemmFormats, expected);
    ProjectDocument doc;
    doc.setConfig(tiny_config(3));
    ProjectPage page(&doc);
    QVERIFY(doc.setLayerFormat(layer, Gemm::Wgrad, NumberFormat::E5M2, nullptr));
    QVERIFY(doc.setLayerScaling(layer, Fp8Scaling::Block32, nullptr));
    QCOMPARE(doc.config().precision.layers.size(), size_t(1));

    page.presetCombo()->setCurrentIndex(page.presetCombo()->findText(preset));
    page.applyPresetButton()->click();

    QCOMPARE(QString::fromStdString(doc.config().precision.preset), preset);
    QVERIFY(doc.config().precision.layers.empty()); // "apply preset" starts the recipe over
    const GemmFormats got = resolve_layer_formats(doc.config().precision, layer.toStdString(), 3);
    QVERIFY2(got == expected, got.describe().c_str());
    QVERIFY(page.precisionModel()->formatsAt(page.precisionModel()->rowForLayer(layer)) == expected);
    QCOMPARE(resolve_layer_recipe(doc.config().precision, layer.toStdString()).scaling, Fp8Scaling::Delayed);
    QCOMPARE(page.settingsModel()->valueForKey("precision.preset"), preset);
    // Nothing differs from the preset now, so nothing is bold.
    for (int row = 0; row < page.precisionModel()->rowCount(); ++row)
        for (int column = PrecisionTableModel::ForwardColumn; column <= PrecisionTableModel::ScalingColumn; ++column)
            QVERIFY(!page.precisionModel()->index(row, column).data(Qt::FontRole).value<QFont>().bold());
}

void TestProjectEditor::keepLastBlocksInBf16()
{
    ProjectDocument doc;
    auto config = tiny_config(3);
    config.precision.preset = "fp8-hybrid";
    doc.setConfig(config);
    ProjectPage page(&doc);
    QCOMPARE(page.keepLastBf16Spin()->maximum(), 3);
    QCOMPARE(page.keepLastBf16Spin()->value(), 0);
    page.keepLastBf16Spin()->setValue(2); // one control: the last two blocks go to BF16
    QCOMPARE(doc.config().precision.keep_last_bf16, int64_t(2));
    QCOMPARE(page.settingsModel()->valueForKey("precision.keep_last_bf16"), QStringLiteral("2"));
    const GemmFormats bf16{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16};
    const GemmFormats hybrid{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2};
    QVERIFY(page.precisionModel()->formatsAt(page.precisionModel()->rowForLayer("blocks.2.mlp.fc1")) == bf16);
    QVERIFY(page.precisionModel()->formatsAt(page.precisionModel()->rowForLayer("blocks.1.attn.qkv")) == bf16);
    QVERIFY(page.precisionModel()->formatsAt(page.precisionModel()->rowForLayer("blocks.0.attn.qkv")) == hybrid);
    // The kept rows differ from the preset, and say why (they read "bf16 (from the preset)").
    const QModelIndex kept = page.precisionModel()->index(page.precisionModel()->rowForLayer("blocks.2.mlp.fc1"),
                                                          PrecisionTableModel::ForwardColumn);
    QVERIFY(kept.data(Qt::FontRole).value<QFont>().bold());
    QCOMPARE(kept.data(Qt::ToolTipRole).toString(),
             QStringLiteral("bf16 (precision.keep_last_bf16 keeps this block in BF16; the preset says e4m3)"));
    QCOMPARE(page.keepLastBf16Spin()->text(), QStringLiteral("last 2 blocks in BF16"));
    // One block, edited or from the document: "block", not "last 1 blocks".
    page.keepLastBf16Spin()->setValue(1);
    QCOMPARE(page.keepLastBf16Spin()->text(), QStringLiteral("last 1 block in BF16"));
    config.precision.keep_last_bf16 = 1;
    doc.setConfig(config);
    QCOMPARE(page.keepLastBf16Spin()->text(), QStringLiteral("last 1 block in BF16"));
    doc.setConfig(tiny_config(3)); // another project: the control shows its value
    QCOMPARE(page.keepLastBf16Spin()->value(), 0);
    QCOMPARE(page.keepLastBf16Spin()->text(), QStringLiteral("last 0 blocks in BF16"));
}

// nvfp4's Hadamard transform takes the tokens 16 at a time: a micro-batch of another count
// trains without it, and the page says so beside the precision table until the count fits.
void TestProjectEditor::recipeNoteSaysWhatTheLayersCannotApply()
{
    ProjectDocument doc;
    auto config = tiny_config(1);
    config.precision.preset = "fp8-hybrid";
    config.precision.fp8.scaling = Fp8Scaling::NvFp4;
    config.model.context_length = 7;
    config.training.batch_size = 3;
    doc.setConfig(config);
    ProjectPage page(&doc);
    QCOMPARE(page.recipeNoteLabel()->objectName(), QStringLiteral("recipeNote"));
    QVERIFY(!page.recipeNoteLabel()->isHidden());
    QCOMPARE(page.recipeNoteLabel()->text(),
             QStringLiteral("nvfp4's random Hadamard transform is not applied: a micro-batch of 21 tokens "
                            "(training.batch_size 3 x model.context_length 7) is no multiple of 16, the transform's "
                            "length"));
    QVERIFY(page.settingsModel()->setData(value_index(*page.settingsModel(), "training.batch_size"),
                                          QStringLiteral("16")));
    QVERIFY(page.recipeNoteLabel()->isHidden());
    QVERIFY(page.settingsModel()->setData(value_index(*page.settingsModel(), "training.batch_size"),
                                          QStringLiteral("5")));
    QVERIFY(page.recipeNoteLabel()->text().contains(QStringLiteral("a micro-batch of 35 tokens")));
    // Switched off, or under another recipe, there is nothing the layers leave out.
    QVERIFY(page.settingsModel()->setData(value_index(*page.settingsModel(), "precision.nvfp4.rht"),
                                          QStringLiteral("false")));
    QVERIFY(page.recipeNoteLabel()->isHidden());
    config.training.batch_size = 5;
    config.precision.fp8.scaling = Fp8Scaling::MxFp4;
    doc.setConfig(config);
    QVERIFY(page.recipeNoteLabel()->isHidden());
}

// The recipe settings that no layer reads are greyed, and their tooltip says why; an edit
// that makes a layer read one repaints it as read.
void TestProjectEditor::settingsNoLayerReadsAreGreyed()
{
    ProjectDocument doc;
    auto config = tiny_config(1);
    config.precision.preset = "fp8-hybrid";
    doc.setConfig(config);
    ProjectSettingsModel model(&doc);
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    const auto grey = [&](const QString& key) {
        const QModelIndex at = value_index(model, key);
        return at.data(Qt::ForegroundRole).value<QBrush>().color() == QPalette().color(QPalette::PlaceholderText) &&
               model.indexForKey(key).data(Qt::ForegroundRole).isValid();
    };
    QVERIFY(grey("precision.nvfp4.rht"));
    QVERIFY(!grey("precision.fp8.margin")); // delayed scaling reads it
    QCOMPARE(value_index(model, "precision.nvfp4.rht").data(Qt::ToolTipRole).toString(),
             QStringLiteral("precision.nvfp4.rht = true\nNo layer reads it: the FP8 layers scale with delayed, which "
                            "does not read precision.nvfp4.rht"));
    QCOMPARE(value_index(model, "precision.fp8.margin").data(Qt::ToolTipRole).toString(),
             QStringLiteral("precision.fp8.margin = 0"));
    QSignalSpy repainted(&model, &QAbstractItemModel::dataChanged);
    QVERIFY(model.setData(value_index(model, "precision.fp8.scaling"), QStringLiteral("nvfp4")));
    QVERIFY(!grey("precision.nvfp4.rht"));
    QVERIFY(grey("precision.fp8.margin"));
    const auto repaintedKey = [&](const QString& key) {
        for (const auto& args : repainted)
            if (model.keyForIndex(args.at(0).toModelIndex()) == key) return true;
        return false;
    };
    QVERIFY(repaintedKey(QStringLiteral("precision.nvfp4.rht")));
    QVERIFY(repaintedKey(QStringLiteral("precision.fp8.margin")));
}

void TestProjectEditor::memoryEstimateMatchesEngine_data()
{
    QTest::addColumn<QString>("preset");
    for (const auto& name : precision_preset_names()) QTest::newRow(name.c_str()) << QString::fromStdString(name);
}

void TestProjectEditor::memoryEstimateMatchesEngine()
{
    QFETCH(QString, preset);
    ProjectDocument doc;
    ProjectConfig config = tiny_config(3);
    config.model.dropout = 0.1;
    doc.setConfig(config);
    ProjectPage page(&doc);
    MemoryEstimateModel* model = page.memoryModel();
    QVERIFY(doc.setPreset(preset, nullptr));
    QVERIFY(vocab_settled(doc));

    const int64_t vocab = project_vocab_size(doc.config());
    QCOMPARE(doc.vocabSize(), vocab);
    QCOMPARE(model->vocabSize(), vocab);
    QVERIFY(model->vocabError().isEmpty());
    const MemoryBreakdown expected = estimate_memory(doc.config(), vocab);
    int64_t largest = 0;
    QString largestName;
    for (const auto& [name, bytes] : expected.activations_by_layer)
        if (name != "logits" && bytes > largest) {
            largest = bytes;
            largestName = QString::fromStdString(name);
        }
    const std::pair<int, int64_t> rows[] = {
        {MemoryEstimateModel::MasterWeightsRow, expected.master_weights_bytes},
        {MemoryEstimateModel::LowPrecisionWeightsRow, expected.low_precision_weights_bytes},
        {MemoryEstimateModel::GradientsRow, expected.gradients_bytes},
        {MemoryEstimateModel::OptimizerStateRow, expected.optimizer_state_bytes},
        {MemoryEstimateModel::ActivationsRow, expected.activations_bytes},
        {MemoryEstimateModel::LargestBlockRow, largest},
        {MemoryEstimateModel::LogitsRow, expected.activations_by_layer.back().second},
        {MemoryEstimateModel::TotalRow, expected.total_bytes()},
    };
    for (const auto& [row, bytes] : rows) {
        QCOMPARE(model->index(row, MemoryEstimateModel::SizeColumn).data(Qt::UserRole).toLongLong(), bytes);
        QCOMPARE(model->index(row, MemoryEstimateModel::SizeColumn).data().toString(),
                 MemoryEstimateModel::formatBytes(bytes));
    }
    QCOMPARE(model->index(MemoryEstimateModel::LargestBlockRow, 0).data().toString().trimmed(),
             QStringLiteral("largest block (%1)").arg(largestName));
    QCOMPARE(model->index(MemoryEstimateModel::TotalRow, MemoryEstimateModel::ShareColumn).data().toString(),
             QStringLiteral("100.0 %"));
    QVERIFY(page.totalLabel()->text().contains(MemoryEstimateModel::formatBytes(expected.total_bytes())));
    QVERIFY(page.dataMessageLabel()->isHidden());
}

void TestProjectEditor::memoryEstimateFollowsPreset()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    MemoryEstimateModel model(&doc);
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QVERIFY(vocab_settled(doc));
    QCOMPARE(doc.vocabSize(), qint64(13)); // 0-9 + = and newline
    const auto bytes = [&](int row) {
        return qint64(model.index(row, MemoryEstimateModel::SizeColumn).data(Qt::UserRole).toLongLong());
    };
    QCOMPARE(bytes(MemoryEstimateModel::LowPrecisionWeightsRow), qint64(0)); // fp32 GEMMs read the master weights
    const qint64 fp32Activations = bytes(MemoryEstimateModel::ActivationsRow);
    const qint64 master = bytes(MemoryEstimateModel::MasterWeightsRow);

    QVERIFY(doc.setPreset("bf16", nullptr));
    QVERIFY(bytes(MemoryEstimateModel::ActivationsRow) < fp32Activations);
    const qint64 bf16Copies = bytes(MemoryEstimateModel::LowPrecisionWeightsRow);
    // 2 bytes for each GEMM weight element: lm_head (V x C) and, per block, qkv + proj + fc1 + fc2 = 12 C^2.
    QCOMPARE(bf16Copies, 2 * (doc.vocabSize() * 16 + 2 * 12 * 16 * 16));
    QCOMPARE(bytes(MemoryEstimateModel::MasterWeightsRow), master);

    QVERIFY(doc.setPreset("fp8-hybrid", nullptr));
    const qint64 fp8Copies = bytes(MemoryEstimateModel::LowPrecisionWeightsRow);
    QVERIFY(fp8Copies > 0);
    // 1 byte and a 4-byte scale for each of the 9 GEMM weights, twice (the dgrad GEMM's copy is
    // laid out transposed): as many bytes as BF16's one copy, plus the scales.
    QCOMPARE(fp8Copies, bf16Copies + 9 * 2 * 4);
    QCOMPARE(fp8Copies, estimate_memory(doc.config(), doc.vocabSize()).low_precision_weights_bytes);
}

void TestProjectEditor::memoryEstimateShowsDataError()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    ProjectDocument doc;
    doc.setConfig(tiny_config(2), dir.filePath("project.json"));
    ProjectPage page(&doc);
    QVERIFY(doc.setValue("data.path", QStringLiteral("missing.txt"), nullptr));
    QVERIFY(doc.setValue("data.kind", QStringLiteral("text"), nullptr)); // valid project, data not there
    QVERIFY(vocab_settled(doc));

    const QString expected = QStringLiteral("data.path: file '%1' does not exist").arg(dir.filePath("missing.txt"));
    QCOMPARE(doc.vocabError(), expected);
    QCOMPARE(doc.vocabSize(), qint64(0));
    QCOMPARE(page.memoryModel()->vocabError(), expected);
    QCOMPARE(page.memoryModel()->rowCount(), int(MemoryEstimateModel::RowCount));
    QCOMPARE(page.memoryModel()->bytesAt(MemoryEstimateModel::TotalRow),
             estimate_memory(doc.config(), 0).total_bytes());
    QVERIFY(!page.dataMessageLabel()->isHidden());
    QVERIFY(page.dataMessageLabel()->text().contains(expected));
    QCOMPARE(page.precisionModel()->rowCount(), 11);

    // Putting the file there and touching the data section recomputes the vocabulary.
    write_file(dir.filePath("data.txt"), QByteArray("abcabcabcabd\n").repeated(40));
    QVERIFY(doc.setValue("data.path", QStringLiteral("data.txt"), nullptr));
    QVERIFY(vocab_settled(doc));
    QVERIFY(doc.vocabError().isEmpty());
    QCOMPARE(doc.vocabSize(), qint64(5)); // a, b, c, d, newline
    QVERIFY(page.dataMessageLabel()->isHidden());
}

void TestProjectEditor::vocabCountedOffGuiThread()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    write_file(dir.filePath("big.txt"), generated_corpus(300, 1'000'000));
    ProjectDocument doc;
    doc.setConfig(tiny_config(2), dir.filePath("project.json"));
    ProjectPage page(&doc);
    QVERIFY(vocab_settled(doc));
    QCOMPARE(doc.vocabSize(), qint64(13)); // the synthetic addition data
    QSignalSpy arrived(&doc, &ProjectDocument::vocabChanged);

    QVERIFY(doc.setValue("data.path", QStringLiteral("big.txt"), nullptr));
    QVERIFY(doc.setValue("data.kind", QStringLiteral("text"), nullptr));
    // The edits returned without tokenising the corpus: nothing about it is known yet (no
    // event loop has run, so the worker cannot have reported), and the estimate says so.
    QVERIFY(doc.vocabCounting());
    QCOMPARE(doc.vocabSize(), qint64(13)); // the previous count until then
    QVERIFY(doc.vocabError().isEmpty());
    QCOMPARE(arrived.count(), 0);
    QVERIFY(page.memoryModel()->vocabCounting());
    QVERIFY2(page.totalLabel()->text().contains(QStringLiteral("vocabulary being counted (13 until then)")),
             qPrintable(page.totalLabel()->text()));

    QVERIFY(vocab_settled(doc));
    QCOMPARE(doc.vocabSize(), qint64(301)); // 300 characters and the newline
    QVERIFY(doc.vocabError().isEmpty());
    QCOMPARE(arrived.count(), 1);
    QCOMPARE(doc.vocabSize(), qint64(project_vocab_size(doc.config())));
    // The models took the count when it arrived.
    QVERIFY(!page.memoryModel()->vocabCounting());
    QCOMPARE(page.memoryModel()->vocabSize(), qint64(301));
    QCOMPARE(page.memoryModel()->bytesAt(MemoryEstimateModel::TotalRow),
             estimate_memory(doc.config(), 301).total_bytes());
    QVERIFY(page.totalLabel()->text().contains(QStringLiteral("vocabulary %1,").arg(QLocale().toString(301))));
    const QModelIndex head =
        page.precisionModel()->index(page.precisionModel()->rowForLayer("lm_head"), PrecisionTableModel::ParametersColumn);
    QCOMPARE(head.data(Qt::UserRole).toLongLong(), qint64(301 * 16));
}

void TestProjectEditor::staleVocabCountDropped()
{
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    write_file(dir.filePath("first.txt"), generated_corpus(300, 1'000'000));
    write_file(dir.filePath("second.txt"), generated_corpus(40, 20'000));
    ProjectConfig config = tiny_config(2);
    config.data.kind = DataKind::Text;
    config.data.path = "first.txt";
    ProjectDocument doc;
    std::vector<qint64> shown;
    connect(&doc, &ProjectDocument::vocabChanged, &doc, [&] { shown.push_back(doc.vocabSize()); });

    doc.setConfig(config, dir.filePath("project.json")); // starts counting first.txt
    QVERIFY(doc.vocabCounting());
    QVERIFY(doc.setValue("data.path", QStringLiteral("second.txt"), nullptr)); // before that count arrives
    QVERIFY(vocab_settled(doc));
    QCOMPARE(doc.vocabSize(), qint64(41));
    QCOMPARE(shown, std::vector<qint64>{41}); // first.txt's count was never shown

    // Both counts are cached per data section: going back needs no counting.
    QVERIFY(doc.setValue("data.path", QStringLiteral("first.txt"), nullptr));
    QVERIFY(!doc.vocabCounting());
    QCOMPARE(doc.vocabSize(), qint64(301));
    QVERIFY(doc.setValue("data.path", QStringLiteral("second.txt"), nullptr));
    QVERIFY(!doc.vocabCounting());
    QCOMPARE(doc.vocabSize(), qint64(41));
}

void TestProjectEditor::saveOpenRoundTrip()
{
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const QDir root(tmp.path());
    QVERIFY(root.mkpath("a/data"));
    QVERIFY(root.mkpath("b/nested"));
    const QString dataFile = root.filePath("a/data/input.txt");
    write_file(dataFile, QByteArray("the quick brown fox jumps over the lazy dog\n").repeated(30));

    ProjectConfig config = tiny_config(2);
    config.data.kind = DataKind::Text;
    config.data.path = "data/input.txt";
    config.training.checkpoint_dir = "ckpt";
    ProjectDocument doc;
    QSignalSpy dirty(&doc, &ProjectDocument::dirtyChanged);
    doc.setConfig(config, root.filePath("a/project.json"));
    QCOMPARE(QString::fromStdString(doc.config().base_dir), root.filePath("a"));
    QVERIFY(vocab_settled(doc));
    QVERIFY2(doc.vocabError().isEmpty(), qPrintable(doc.vocabError()));
    const qint64 vocab = doc.vocabSize();
    QCOMPARE(vocab, project_vocab_size(doc.config()));

    QString error;
    QVERIFY2(doc.save(&error), qPrintable(error)); // the path given to setConfig
    QVERIFY(QFile::exists(root.filePath("a/project.json")));
    QVERIFY(doc.setValue("training.steps", 77, &error));
    QVERIFY(doc.isDirty());
    QCOMPARE(dirty.count(), 1);

    const QString moved = root.filePath("b/nested/project.json");
    QVERIFY2(doc.saveAs(moved, &error), qPrintable(error));
    QVERIFY(!doc.isDirty());
    QCOMPARE(doc.path(), moved);
    QCOMPARE(QString::fromStdString(doc.config().data.path), QStringLiteral("../../a/data/input.txt"));
    QCOMPARE(QString::fromStdString(resolve_data_path(doc.config(), doc.config().data.path)), dataFile);
    // The checkpoints stay where the runs of the first file put them.
    QCOMPARE(QString::fromStdString(doc.config().training.checkpoint_dir), QStringLiteral("../../a/ckpt"));
    // Atomic write: the target and nothing else (no temporary file left behind).
    QCOMPARE(QDir(root.filePath("b/nested")).entryList(QDir::Files), QStringList{"project.json"});
    QFile written(moved);
    QVERIFY(written.open(QIODevice::ReadOnly));
    QCOMPARE(written.readAll(), QByteArray::fromStdString(to_json_text(doc.config())) + '\n');

    ProjectDocument reopened;
    QVERIFY2(reopened.open(moved, &error), qPrintable(error));
    QCOMPARE(to_json_text(reopened.config()), to_json_text(doc.config()));
    QCOMPARE(reopened.config().training.steps, int64_t(77));
    QCOMPARE(QString::fromStdString(reopened.config().base_dir), root.filePath("b/nested"));
    QVERIFY(vocab_settled(reopened));
    QVERIFY(reopened.vocabError().isEmpty());
    QCOMPARE(reopened.vocabSize(), vocab);
    QVERIFY(!reopened.isDirty());
    QCOMPARE(reopened.path(), moved);

    // The file changed on disk meanwhile (another editor, a git checkout): Save does not
    // replace it unasked (it did, without a word), and does when told to.
    QVERIFY(reopened.setValue("training.steps", 78, &error));
    write_file(moved, QByteArray(R"({"name": "edited-outside"})"));
    QVERIFY(!reopened.save(&error));
    QVERIFY(reopened.savedOverAChange());
    QVERIFY2(error.contains("changed on disk since it was opened or saved here"), qPrintable(error));
    QCOMPARE(read_file(moved), QByteArray(R"({"name": "edited-outside"})"));
    QVERIFY2(reopened.save(&error, /*overwriteChangedFile=*/true), qPrintable(error));
    QVERIFY(!reopened.savedOverAChange());
    QVERIFY(reopened.setValue("training.steps", 77, &error));
    QVERIFY2(reopened.save(&error), qPrintable(error)); // its own last write: no change on disk

    // An absolute data path is left as it is.
    QVERIFY(reopened.setValue("data.path", dataFile, &error));
    QVERIFY(reopened.saveAs(root.filePath("b/other.json"), &error));
    QCOMPARE(QString::fromStdString(reopened.config().data.path), dataFile);

    ProjectDocument empty;
    QVERIFY(!empty.save(&error));
    QCOMPARE(error, QStringLiteral("The project has no file yet: use Save As."));
    QVERIFY(!empty.saveAs(root.filePath("c.json"), &error));
    QCOMPARE(error, QStringLiteral("There is no project to save."));
}

void TestProjectEditor::openFailureChangesNothing()
{
    QTemporaryDir tmp;
    ProjectDocument doc;
    doc.setConfig(tiny_config(2), tmp.filePath("good.json"));
    const std::string before = json_of(doc);
    const QString bad = tmp.filePath("bad.json");
    write_file(bad, R"({"model": {"n_layer": 0}})");
    QString error;
    QVERIFY(!doc.open(bad, &error));
    QCOMPARE(error, bad + QStringLiteral(": model.n_layer: must be at least 1"));
    QVERIFY(!doc.open(tmp.filePath("none.json"), &error));
    QCOMPARE(error, QStringLiteral("project file '%1' cannot be opened: No such file or directory")
                        .arg(tmp.filePath("none.json")));
    QCOMPARE(json_of(doc), before);
    QCOMPARE(doc.path(), tmp.filePath("good.json"));
}

void TestProjectEditor::recentProjectsOrder()
{
    QTemporaryDir tmp;
    ProjectDocument doc;
    doc.clearRecentProjects();
    QVERIFY(doc.recentProjects().isEmpty());
    doc.setConfig(tiny_config(1));
    QString error;
    QStringList paths;
    for (int i = 1; i <= 3; ++i) {
        paths << tmp.filePath(QStringLiteral("p%1.json").arg(i));
        QVERIFY2(doc.saveAs(paths.last(), &error), qPrintable(error));
    }
    QCOMPARE(doc.recentProjects(), QStringList({paths[2], paths[1], paths[0]}));
    QVERIFY(doc.open(paths[0], &error));
    QCOMPARE(doc.recentProjects(), QStringList({paths[0], paths[2], paths[1]}));
    QVERIFY(QFile::remove(paths[2]));
    QCOMPARE(doc.recentProjects(), QStringList({paths[0], paths[1]}));

    // Another document (the next session) sees the same list.
    ProjectDocument other;
    QCOMPARE(other.recentProjects(), QStringList({paths[0], paths[1]}));
    // A project that is away (a drive not mounted) is hidden, not forgotten: the list changes
    // meanwhile, and it is back when its file is.
    QVERIFY(doc.open(paths[1], &error));
    QVERIFY(QFile::copy(paths[0], paths[2]));
    QCOMPARE(doc.recentProjects(), QStringList({paths[1], paths[0], paths[2]}));

    for (int i = 4; i <= 13; ++i) {
        paths << tmp.filePath(QStringLiteral("p%1.json").arg(i));
        QVERIFY(doc.saveAs(paths.last(), &error));
    }
    const QStringList recent = doc.recentProjects();
    QCOMPARE(recent.size(), ProjectDocument::kMaxRecentProjects);
    QCOMPARE(recent.first(), paths.last());
    QCOMPARE(recent.last(), tmp.filePath("p6.json"));
    doc.clearRecentProjects();
    QVERIFY(doc.recentProjects().isEmpty());
}

void TestProjectEditor::layerFormatsEditedSignal()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectPage page(&doc);
    PrecisionTableModel* table = page.precisionModel();
    QSignalSpy fromModel(table, &PrecisionTableModel::layerFormatsEdited);
    QSignalSpy fromPage(&page, &ProjectPage::layerFormatsEdited);
    const int row = table->rowForLayer("blocks.1.mlp.fc1");

    QVERIFY(table->setData(table->index(row, PrecisionTableModel::ForwardColumn), QStringLiteral("e4m3")));
    QCOMPARE(fromModel.count(), 1);
    QCOMPARE(fromPage.count(), 1);
    QCOMPARE(fromPage.at(0).at(0).toString(), QStringLiteral("blocks.1.mlp.fc1"));
    const GemmFormats sent = fromPage.at(0).at(1).value<GemmFormats>();
    QVERIFY2((sent == GemmFormats{NumberFormat::E4M3, NumberFormat::FP32, NumberFormat::FP32}),
             sent.describe().c_str());

    QCOMPARE(fromPage.at(0).at(2).toString(), QString()); // the recipe as it was

    // The same value again and a settings edit are no edits of the layer.
    QVERIFY(table->setData(table->index(row, PrecisionTableModel::ForwardColumn), QStringLiteral("e4m3")));
    QVERIFY(doc.setValue("training.steps", 10, nullptr));
    QCOMPARE(fromPage.count(), 1);
    // A recipe edit is, with the formats as they are.
    QVERIFY(table->setData(table->index(row, PrecisionTableModel::ScalingColumn), QStringLiteral("current")));
    QCOMPARE(fromPage.count(), 2);
    QVERIFY(fromPage.at(1).at(1).value<GemmFormats>() == sent);
    QCOMPARE(fromPage.at(1).at(2).toString(), QStringLiteral("current"));
    QVERIFY(table->setData(table->index(row, PrecisionTableModel::ScalingColumn), QStringLiteral("current")));
    QCOMPARE(fromPage.count(), 2);

    // A preset reaches every layer whose formats it changes: all 11 here.
    page.presetCombo()->setCurrentIndex(page.presetCombo()->findText(QStringLiteral("bf16")));
    page.applyPresetButton()->click();
    QCOMPARE(fromPage.count(), 13);
    QCOMPARE(fromPage.last().at(0).toString(), QStringLiteral("lm_head"));
    QVERIFY(fromPage.last().at(1).value<GemmFormats>() == GemmFormats::all(NumberFormat::BF16));
}

// During a run a cell edit reaches the engine as the engine's formats with that one GEMM set:
// a watcher's switch of another GEMM of the layer stays, and picking the project's format
// again takes the watcher's switch back. The backend is "pending" from a switch to the next
// layer_backends event, never the old formats' backend.
void TestProjectEditor::aRunningEditKeepsTheWatchersOtherSwitches()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    PrecisionTableModel table(&doc);
    QAbstractItemModelTester tester(&table, QAbstractItemModelTester::FailureReportingMode::QtTest);
    const std::string layer = "blocks.1.mlp.fc1";
    const int row = table.rowForLayer(QString::fromStdString(layer));
    QVERIFY(row >= 0);
    QVERIFY(table.formatsAt(row) == GemmFormats::all(NumberFormat::FP32));

    LiveLayers live;
    live.reset(LiveLayers::from_project(doc.config()));
    RunEvent backends;
    backends.step = 1;
    backends.kind = EventKind::LayerBackends;
    backends.layer_states = LiveLayers::from_project(doc.config());
    for (auto& s : backends.layer_states) s.backend = "fp32";
    QVERIFY(live.apply(backends));
    table.setLiveLayers(&live);
    table.setRunning(true);
    const QModelIndex running = table.index(row, PrecisionTableModel::RunningColumn);
    QCOMPARE(running.data().toString(), QStringLiteral("fp32"));

    RunEvent change;
    change.step = 7;
    change.kind = EventKind::PrecisionChanged;
    change.layers = {layer};
    change.cause = ChangeCause::Watcher;
    change.watcher = "nonfinite";
    change.old_formats = GemmFormats::all(NumberFormat::FP32);
    change.new_formats = GemmFormats{NumberFormat::FP32, NumberFormat::FP32, NumberFormat::BF16};
    QVERIFY(live.apply(change));
    table.liveLayersChanged();
    QCOMPARE(running.data().toString(), QStringLiteral("pending \u00b7 step 7: watcher nonfinite"));
    QCOMPARE(table.index(row, PrecisionTableModel::WgradColumn).data().toString(), QStringLiteral("bf16"));

    QSignalSpy edited(&table, &PrecisionTableModel::layerFormatsEdited);
    QVERIFY(table.setData(table.index(row, PrecisionTableModel::ForwardColumn), QStringLiteral("e4m3")));
    QCOMPARE(edited.count(), 1);
    GemmFormats sent = edited.at(0).at(1).value<GemmFormats>();
    QVERIFY2((sent == GemmFormats{NumberFormat::E4M3, NumberFormat::FP32, NumberFormat::BF16}), sent.describe().c_str());
    QVERIFY((table.formatsAt(row) == GemmFormats{NumberFormat::E4M3, NumberFormat::FP32, NumberFormat::FP32}));

    // The project already says FP32 for wgrad: the edit changes no setting but takes the switch
    // back. Picked through the cell's editor, as a user picks it: the combo opens on the
    // project's value, and picking that same value must still reach the model.
    {
        ChoiceDelegate delegate;
        QWidget parent;
        const QModelIndex wgrad = table.index(row, PrecisionTableModel::WgradColumn);
        std::unique_ptr<QWidget> editor(delegate.createEditor(&parent, {}, wgrad));
        auto* combo = qobject_cast<QComboBox*>(editor.get());
        QVERIFY(combo);
        delegate.setEditorData(combo, wgrad);
        QCOMPARE(combo->currentText(), QStringLiteral("fp32"));
        // Opened and left without a pick (focus moved elsewhere: the view saves the editor's
        // data even then): the watcher's switch stays.
        delegate.setModelData(combo, &table, wgrad);
        QCOMPARE(edited.count(), 1);
        emit combo->activated(combo->currentIndex()); // the user picks fp32
        delegate.setModelData(combo, &table, wgrad);
    }
    QCOMPARE(edited.count(), 2);
    sent = edited.at(1).at(1).value<GemmFormats>();
    // The forward edit is not reported yet: it is kept (the engine's report still says fp32).
    QVERIFY2((sent == GemmFormats{NumberFormat::E4M3, NumberFormat::FP32, NumberFormat::FP32}), sent.describe().c_str());

    // Once the engine runs what the cell says, the same pick again sends nothing.
    change.step = 8;
    change.cause = ChangeCause::User;
    change.watcher.clear();
    change.new_formats = GemmFormats{NumberFormat::E4M3, NumberFormat::FP32, NumberFormat::FP32};
    QVERIFY(live.apply(change));
    QVERIFY(table.setData(table.index(row, PrecisionTableModel::WgradColumn), QStringLiteral("fp32")));
    QCOMPARE(edited.count(), 2);

    // The next layer_backends event names the backend the new formats run on.
    backends.step = 9;
    for (auto& s : backends.layer_states)
        if (s.name == layer) {
            s.formats = *change.new_formats;
            s.backend = "emulated";
        }
    QVERIFY(live.apply(backends));
    table.liveLayersChanged();
    QCOMPARE(running.data().toString(), QStringLiteral("emulated \u00b7 step 8: you"));

    // Two edits before the engine reports the first: the second builds on the first, not on
    // the engine's last report (which would send the first GEMM's old format back).
    QVERIFY(table.setData(table.index(row, PrecisionTableModel::ForwardColumn), QStringLiteral("bf16")));
    QVERIFY(table.setData(table.index(row, PrecisionTableModel::DgradColumn), QStringLiteral("bf16")));
    QCOMPARE(edited.count(), 4);
    sent = edited.at(2).at(1).value<GemmFormats>();
    QVERIFY2((sent == GemmFormats{NumberFormat::BF16, NumberFormat::FP32, NumberFormat::FP32}), sent.describe().c_str());
    sent = edited.at(3).at(1).value<GemmFormats>();
    QVERIFY2((sent == GemmFormats{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::FP32}), sent.describe().c_str());
    // A watcher's switch reported before ours were applied: the report is the engine's state again.
    change.step = 10;
    change.cause = ChangeCause::Watcher;
    change.watcher = "nonfinite";
    change.new_formats = GemmFormats{NumberFormat::E4M3, NumberFormat::FP32, NumberFormat::BF16};
    QVERIFY(live.apply(change));
    QVERIFY(table.setData(table.index(row, PrecisionTableModel::ForwardColumn), QStringLiteral("fp16")));
    QCOMPARE(edited.count(), 5);
    sent = edited.at(4).at(1).value<GemmFormats>();
    QVERIFY2((sent == GemmFormats{NumberFormat::FP16, NumberFormat::FP32, NumberFormat::BF16}), sent.describe().c_str());
}

// The Scaling column shows the recipe the engine runs (known where a GEMM of the layer is
// FP8), marked as the run's where it differs from the project's; editing starts from the project's.
void TestProjectEditor::scalingShowsTheRunsRecipe()
{
    ProjectDocument doc;
    auto config = tiny_config(2);
    config.precision.preset = "fp8-hybrid";
    doc.setConfig(config);
    PrecisionTableModel table(&doc);
    QAbstractItemModelTester tester(&table, QAbstractItemModelTester::FailureReportingMode::QtTest);
    const std::string layer = "blocks.0.mlp.fc1";
    const QModelIndex scaling = table.index(table.rowForLayer(QString::fromStdString(layer)), PrecisionTableModel::ScalingColumn);
    LiveLayers live;
    live.reset(LiveLayers::from_project(doc.config()));
    table.setLiveLayers(&live);
    table.setRunning(true);
    QCOMPARE(scaling.data().toString(), QStringLiteral("delayed"));
    QVERIFY(!scaling.data(Qt::FontRole).value<QFont>().italic());

    RunEvent change;
    change.step = 4;
    change.kind = EventKind::PrecisionChanged;
    change.pattern = layer;
    change.layers = {layer};
    change.new_formats = resolve_layer_formats(doc.config().precision, layer, 2);
    change.new_scaling = Fp8Scaling::NvFp4;
    change.layer_states = {{layer, *change.new_formats, "nvfp4", ""}};
    QVERIFY(live.apply(change));
    table.liveLayersChanged();
    QCOMPARE(scaling.data().toString(), QStringLiteral("nvfp4"));
    QCOMPARE(scaling.data(Qt::EditRole).toString(), QStringLiteral("delayed"));
    QVERIFY(scaling.data(Qt::FontRole).value<QFont>().italic());
    QVERIFY2(scaling.data(Qt::ToolTipRole).toString().startsWith(
                 QStringLiteral("The run scales this layer with nvfp4 (step 4: you); the project says delayed")),
             qPrintable(scaling.data(Qt::ToolTipRole).toString()));
    // Picking the project's recipe, which the project already says, takes the run's switch
    // back (as picking a format cell's project value does), with the formats the engine runs.
    QSignalSpy edited(&table, &PrecisionTableModel::layerFormatsEdited);
    QVERIFY(table.setData(scaling, QStringLiteral("delayed")));
    QCOMPARE(edited.count(), 1);
    QCOMPARE(edited.at(0).at(2).toString(), QStringLiteral("delayed"));
    QVERIFY(edited.at(0).at(1).value<GemmFormats>() == *change.new_formats);
    // Set in the project too (as the table's own edit does): the same again, nothing marked.
    QVERIFY(table.setData(scaling, QStringLiteral("nvfp4")));
    QCOMPARE(edited.count(), 2);
    QCOMPARE(edited.at(1).at(2).toString(), QStringLiteral("nvfp4"));
    QCOMPARE(scaling.data().toString(), QStringLiteral("nvfp4"));
    QVERIFY(!scaling.data(Qt::FontRole).value<QFont>().italic());
    // Once project and engine agree, the same pick again sends nothing.
    QVERIFY(table.setData(scaling, QStringLiteral("nvfp4")));
    QCOMPARE(edited.count(), 2);
    // A switch sent from elsewhere (the Monitor's menu) and not yet reported: a format edit of
    // the layer builds on it, not on the engine's last report.
    const GemmFormats bf16 = GemmFormats::all(NumberFormat::BF16);
    table.noteSentToEngine(QString::fromStdString(layer), bf16);
    QVERIFY(table.setData(scaling.siblingAtColumn(PrecisionTableModel::DgradColumn), QStringLiteral("e4m3")));
    QCOMPARE(edited.count(), 3);
    const GemmFormats built = edited.at(2).at(1).value<GemmFormats>();
    const GemmFormats wanted{NumberFormat::BF16, NumberFormat::E4M3, NumberFormat::BF16};
    QVERIFY2(built == wanted, built.describe().c_str());
    // Its FP8 cells say what the FP4 recipe makes of them.
    const QModelIndex forward = scaling.siblingAtColumn(PrecisionTableModel::ForwardColumn);
    QCOMPARE(forward.data(Qt::ToolTipRole).toString(),
             QStringLiteral("e4m3 (from the preset); under nvfp4 the GEMM runs E2M1"));
    QCOMPARE(forward.data().toString(), QStringLiteral("e2m1"));
    QCOMPARE(forward.data(Qt::EditRole).toString(), QStringLiteral("e4m3")); // what the editor starts from
    // Back to delayed scaling in the engine: the cell reads the FP8 format again.
    change.step = 6;
    change.new_scaling = Fp8Scaling::Delayed;
    change.layer_states = {{layer, *change.new_formats, "delayed", ""}};
    QVERIFY(live.apply(change));
    table.liveLayersChanged();
    QCOMPARE(forward.data().toString(), QStringLiteral("e4m3"));

    // A switch the engine refused (the run finishing) is no base for the next edit: it was kept
    // as sent, and the next edit of the layer sent the refused forward format again.
    const auto refuse = connect(&table, &PrecisionTableModel::layerFormatsEdited, &table, [&] { table.refuseSent(); });
    QVERIFY(table.setData(forward, QStringLiteral("bf16")));
    disconnect(refuse);
    const int before = edited.count();
    QVERIFY(table.setData(scaling.siblingAtColumn(PrecisionTableModel::WgradColumn), QStringLiteral("e4m3")));
    QCOMPARE(edited.count(), before + 1);
    GemmFormats expected = *change.new_formats; // the engine's, with the edited GEMM
    expected.wgrad = NumberFormat::E4M3;
    const GemmFormats sentAfter = edited.last().at(1).value<GemmFormats>();
    QVERIFY2(sentAfter == expected, sentAfter.describe().c_str());
}

void TestProjectEditor::runningLocksSettingsOnly()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectPage page(&doc);
    ProjectSettingsModel* settings = page.settingsModel();
    const QModelIndex nLayer = value_index(*settings, "model.n_layer");
    const QModelIndex bias = value_index(*settings, "model.bias");

    page.setRunning(true);
    QVERIFY(page.isRunning());
    QVERIFY(!(settings->flags(nLayer) & Qt::ItemIsEditable));
    QVERIFY(!(settings->flags(bias) & Qt::ItemIsUserCheckable));
    QVERIFY(!settings->setData(nLayer, QStringLiteral("3")));
    QVERIFY(!settings->setData(bias, int(Qt::Unchecked), Qt::CheckStateRole));
    QCOMPARE(doc.config().model.n_layer, int64_t(2));
    QCOMPARE(doc.config().model.bias, true);
    QCOMPARE(page.settingsView()->editTriggers(), QAbstractItemView::NoEditTriggers);

    PrecisionTableModel* table = page.precisionModel();
    const QModelIndex cell = table->index(table->rowForLayer("blocks.0.mlp.fc2"), PrecisionTableModel::DgradColumn);
    QVERIFY(table->flags(cell) & Qt::ItemIsEditable);
    QVERIFY(table->setData(cell, QStringLiteral("bf16")));
    QCOMPARE(resolve_layer_formats(doc.config().precision, "blocks.0.mlp.fc2", 2).dgrad, NumberFormat::BF16);
    // The scaling recipe switches live too, here and by pattern.
    const QModelIndex scaling = table->index(table->rowForLayer("blocks.0.mlp.fc2"), PrecisionTableModel::ScalingColumn);
    QVERIFY(table->flags(scaling) & Qt::ItemIsEditable);
    QVERIFY(page.fillCombo(3)->isEnabled());
    // Keeping the last block in BF16 reaches the run as format switches, one per layer it moves.
    QSignalSpy edited(&page, &ProjectPage::layerFormatsEdited);
    page.keepLastBf16Spin()->setValue(1);
    QCOMPARE(doc.config().precision.keep_last_bf16, int64_t(1));
    QVERIFY(edited.count() > 0);
    for (const auto& args : edited) {
        QVERIFY2(args.at(0).toString().startsWith(QStringLiteral("blocks.1.")), qPrintable(args.at(0).toString()));
        QVERIFY(args.at(1).value<GemmFormats>() == GemmFormats::all(NumberFormat::BF16));
    }
    int lastBlockLayers = 0;
    for (int r = 0; r < table->rowCount(); ++r) lastBlockLayers += table->layerAt(r).startsWith(QStringLiteral("blocks.1.")) ? 1 : 0;
    QCOMPARE(edited.count(), lastBlockLayers);

    page.setRunning(false);
    QVERIFY(table->flags(scaling) & Qt::ItemIsEditable);
    QVERIFY(page.fillCombo(3)->isEnabled());
    QVERIFY(settings->flags(nLayer) & Qt::ItemIsEditable);
    QVERIFY(settings->setData(nLayer, QStringLiteral("3")));
    QCOMPARE(doc.config().model.n_layer, int64_t(3));
}

void TestProjectEditor::selectLayerScrollsToRow()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(12));
    ProjectPage page(&doc);
    page.resize(1400, 850);
    page.show();
    QVERIFY(QTest::qWaitForWindowExposed(&page));
    QTableView* view = page.precisionView();
    const QString layer = QStringLiteral("blocks.10.mlp.fc2");
    const int row = page.precisionModel()->rowForLayer(layer);
    QCOMPARE(row, 54);
    QVERIFY(view->visualRect(page.precisionModel()->index(row, 0)).bottom() < 0 ||
            !view->viewport()->rect().intersects(view->visualRect(page.precisionModel()->index(row, 0))));

    page.selectLayer(layer);
    QCOMPARE(view->currentIndex().row(), row);
    QVERIFY(view->selectionModel()->isRowSelected(row, {}));
    QVERIFY(view->viewport()->rect().intersects(view->visualRect(page.precisionModel()->index(row, 0))));

    page.selectLayer(QStringLiteral("blocks.99.mlp.fc2"));
    QCOMPARE(view->currentIndex().row(), row);
}

void TestProjectEditor::delegateEditors()
{
    ProjectDocument doc;
    doc.setConfig(tiny_config(2));
    ProjectPage page(&doc);
    ChoiceDelegate delegate;
    QWidget parent;
    ProjectSettingsModel* settings = page.settingsModel();

    const QModelIndex tokenizer = value_index(*settings, "data.tokenizer");
    std::unique_ptr<QWidget> editor(delegate.createEditor(&parent, {}, tokenizer));
    auto* combo = qobject_cast<QComboBox*>(editor.get());
    QVERIFY(combo);
    QCOMPARE(combo->count(), 2);
    delegate.setEditorData(combo, tokenizer);
    QCOMPARE(combo->currentText(), QStringLiteral("char"));
    combo->setCurrentIndex(combo->findText(QStringLiteral("byte")));
    delegate.setModelData(combo, settings, tokenizer);
    QCOMPARE(doc.config().data.tokenizer, std::string("byte"));

    const QModelIndex nLayer = value_index(*settings, "model.n_layer");
    editor.reset(delegate.createEditor(&parent, {}, nLayer));
    auto* edit = qobject_cast<QLineEdit*>(editor.get());
    QVERIFY(edit);
    delegate.setEditorData(edit, nLayer);
    QCOMPARE(edit->text(), QStringLiteral("2"));
    edit->setText(QStringLiteral("4"));
    delegate.setModelData(edit, settings, value_index(*settings, "model.n_layer"));
    QCOMPARE(doc.config().model.n_layer, int64_t(4));

    PrecisionTableModel* table = page.precisionModel();
    const QModelIndex cell = table->index(table->rowForLayer("lm_head"), PrecisionTableModel::ForwardColumn);
    editor.reset(delegate.createEditor(&parent, {}, cell));
    combo = qobject_cast<QComboBox*>(editor.get());
    QVERIFY(combo);
    QCOMPARE(combo->count(), 6);
    combo->setCurrentIndex(combo->findText(QStringLiteral("fp16")));
    delegate.setModelData(combo, table, cell);
    QCOMPARE(resolve_layer_formats(doc.config().precision, "lm_head", 4).forward, NumberFormat::FP16);
}

QTEST_MAIN(TestProjectEditor)
#include "test_project_editor.moc"
