// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A run's lock file: the process training a run holds an exclusive flock on it, and the
// kernel drops that lock when the process dies, so "running, and nobody holds the lock" means
// the process is gone. The file is unlinked when a claim is released or a dead run is
// cleared, which opens a window: a descriptor opened just before the unlink can be locked
// just after it, and a lock on a file no longer at its path guards nothing (the next process
// creates a fresh file there and locks that too). lock_run_file() therefore checks, once it
// holds the lock, that the path still names the file it locked, and starts again if not.
#include <functional>
#include <string>

namespace mantissa {

struct RunLockFile {
    enum class State { Locked, Held, Missing, Failed };
    State state = State::Failed;
    int fd = -1;    // open and locked when state is Locked; -1 otherwise
    int error = 0;  // errno of a Failed open
};

enum class RunLockKind { Exclusive, Shared };

// Opens `path` (creating it when `create`) and takes the lock without waiting: Locked, or
// Held when another descriptor holds a conflicting lock, Missing when there is no file to
// open (only without `create`), Failed when it cannot be opened. `between_open_and_lock` runs
// after each open; tests use it to unlink the file there, as a releasing process would.
RunLockFile lock_run_file(const std::string& path, RunLockKind kind, bool create,
                          const std::function<void()>& between_open_and_lock = {});

// Unlinks the file, then closes the descriptor (which drops the lock): in that order, so the
// path never names an unlocked file that a reader would take for a dead run's.
void release_run_file(const std::string& path, int fd);

} // namespace mantissa
