// SPDX-License-Identifier: GPL-3.0-or-later
// mantissa-train run and resume: one training session into the run store, with Ctrl-C, the
// store server (--serve) and rank 0's part in a data-parallel job.
#include "train_cli.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <unistd.h>

#include "cli_table.h"
#include "console_progress.h"
#include "data_parallel_cli.h"
#include "project_config.h"
#include "run_session.h"
#include "run_store.h"
#include "trainer.h"
#include "unread_settings.h"

namespace mantissa {

std::atomic<bool> g_stop_requested{false};

namespace {

std::atomic<int> g_stop_signal{0}; // the signal that asked for the stop, 0 for none
int g_exit_signal = 0;              // the signal that stopped a command before it was done

// The step time leaves out what follows a telemetry step (its frame's read-back, the sinks);
// this is what a step costs the run with them (bench/telemetry.py reads both).
void print_loop_time(const RunSummary& summary)
{
    std::printf("mean loop time: %.3f ms a step (the step, its telemetry frame and the sinks)\n",
                summary.mean_loop_time_ms);
}

} // namespace

extern "C" void on_sigint(int signo)
{
    int none = 0;
    g_stop_signal.compare_exchange_strong(none, signo);
    if (g_stop_requested.exchange(true)) {
        // A second signal: out now, by the signal that came (a second SIGTERM ended as SIGINT).
        std::signal(signo, SIG_DFL);
        std::raise(signo);
    }
}

void note_stopped_by_signal() { g_exit_signal = g_stop_signal.load(); }

int exit_after_stop(int code)
{
    const int signo = g_exit_signal;
    if (code != 0 || signo == 0) return code;
    std::fflush(stdout);
    std::fflush(stderr);
    std::signal(signo, SIG_DFL);
    std::raise(signo);
    return 128 + signo; // where the default action does not end the process (PID 1 in a container)
}

int train_session(RunSession& session, const std::string& db_path, DataParallelJob& job, TelemetrySink* extra,
                  TrainEnd* end)
{
    const ProjectConfig& config = session.config();
    ConsoleProgress console(config.training.steps, config.telemetry.log_interval, isatty(STDOUT_FILENO) != 0, stdout);
    console.watch_stop_flag(&g_stop_requested, &session.trainer());
    std::signal(SIGINT, on_sigint);
    std::signal(SIGTERM, on_sigint);
    if (job.dp) {
        try {
            announce_project(*job.dp, config);
            job.announced = true;
        } catch (const CollectiveError& e) { // the run stays "running" until the store sees it dead: resumable
            std::fprintf(stderr, "error: %s\n", e.what());
            return 1;
        }
    }
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
    std::vector<TelemetrySink*> sinks = {&console};
    if (extra) sinks.push_back(extra);
    const int64_t first_step = session.trainer().step(); // a resume's
    const SessionOutcome outcome = session.run(sinks);
    if (outcome.status == RunStatus::Stopped) note_stopped_by_signal();
    trained = true;
    forward_stop.join();
    if (job.dp && outcome.status != RunStatus::Failed) finish_rank(*job.dp, session.trainer());
    else if (job.dp) rank0_failed(*job.dp);
    if (outcome.rows_lost > 0)
        std::fprintf(stderr, "\nerror: the run store could not keep %lld rows of this run's metrics (the last "
                             "error: %s); checkpoints after the loss are not recorded, so a resume trains those "
                             "steps again%s\n",
                     static_cast<long long>(outcome.rows_lost), outcome.store_error.c_str(),
                     outcome.status == RunStatus::Failed ? "" : "; the run is recorded as interrupted");
    if (end) end->store_failed = outcome.store_failed || outcome.rows_lost > 0;
    if (outcome.store_failed) {
        std::fprintf(stderr, "\nerror: %s\n", outcome.error.c_str());
        return 3;
    }
    if (outcome.status == RunStatus::Failed) {
        std::fprintf(stderr, "\nerror: training failed: %s\n", outcome.error.c_str());
        return 1;
    }
    const RunSummary& summary = outcome.summary;
    std::printf("%s after %lld steps", std::string(run_status_name(outcome.status)).c_str(),
                static_cast<long long>(summary.steps_done));
    // A session stopped before its first step measured no loss ("train loss 0.0000" read as
    // one); a diverged run's NaN val loss is printed, as its train loss is.
    const bool stepped = summary.steps_done > first_step;
    if (stepped) std::printf(": train loss %s", fmt_recorded_loss(summary.final_train_loss, true).c_str());
    const bool evaluated = summary.final_val_step >= 0;
    if (evaluated)
        std::printf("%s val loss %s", stepped ? "," : ":", fmt_recorded_loss(summary.final_val_loss, true).c_str());
    // A stopped run is not evaluated where it stops: its val loss is an earlier step's.
    if (evaluated && summary.final_val_step != summary.steps_done)
        std::printf(" (at step %lld)", static_cast<long long>(summary.final_val_step));
    // A session of fewer steps than its warm-up (a resume of a few steps) times none: "0.000 ms
    // (0 tokens/s)" read as a measurement.
    if (summary.mean_step_time_ms > 0) {
        std::printf("\nmean step time: %.3f ms (%.0f tokens/s)\n", summary.mean_step_time_ms, summary.tokens_per_s);
        print_loop_time(summary);
    } else {
        std::printf("\nmean step time: not measured (this session trained no step after its warm-up steps)\n");
    }
    if (summary.peak_device_memory_bytes >= 0)
        std::printf("peak device memory: %.1f MiB\n", static_cast<double>(summary.peak_device_memory_bytes) / 1048576.0);
    std::printf("saved as run %lld in %s\n", static_cast<long long>(session.run_id()), db_path.c_str());
    // Trained, but its final state is not kept: the end of the run cannot be resumed from.
    if (const std::string problem = final_checkpoint_problem(outcome); !problem.empty()) {
        if (end) end->final_checkpoint_lost = true;
        std::fprintf(stderr, "\nerror: %s\n", problem.c_str());
        return 3;
    }
    if (outcome.checkpoints_failed > 0)
        std::fprintf(stderr, "note: %lld checkpoint%s could not be written (its checkpoint_failed event says why); "
                             "the final one was\n",
                     static_cast<long long>(outcome.checkpoints_failed), outcome.checkpoints_failed == 1 ? "" : "s");
    return outcome.rows_lost > 0 ? 3 : 0; // trained, but its record has holes
}

namespace {

std::vector<Override> parse_overrides(const std::vector<std::string>& sets)
{
    std::vector<Override> overrides;
    for (const auto& s : sets) overrides.push_back(parse_override(s));
    return overrides;
}

} // namespace

int cmd_run(const std::string& project_path, const std::vector<std::string>& sets, const std::string& db_path,
            std::string name, bool no_store, const ServeOptions& serve, DataParallelJob& job)
{
    if (const std::string problem = name.empty() ? "" : run_name_problem(name); !problem.empty()) {
        std::fprintf(stderr, "error: --name %s\n", problem.c_str()); // empty: the project's name
        return 2;
    }
    if (!serve.listen.empty()) {
        const std::string problem =
            no_store ? "--serve serves the run store: it cannot go with --no-store" : serve_address_problem(serve.listen);
        if (!problem.empty()) {
            std::fprintf(stderr, "error: %s\n", problem.c_str());
            return 2;
        }
    }
    // torchrun --max-restarts: an attempt after the first continues the run the first created.
    if (job.dp && job.dp->restart_count() > 0 && !no_store)
        if (const auto run_id = job.dp->peek_job("run_id")) {
            std::printf("torchrun restart %d: resuming run %s\n", job.dp->restart_count(), run_id->c_str());
            RunStore store(db_path);
            // served as the first attempt was; one killed before its first checkpoint starts over
            return cmd_resume(store, *run_id, {}, db_path, serve, job, /*start_over=*/true);
        }
    std::unique_ptr<RunSession> session;
    try {
        ProjectConfig config = load_project_file(project_path, parse_overrides(sets)); // names the file itself
        const auto load = [&](const std::vector<Override>& o) { return load_project_file(project_path, o); };
        if (!job.dp || job.dp->rank() == 0) {
            for (const auto& note : overrides_read_by_no_layer(parse_overrides(sets), load))
                std::fprintf(stderr, "note: %s\n", note.c_str());
            for (const auto& note : project_settings_read_by_no_layer(config, parse_overrides(sets)))
                std::fprintf(stderr, "note: %s\n", note.c_str());
            for (const auto& note : recipe_parts_left_out(config)) std::fprintf(stderr, "note: %s\n", note.c_str());
        }
        try {
            session = std::make_unique<RunSession>(std::move(config));
        } catch (const ConfigError& e) { // the data is read here: it may still reject the project
            const std::string blamed = blame_override(e.what(), parse_overrides(sets)); // a --set's value
            throw ConfigError(blamed.empty() ? project_path + ": " + e.what() : blamed);
        }
        if (job.dp) session->trainer().set_data_parallel(job.dp);
    } catch (const ConfigError& e) {
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
        std::signal(SIGTERM, on_sigint); // Slurm's scancel, torchrun's agent: a stop, as train_session's
        // As train_session reports a failed run (exit 1), not an abort: a diverged run's NaN
        // weights, for one, make LibTorch's sampler throw at the next evaluation.
        try {
            if (job.dp) {
                announce_project(*job.dp, trainer.config());
                job.announced = true;
            }
            const auto summary = trainer.run(console);
            if (summary.stopped_early) note_stopped_by_signal();
            if (job.dp) finish_rank(*job.dp, trainer);
            std::printf("mean step time: %.3f ms (%.0f tokens/s)\n", summary.mean_step_time_ms, summary.tokens_per_s);
            print_loop_time(summary);
            if (summary.peak_device_memory_bytes >= 0)
                std::printf("peak device memory: %.1f MiB\n",
                            static_cast<double>(summary.peak_device_memory_bytes) / 1048576.0);
        } catch (const std::exception& e) {
            if (job.dp) rank0_failed(*job.dp);
            std::fprintf(stderr, "\nerror: training failed: %s\n", e.what());
            return 1;
        }
        return 0;
    }
    std::unique_ptr<RunStore> store;
    try {
        store = std::make_unique<RunStore>(db_path);
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
    // Listening before the run is made: a port in use (an old server still on it) leaves no
    // failed run behind. Until the run exists a command is answered 404.
    std::unique_ptr<LiveServer> server; // stops before the session and the store go
    if (!serve.listen.empty()) {
        server = LiveServer::start(*session, *store, db_path, serve);
        if (!server) return 2;
    }
    try {
        // Absolute: a resume from another folder must find the same project folder, which its
        // relative data.path and checkpoint_dir are spelled from.
        session->create_run(*store, name, std::filesystem::absolute(project_path).string());
        if (job.dp) job.dp->post_job("run_id", std::to_string(session->run_id()));
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    } catch (const ConfigError& e) { // a checkpoint folder that cannot be made
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    } catch (const CollectiveError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    std::printf("run %lld '%s' -> %s\n", static_cast<long long>(session->run_id()), name.c_str(), db_path.c_str());
    if (server) server->announce();
    return train_session(*session, db_path, job, server.get());
}

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
        if (const auto& missing = session->missing_checkpoints(); !missing.empty()) {
            std::string list;
            for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
            std::fprintf(stderr, "note: newer checkpoint%s of this run %s missing (deleted or moved): %s; the steps "
                                 "after step %lld are trained again\n",
                         missing.size() == 1 ? "" : "s", missing.size() == 1 ? "is" : "are", list.c_str(),
                         static_cast<long long>(session->trainer().step()));
        }
        if (!session->settings_moved_earlier().empty())
            std::fprintf(stderr, "note: %s\n", session->settings_moved_earlier().c_str());
        for (const auto& note : recipe_parts_left_out(session->trainer().config()))
            std::fprintf(stderr, "note: %s\n", note.c_str());
        return session;
    } catch (const CheckpointUnusable& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        exit_code = 3;
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        exit_code = 2;
    } catch (const StoreError& e) { // the store's own checkpoint folder cannot be written in
        std::fprintf(stderr, "error: %s\n", e.what());
        exit_code = 3;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: run %lld cannot be reopened: %s\n", static_cast<long long>(info.id), e.what());
        exit_code = 1;
    }
    return nullptr;
}

// Continues a saved run from its newest good checkpoint, appending to the same run record.
int cmd_resume(RunStore& store, const std::string& run, const std::vector<std::string>& sets, const std::string& db_path,
               const ServeOptions& serve, DataParallelJob& job, bool start_over)
{
    if (!serve.listen.empty())
        if (const std::string problem = serve_address_problem(serve.listen); !problem.empty()) {
            std::fprintf(stderr, "error: %s\n", problem.c_str());
            return 2;
        }
    // A name several runs share resumes the newest of them, with a note naming the others.
    auto info = find_or_complain(store, run);
    if (!info) return 2;
    for (const auto& s : sets)
        if (s.starts_with("name="))
            std::fprintf(stderr, "note: --set name changes the run's stored settings, not its name in the store; "
                                 "`rename %lld NEW` renames it\n",
                         static_cast<long long>(info->id));
    // Refused before its checkpoint is loaded and announced ("run 1 'D' at step 600 from ..."), and
    // before a failed reopen's notices go into a run that another process records.
    if (info->status == RunStatus::Running) {
        std::fprintf(stderr, "error: run %lld is in use by another process: stop it first\n",
                     static_cast<long long>(info->id));
        return 3;
    }
    std::vector<RunEvent> notices;
    int exit_code = 0;
    auto session = reopen_or_complain(store, *info, sets, notices, exit_code);
    if (!session) {
        for (const auto& e : notices) store.append_event(info->id, e);
        return exit_code;
    }
    // A finished run that is given no more steps has nothing to train: said, and the record left
    // as it is (it printed "finished after 40 steps: train loss 0.0000" and added a start and a
    // finish). One stopped or killed at its last step is resumed, and so marked finished.
    const Trainer& trainer = session->trainer();
    if (info->status == RunStatus::Finished && trainer.step() >= trainer.config().training.steps) {
        std::printf("run %lld '%s' has already trained its %lld steps; resume --set training.steps=N trains it on\n",
                    static_cast<long long>(info->id), info->name.c_str(),
                    static_cast<long long>(trainer.step()));
        return 0;
    }
    // Starting over drops every step the run recorded (a run killed at step 2916 with no
    // checkpoint, resumed with training.steps=20, kept 20): asked for, never by default.
    if (session->starts_over() && info->last_step > 0 && !start_over) {
        std::fprintf(stderr,
                     "error: run %lld '%s' has no checkpoint to resume from (it stopped at step %lld, before its "
                     "first was recorded): a resume trains it again from step 0 and drops the %lld steps it "
                     "recorded; pass --start-over to do so (nothing was changed)\n",
                     static_cast<long long>(info->id), info->name.c_str(), static_cast<long long>(info->last_step),
                     static_cast<long long>(info->last_step));
        for (const auto& e : notices) store.append_event(info->id, e);
        return 2;
    }
    try {
        if (job.dp) session->trainer().set_data_parallel(job.dp);
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    // Listening before the run is claimed: a busy port leaves the run as it was.
    std::unique_ptr<LiveServer> server; // stops before the session goes
    if (!serve.listen.empty()) {
        server = LiveServer::start(*session, store, db_path, serve);
        if (!server) return 2;
    }
    try {
        session->claim(notices);
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
    // Said once they are: a resume refused before its claim (in use, no checkpoint) stores nothing.
    if (!session->config_changes().empty())
        std::printf("settings changed (stored with the run): %s\n",
                    describe_setting_changes(session->config_changes()).c_str());
    if (session->starts_over())
        std::printf("run %lld '%s' ended before its first checkpoint: training it again from step 0\n",
                    static_cast<long long>(info->id), info->name.c_str());
    if (server) server->announce();
    return train_session(*session, db_path, job, server.get());
}

} // namespace mantissa
