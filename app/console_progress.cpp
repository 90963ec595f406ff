// SPDX-License-Identifier: GPL-3.0-or-later
#include "console_progress.h"

#include <cmath>
#include <string>

#include "cli_table.h"
#include "trainer.h"

namespace mantissa {

std::string format_duration(double seconds)
{
    if (!std::isfinite(seconds) || seconds < 0) return "?";
    const auto s = static_cast<long long>(std::llround(seconds));
    char buf[32];
    if (s >= 3600) std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, (s / 60) % 60);
    else if (s >= 60) std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
    else std::snprintf(buf, sizeof buf, "%llds", s);
    return buf;
}

ConsoleProgress::ConsoleProgress(int64_t total_steps, int64_t log_interval, bool interactive, std::FILE* out)
    : total_steps_(total_steps), log_interval_(log_interval), interactive_(interactive), out_(out)
{
}

void ConsoleProgress::watch_stop_flag(const std::atomic<bool>* stop_flag, Trainer* trainer)
{
    stop_flag_ = stop_flag;
    trainer_ = trainer;
}

void ConsoleProgress::check_stop()
{
    if (stop_flag_ && trainer_ && !stop_forwarded_ && stop_flag_->load()) {
        stop_forwarded_ = true;
        trainer_->request_stop();
        end_progress_line();
        std::fprintf(out_, "stopping after this step (a second Ctrl-C or SIGTERM aborts without saving)\n");
        std::fflush(out_);
    }
}

void ConsoleProgress::end_progress_line()
{
    if (line_open_) std::fputc('\n', out_);
    line_open_ = false;
}

void ConsoleProgress::on_step(const StepMetrics& m)
{
    check_stop();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    const double eta = elapsed / static_cast<double>(m.step) * static_cast<double>(total_steps_ - m.step);
    // Data parallel: the allreduce's share of the step, beside the compute.
    std::string comm;
    for (const auto& [tag, value] : m.extra_scalars)
        if (tag == "dp/allreduce_share") comm = " | allreduce " + std::to_string(static_cast<int>(value * 100.0 + 0.5)) + "%";
    if (interactive_) {
        // Rounded as the eval line rounds it (the first six characters read 2.6110 for 2.61108).
        char val[32] = "-";
        if (!(last_val_loss_ < 0)) std::snprintf(val, sizeof val, "%.4f", unsigned_nan(last_val_loss_)); // NaN too
        std::fprintf(out_, "\r\033[Kstep %lld/%lld | loss %.4f | val %s | %.0f tok/s | %.1f ms/step%s | ETA %s",
                     static_cast<long long>(m.step), static_cast<long long>(total_steps_),
                     unsigned_nan(m.train_loss), val,
                     m.tokens_per_s, m.step_time_ms, comm.c_str(), format_duration(eta).c_str());
        line_open_ = true;
        std::fflush(out_);
    } else if (m.step % log_interval_ == 0 || m.step == total_steps_) {
        std::fprintf(out_, "step %lld/%lld loss %.4f lr %.3g grad_norm %.3f %.1f ms/step %.0f tok/s ETA %s%s\n",
                     static_cast<long long>(m.step), static_cast<long long>(total_steps_), unsigned_nan(m.train_loss),
                     m.learning_rate, unsigned_nan(m.grad_norm), m.step_time_ms, m.tokens_per_s,
                     format_duration(eta).c_str(), comm.empty() ? "" : (" (" + comm.substr(3) + ")").c_str());
        std::fflush(out_);
    }
}

void ConsoleProgress::on_eval(const EvalMetrics& m)
{
    check_stop();
    last_val_loss_ = m.val_loss;
    end_progress_line();
    std::fprintf(out_, "eval step %lld: val loss %.4f, train loss %.4f\n", static_cast<long long>(m.step),
                 unsigned_nan(m.val_loss), unsigned_nan(m.train_loss));
    std::fflush(out_);
}

void ConsoleProgress::on_event(const RunEvent& e)
{
    end_progress_line();
    if (e.kind == EventKind::Sample)
        std::fprintf(out_, "sample at step %lld:\n%s\n---\n", static_cast<long long>(e.step), e.text.c_str());
    else
        std::fprintf(out_, "[%s] %s\n", e.tag().c_str(), e.message().c_str());
    if (e.kind == EventKind::Paused && stop_flag_)
        std::fprintf(out_, "paused: Ctrl-C stops the run here; `mantissa-train resume` continues it later\n");
    std::fflush(out_);
}

} // namespace mantissa
