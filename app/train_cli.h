// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// mantissa-train's subcommands, one file per concern: train_cli_run.cpp (run, resume),
// train_cli_sweep.cpp, train_cli_store.cpp (list, show, rename, delete, export, tag, untag),
// train_cli_compare.cpp. mantissa_train.cpp only parses the command line and dispatches.
// The reading ones (list, show, export, compare) write to held streams (held_output.h).
// Every command returns the exit code: 0 ok, 1 training failed, 2 bad project or arguments,
// 3 run store problem.

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "held_output.h"
#include "remote_serving.h"

namespace mantissa {

class DataParallel;
class RunSession;
class RunStore;
class TelemetrySink;
struct RunEvent;
struct RunInfo;

// Set by Ctrl-C (and SIGTERM): the run stops at its next step. The CLI's one global flag,
// since a signal handler can reach nothing else; a second Ctrl-C ends the process at once.
extern std::atomic<bool> g_stop_requested;
extern "C" void on_sigint(int);
// Said by a run, resume or sweep that a Ctrl-C or SIGTERM stopped before it was done (not by
// one that finished while the signal came, nor by `serve`).
void note_stopped_by_signal();
// `code` where the process ends of its own accord. A run, resume or sweep that a signal stopped
// (its state saved) ends by that signal instead, as a program that catches SIGINT should: a
// shell then stops a `run && next` list, and Slurm and torchrun see a stop, not a success. A
// stop asked for otherwise (the GUI, a watcher) exits `code`. Called as main returns, once
// every object of the command is gone (a run store left open kept its newest steps in -wal).
int exit_after_stop(int code);

// Set when torchrun or Slurm launched this process as rank 0 of a data-parallel job.
struct DataParallelJob {
    std::shared_ptr<DataParallel> dp; // null: a single process
    bool announced = false;           // the other ranks were handed the project
};

int cmd_run(const std::string& project_path, const std::vector<std::string>& sets, const std::string& db_path,
            std::string name, bool no_store, const ServeOptions& serve, DataParallelJob& job);
// `start_over`: a run with no checkpoint may be trained again from step 0, which drops what it
// recorded (refused otherwise, with nothing dropped).
int cmd_resume(RunStore& store, const std::string& run, const std::vector<std::string>& sets, const std::string& db_path,
               const ServeOptions& serve, DataParallelJob& job, bool start_over);
int cmd_sweep(const std::string& project_path, const std::string& vary, const std::vector<std::string>& sets,
              const std::string& db_path, std::string sweep_name, DataParallelJob& job);
int cmd_list(RunStore& store, const CliStreams& io);
int cmd_show(RunStore& store, const std::string& run, const CliStreams& io);
int cmd_rename(RunStore& store, const std::string& run, const std::string& new_name);
int cmd_delete(RunStore& store, const std::string& run);
int cmd_export(RunStore& store, const std::string& run, const std::string& format, const std::string& table,
               const std::string& out_path, const CliStreams& io);
int cmd_tag(RunStore& store, const std::string& run, const std::vector<std::string>& tags, bool remove);
int cmd_compare(RunStore& store, const std::vector<std::string>& run_args, double tolerance, bool relative,
                const CliStreams& io);

// Shared by the commands above.
// Trains a session's run until done or Ctrl-C; the session marks the run.
// `extra`: one more sink (the store server's, with --serve).
// `end`, when given, says which of exit 3's causes it was.
struct TrainEnd {
    bool store_failed = false;          // the store lost the run or rows of it
    bool final_checkpoint_lost = false; // trained and recorded, the final checkpoint not written
};
int train_session(RunSession& session, const std::string& db_path, DataParallelJob& job,
                  TelemetrySink* extra = nullptr, TrainEnd* end = nullptr);
// A saved run at its newest good checkpoint, or an exit code: 2 for a bad override, no
// checkpoint or another run's checkpoint, 3 when every checkpoint is damaged. Damaged ones
// are shown on stderr and kept in `notices`.
std::unique_ptr<RunSession> reopen_or_complain(RunStore& store, const RunInfo& info, const std::vector<std::string>& sets,
                                               std::vector<RunEvent>& notices, int& exit_code);
// The run named by id or name, or nullopt after saying on `err` that there is none. A name
// that several runs share reads as the newest of them, with a note; to change one (rename,
// delete, tag) the id must be given.
enum class RunUse { Read, Change };
std::optional<RunInfo> find_or_complain(RunStore& store, const std::string& run, RunUse use = RunUse::Read,
                                        std::FILE* err = stderr);

} // namespace mantissa
