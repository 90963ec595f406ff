// SPDX-License-Identifier: GPL-3.0-or-later
// The training controller's threads, for ThreadSanitizer (scripts/sanitize.sh, build/tsan):
// the real TrainingController trains the tiny project on its worker QThread, with per-layer
// telemetry at every step, while this (GUI) thread drains it and pauses, resumes, switches a
// layer's precision, asks for checkpoints and stops. Built from the controller's and the
// snapshot buffer's sources, not from mantissa_ui, so the TSan tree compiles no widgets.
// LibTorch is not instrumented: training.threads=1 keeps its intra-op pool out of it.
// Each round checks that everything the worker handed over arrived exactly once.

#include <QtTest>

#include <QSignalSpy>
#include <QTemporaryDir>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "controller/training_controller.h"
#include "run_store.h"
#include "tiny_project.h"

using namespace mantissa;

namespace {

constexpr int kWaitMs = 120000; // instrumented, on a loaded 2-core machine

// What the GUI thread received through drained().
struct Received {
    std::vector<int64_t> steps, frames, evals;
    std::map<std::string, int> events; // tag -> count
    std::map<std::string, std::vector<int64_t>> event_steps;

    void take(const TelemetryBatch& batch)
    {
        for (const auto& m : batch.steps) steps.push_back(m.step);
        for (const auto& f : batch.layer_frames) frames.push_back(f.step);
        for (const auto& e : batch.evals) evals.push_back(e.step);
        for (const auto& e : batch.events) {
            ++events[e.tag()];
            event_steps[e.tag()].push_back(e.step);
        }
    }
    int count(const std::string& tag) const
    {
        const auto it = events.find(tag);
        return it == events.end() ? 0 : it->second;
    }
};

std::vector<int64_t> one_to(int64_t n)
{
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i + 1;
    return v;
}

// A run that is stopped gets steps enough never to finish first.
ProjectConfig config_for(int round, int64_t steps)
{
    ProjectConfig c = tiny_run_config("controller-threads-" + std::to_string(round), steps, 20);
    c.telemetry.interval = 1; // a layer-statistics frame at every step: the busiest hand-over
    c.training.threads = 1;   // LibTorch's own pool is not instrumented
    return c;
}

enum class Ending { Finish, StopRunning, StopPaused };

// A round's drained() handler captures that round's locals: it must not outlive them.
struct Disconnect {
    QMetaObject::Connection connection;
    ~Disconnect() { QObject::disconnect(connection); }
};

} // namespace

class TestControllerThreads : public QObject {
    Q_OBJECT
private slots:
    // Three runs, one after another in one controller, each ended another way. Every step,
    // layer frame and evaluation arrives once, in order, and matches what the store kept; each
    // command comes back as exactly one event.
    void commandsWhileTheGuiDrains_data()
    {
        QTest::addColumn<int>("round");
        QTest::addColumn<int>("ending");
        QTest::newRow("finishes") << 0 << int(Ending::Finish);
        QTest::newRow("stopped-running") << 1 << int(Ending::StopRunning);
        QTest::newRow("stopped-paused") << 2 << int(Ending::StopPaused);
    }
    void commandsWhileTheGuiDrains()
    {
        QFETCH(int, round);
        QFETCH(int, ending);
        const auto end = static_cast<Ending>(ending);
        // The finishing run pauses after 5 steps and must not have ended by then: 400 steps
        // leave room on a machine ten times faster than this one (2.5 ms a step here).
        const int64_t steps = end == Ending::Finish ? 400 : 100000;
        const QString db = dir_.filePath("controller.sqlite");
        TrainingController& c = controller(db);
        Received got;
        // Paused from the drain that brings the 5th step, not from a poll of the test's own:
        // one drain interval later, not up to another poll's.
        bool pauseAtFiveSteps = false;
        const Disconnect connection{connect(&c, &TrainingController::drained, this, [&](const TelemetryBatch& batch) {
            got.take(batch);
            if (pauseAtFiveSteps && got.steps.size() >= 5) {
                pauseAtFiveSteps = false;
                c.pause();
            }
        })};
        QSignalSpy finished(&c, &TrainingController::finished);

        QVERIFY(c.start(config_for(round, steps), QStringLiteral("controller-threads.json")));
        // A pause before the trainer exists is held by the job and applied once it does.
        if (end == Ending::StopRunning) c.pause();
        // A run that ends before it starts (its job failed) says why at once instead of timing out:
        // CI once hung here for 300 s without a word (2026-12-01, not reproduced in 60 runs).
        QTRY_VERIFY_WITH_TIMEOUT(c.runId() > 0 || !c.isRunning(), kWaitMs);
        QVERIFY2(c.runId() > 0, qPrintable(QStringLiteral("the run never started: ") + c.lastError()));
        if (end == Ending::StopRunning) {
            QTRY_VERIFY_WITH_TIMEOUT(got.count("paused") == 1, kWaitMs);
            c.resume();
            QTRY_VERIFY_WITH_TIMEOUT(got.count("resumed") == 1, kWaitMs);
        }
        pauseAtFiveSteps = true;
        QTRY_VERIFY_WITH_TIMEOUT(!pauseAtFiveSteps, kWaitMs);
        QVERIFY(c.isPaused());
        const int paused_before = end == Ending::StopRunning ? 1 : 0;
        QTRY_VERIFY_WITH_TIMEOUT(got.count("paused") == paused_before + 1, kWaitMs);
        QString error;
        const GemmFormats bf16{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16};
        QVERIFY2(c.setLayerFormats(QStringLiteral("blocks.0.mlp.*"), bf16, {}, &error), qPrintable(error));
        QVERIFY2(c.requestCheckpoint(&error), qPrintable(error));
        // Applied while paused, at the step the run paused at.
        QTRY_VERIFY_WITH_TIMEOUT(got.count("precision_changed") == 1 && got.count("checkpoint") == 1, kWaitMs);
        const int64_t paused_at = got.event_steps["paused"].back();
        QCOMPARE(got.event_steps["precision_changed"].front(), paused_at);
        QCOMPARE(got.event_steps["checkpoint"].front(), paused_at);
        QCOMPARE(got.steps.back(), paused_at);

        if (end == Ending::StopPaused) {
            c.stop();
        } else {
            c.resume();
            QTRY_VERIFY_WITH_TIMEOUT(got.count("resumed") == paused_before + 1, kWaitMs);
            if (end == Ending::StopRunning) {
                QTRY_VERIFY_WITH_TIMEOUT(got.steps.size() >= size_t(paused_at + 3), kWaitMs);
                c.stop();
            }
        }
        QVERIFY(finished.count() == 1 || finished.wait(kWaitMs));
        QCOMPARE(finished.count(), 1);
        QVERIFY(!c.isRunning());
        QVERIFY2(c.lastError().isEmpty(), qPrintable(c.lastError()));
        QVERIFY(c.lastStatus() == (end == Ending::Finish ? RunStatus::Finished : RunStatus::Stopped));

        const int64_t n = c.lastSummary().steps_done;
        if (end == Ending::Finish) QCOMPARE(n, steps);
        else QVERIFY(n < steps);
        if (end == Ending::StopPaused) QCOMPARE(n, paused_at);
        QCOMPARE(got.steps, one_to(n));
        QCOMPARE(got.frames, one_to(n));
        std::vector<int64_t> evals; // before the first step, then every 20 (a stop does not evaluate)
        for (int64_t s = 0; s <= n; s += 20) evals.push_back(s);
        QCOMPARE(got.evals, evals);
        QCOMPARE(got.count("checkpoint"), 2); // the one asked for, and the final state's
        QCOMPARE(got.count("run_started"), 1);
        QCOMPARE(got.count("precision_changed"), 1);
        QCOMPARE(got.count("paused"), paused_before + 1);
        QCOMPARE(got.count("resumed"), paused_before + (end == Ending::StopPaused ? 0 : 1));
        QCOMPARE(got.count(end == Ending::Finish ? "run_finished" : "run_stopped"), 1);

        // The store kept the same: each step once, each event once.
        RunStore store(db.toStdString(), OpenMode::ReadOnly);
        std::vector<int64_t> stored;
        for (const auto& [step, loss] : store.series(c.runId(), "train/loss")) stored.push_back(step);
        QCOMPARE(stored, one_to(n));
        std::map<std::string, int> stored_events;
        for (const auto& e : store.events(c.runId())) ++stored_events[e.kind];
        QCOMPARE(stored_events, got.events);
        QCOMPARE(c.runId(), qint64(round + 1));
        QCOMPARE(store.list_run_summaries().size(), size_t(round + 1));
    }

    void cleanupTestCase() { controller_.reset(); }

private:
    // One controller for all rounds: a second start() on it is part of what is checked.
    TrainingController& controller(const QString& db)
    {
        if (!controller_) controller_ = std::make_unique<TrainingController>(db);
        return *controller_;
    }

    QTemporaryDir dir_;
    std::unique_ptr<TrainingController> controller_;
};

QTEST_GUILESS_MAIN(TestControllerThreads)
#include "test_controller_threads.moc"
