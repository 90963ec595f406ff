// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// mantissa-train under torchrun or Slurm (docs/DISTRIBUTED.md). Rank 0 runs the command as
// usual (project, run store, checkpoints) and hands the resolved project to the other ranks
// through the rendezvous store; they train with it and report nothing but failures.

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
// a data-parallel launch is refused with exit code 2.
DataParallelLaunch join_data_parallel(bool allowed, const char* command);

// Ranks 1..W-1: wait for rank 0's project, train it, print the state digest. Exit code.
int run_data_parallel_follower(DataParallel& dp);

// Rank 0: the project the others are to train (call right before training) ...
void announce_project(DataParallel& dp, const ProjectConfig& config);
// ... or that there is none: rank 0 stopped with `exit_code` before training.
void announce_refusal(DataParallel& dp, int exit_code);

// A rank's normal end (every rank reaches it after the same last collective): prints
// "data-parallel rank R/W: state digest D" (the tests compare the ranks' digests) and shuts
// the process group down in order (DataParallel::close).
void finish_rank(DataParallel& dp, const Trainer& trainer);

} // namespace mantissa
