// SPDX-License-Identifier: GPL-3.0-or-later
// Comparing saved runs: config diff, divergence step, run summaries and tags in the store,
// sweep planning and its summary relative to FP32, and the schema 2 -> 3 upgrade.

#include <QtTest>

#include <bit>

#include <QTemporaryDir>

#include <cmath>
#include <filesystem>

#include <sqlite3.h>

#include "event_helpers.h"
#include "config_diff.h"
#include "project_config.h"
#include "run_compare.h"
#include "run_store.h"
#include "store_fixtures.h"
#include "sweep.h"
#include "unread_settings.h"

using namespace mantissa;

namespace {

using Values = std::vector<std::optional<std::string>>;

std::string str(const std::optional<std::string>& v) { return v ? *v : std::string("(absent)"); }

// "key: a | b" lines, so a mismatch shows the whole diff at once.
QStringList describe(const std::vector<ConfigDifference>& diff)
{
    QStringList out;
    for (const auto& d : diff) out << QString::fromStdString(d.key + ": " + str(d.a) + " | " + str(d.b));
    return out;
}

const char* kTinyProject = R"({
  "name": "tiny",
  "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context_length": 16},
  "data": {"kind": "synthetic-addition", "digits": 2, "examples": 600},
  "training": {"steps": 20, "batch_size": 4, "seed": 7}
})";

RunSummaryRow summary(double final_val, double tokens_per_s, int64_t rss, const std::string& preset = "bf16",
                      int64_t overrides = 0)
{
    RunSummaryRow r;
    r.final_val_loss = final_val;
    r.median_tokens_per_s = tokens_per_s;
    r.peak_resident_bytes = rss;
    r.preset = preset;
    r.layer_overrides = overrides;
    return r;
}

} // namespace

class TestCompare : public QObject {
    Q_OBJECT
private slots:
    // --- config diff -------------------------------------------------------------------
    void diffShowsExactlyTheDifferingKeys()
    {
        const std::string a = R"({"name": "x", "model": {"n_layer": 2, "n_embd": 64},
            "optimizer": {"learning_rate": 1, "eps": 1e-8},
            "precision": {"preset": "fp32", "layers": [{"match": "lm_head", "format": "bf16"}]},
            "shape": [1, 2, 3], "only_a": true, "flag": true, "same_list": [4, 5]})";
        const std::string b = R"({"name": "x", "model": {"n_layer": 4, "n_embd": 64},
            "optimizer": {"learning_rate": 1.0, "eps": 1e-8},
            "precision": {"preset": "bf16", "layers": [{"match": "lm_head", "format": "fp16"}, {"match": "blocks.*"}]},
            "shape": [1, 2], "only_b": "s", "flag": 1, "same_list": [4, 5]})";
        QCOMPARE(describe(diff_configs(a, b)), (QStringList{
                                                   "model.n_layer: 2 | 4",
                                                   "precision.preset: fp32 | bf16",
                                                   "precision.layers[0].format: bf16 | fp16",
                                                   "shape[2]: 3 | (absent)",
                                                   "only_a: true | (absent)",
                                                   "flag: true | 1",
                                                   "precision.layers[1].match: (absent) | blocks.*",
                                                   "only_b: (absent) | s",
                                               }));
        // Reversed, the same keys with the sides swapped; first-seen order follows the first config.
        QCOMPARE(describe(diff_configs(b, a)).size(), 8);
        QVERIFY(diff_configs(a, a).empty());
    }

    void diffComparesNumbersByValueAndTypesStrictly()
    {
        QVERIFY(diff_configs(R"({"x": 1, "y": 0.5, "z": -3})", R"({"x": 1.0, "y": 0.50, "z": -3.0})").empty());
        QCOMPARE(describe(diff_configs(R"({"x": 1, "s": "1", "n": null})", R"({"x": 1.5, "s": 1, "n": 0})")),
                 (QStringList{"x: 1 | 1.5", "s: 1 | 1", "n: null | 0"}));
        // An empty list against entries: the entries' rows, "(none)" on the empty side (the
        // list is there, and empty), and no row of the list's own to say it twice.
        QCOMPARE(describe(diff_configs(R"({"layers": []})", R"({"layers": [{"match": "lm_head"}]})")),
                 (QStringList{"layers[0].match: (none) | lm_head"}));
        QCOMPARE(describe(diff_configs(R"({"o": {}})", R"({"o": {"k": [1]}})")),
                 (QStringList{"o.k[0]: (none) | 1"}));
        // Empty against missing is still a difference of its own; a missing parent is "(absent)".
        QCOMPARE(describe(diff_configs(R"({"layers": [], "x": 1})", R"({"x": 1})")),
                 (QStringList{"layers: [] | (absent)"}));
        QCOMPARE(describe(diff_configs(R"({"x": 1})", R"({"x": 1, "o": {"k": 1}})")), (QStringList{"o.k: (absent) | 1"}));
    }

    void diffOfSeveralConfigs()
    {
        const auto diff = diff_configs(std::vector<std::string>{
            R"({"a": 1, "b": {"c": "x"}})", R"({"a": 1, "b": {"c": "x"}})", R"({"a": 2, "b": {"c": "x"}, "d": false})"});
        QCOMPARE(diff.size(), size_t(2));
        QCOMPARE(diff[0].key, std::string("a"));
        QCOMPARE(diff[0].values, (Values{"1", "1", "2"}));
        QCOMPARE(diff[1].key, std::string("d"));
        QCOMPARE(diff[1].values, (Values{std::nullopt, std::nullopt, "false"}));
        QVERIFY(diff_configs(std::vector<std::string>{R"({"a": 1})"}).empty());
    }

    void diffRefusesInvalidJson()
    {
        try {
            diff_configs(R"({"a": 1})", "{not json");
            QFAIL("accepted invalid JSON");
        } catch (const ConfigError& e) {
            QVERIFY2(QString(e.what()).startsWith("config diff: config 2 is not valid JSON"), e.what());
        }
    }

    // --- divergence and alignment ---------------------------------------------------------
    void divergenceStepOnCraftedRuns()
    {
        // a: 8, 7, ..., 1 at steps 1..8; b equal until step 3, then 0.5 higher (exact in binary).
        Series a, b;
        for (int64_t s = 1; s <= 8; ++s) {
            a.emplace_back(s, 9.0 - static_cast<double>(s));
            b.emplace_back(s, 9.0 - static_cast<double>(s) + (s >= 4 ? 0.5 : 0.0));
        }
        QCOMPARE(first_divergence_step(a, b, 0.25, false), std::optional<int64_t>(4));
        QCOMPARE(first_divergence_step(a, b, 0.5, false), std::optional<int64_t>()); // 0.5 is not > 0.5
        QCOMPARE(first_divergence_step(b, a, 0.25, false), std::optional<int64_t>(4));
        // Relative: 0.5 against max(|a|,|b|) = 5.5, 4.5, ... at steps 4, 5, ...
        QCOMPARE(first_divergence_step(a, b, 0.1, true), std::optional<int64_t>(5));  // 0.5 > 0.45
        QCOMPARE(first_divergence_step(a, b, 0.2, true), std::optional<int64_t>(8));  // 0.5 > 0.3 only at 1 vs 1.5
        QCOMPARE(first_divergence_step(a, b, 0.34, true), std::optional<int64_t>());

        // Only steps both runs have count: b without steps 4 and 5 diverges at 6.
        Series sparse;
        for (const auto& p : b)
            if (p.first != 4 && p.first != 5) sparse.push_back(p);
        QCOMPARE(first_divergence_step(a, sparse, 0.25, false), std::optional<int64_t>(6));
        QCOMPARE(first_divergence_step(a, Series{{100, 1.0}}, 0.25, false), std::optional<int64_t>());

        // A run that blew up diverges where its loss stops being finite; two blown-up runs agree.
        const double nan = std::nan("");
        QCOMPARE(first_divergence_step({{1, 2.0}, {2, 1.0}}, {{1, 2.0}, {2, nan}}, 10.0, false),
                 std::optional<int64_t>(2));
        QCOMPARE(first_divergence_step({{1, nan}, {2, 1.0}}, {{1, nan}, {2, 1.0}}, 0.0, false),
                 std::optional<int64_t>());
    }

    void smoothingAndAlignment()
    {
        QCOMPARE(ema_smooth({{1, 3.0}, {2, 5.0}}, 0.0), (Series{{1, 3.0}, {2, 5.0}}));
        // Debiased: a constant stays constant from the first point on.
        QCOMPARE(ema_smooth({{1, 2.0}, {2, 2.0}, {3, 2.0}}, 0.9), (Series{{1, 2.0}, {2, 2.0}, {3, 2.0}}));
        const auto smooth = ema_smooth({{1, 0.0}, {2, 2.0}}, 0.5);
        QCOMPARE(smooth[0].second, 0.0);
        QCOMPARE(smooth[1].second, 1.0 / 0.75); // (0.5 * 0 + 0.5 * 2) / (1 - 0.25)
        // Smoothing can hide step noise from the divergence test.
        const Series noisy_a = {{1, 1.0}, {2, 1.0}, {3, 1.0}, {4, 1.0}};
        const Series noisy_b = {{1, 1.0}, {2, 1.4}, {3, 1.0}, {4, 1.0}};
        QCOMPARE(first_divergence_step(noisy_a, noisy_b, 0.3, false), std::optional<int64_t>(2));
        QCOMPARE(first_divergence_step(ema_smooth(noisy_a, 0.6), ema_smooth(noisy_b, 0.6), 0.3, false),
                 std::optional<int64_t>());

        const auto aligned = align_on_steps({{1, 1.0}, {2, 2.0}, {4, 4.0}}, {{2, 20.0}, {3, 30.0}, {4, 40.0}});
        QCOMPARE(aligned.size(), size_t(2));
        QCOMPARE(aligned[0].step, int64_t(2));
        QCOMPARE(aligned[0].a, 2.0);
        QCOMPARE(aligned[1].b, 40.0);

        QCOMPARE(
            tokens_per_step(R"({"training": {"batch_size": 4, "grad_accum": 2}, "model": {"context_length": 16}})"),
            128.0);
        const auto by_tokens = series_by_tokens({{3, 1.5}}, 128.0);
        QCOMPARE(by_tokens[0].x, 384.0);
        // A run resumed after step 4 with 4x the batch: 100 tokens a step, then 400. Recorded
        // every 2 steps (tokens/s x ms = the step's tokens; 1/3 s steps test the rounding).
        const Series rate = {{2, 300.0}, {4, 100.0}, {6, 1200.0}, {8, 400.0}};
        const Series ms = {{2, 1000.0 / 3.0}, {4, 1000.0}, {6, 1000.0 / 3.0}, {8, 1000.0}};
        const auto recorded = series_by_recorded_tokens({{0, 9.0}, {3, 1.0}, {4, 2.0}, {6, 3.0}, {8, 4.0}, {10, 5.0}},
                                                        rate, ms, 256.0);
        QCOMPARE(recorded.size(), size_t(6));
        QCOMPARE(recorded[0].x, 0.0);    // before any step
        QCOMPARE(recorded[1].x, 300.0);  // 2 x 100, then step 3 at the next record's 100
        QCOMPARE(recorded[2].x, 400.0);
        QCOMPARE(recorded[3].x, 1200.0); // + 2 x 400
        QCOMPARE(recorded[4].x, 2000.0);
        QCOMPARE(recorded[5].x, 2512.0); // past the last record: the config's 256 a step
        QCOMPARE(series_by_recorded_tokens({{3, 1.5}}, {}, {}, 128.0)[0].x, 384.0); // nothing recorded
        const auto by_time = series_by_seconds({{2, 5.0}, {3, 4.0}}, {{1, 1000.0}, {2, 500.0}, {3, 250.0}});
        QCOMPARE(by_time[0].x, 1.5);
        QCOMPARE(by_time[1].x, 1.75);
        // b interpolated at a's x, only where both cover it.
        const auto xy = align_on_x({{0, 1.0}, {10, 2.0}, {15, 3.0}, {20, 4.0}}, {{5, 1.0}, {15, 3.0}});
        QCOMPARE(xy.size(), size_t(2));
        QCOMPARE(xy[0].x, 10.0);
        QCOMPARE(xy[0].b, 2.0);
        QCOMPARE(xy[1].x, 15.0);
        QCOMPARE(xy[1].b, 3.0);
    }

    // --- summaries and tags in the store ----------------------------------------------------
    void summariesFromCraftedRuns()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("r.sqlite").toStdString());
        const auto a = store.create_run(
            "alpha", "p.json", R"({"precision": {"preset": "fp32", "layers": [], "fp8": {"scaling": "delayed"}}})");
        for (int64_t s = 1; s <= 10; ++s) store.append_scalar(a, s, "train/loss", 4.0 - 0.25 * static_cast<double>(s));
        store.append_scalar(a, 0, "val/loss", 3.0);
        store.append_scalar(a, 5, "val/loss", 2.0);
        store.append_scalar(a, 10, "val/loss", 2.5);
        const double tps[] = {100, 1000, 300, 200, 400};
        for (int64_t s = 1; s <= 5; ++s) store.append_scalar(a, s, "tokens_per_s", tps[s - 1]);
        store.append_scalar(a, 3, "skipped", 1.0);
        store.append_scalar(a, 4, "skipped", 1.0);
        store.append_scalar(a, 1, "memory/resident_bytes", 1000.0);
        store.append_scalar(a, 5, "memory/resident_bytes", 5000.0);
        store.append_scalar(a, 10, "memory/resident_bytes", 3000.0);
        store.add_tags(a, {"b", " a ", "a"});
        store.finish_run(a, RunStatus::Finished);

        const auto b = store.create_run(
            "beta", "p.json",
            R"({"precision": {"preset": "fp8-hybrid", "fp8": {"scaling": "current"},
                "layers": [{"match": "lm_head", "format": "bf16"}, {"match": "blocks.0.*", "format": "bf16"}]}})");
        const double tps_b[] = {1, 10, 3, 2};
        for (int64_t s = 1; s <= 4; ++s) {
            store.append_scalar(b, s, "train/loss", 1.0);
            store.append_scalar(b, s, "tokens_per_s", tps_b[s - 1]);
        }
        store.append_scalar(b, 2, "memory/resident_bytes", 100.0);
        store.append_scalar(b, 2, "memory/cuda_peak_bytes", 7000.0);
        store.append_scalar(b, 4, "memory/cuda_peak_bytes", 6000.0);
        store.add_tags(b, {"b"});

        store.append_scalar(a, 7, "memory/cuda_peak_bytes", INFINITY); // not a size: read as unknown
        const auto c = store.create_run("gamma", "", R"({"precision": {"preset": "bf16", "layers": [
            {"match": "lm_head", "forward": "e4m3"}], "fp8": {"scaling": "delayed"}}})");
        store.append_scalar(c, 3, "val/loss", 1.5);
        store.append_scalar(c, 5, "val/loss", std::nan("")); // SQLite keeps NaN as NULL
        // Switched while it trained: by the user and by a watcher. A resume's replay of the user's
        // switch is the same change made again, and counts once.
        for (const auto cause : {ChangeCause::User, ChangeCause::Watcher, ChangeCause::Resume}) {
            RunEvent change = text_event(2, "precision_changed", "");
            change.pattern = "lm_head";
            change.new_formats = GemmFormats::all(NumberFormat::BF16);
            change.cause = cause;
            store.append_event(c, change);
        }
        // A resume's --set of the preset switches each layer at its step: one switch, not one a layer.
        for (const char* layer : {"blocks.0.mlp.fc1", "blocks.0.mlp.fc2", "lm_head"}) {
            RunEvent change = text_event(4, "precision_changed", "");
            change.pattern = layer;
            change.new_formats = GemmFormats::all(NumberFormat::FP16);
            store.append_event(c, change);
        }
        store.finish_run(c, RunStatus::Failed);

        const auto rows = store.list_run_summaries();
        QCOMPARE(rows.size(), size_t(3));
        const RunSummaryRow& ra = rows[0];
        QCOMPARE(ra.id, a);
        QCOMPARE(ra.name, std::string("alpha"));
        QCOMPARE(ra.project_path, std::string("p.json"));
        QCOMPARE(status_text(ra.status), std::string("finished"));
        QVERIFY(!ra.finished_at.empty());
        QCOMPARE(ra.tags, (std::vector<std::string>{"a", "b"}));
        QCOMPARE(ra.recipe, std::string("fp32"));
        QVERIFY(ra.is_fp32());
        RunSummaryRow switched = ra;
        switched.live_switches = 1;
        QVERIFY(!switched.is_fp32()); // an FP32 run switched while it trained is no FP32 reference
        QCOMPARE(ra.steps_done, int64_t(10));
        QCOMPARE(ra.final_train_loss, 1.5);
        QCOMPARE(ra.final_val_loss, 2.5);
        QCOMPARE(ra.final_val_step, int64_t(10));
        QCOMPARE(ra.best_val_loss, 2.0);
        QCOMPARE(ra.best_val_step, int64_t(5));
        QCOMPARE(ra.median_tokens_per_s, 300.0);
        QCOMPARE(ra.skipped_steps, int64_t(2));
        QCOMPARE(ra.peak_resident_bytes, int64_t(5000));
        QCOMPARE(ra.peak_cuda_bytes, int64_t(-1));
        QCOMPARE(ra.peak_memory_bytes(), int64_t(5000));

        const RunSummaryRow& rb = rows[1];
        QCOMPARE(status_text(rb.status), std::string("running"));
        QCOMPARE(rb.finished_at, std::string());
        QCOMPARE(rb.recipe, std::string("fp8-hybrid (current) + 2 overrides"));
        QCOMPARE(rb.preset, std::string("fp8-hybrid"));
        QCOMPARE(rb.layer_overrides, int64_t(2));
        QVERIFY(!rb.is_fp32());
        QVERIFY(std::isnan(rb.final_val_loss));
        QVERIFY(std::isnan(rb.best_val_loss));
        QCOMPARE(rb.final_val_step, int64_t(-1));
        QCOMPARE(rb.median_tokens_per_s, 2.5); // even count: mean of the middle two
        QCOMPARE(rb.skipped_steps, int64_t(0));
        QCOMPARE(rb.peak_resident_bytes, int64_t(100));
        QCOMPARE(rb.peak_memory_bytes(), int64_t(7000)); // the CUDA peak wins
        QCOMPARE(rb.tags, (std::vector<std::string>{"b"}));

        const RunSummaryRow& rc = rows[2];
        // An FP8 override names the scaling; the switches say that the run left its recipe.
        QCOMPARE(rc.recipe, std::string("bf16 (delayed) + 1 override, 3 live switches"));
        QCOMPARE(rc.live_switches, int64_t(3));
        QCOMPARE(ra.live_switches, int64_t(0));
        QCOMPARE(rc.steps_done, int64_t(0));
        QVERIFY(std::isnan(rc.final_train_loss));
        QVERIFY(std::isnan(rc.final_val_loss)); // the last evaluation was NaN
        QCOMPARE(rc.final_val_step, int64_t(5));
        QCOMPARE(rc.best_val_loss, 1.5);
        QCOMPARE(rc.best_val_step, int64_t(3));
        QVERIFY(std::isnan(rc.median_tokens_per_s));
        QCOMPARE(rc.peak_memory_bytes(), int64_t(-1));
        QVERIFY(rc.tags.empty());

        const auto ids = [&](const RunFilter& f) {
            std::vector<int64_t> out;
            for (const auto& r : store.list_run_summaries(f)) out.push_back(r.id);
            return out;
        };
        RunFilter f;
        f.tags = {"b"};
        QCOMPARE(ids(f), (std::vector<int64_t>{a, b}));
        f.tags = {"a", "b"};
        QCOMPARE(ids(f), (std::vector<int64_t>{a}));
        f = {};
        f.status = RunStatus::Failed;
        QCOMPARE(ids(f), (std::vector<int64_t>{c}));
        f = {};
        f.name_contains = "eta"; // beta
        QCOMPARE(ids(f), (std::vector<int64_t>{b}));
        f = {};
        f.preset = "bf16";
        QCOMPARE(ids(f), (std::vector<int64_t>{c}));
        f = {};
        f.ids = {c, a};
        QCOMPARE(ids(f), (std::vector<int64_t>{a, c}));
        QCOMPARE(store.list_run_summaries(f)[0].median_tokens_per_s, 300.0); // filtered queries keep their medians
        f.ids = {999};
        QVERIFY(store.list_run_summaries(f).empty());

        // The series a plot draws.
        QCOMPARE(store.series(a, "val/loss"), (Series{{0, 3.0}, {5, 2.0}, {10, 2.5}}));
        const auto nan_series = store.series(c, "val/loss");
        QCOMPARE(nan_series.size(), size_t(2));
        QVERIFY(std::isnan(nan_series[1].second));
        QVERIFY(store.series(a, "no/such").empty());
    }

    // With a cache, a refresh reads only the tokens/s rows added since the last one, and the
    // medians are those of a full read, bit for bit: as a run grows, after a resume that
    // discarded and retrained steps (values changed below the last step read), after the steps
    // went back, and in another store.
    // The recipe column names the recipes the FP8 layers run, a precision.layers entry's own
    // included (it named the project's delayed for a bf16 run whose MLPs ran nvfp4), and the
    // last blocks kept in BF16.
    void recipeColumnNamesWhatTheLayersRun()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("runs.sqlite").toStdString());
        store.create_run("mixed", "", R"({"model": {"n_layer": 2}, "precision": {"preset": "bf16", "layers": [
            {"match": "lm_head", "format": "e4m3", "scaling": "mxfp4"},
            {"match": "blocks.*.mlp.*", "format": "e4m3", "scaling": "nvfp4"}]}})");
        store.create_run("kept", "", R"({"model": {"n_layer": 2}, "precision": {"preset": "fp8-e4m3",
            "keep_last_bf16": 1, "fp8": {"scaling": "nvfp4"}}})");
        store.create_run("unread", "", R"({"precision": {"preset": "bf16", "fp8": {"scaling": "nvfp4"}}})");
        store.create_run("fp32 but", "", R"({"model": {"n_layer": 2}, "precision": {"preset": "fp32",
            "keep_last_bf16": 1}})");
        const auto rows = store.list_run_summaries();
        QCOMPARE(rows.size(), size_t(4));
        QCOMPARE(rows[3].keep_last_bf16, int64_t(1));
        QVERIFY(!rows[3].is_fp32());
        QCOMPARE(rows[0].recipe, std::string("bf16 (nvfp4, mxfp4) + 2 overrides"));
        QCOMPARE(rows[0].fp8_scaling, std::string("nvfp4, mxfp4"));
        QCOMPARE(rows[1].recipe, std::string("fp8-e4m3 (nvfp4), last block bf16"));
        QCOMPARE(rows[2].recipe, std::string("bf16"));
        QCOMPARE(rows[2].fp8_scaling, std::string("nvfp4")); // as configured: no layer takes it
    }

    void aCachedMedianReadsOnlyTheRowsAddedSince()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("r.sqlite").toStdString());
        const auto a = store.create_run("a", "p.json", "{}"), b = store.create_run("b", "p.json", "{}");
        const auto started = [&](int64_t run) { store.append_event(run, text_event(0, "run_started", "")); };
        const auto steps = [&](int64_t run, int64_t from, int64_t to, double scale) {
            for (int64_t s = from; s <= to; ++s)
                store.append_scalar(run, s, "tokens_per_s", scale * static_cast<double>((s * 7919) % 101) + 0.1);
        };
        started(a);
        started(b);
        steps(a, 1, 50, 1.0);
        steps(b, 1, 7, 3.0);
        TokensMedianCache cache;
        const auto same_as_a_full_read = [&] {
            const auto cached = store.list_run_summaries({}, &cache), full = store.list_run_summaries();
            QCOMPARE(cached.size(), full.size());
            for (size_t i = 0; i < full.size(); ++i)
                QVERIFY2(std::bit_cast<uint64_t>(cached[i].median_tokens_per_s) ==
                             std::bit_cast<uint64_t>(full[i].median_tokens_per_s),
                         qPrintable(QString("run %1: %2 against %3")
                                        .arg(full[i].id)
                                        .arg(cached[i].median_tokens_per_s, 0, 'g', 17)
                                        .arg(full[i].median_tokens_per_s, 0, 'g', 17)));
        };
        same_as_a_full_read();
        QCOMPARE(cache.rows_read(), int64_t(57));
        same_as_a_full_read(); // nothing new: nothing read
        QCOMPARE(cache.rows_read(), int64_t(57));
        steps(a, 51, 54, 1.0);
        same_as_a_full_read();
        QCOMPARE(cache.rows_read(), int64_t(61)); // the four new rows
        // A resume from step 20: the steps after it are discarded and trained again (other
        // values, past the last step read).
        store.discard_steps_after(a, 20);
        started(a);
        steps(a, 21, 60, 2.0);
        same_as_a_full_read();
        QCOMPARE(cache.rows_read(), int64_t(61 + 60)); // a read in full
        // Steps that went back without a start recorded yet (a discard seen mid-resume).
        store.discard_steps_after(b, 3);
        same_as_a_full_read();
        QCOMPARE(cache.rows_read(), int64_t(121 + 3));
        // The same cache on another store: nothing of the first is taken for it.
        RunStore other(dir.filePath("s.sqlite").toStdString());
        const auto c = other.create_run("c", "p.json", "{}");
        other.append_event(c, text_event(0, "run_started", ""));
        for (int64_t s = 1; s <= 3; ++s) other.append_scalar(c, s, "tokens_per_s", 5.0 * static_cast<double>(s));
        QCOMPARE(other.list_run_summaries({}, &cache)[0].median_tokens_per_s, 10.0);
        same_as_a_full_read();
    }

    void tagsAddRemoveAndGoWithTheRun()
    {
        QTemporaryDir dir;
        RunStore store(dir.filePath("r.sqlite").toStdString());
        const auto a = store.create_run("a", "", "{}");
        const auto b = store.create_run("b", "", "{}");
        store.add_tags(a, {"baseline", "sweep:x"});
        store.add_tags(b, {"sweep:x"});
        QCOMPARE(store.tags(a), (std::vector<std::string>{"baseline", "sweep:x"}));
        QCOMPARE(store.all_tags(), (std::vector<std::pair<std::string, int64_t>>{{"baseline", 1}, {"sweep:x", 2}}));
        store.remove_tags(a, {"sweep:x", "never-there"});
        QCOMPARE(store.tags(a), (std::vector<std::string>{"baseline"}));
        try {
            store.add_tags(a, {"ok", "  "});
            QFAIL("accepted an empty tag");
        } catch (const StoreError& e) {
            QCOMPARE(std::string(e.what()), std::string("a tag cannot be empty"));
        }
        QCOMPARE(store.tags(a), (std::vector<std::string>{"baseline"})); // nothing of the bad call was written
        // A line break in a tag broke every later `list` row in two.
        for (const char* bad : {"two\nlines", "a\ttab"}) {
            try {
                store.add_tags(a, {"ok", bad});
                QFAIL("accepted a tag with a control character");
            } catch (const StoreError& e) {
                QCOMPARE(std::string(e.what()), "tag '" + std::string(bad) +
                                                    "' has a control character (a line break, a tab): give one line");
            }
        }
        QCOMPARE(store.tags(a), (std::vector<std::string>{"baseline"}));
        try {
            store.add_tags(999, {"x"});
            QFAIL("tagged a run that does not exist");
        } catch (const StoreError& e) {
            QVERIFY2(std::string(e.what()).rfind("no run 999 in ", 0) == 0, e.what());
        }
        store.finish_run(b, RunStatus::Finished);
        store.delete_run(b);
        QCOMPARE(store.all_tags(), (std::vector<std::pair<std::string, int64_t>>{{"baseline", 1}}));
    }

    void versionTwoStoreIsUpgradedInPlace()
    {
        QTemporaryDir dir;
        const std::string path = dir.filePath("v2.sqlite").toStdString();
        QVERIFY(load_store_fixture(path, "run_store_v2.sql"));

        RunStore store(path);
        QCOMPARE(store.schema_version(), RunStore::kSchemaVersion);
        const auto rows = store.list_run_summaries();
        QCOMPARE(rows.size(), size_t(2));
        QCOMPARE(rows[0].name, std::string("v2 fp32"));
        QCOMPARE(rows[0].created_at, std::string("2026-11-01T10:00:00Z"));
        QCOMPARE(rows[0].finished_at, std::string("2026-11-01T10:05:00Z"));
        QCOMPARE(rows[0].recipe, std::string("fp32"));
        QCOMPARE(rows[0].steps_done, int64_t(2));
        QCOMPARE(rows[0].final_train_loss, 2.25);
        QCOMPARE(rows[0].final_val_loss, 2.125);
        QCOMPARE(rows[0].median_tokens_per_s, 200.0);
        QCOMPARE(rows[0].peak_memory_bytes(), int64_t(1048576));
        QVERIFY(rows[0].tags.empty());
        QCOMPARE(status_text(rows[1].status), std::string("stopped"));
        QCOMPARE(rows[1].recipe, std::string("fp8-hybrid (current) + 1 override"));
        QCOMPARE(rows[1].skipped_steps, int64_t(1));
        // Everything version 2 held is still there, and the new table works.
        QCOMPARE(store.events(rows[0].id).size(), size_t(1));
        const auto stats = store.layer_stats(rows[0].id);
        QCOMPARE(stats.size(), size_t(1));
        QCOMPARE(stats[0].second.exponent_counts, (std::vector<int64_t>{1}));
        store.add_tags(rows[1].id, {"migrated"});
        QCOMPARE(store.tags(rows[1].id), (std::vector<std::string>{"migrated"}));

        // The v1 fixture goes through every upgrade.
        const std::string path1 = dir.filePath("v1.sqlite").toStdString();
        QVERIFY(load_store_fixture(path1, "run_store_v1.sql"));
        RunStore old(path1);
        QCOMPARE(old.schema_version(), RunStore::kSchemaVersion);
        old.add_tags(1, {"old"});
        QCOMPARE(old.list_run_summaries()[0].tags, (std::vector<std::string>{"old"}));
        // "{}" read through the project loader: every key at its default.
        QCOMPARE(old.list_run_summaries()[0].recipe, std::string("fp32"));
    }

    // --- sweeps ------------------------------------------------------------------------------
    void parsesVary()
    {
        const auto spec = parse_vary("precision.preset=fp32, bf16,fp8-hybrid");
        QCOMPARE(spec.key, std::string("precision.preset"));
        QCOMPARE(spec.values, (std::vector<std::string>{"fp32", "bf16", "fp8-hybrid"}));
        const auto json = parse_vary(R"(precision.layers=[{"match":"lm_head","format":"bf16"}],[],["a,b"])");
        QCOMPARE(json.values,
                 (std::vector<std::string>{R"([{"match":"lm_head","format":"bf16"}])", "[]", R"(["a,b"])"}));
        QCOMPARE(parse_vary("training.seed=1").values, (std::vector<std::string>{"1"}));

        const auto refused = [](const std::string& text) {
            try {
                parse_vary(text);
            } catch (const ConfigError& e) {
                return std::string(e.what());
            }
            return std::string("accepted");
        };
        QCOMPARE(refused("precision.preset"),
                 std::string("--vary 'precision.preset': expected dotted.key=value1,value2,..."));
        QCOMPARE(refused("=fp32,bf16"), std::string("--vary '=fp32,bf16': expected dotted.key=value1,value2,..."));
        QCOMPARE(refused("precision.preset=fp32,,bf16"), std::string("--vary precision.preset: value 2 is empty"));
        QCOMPARE(refused("precision.preset="), std::string("--vary precision.preset: value 1 is empty"));
        QCOMPARE(refused("precision.preset=bf16,fp32,bf16"),
                 std::string("--vary precision.preset: value 'bf16' is listed twice"));
        QCOMPARE(refused("precision.layers=[{\"a\":1}"),
                 std::string("--vary 'precision.layers=[{\"a\":1}': unbalanced quotes or brackets"));
    }

    void plansSweepRunsAndRefusesBadValuesUpFront()
    {
        QTemporaryDir dir;
        const QString project = dir.filePath("tiny.json");
        QFile f(project);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(kTinyProject);
        f.close();
        const std::string path = project.toStdString();

        const auto plans = plan_sweep(path, parse_vary("precision.preset=fp32,bf16,fp8-hybrid"),
                                      {{"training.steps", "5"}});
        QCOMPARE(plans.size(), size_t(3));
        QCOMPARE(plans[0].name, std::string("tiny [precision.preset=fp32]"));
        QCOMPARE(plans[2].name, std::string("tiny [precision.preset=fp8-hybrid]"));
        QCOMPARE(plans[1].value, std::string("bf16"));
        QCOMPARE(plans[1].overrides, (std::vector<Override>{{"training.steps", "5"}, {"precision.preset", "bf16"}}));
        QCOMPARE(plans[1].config.precision.preset, std::string("bf16"));
        QCOMPARE(plans[2].config.precision.preset, std::string("fp8-hybrid"));
        QCOMPARE(plans[2].config.training.steps, int64_t(5));
        QCOMPARE(plans[0].config.model.n_embd, int64_t(16));
        QVERIFY(plans[0].config.training.checkpoint_dir.empty()); // beside the store, per run id

        // A project's own checkpoint folder: each point gets a folder of its own in it, or the
        // second point's checkpoints would be refused as the first's.
        const auto own = plan_sweep(path, parse_vary("precision.preset=fp32,fp8-hybrid"),
                                    {{"training.checkpoint_dir", "\"/tmp/ckpt\""}});
        QCOMPARE(own[0].config.training.checkpoint_dir, std::string("/tmp/ckpt/1-precision.preset=fp32"));
        QCOMPARE(own[1].config.training.checkpoint_dir, std::string("/tmp/ckpt/2-precision.preset=fp8-hybrid"));
        const auto odd =
            plan_sweep(path, parse_vary("data.digits=2,3"), {{"training.checkpoint_dir", "\"/tmp/ckpt\""}});
        QCOMPARE(odd[1].config.training.checkpoint_dir, std::string("/tmp/ckpt/2-data.digits=3"));
        // Varied itself: every point has its folder already.
        const auto varied = plan_sweep(path, parse_vary("training.checkpoint_dir=/tmp/a,/tmp/b"));
        QCOMPARE(varied[0].config.training.checkpoint_dir, std::string("/tmp/a"));
        QCOMPARE(varied[1].config.training.checkpoint_dir, std::string("/tmp/b"));

        const auto refused = [&](const std::string& vary) {
            try {
                plan_sweep(path, parse_vary(vary));
            } catch (const ConfigError& e) {
                return std::string(e.what());
            }
            return std::string("accepted");
        };
        QCOMPARE(refused("precision.preset=fp32,fp9"),
                 std::string("--vary precision.preset=fp9 is rejected: precision.preset: 'fp9' is not one of fp32, "
                             "bf16, fp16, fp8-hybrid, fp8-hybrid-keep-ends, fp8-e4m3"));
        QCOMPARE(refused("model.n_head=2,3"),
                 "--vary model.n_head=3 is rejected: " + path +
                     ": model.n_embd: 16 is not divisible by model.n_head (3)");
        // Not the project file's mistake: the file is not named.
        QCOMPARE(refused("model.depth=1,2"), "--vary model.depth=1 is rejected: model.depth: unknown key");
        // Spelled apart, the same number: the sweep would train one run twice.
        QCOMPARE(refused("optimizer.learning_rate=0.002,1e-3,0.0010"),
                 std::string("--vary optimizer.learning_rate: values '1e-3' and '0.0010' give the same settings; the "
                             "sweep would train the same run twice"));
        // Settings that differ but that no layer reads train one run twice too: a recipe where no
        // GEMM is FP8, or a switch of a recipe that no FP8 layer uses.
        const auto refused_with = [&](const std::string& vary, const std::vector<Override>& common) {
            try {
                return std::to_string(plan_sweep(path, parse_vary(vary), common).size()) + " runs";
            } catch (const ConfigError& e) {
                return std::string(e.what());
            }
        };
        QCOMPARE(refused("precision.fp8.scaling=nvfp4,fp8-block"),
                 std::string("--vary precision.fp8.scaling: values 'nvfp4' and 'fp8-block' would train the same run "
                             "twice: no GEMM computes in FP8 under precision.preset=fp32, so no layer reads the FP8 "
                             "recipe; set an FP8 preset (precision.preset=fp8-hybrid) or a precision.layers "
                             "entry"));
        const std::vector<Override> fp8 = {{"precision.preset", "fp8-hybrid"}};
        QCOMPARE(refused_with("precision.fp8.scaling=nvfp4,fp8-block", fp8), std::string("2 runs"));
        QCOMPARE(refused_with("precision.nvfp4.rht=true,false", fp8),
                 std::string("--vary precision.nvfp4.rht: values 'true' and 'false' would train the same run "
                             "twice: the FP8 layers scale with delayed, which does not read precision.nvfp4.rht"));
        QCOMPARE(refused_with("precision.nvfp4.rht=true,false", {fp8[0], {"precision.fp8.scaling", "nvfp4"}}),
                 std::string("2 runs"));
        const Override mxfp4 = {"precision.fp8.scaling", "mxfp4"}, current = {"precision.fp8.scaling", "current"};
        QCOMPARE(refused_with("precision.fp8.block_scales=power-of-two,fp32", {fp8[0], mxfp4}),
                 std::string("--vary precision.fp8.block_scales: values 'power-of-two' and 'fp32' would train the "
                             "same run twice: the FP8 layers scale with mxfp4, which does not read "
                             "precision.fp8.block_scales"));
        QCOMPARE(refused_with("precision.fp8.amax_history_length=16,1024", {fp8[0], current}),
                 std::string("--vary precision.fp8.amax_history_length: values '16' and '1024' would train the same "
                             "run twice: the FP8 layers scale with current, which does not read "
                             "precision.fp8.amax_history_length"));
        // The block recipes take their scales from each block: the margin and saturation are the
        // per-tensor and per-row recipes' alone.
        const Override nvfp4 = {"precision.fp8.scaling", "nvfp4"};
        // nvfp4's transform takes the tokens of a micro-batch 16 at a time: 21 go without it.
        QCOMPARE(refused_with("precision.nvfp4.rht=true,false",
                              {fp8[0], nvfp4, {"training.batch_size", "3"}, {"model.context_length", "7"}}),
                 std::string("--vary precision.nvfp4.rht: values 'true' and 'false' would train the same run twice: "
                             "no GEMM takes nvfp4's Hadamard transform: a micro-batch of 21 tokens "
                             "(training.batch_size 3 x model.context_length 7) is no multiple of 16, the "
                             "transform's length"));
        QCOMPARE(refused_with("precision.nvfp4.rht=true,false",
                              {fp8[0], nvfp4, {"training.batch_size", "16"}, {"model.context_length", "7"}}),
                 std::string("2 runs"));
        QCOMPARE(refused_with("precision.fp8.margin=0,4", {fp8[0], nvfp4}),
                 std::string("--vary precision.fp8.margin: values '0' and '4' would train the same run twice: the FP8 "
                             "layers scale with nvfp4, which does not read precision.fp8.margin"));
        QCOMPARE(refused_with("precision.fp8.margin=0,4", fp8), std::string("2 runs"));
        // The other data kinds' keys, and sampling's where no sample is drawn, are read by nothing.
        QCOMPARE(refused_with("data.path=a.txt,b.txt", {}),
                 std::string("--vary data.path: values 'a.txt' and 'b.txt' would train the same run twice: data.kind "
                             "is synthetic-addition, which does not read data.path"));
        QCOMPARE(refused_with("data.vocab_size=100,200", {}),
                 std::string("--vary data.vocab_size: values '100' and '200' would train the same run twice: "
                             "data.kind is synthetic-addition, which does not read data.vocab_size"));
        QCOMPARE(refused_with("data.examples=500,600", {}), std::string("2 runs"));
        QCOMPARE(refused_with("data.val_fraction=0.1,0.2", {}), std::string("2 runs"));
        QCOMPARE(refused_with("eval.sample_top_k=5,10", {}),
                 std::string("--vary eval.sample_top_k: values '5' and '10' would train the same run twice: "
                             "eval.sample_tokens is 0: no sample is drawn, so nothing reads eval.sample_top_k"));
        QCOMPARE(refused_with("eval.sample_top_k=5,10", {{"eval.sample_tokens", "8"}}), std::string("2 runs"));
        QCOMPARE(refused_with("precision.fp8.saturate=true,false", {fp8[0], current}), std::string("2 runs"));
        // Two spellings of the same formats: under nvfp4 an FP8 GEMM is E2M1 whatever its FP8
        // format; a one-block model keeps every layer of fp8-hybrid-keep-ends in BF16.
        QCOMPARE(refused_with("precision.preset=fp8-hybrid,fp8-e4m3", {nvfp4}),
                 std::string("--vary precision.preset: values 'fp8-hybrid' and 'fp8-e4m3' would train the same run "
                             "twice: every layer computes in the same formats and with the same recipe either way "
                             "(under nvfp4 and mxfp4 a GEMM named FP8 takes E2M1 elements whatever its FP8 format)"));
        QCOMPARE(refused_with("precision.preset=fp8-hybrid,fp8-e4m3", {}), std::string("2 runs"));
        QCOMPARE(refused("precision.preset=fp8-hybrid-keep-ends,bf16"),
                 std::string("--vary precision.preset: values 'fp8-hybrid-keep-ends' and 'bf16' would train the same "
                             "run twice: every layer computes in the same formats, none in FP8, either way"));
        // One FP8 layer reads the recipe; a layers entry's scaling counts where its layer is FP8 (under
        // keep-ends a one-block model keeps every layer, lm_head too, in BF16).
        const Override fp8_head = {"precision.layers", R"([{"match":"lm_head","forward":"e4m3"}])"};
        QCOMPARE(refused_with("precision.fp8.scaling=nvfp4,mxfp4", {fp8_head}),
                 std::string("2 runs"));
        const std::string entry = R"(precision.layers=[{"match":"lm_head","scaling":"nvfp4"}],[])";
        QCOMPARE(refused_with(entry, fp8), std::string("2 runs"));
        QCOMPARE(refused_with(entry, {{"precision.preset", "fp8-hybrid-keep-ends"}}),
                 std::string("--vary precision.layers: values '[{\"match\":\"lm_head\",\"scaling\":\"nvfp4\"}]' "
                             "and '[]' would train the same run twice: every layer computes in the same formats, none "
                             "in FP8, either way"));

        // The window's sweep (a project in memory): a relative path value is in the project's
        // folder, whatever folder the workbench was started from.
        const ProjectConfig base = load_project_file(path);
        const QString elsewhere = dir.filePath("elsewhere");
        QVERIFY(QDir().mkpath(elsewhere));
        const QString before = QDir::currentPath();
        QVERIFY(QDir::setCurrent(elsewhere));
        std::vector<SweepRunPlan> in_memory;
        try {
            in_memory = plan_sweep(base, parse_vary(R"(data.path=b.txt,"sub/c.txt",/abs/d.txt)"),
                                   {{"data.kind", "text"}});
        } catch (const std::exception& e) {
            QDir::setCurrent(before);
            QFAIL(e.what());
        }
        QDir::setCurrent(before);
        QCOMPARE(in_memory.size(), size_t(3));
        QCOMPARE(in_memory[0].config.data.path, (std::filesystem::path(base.base_dir) / "b.txt").string());
        QCOMPARE(in_memory[1].config.data.path, (std::filesystem::path(base.base_dir) / "sub/c.txt").string());
        QCOMPARE(in_memory[2].config.data.path, std::string("/abs/d.txt"));
    }

    // Which recipe settings no layer reads, each changed on its own: what the Project page greys
    // and `run` notes where the project sets them.
    void recipeSettingsThatNoLayerReads_data()
    {
        QTest::addColumn<QStringList>("sets");
        QTest::addColumn<QStringList>("unread");
        const QStringList fp8 = {"precision.fp8.amax_history_length", "precision.fp8.amax_compute_algo",
                                 "precision.fp8.margin", "precision.fp8.saturate"};
        const QStringList fp4 = {"precision.nvfp4.rht", "precision.nvfp4.stochastic_rounding",
                                 "precision.nvfp4.weight_2d"};
        QTest::newRow("fp32: every one") << QStringList{}
                                         << (QStringList{"precision.fp8.scaling"} + fp8 +
                                             QStringList{"precision.fp8.rowwise_power_of_two",
                                                         "precision.fp8.mx_scale_rounding",
                                                         "precision.fp8.outlier_rms_multiple",
                                                         "precision.fp8.block_scales"} +
                                             fp4);
        QTest::newRow("delayed") << QStringList{"precision.preset=fp8-hybrid"}
                                 << (QStringList{"precision.fp8.rowwise_power_of_two",
                                                 "precision.fp8.mx_scale_rounding", "precision.fp8.block_scales"} +
                                     fp4);
        QTest::newRow("nvfp4") << QStringList{"precision.preset=fp8-hybrid", "precision.fp8.scaling=nvfp4"}
                               << (fp8 + QStringList{"precision.fp8.rowwise_power_of_two",
                                                     "precision.fp8.mx_scale_rounding", "precision.fp8.block_scales"});
        QTest::newRow("nvfp4, 21 tokens a micro-batch")
            << QStringList{"precision.preset=fp8-hybrid", "precision.fp8.scaling=nvfp4", "training.batch_size=3",
                           "model.context_length=7"}
            << (fp8 + QStringList{"precision.fp8.rowwise_power_of_two", "precision.fp8.mx_scale_rounding",
                                  "precision.fp8.block_scales", "precision.nvfp4.rht"});
        // nvfp4's parts each act on some GEMMs only: with the forward GEMM alone in FP4, no
        // Hadamard transform (wgrad) and no stochastic rounding (gradients) is made; on attention
        // alone, no 2D weight blocks (it has no weight). They trained bit-identically either way
        // and were not shown as unread, a read-only audit found.
        QTest::newRow("nvfp4 on one forward GEMM")
            << QStringList{R"(precision.layers=[{"match": "blocks.0.mlp.fc1", "forward": "e4m3", "scaling": "nvfp4"}])"}
            << (QStringList{"precision.fp8.scaling"} + fp8 +
                QStringList{"precision.fp8.rowwise_power_of_two", "precision.fp8.mx_scale_rounding",
                            "precision.fp8.block_scales", "precision.nvfp4.rht",
                            "precision.nvfp4.stochastic_rounding"});
        QTest::newRow("nvfp4 on attention alone")
            << QStringList{R"(precision.layers=[{"match": "*.attn.sdpa", "format": "e4m3", "scaling": "nvfp4"}])"}
            << (QStringList{"precision.fp8.scaling"} + fp8 +
                QStringList{"precision.fp8.rowwise_power_of_two", "precision.fp8.mx_scale_rounding",
                            "precision.fp8.block_scales", "precision.nvfp4.weight_2d"});
        QTest::newRow("mxfp4 and rowwise by entries")
            << QStringList{"precision.preset=fp8-hybrid",
                           R"(precision.layers=[{"match": "blocks.*", "scaling": "mxfp4"},)"
                           R"( {"match": "lm_head", "format": "e4m3", "scaling": "rowwise"}])"}
            << QStringList{"precision.fp8.scaling", "precision.fp8.amax_history_length",
                           "precision.fp8.amax_compute_algo", "precision.fp8.block_scales"} +
                   fp4;
    }
    void recipeSettingsThatNoLayerReads()
    {
        QFETCH(QStringList, sets);
        QFETCH(QStringList, unread);
        std::vector<Override> overrides;
        for (const auto& s : sets) overrides.push_back(parse_override(s.toStdString()));
        const ProjectConfig config = load_project_json(kTinyProject, "/p", overrides);
        QStringList found;
        for (const auto& u : recipe_settings_read_by_no_layer(config)) {
            found << QString::fromStdString(u.key);
            QCOMPARE(u.why, why_the_same_run(config, u.key));
            if (u.key == "precision.fp8.scaling" && !config.precision.layers.empty())
                QCOMPARE(u.why, std::string("every FP8 layer takes its recipe from its own precision.layers entry"));
            if (u.key == "precision.nvfp4.rht" && QTest::currentDataTag() == QString("nvfp4 on one forward GEMM"))
                QCOMPARE(u.why, std::string("no nvfp4 layer computes its wgrad GEMM in FP4, whose operands alone take "
                                            "the Hadamard transform"));
            if (u.key == "precision.nvfp4.weight_2d" && QTest::currentDataTag() == QString("nvfp4 on attention alone"))
                QCOMPARE(u.why, std::string("no nvfp4 linear layer computes its forward or dgrad GEMM in FP4, the "
                                            "GEMMs that take its weight"));
        }
        QCOMPARE(found, unread);
    }

    void sweepSummaryIsRelativeToFp32()
    {
        const double nan = std::nan("");
        auto fp32 = summary(2.0, 100.0, 200, "fp32");
        fp32.id = 7;
        const auto s = summarize_sweep({{"bf16", summary(2.125, 50.0, 300)},
                                        {"fp32", fp32},
                                        {"fp8-hybrid", summary(2.25, 25.0, 400, "fp8-hybrid")},
                                        {"fp16", summary(nan, nan, -1, "fp16")}});
        QCOMPARE(s.reference, size_t(1));
        QCOMPARE(s.rows.size(), size_t(4));
        QCOMPARE(s.rows[1].run.id, int64_t(7));
        QCOMPARE(s.rows[0].value, std::string("bf16"));
        QCOMPARE(s.rows[0].val_loss_delta, 0.125);
        QCOMPARE(s.rows[0].tokens_per_s_ratio, 0.5);
        QCOMPARE(s.rows[0].peak_memory_ratio, 1.5);
        QCOMPARE(s.rows[1].val_loss_delta, 0.0);
        QCOMPARE(s.rows[1].tokens_per_s_ratio, 1.0);
        QCOMPARE(s.rows[1].peak_memory_ratio, 1.0);
        QCOMPARE(s.rows[2].val_loss_delta, 0.25);
        QCOMPARE(s.rows[2].tokens_per_s_ratio, 0.25);
        QCOMPARE(s.rows[2].peak_memory_ratio, 2.0);
        QVERIFY(!s.rows[0].val_at_another_step && !s.rows[2].val_at_another_step);
        QVERIFY(std::isnan(s.rows[3].val_loss_delta)); // a run without figures has no ratios
        QVERIFY(!s.rows[3].val_at_another_step);
        QVERIFY(std::isnan(s.rows[3].tokens_per_s_ratio));
        QVERIFY(std::isnan(s.rows[3].peak_memory_ratio));

        // No FP32 run (an fp32 preset with layer overrides is not one): the first run is the reference.
        const auto t = summarize_sweep({{"a", summary(3.0, 10.0, 100, "bf16")},
                                        {"b", summary(2.5, 20.0, 50, "fp32", 1)}});
        QCOMPARE(t.reference, size_t(0));
        QVERIFY(!t.reference_passed_over);
        QCOMPARE(t.rows[1].val_loss_delta, -0.5);
        QCOMPARE(t.rows[1].tokens_per_s_ratio, 2.0);
        QCOMPARE(t.rows[1].peak_memory_ratio, 0.5);
        QVERIFY(summarize_sweep({}).rows.empty());

        // A diverged run is no reference: its NaN made every delta NaN. The FP32 run that kept
        // a val loss is taken before another, and without one the first run that kept one.
        const auto d = summarize_sweep({{"1e4", summary(nan, 10.0, 100, "bf16")},
                                        {"1e-3", summary(3.0, 10.0, 100, "bf16")},
                                        {"fp32 1e4", summary(nan, 10.0, 100, "fp32")},
                                        {"fp32 1e-3", summary(2.5, 20.0, 100, "fp32")}});
        QCOMPARE(d.reference, size_t(3));
        QVERIFY(!d.reference_passed_over); // an FP32 run
        QCOMPARE(d.rows[1].val_loss_delta, 0.5);
        const auto e = summarize_sweep({{"1e4", summary(nan, 10.0, 100, "bf16")},
                                        {"1e-3", summary(3.0, 10.0, 100, "bf16")},
                                        {"3e-3", summary(3.25, 10.0, 100, "bf16")}});
        QCOMPARE(e.reference, size_t(1));
        QVERIFY(e.reference_passed_over);
        QCOMPARE(e.rows[2].val_loss_delta, 0.25);
        QVERIFY(std::isnan(e.rows[0].val_loss_delta));
        QCOMPARE(summarize_sweep({{"a", summary(nan, 10.0, 100, "bf16")}, {"fp32", summary(nan, 10.0, 100, "fp32")}})
                     .reference,
                 size_t(1));
        // Of two FP32 runs, the one that trained furthest (a run stopped early was taken when
        // it came first); of equals, the first.
        auto stopped = summary(2.6, 10.0, 100, "fp32"), finished = summary(2.4, 10.0, 100, "fp32");
        stopped.steps_done = 19;
        finished.steps_done = 40;
        QCOMPARE(summarize_sweep({{"stopped", stopped}, {"bf16", summary(2.5, 10.0, 100)}, {"finished", finished}})
                     .reference,
                 size_t(2));
        QCOMPARE(summarize_sweep({{"a", finished}, {"b", finished}}).reference, size_t(0));
        // An fp32 run whose last block trained in BF16 is no FP32 reference (it was taken for
        // one beside a pure FP32 run; read-only audit 'gui-deep').
        auto mixed = finished;
        mixed.keep_last_bf16 = 1;
        QVERIFY(!mixed.is_fp32());
        QCOMPARE(summarize_sweep({{"mixed", mixed}, {"fp32", stopped}}).reference, size_t(1));

        // A run stopped before the reference's last evaluation: its delta is marked.
        auto early = summary(2.5, 20.0, 50, "bf16");
        early.final_val_step = 150;
        auto full = summary(2.0, 10.0, 100, "fp32");
        full.final_val_step = 400;
        const auto u = summarize_sweep({{"fp32", full}, {"bf16", early}});
        QCOMPARE(u.rows[1].val_loss_delta, 0.5);
        QVERIFY(u.rows[1].val_at_another_step);
        QVERIFY(!u.rows[0].val_at_another_step);
    }
};

QTEST_GUILESS_MAIN(TestCompare)
#include "test_compare.moc"
