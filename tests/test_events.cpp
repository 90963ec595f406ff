// SPDX-License-Identifier: GPL-3.0-or-later
// Typed run events: every field survives the JSON codec and the store, messages are
// rendered from the fields, and stores written before typed events are upgraded in place
// with the facts recovered from their text.

#include <QtTest>

#include <algorithm>

#include <QDir>
#include <QTemporaryDir>

#include <sqlite3.h>

#include "legacy_events.h"
#include "run_event.h"
#include "run_store.h"
#include "store_fixtures.h"

using namespace mantissa;

namespace {

const GemmFormats kFp8{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2};
const GemmFormats kBf16{NumberFormat::BF16, NumberFormat::BF16, NumberFormat::BF16};

// One event of every kind with every field its kind uses.
std::vector<RunEvent> one_of_each()
{
    std::vector<RunEvent> out;
    auto add = [&](EventKind kind, int64_t step) -> RunEvent& {
        out.emplace_back();
        out.back().kind = kind;
        out.back().step = step;
        return out.back();
    };
    add(EventKind::RunStarted, 0).text = "2 layers; precision fp8-hybrid";
    add(EventKind::MemoryEstimate, 0).bytes = {{"master weights", 4096}, {"total", int64_t(3) << 30}};
    {
        auto& e = add(EventKind::ResumedFromCheckpoint, 20);
        e.path = "/runs/a.sqlite.checkpoints/run-1/step-00000020.pt";
        e.layer_states = {{"blocks.0.attn.qkv", kFp8, "delayed", ""}};
        e.later_steps_dropped = true;
        e.live_changes_superseded = true;
        e.settings_changed = {{"precision.nvfp4.rht", "true", "false"}, {"training.steps", "25", "30"}};
        e.text = "trained on 2 CPU threads, continuing on 1";
    }
    add(EventKind::Sample, 20).text = "line one\nline two";
    add(EventKind::Paused, 21);
    add(EventKind::Resumed, 21);
    add(EventKind::Checkpoint, 30).path = "/runs/x/step-00000030.pt";
    add(EventKind::CheckpointSkipped, 30).text = "no training.checkpoint_dir set";
    {
        auto& e = add(EventKind::CheckpointFailed, 40);
        e.path = "/full/step-00000040.pt";
        e.text = "No space left on device";
    }
    {
        auto& e = add(EventKind::CheckpointDamaged, 40);
        e.path = "/runs/x/step-00000040.pt";
        e.text = "checksum mismatch";
    }
    add(EventKind::LayerBackends, 1).layer_states = {{"blocks.0.attn.qkv", kFp8, "current", "emulated"},
                                                      {"lm_head", GemmFormats{}, "", "fp32"}};
    {
        auto& e = add(EventKind::PrecisionChanged, 17);
        e.pattern = "blocks.1.mlp.*";
        e.layers = {"blocks.1.mlp.fc1", "blocks.1.mlp.fc2"};
        e.old_formats = kFp8;
        e.new_formats = kBf16;
        e.cause = ChangeCause::Watcher;
        e.watcher = "nonfinite";
        e.layer_states = {{"blocks.1.mlp.fc1", kBf16, "", "emulated"}};
    }
    {
        auto& e = add(EventKind::PrecisionChanged, 18); // a user's change of the recipe too
        e.pattern = "lm_head";
        e.layers = {"lm_head"};
        e.old_formats = kFp8;
        e.new_formats = kFp8;
        e.old_scaling = Fp8Scaling::Delayed;
        e.new_scaling = Fp8Scaling::NvFp4;
        e.layer_states = {{"lm_head", kFp8, "nvfp4", ""}};
    }
    {
        auto& e = add(EventKind::LossScaleBackoff, 9);
        e.old_scale = 65536;
        e.new_scale = 32768;
        e.layers = {"blocks.1.mlp.fc1", "lm_head"};
    }
    {
        auto& e = add(EventKind::LossScaleGrowth, 10);
        e.old_scale = 32768;
        e.new_scale = 65536;
    }
    add(EventKind::StepSkipped, 9).layers = {"lm_head"};
    {
        auto& e = add(EventKind::Alert, 5);
        e.watcher = "fp8_underflow";
        e.layers = {"blocks.0.mlp.fc2"};
        e.role = "grad_output";
        e.text = "7.5% of values flush to zero in e5m2";
    }
    {
        auto& e = add(EventKind::WatchAction, 5);
        e.watcher = "nonfinite";
        e.action = "bf16";
        e.layers = {"blocks.1.attn.proj"};
    }
    add(EventKind::RunFinished, 50);
    add(EventKind::RunStopped, 50);
    add(EventKind::RunFailed, 3).text = "CUDA out of memory";
    return out;
}

void compare_events(const RunEvent& a, const RunEvent& b)
{
    QCOMPARE(a.step, b.step);
    QCOMPARE(int(a.kind), int(b.kind));
    QCOMPARE(a.tag(), b.tag());
    QCOMPARE(a.layers, b.layers);
    QCOMPARE(a.watcher, b.watcher);
    QCOMPARE(a.action, b.action);
    QCOMPARE(a.role, b.role);
    QCOMPARE(a.pattern, b.pattern);
    QCOMPARE(a.old_formats.has_value(), b.old_formats.has_value());
    if (a.old_formats) QVERIFY(*a.old_formats == *b.old_formats);
    QCOMPARE(a.new_formats.has_value(), b.new_formats.has_value());
    if (a.new_formats) QVERIFY(*a.new_formats == *b.new_formats);
    if (a.kind == EventKind::PrecisionChanged) QCOMPARE(int(a.cause), int(b.cause));
    QVERIFY(a.old_scaling == b.old_scaling);
    QVERIFY(a.new_scaling == b.new_scaling);
    QCOMPARE(std::isnan(a.old_scale), std::isnan(b.old_scale));
    if (!std::isnan(a.old_scale)) QCOMPARE(a.old_scale, b.old_scale);
    QCOMPARE(std::isnan(a.new_scale), std::isnan(b.new_scale));
    if (!std::isnan(a.new_scale)) QCOMPARE(a.new_scale, b.new_scale);
    QCOMPARE(a.path, b.path);
    QCOMPARE(a.bytes, b.bytes);
    QVERIFY(a.layer_states == b.layer_states);
    QCOMPARE(a.text, b.text);
    QCOMPARE(a.later_steps_dropped, b.later_steps_dropped);
    QCOMPARE(a.live_changes_superseded, b.live_changes_superseded);
    QVERIFY(a.settings_changed == b.settings_changed);
    QCOMPARE(a.message(), b.message());
}

const RunEvent* find(const std::vector<EventRow>& rows, const std::string& tag, size_t nth = 0)
{
    for (const auto& r : rows)
        if (r.event.tag() == tag && nth-- == 0) return &r.event;
    return nullptr;
}

} // namespace

class TestEvents : public QObject {
    Q_OBJECT
private slots:
    void everyKindHasAStableTag()
    {
        for (const auto& e : one_of_each()) {
            const auto parsed = parse_event_kind(e.tag());
            QVERIFY2(parsed.has_value(), e.tag().c_str());
            QCOMPARE(int(*parsed), int(e.kind));
        }
        QCOMPARE(std::string(event_kind_name(EventKind::LossScaleBackoff)), std::string("loss_scale_backoff"));
        QVERIFY(!parse_event_kind("no_such_kind").has_value());
    }

    void fieldsSurviveTheJsonCodec()
    {
        for (const auto& e : one_of_each()) {
            const RunEvent back = event_from_stored(e.step, e.tag(), event_fields_json(e), e.message());
            compare_events(e, back);
        }
    }

    void messagesAreRenderedFromTheFields()
    {
        const auto all = one_of_each();
        auto message_of = [&](EventKind kind) {
            for (const auto& e : all)
                if (e.kind == kind) return e.message();
            return std::string();
        };
        QCOMPARE(message_of(EventKind::LossScaleBackoff),
                 std::string("scale 65536 -> 32768; non-finite gradients in blocks.1.mlp.fc1, lm_head"));
        QCOMPARE(message_of(EventKind::LossScaleGrowth), std::string("scale 32768 -> 65536"));
        // Delayed-scaling histories are named only where a changed layer now scales so (they said
        // it of layers leaving FP8, and of nvfp4's): older events, which do not say, keep it.
        QCOMPARE(message_of(EventKind::PrecisionChanged),
                 std::string("blocks.1.mlp.* -> bf16/bf16/bf16 (blocks.1.mlp.fc1, blocks.1.mlp.fc2) by watcher "
                             "nonfinite"));
        RunEvent formats_only;
        formats_only.kind = EventKind::PrecisionChanged;
        formats_only.pattern = "lm_head";
        formats_only.new_formats = GemmFormats::all(NumberFormat::E4M3);
        formats_only.layers = {"lm_head"};
        const std::string delayed_said = "lm_head -> e4m3/e4m3/e4m3 (lm_head); delayed-scaling histories restart "
                                         "where a cast's format changed";
        QCOMPARE(formats_only.message(), delayed_said); // no layer states: as older events
        formats_only.layer_states = {{"lm_head", GemmFormats::all(NumberFormat::E4M3), "delayed", ""}};
        QCOMPARE(formats_only.message(), delayed_said);
        // A switch that keeps an FP4 recipe says what its FP8 formats run as: "-> e4m3/e4m3/e4m3" alone
        // read as an FP8 switch that never happened.
        formats_only.layer_states[0].recipe = "nvfp4";
        QCOMPARE(formats_only.message(),
                 std::string("lm_head -> e4m3/e4m3/e4m3 (lm_head); runs as e2m1/e2m1/e2m1 under the layer's nvfp4 "
                             "scaling"));
        const auto recipe_switch = std::find_if(all.begin(), all.end(), [](const RunEvent& e) {
            return e.kind == EventKind::PrecisionChanged && e.new_scaling;
        });
        QVERIFY(recipe_switch != all.end());
        // ... and so does a switch to an FP4 recipe (it named the FP8 formats it was given).
        QCOMPARE(recipe_switch->message(), std::string("lm_head -> e2m1/e2m1/e2m1 with nvfp4 scaling (lm_head); FP8 "
                                                       "scales start afresh under the new recipe"));
        // A layer given a new recipe on its way to BF16 has no FP8 scales to start (a resume's
        // replay under another precision.fp8.scaling said it did).
        RunEvent to_bf16 = *recipe_switch;
        to_bf16.new_formats = GemmFormats::all(NumberFormat::BF16);
        to_bf16.layer_states = {{"lm_head", GemmFormats::all(NumberFormat::BF16), "", ""}};
        QCOMPARE(to_bf16.message(), std::string("lm_head -> bf16/bf16/bf16 with nvfp4 scaling (lm_head)"));
        QCOMPARE(message_of(EventKind::Alert), std::string("blocks.0.mlp.fc2: 7.5% of values flush to zero in e5m2"));
        QCOMPARE(message_of(EventKind::WatchAction), std::string("nonfinite: switched blocks.1.attn.proj to bf16"));
        QCOMPARE(message_of(EventKind::MemoryEstimate), std::string("master weights 4 KiB; total 3072 MiB"));
        QCOMPARE(message_of(EventKind::RunFinished), std::string("finished 50 steps"));
        QCOMPARE(message_of(EventKind::ResumedFromCheckpoint),
                 std::string("continuing at step 20 from /runs/a.sqlite.checkpoints/run-1/step-00000020.pt; settings "
                             "changed: precision.nvfp4.rht true -> false, training.steps 25 -> 30; trained on 2 CPU "
                             "threads, continuing on 1"));
        QCOMPARE(message_of(EventKind::LayerBackends),
                 std::string("blocks.0.attn.qkv e4m3/e5m2/e5m2 current emulated; lm_head fp32/fp32/fp32 fp32"));
        // Under nvfp4 and mxfp4 a GEMM named FP8 computes in E2M1, and says so (the table does).
        RunEvent fp4;
        fp4.kind = EventKind::LayerBackends;
        fp4.layer_states = {{"blocks.0.mlp.fc1", {NumberFormat::E4M3, NumberFormat::BF16, NumberFormat::E5M2}, "nvfp4",
                             "emulated"}};
        QCOMPARE(fp4.message(), std::string("blocks.0.mlp.fc1 e2m1/bf16/e2m1 nvfp4 emulated"));
    }

    // What readers use comes from the fields: a stored message that says something else
    // (a reworded or translated message) changes nothing they read.
    void readersNeverParseTheMessage()
    {
        RunEvent e;
        e.kind = EventKind::LossScaleBackoff;
        e.step = 4;
        e.old_scale = 1024;
        e.new_scale = 512;
        e.layers = {"lm_head"};
        const RunEvent back = event_from_stored(4, e.tag(), event_fields_json(e), "Skalierung halbiert");
        QCOMPARE(back.old_scale, 1024.0);
        QCOMPARE(back.layers, std::vector<std::string>{"lm_head"});
    }

    void typedEventsRoundTripThroughTheStore()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("runs.sqlite").toStdString();
        const auto events = one_of_each();
        int64_t id = 0;
        {
            RunStore store(path);
            id = store.create_run("typed", "", "{}");
            StoreSink sink(store, id);
            for (const auto& e : events) sink.on_event(e);
        }
        RunStore store(path);
        const auto rows = store.events(id);
        QCOMPARE(rows.size(), events.size());
        for (size_t i = 0; i < rows.size(); ++i) {
            compare_events(events[i], rows[i].event);
            QCOMPARE(rows[i].kind, events[i].tag());
            QCOMPARE(rows[i].message, events[i].message());
        }
    }

    void version3StoreIsUpgradedWithItsFactsRecovered()
    {
        QTemporaryDir dir;
        const QString db = dir.filePath("v3.sqlite");
        QVERIFY(load_store_fixture(db.toStdString(), "run_store_v3.sql"));
        RunStore store(db.toStdString());
        QCOMPARE(store.schema_version(), RunStore::kSchemaVersion);
        const auto rows = store.events(1);
        QCOMPARE(rows.size(), size_t(14));

        const RunEvent* backoff = find(rows, "loss_scale_backoff");
        QVERIFY(backoff);
        QCOMPARE(backoff->old_scale, 65536.0);
        QCOMPARE(backoff->new_scale, 32768.0);
        QCOMPARE(backoff->layers, (std::vector<std::string>{"blocks.1.mlp.fc1", "lm_head"}));
        const RunEvent* growth = find(rows, "loss_scale_growth");
        QCOMPARE(growth->old_scale, 32768.0);
        QCOMPARE(growth->new_scale, 65536.0);
        QCOMPARE(find(rows, "step_skipped")->layers, std::vector<std::string>{"lm_head"});
        QCOMPARE(find(rows, "checkpoint")->path, std::string("/data/runs/checkpoints/run-1/step-00000001.pt"));

        const RunEvent* change = find(rows, "precision_changed");
        QCOMPARE(change->pattern, std::string("blocks.1.mlp.*"));
        QVERIFY(change->new_formats && *change->new_formats == kBf16);
        QCOMPARE(change->layers, (std::vector<std::string>{"blocks.1.mlp.fc1", "blocks.1.mlp.fc2"}));

        const RunEvent* underflow = find(rows, "alert_fp8_underflow");
        QCOMPARE(underflow->watcher, std::string("fp8_underflow"));
        QCOMPARE(underflow->layers, std::vector<std::string>{"blocks.0.mlp.fc2"});
        const RunEvent* spike = find(rows, "alert_loss_spike");
        QVERIFY(spike->layers.empty()); // a global alert names no layer
        QCOMPARE(spike->text, std::string("loss 3.86 is 4.1 sigma above its EMA 2.31"));

        const RunEvent* sw = find(rows, "watch_action", 0);
        QCOMPARE(sw->watcher, std::string("nonfinite"));
        QCOMPARE(sw->action, std::string("bf16"));
        QCOMPARE(sw->layers, std::vector<std::string>{"blocks.1.attn.proj"});
        QCOMPARE(find(rows, "watch_action", 1)->action, std::string("pause"));

        const RunEvent* backends = find(rows, "layer_backends");
        QCOMPARE(backends->layer_states.size(), size_t(2));
        QCOMPARE(backends->layer_states[0].name, std::string("blocks.0.attn.qkv"));
        QVERIFY(backends->layer_states[0].formats == kFp8);
        QCOMPARE(backends->layer_states[0].backend, std::string("emulated"));

        // A kind this version does not know is kept as it was written.
        const RunEvent* future = find(rows, "some_future_kind");
        QVERIFY(future);
        QCOMPARE(int(future->kind), int(EventKind::Other));
        QCOMPARE(future->message(), std::string("kept as it was"));
        // Text-only kinds keep their text; the rendered messages match what v3 stored where
        // the facts are the same (scales print without the old trailing zeros).
        QCOMPARE(find(rows, "sample")->text, std::string("To be, or not"));
        QCOMPARE(rows.back().event.message(), std::string("finished 2 steps"));
        QCOMPARE(backoff->message(),
                 std::string("scale 65536 -> 32768; non-finite gradients in blocks.1.mlp.fc1, lm_head"));
        // Tags of the v3 run survive the upgrade.
        QCOMPARE(store.tags(1), std::vector<std::string>{"baseline"});
        QCOMPARE(store.list_run_summaries()[0].live_switches, int64_t(1)); // the change above
    }

    // A version-3 store on a read-only share cannot be upgraded: its events still read typed,
    // their facts taken from the text as the upgrade would, and the file stays as it was.
    void readOnlyVersion3StoreReadsTypedEvents()
    {
        QTemporaryDir dir;
        const std::string db = dir.filePath("v3.sqlite").toStdString();
        QVERIFY(load_store_fixture(db, "run_store_v3.sql"));
        QFile before(QString::fromStdString(db));
        QVERIFY(before.open(QIODevice::ReadOnly));
        const QByteArray bytes = before.readAll();
        {
            const auto store = RunStore::open_read_only(db);
            QCOMPARE(store->schema_version(), 3);
            const auto rows = store->events(1);
            QCOMPARE(rows.size(), size_t(14));
            const RunEvent* backoff = find(rows, "loss_scale_backoff");
            QVERIFY(backoff);
            QCOMPARE(backoff->new_scale, 32768.0);
            QCOMPARE(backoff->layers, (std::vector<std::string>{"blocks.1.mlp.fc1", "lm_head"}));
            QVERIFY(store->checkpoints(1).empty());
            QCOMPARE(store->list_run_summaries()[0].live_switches, int64_t(1)); // from the text
        }
        QFile after(QString::fromStdString(db));
        QVERIFY(after.open(QIODevice::ReadOnly));
        QCOMPARE(after.readAll(), bytes);
        QCOMPARE(QDir(dir.path()).entryList(QDir::Files).size(), 1); // no -wal, -shm or lock files
    }

    // The older fixtures go through every upgrade and still read.
    void version1And2StoresReachTheCurrentSchema_data()
    {
        QTest::addColumn<QString>("fixture");
        QTest::newRow("v1") << "run_store_v1.sql";
        QTest::newRow("v2") << "run_store_v2.sql";
    }
    void version1And2StoresReachTheCurrentSchema()
    {
        QFETCH(QString, fixture);
        QTemporaryDir dir;
        const QString db = dir.filePath("old.sqlite");
        QVERIFY(load_store_fixture(db.toStdString(), fixture.toUtf8().constData()));
        RunStore store(db.toStdString());
        QCOMPARE(store.schema_version(), RunStore::kSchemaVersion);
        const auto runs = store.list_runs();
        QVERIFY(!runs.empty());
        for (const auto& run : runs)
            for (const auto& row : store.events(run.id)) QCOMPARE(row.event.message(), row.message);
    }
};

QTEST_GUILESS_MAIN(TestEvents)
#include "test_events.moc"
