// SPDX-License-Identifier: GPL-3.0-or-later
// The Runs and Compare pages and sweeps from the window: a store of crafted runs (known
// losses, speeds, memory, layer statistics) read back through the run list, its filter and
// sort, the page actions (rename, tag, delete, CSV), the comparison (curves, summary, config
// diff, divergence, layer heatmap, export) and a real 3-run sweep of a tiny project.
// Runs with QT_QPA_PLATFORM=offscreen.

#include <QAbstractItemModelTester>
#include <QAction>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QFont>
#include <QImage>
#include <QJsonValue>
#include <QLabel>
#include <QLineEdit>
#include <QMouseEvent>
#include <QSignalSpy>
#include <QStandardItemModel>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "models/precision_table_model.h"
#include "pages/compare_page.h"
#include "pages/project_page.h"
#include "plots/compare_plot.h"
#include "plots/layer_diff_plot.h"
#include "models/layer_diff.h"
#include "window/main_window.h"
#include "window/sweep_dialog.h"
#include "project_config.h"
#include "models/project_document.h"
#include "models/run_filter_proxy.h"
#include "common/run_format.h"
#include "models/run_list_model.h"
#include "run_store.h"
#include "pages/runs_page.h"
#include "controller/store_connection.h"
#include "controller/sweep_runner.h"
#include "common/table_export.h"
#include "controller/training_controller.h"
#include "tiny_project.h"
#include "private_mounts.h"

using namespace mantissa;

namespace {

constexpr int64_t kMiB = 1024 * 1024;

ProjectConfig config_named(const std::string& name, const std::string& preset)
{
    ProjectConfig c;
    c.name = name;
    c.precision.preset = preset;
    return c;
}

// Run 1 "alpha" fp32, run 2 "beta" bf16 (leaves run 1 at step 6), run 3 fp8-hybrid, stopped
// at step 4, with a name that needs CSV quoting.
void craft_store(const QString& path)
{
    RunStore store(path.toStdString());
    ProjectConfig c1 = config_named("alpha", "fp32");
    ProjectConfig c2 = config_named("beta", "bf16");
    c2.optimizer.learning_rate = 2e-3;
    ProjectConfig c3 = config_named("gamma", "fp8-hybrid");
    const int64_t r1 = store.create_run("alpha", "/p/alpha.json", to_json_text(c1));
    const int64_t r2 = store.create_run("beta", "/p/beta.json", to_json_text(c2));
    const int64_t r3 = store.create_run("gamma, \"quoted\"", "/p/gamma.json", to_json_text(c3));
    StoreSink s1(store, r1), s2(store, r2), s3(store, r3);
    for (int64_t step = 1; step <= 10; ++step) {
        StepMetrics m;
        m.step = step;
        m.train_loss = 3.0 - 0.125 * double(step);
        m.tokens_per_s = 1000.0;
        m.step_time_ms = 100.0;
        m.layer_grad_norms = {{"blocks.0.attn.qkv", 1.0}};
        s1.on_step(m);
        m.train_loss += step >= 6 ? 0.25 : 0.0;
        m.tokens_per_s = 2000.0;
        m.step_time_ms = 50.0;
        m.skipped = step == 3;
        m.layer_grad_norms = {{"blocks.0.attn.qkv", 0.5}};
        s2.on_step(m);
        if (step <= 4) {
            m.skipped = false;
            m.train_loss = 4.0;
            s3.on_step(m);
        }
    }
    s1.on_eval({5, 2.5, 2.4});
    s1.on_eval({10, 2.0, 1.9});
    s2.on_eval({5, 2.5, 2.4});
    s2.on_eval({10, 2.25, 2.1});
    const auto frame = [](int64_t step, double underflow, int64_t resident) {
        LayerStatsFrame f;
        f.step = step;
        TensorStats t;
        t.layer = "blocks.0.attn.qkv";
        t.role = "grad_output";
        t.format = "fp32";
        t.count = 100;
        t.underflow = underflow;
        t.amax = 8.0;
        f.tensors.push_back(t);
        f.memory.resident_bytes = resident;
        return f;
    };
    s1.on_layer_stats(frame(5, 0.5, 80 * kMiB));
    s1.on_layer_stats(frame(10, 0.75, 100 * kMiB));
    s2.on_layer_stats(frame(5, 0.75, 40 * kMiB));
    s2.on_layer_stats(frame(10, 0.25, 50 * kMiB));
    store.add_tags(r1, {"baseline"});
    store.finish_run(r1, RunStatus::Finished);
    store.finish_run(r2, RunStatus::Finished);
    store.finish_run(r3, RunStatus::Stopped);
}

QVector<double> keys_of(const QCPGraph* g)
{
    QVector<double> out;
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) out << it->key;
    return out;
}

QVector<double> values_of(const QCPGraph* g)
{
    QVector<double> out;
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it) out << it->value;
    return out;
}

QStringList column_of(const QAbstractItemModel& m, int column, int role = Qt::DisplayRole)
{
    QStringList out;
    for (int r = 0; r < m.rowCount(); ++r) out << m.index(r, column).data(role).toString();
    return out;
}

ProjectConfig tiny_config(int64_t steps) { return tiny_run_config("sweep-test", steps, 5); }

} // namespace

class TestRunsCompare : public QObject {
    Q_OBJECT

private slots:
    void init()
    {
        dir_ = std::make_unique<QTemporaryDir>();
        QVERIFY(dir_->isValid());
        path_ = dir_->filePath(QStringLiteral("runs.sqlite"));
        craft_store(path_);
        connection_ = std::make_unique<StoreConnection>(path_);
    }
    void cleanup()
    {
        connection_.reset();
        dir_.reset();
    }

    void runListShowsTheCraftedRuns()
    {
        RunsPage page(connection_.get());
        QVERIFY(page.refresh());
        RunListModel* m = page.model();
        QAbstractItemModelTester tester(m, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(m->rowCount(), 3);
        // The columns fit their text in the desktop's font, whatever its size (a larger one cut
        // the creation time and the "Peak memory" header).
        {
            const QFont normal = QApplication::font();
            QFont large = normal;
            large.setPointSizeF(normal.pointSizeF() * 1.6);
            QApplication::setFont(large);
            RunsPage sized(connection_.get());
            QApplication::setFont(normal);
            const QTableView* view = sized.view();
            QVERIFY(view->columnWidth(RunListModel::Created) >
                    view->fontMetrics().horizontalAdvance(QStringLiteral("2026-12-06 19:34:05")));
            QVERIFY(view->columnWidth(RunListModel::PeakMemory) >
                    QFontMetrics(view->horizontalHeader()->font()).horizontalAdvance(QStringLiteral("Peak memory")));
        }
        QCOMPARE(column_of(*m, RunListModel::Id), (QStringList{"1", "2", "3"}));
        QCOMPARE(column_of(*m, RunListModel::Name), (QStringList{"alpha", "beta", "gamma, \"quoted\""}));
        QCOMPARE(column_of(*m, RunListModel::Status), (QStringList{"finished", "finished", "stopped"}));
        QCOMPARE(column_of(*m, RunListModel::Tags), (QStringList{"baseline", "", ""}));
        QCOMPARE(column_of(*m, RunListModel::Recipe),
                 (QStringList{"fp32", "bf16", QString::fromStdString(m->run(2).recipe)}));
        QVERIFY(m->run(2).recipe.rfind("fp8-hybrid (", 0) == 0);
        QCOMPARE(column_of(*m, RunListModel::Steps), (QStringList{"10", "10", "4"}));
        QCOMPARE(column_of(*m, RunListModel::FinalVal), (QStringList{"2.0000", "2.2500", "\u2013"}));
        QCOMPARE(column_of(*m, RunListModel::BestVal), (QStringList{"2.0000", "2.2500", "\u2013"}));
        QCOMPARE(column_of(*m, RunListModel::TokensPerS), (QStringList{"1000", "2000", "2000"}));
        QCOMPARE(column_of(*m, RunListModel::Skipped), (QStringList{"0", "1", "0"}));
        QCOMPARE(column_of(*m, RunListModel::PeakMemory), (QStringList{"100 MiB", "50 MiB", "\u2013"}));
        QCOMPARE(m->index(0, RunListModel::PeakMemory).data(RunListModel::SortRole).toLongLong(), 100 * kMiB);
        QCOMPARE(m->index(1, RunListModel::FinalVal).data(RunListModel::SortRole).toDouble(), 2.25);
        QCOMPARE(m->index(0, RunListModel::Created).data().toString(),
                 format_created(QString::fromStdString(m->run(0).created_at)));
        QCOMPARE(page.statusText(), QStringLiteral("3 runs"));
        // Read again with the same runs (every second while one trains): the cells change in
        // place, under the tester, and the current row stays.
        page.view()->setCurrentIndex(page.proxy()->mapFromSource(m->index(1, RunListModel::Name)));
        QSignalSpy resets(m, &QAbstractItemModel::modelReset);
        QVERIFY(page.refresh());
        QCOMPARE(resets.count(), 0);
        QCOMPARE(page.proxy()->mapToSource(page.view()->currentIndex()).row(), 1);
        QCOMPARE(column_of(*m, RunListModel::Steps), (QStringList{"10", "10", "4"}));
        m->setPausedRun(3); // stopped, not running: its status stays
        QCOMPARE(column_of(*m, RunListModel::Status), (QStringList{"finished", "finished", "stopped"}));
        // One run's row read again (the run a window trains, every second): the others stay.
        RunSummaryRow again = m->run(2);
        again.steps_done = 7;
        QVERIFY(m->updateRun(again));
        QCOMPARE(column_of(*m, RunListModel::Steps), (QStringList{"10", "10", "7"}));
        again.id = 99;
        QVERIFY(!m->updateRun(again)); // not listed
        QCOMPARE(resets.count(), 0);
    }

    // A run whose evaluation came out NaN diverged: it says so, where one never evaluated shows "–".
    void aDivergedRunShowsItsNaN()
    {
        addDivergedRun("fp16");
        RunsPage page(connection_.get());
        QVERIFY(page.refresh());
        RunListModel* m = page.model();
        QCOMPARE(m->rowCount(), 4);
        QCOMPARE(column_of(*m, RunListModel::FinalVal), (QStringList{"2.0000", "2.2500", "\u2013", "NaN"}));
        QCOMPARE(column_of(*m, RunListModel::BestVal), (QStringList{"2.0000", "2.2500", "\u2013", "\u2013"}));
        // Its CSV says NaN too: an empty cell read as "never evaluated", the third run's.
        QCOMPARE(column_of(*m, RunListModel::FinalVal, kCsvExportRole), (QStringList{"2", "2.25", "", "nan"}));
        QCOMPARE(exact_loss(-std::numeric_limits<double>::infinity(), true), QStringLiteral("-inf"));
        QCOMPARE(format_loss(std::numeric_limits<double>::infinity()), QStringLiteral("inf"));
        QCOMPARE(format_loss(2.0, false), QStringLiteral("\u2013"));
    }

    // A diverged FP32 run is no reference (every delta was NaN): the first run shown with a val
    // loss is, and the label says why it is neither the FP32 run nor the first.
    void aDivergedRunIsNoReference()
    {
        QCOMPARE(addDivergedRun("fp32"), int64_t(4));
        ComparePage page(connection_.get());
        QVERIFY(page.setRuns({4, 2}));
        QCOMPARE(page.summaryModel()->index(1, ComparePage::SumDiverges).data().toString(),
                 QStringLiteral("(reference)"));
        QCOMPARE(page.referenceText(),
                 QStringLiteral("Relative to run #2 (bold), the first shown with a val loss, train-loss divergence "
                                "too."));
        QCOMPARE(page.summaryModel()->index(1, ComparePage::SumDeltaVal).data().toString(), QStringLiteral("0"));
        QVERIFY(page.setRuns({2, 3}));
        QCOMPARE(page.referenceText(),
                 QStringLiteral("Relative to the first run #2 (bold; no FP32 run shown), train-loss divergence too."));
    }

    // Runs of one project share a name: the page names each with its recipe too, where the
    // legend read "#4 diverged", "#5 diverged" (read-only audit 'guiwalk'); a name of its own
    // stays as it is.
    void runsOfOneNameAreToldApartByRecipe()
    {
        QCOMPARE(addDivergedRun("fp16"), int64_t(4));
        QCOMPARE(addDivergedRun("bf16"), int64_t(5));
        ComparePage page(connection_.get());
        QVERIFY(page.setRuns({4, 5, 1}));
        QStandardItemModel* diff = page.configDiffModel();
        QCOMPARE(diff->headerData(1, Qt::Horizontal).toString(), QStringLiteral("#4 diverged \u00b7 fp16"));
        QCOMPARE(diff->headerData(2, Qt::Horizontal).toString(), QStringLiteral("#5 diverged \u00b7 bf16"));
        QCOMPARE(diff->headerData(3, Qt::Horizontal).toString(), QStringLiteral("#1 alpha"));
        QCOMPARE(page.curvePlot()->curve(0).label, QStringLiteral("#4 diverged \u00b7 fp16"));
    }

    // A run that trains while it is compared grows on the page: nothing else tells it (the
    // store's "changed" comes only from a remote mirror and the Runs page's edits).
    void aTrainingRunGrowsOnTheComparePage()
    {
        RunStore store(path_.toStdString());
        const int64_t id = store.create_run("live", "/p/l.json", to_json_text(config_named("live", "bf16")));
        StoreSink sink(store, id);
        const auto step = [&](int64_t n) {
            StepMetrics m;
            m.step = n;
            m.train_loss = 3.0 - 0.01 * double(n);
            sink.on_step(m);
            store.flush();
        };
        step(1);
        ComparePage page(connection_.get());
        page.show();
        QVERIFY(QTest::qWaitForWindowExposed(&page));
        QVERIFY(page.setRuns({1, id}));
        const auto steps = [&] { return page.summaryModel()->index(1, ComparePage::SumSteps).data().toString(); };
        QCOMPARE(steps(), QStringLiteral("1"));
        // The row the user selected stays selected as the table is rebuilt with the run's news.
        page.summaryView()->selectRow(1);
        step(2);
        step(3);
        QTRY_COMPARE_WITH_TIMEOUT(steps(), QStringLiteral("3"), 10000);
        const QModelIndexList selected = page.summaryView()->selectionModel()->selectedRows(ComparePage::SumRun);
        QCOMPARE(selected.size(), 1);
        QCOMPARE(selected.first().data().toString(), QString::number(id));
        // Hidden, it reads nothing; shown again, it reads what the run did meanwhile.
        page.hide();
        step(4);
        QTest::qWait(2500);
        QCOMPARE(steps(), QStringLiteral("3"));
        page.show();
        QCOMPARE(steps(), QStringLiteral("4"));
        store.finish_run(id, RunStatus::Finished);
        QTRY_COMPARE_WITH_TIMEOUT(page.summaryModel()->index(1, ComparePage::SumStatus).data().toString(),
                                  QStringLiteral("finished"), 10000);
    }

    void filterAndSort()
    {
        RunsPage page(connection_.get());
        QVERIFY(page.refresh());
        RunFilterProxyModel* p = page.proxy();
        QAbstractItemModelTester tester(p, QAbstractItemModelTester::FailureReportingMode::QtTest);
        page.setFilterText(QStringLiteral("bf16"));
        QCOMPARE(column_of(*p, RunListModel::Id), (QStringList{"2"}));
        page.setFilterText(QStringLiteral("BASELINE")); // a tag, any case
        QCOMPARE(column_of(*p, RunListModel::Id), (QStringList{"1"}));
        page.setFilterText(QStringLiteral("finished"));
        QCOMPARE(p->rowCount(), 2);
        page.setFilterText(QStringLiteral("finished beta")); // every word must match
        QCOMPARE(column_of(*p, RunListModel::Id), (QStringList{"2"}));
        QCOMPARE(page.statusText(), QStringLiteral("1 of 3 runs"));
        page.setFilterText({});
        QCOMPARE(p->rowCount(), 3);

        page.view()->sortByColumn(RunListModel::Id, Qt::DescendingOrder);
        QCOMPARE(column_of(*p, RunListModel::Id), (QStringList{"3", "2", "1"}));
        page.view()->sortByColumn(RunListModel::FinalVal, Qt::AscendingOrder); // no val loss sorts last
        QCOMPARE(column_of(*p, RunListModel::Id), (QStringList{"1", "2", "3"}));
        page.view()->sortByColumn(RunListModel::PeakMemory, Qt::AscendingOrder); // by bytes, not by text
        QCOMPARE(column_of(*p, RunListModel::Id), (QStringList{"3", "2", "1"}));
        page.view()->sortByColumn(RunListModel::TokensPerS, Qt::DescendingOrder); // 2000, 2000, 1000
        QCOMPARE(column_of(*p, RunListModel::Id).last(), QStringLiteral("1"));
    }

    void pageActionsChangeTheStore()
    {
        RunsPage page(connection_.get());
        QVERIFY(page.refresh());
        QVERIFY(page.renameRun(2, QStringLiteral("  beta renamed ")));
        RunStore* store = connection_->store();
        QCOMPARE(store->find_run("2")->name, std::string("beta renamed"));
        QCOMPARE(page.model()->run(1).name, std::string("beta renamed"));
        QVERIFY(!page.renameRun(2, QStringLiteral("  ")));
        QCOMPARE(page.lastError(), QStringLiteral("A run name cannot be empty."));
        // The CLI's rule: a name of digits reads as a run id, and a name is one line.
        QVERIFY(!page.renameRun(2, QStringLiteral("42")));
        QCOMPARE(page.lastError(), QStringLiteral("Run 2 cannot be named so: its name '42' reads as a run id: name the "
                                                  "run with a letter in it"));
        QVERIFY(!page.renameRun(2, QStringLiteral("a\tb")));
        QVERIFY(page.lastError().contains(QStringLiteral("has a control character")));

        // The inline edit of the name cell renames too.
        const QModelIndex nameCell = page.model()->index(0, RunListModel::Name);
        QVERIFY(page.model()->flags(nameCell) & Qt::ItemIsEditable);
        QVERIFY(page.model()->setData(nameCell, QStringLiteral("alpha2")));
        QCOMPARE(store->find_run("1")->name, std::string("alpha2"));

        QVERIFY(page.addTags({1, 2}, {QStringLiteral("fp8-study"), QStringLiteral(" keep ")}));
        QCOMPARE(store->tags(1), (std::vector<std::string>{"baseline", "fp8-study", "keep"}));
        QCOMPARE(store->tags(2), (std::vector<std::string>{"fp8-study", "keep"}));
        QCOMPARE(page.model()->index(1, RunListModel::Tags).data().toString(), QStringLiteral("fp8-study, keep"));
        QVERIFY(page.removeTags({1}, {QStringLiteral("keep")}));
        QCOMPARE(store->tags(1), (std::vector<std::string>{"baseline", "fp8-study"}));
        QVERIFY(!page.addTags({}, {QStringLiteral("x")}));

        page.selectRuns({3});
        QCOMPARE(page.selectedRunIds(), (std::vector<int64_t>{3}));
        QVERIFY(page.deleteRuns(page.selectedRunIds()));
        QCOMPARE(store->list_runs().size(), size_t(2));
        QCOMPARE(page.model()->rowCount(), 2);
        QVERIFY(!page.deleteRuns({}));

        // A running run is refused, and stays.
        const int64_t live = store->create_run("live", "", to_json_text(ProjectConfig{}));
        QVERIFY(page.refresh());
        QVERIFY(!page.deleteRuns({live}));
        QCOMPARE(page.lastError(), QStringLiteral("Run %1 is still running: stop it before deleting it.").arg(live));
        QVERIFY(store->find_run(std::to_string(live)).has_value());
    }

    void runsCsvIsExact()
    {
        RunsPage page(connection_.get());
        QVERIFY(page.refresh());
        page.view()->sortByColumn(RunListModel::Id, Qt::AscendingOrder);
        page.setFilterText(QStringLiteral("fp"));
        const QString csv = dir_->filePath(QStringLiteral("runs.csv"));
        QVERIFY(page.exportCsv(csv));
        QFile f(csv);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QString text = QString::fromUtf8(f.readAll());
        const RunListModel* m = page.model();
        const QString created1 = QString::fromStdString(m->run(0).created_at);
        const QString created3 = QString::fromStdString(m->run(2).created_at);
        const QString expected =
            QStringLiteral("Run,Status,Created,Name,Tags,Recipe,Steps,Final val,Best val,Tokens/s,Skipped,Peak memory\r\n") +
            QStringLiteral("1,finished,%1,alpha,baseline,fp32,10,2,2,1000,0,104857600\r\n").arg(created1) +
            QStringLiteral("3,stopped,%1,\"gamma, \"\"quoted\"\"\",,%2,4,,,2000,0,\r\n")
                .arg(created3, QString::fromStdString(m->run(2).recipe));
        QCOMPARE(text, expected);
        QCOMPARE(csv_field(QStringLiteral(" padded")), QStringLiteral("\" padded\""));
        QCOMPARE(csv_field(QStringLiteral("two\nlines")), QStringLiteral("\"two\nlines\""));
        QCOMPARE(csv_field(QStringLiteral("=HYPERLINK(\"x\")")), QStringLiteral("\"'=HYPERLINK(\"\"x\"\")\""));
        QCOMPARE(csv_field(QStringLiteral("@sum")), QStringLiteral("'@sum"));
        QCOMPARE(csv_field(QStringLiteral("+1+2")), QStringLiteral("'+1+2"));
        QCOMPARE(csv_field(QStringLiteral("-0.5")), QStringLiteral("-0.5"));
        QCOMPARE(csv_field(QStringLiteral("-inf")), QStringLiteral("-inf"));
        QVERIFY(!page.exportCsv(dir_->filePath(QStringLiteral("no/such/dir/runs.csv"))));
        QVERIFY(page.lastError().startsWith(QStringLiteral("Cannot write")));
        // The run store, picked in the save dialog (it offers every file), is refused and kept:
        // replaced by the table, every run was gone.
        QFile store(path_);
        QVERIFY(store.open(QIODevice::ReadOnly));
        const QByteArray before = store.readAll();
        store.close();
        QVERIFY(!page.exportCsv(path_));
        QCOMPARE(page.lastError(), QStringLiteral("'%1' is an SQLite database (a run store?): it was not replaced; "
                                                  "pick another file")
                                       .arg(path_));
        QVERIFY(store.open(QIODevice::ReadOnly));
        QCOMPARE(store.readAll(), before);
        // The files beside it, there or not: the next writer takes a CSV named -wal as the
        // store's, and `serve` reads its token from .token.
        for (const char* suffix : {"-wal", "-shm", "-journal", ".token"}) {
            const QString beside = path_ + QLatin1String(suffix);
            QVERIFY(!page.exportCsv(beside));
            QCOMPARE(page.lastError(), QStringLiteral("'%1' belongs to the run store '%2': it was not written; pick "
                                                      "another file")
                                           .arg(beside, path_));
        }
        QVERIFY(page.exportCsv(dir_->filePath(QStringLiteral("notes.token")))); // beside no store: a file like any
    }

    void selectingRunsFillsTheComparison()
    {
        ComparePage page(connection_.get());
        page.resize(1600, 1000);
        QVERIFY(page.setRuns({1, 2}));
        QCOMPARE(page.runIds(), (std::vector<int64_t>{1, 2}));
        QCOMPARE(page.metric(), QStringLiteral("train/loss"));
        QCOMPARE(page.metrics().mid(0, 2), (QStringList{"train/loss", "val/loss"}));
        QVERIFY(page.metrics().contains(QStringLiteral("grad_norm/blocks.0.attn.qkv")));

        ComparePlot* plot = page.curvePlot();
        QCOMPARE(plot->curveCount(), 2);
        QVector<double> steps, loss1, loss2;
        for (int s = 1; s <= 10; ++s) {
            steps << s;
            loss1 << 3.0 - 0.125 * s;
            loss2 << 3.0 - 0.125 * s + (s >= 6 ? 0.25 : 0.0);
        }
        QCOMPARE(keys_of(plot->rawGraph(0)), steps);
        QCOMPARE(values_of(plot->rawGraph(0)), loss1);
        QCOMPARE(values_of(plot->rawGraph(1)), loss2);
        QCOMPARE(plot->curve(0).label, QStringLiteral("#1 alpha"));
        QCOMPARE(plot->curve(1).color, QColor(255, 127, 14));
        QVERIFY(plot->smoothedGraph(0) != nullptr); // the default smoothing
        page.setSmoothing(0.0);
        QVERIFY(plot->smoothedGraph(0) == nullptr);
        QCOMPARE(values_of(plot->rawGraph(1)), loss2);
        // A loss scale is drawn as recorded, on a log axis (smoothed and linear, a halving was a
        // slow decay and every smaller scale sat on 0); the user's settings stay for the rest.
        page.setSmoothing(0.6);
        QVERIFY(page.metrics().contains(QStringLiteral("loss_scale")));
        QVERIFY(page.setMetric(QStringLiteral("loss_scale")));
        QCOMPARE(plot->smoothing(), 0.0);
        QVERIFY(plot->logScale());
        QCheckBox* logBox = nullptr; // greyed out while it would do nothing
        for (QCheckBox* box : page.findChildren<QCheckBox*>())
            if (box->text() == QStringLiteral("Log scale")) logBox = box;
        QVERIFY(logBox && !logBox->isEnabled());
        QVERIFY(page.setMetric(QStringLiteral("train/loss")));
        QCOMPARE(plot->smoothing(), 0.6);
        QVERIFY(!plot->logScale());
        QVERIFY(logBox->isEnabled());
        page.setSmoothing(0.0);

        // val/loss, by tokens: markers on the evaluation points.
        QVERIFY(page.setMetric(QStringLiteral("val/loss")));
        page.setXAxisMode(XAxisMode::Tokens);
        // The tokens each step recorded (1000 tokens/s x 100 ms = 100), not the config's batch:
        // a resume may have changed that.
        QVERIFY(tokens_per_step(to_json_text(config_named("alpha", "fp32"))) != 100.0);
        QCOMPARE(keys_of(plot->rawGraph(0)), (QVector<double>{500, 1000}));
        QCOMPARE(values_of(plot->rawGraph(0)), (QVector<double>{2.5, 2.0}));
        QCOMPARE(values_of(plot->rawGraph(1)), (QVector<double>{2.5, 2.25}));
        QCOMPARE(plot->rawGraph(0)->scatterStyle().shape(), QCPScatterStyle::ssCircle);
        // By training time: run 2's steps take 50 ms.
        page.setXAxisMode(XAxisMode::Seconds);
        const QVector<double> seconds = keys_of(plot->rawGraph(1)); // sums of 50 ms steps, not exact in binary
        QCOMPARE(seconds.size(), 2);
        QVERIFY(std::abs(seconds[0] - 0.25) < 1e-12 && std::abs(seconds[1] - 0.5) < 1e-12);
        QVERIFY(!page.setMetric(QStringLiteral("no/such")));

        // The summary, relative to the FP32 run.
        QStandardItemModel* sum = page.summaryModel();
        QAbstractItemModelTester tester(sum, QAbstractItemModelTester::FailureReportingMode::QtTest);
        QCOMPARE(sum->rowCount(), 2);
        QCOMPARE(page.referenceRow(), 0);
        QCOMPARE(column_of(*sum, ComparePage::SumRun), (QStringList{"1", "2"}));
        QCOMPARE(column_of(*sum, ComparePage::SumFinalVal), (QStringList{"2.0000", "2.2500"}));
        QCOMPARE(column_of(*sum, ComparePage::SumDeltaVal), (QStringList{"0", "+0.2500"}));
        QCOMPARE(column_of(*sum, ComparePage::SumTokensRatio), (QStringList{"1.00\u00d7", "2.00\u00d7"}));
        QCOMPARE(column_of(*sum, ComparePage::SumMemoryRatio), (QStringList{"1.00\u00d7", "0.50\u00d7"}));
        QCOMPARE(column_of(*sum, ComparePage::SumPeakMemory), (QStringList{"100 MiB", "50 MiB"}));
        QCOMPARE(column_of(*sum, ComparePage::SumSkipped), (QStringList{"0", "1"}));
        QCOMPARE(column_of(*sum, ComparePage::SumDeltaVal, kCsvExportRole), (QStringList{"0", "0.25"}));

        // The config diff: exactly the keys that differ, one column per run.
        QStandardItemModel* diff = page.configDiffModel();
        QCOMPARE(diff->columnCount(), 3);
        QCOMPARE(diff->headerData(1, Qt::Horizontal).toString(), QStringLiteral("#1 alpha"));
        QCOMPARE(column_of(*diff, 0), (QStringList{"name", "optimizer.learning_rate", "precision.preset"}));
        QCOMPARE(column_of(*diff, 1), (QStringList{"alpha", "0.001", "fp32"}));
        QCOMPARE(column_of(*diff, 2), (QStringList{"beta", "0.002", "bf16"}));

        // One run works too: its curve, a one-row summary, no diff.
        QVERIFY(page.setRuns({2}));
        QCOMPARE(page.curvePlot()->curveCount(), 1);
        QCOMPARE(sum->rowCount(), 1);
        QCOMPARE(diff->rowCount(), 0);
    }

    // A reload (the store said "changed", about once a second while a remote run trains)
    // reads the runs' summaries once, and rebuilds nothing when the compared runs are as they
    // were; a renamed run is read again.
    void aReloadWithNothingChangedRebuildsNothing()
    {
        ComparePage page(connection_.get());
        page.resize(1600, 1000);
        page.show();
        QVERIFY(QTest::qWaitForWindowExposed(&page));
        QVERIFY(page.setRuns({1, 2}));
        QSignalSpy inserted(page.summaryModel(), &QAbstractItemModel::rowsInserted);
        QVERIFY(page.reload());
        QCOMPARE(inserted.count(), 0);
        RunStore* store = connection_->store();
        const std::string name = store->find_run("1")->name;
        store->rename_run(1, "renamed for the reload");
        QVERIFY(page.reload());
        QCOMPARE(inserted.count(), 2);
        QCOMPARE(page.summaryModel()->index(0, ComparePage::SumName).data().toString(),
                 QStringLiteral("renamed for the reload"));
        store->rename_run(1, name);
    }

    // Runs that diverge at one step, on a short plot: their labels are stacked a label's height
    // apart (at a fixed 6% of the plot's height they were drawn over each other).
    void divergenceLabelsDoNotOverlap()
    {
        ComparePlot plot;
        QVERIFY(plot.plottingHints().testFlag(QCP::phFastPolylines)); // long runs' curves: as LossPlot's
        plot.resize(700, 200);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        plot.replot(QCustomPlot::rpImmediateRefresh); // lays the axis rect out
        ComparePlot::Curve c;
        c.label = QStringLiteral("#1");
        c.color = Qt::blue;
        c.xs = {0, 10, 20};
        c.ys = {2, 1.5, 1};
        plot.setCurves({c}, QStringLiteral("step"), QStringLiteral("train/loss"));
        plot.setMarkers({{10.0, Qt::red, QStringLiteral("#2 diverges @ 10")},
                         {10.0, Qt::green, QStringLiteral("#3 diverges @ 10")},
                         {10.0, Qt::magenta, QStringLiteral("#4 diverges @ 10")}});
        plot.rebuild(true);
        std::vector<double> tops;
        int height = 0;
        for (int i = 0; i < plot.itemCount(); ++i)
            if (auto* text = qobject_cast<QCPItemText*>(plot.item(i)); text && text->text().contains("diverges")) {
                tops.push_back(text->position->pixelPosition().y());
                height = QFontMetrics(text->font()).height();
            }
        QCOMPARE(tops.size(), size_t(3));
        std::sort(tops.begin(), tops.end());
        for (size_t i = 1; i < tops.size(); ++i)
            QVERIFY2(tops[i] - tops[i - 1] >= height, qPrintable(QString("%1 px apart, %2 px high")
                                                                  .arg(tops[i] - tops[i - 1])
                                                                  .arg(height)));
    }

    // A late divergence's label starts below the legend (top right), where it was drawn under
    // it; an early one's stays at the top.
    void aLateDivergenceLabelIsNotUnderTheLegend()
    {
        ComparePlot plot;
        plot.resize(700, 300);
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        plot.replot(QCustomPlot::rpImmediateRefresh);
        std::vector<ComparePlot::Curve> curves;
        for (int i = 0; i < 4; ++i) {
            ComparePlot::Curve c;
            c.label = QStringLiteral("#%1 addition-default \u00b7 fp8-hybrid").arg(i + 1);
            c.color = QColor::fromHsv(60 * i, 200, 200);
            c.xs = {0, 20, 40};
            c.ys = {2, 1.5 + 0.1 * i, 1};
            curves.push_back(c);
        }
        plot.setCurves(curves, QStringLiteral("step"), QStringLiteral("train/loss"));
        plot.setMarkers({{35.0, Qt::red, QStringLiteral("#4 diverges @ 35")},
                         {5.0, Qt::green, QStringLiteral("#3 diverges @ 5")}});
        plot.rebuild(true);
        plot.replot(QCustomPlot::rpImmediateRefresh);
        const QRect legendBox = plot.legend->outerRect();
        QVERIFY(legendBox.height() > 40);
        int checked = 0;
        for (int i = 0; i < plot.itemCount(); ++i) {
            auto* text = qobject_cast<QCPItemText*>(plot.item(i));
            if (!text || !text->text().contains("diverges")) continue;
            const double top = text->position->pixelPosition().y();
            if (text->text().contains("@ 35"))
                QVERIFY2(top >= legendBox.bottom(), qPrintable(QString("top %1, legend to %2").arg(top).arg(legendBox.bottom())));
            else
                QVERIFY2(top < legendBox.bottom(), qPrintable(QString::number(top)));
            ++checked;
        }
        QCOMPARE(checked, 2);
    }

    // A diverged run on the Compare plot spans the steps it ran, its finite points dots between
    // the gaps: the one finite point made an axis from 0 to 1 and an empty plot.
    void aDivergedRunSpansItsSteps()
    {
        ComparePlot plot;
        ComparePlot::Curve c;
        c.label = QStringLiteral("#1");
        c.color = Qt::blue;
        const double nan = std::nan("");
        c.xs = {1, 2, 3, 40};
        c.ys = {2.6, nan, nan, nan};
        plot.setCurves({c}, QStringLiteral("step"), QStringLiteral("train/loss"));
        plot.rebuild(true);
        QVERIFY(plot.xAxis->range().contains(40));
        QVERIFY(plot.yAxis->range().contains(2.6));
        QCOMPARE(plot.graph(0)->scatterStyle().shape(), QCPScatterStyle::ssDisc);
        c.ys = {nan, nan, nan, nan}; // nothing finite at all: still its steps
        plot.setCurves({c}, QStringLiteral("step"), QStringLiteral("train/loss"));
        plot.rebuild(true);
        QVERIFY(plot.xAxis->range().contains(40));
    }

    void divergenceIsFoundAndShown()
    {
        ComparePage page(connection_.get());
        QVERIFY(page.setRuns({1, 2}));
        page.setTolerance(0.1, false);
        QCOMPARE(page.divergenceStep(2), std::optional<int64_t>(6));
        QCOMPARE(page.summaryModel()->index(1, ComparePage::SumDiverges).data().toString(), QStringLiteral("6"));
        QCOMPARE(page.summaryModel()->index(0, ComparePage::SumDiverges).data().toString(),
                 QStringLiteral("(reference)"));
        QCOMPARE(page.curvePlot()->markerCount(), 1);
        QCOMPARE(page.curvePlot()->marker(0).x, 6.0);
        QCOMPARE(page.curvePlot()->marker(0).label, QStringLiteral("#2 diverges @ 6"));
        QVERIFY(page.setMetric(QStringLiteral("val/loss"))); // over another metric, it says whose
        QCOMPARE(page.curvePlot()->marker(0).label, QStringLiteral("#2 train loss diverges @ 6"));
        QVERIFY(page.setMetric(QStringLiteral("train/loss")));
        page.setXAxisMode(XAxisMode::Seconds); // the marker follows the x axis: 6 steps of 50 ms
        QVERIFY(std::abs(page.curvePlot()->marker(0).x - 0.3) < 1e-12);
        // The BF16 run first (the Runs page's newest-first order): still measured against the
        // FP32 run, the table's reference. The bold FP32 row read "diverges at 6".
        QVERIFY(page.setRuns({2, 1}));
        QCOMPARE(page.divergenceStep(2), std::optional<int64_t>(6));
        QCOMPARE(page.divergenceStep(1), std::nullopt);
        QCOMPARE(page.summaryModel()->index(0, ComparePage::SumRun).data().toString(), QStringLiteral("2"));
        QCOMPARE(page.summaryModel()->index(0, ComparePage::SumDiverges).data().toString(), QStringLiteral("6"));
        QCOMPARE(page.summaryModel()->index(1, ComparePage::SumDiverges).data().toString(),
                 QStringLiteral("(reference)"));
        // Its CSV too: the first row's step was written empty whenever the reference was another.
        QCOMPARE(page.summaryModel()->index(0, ComparePage::SumDiverges).data(kCsvExportRole).toString(),
                 QStringLiteral("6"));
        QCOMPARE(page.summaryModel()->index(1, ComparePage::SumDiverges).data(kCsvExportRole).toString(), QString());
        QCOMPARE(page.referenceText(),
                 QStringLiteral("Relative to the FP32 run #1 (bold), train-loss divergence too."));
        QCOMPARE(page.curvePlot()->markerCount(), 1);
        QCOMPARE(page.curvePlot()->marker(0).label, QStringLiteral("#2 diverges @ 6"));
        page.setXAxisMode(XAxisMode::Step);
        QVERIFY(page.setRuns({1, 2}));

        page.setTolerance(0.3, false); // 0.25 apart: within
        QCOMPARE(page.divergenceStep(2), std::nullopt);
        QCOMPARE(page.curvePlot()->markerCount(), 0);
        QCOMPARE(page.summaryModel()->index(1, ComparePage::SumDiverges).data().toString(),
                 QStringLiteral("within tolerance"));
        // Relative: 0.25 / 2.5 (step 6's larger loss) = 0.1 > 0.09.
        page.setTolerance(0.09, true);
        QCOMPARE(page.divergenceStep(2), std::optional<int64_t>(6));
        page.setTolerance(0.11, true); // step 8: 0.25 / 2.25 = 0.111
        QCOMPARE(page.divergenceStep(2), std::optional<int64_t>(8));
    }

    void layerHeatmapShowsTheDifference()
    {
        ComparePage page(connection_.get());
        QVERIFY(page.setRuns({1, 2}));
        QCOMPARE(page.layerDiffOther(), int64_t(2));
        page.updateLayerDiff();
        LayerDiffPlot* plot = page.layerDiffPlot();
        QCOMPARE(plot->rowCount(), 1);
        QCOMPARE(plot->grid().steps, (std::vector<int64_t>{5, 10}));
        QCOMPARE(plot->grid().at(5, "blocks.0.attn.qkv"), -25.0);
        QCOMPARE(plot->grid().at(10, "blocks.0.attn.qkv"), 50.0);
        QCOMPARE(plot->colorMap()->data()->cell(1, 0), 50.0);
        // One layer: a single row, which QCPColorMap draws zero cells high unless it is stored twice.
        const auto coloured_pixels = [plot] {
            plot->resize(600, 300);
            const QImage image = plot->toPixmap(600, 300).toImage();
            const QRect area = plot->axisRect()->rect(); // the map's rect, not the colour scale
            int n = 0;
            for (int y = area.top(); y <= area.bottom(); ++y)
                for (int x = area.left(); x <= area.right(); ++x)
                    if (image.pixelColor(x, y).hsvSaturation() > 80) ++n;
            return n;
        };
        QVERIFY2(coloured_pixels() > 1000, qPrintable(QString::number(coloured_pixels())));
        page.setLayerStat(LayerDiffStat::AmaxLog10Ratio);
        page.updateLayerDiff();
        QCOMPARE(plot->grid().at(10, "blocks.0.attn.qkv"), 0.0);
        page.setLayerStat(LayerDiffStat::GradNorm);
        page.updateLayerDiff();
        QCOMPARE(plot->columnCount(), 10);
        QCOMPARE(plot->grid().at(7, "blocks.0.attn.qkv"), 0.5);
        page.setLayerStat(LayerDiffStat::UnderflowPercent, QStringLiteral("weight")); // not recorded
        page.updateLayerDiff();
        QCOMPARE(plot->rowCount(), 0);
        // Said as it is, not as a telemetry.interval problem (read-only audit 'gui-deep').
        QVERIFY2(plot->emptyText().startsWith(QStringLiteral("Neither #1 (")) &&
                     plot->emptyText().endsWith(QStringLiteral(") recorded weight")),
                 qPrintable(plot->emptyText()));
        QVERIFY(!page.setLayerDiffOther(1));
        QVERIFY(!plot->saysIdentical());

        // Runs that do not differ at all: said in the plot, on a scale of ±1 (a blank field on a
        // ±1e-6 scale read as a broken plot).
        LayerDiffGrid same;
        same.layers = {"blocks.0.attn.qkv"};
        same.steps = {5, 10};
        same.values = {0.0, 0.0};
        LayerDiffPlot zero;
        zero.setGrid(same, QStringLiteral("underflow % points"));
        QVERIFY(zero.saysIdentical());
        QCOMPARE(zero.colorMap()->dataRange(), QCPRange(-1.0, 1.0));
    }

    // The amax heatmap is log10(amax A / amax B), A the selected run: A ten times B is +1 (a
    // decade above), not -1 (B over A) and not ln 10 = 2.3. An amax of 0 or inf has no ratio:
    // NaN (an empty cell), never an infinite colour.
    void amaxRatioIsLog10OfAOverB_data()
    {
        QTest::addColumn<double>("amaxA");
        QTest::addColumn<double>("amaxB");
        QTest::addColumn<double>("expected"); // NaN: no cell value
        const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
        QTest::newRow("80 over 8") << 80.0 << 8.0 << 1.0;
        QTest::newRow("8 over 80") << 8.0 << 80.0 << -1.0;
        QTest::newRow("B 0") << 80.0 << 0.0 << nan;
        QTest::newRow("A 0") << 0.0 << 8.0 << nan;
        QTest::newRow("B inf") << 80.0 << inf << nan;
    }
    void amaxRatioIsLog10OfAOverB()
    {
        QFETCH(double, amaxA);
        QFETCH(double, amaxB);
        QFETCH(double, expected);
        const auto rows = [](double amax) {
            TensorStats t;
            t.layer = "blocks.0.mlp.fc1";
            t.role = "input";
            t.amax = amax;
            return std::vector<std::pair<int64_t, TensorStats>>{{5, t}};
        };
        const LayerDiffGrid grid = layer_stat_difference(rows(amaxA), rows(amaxB), LayerDiffStat::AmaxLog10Ratio,
                                                         "input", {"blocks.0.mlp.fc1"});
        QCOMPARE(grid.steps, std::vector<int64_t>{5});
        const double v = grid.at(5, "blocks.0.mlp.fc1");
        if (std::isnan(expected)) QVERIFY2(std::isnan(v), qPrintable(QString::number(v)));
        else QVERIFY2(v == expected, qPrintable(QString::number(v, 'g', 17)));
    }

    // A long comparison is thinned to kMaxLayerDiffColumns evenly spaced steps that still span
    // both runs: the first and the last common step are always columns, so the heatmap neither
    // starts late nor stops short of where the runs end. Up to the limit, every step is kept.
    void layerDiffThinningKeepsFirstAndLastStep_data()
    {
        QTest::addColumn<int>("common");
        QTest::addColumn<int>("columns");
        QTest::newRow("2001 steps") << 2001 << int(kMaxLayerDiffColumns);
        QTest::newRow("1001 steps") << 1001 << int(kMaxLayerDiffColumns);
        QTest::newRow("1000 steps") << 1000 << 1000;
    }
    void layerDiffThinningKeepsFirstAndLastStep()
    {
        QFETCH(int, common);
        QFETCH(int, columns);
        std::vector<std::pair<int64_t, TensorStats>> a, b;
        for (int64_t step = 1; step <= common; ++step) {
            TensorStats t;
            t.layer = "blocks.0.attn.qkv";
            t.role = "grad_output";
            t.underflow = 0.5;
            a.emplace_back(step, t);
            t.underflow = 0.25;
            b.emplace_back(step, t);
        }
        const LayerDiffGrid grid =
            layer_stat_difference(a, b, LayerDiffStat::UnderflowPercent, "grad_output", {"blocks.0.attn.qkv"});
        QCOMPARE(grid.steps.size(), size_t(columns));
        QCOMPARE(grid.steps.front(), int64_t(1));
        QCOMPARE(grid.steps.back(), int64_t(common));
        const auto& steps = grid.steps; // strictly ascending: no step twice
        QVERIFY(std::adjacent_find(steps.begin(), steps.end(), std::greater_equal<int64_t>()) == steps.end());
        QCOMPARE(grid.values.size(), size_t(columns));
        QCOMPARE(grid.values.front(), 25.0);
        QCOMPARE(grid.values.back(), 25.0);
    }

    // A live run's new points must not throw away a range the user zoomed to.
    void comparePlotKeepsTheUsersRange()
    {
        ComparePlot plot;
        const auto curve = [](int64_t run, int points) {
            ComparePlot::Curve c;
            c.runId = run;
            c.label = QStringLiteral("run %1").arg(run);
            for (int i = 1; i <= points; ++i) {
                c.xs.push_back(i);
                c.ys.push_back(10.0 / i);
            }
            return c;
        };
        plot.setCurves({curve(1, 10)}, QStringLiteral("step"), QStringLiteral("train/loss"));
        plot.rebuild(true);
        QCOMPARE(plot.xAxis->range().upper, 10.0);
        emit plot.mouseWheel(nullptr); // the user zooms (QCustomPlot's range zoom moves the axes)
        plot.xAxis->setRange(2, 4);
        plot.setCurves({curve(1, 20)}, QStringLiteral("step"), QStringLiteral("train/loss")); // the run grew
        plot.rebuild(true);
        QCOMPARE(plot.xAxis->range(), QCPRange(2, 4));
        emit plot.mouseDoubleClick(nullptr); // fit again
        QCOMPARE(plot.xAxis->range().upper, 20.0);
        QMouseEvent click(QEvent::MouseButtonPress, QPointF(50, 50), QPointF(50, 50), Qt::LeftButton, Qt::LeftButton,
                          Qt::NoModifier);
        emit plot.mousePress(&click); // a click alone (a legend, a point) is no choice of range
        plot.setCurves({curve(1, 25)}, QStringLiteral("step"), QStringLiteral("train/loss"));
        plot.rebuild(true);
        QCOMPARE(plot.xAxis->range().upper, 25.0);
        QMouseEvent drag(QEvent::MouseMove, QPointF(60, 50), QPointF(60, 50), Qt::NoButton, Qt::LeftButton,
                         Qt::NoModifier);
        emit plot.mouseMove(&drag); // a drag
        plot.xAxis->setRange(5, 6);
        plot.rebuild(true); // the same curves again
        QCOMPARE(plot.xAxis->range(), QCPRange(5, 6));
        plot.setCurves({curve(1, 20), curve(2, 30)}, QStringLiteral("step"), QStringLiteral("train/loss"));
        plot.rebuild(true); // other runs: a range for them
        QCOMPARE(plot.xAxis->range().upper, 30.0);
    }

    void exportsWriteFiles()
    {
        ComparePage page(connection_.get());
        page.resize(1200, 800);
        QVERIFY(page.setRuns({1, 2}));
        const QString png = dir_->filePath(QStringLiteral("curves.png"));
        QVERIFY(page.exportCurves(png));
        const QImage image(png);
        QVERIFY(!image.isNull());
        QVERIFY(image.width() > 100 && image.height() > 100);
        QVERIFY(page.exportLayerDiff(dir_->filePath(QStringLiteral("heatmap.png"))));
        QVERIFY(!QImage(dir_->filePath(QStringLiteral("heatmap.png"))).isNull());
        const QString pdf = dir_->filePath(QStringLiteral("curves.pdf"));
        QVERIFY(page.exportCurves(pdf));
        QFile pdfFile(pdf);
        QVERIFY(pdfFile.open(QIODevice::ReadOnly));
        QVERIFY(pdfFile.read(5) == "%PDF-");
        QVERIFY(!page.exportCurves(dir_->filePath(QStringLiteral("curves.txt"))));
        QVERIFY(page.lastError().contains(QStringLiteral(".png or .pdf")));

        const QString csv = dir_->filePath(QStringLiteral("diff.csv"));
        QVERIFY(page.exportConfigDiffCsv(csv));
        QFile f(csv);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(QString::fromUtf8(f.readAll()),
                 QStringLiteral("Key,#1 alpha,#2 beta\r\nname,alpha,beta\r\noptimizer.learning_rate,0.001,0.002\r\n"
                                "precision.preset,fp32,bf16\r\n"));
        QVERIFY(page.exportSummaryCsv(dir_->filePath(QStringLiteral("summary.csv"))));
    }

    // Another store's run 1 (a remote store's replica, switched to) is read anew, even where
    // its id, status and length are those of the run shown before.
    void aSwitchedStoreIsReadAgain()
    {
        const QString otherPath = dir_->filePath(QStringLiteral("other.sqlite"));
        {
            RunStore other(otherPath.toStdString());
            const int64_t id = other.create_run("elsewhere", "/p/elsewhere.json", to_json_text(config_named("elsewhere", "fp32")));
            QCOMPARE(id, int64_t(1));
            StoreSink sink(other, id);
            for (int64_t step = 1; step <= 10; ++step) {
                StepMetrics m;
                m.step = step;
                m.train_loss = 7.0 + 0.5 * double(step);
                sink.on_step(m);
            }
            sink.on_eval({5, 9.5, 9.4}); // evaluated where run 1 here was: nothing tells them apart but the store
            sink.on_eval({10, 12.0, 11.9});
            other.finish_run(id, RunStatus::Finished);
        }
        ComparePage page(connection_.get());
        page.show(); // a hidden page reads again only when shown
        QObject::connect(connection_.get(), &StoreConnection::runsChanged, &page, &ComparePage::reload);
        QVERIFY(page.setRuns({1}));
        QCOMPARE(values_of(page.curvePlot()->rawGraph(0)).front(), 2.875);
        connection_->switchTo(otherPath, /*readOnly=*/true);
        QCOMPARE(page.runIds(), (std::vector<int64_t>{1}));
        QVector<double> expected;
        for (int s = 1; s <= 10; ++s) expected << 7.0 + 0.5 * s;
        QCOMPARE(values_of(page.curvePlot()->rawGraph(0)), expected);
    }

    void badInputGivesMessages()
    {
        ComparePage page(connection_.get());
        QVERIFY(!page.setRuns({}));
        QVERIFY(page.lastError().startsWith(QStringLiteral("Select one or more runs")));
        QVERIFY(!page.setRuns({99}));
        QCOMPARE(page.lastError(), QStringLiteral("Run 99 is no longer in the store."));
        QVERIFY(page.setRuns({1, 99, 2}));
        QCOMPARE(page.runIds(), (std::vector<int64_t>{1, 2}));
        QCOMPARE(page.message(), QStringLiteral("Left out, no longer in the store: run 99."));
        // A run deleted while shown: the page drops it when the store says so.
        RunsPage runs(connection_.get());
        QVERIFY(runs.refresh());
        QObject::connect(connection_.get(), &StoreConnection::runsChanged, &page, &ComparePage::reload);
        QVERIFY(runs.deleteRuns({2}));
        // Hidden (another page is shown), it reads the store when it is shown, not at each change.
        QCOMPARE(page.runIds(), (std::vector<int64_t>{1, 2}));
        page.show();
        QCOMPARE(page.runIds(), (std::vector<int64_t>{1}));
        QCOMPARE(page.curvePlot()->curveCount(), 1);

        // A missing store lists nothing and says why; a corrupt one is an error, and untouched.
        StoreConnection missing(dir_->filePath(QStringLiteral("none.sqlite")));
        RunsPage empty(&missing);
        QVERIFY(empty.refresh());
        QCOMPARE(empty.model()->rowCount(), 0);
        QVERIFY(!QFile::exists(dir_->filePath(QStringLiteral("none.sqlite"))));
        const QString corruptPath = dir_->filePath(QStringLiteral("corrupt.sqlite"));
        {
            QFile f(corruptPath);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(QByteArray(4096, 'x'));
        }
        StoreConnection corrupt(corruptPath);
        RunsPage broken(&corrupt);
        QVERIFY(!broken.refresh());
        QVERIFY(broken.lastError().startsWith(QStringLiteral("Cannot open the run store")));
        ComparePage brokenCompare(&corrupt);
        QVERIFY(!brokenCompare.setRuns({1}));
        QFile f(corruptPath);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll(), QByteArray(4096, 'x'));
    }

    void readOnlyStoreShowsEverythingAndRefusesEdits()
    {
        // An archive on a read-only mount: the pages show every run; edits say read-only.
        QTemporaryDir dir;
        const QString share = dir.filePath(QStringLiteral("share"));
        QVERIFY(QDir().mkpath(share));
        const QString path = share + QStringLiteral("/runs.sqlite");
        craft_store(path);
        const QStringList before = test::snapshot(dir.path());
        if (!test::mount_read_only(share)) QSKIP("cannot bind-mount read-only here (needs CAP_SYS_ADMIN)");
        const test::MountGuard mounted(share);
        StoreConnection connection(path);
        RunsPage runs(&connection);
        QVERIFY2(runs.refresh(), qPrintable(runs.lastError()));
        QVERIFY(connection.readOnly());
        QCOMPARE(runs.model()->rowCount(), 3);
        QVERIFY(!runs.renameRun(1, QStringLiteral("renamed")));
        QVERIFY2(runs.lastError().contains(QStringLiteral("'%1' is read-only").arg(path)), qPrintable(runs.lastError()));
        QVERIFY(!runs.addTags({1}, {QStringLiteral("t")}));
        QVERIFY(runs.lastError().contains(QStringLiteral("is read-only")));
        QVERIFY(!runs.deleteRuns({3}));
        QVERIFY(runs.lastError().contains(QStringLiteral("is read-only")));
        ComparePage compare(&connection);
        QVERIFY(compare.setRuns({1, 2}));
        QCOMPARE(compare.curvePlot()->curveCount(), 2);
        QCOMPARE(test::snapshot(dir.path()), before);
    }

    // A mirror's change of the run list reopens the replica: without PRAGMA quick_check, which
    // reads the whole file on the GUI thread. A close (after an error) or a switch checks again.
    // Seen through a store damaged after the first open: only a checking open refuses it.
    void reopeningAfterAMirrorsChangeSkipsTheWholeFileCheck()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("replica.sqlite"));
        {
            craft_store(path);
            RunStore store(path.toStdString(), OpenMode::ReadWrite);
            for (int64_t step = 100; step <= 3000; ++step) store.append_scalar(1, step, "train/loss", 1.0 / double(step));
        }
        StoreConnection connection(path);
        QVERIFY(connection.store());
        // One bit of a b-tree leaf's cell count in the middle of the file: quick_check sees it.
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadWrite));
        QByteArray bytes = f.readAll();
        const int pageSize = (static_cast<unsigned char>(bytes[16]) << 8) | static_cast<unsigned char>(bytes[17]);
        const int pages = static_cast<int>(bytes.size() / pageSize);
        int page = pages / 2;
        const auto kind = [&](int p) { return static_cast<unsigned char>(bytes[qsizetype(p - 1) * pageSize]); };
        while (page < pages && kind(page) != 0x0d && kind(page) != 0x0a) ++page;
        QVERIFY(page < pages);
        const qsizetype at = qsizetype(page - 1) * pageSize + 3;
        bytes[at] = static_cast<char>(bytes[at] ^ 0x40);
        QVERIFY(f.seek(0));
        QCOMPARE(f.write(bytes), bytes.size());
        f.close();
        QSignalSpy changed(&connection, &StoreConnection::runsChanged);
        connection.reopen();
        QCOMPARE(changed.count(), 1);
        QString error;
        QVERIFY2(connection.store(&error), qPrintable(error));
        connection.close();
        QVERIFY(!connection.store(&error));
        QVERIFY2(error.contains(QStringLiteral("is damaged")), qPrintable(error));
        connection.switchTo(path, /*readOnly=*/true);
        QVERIFY(!connection.store(&error));
        QVERIFY2(error.contains(QStringLiteral("is damaged")), qPrintable(error));
    }

    // A read-only connection opened while no WAL existed reads the file as immutable: once
    // another process has written the store, its cached pages are stale (or torn against the
    // new file), so the connection is opened again before the next read.
    void aReadOnlyConnectionReadsWhatAnotherWriterAdded()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("shared.sqlite"));
        { RunStore(path.toStdString()).create_run("first", "p.json", "{}"); }
        StoreConnection connection(path);
        connection.switchTo(path, /*readOnly=*/true);
        QString error;
        RunStore* before = connection.store(&error);
        QVERIFY2(before, qPrintable(error));
        QCOMPARE(before->list_runs().size(), size_t(1));
        { RunStore(path.toStdString(), OpenMode::ReadWrite).create_run("second", "p.json", "{}"); }
        RunStore* after = connection.store(&error);
        QVERIFY2(after, qPrintable(error));
        QCOMPARE(after->list_runs().size(), size_t(2));
    }

    void emptyStoreFileIsReportedAndNotFilled()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath(QStringLiteral("empty.sqlite"));
        QVERIFY(QFile(path).open(QIODevice::WriteOnly));
        StoreConnection connection(path);
        RunsPage runs(&connection);
        QVERIFY(!runs.refresh());
        QVERIFY2(runs.lastError().contains(QStringLiteral("'%1' is empty: no runs stored yet").arg(path)),
                 qPrintable(runs.lastError()));
        QCOMPARE(QFileInfo(path).size(), qint64(0));
        QCOMPARE(QDir(dir.path()).entryList(QDir::AllEntries | QDir::NoDotAndDotDot), QStringList{"empty.sqlite"});
    }

    // The dialog says what each run will do, the swept setting included.
    void sweepDialogPreviewsEachRunsSteps()
    {
        SweepDialog dialog(tiny_config(10));
        dialog.nameEdit()->setText(QStringLiteral("lengths"));
        dialog.keyCombo()->setEditText(QStringLiteral("training.steps"));
        dialog.valuesEdit()->setText(QStringLiteral("100,500"));
        QVERIFY2(dialog.error().isEmpty(), qPrintable(dialog.error()));
        // A name whose tag another sweep holds is noted: the runs would join those under one tag.
        QVERIFY(!dialog.previewText().contains(QStringLiteral("already tags")));
        dialog.setTagsInUse({{"baseline", 1}, {"sweep:lengths", 3}});
        QVERIFY2(dialog.previewText().contains(
                     QStringLiteral("sweep:lengths already tags 3 runs: this sweep's runs join them under one tag.")),
                 qPrintable(dialog.previewText()));
        QVERIFY(dialog.error().isEmpty()); // a note, not a refusal
        dialog.setTagsInUse({});
        QCOMPARE(dialog.plans().size(), size_t(2));
        dialog.valuesEdit()->setText(QStringLiteral("100,100")); // in the dialog's words, not the CLI's --vary
        QCOMPARE(dialog.error(), QStringLiteral("training.steps: value '100' is listed twice"));
        dialog.valuesEdit()->setText(QStringLiteral("100,500"));
        QVERIFY2(!dialog.previewText().contains(QStringLiteral("each")), qPrintable(dialog.previewText()));
        QVERIFY2(dialog.previewText().contains(QStringLiteral("[training.steps=100], 100 steps")), qPrintable(dialog.previewText()));
        QVERIFY2(dialog.previewText().contains(QStringLiteral("[training.steps=500], 500 steps")), qPrintable(dialog.previewText()));
        dialog.keyCombo()->setEditText(QStringLiteral("training.seed"));
        dialog.valuesEdit()->setText(QStringLiteral("1,2"));
        QVERIFY2(dialog.previewText().startsWith(QStringLiteral("2 runs, 10 steps each, tagged")), qPrintable(dialog.previewText()));
        // A recipe on a project with no FP8 GEMM: both runs would be the same, and the dialog says why.
        dialog.keyCombo()->setEditText(QStringLiteral("precision.fp8.scaling"));
        dialog.valuesEdit()->setText(QStringLiteral("nvfp4,fp8-block"));
        QVERIFY2(dialog.error().contains(QStringLiteral("would train the same run twice: no GEMM computes in FP8")),
                 qPrintable(dialog.error()));
        QVERIFY(dialog.plans().empty());
        // Picking a key puts values worth a first sweep in Values; each is a sweep the project
        // takes, but a recipe sweep needs an FP8 project.
        for (int i = 0; i < dialog.keyCombo()->count(); ++i) {
            dialog.keyCombo()->setCurrentIndex(i);
            emit dialog.keyCombo()->activated(i);
            const QString key = dialog.keyCombo()->currentText();
            if (key == QStringLiteral("precision")) QCOMPARE(dialog.plans().size(), size_t(5)); // recipes vs BF16, FP32
            if (key == QStringLiteral("precision.fp8.scaling")) {
                QCOMPARE(dialog.values(), QStringLiteral("delayed,fp8-block,nvfp4,mxfp4"));
                QVERIFY2(dialog.error().contains(QStringLiteral("no GEMM computes in FP8")),
                         qPrintable(dialog.error()));
            } else {
                QVERIFY2(dialog.error().isEmpty(), qPrintable(key + ": " + dialog.error()));
                QVERIFY2(dialog.plans().size() >= 2, qPrintable(key));
            }
        }
        dialog.keyCombo()->setCurrentIndex(dialog.keyCombo()->findText(QStringLiteral("optimizer.learning_rate")));
        emit dialog.keyCombo()->activated(dialog.keyCombo()->currentIndex());
        const double lr = tiny_config(10).optimizer.learning_rate;
        const auto shortest = [](double v) { return QString::number(v, 'g', QLocale::FloatingPointShortest); };
        QCOMPARE(dialog.values(), shortest(lr / 2) + "," + shortest(lr) + "," + shortest(lr * 2));
        // The project's own value whole (6 digits cut it), and each value once (batch 1: "1,1,2").
        ProjectConfig odd = tiny_config(10);
        odd.optimizer.learning_rate = 3.14159265e-4;
        odd.training.batch_size = 1;
        SweepDialog oddDialog(odd);
        const std::pair<const char*, const char*> suggested[] = {
            {"optimizer.learning_rate", "0.0001570796325,0.000314159265,0.00062831853"},
            {"training.batch_size", "1,2"}};
        for (const auto& [key, values] : suggested) {
            oddDialog.keyCombo()->setCurrentIndex(oddDialog.keyCombo()->findText(QString::fromLatin1(key)));
            emit oddDialog.keyCombo()->activated(oddDialog.keyCombo()->currentIndex());
            QCOMPARE(oddDialog.values(), QString::fromLatin1(values));
            QVERIFY2(oddDialog.error().isEmpty(), qPrintable(oddDialog.error()));
        }
        // Every key the dialog suggests is one the project has: a bad value is refused as a
        // value, never as an unknown key.
        QVERIFY(dialog.keyCombo()->count() >= 6);
        for (int i = 0; i < dialog.keyCombo()->count(); ++i) {
            dialog.keyCombo()->setCurrentIndex(i);
            dialog.valuesEdit()->setText(QStringLiteral("nope,nope2"));
            QVERIFY2(!dialog.error().isEmpty(), qPrintable(dialog.keyCombo()->currentText()));
            QVERIFY2(!dialog.error().contains(QStringLiteral("unknown key")), qPrintable(dialog.error()));
        }
    }

    void sweepThroughTheWindow()
    {
        const QString storePath = dir_->filePath(QStringLiteral("sweep.sqlite"));
        MainWindow window(storePath);
        window.setProject(tiny_config(10), QStringLiteral("in-memory"));
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        QCOMPARE(int(MainWindow::Page::Runs), 2);
        QCOMPARE(int(MainWindow::Page::Compare), 3);

        // Rejected before anything runs.
        QVERIFY(!window.startSweep(QStringLiteral("precision.preset"), QStringLiteral("fp32,nope")));
        QVERIFY2(window.lastError().contains(QStringLiteral("precision.preset=nope is rejected")),
                 qPrintable(window.lastError()));
        QVERIFY(!window.controller()->isRunning());
        QVERIFY(!window.startSweep(QStringLiteral("precision.preset"), QStringLiteral("fp32,fp32")));

        SweepRunner* sweep = window.sweepRunner();
        QSignalSpy done(sweep, &SweepRunner::finished);
        QSignalSpy starting(sweep, &SweepRunner::runStarting);
        QString tableDuringBf16;
        int listedWhenBf16Started = 0;
        connect(window.controller(), &TrainingController::started, this, [&] {
            if (starting.count() != 2) return;
            listedWhenBf16Started = window.runsPage()->model()->rowCount();
            PrecisionTableModel* table = window.projectPage()->precisionModel();
            const QModelIndex forward = table->index(0, PrecisionTableModel::ForwardColumn);
            tableDuringBf16 = forward.data().toString() +
                              (forward.data(Qt::FontRole).value<QFont>().italic() ? " italic" : " upright") +
                              ", running '" + table->index(0, PrecisionTableModel::RunningColumn).data().toString() + "'";
        });
        QVERIFY(window.startSweep(QStringLiteral("precision.preset"), QStringLiteral("fp32,bf16,fp16"),
                                  QStringLiteral("t1")));
        QVERIFY(sweep->isRunning());
        QVERIFY(!window.startTraining()); // one thing at a time
        QVERIFY(!window.connectRemote(QUrl(QStringLiteral("http://127.0.0.1:9")), QStringLiteral("token")));
        QVERIFY2(window.lastError().startsWith(QStringLiteral("A sweep is running into the local store")),
                 qPrintable(window.lastError()));
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 180000);
        // While the bf16 run trained, the precision table showed the project (fp32), not the
        // run's bf16 as a switch it never made.
        QCOMPARE(tableDuringBf16, QStringLiteral("fp32 upright, running ''"));
        QCOMPARE(listedWhenBf16Started, 2); // the Runs page lists a run as it starts, not when it ends
        QCOMPARE(done.at(0).at(1).toBool(), false);
        QCOMPARE(starting.count(), 3);
        QVERIFY2(sweep->problems().isEmpty(), qPrintable(sweep->problems().join(QLatin1Char('\n'))));
        const QList<qint64> ids = sweep->runIds();
        QCOMPARE(ids.size(), 3);

        // The Compare page opened with the three runs and their summary, relative to FP32.
        QCOMPARE(window.currentPage(), MainWindow::Page::Compare);
        ComparePage* compare = window.comparePage();
        QCOMPARE(compare->runIds(), std::vector<int64_t>(ids.begin(), ids.end()));
        QCOMPARE(compare->currentTab(), ComparePage::Tab::Summary);
        QCOMPARE(compare->curvePlot()->curveCount(), 3);
        for (int i = 0; i < 3; ++i) QCOMPARE(compare->curvePlot()->rawGraph(i)->dataCount(), 10);
        QStandardItemModel* sum = compare->summaryModel();
        QCOMPARE(sum->rowCount(), 3);
        QCOMPARE(column_of(*sum, ComparePage::SumRecipe), (QStringList{"fp32", "bf16", "fp16"}));
        QCOMPARE(column_of(*sum, ComparePage::SumName),
                 (QStringList{"sweep-test [precision.preset=fp32]", "sweep-test [precision.preset=bf16]",
                              "sweep-test [precision.preset=fp16]"}));
        QCOMPARE(column_of(*sum, ComparePage::SumStatus), (QStringList{"finished", "finished", "finished"}));
        QCOMPARE(column_of(*sum, ComparePage::SumSteps), (QStringList{"10", "10", "10"}));
        QCOMPARE(compare->referenceRow(), 0);
        QCOMPARE(sum->index(0, ComparePage::SumDeltaVal).data(kCsvExportRole).toString(), QStringLiteral("0"));
        QCOMPARE(sum->index(0, ComparePage::SumTokensRatio).data(kCsvExportRole).toString(), QStringLiteral("1"));
        QCOMPARE(sum->index(0, ComparePage::SumMemoryRatio).data(kCsvExportRole).toString(), QStringLiteral("1"));
        QCOMPARE(sum->index(0, ComparePage::SumDeltaVal).data().toString(), QStringLiteral("0"));
        QVERIFY(!sum->index(1, ComparePage::SumDeltaVal).data(kCsvExportRole).toString().isEmpty());
        // The diff names the varied key alone: the runs' configs keep the project's name, as the
        // CLI's sweep keeps it (the window's named each config after its run, a diff of its own).
        QCOMPARE(column_of(*compare->configDiffModel(), 0), (QStringList{"precision.preset"}));

        // Every run is tagged, and the Runs page lists them; the project is untouched.
        RunStore* store = window.storeConnection()->store();
        QVERIFY(store);
        for (const qint64 id : ids) QCOMPARE(store->tags(id), (std::vector<std::string>{"sweep:t1"}));
        QCOMPARE(window.runsPage()->model()->rowCount(), 3);
        QCOMPARE(window.runsPage()->selectedRunIds().size(), size_t(3));
        QCOMPARE(window.document()->config().precision.preset, std::string("fp32"));
        QCOMPARE(window.document()->config().name, std::string("sweep-test"));
        QVERIFY(!window.document()->isDirty());
        QVERIFY(!sweep->isRunning());
    }

    void stopEndsTheSweep()
    {
        const QString storePath = dir_->filePath(QStringLiteral("stop.sqlite"));
        MainWindow window(storePath);
        window.setProject(tiny_config(100000), QStringLiteral("in-memory"));
        SweepRunner* sweep = window.sweepRunner();
        QSignalSpy done(sweep, &SweepRunner::finished);
        QVERIFY(window.startSweep(QStringLiteral("training.seed"), QStringLiteral("1,2,3"), QStringLiteral("s")));
        QTRY_VERIFY_WITH_TIMEOUT(window.controller()->runId() >= 0 && window.lastStep() >= 2, 60000);
        window.stopTraining();
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 60000);
        QCOMPARE(done.at(0).at(1).toBool(), true);
        QCOMPARE(sweep->runIds().size(), 1);
        QVERIFY(!window.controller()->isRunning());
        QTest::qWait(50); // nothing else starts
        QVERIFY(!window.controller()->isRunning());
    }

    // A store that cannot record a run ends the sweep, as the CLI's does: every next point
    // failed the same way, and the window listed one problem for each.
    void aStoreThatCannotRecordRunsEndsTheSweep()
    {
        const QString storePath = dir_->filePath(QStringLiteral("nolocks.sqlite"));
        { RunStore make(storePath.toStdString()); } // the store itself is fine
        QFile blocker(storePath + QStringLiteral(".locks"));
        QVERIFY(blocker.open(QIODevice::WriteOnly));
        blocker.close();
        MainWindow window(storePath);
        window.setProject(tiny_config(2), QStringLiteral("in-memory"));
        SweepRunner* sweep = window.sweepRunner();
        QSignalSpy done(sweep, &SweepRunner::finished);
        QSignalSpy starting(sweep, &SweepRunner::runStarting);
        QVERIFY2(window.startSweep(QStringLiteral("training.seed"), QStringLiteral("1,2,3"), QStringLiteral("s")),
                 qPrintable(window.lastError()));
        QTRY_COMPARE_WITH_TIMEOUT(done.count(), 1, 60000);
        QCOMPARE(starting.count(), 1);
        QCOMPARE(sweep->problems().size(), 2);
        QVERIFY2(sweep->problems().at(0).contains(QStringLiteral("cannot make the folder of its lock files")),
                 qPrintable(sweep->problems().at(0)));
        QCOMPARE(sweep->problems().at(1),
                 QStringLiteral("the run store failed: the sweep's other runs were not started"));
    }

    // Edit > Undo takes back a project edit, but not while a run goes (settings are locked, and
    // an undone precision edit would leave the run on what the edit sent).
    void undoWaitsForTheRunsEnd()
    {
        MainWindow window(dir_->filePath(QStringLiteral("undo.sqlite")));
        window.setProject(tiny_config(100000), QStringLiteral("in-memory"));
        QVERIFY(!window.undoAction()->isEnabled());
        QVERIFY(window.document()->setValue(QStringLiteral("training.seed"), QJsonValue(5), nullptr));
        QVERIFY(window.undoAction()->isEnabled());
        QVERIFY(!window.redoAction()->isEnabled());
        QVERIFY(window.startTraining());
        QVERIFY(!window.undoAction()->isEnabled());
        QTRY_VERIFY_WITH_TIMEOUT(window.controller()->runId() >= 0 && window.lastStep() >= 1, 60000);
        window.stopTraining();
        QTRY_VERIFY_WITH_TIMEOUT(!window.controller()->isRunning(), 60000);
        QVERIFY(window.undoAction()->isEnabled());
        window.undoAction()->trigger();
        QCOMPARE(window.document()->config().training.seed, tiny_config(1).training.seed);
        QVERIFY(window.redoAction()->isEnabled());
        QVERIFY(!window.undoAction()->isEnabled());
    }

    // During a sweep the Project page says that precision edits change the project only.
    void theProjectPageSaysWhatASweepDoesWithEdits()
    {
        ProjectDocument doc;
        doc.setConfig(tiny_config(2));
        ProjectPage page(&doc);
        QCOMPARE(page.runningText(), QString());
        page.setRunning(true, /*sweep=*/true);
        QCOMPARE(page.runningText(), QStringLiteral("Sweep in progress: settings are locked; precision edits change "
                                                    "the project only, not the sweep's runs."));
        page.setRunning(true);
        QCOMPARE(page.runningText(),
                 QStringLiteral("Run in progress: settings are locked; precision edits apply at the next step."));
        page.setRunning(false);
        QCOMPARE(page.runningText(), QString());
    }

private:
    // A run of one step whose losses came out NaN, finished: its id.
    int64_t addDivergedRun(const std::string& preset)
    {
        RunStore store(path_.toStdString());
        const int64_t id = store.create_run("diverged", "/p/d.json", to_json_text(config_named("diverged", preset)));
        StoreSink sink(store, id);
        StepMetrics m;
        m.step = 1;
        m.train_loss = std::numeric_limits<double>::quiet_NaN();
        sink.on_step(m);
        sink.on_eval({1, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::quiet_NaN()});
        store.finish_run(id, RunStatus::Finished);
        return id;
    }

    std::unique_ptr<QTemporaryDir> dir_;
    QString path_;
    std::unique_ptr<StoreConnection> connection_;
};

QTEST_MAIN(TestRunsCompare)
#include "test_runs_compare.moc"
