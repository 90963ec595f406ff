// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A run's life in the store. The names are what the store keeps and the CLI prints.

#include <optional>
#include <string_view>

namespace mantissa {

enum class RunStatus {
    Running,     // a process trains it now (it holds the run's lock)
    Finished,    // reached training.steps
    Stopped,     // stopped by the user (Ctrl-C, Stop); resumable
    Failed,      // ended by an error; the run's last event says why
    Interrupted, // its process died without a word (found by the next open); resumable
};

constexpr std::string_view run_status_name(RunStatus status)
{
    switch (status) {
    case RunStatus::Running: return "running";
    case RunStatus::Finished: return "finished";
    case RunStatus::Stopped: return "stopped";
    case RunStatus::Failed: return "failed";
    case RunStatus::Interrupted: return "interrupted";
    }
    return "failed";
}

constexpr std::optional<RunStatus> parse_run_status(std::string_view name)
{
    for (auto s : {RunStatus::Running, RunStatus::Finished, RunStatus::Stopped, RunStatus::Failed,
                   RunStatus::Interrupted})
        if (run_status_name(s) == name) return s;
    return std::nullopt;
}

} // namespace mantissa
