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

#include "precision_policy.h"

namespace mantissa {

struct Command {
    enum class Kind { Pause, Resume, Stop, SetLayerFormats, Checkpoint } kind;
    // SetLayerFormats: every GEMM layer whose name matches `layer_pattern` switches to `formats`.
    std::string layer_pattern;
    GemmFormats formats;
};

class CommandQueue {
public:
    void push(Command command)
    {
        {
            std::lock_guard lock(mutex_);
            queue_.push_back(command);
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

private:
    mutable std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<Command> queue_;
};

} // namespace mantissa
