// SPDX-License-Identifier: GPL-3.0-or-later
// mantissa-train: the headless CLI. Trains a project (or a sweep of it) into the run store,
// reads runs back, tags and compares them. This file parses the command line and hands it to
// one command (train_cli.h).
// Exit codes: 0 ok, 1 training failed, 2 bad project or arguments, 3 run store problem.

#include <cmath>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "data_parallel_cli.h"
#include "determinism.h"
#include "remote_serving.h"
#include "run_compare.h"
#include "run_store.h"
#include "train_cli.h"
#include "version_report.h"

using namespace mantissa;

namespace {

// The first word that is neither an option nor --db's value, when it names no command.
std::string unknown_command(CLI::App& app, int argc, char** argv)
{
    for (int i = 1; i < argc; ++i) {
        const std::string word = argv[i];
        if (word == "--db") {
            ++i;
            continue;
        }
        if (word.empty() || word[0] == '-') continue;
        for (const auto* sub : app.get_subcommands({}))
            if (sub->get_name() == word) return {};
        return word;
    }
    return {};
}

// A finite number > 0 (>= 0 where `zero_allowed`). CLI11's own checks let NaN through and
// print their bound as 309 digits of DBL_MAX.
CLI::Validator finite_number(bool zero_allowed)
{
    const std::string bound = zero_allowed ? ">= 0" : "> 0";
    return CLI::Validator(
        [=](std::string& text) {
            try {
                size_t used = 0;
                const double v = std::stod(text, &used);
                const bool ok = used == text.size() && std::isfinite(v) && (v > 0.0 || (zero_allowed && v == 0.0));
                return ok ? std::string() : "must be a finite number " + bound;
            } catch (const std::exception&) {
                return std::string("must be a number");
            }
        },
        "NUMBER " + bound);
}

} // namespace

// The command; main ends the process by a stopping signal once its objects are gone.
static int cli_main(int argc, char** argv)
{
    prepare_cublas_for_determinism(); // before any thread starts (determinism.h)
    // A file-size limit (ulimit -f) makes a write past it fail with EFBIG, which the writers
    // report ("File too large") as they do a full disk, instead of killing the process mid-file.
    std::signal(SIGXFSZ, SIG_IGN);
    CLI::App app{"mantissa-train: train GPT models with per-layer precision recipes, headless"};
    // A usage error reads as every other refusal does ("--tolerance: must be ..." had no prefix).
    app.failure_message(
        [](const CLI::App* a, const CLI::Error& e) { return "error: " + CLI::FailureMessage::simple(a, e); });
    app.require_subcommand(1);
    app.set_version_flag("--version", [] { return version_text("mantissa-train", MANTISSA_QT_VERSION); });
    std::string db_path = default_store_path();
    app.add_option("--db", db_path, "Run store (SQLite) path")->capture_default_str();

    std::string project, name, run, format = "csv", table, out_path;
    std::vector<std::string> sets;
    auto* run_cmd = app.add_subcommand("run", "Train a project and save the run");
    run_cmd->add_option("project", project, "Project JSON file")->required();
    run_cmd->add_option("--set", sets, "Override a project key: dotted.key=value (repeatable)");
    run_cmd->add_option("--name", name, "Run name (default: the project's name)");
    run_cmd->add_option("--db", db_path, "Run store (SQLite) path");
    bool no_store = false;
    bool start_over = false;
    run_cmd->add_flag("--no-store", no_store, "Do not record the run (benchmarks)");
    // The store server (docs/REMOTE.md): `run --serve` serves the store while it trains.
    ServeOptions serve;
    const auto add_serve_options = [&](CLI::App* cmd) {
        cmd->add_flag("--allow-control", serve.allow_control, "Take pause/resume/stop/checkpoint/precision commands");
        cmd->add_option("--token-file", serve.token_file, "Where the token is kept (default: STORE.token, mode 0600)");
        cmd->add_option("--tls-cert", serve.tls_cert, "Serve HTTPS with this PEM certificate");
        cmd->add_option("--tls-key", serve.tls_key, "The certificate's PEM private key");
        cmd->add_option("--requests-per-s", serve.requests_per_s,
                        "Requests per second per client address (a burst of twice that)")
            ->check(finite_number(false)) // NaN passed CLI::PositiveNumber, and lifted the limit
            ->capture_default_str();
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
    resume_cmd->add_flag("--start-over", start_over,
                         "A run with no checkpoint (stopped before its first): train it again from step 0, dropping "
                         "what it recorded");
    resume_cmd->add_option("--serve", serve.listen, "Serve the run store while training on [ADDR:]PORT (0: any free port)");
    add_serve_options(resume_cmd);

    std::string new_name;
    auto* rename_cmd = app.add_subcommand("rename", "Rename a run");
    rename_cmd->add_option("run", run, "Run id or name")->required();
    rename_cmd->add_option("name", new_name, "New name")->required();
    rename_cmd->add_option("--db", db_path, "Run store (SQLite) path");
    auto* delete_cmd = app.add_subcommand("delete", "Delete a run, everything recorded for it, and its checkpoints");
    delete_cmd->add_option("run", run, "Run id or name")->required();
    delete_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    auto* list_cmd = app.add_subcommand("list", "List saved runs");
    list_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    auto* show_cmd = app.add_subcommand("show", "Show one run: status, last losses, events, config");
    show_cmd->add_option("run", run, "Run id or name")->required();
    show_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    auto* export_cmd = app.add_subcommand("export", "Export a run's metrics, events, per-layer statistics or weights");
    export_cmd->add_option("run", run, "Run id or name")->required();
    export_cmd->add_option("--format", format, "Output format")->check(CLI::IsMember({"csv", "tensorboard", "safetensors"}))->capture_default_str();
    export_cmd
        ->add_option("--table", table, "The CSV table: metrics (the default), events, or layers (per-layer statistics)")
        ->check(CLI::IsMember({"metrics", "events", "layers"}));
    export_cmd->add_option("--out", out_path,
                           "Output file (csv: default standard output; tensorboard: a directory; safetensors: a file)");
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
    double tolerance = kDefaultDivergenceTolerance; // the Compare page's too
    bool relative = false;
    auto* compare_cmd = app.add_subcommand("compare", "Compare runs: config diff, summaries, loss divergence");
    compare_cmd->add_option("runs", compare_runs, "Two or more run ids or names; the first is the reference")
        ->required();
    compare_cmd->add_option("--tolerance", tolerance, "Train-loss difference that counts as divergence")
        ->capture_default_str()
        ->check(finite_number(true)); // NaN: every run within tolerance; < 0: every run diverged
    compare_cmd->add_flag("--relative", relative, "Tolerance relative to the larger loss, not absolute");
    compare_cmd->add_option("--db", db_path, "Run store (SQLite) path");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // CLI11 answers a mistyped command with "A subcommand is required": name it, and the
        // commands there are.
        if (const std::string unknown = unknown_command(app, argc, argv); !unknown.empty()) {
            std::string commands;
            for (const auto* sub : app.get_subcommands({})) commands += (commands.empty() ? "" : ", ") + sub->get_name();
            std::fprintf(stderr, "error: unknown command '%s' (the commands are %s)\nRun with --help for more information.\n",
                         unknown.c_str(), commands.c_str());
            return 2;
        }
        // --help and --version exit 0; every usage error exits 2, as the README says (CLI11's
        // own codes are 100 and up).
        return app.exit(e) == 0 ? 0 : 2;
    }
    // Refused by RunStore too; here as a bad argument (exit 2), before anything is loaded.
    if (RunStore::is_private_database(db_path) && !(*run_cmd && no_store)) {
        std::fprintf(stderr, "error: --db '%s' is not a file: name the run store's file (default %s)\n",
                     db_path.c_str(), default_store_path().c_str());
        return 2;
    }
    if (RunStore::names_a_folder(db_path) && !(*run_cmd && no_store)) {
        std::fprintf(stderr, "error: --db '%s' is a folder: name the run store's file in it, e.g. '%s%sruns.sqlite'\n",
                     db_path.c_str(), db_path.c_str(), db_path.back() == '/' ? "" : "/");
        return 2;
    }

    // Under torchrun or Slurm (docs/DISTRIBUTED.md): ranks 1.. train what rank 0 hands them.
    DataParallelJob job;
    if (*run_cmd || *resume_cmd || *sweep_cmd) {
        // A line at a time into a file too (`> log 2>&1`): a sweep's error on stderr came before
        // the summary and header lines printed ahead of it. Training prints a few lines a step
        // at most; the reading commands keep full buffering for their tables and exports.
        std::setvbuf(stdout, nullptr, _IOLBF, 0);
        auto launch = join_data_parallel(!*sweep_cmd, *sweep_cmd ? "sweep" : "run", g_stop_requested);
        if (launch.exit_code >= 0) return launch.exit_code;
        job.dp = launch.dp;
        if (job.dp && job.dp->rank() != 0) return run_data_parallel_follower(*job.dp);
    }
    // Rank 0 that stops before training tells the other ranks, which wait for its project.
    const auto finish = [&job](int code) {
        if (job.dp && !job.announced) announce_refusal(*job.dp, code == 0 ? 1 : code);
        return code;
    };

    // Reading commands open the store read-only: they never create or change a file, and they
    // work on read-only files, folders and mounts. Writing commands need an existing store;
    // only run and sweep create one.
    const bool reads = *list_cmd || *show_cmd || *export_cmd || *compare_cmd;
    try {
        if (*run_cmd) {
            if (run_cmd->count("--serve") == 0) serve.listen.clear();
            return finish(cmd_run(project, sets, db_path, name, no_store, serve, job));
        }
        if (*serve_cmd) {
            std::signal(SIGINT, on_sigint);
            std::signal(SIGTERM, on_sigint);
            return serve_store(db_path, serve, g_stop_requested);
        }
        if (*sweep_cmd) return cmd_sweep(project, vary, sets, db_path, name, job);
        if (reads)
            return run_reading_command(db_path, [&](RunStore& store, const CliStreams& io) {
                if (*list_cmd) return cmd_list(store, io);
                if (*show_cmd) return cmd_show(store, run, io);
                if (*export_cmd) return cmd_export(store, run, format, table, out_path, io);
                return cmd_compare(store, compare_runs, tolerance, relative, io);
            });
        RunStore store(db_path, OpenMode::ReadWrite);
        if (*resume_cmd) {
            if (resume_cmd->count("--serve") == 0) serve.listen.clear();
            return finish(cmd_resume(store, run, sets, db_path, serve, job, start_over));
        }
        if (*rename_cmd) return cmd_rename(store, run, new_name);
        if (*delete_cmd) return cmd_delete(store, run);
        if (*tag_cmd) return cmd_tag(store, run, tag_list, false);
        if (*untag_cmd) return cmd_tag(store, run, tag_list, true);
    } catch (const StoreError& e) { // also a status that a full disk kept from being recorded
        std::fprintf(stderr, "error: %s\n", e.what());
        return finish(3);
    }
    return 2;
}

int main(int argc, char** argv) { return exit_after_stop(cli_main(argc, argv)); }
