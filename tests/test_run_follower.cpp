// SPDX-License-Identifier: GPL-3.0-or-later
// RunFollower (ui/controller/run_follower.h): a run of a store, read incrementally after the
// follower's marks and fed to a MonitorPage, gives exactly the run's loss points, evaluations,
// events and telemetry frames, each once; a half-written step or frame waits until it is
// whole; a run of another process (mantissa-train) is followed live on the same machine.

#include <QtTest>

#include <QFile>
#include <QProcess>
#include <QSignalSpy>
#include <QTemporaryDir>

#include "controller/run_follower.h"
#include "monitor_checks.h"
#include "pages/monitor_page.h"
#include "precision_policy.h"
#include "project_config.h"
#include "run_event.h"
#include "run_store.h"
#include "window/main_window.h"
#include "models/run_list_model.h"
#include "pages/runs_page.h"
#include "window/monitor_feed.h"

using namespace mantissa;

namespace {

const char* kTinyProject = R"({
  "name": "tiny",
  "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context_length": 16},
  "data": {"kind": "synthetic-addition", "digits": 2, "examples": 600},
  "training": {"steps": 60, "batch_size": 4, "seed": 7, "threads": 1},
  "eval": {"interval": 20, "batches": 2},
  "telemetry": {"interval": 4, "log_interval": 1}
})";

const std::vector<std::string> kLayers = {"blocks.0.attn.qkv", "blocks.0.mlp.fc"};

StepMetrics step_at(int64_t step)
{
    StepMetrics m;
    m.step = step;
    m.train_loss = 3.0 / static_cast<double>(step) + 0.1; // not a round binary number
    m.learning_rate = 1e-3;
    m.grad_norm = 0.5;
    m.step_time_ms = 12.5;
    m.tokens_per_s = 1000.0;
    m.loss_scale = 1.0;
    for (size_t i = 0; i < kLayers.size(); ++i) m.layer_grad_norms.emplace_back(kLayers[i], 0.1 * double(i + 1));
    return m;
}

TensorStats tensor(const std::string& layer, const std::string& role, int64_t step)
{
    TensorStats t;
    t.layer = layer;
    t.role = role;
    t.format = "e4m3";
    t.first_exponent = -int(step % 7) - 3;
    t.exponent_counts = {step, 2 * step + 1, 5, 0, 3};
    t.count = 2 * step + 9 + 11;
    t.zeros = 11;
    t.underflow = 0.25;
    t.amax = 1.5 * double(step);
    t.quant_snr_db = INFINITY;
    t.update_ratio = role == "weight" ? 1e-3 : -1.0;
    return t;
}

LayerStatsFrame frame_at(int64_t step)
{
    LayerStatsFrame f;
    f.step = step;
    for (const auto& layer : kLayers)
        for (const char* role : {"input", "weight"}) f.tensors.push_back(tensor(layer, role, step));
    f.attention_max_logit = {{"blocks.0.attn", 4.0 + double(step)}};
    f.log_z_mean = 2.0;
    f.log_z_max = 3.0;
    f.memory.resident_bytes = 1000 + step;
    return f;
}

// Steps from..to of a run as StoreSink writes them: an evaluation every 10 steps, a frame at
// steps 1, 5, 9, ...
void write_steps(StoreSink& sink, int64_t from, int64_t to)
{
    for (int64_t s = from; s <= to; ++s) {
        sink.on_step(step_at(s));
        if (s % 4 == 1) sink.on_layer_stats(frame_at(s));
        if (s % 10 == 0) sink.on_eval({s, 2.0 + 1.0 / double(s), 1.5});
    }
}

ProjectConfig two_layer_config()
{
    ProjectConfig c;
    c.model.n_layer = 1;
    return c;
}

} // namespace

class TestRunFollower : public QObject {
    Q_OBJECT
private:
    QTemporaryDir dir_;
    QString path(const QString& name) const { return dir_.filePath(name); }

    struct Watched {
        MonitorPage page;
        RunFollower follower;
        QList<RunStatus> endings;
        Watched()
        {
            QObject::connect(&follower, &RunFollower::opened, &page, [this](const FollowedRun& run) {
                page.reset(run.tokensPerStep, run.layers);
                page.setInitialLayerStates(run.initialLayerStates);
            });
            QObject::connect(&follower, &RunFollower::batchReady, &page, &MonitorPage::ingest);
            QObject::connect(&follower, &RunFollower::ended, &page, [this] { endings << follower.run().status; });
            follower.setIntervalMs(1000000); // polled by hand
        }
    };

private slots:
    // A store written step by step, as StoreSink writes it; the follower polled after each
    // part: everything once, in order, and nothing half.
    void followsAStoreStepByStep()
    {
        const QString db = path("steps.sqlite");
        RunStore store(db.toStdString());
        const ProjectConfig config = two_layer_config();
        const int64_t id = store.create_run("synthetic", "p.json", to_json_text(config));
        StoreSink sink(store, id);
        RunEvent started;
        started.kind = EventKind::RunStarted;
        started.text = "started";
        sink.on_event(started);
        sink.on_eval({0, 4.5, 4.25});
        for (int64_t s = 1; s <= 10; ++s) {
            sink.on_step(step_at(s));
            if (s % 3 == 1) sink.on_layer_stats(frame_at(s)); // 1, 4, 7, 10
            if (s == 5) sink.on_eval({5, 2.5, 2.25});
        }
        store.flush();

        Watched w;
        QVERIFY(w.follower.follow(db, id));
        QCOMPARE(w.follower.run().tokensPerStep,
                 config.training.batch_size * config.model.context_length * config.training.grad_accum);
        QCOMPARE(w.follower.run().layers, gemm_layer_names(1));
        QVERIFY(w.follower.poll());
        QCOMPARE(w.follower.stepsEmitted(), 10);
        QCOMPARE(w.follower.framesEmitted(), 4);
        QCOMPARE(w.page.history().evals().size(), size_t(2));
        QCOMPARE(w.page.history().events().size(), size_t(1));
        QVERIFY(w.follower.isLive());
        QVERIFY(!w.follower.poll()); // nothing new: nothing again

        // Half a step: its loss is there, the rest not yet. It waits.
        store.append_scalar(id, 11, "train/loss", 0.375);
        store.flush();
        QVERIFY(!w.follower.poll());
        QCOMPARE(w.follower.stepsEmitted(), 10);
        // The rest of it, and half a frame (no memory/resident_bytes yet).
        const StepMetrics m = step_at(11);
        for (const auto& [tag, value] : std::vector<std::pair<std::string, double>>{
                 {"lr", m.learning_rate}, {"grad_norm", m.grad_norm}, {"step_time_ms", m.step_time_ms},
                 {"tokens_per_s", m.tokens_per_s}, {"loss_scale", m.loss_scale}})
            store.append_scalar(id, 11, tag, value);
        for (const auto& [layer, norm] : m.layer_grad_norms) store.append_scalar(id, 11, "grad_norm/" + layer, norm);
        const LayerStatsFrame f = frame_at(11);
        store.append_layer_stats(id, 11, f.tensors[0]);
        store.append_layer_stats(id, 11, f.tensors[1]);
        store.flush();
        QVERIFY(w.follower.poll());
        QCOMPARE(w.follower.stepsEmitted(), 11);
        QCOMPARE(w.page.history().steps().back().train_loss, 0.375);
        QCOMPARE(w.follower.framesEmitted(), 4);
        for (size_t i = 2; i < f.tensors.size(); ++i) store.append_layer_stats(id, 11, f.tensors[i]);
        store.append_scalar(id, 11, "memory/resident_bytes", 1011.0);
        store.flush();
        QVERIFY(w.follower.poll());
        QCOMPARE(w.follower.framesEmitted(), 5);
        QCOMPARE(w.page.history().memory().back().resident_bytes, int64_t(1011));
        int64_t at = -1;
        const ExponentHistogram* h = w.page.history().histogram("blocks.0.mlp.fc", "weight", 11, &at);
        QVERIFY(h);
        QCOMPARE(at, int64_t(11));
        QCOMPARE(h->counts, (std::vector<int64_t>{11, 23, 5, 0, 3}));
        QCOMPARE(h->first_exponent, -7);

        store.finish_run(id, RunStatus::Finished);
        w.follower.poll();
        QCOMPARE(w.endings, QList<RunStatus>{RunStatus::Finished});
        QVERIFY(!w.follower.isLive());
        QVERIFY2(compare_history(w.page.history(), store, id).isEmpty(),
                 qPrintable(compare_history(w.page.history(), store, id)));
        QCOMPARE(w.page.history().steps().size(), size_t(11));
    }

    // The run followed is deleted and its id given to a new run (a deleted newest run's id is
    // handed out again): the new run is read from its start, as a restart, not appended to the
    // old one's curve after its last step.
    void anotherRunUnderTheFollowedIdIsReadFromItsStart()
    {
        const QString db = path("reused-id.sqlite");
        RunStore store(db.toStdString());
        const ProjectConfig config = two_layer_config();
        const int64_t id = store.create_run("old", "p.json", to_json_text(config));
        {
            StoreSink sink(store, id);
            for (int64_t s = 1; s <= 8; ++s) sink.on_step(step_at(s));
        }
        store.finish_run(id, RunStatus::Finished);
        store.flush();
        Watched w;
        QSignalSpy restarted(&w.follower, &RunFollower::restarted);
        QVERIFY(w.follower.follow(db, id));
        w.follower.poll();
        QCOMPARE(w.follower.stepsEmitted(), 8);

        store.delete_run(id);
        QCOMPARE(store.create_run("new", "p.json", to_json_text(config)), id);
        {
            StoreSink sink(store, id);
            for (int64_t s = 1; s <= 5; ++s) sink.on_step(step_at(s));
        }
        store.flush();
        w.follower.poll(); // the restart
        w.follower.poll(); // and the new run's rows
        QCOMPARE(restarted.count(), 1);
        QCOMPARE(w.follower.run().name, QStringLiteral("new"));
        QCOMPARE(w.follower.stepsEmitted(), 5);
        QCOMPARE(w.page.history().steps().size(), size_t(5));
    }

    // A finished run longer than one page is read to its end, once, in pages.
    void readsALongFinishedRunInPages()
    {
        const QString db = path("long.sqlite");
        int64_t id = 0;
        {
            RunStore store(db.toStdString());
            id = store.create_run("long", "p.json", "{not a config");
            StoreSink sink(store, id);
            for (int64_t s = 1; s <= 12000; ++s) {
                sink.on_step(step_at(s));
                if (s % 1000 == 0) sink.on_layer_stats(frame_at(s));
            }
            store.finish_run(id, RunStatus::Stopped);
        }
        Watched w;
        QVERIFY(w.follower.follow(db, id));
        QCOMPARE(w.follower.run().tokensPerStep, int64_t(0)); // an unreadable config
        QTRY_COMPARE_WITH_TIMEOUT(w.endings.size(), 1, 60000);
        QCOMPARE(w.endings.front(), RunStatus::Stopped);
        QCOMPARE(w.follower.stepsEmitted(), 12000);
        QCOMPARE(w.follower.framesEmitted(), 12);
        const auto store = RunStore::open_read_only(db.toStdString());
        QVERIFY2(compare_history(w.page.history(), *store, id).isEmpty(),
                 qPrintable(compare_history(w.page.history(), *store, id)));
    }

    // A mirror offers the pages it fetched before its replica holds them
    // (RunFollower::offerScalars): a page that joins the follower's marks is handed on from
    // memory by the store's own rules (a half step waits), a page ahead of the marks waits for
    // them, one they passed is dropped, one of another run is ignored; the store then adds
    // nothing twice, and the Monitor ends with exactly the run.
    void offeredPagesJoinTheStoreOnce_data()
    {
        QTest::addColumn<int>("held");      // steps the follower's store holds when the pages come
        QTest::addColumn<int>("pageSteps"); // steps per offered page (the page limit per tag)
        QTest::addColumn<QString>("offer"); // all; gap: without the second page; otherRun
        QTest::addColumn<int>("shownEarly"); // steps handed on before the store holds more than `held`
        QTest::addColumn<int>("shownAt20");  // ... once it holds 20
        QTest::addColumn<int>("taken");      // pages handed on from memory in all
        // Pages of 10 steps per tag hold steps 1-9, 10-18, 19-27, 28-36 and 37-41.
        QTest::newRow("all, from the start") << 0 << 10 << "all" << 40 << 40 << 5;
        QTest::newRow("all, the store ahead of the first pages") << 23 << 10 << "all" << 40 << 40 << 3;
        QTest::newRow("one page for all") << 5 << 100 << "all" << 40 << 40 << 1;
        QTest::newRow("a gap: the pages after it wait for the store") << 3 << 10 << "gap" << 9 << 40 << 4;
        QTest::newRow("another run's pages") << 3 << 10 << "otherRun" << 3 << 20 << 0;
    }

    void offeredPagesJoinTheStoreOnce()
    {
        QFETCH(int, held);
        QFETCH(int, pageSteps);
        QFETCH(QString, offer);
        QFETCH(int, shownEarly);
        QFETCH(int, shownAt20);
        QFETCH(int, taken);
        // The source: 40 whole steps and the first row of step 41, the run still running.
        const QString sourceDb = path(QString("offer-source-%1.sqlite").arg(QTest::currentDataTag()).replace(' ', '_'));
        RunStore source(sourceDb.toStdString());
        const std::string config = to_json_text(two_layer_config());
        const int64_t id = source.create_run("synthetic", "p.json", config);
        {
            StoreSink sink(source, id);
            write_steps(sink, 1, 40);
        }
        source.append_scalar(id, 41, "train/loss", 0.75);
        source.flush();
        std::vector<std::pair<int64_t, ScalarPage>> pages; // as a mirror fetches them
        for (int64_t from = 0;;) {
            ScalarPage page = source.scalars_page(id, from, pageSteps);
            const int64_t next = page.next;
            pages.emplace_back(from, std::move(page));
            if (!pages.back().second.cut) break;
            from = next;
        }
        QCOMPARE(pages.back().second.cut, false); // the last page ends in half a step

        // The follower's store (a replica being written) holds the first `held` steps.
        const QString db = path(QString("offer-%1.sqlite").arg(QTest::currentDataTag()).replace(' ', '_'));
        RunStore store(db.toStdString());
        QCOMPARE(store.create_run("synthetic", "p.json", config), id);
        StoreSink sink(store, id);
        write_steps(sink, 1, held);
        store.flush();
        Watched w;
        QVERIFY(w.follower.follow(db, id));
        w.follower.poll();
        // A page behind the marks: nothing, and it is dropped.
        if (held >= 10) w.follower.offerScalars(id, 0, source.scalars_page(id, 0, 10));
        for (size_t i = 0; i < pages.size(); ++i) {
            if (offer == "gap" && i == 1) continue;
            w.follower.offerScalars(offer == "otherRun" ? id + 1 : id, pages[i].first, pages[i].second);
        }
        while (w.follower.poll()) {}
        QCOMPARE(w.follower.stepsEmitted(), shownEarly);
        QCOMPARE(w.page.history().steps().back().step, int64_t(shownEarly));

        // The store gets the rest, as the replica's writer would write it: once its steps
        // join a waiting page (it may still get rows of its newest step: an evaluation), the
        // page is used. The step the source had half is whole by the end.
        if (held < 20) write_steps(sink, held + 1, 20);
        store.flush();
        while (w.follower.poll()) {}
        QCOMPARE(w.follower.stepsEmitted(), shownAt20);
        write_steps(sink, std::max(held, 20) + 1, 41);
        store.finish_run(id, RunStatus::Finished);
        while (w.follower.isLive()) w.follower.poll();
        QCOMPARE(w.endings, QList<RunStatus>{RunStatus::Finished});
        QCOMPARE(w.follower.offeredPagesTaken(), taken);
        QCOMPARE(w.follower.stepsEmitted(), 41);
        QCOMPARE(w.page.history().steps().size(), size_t(41));
        QCOMPARE(w.page.history().evals().size(), size_t(4));
        QVERIFY2(compare_history(w.page.history(), store, id).isEmpty(), qPrintable(compare_history(w.page.history(), store, id)));
    }

    // A real mantissa-train in another process: followed live through a local store, the
    // Monitor ends with exactly the run's rows. Through the window: Runs > Show in Monitor.
    void followsAnotherProcessLive()
    {
        const QString project = path("tiny.json");
        QFile f(project);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(kTinyProject);
        f.close();
        const QString db = path("process.sqlite");
        QProcess training;
        training.start(MANTISSA_TRAIN_EXE, {"run", project, "--db", db, "--set", "training.steps=3000"});
        QVERIFY(training.waitForStarted());
        MainWindow window(db);
        QTRY_VERIFY_WITH_TIMEOUT(window.runsPage()->refresh() && window.runsPage()->model()->rowCount() == 1, 120000);
        window.runsPage()->selectRuns({1});
        int batchesWhileTraining = 0;
        connect(window.monitorFeed()->follower(), &RunFollower::batchReady, this, [&] {
            if (training.state() == QProcess::Running) ++batchesWhileTraining;
        });
        QVERIFY(window.runsPage()->showSelectedInMonitor());
        QCOMPARE(window.currentPage(), MainWindow::Page::Monitor);
        QCOMPARE(window.monitorFeed()->followedRun(), int64_t(1));
        QVERIFY(QTest::qWaitFor([&] { return training.state() == QProcess::NotRunning; }, 300000));
        QCOMPARE(training.exitCode(), 0);
        QTRY_VERIFY_WITH_TIMEOUT(!window.monitorFeed()->follower()->isLive(), 60000);
        QVERIFY2(batchesWhileTraining >= 2, qPrintable(QString::number(batchesWhileTraining)));
        const auto store = RunStore::open_read_only(db.toStdString());
        QVERIFY2(compare_history(window.monitorPage()->history(), *store, 1).isEmpty(),
                 qPrintable(compare_history(window.monitorPage()->history(), *store, 1)));
        QCOMPARE(window.monitorPage()->history().steps().size(), size_t(3000));
        QVERIFY(window.monitorPage()->history().memory().size() >= 700); // a frame every 4 steps
    }
};

QTEST_MAIN(TestRunFollower)
#include "test_run_follower.moc"
