// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Commands from other threads (GUI, CLI signal handling) to the training loop. The loop
// applies them only at step boundaries, so a step never sees a half-applied change.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "precision_policy.h"
#include "run_event.h"

namespace mantissa {

struct Command {
    enum class Kind { Pause, Resume, Stop, SetLayerFormats, Checkpoint } kind;
    // SetLayerFormats: every GEMM layer whose name matches `layer_pattern` switches to `formats`.
    std::string layer_pattern;
    GemmFormats formats;
    // Who asked for a SetLayerFormats: a data-parallel run sends a watcher's switch from rank 0
    // as a command too, so that every rank applies it at the same step boundary.
    ChangeCause cause = ChangeCause::User;
    std::string watcher;
    // SetLayerFormats: the layers' scaling recipe too (fp8-block, nvfp4, ...); none keeps theirs.
    std::optional<Fp8Scaling> scaling;
};

class CommandQueue {
public:
    // False, and nothing queued, once the loop has passed its last boundary (close): a command
    // then would be taken for nothing (a remote client is told so, not "accepted").
    bool push(Command command)
    {
        {
            std::lock_guard lock(mutex_);
            if (closed_) return false;
            queue_.push_back(command);
        }
        ready_.notify_all();
        return true;
    }

    // The loop will not look again (its last step has begun, or it stopped) / a run begins.
    // Commands already queued stay: one queued before run() (a resume's change) is applied.
    void close()
    {
        std::lock_guard lock(mutex_);
        closed_ = true;
    }
    // Closes only an empty queue, in one step with the check: at the last boundary a command
    // is either taken (false: apply it, then try again) or refused, never accepted and lost.
    bool close_if_empty()
    {
        std::lock_guard lock(mutex_);
        if (!queue_.empty()) return false;
        closed_ = true;
        return true;
    }
    void open()
    {
        std::lock_guard lock(mutex_);
        closed_ = false;
    }

    // Ahead of every queued command, in their order: what the run did at this boundary before
    // anything asked for since (a resume's replays of the interrupted run's changes).
    void push_front(const std::vector<Command>& commands)
    {
        if (commands.empty()) return;
        {
            std::lock_guard lock(mutex_);
            queue_.insert(queue_.begin(), commands.begin(), commands.end());
        }
        ready_.notify_all();
    }

    bool empty() const
    {
        std::lock_guard lock(mutex_);
        return queue_.empty();
    }

    std::optional<Command> try_pop()
    {
        std::lock_guard lock(mutex_);
        if (queue_.empty()) return std::nullopt;
        const Command c = queue_.front();
        queue_.pop_front();
        return c;
    }

    // Blocks until a command arrives (used while paused).
    Command wait_pop()
    {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [&] { return !queue_.empty(); });
        const Command c = queue_.front();
        queue_.pop_front();
        return c;
    }

    // Waits up to `timeout` for a command (a paused data-parallel run's rank 0 tells the
    // other ranks it is still there between waits).
    std::optional<Command> wait_pop_for(std::chrono::milliseconds timeout)
    {
        std::unique_lock lock(mutex_);
        if (!ready_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
        const Command c = queue_.front();
        queue_.pop_front();
        return c;
    }

private:
    mutable std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<Command> queue_;
    bool closed_ = false;
};

} // namespace mantissa
