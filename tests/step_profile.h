// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// One optimizer step's ATen ops, recorded with LibTorch's own profiler (the one torch.profiler
// drives) from the end of one step to the end of the next: what bench/op_events writes out for
// bench/op_count.py, and what test_native searches for host reads. Header-only, LibTorch.

#include <torch/torch.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "telemetry.h"
#include "trainer.h"

namespace mantissa {

struct ProfiledOp {
    std::string name; // "aten::mm", or "[memory]": an allocation (bytes > 0) or a free (< 0)
    uint64_t thread = 0;
    uint64_t start_ns = 0, end_ns = 0;
    int64_t bytes = 0;
};

// A sink that profiles from the end of step `after` to the end of step `after` + 1, then stops
// the run: everything a step does, its step boundary included; with `memory`, every CPU
// allocation and free too.
class OneStepProfile : public TelemetrySink {
public:
    OneStepProfile(Trainer& trainer, int64_t after, bool memory = false)
        : trainer_(trainer), after_(after), memory_(memory)
    {
    }
    ~OneStepProfile()
    {
        // A run that threw inside the profiled step must not leave this thread's profiler on
        // (the next profile would fail with "already enabled" and hide the first failure).
        if (enabled_ && !profiled_) {
            try {
                torch::autograd::profiler::disableProfiler();
            } catch (...) {
            }
        }
    }
    OneStepProfile(const OneStepProfile&) = delete;
    OneStepProfile& operator=(const OneStepProfile&) = delete;
    void on_step(const StepMetrics& m) override
    {
        namespace profiler = torch::autograd::profiler;
        const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO,
                                                           /*report_input_shapes=*/false, /*profile_memory=*/memory_);
        const std::set<torch::profiler::impl::ActivityType> cpu{torch::profiler::impl::ActivityType::CPU};
        if (m.step == after_) {
            profiler::prepareProfiler(config, cpu);
            profiler::enableProfiler(config, cpu);
            enabled_ = true;
        } else if (m.step == after_ + 1) {
            const auto result = profiler::disableProfiler();
            for (const auto& e : result->events())
                if (e.deviceType() == c10::DeviceType::CPU && (e.name().rfind("aten::", 0) == 0 || e.name() == "[memory]"))
                    ops_.push_back({e.name(), e.startThreadId(), e.startNs(), e.endNs(), e.nBytes()});
            profiled_ = true;
            trainer_.request_stop();
        }
    }
    void on_eval(const EvalMetrics&) override {}
    void on_event(const RunEvent&) override {}
    bool profiled() const { return profiled_; } // false: the run ended before the step
    const std::vector<ProfiledOp>& ops() const { return ops_; }

private:
    Trainer& trainer_;
    int64_t after_;
    bool memory_;
    bool enabled_ = false;
    bool profiled_ = false;
    std::vector<ProfiledOp> ops_;
};

} // namespace mantissa
