// SPDX-License-Identifier: GPL-3.0-or-later
// mantissa-train: the headless CLI. Trains a project (or a sweep of it) into the run store,
// reads runs back, tags and compares them.
// Exit codes: 0 ok, 1 training failed, 2 bad project or arguments, 3 run store problem.

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <map>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <chrono>
#include <thread>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "config_diff.h"
#include "console_progress.h"
#include "data_parallel_cli.h"
#include "project_config.h"
#include "remote_serving.h"
#include "run_compare.h"
#include "run_session.h"
#include "run_store.h"
#include "sweep.h"
#include "tensorboard_export.h"
#include "trainer.h"
#include "version_report.h"

using namespace mantissa;

namespace {

std::atomic<bool> g_stop_requested{false};
// Set when torchrun or Slurm launched this process as rank 0 of a data-parallel job.
std::shared_ptr<DataParallel> g_dp;
bool g_dp_announced = false; // the other ranks were handed the project

extern "C" void on_sigint(int)
{
    if (g_stop_requested.exchange(true)) {
        // Second Ctrl-C: the user wants out now.
        std::signal(SIGINT, SIG_DFL);
        std::raise(SIGINT);
    }
}

// Trains a session's run until done or Ctrl-C; the session marks the run.
// `extra`: one more sink (the store server's, with --serve).
int train_session(RunSession& session, const std::string& db_path, TelemetrySink* extra = nullptr)
{
    const ProjectConfig& config = session.config();
    ConsoleProgress console(config.training.steps, config.telemetry.log_interval, isatty(STDOUT_FILENO) != 0, stdout);
    console.watch_stop_flag(&g_stop_requested, &session.trainer());
    std::signal(SIGINT, on_sigint);
    std::signal(SIGTERM, on_sigint);
    // A watcher's pause waits for a resume that a terminal cannot send, and no step comes to
    // look at the flag: Ctrl-C must still stop the run cleanly, so a thread forwards it too.
    std::atomic<bool> trained{false};
    std::thread forward_stop([&] {
        while (!trained.load()) {
            if (g_stop_requested.load()) {
                session.request_stop();
                return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    });
    if (g_dp) {
        announce_project(*g_dp, config);
        g_dp_announced = true;
    }
    std::vector<TelemetrySink*> sinks = {&console};
    if (extra) sinks.push_back(extra);
    const SessionOutcome outcome = session.run(sinks);
    trained = true;
    forward_stop.join();
    if (g_dp && outcome.status != RunStatus::Failed) print_rank_digest(*g_dp, session.trainer());
    if (!outcome.store_error.empty())
        std::fprintf(stderr, "\nwarning: the run store could not keep some of this run's metrics: %s\n",
                     outcome.store_error.c_str());
    if (outcome.store_failed) {
        std::fprintf(stderr, "\nerror: %s\n", outcome.error.c_str());
        return 3;
    }
    if (outcome.status == RunStatus::Failed) {
        std::fprintf(stderr, "\nerror: training failed: %s\n", outcome.error.c_str());
        return 1;
    }
    const RunSummary& summary = outcome.summary;
    std::printf("%s after %lld steps: train loss %.4f", std::string(run_status_name(outcome.status)).c_str(), static_cast<long long>(summary.steps_done),
                summary.final_train_loss);
    if (summary.final_val_loss >= 0) std::printf(", val loss %.4f", summary.final_val_loss);
    std::printf("\nmean step time: %.3f ms (%.0f tokens/s)\n", summary.mean_step_time_ms, summary.tokens_per_s);
    if (summary.peak_device_memory_bytes >= 0)
        std::printf("peak device memory: %.1f MiB\n", static_cast<double>(summary.peak_device_memory_bytes) / 1048576.0);
    std::printf("saved as run %lld in %s\n", static_cast<long long>(session.run_id()), db_path.c_str());
    return 0;
}

std::vector<Override> parse_overrides(const std::vector<std::string>& sets)
{
    std::vector<Override> overrides;
    for (const auto& s : sets) overrides.push_back(parse_override(s));
    return overrides;
}

int cmd_resume(RunStore& store, const std::string& run, const std::vector<std::string>& sets, const std::string& db_path);

int cmd_run(const std::string& project_path, const std::vector<std::string>& sets, const std::string& db_path,
            std::string name, bool no_store, const ServeOptions& serve)
{
    if (!serve.listen.empty() && (no_store || !serving_unavailable().empty())) {
        std::fprintf(stderr, "error: %s\n", no_store ? "--serve serves the run store: it cannot go with --no-store"
                                                     : serving_unavailable().c_str());
        return 2;
    }
    // torchrun --max-restarts: an attempt after the first continues the run the first created.
    if (g_dp && g_dp->restart_count() > 0 && !no_store)
        if (const auto run_id = g_dp->peek_job("run_id")) {
            std::printf("torchrun restart %d: resuming run %s\n", g_dp->restart_count(), run_id->c_str());
            RunStore store(db_path);
            return cmd_resume(store, *run_id, {}, db_path);
        }
    std::unique_ptr<RunSession> session;
    try {
        session = std::make_unique<RunSession>(load_project_file(project_path, parse_overrides(sets)));
        if (g_dp) session->trainer().set_data_parallel(g_dp);
    } catch (const ConfigError& e) { // the data is loaded here: it may still reject the project
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) { // building the model failed (LibTorch, memory): no abort
        std::fprintf(stderr, "error: training failed: %s\n", e.what());
        return 1;
    }
    if (name.empty()) name = session->config().name;
    if (no_store) {
        // Console only: what the store costs the training step is measured against this.
        Trainer& trainer = session->trainer();
        ConsoleProgress console(trainer.config().training.steps, trainer.config().telemetry.log_interval,
                                isatty(STDOUT_FILENO) != 0, stdout);
        console.watch_stop_flag(&g_stop_requested, &trainer);
        std::signal(SIGINT, on_sigint);
        // As train_session reports a failed run (exit 1), not an abort: a diverged run's NaN
        // weights, for one, make LibTorch's sampler throw at the next evaluation.
        try {
            if (g_dp) {
                announce_project(*g_dp, trainer.config());
                g_dp_announced = true;
            }
            const auto summary = trainer.run(console);
            if (g_dp) print_rank_digest(*g_dp, trainer);
            std::printf("mean step time: %.3f ms (%.0f tokens/s)\n", summary.mean_step_time_ms, summary.tokens_per_s);
            if (summary.peak_device_memory_bytes >= 0)
                std::printf("peak device memory: %.1f MiB\n",
                            static_cast<double>(summary.peak_device_memory_bytes) / 1048576.0);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "\nerror: training failed: %s\n", e.what());
            return 1;
        }
        return 0;
    }
    std::unique_ptr<RunStore> store;
    try {
        store = std::make_unique<RunStore>(db_path);
        session->create_run(*store, name, project_path);
        if (g_dp) g_dp->post_job("run_id", std::to_string(session->run_id()));
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
    std::printf("run %lld '%s' -> %s\n", static_cast<long long>(session->run_id()), name.c_str(), db_path.c_str());
    std::unique_ptr<LiveServer> server; // stops before the session and the store go
    if (!serve.listen.empty()) {
        server = LiveServer::start(*session, *store, db_path, serve);
        if (!server) {
            store->finish_run(session->run_id(), RunStatus::Failed);
            return 2;
        }
    }
    return train_session(*session, db_path, server.get());
}

// A saved run at its newest good checkpoint, or an exit code: 2 for a bad override, no
// checkpoint or another run's checkpoint, 3 when every checkpoint is damaged. Damaged ones
// are shown on stderr and kept in `notices`.
std::unique_ptr<RunSession> reopen_or_complain(RunStore& store, const RunInfo& info, const std::vector<std::string>& sets,
                                               std::vector<RunEvent>& notices, int& exit_code)
{
    try {
        auto session = RunSession::reopen(store, info, parse_overrides(sets), [&](const RunEvent& e) {
            std::fprintf(stderr, "warning: %s\n", e.message().c_str());
            notices.push_back(e);
        });
        if (!session->starts_over())
            std::printf("run %lld '%s' at step %lld from %s\n", static_cast<long long>(info.id), info.name.c_str(),
                        static_cast<long long>(session->trainer().step()), session->loaded_checkpoint().c_str());
        return session;
    } catch (const CheckpointUnusable& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        exit_code = 3;
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        exit_code = 2;
    }
    return nullptr;
}

// Continues a saved run from its newest good checkpoint, appending to the same run record.
int cmd_resume(RunStore& store, const std::string& run, const std::vector<std::string>& sets, const std::string& db_path)
{
    auto info = store.find_run(run);
    if (!info) {
        std::fprintf(stderr, "error: no run '%s' in %s\n", run.c_str(), db_path.c_str());
        return 2;
    }
    std::vector<RunEvent> notices;
    int exit_code = 0;
    auto session = reopen_or_complain(store, *info, sets, notices, exit_code);
    if (!session) {
        for (const auto& e : notices) store.append_event(info->id, e);
        return exit_code;
    }
    try {
        if (g_dp) session->trainer().set_data_parallel(g_dp);
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    try {
        session->claim(notices);
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
    if (session->starts_over())
        std::printf("run %lld '%s' ended before its first checkpoint: training it again from step 0\n",
                    static_cast<long long>(info->id), info->name.c_str());
    return train_session(*session, db_path);
}

std::optional<RunInfo> find_or_complain(RunStore& store, const std::string& run)
{
    auto info = store.find_run(run);
    if (!info) std::fprintf(stderr, "error: no run '%s' in %s\n", run.c_str(), store.path().c_str());
    return info;
}

int cmd_show(RunStore& store, const std::string& run)
{
    auto info = find_or_complain(store, run);
    if (!info) return 2;
    std::printf("run %lld '%s'\nstatus: %s\nproject: %s\ncreated: %s\nfinished: %s\nsteps: %lld\n",
                static_cast<long long>(info->id), info->name.c_str(), std::string(run_status_name(info->status)).c_str(), info->project_path.c_str(),
                info->created_at.c_str(), info->finished_at.c_str(), static_cast<long long>(info->last_step));
    double last_train = -1, last_val = -1;
    int64_t val_step = -1;
    for (const auto& s : store.scalars(info->id)) {
        if (s.tag == "train/loss") last_train = s.value;
        if (s.tag == "val/loss") { last_val = s.value; val_step = s.step; }
    }
    if (last_train >= 0) std::printf("last train loss: %.4f\n", last_train);
    if (last_val >= 0) std::printf("last val loss: %.4f (step %lld)\n", last_val, static_cast<long long>(val_step));
    std::printf("events:\n");
    for (const auto& e : store.events(info->id))
        std::printf("  step %6lld  %-12s  %s\n", static_cast<long long>(e.step), e.kind.c_str(), e.message.c_str());
    std::printf("config:\n%s\n", info->config_json.c_str());
    return 0;
}

int cmd_rename(RunStore& store, const std::string& run, const std::string& new_name)
{
    auto info = find_or_complain(store, run);
    if (!info) return 2;
    if (new_name.empty()) {
        std::fprintf(stderr, "error: the new name is empty\n");
        return 2;
    }
    store.rename_run(info->id, new_name);
    std::printf("run %lld renamed '%s' -> '%s'\n", static_cast<long long>(info->id), info->name.c_str(), new_name.c_str());
    return 0;
}

int cmd_delete(RunStore& store, const std::string& run)
{
    auto info = find_or_complain(store, run);
    if (!info) return 2;
    if (info->status == RunStatus::Running) {
        std::fprintf(stderr, "error: run %lld is running; stop it first\n", static_cast<long long>(info->id));
        return 2;
    }
    store.delete_run(info->id);
    std::printf("deleted run %lld '%s'\n", static_cast<long long>(info->id), info->name.c_str());
    return 0;
}

int cmd_export(RunStore& store, const std::string& run, const std::string& format, const std::string& table,
               const std::string& out_path)
{
    auto info = find_or_complain(store, run);
    if (!info) return 2;
    if (format == "tensorboard") {
        if (out_path.empty() || out_path == "-") {
            std::fprintf(stderr, "error: --format tensorboard needs --out DIR\n");
            return 2;
        }
        std::fprintf(stderr, "wrote %s\n", export_tensorboard(store, info->id, out_path).c_str());
        return 0;
    }
    if (format == "safetensors") {
        if (out_path.empty() || out_path == "-") {
            std::fprintf(stderr, "error: --format safetensors needs --out FILE\n");
            return 2;
        }
        std::vector<RunEvent> notices; // shown, never recorded: exporting only reads the store
        int exit_code = 0;
        const auto session = reopen_or_complain(store, *info, {}, notices, exit_code);
        if (!session) return exit_code;
        if (session->starts_over()) {
            std::fprintf(stderr, "error: run %lld has no checkpoint to export weights from\n",
                         static_cast<long long>(info->id));
            return 2;
        }
        session->trainer().export_safetensors(out_path);
        std::fprintf(stderr, "wrote %s\n", out_path.c_str());
        return 0;
    }
    const std::string text = table == "events" ? store.events_csv(info->id) : store.metrics_csv(info->id);
    if (out_path.empty() || out_path == "-") {
        std::fwrite(text.data(), 1, text.size(), stdout);
        return 0;
    }
    std::ofstream out(out_path, std::ios::binary);
    if (!out || !(out << text)) {
        std::fprintf(stderr, "error: cannot write '%s'\n", out_path.c_str());
        return 2;
    }
    std::fprintf(stderr, "wrote %s\n", out_path.c_str());
    return 0;
}

// Prints rows as aligned columns (two blanks apart); `right` marks right-aligned columns.
void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right = {},
                 const char* indent = "")
{
    std::vector<size_t> width;
    for (const auto& row : rows)
        for (size_t c = 0; c < row.size(); ++c) {
            if (width.size() <= c) width.push_back(0);
            width[c] = std::max(width[c], row[c].size());
        }
    for (const auto& row : rows) {
        std::string line = indent;
        for (size_t c = 0; c < row.size(); ++c) {
            const std::string pad(width[c] - row[c].size(), ' ');
            const bool r = c < right.size() && right[c];
            line += (c ? "  " : "") + (r ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : ""));
        }
        std::printf("%s\n", line.c_str());
    }
}

// One table cell: "-" for a missing (non-finite) value, else `v` printed with `format`.
std::string fmt_finite(double v, const char* format)
{
    if (!std::isfinite(v)) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
}

std::string fmt_loss(double v) { return fmt_finite(v, "%.4f"); }
std::string fmt_delta(double v) { return fmt_finite(v, "%+.4f"); }
std::string fmt_ratio(double v) { return fmt_finite(v, "%.2fx"); }
std::string fmt_rate(double v) { return fmt_finite(v, "%.0f"); }

std::string fmt_bytes(int64_t bytes)
{
    if (bytes < 0) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

std::string join_tags(const std::vector<std::string>& tags)
{
    std::string out;
    for (const auto& t : tags) out += (out.empty() ? "" : ", ") + t;
    return out;
}

// Looks every named run up; complains about the first unknown one.
std::optional<std::vector<RunInfo>> find_all_or_complain(RunStore& store, const std::vector<std::string>& runs)
{
    std::vector<RunInfo> out;
    for (const auto& r : runs) {
        auto info = find_or_complain(store, r);
        if (!info) return std::nullopt;
        out.push_back(*info);
    }
    return out;
}

int cmd_tag(RunStore& store, const std::string& run, const std::vector<std::string>& tags, bool remove)
{
    auto info = find_or_complain(store, run);
    if (!info) return 2;
    try {
        if (remove) store.remove_tags(info->id, tags);
        else store.add_tags(info->id, tags);
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    std::printf("run %lld '%s' tags: %s\n", static_cast<long long>(info->id), info->name.c_str(),
                join_tags(store.tags(info->id)).c_str());
    return 0;
}

void print_sweep_table(const SweepSpec& spec, const std::vector<std::string>& values,
                       const std::vector<std::optional<RunSummaryRow>>& runs, const std::vector<std::string>& notes)
{
    std::vector<std::pair<std::string, RunSummaryRow>> done;
    for (size_t i = 0; i < values.size(); ++i)
        if (runs[i]) done.emplace_back(values[i], *runs[i]);
    const SweepSummary summary = summarize_sweep(done);
    std::printf("\nsweep of %s: %zu runs", spec.key.c_str(), values.size());
    if (!summary.rows.empty()) {
        const auto& ref = summary.rows[summary.reference];
        std::printf(", relative to %s (run %lld%s)", ref.value.c_str(), static_cast<long long>(ref.run.id),
                    ref.run.is_fp32() ? ", fp32" : ", the first");
    }
    std::printf("\n");
    std::vector<std::vector<std::string>> rows = {{"value", "run", "status", "final val", "dval vs ref", "tokens/s",
                                                   "x ref", "peak mem", "x ref", "skipped"}};
    size_t row = 0;
    for (size_t i = 0; i < values.size(); ++i) {
        if (!runs[i]) {
            rows.push_back({values[i], "-", notes[i], "-", "-", "-", "-", "-", "-", "-"});
            continue;
        }
        const SweepRow& r = summary.rows[row++];
        rows.push_back({r.value, std::to_string(r.run.id), std::string(run_status_name(r.run.status)), fmt_loss(r.run.final_val_loss),
                        fmt_delta(r.val_loss_delta), fmt_rate(r.run.median_tokens_per_s),
                        fmt_ratio(r.tokens_per_s_ratio),
                        fmt_bytes(r.run.peak_memory_bytes()), fmt_ratio(r.peak_memory_ratio),
                        std::to_string(r.run.skipped_steps)});
    }
    print_table(rows, {false, true, false, true, true, true, true, true, true, true});
    std::printf("\n");
}

// Runs one project once per value of the varied key, one after another, into one store.
// Every value is validated before the first run starts; Ctrl-C stops the current run and
// skips the rest; a run that fails is marked failed and the sweep goes on.
int cmd_sweep(const std::string& project_path, const std::string& vary, const std::vector<std::string>& sets,
              const std::string& db_path, std::string sweep_name)
{
    SweepSpec spec;
    std::vector<SweepRunPlan> plans;
    try {
        spec = parse_vary(vary);
        std::vector<Override> overrides;
        for (const auto& s : sets) overrides.push_back(parse_override(s));
        plans = plan_sweep(project_path, spec, overrides);
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    if (sweep_name.empty()) {
        char stamp[32];
        const std::time_t now = std::time(nullptr);
        std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
        sweep_name = stamp;
    }
    const std::string tag = "sweep:" + sweep_name;
    std::unique_ptr<RunStore> store;
    try {
        store = std::make_unique<RunStore>(db_path);
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
    std::printf("sweep '%s': %zu runs of %s varying %s, tagged %s\n", sweep_name.c_str(), plans.size(),
                project_path.c_str(), spec.key.c_str(), tag.c_str());

    std::vector<std::string> values, notes(plans.size());
    std::vector<int64_t> run_ids(plans.size(), 0);
    bool any_failed = false;
    for (size_t i = 0; i < plans.size(); ++i) {
        values.push_back(plans[i].value);
        if (g_stop_requested) {
            notes[i] = "skipped";
            continue;
        }
        std::printf("\n[%zu/%zu] %s\n", i + 1, plans.size(), plans[i].name.c_str());
        std::unique_ptr<RunSession> session;
        try {
            session = std::make_unique<RunSession>(plans[i].config); // loads the data: may take a while
        } catch (const ConfigError& e) {
            std::fprintf(stderr, "error: %s: %s\n", plans[i].name.c_str(), e.what());
            notes[i] = "rejected";
            any_failed = true;
            continue;
        }
        if (g_stop_requested) { // Ctrl-C while the data loaded
            notes[i] = "skipped";
            continue;
        }
        try {
            run_ids[i] = session->create_run(*store, plans[i].name, project_path);
            store->add_tags(run_ids[i], {tag});
        } catch (const StoreError& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            return 3;
        }
        std::printf("run %lld '%s' -> %s\n", static_cast<long long>(run_ids[i]), plans[i].name.c_str(),
                    db_path.c_str());
        if (train_session(*session, db_path) != 0) any_failed = true;
    }

    std::vector<int64_t> ids;
    for (const int64_t id : run_ids)
        if (id) ids.push_back(id);
    std::vector<std::optional<RunSummaryRow>> runs(plans.size());
    if (!ids.empty()) {
        RunFilter filter;
        filter.ids = ids;
        const auto rows = store->list_run_summaries(filter);
        for (size_t i = 0; i < plans.size(); ++i)
            for (const auto& r : rows)
                if (r.id == run_ids[i]) runs[i] = r;
    }
    print_sweep_table(spec, values, runs, notes);
    return any_failed ? 1 : 0;
}

int cmd_compare(RunStore& store, const std::vector<std::string>& run_args, double tolerance, bool relative)
{
    if (run_args.size() < 2) {
        std::fprintf(stderr, "error: compare needs at least two runs\n");
        return 2;
    }
    const auto infos = find_all_or_complain(store, run_args);
    if (!infos) return 2;
    RunFilter filter;
    for (const auto& info : *infos) filter.ids.push_back(info.id);
    std::map<int64_t, RunSummaryRow> by_id;
    for (auto& r : store.list_run_summaries(filter)) by_id[r.id] = std::move(r);
    std::vector<RunSummaryRow> runs;
    std::vector<std::string> configs, heads;
    for (const auto& info : *infos) {
        runs.push_back(by_id.at(info.id));
        configs.push_back(info.config_json);
        heads.push_back("run " + std::to_string(info.id));
    }

    std::vector<ConfigDifferenceN> diff;
    try {
        diff = diff_configs(configs);
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    if (diff.empty()) {
        std::printf("config differences: none\n");
    } else {
        std::printf("config differences (%zu %s):\n", diff.size(), diff.size() == 1 ? "key" : "keys");
        std::vector<std::vector<std::string>> rows = {{"key"}};
        rows[0].insert(rows[0].end(), heads.begin(), heads.end());
        for (const auto& d : diff) {
            rows.push_back({d.key});
            for (const auto& v : d.values) rows.back().push_back(v ? *v : "(absent)");
        }
        print_table(rows, {}, "  ");
    }

    std::printf("\nsummary:\n");
    std::vector<std::vector<std::string>> rows = {{""}};
    rows[0].insert(rows[0].end(), heads.begin(), heads.end());
    const auto line = [&](const char* label, auto field) {
        rows.push_back({label});
        for (const auto& r : runs) rows.back().push_back(field(r));
    };
    line("name", [](const RunSummaryRow& r) { return r.name; });
    line("status", [](const RunSummaryRow& r) { return std::string(run_status_name(r.status)); });
    line("recipe", [](const RunSummaryRow& r) { return r.recipe; });
    line("steps", [](const RunSummaryRow& r) { return std::to_string(r.steps_done); });
    line("final train", [](const RunSummaryRow& r) { return fmt_loss(r.final_train_loss); });
    line("final val", [](const RunSummaryRow& r) { return fmt_loss(r.final_val_loss); });
    line("best val", [](const RunSummaryRow& r) { return fmt_loss(r.best_val_loss); });
    line("tokens/s", [](const RunSummaryRow& r) { return fmt_rate(r.median_tokens_per_s); });
    line("skipped", [](const RunSummaryRow& r) { return std::to_string(r.skipped_steps); });
    line("peak memory", [](const RunSummaryRow& r) { return fmt_bytes(r.peak_memory_bytes()); });
    line("tags", [](const RunSummaryRow& r) { return join_tags(r.tags); });
    print_table(rows, {}, "  ");

    std::printf("\ntrain/loss divergence vs run %lld (tolerance %g, %s):\n", static_cast<long long>(runs[0].id),
                tolerance, relative ? "relative" : "absolute");
    const Series first = store.series(runs[0].id, "train/loss");
    for (size_t i = 1; i < runs.size(); ++i) {
        const Series other = store.series(runs[i].id, "train/loss");
        const auto aligned = align_on_steps(first, other);
        const auto common = aligned.size();
        const auto step = first_divergence_step(first, other, tolerance, relative);
        if (step) {
            const auto at =
                std::find_if(aligned.begin(), aligned.end(), [&](const AlignedPoint& p) { return p.step == *step; });
            std::printf("  run %lld: diverges at step %lld (%s vs %s)\n", static_cast<long long>(runs[i].id),
                        static_cast<long long>(*step), fmt_loss(at->a).c_str(), fmt_loss(at->b).c_str());
        } else
            std::printf("  run %lld: within tolerance over %zu common steps\n", static_cast<long long>(runs[i].id),
                        common);
    }
    return 0;
}

int cmd_list(RunStore& store)
{
    std::vector<std::vector<std::string>> rows = {
        {"id", "name", "status", "steps", "recipe", "final val", "tokens/s", "created", "tags"}};
    for (const auto& r : store.list_run_summaries())
        rows.push_back({std::to_string(r.id), r.name, std::string(run_status_name(r.status)), std::to_string(r.steps_done), r.recipe,
                        fmt_loss(r.final_val_loss), fmt_rate(r.median_tokens_per_s), r.created_at, join_tags(r.tags)});
    print_table(rows, {true, false, false, true, false, true, true, false, false});
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    CLI::App app{"mantissa-train: train GPT models with per-layer precision recipes, headless"};
    app.require_subcommand(1);
    app.set_version_flag("--version", [] { return version_text("mantissa-train", MANTISSA_QT_VERSION); });
    std::string db_path = default_store_path();
    app.add_option("--db", db_path, "Run store (SQLite) path")->capture_default_str();

    std::string project, name, run, format = "csv", table = "metrics", out_path;
    std::vector<std::string> sets;
    auto* run_cmd = app.add_subcommand("run", "Train a project and save the run");
    run_cmd->add_option("project", project, "Project JSON file")->required();
    run_cmd->add_option("--set", sets, "Override a project key: dotted.key=value (repeatable)");
    run_cmd->add_option("--name", name, "Run name (default: the project's name)");
    run_cmd->add_option("--db", db_path, "Run store (SQLite) path");
    bool no_store = false;
    run_cmd->add_flag("--no-store", no_store, "Do not record the run (benchmarks)");
    // The store server (docs/REMOTE.md): `run --serve` serves the store while it trains.
    ServeOptions serve;
    const auto add_serve_options = [&](CLI::App* cmd) {
        cmd->add_flag("--allow-control", serve.allow_control, "Take pause/resume/stop/checkpoint/precision commands");
        cmd->add_option("--token-file", serve.token_file, "Where the token is kept (default: STORE.token, mode 0600)");
        cmd->add_option("--tls-cert", serve.tls_cert, "Serve HTTPS with this PEM certificate");
        cmd->add_option("--tls-key", serve.tls_key, "The certificate's PEM private key");
        cmd->add_option("--requests-per-s", serve.requests_per_s, "Requests per second per client address")
            ->check(CLI::PositiveNumber);
    };
    run_cmd->add_option("--serve", serve.listen, "Serve the run store while training on [ADDR:]PORT (0: any free port)");
    add_serve_options(run_cmd);
    auto* serve_cmd = app.add_subcommand("serve", "Serve a run store, read-only, to Mantissa windows (docs/REMOTE.md)");
    serve_cmd->add_option("--db", db_path, "Run store (SQLite) path");
    serve.listen = "127.0.0.1:7878";
    serve_cmd->add_option("--listen", serve.listen, "[ADDR:]PORT (0: any free port)")->capture_default_str();
    add_serve_options(serve_cmd);

    auto* resume_cmd = app.add_subcommand("resume", "Continue a run from its newest checkpoint");
    resume_cmd->add_option("run", run, "Run id or name")->required();
    resume_cmd->add_option("--set", sets, "Override a key of the run's config, e.g. training.steps=4000");
    resume_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    std::string new_name;
    auto* rename_cmd = app.add_subcommand("rename", "Rename a run");
    rename_cmd->add_option("run", run, "Run id or name")->required();
    rename_cmd->add_option("name", new_name, "New name")->required();
    rename_cmd->add_option("--db", db_path, "Run store (SQLite) path");
    auto* delete_cmd = app.add_subcommand("delete", "Delete a run and everything recorded for it");
    delete_cmd->add_option("run", run, "Run id or name")->required();
    delete_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    auto* list_cmd = app.add_subcommand("list", "List saved runs");
    list_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    auto* show_cmd = app.add_subcommand("show", "Show one run: status, last losses, events, config");
    show_cmd->add_option("run", run, "Run id or name")->required();
    show_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    auto* export_cmd = app.add_subcommand("export", "Export a run's metrics or events");
    export_cmd->add_option("run", run, "Run id or name")->required();
    export_cmd->add_option("--format", format, "Output format")->check(CLI::IsMember({"csv", "tensorboard", "safetensors"}))->capture_default_str();
    export_cmd->add_option("--table", table, "What to export")->check(CLI::IsMember({"metrics", "events"}))
        ->capture_default_str();
    export_cmd->add_option("--out", out_path, "Output file (csv: default standard output; tensorboard: a directory)");
    export_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    std::vector<std::string> tag_list;
    auto* tag_cmd = app.add_subcommand("tag", "Add tags to a run");
    tag_cmd->add_option("run", run, "Run id or name")->required();
    tag_cmd->add_option("tags", tag_list, "Tags")->required();
    tag_cmd->add_option("--db", db_path, "Run store (SQLite) path");
    auto* untag_cmd = app.add_subcommand("untag", "Remove tags from a run");
    untag_cmd->add_option("run", run, "Run id or name")->required();
    untag_cmd->add_option("tags", tag_list, "Tags")->required();
    untag_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    std::string vary;
    auto* sweep_cmd = app.add_subcommand("sweep", "Train a project once per value of one key, then summarise");
    sweep_cmd->add_option("project", project, "Project JSON file")->required();
    sweep_cmd->add_option("--vary", vary, "The key and its values: dotted.key=v1,v2,...")->required();
    sweep_cmd->add_option("--set", sets, "Override a project key for every run: dotted.key=value (repeatable)");
    sweep_cmd->add_option("--name", name, "Sweep name: runs are tagged sweep:NAME (default: a timestamp)");
    sweep_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    std::vector<std::string> compare_runs;
    double tolerance = 1e-3;
    bool relative = false;
    auto* compare_cmd = app.add_subcommand("compare", "Compare runs: config diff, summaries, loss divergence");
    compare_cmd->add_option("runs", compare_runs, "Two or more run ids or names; the first is the reference")
        ->required();
    compare_cmd->add_option("--tolerance", tolerance, "Train-loss difference that counts as divergence")
        ->capture_default_str();
    compare_cmd->add_flag("--relative", relative, "Tolerance relative to the larger loss, not absolute");
    compare_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    CLI11_PARSE(app, argc, argv);

    // Under torchrun or Slurm (docs/DISTRIBUTED.md): ranks 1.. train what rank 0 hands them.
    if (*run_cmd || *resume_cmd || *sweep_cmd) {
        auto launch = join_data_parallel(!*sweep_cmd, *sweep_cmd ? "sweep" : "run");
        if (launch.exit_code >= 0) return launch.exit_code;
        g_dp = launch.dp;
        if (g_dp && g_dp->rank() != 0) return run_data_parallel_follower(*g_dp);
    }
    // Rank 0 that stops before training tells the other ranks, which wait for its project.
    const auto finish = [](int code) {
        if (g_dp && !g_dp_announced) announce_refusal(*g_dp, code == 0 ? 1 : code);
        return code;
    };

    // Reading commands open the store read-only: they never create or change a file, and they
    // work on read-only files, folders and mounts. Writing commands need an existing store;
    // only run and sweep create one.
    const bool reads = *list_cmd || *show_cmd || *export_cmd || *compare_cmd;
    try {
        if (*run_cmd) {
            if (run_cmd->count("--serve") == 0) serve.listen.clear();
            return finish(cmd_run(project, sets, db_path, name, no_store, serve));
        }
        if (*serve_cmd) {
            std::signal(SIGINT, on_sigint);
            std::signal(SIGTERM, on_sigint);
            return serve_store(db_path, serve, g_stop_requested);
        }
        if (*sweep_cmd) return cmd_sweep(project, vary, sets, db_path, name);
        RunStore store(db_path, reads ? OpenMode::ReadOnly : OpenMode::ReadWrite);
        if (*resume_cmd) return finish(cmd_resume(store, run, sets, db_path));
        if (*list_cmd) return cmd_list(store);
        if (*rename_cmd) return cmd_rename(store, run, new_name);
        if (*delete_cmd) return cmd_delete(store, run);
        if (*show_cmd) return cmd_show(store, run);
        if (*export_cmd) return cmd_export(store, run, format, table, out_path);
        if (*tag_cmd) return cmd_tag(store, run, tag_list, false);
        if (*untag_cmd) return cmd_tag(store, run, tag_list, true);
        if (*compare_cmd) return cmd_compare(store, compare_runs, tolerance, relative);
    } catch (const StoreError& e) { // also a status that a full disk kept from being recorded
        std::fprintf(stderr, "error: %s\n", e.what());
        return finish(3);
    }
    return 2;
}
