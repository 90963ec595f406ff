// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// mantissa-train's console output: a live progress line on a terminal, plain log lines
// otherwise (CI logs, pipes). Also turns Ctrl-C into a clean stop at the next step.

#include <atomic>
#include <chrono>
#include <cstdio>

#include "telemetry.h"

namespace mantissa {

class Trainer;

class ConsoleProgress : public TelemetrySink {
public:
    ConsoleProgress(int64_t total_steps, int64_t log_interval, bool interactive, std::FILE* out);

    // Ctrl-C sets `stop_flag`; the next snapshot forwards it to the trainer.
    void watch_stop_flag(const std::atomic<bool>* stop_flag, Trainer* trainer);

    void on_step(const StepMetrics& m) override;
    void on_eval(const EvalMetrics& m) override;
    void on_event(const RunEvent& e) override;

private:
    void end_progress_line();
    void check_stop();

    int64_t total_steps_;
    int64_t log_interval_;
    bool interactive_;
    std::FILE* out_;
    bool line_open_ = false;
    double last_val_loss_ = -1.0;
    std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
    const std::atomic<bool>* stop_flag_ = nullptr;
    Trainer* trainer_ = nullptr;
    bool stop_forwarded_ = false;
};

// "1h02m", "3m07s", "42s"
std::string format_duration(double seconds);

} // namespace mantissa
