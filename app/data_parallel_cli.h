// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// mantissa-train under torchrun or Slurm (docs/DISTRIBUTED.md). Rank 0 runs the command as
// usual (project, run store, checkpoints) and hands the resolved project to the other ranks
// through the rendezvous store; they train with it and report nothing but failures.

#include <atomic>
#include <memory>

#include "data_parallel.h"
#include "project_config.h"
#include "trainer.h"

namespace mantissa {

struct DataParallelLaunch {
    std::shared_ptr<DataParallel> dp; // null: a single process
    int exit_code = -1;               // >= 0: stop with it (bad environment, store unreachable)
};

// Reads the launcher's environment and joins the job's store. `allowed` false (a sweep):
// a data-parallel launch is refused with exit code 2. `stop` (the CLI's Ctrl-C flag) ends rank
// 0's wait for the others to start; every rank says on stderr that it is still waiting.
DataParallelLaunch join_data_parallel(bool allowed, const char* command, const std::atomic<bool>& stop);

// Ranks 1..W-1: wait for rank 0's project, train it, print the state digest. Exit code.
int run_data_parallel_follower(DataParallel& dp);

// Rank 0: the project the others are to train (call right before training) ...
void announce_project(DataParallel& dp, const ProjectConfig& config);
// ... or that there is none: rank 0 stopped with `exit_code` before training.
void announce_refusal(DataParallel& dp, int exit_code);

// A rank's normal end: prints "data-parallel rank R/W: state digest D" (the tests compare the
// ranks' digests) and shuts the process group down in order (DataParallel::close) if every
// rank ended normally. After the last collective rank 0 alone still evaluates, checkpoints and
// records the run, and may fail at it; NCCL's shutdown would then wait forever for it on the
// others. So rank 0 posts its outcome once known, the others wait for it (at most
// training.collective_timeout_s) and say they read it, and the group is shut down only when
// rank 0's was clean and every rank read it; otherwise torch aborts it at exit.
// False on a follower whose rank 0 failed after the last collective: that rank's run failed
// too, and it exits 1, as every rank of a failed run does. An outcome that never came is a
// warning only (rank 0 may still be writing its final checkpoint).
bool finish_rank(DataParallel& dp, const Trainer& trainer);
// Rank 0 ended in failure (no-op on the others): the others learn it at once, and rank 0
// keeps the store up for them until they have read why (a few seconds at most).
void rank0_failed(DataParallel& dp);

} // namespace mantissa
