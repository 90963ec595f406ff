// SPDX-License-Identifier: GPL-3.0-or-later
#include "data_parallel_cli.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli_table.h"
#include "telemetry.h"

namespace mantissa {

namespace {
const char* const kProjectKey = "project"; // "refused:<code>" or "<base_dir>\n<project json>"
const char* const kEndKey = "end";         // rank 0's outcome once known: "clean" or "failed"
const char* const kEndReadKey = "end_read"; // arrivals: the others have read it
}

DataParallelLaunch join_data_parallel(bool allowed, const char* command, const std::atomic<bool>& stop)
{
    DataParallelLaunch launch;
    std::optional<DistributedEnv> env;
    try {
        env = read_distributed_env();
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        launch.exit_code = 2;
        return launch;
    }
    if (!env) return launch; // no launcher, or one process (read_distributed_env): an ordinary run
    if (!allowed) {
        std::fprintf(stderr, "error: '%s' does not train data-parallel; launch 'run' or 'resume' under torchrun\n",
                     command);
        launch.exit_code = 2;
        return launch;
    }
    // A peer that dies leaves sockets that a write then finds closed: with SIGPIPE's default
    // action that write kills this rank silently (Gloo's TCP pairs write with writev, which
    // takes no MSG_NOSIGNAL) before it can report "lost rank N". Ignored, the write fails
    // with EPIPE and the collective throws, as under Python, which ignores SIGPIPE itself.
    std::signal(SIGPIPE, SIG_IGN);
    try {
        launch.dp = DataParallel::join(*env, std::chrono::seconds(kDefaultCollectiveTimeoutS));
        // Rank 0 takes Ctrl-C and SIGTERM from its start (train_session); the others ignore
        // them while they train, and end when rank 0 does.
        DataParallel::StartWatch watch;
        if (env->rank == 0) watch.stopped = [&stop] { return stop.load(); };
        watch.notice = [](const std::string& text) { std::fprintf(stderr, "note: %s\n", text.c_str()); };
        launch.dp->watch_start(std::move(watch));
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        launch.exit_code = 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        launch.exit_code = 1;
    }
    return launch;
}

void announce_project(DataParallel& dp, const ProjectConfig& config)
{
    dp.post(kProjectKey, config.base_dir + "\n" + to_json_text(config));
}

void announce_refusal(DataParallel& dp, int exit_code)
{
    try {
        dp.post(kProjectKey, "refused:" + std::to_string(exit_code));
    } catch (const CollectiveError&) {
        return; // the store is gone: the others find that out for themselves
    }
    // Rank 0 may host the store: it stays until the others have read why (or a while).
    dp.wait_for_arrivals("refusal_read", dp.world_size() - 1, std::chrono::seconds(30));
}

bool finish_rank(DataParallel& dp, const Trainer& trainer)
{
    std::printf("data-parallel rank %d/%d: state digest %s\n", dp.rank(), dp.world_size(),
                trainer.state_digest().c_str());
    std::fflush(stdout);
    try {
        if (dp.rank() == 0) {
            dp.post(kEndKey, "clean");
            // The others are waiting for it: they read it at once, or they are gone.
            if (!dp.wait_for_arrivals(kEndReadKey, dp.world_size() - 1, std::chrono::seconds(30))) return true;
        } else {
            const auto end = dp.peek(kEndKey, std::chrono::seconds(trainer.config().training.collective_timeout_s));
            if (!end) {
                // Unknown, not failed: a rank 0 still writing a large final checkpoint is fine, and
                // under torchrun this rank's failure would make the agent stop it and restart them all.
                std::fprintf(stderr,
                             "warning: data-parallel rank %d: rank 0 did not say how the run ended within "
                             "training.collective_timeout_s (still finishing, or lost after the last step): its "
                             "own output and the run store say\n",
                             dp.rank());
                return true;
            }
            if (*end != "clean") {
                dp.acknowledge_failure();
                std::fprintf(stderr,
                             "error: data-parallel rank %d: rank 0 failed after the last step (its own output and "
                             "the run store say why)\n",
                             dp.rank());
                return false;
            }
            dp.arrive(kEndReadKey);
        }
    } catch (const std::exception&) {
        return dp.rank() == 0; // the store is gone with rank 0: leave the group to torch
    }
    dp.close();
    return true;
}

void rank0_failed(DataParallel& dp)
{
    if (dp.rank() != 0) return;
    try {
        dp.post(kEndKey, "failed");
    } catch (const std::exception&) {
    }
    // A peer killed outright never acknowledges: the wait is bounded.
    dp.abandon_collectives_and_wait_for_acknowledgements(std::chrono::seconds(5));
}

int run_data_parallel_follower(DataParallel& dp)
{
    std::string message;
    try {
        // No deadline while rank 0 prepares: until its project comes, Ctrl-C or SIGTERM (a
        // torchrun agent whose rank 0 died, with the agent's store still up) ends this rank.
        message = dp.wait_for(kProjectKey);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    // From here Ctrl-C reaches every rank, and so does SIGTERM (Slurm's scancel and time limit,
    // torchrun's agent): rank 0 turns either into a Stop that all ranks apply together at one
    // step, with a final checkpoint. A rank that died of it would fail the run and lose that
    // checkpoint.
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    if (message.rfind("refused:", 0) == 0) {
        dp.arrive("refusal_read");
        const int code = std::atoi(message.c_str() + 8);
        std::fprintf(stderr, "error: data-parallel rank %d: rank 0 stopped before training (exit code %d)\n", dp.rank(),
                     code);
        return code;
    }
    const auto newline = message.find('\n');
    std::shared_ptr<DataParallel> self(std::shared_ptr<DataParallel>{}, &dp); // not owned: main() keeps it
    try {
        Trainer trainer(load_project_json(message.substr(newline + 1), message.substr(0, newline)));
        trainer.set_data_parallel(self);
        FanOutSink nothing({}); // telemetry, events and the store are rank 0's
        const RunSummary summary = trainer.run(nothing);
        std::printf("data-parallel rank %d/%d: %lld steps", dp.rank(), dp.world_size(),
                    static_cast<long long>(summary.steps_done));
        if (summary.steps_done > 0) std::printf(", train loss %.6f", unsigned_nan(summary.final_train_loss));
        std::printf("\n"); // no loss where the job stopped before its first step
        return finish_rank(dp, trainer) ? 0 : 1;
    } catch (const std::exception& e) {
        // Nothing is left to checkpoint: Ctrl-C and SIGTERM end this rank again, should rank 0's
        // store keep it waiting (each call below is bounded too).
        std::signal(SIGINT, SIG_DFL);
        std::signal(SIGTERM, SIG_DFL);
        if (!dynamic_cast<const CollectiveError*>(&e)) dp.report_failure(e.what()); // kept only if first
        dp.acknowledge_failure(); // done with rank 0's store (the trainer's failures have said so already)
        std::fprintf(stderr, "error: data-parallel rank %d: training failed: %s\n", dp.rank(), e.what());
        return 1;
    }
}

} // namespace mantissa
