// SPDX-License-Identifier: GPL-3.0-or-later
// mantissa-train: the headless CLI. Trains a project into the run store and reads runs back.
// Exit codes: 0 ok, 1 training failed, 2 bad project or arguments, 3 run store problem.

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "console_progress.h"
#include "project_config.h"
#include "run_store.h"
#include "tensorboard_export.h"
#include "trainer.h"

using namespace mantissa;

namespace {

std::atomic<bool> g_stop_requested{false};

extern "C" void on_sigint(int)
{
    if (g_stop_requested.exchange(true)) {
        // Second Ctrl-C: the user wants out now.
        std::signal(SIGINT, SIG_DFL);
        std::raise(SIGINT);
    }
}

// Trains into an existing run record until done or Ctrl-C, then marks the run.
int train_into_store(Trainer& trainer, RunStore& store, int64_t run_id, const std::string& db_path)
{
    const ProjectConfig& config = trainer.config();
    if (config.training.checkpoint_dir.empty()) {
        // Beside the store, one folder per run: what `resume` looks in.
        const auto base = std::filesystem::absolute(db_path).parent_path();
        trainer.set_checkpoint_dir((base / "checkpoints" / ("run-" + std::to_string(run_id))).string());
    }
    StoreSink store_sink(store, run_id);
    ConsoleProgress console(config.training.steps, config.telemetry.log_interval, isatty(STDOUT_FILENO) != 0, stdout);
    console.watch_stop_flag(&g_stop_requested, &trainer);
    FanOutSink sink({&store_sink, &console});
    std::signal(SIGINT, on_sigint);
    std::signal(SIGTERM, on_sigint);

    RunSummary summary;
    try {
        summary = trainer.run(sink);
    } catch (const std::exception& e) {
        store.append_event(run_id, summary.steps_done, "run_failed", e.what());
        store.finish_run(run_id, "failed");
        std::fprintf(stderr, "\nerror: training failed: %s\n", e.what());
        return 1;
    }
    store.finish_run(run_id, summary.stopped_early ? "stopped" : "finished");
    std::printf("%s after %lld steps: train loss %.4f", summary.stopped_early ? "stopped" : "finished",
                static_cast<long long>(summary.steps_done), summary.final_train_loss);
    if (summary.final_val_loss >= 0) std::printf(", val loss %.4f", summary.final_val_loss);
    std::printf("\nmean step time: %.3f ms (%.0f tokens/s)\n", summary.mean_step_time_ms, summary.tokens_per_s);
    std::printf("saved as run %lld in %s\n", static_cast<long long>(run_id), db_path.c_str());
    return 0;
}

int cmd_run(const std::string& project_path, const std::vector<std::string>& sets, const std::string& db_path,
            std::string name, bool no_store)
{
    std::unique_ptr<Trainer> trainer;
    try {
        std::vector<Override> overrides;
        for (const auto& s : sets) overrides.push_back(parse_override(s));
        ProjectConfig config = load_project_file(project_path, overrides);
        trainer = std::make_unique<Trainer>(std::move(config)); // loads data: may still reject the project
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    if (name.empty()) name = trainer->config().name;
    if (no_store) {
        // Console only: what the store costs the training step is measured against this.
        ConsoleProgress console(trainer->config().training.steps, trainer->config().telemetry.log_interval,
                                isatty(STDOUT_FILENO) != 0, stdout);
        console.watch_stop_flag(&g_stop_requested, trainer.get());
        std::signal(SIGINT, on_sigint);
        const auto summary = trainer->run(console);
        std::printf("mean step time: %.3f ms (%.0f tokens/s)\n", summary.mean_step_time_ms, summary.tokens_per_s);
        return 0;
    }
    std::unique_ptr<RunStore> store;
    int64_t run_id = 0;
    try {
        store = std::make_unique<RunStore>(db_path);
        run_id = store->create_run(name, project_path, to_json_text(trainer->config()));
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
    std::printf("run %lld '%s' -> %s\n", static_cast<long long>(run_id), name.c_str(), db_path.c_str());
    return train_into_store(*trainer, *store, run_id, db_path);
}

// The newest checkpoint on disk whose step the store has metrics for: a killed process may
// have written checkpoints (and rotated old ones away) after its last store flush. "" if none.
std::string newest_checkpoint(RunStore& store, const RunInfo& info)
{
    namespace fs = std::filesystem;
    std::string dir;
    for (const auto& e : store.events(info.id))
        if (e.kind == "checkpoint") dir = fs::path(e.message).parent_path().string();
    std::string checkpoint;
    for (const auto& f : list_checkpoints(dir))
        if (std::stoll(fs::path(f).stem().string().substr(5)) <= info.last_step || checkpoint.empty()) checkpoint = f;
    return checkpoint;
}

// A Trainer for a saved run, at its newest checkpoint. Throws ConfigError.
std::unique_ptr<Trainer> trainer_at_checkpoint(RunStore& store, const RunInfo& info, const std::vector<std::string>& sets)
{
    const std::string checkpoint = newest_checkpoint(store, info);
    if (checkpoint.empty())
        throw ConfigError("run " + std::to_string(info.id) + " has no checkpoint to resume from");
    std::vector<Override> overrides;
    for (const auto& s : sets) overrides.push_back(parse_override(s));
    const auto base = std::filesystem::absolute(info.project_path).parent_path().string();
    auto trainer = std::make_unique<Trainer>(load_project_json(info.config_json, base, overrides));
    trainer->load_checkpoint(checkpoint);
    std::printf("run %lld '%s' at step %lld from %s\n", static_cast<long long>(info.id), info.name.c_str(),
                static_cast<long long>(trainer->step()), checkpoint.c_str());
    return trainer;
}

// Continues a saved run from its newest checkpoint, appending to the same run record.
int cmd_resume(RunStore& store, const std::string& run, const std::vector<std::string>& sets, const std::string& db_path)
{
    auto info = store.find_run(run);
    if (!info) {
        std::fprintf(stderr, "error: no run '%s' in %s\n", run.c_str(), db_path.c_str());
        return 2;
    }
    std::unique_ptr<Trainer> trainer;
    try {
        trainer = trainer_at_checkpoint(store, *info, sets);
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    try {
        store.claim_run(info->id);
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
    return train_into_store(*trainer, store, info->id, db_path);
}

std::optional<RunInfo> find_or_complain(RunStore& store, const std::string& run)
{
    auto info = store.find_run(run);
    if (!info) std::fprintf(stderr, "error: no run '%s' in %s\n", run.c_str(), store.path().c_str());
    return info;
}

int cmd_list(RunStore& store)
{
    std::printf("%5s  %-24s  %-9s  %7s  %s\n", "id", "name", "status", "steps", "created");
    for (const auto& r : store.list_runs())
        std::printf("%5lld  %-24s  %-9s  %7lld  %s\n", static_cast<long long>(r.id), r.name.c_str(), r.status.c_str(),
                    static_cast<long long>(r.last_step), r.created_at.c_str());
    return 0;
}

int cmd_show(RunStore& store, const std::string& run)
{
    auto info = find_or_complain(store, run);
    if (!info) return 2;
    std::printf("run %lld '%s'\nstatus: %s\nproject: %s\ncreated: %s\nfinished: %s\nsteps: %lld\n",
                static_cast<long long>(info->id), info->name.c_str(), info->status.c_str(), info->project_path.c_str(),
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
    if (info->status == "running") {
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
        try {
            trainer_at_checkpoint(store, *info, {})->export_safetensors(out_path);
        } catch (const ConfigError& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            return 2;
        }
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

} // namespace

int main(int argc, char** argv)
{
    CLI::App app{"mantissa-train: train GPT models with per-layer precision recipes, headless"};
    app.require_subcommand(1);
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

    CLI11_PARSE(app, argc, argv);

    if (*run_cmd) return cmd_run(project, sets, db_path, name, no_store);
    try {
        RunStore store(db_path);
        if (*resume_cmd) return cmd_resume(store, run, sets, db_path);
        if (*list_cmd) return cmd_list(store);
        if (*rename_cmd) return cmd_rename(store, run, new_name);
        if (*delete_cmd) return cmd_delete(store, run);
        if (*show_cmd) return cmd_show(store, run);
        if (*export_cmd) return cmd_export(store, run, format, table, out_path);
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
    return 2;
}
