// SPDX-License-Identifier: GPL-3.0-or-later
// The hand-overs between threads, under load: the snapshot buffer (training thread -> GUI),
// the command queue (GUI/CLI -> training loop) and the run store's writer thread (appends
// from several threads, flushes, readers). Built without LibTorch so that ThreadSanitizer
// (scripts/sanitize.sh, build/tsan) sees every access; each test also checks that everything
// handed over arrives exactly once.

#include <QtTest>

#include <QTemporaryDir>

#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "command_queue.h"
#include "controller/snapshot_buffer.h"
#include "event_helpers.h"
#include "run_store.h"

using namespace mantissa;

namespace {

StepMetrics step_metrics(int64_t step)
{
    StepMetrics m;
    m.step = step;
    m.train_loss = 1.0 / static_cast<double>(step);
    m.layer_grad_norms = {{"blocks.0.attn.qkv", 0.5 * static_cast<double>(step)}, {"lm_head", 2.0}};
    return m;
}

LayerStatsFrame layer_frame(int64_t step)
{
    LayerStatsFrame f;
    f.step = step;
    TensorStats t;
    t.layer = "blocks.0.mlp.fc";
    t.role = "weight";
    t.format = "e4m3";
    t.exponent_counts.assign(static_cast<size_t>(step % 7 + 1), step);
    t.count = step;
    f.tensors = {t, t};
    return f;
}

} // namespace

class TestThreads : public QObject {
    Q_OBJECT
private slots:
    // A trainer thread pushes at full speed while the GUI thread drains and recycles: every
    // snapshot arrives once, in order, with its contents intact.
    void snapshotBufferHandsEverythingOverOnce()
    {
        constexpr int64_t kSteps = 5000;
        SnapshotBuffer buffer;
        std::atomic<bool> done{false};
        std::thread trainer([&] {
            for (int64_t s = 1; s <= kSteps; ++s) {
                buffer.on_step(step_metrics(s));
                if (s % 10 == 0) buffer.on_layer_stats(layer_frame(s));
                // Every kind at step speed, so that the GUI's take() overlaps each of them.
                buffer.on_eval({s, 1.0, 2.0});
                buffer.on_event(text_event(s, "note", "step " + std::to_string(s)));
            }
            done = true;
        });
        std::vector<int64_t> steps, frames, evals, events;
        int damaged = 0; // snapshots whose contents differ from what was pushed
        bool last_round = false;
        while (!last_round) {
            last_round = done; // one more take after the trainer finished collects the rest
            TelemetryBatch batch = buffer.take();
            for (const auto& m : batch.steps) {
                damaged += m.train_loss != 1.0 / static_cast<double>(m.step) || m.layer_grad_norms.size() != 2 ||
                           m.layer_grad_norms[0].second != 0.5 * static_cast<double>(m.step);
                steps.push_back(m.step);
            }
            for (const auto& f : batch.layer_frames) {
                damaged += f.tensors.size() != 2 ||
                           f.tensors[1].exponent_counts != std::vector<int64_t>(static_cast<size_t>(f.step % 7 + 1), f.step);
                frames.push_back(f.step);
            }
            for (const auto& e : batch.evals) evals.push_back(e.step);
            for (const auto& e : batch.events) events.push_back(e.step);
            buffer.recycle(std::move(batch));
            std::this_thread::yield();
        }
        trainer.join();
        QVERIFY(buffer.take().empty());
        QCOMPARE(damaged, 0);
        QCOMPARE(int64_t(steps.size()), kSteps);
        for (size_t i = 0; i < steps.size(); ++i) QCOMPARE(steps[i], int64_t(i + 1));
        QCOMPARE(int64_t(frames.size()), kSteps / 10);
        for (size_t i = 0; i < frames.size(); ++i) QCOMPARE(frames[i], int64_t(10 * (i + 1)));
        QCOMPARE(int64_t(evals.size()), kSteps);
        QCOMPARE(int64_t(events.size()), kSteps);
        for (size_t i = 0; i < evals.size(); ++i) QCOMPARE(evals[i], int64_t(i + 1));
    }

    // Commands pushed from three threads reach a loop that polls and, while "paused",
    // blocks: each one exactly once, each producer's in its own order.
    void commandQueueDeliversEveryCommandOnce()
    {
        constexpr int kProducers = 3, kEach = 2000;
        CommandQueue queue;
        std::vector<std::thread> producers;
        for (int p = 0; p < kProducers; ++p)
            producers.emplace_back([&queue, p] {
                for (int i = 0; i < kEach; ++i)
                    queue.push({Command::Kind::Checkpoint, std::to_string(p) + ":" + std::to_string(i), {}});
            });
        std::map<int, int> next; // producer -> the index expected next
        for (int received = 0; received < kProducers * kEach; ++received) {
            // Alternate the two ways the training loop takes commands.
            std::optional<Command> c = received % 2 ? queue.try_pop() : std::optional<Command>(queue.wait_pop());
            if (!c) c = queue.wait_pop();
            const auto colon = c->layer_pattern.find(':');
            const int p = std::stoi(c->layer_pattern.substr(0, colon)), i = std::stoi(c->layer_pattern.substr(colon + 1));
            QCOMPARE(i, next[p]);
            ++next[p];
        }
        for (auto& t : producers) t.join();
        QVERIFY(queue.empty());
        for (int p = 0; p < kProducers; ++p) QCOMPARE(next[p], kEach);
    }

    // The last boundary's close, against producers that keep pushing: every push that said
    // true is taken by the loop (it closes only an empty queue, in one step with the check),
    // and every one after the close says false. None is accepted and lost.
    void aClosingQueueLosesNoAcceptedCommand()
    {
        for (int round = 0; round < 20; ++round) {
            CommandQueue queue;
            std::atomic<int> accepted{0};
            std::atomic<bool> go{false};
            std::vector<std::thread> producers;
            for (int p = 0; p < 3; ++p)
                producers.emplace_back([&] {
                    while (!go.load()) std::this_thread::yield();
                    for (int i = 0; i < 20000; ++i)
                        if (queue.push({Command::Kind::Checkpoint, {}, {}})) ++accepted;
                });
            go = true;
            int taken = 0;
            while (accepted.load() < 100) std::this_thread::yield(); // commands are coming in
            while (!queue.close_if_empty()) // the last boundary
                while (queue.try_pop()) ++taken;
            for (auto& t : producers) t.join();
            QVERIFY(!queue.push({Command::Kind::Stop, {}, {}}));
            QCOMPARE(taken, accepted.load());
            QVERIFY(queue.empty());
        }
    }

    // Four threads append to two runs while one flushes now and then and another reads runs,
    // scalars and the writer's error state: every row lands once with its value.
    void storeWriterTakesRowsFromManyThreads()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("threads.sqlite").toStdString();
        constexpr int kThreads = 4;
        constexpr int64_t kRows = 400;
        {
            RunStore store(path);
            const int64_t runs[2] = {store.create_run("a", "p.json", "{}"), store.create_run("b", "p.json", "{}")};
            std::atomic<int> writers_done{0};
            std::vector<std::thread> threads;
            for (int t = 0; t < kThreads; ++t)
                threads.emplace_back([&, t] {
                    const std::string tag = "thread/" + std::to_string(t);
                    for (int64_t step = 1; step <= kRows; ++step) {
                        store.append_scalar(runs[t % 2], step, tag, static_cast<double>(step * 10 + t));
                        if (step % 100 == 0) store.append_event(runs[t % 2], text_event(step, "note", tag));
                        if (t == 0 && step % 97 == 0) store.flush();
                    }
                    ++writers_done;
                });
            std::atomic<int> bad_reads{0}; // QtTest's checks are for the test's own thread only
            std::thread reader([&] {
                while (writers_done < kThreads) {
                    bad_reads += store.list_runs().size() != 2 || store.scalars(runs[0]).size() > size_t(2 * kRows) ||
                                 !store.last_write_error().empty();
                    std::this_thread::yield();
                }
            });
            for (auto& t : threads) t.join();
            reader.join();
            QCOMPARE(bad_reads.load(), 0);
            store.flush();
            store.finish_run(runs[0], RunStatus::Finished);
            store.finish_run(runs[1], RunStatus::Finished);
        }
        RunStore store(path, OpenMode::ReadOnly);
        for (int r = 0; r < 2; ++r) {
            const auto run = store.find_run(r == 0 ? "a" : "b");
            QVERIFY(run);
            std::map<std::string, std::set<int64_t>> steps;
            for (const auto& s : store.scalars(run->id)) {
                const int t = std::stoi(s.tag.substr(std::string("thread/").size()));
                QCOMPARE(t % 2, r);
                QCOMPARE(s.value, static_cast<double>(s.step * 10 + t));
                QVERIFY2(steps[s.tag].insert(s.step).second, "a row was written twice");
            }
            QCOMPARE(steps.size(), size_t(kThreads / 2));
            for (const auto& [tag, seen] : steps) QCOMPARE(int64_t(seen.size()), kRows);
            QCOMPARE(store.events(run->id).size(), size_t(kThreads / 2 * kRows / 100));
        }
    }
};

QTEST_GUILESS_MAIN(TestThreads)
#include "test_threads.moc"
