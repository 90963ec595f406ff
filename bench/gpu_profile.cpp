// SPDX-License-Identifier: GPL-3.0-or-later
// Where a step's time goes on the device: LibTorch's own profiler (Kineto with CUPTI, the one
// torch.profiler drives) over a few steps of a project, summed by kernel and by kind of work.
// The GPU benchmark (bench/gpu.py) says how long a step takes; this says why, so that a session
// lent a GPU for 15 minutes can see which kernels a telemetry step or an FP8 cast adds instead
// of guessing from the code (issues 11, 12, 18).
//
//   gpu_profile PROJECT.json [--from STEP] [--steps N] [--top K] [--set key=value]...
//
// Profiles from the end of step STEP (default 5: after warm-up) to the end of step STEP + N
// (default 5) and prints, per step: wall time, the device's kernel time (how busy the GPU was:
// near the wall time, the step is GPU-bound; far below it, the host's launches or a sync set
// it), kernels and launches, top-level ATen ops; then a table by kind of work and the K
// (default 25) kernels with the most time. On a CPU there are no device events: it prints the
// host's share only, which is what CTest checks that it runs.

#include <torch/torch.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "project_config.h"
#include "telemetry.h"
#include "trainer.h"

using namespace mantissa;

namespace {

struct DeviceEvent {
    std::string name;
    double us = 0.0;
};

struct HostOp {
    std::string name;
    uint64_t thread = 0, start_ns = 0, end_ns = 0;
};

// Profiles the steps after `from` up to `from` + `steps`, then stops the run.
class StepsProfile : public TelemetrySink {
public:
    StepsProfile(Trainer& trainer, int64_t from, int64_t steps, bool device)
        : trainer_(trainer), from_(from), last_(from + steps), device_(device)
    {
    }
    ~StepsProfile()
    {
        if (enabled_ && !done_) {
            try {
                torch::autograd::profiler::disableProfiler();
            } catch (...) {
            }
        }
    }
    StepsProfile(const StepsProfile&) = delete;
    StepsProfile& operator=(const StepsProfile&) = delete;

    void on_step(const StepMetrics& m) override
    {
        namespace profiler = torch::autograd::profiler;
        using torch::profiler::impl::ActivityType;
        if (m.step > from_ && m.step <= last_) step_ms_.push_back(m.step_time_ms);
        if (m.step == from_) {
            const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
            std::set<ActivityType> activities{ActivityType::CPU};
            if (device_) activities.insert(ActivityType::CUDA);
            profiler::prepareProfiler(config, activities);
            profiler::enableProfiler(config, activities);
            enabled_ = true;
            start_ = std::chrono::steady_clock::now();
        } else if (m.step == last_ && enabled_) {
            wall_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
            const auto result = profiler::disableProfiler();
            done_ = true;
            for (const auto& e : result->events()) {
                const std::string name = e.name();
                if (e.deviceType() == c10::DeviceType::CUDA) device_events_.push_back({name, e.durationNs() / 1e3});
                else if (name.rfind("cudaLaunch", 0) == 0 || name.rfind("cuLaunch", 0) == 0) ++launches_;
                else if (name.rfind("aten::", 0) == 0) host_ops_.push_back({name, e.startThreadId(), e.startNs(), e.endNs()});
            }
            trainer_.request_stop();
        }
    }
    void on_eval(const EvalMetrics&) override {}
    void on_event(const RunEvent&) override {}

    bool done() const { return done_; }
    double wall_ms() const { return wall_ms_; }
    const std::vector<double>& step_ms() const { return step_ms_; }
    const std::vector<DeviceEvent>& device_events() const { return device_events_; }
    int64_t launches() const { return launches_; }

    // ATen ops called by no other ATen op: what the engine itself asked for.
    std::vector<HostOp> top_level_ops() const
    {
        std::vector<HostOp> ops = host_ops_;
        std::sort(ops.begin(), ops.end(), [](const HostOp& a, const HostOp& b) {
            return a.thread != b.thread ? a.thread < b.thread : a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
        });
        std::vector<HostOp> top;
        uint64_t thread = 0, open_until = 0;
        for (const auto& op : ops) {
            if (op.thread != thread || op.start_ns >= open_until) {
                top.push_back(op);
                thread = op.thread;
                open_until = op.end_ns;
            }
        }
        return top;
    }

private:
    Trainer& trainer_;
    int64_t from_, last_;
    bool device_;
    bool enabled_ = false, done_ = false;
    std::chrono::steady_clock::time_point start_;
    double wall_ms_ = 0.0;
    std::vector<double> step_ms_;
    std::vector<DeviceEvent> device_events_;
    std::vector<HostOp> host_ops_;
    int64_t launches_ = 0;
};

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The kind of work a kernel does, from its name: Mantissa's own kernels first (core/cuda/),
// then LibTorch's and cuBLAS's families. The first match wins.
std::string kind_of(const std::string& n)
{
    if (has(n, "partial_rows") || has(n, "finish_row")) return "statistics kernel (telemetry)";
    if (has(n, "rows_forward") || has(n, "rows_backward")) return "loss over 16-bit logits";
    if (has(n, "scale_cast_amax") || has(n, "record_amax") || has(n, "abs_max")) return "fp8 casts (kernels)";
    if (has(n, "block_rows") || has(n, "block_tiles") || has(n, "split_blocks")) return "fp8-block casts (kernels)";
    if (has(n, "Memcpy") || has(n, "Memset")) return "memcpy / memset";
    if (has(n, "flash") || has(n, "fmha") || has(n, "attention") || has(n, "cudnn")) return "fused attention";
    if (has(n, "gemm") || has(n, "Gemm") || has(n, "nvjet") || has(n, "cutlass") || has(n, "xmma") || has(n, "sm90_") ||
        has(n, "splitK"))
        return "GEMM";
    if (has(n, "layer_norm") || has(n, "LayerNorm")) return "layer norm";
    if (has(n, "softmax") || has(n, "nll_loss") || has(n, "cross_entropy")) return "softmax / loss (ATen)";
    if (has(n, "multi_tensor") || has(n, "adam") || has(n, "Adam") || has(n, "foreach")) return "optimizer, foreach";
    if (has(n, "reduce_kernel") || has(n, "Reduce") || has(n, "reduce")) return "reductions (ATen)";
    if (has(n, "copy") || has(n, "Copy")) return "copies, dtype casts (ATen)";
    if (has(n, "elementwise") || has(n, "vectorized") || has(n, "unrolled")) return "elementwise (ATen)";
    return "other";
}

std::string shortened(std::string n, size_t width)
{
    if (n.rfind("void ", 0) == 0) n = n.substr(5);
    for (char& c : n)
        if (c == '|') c = '/';
    return n.size() > width ? n.substr(0, width - 3) + "..." : n;
}

} // namespace

int main(int argc, char** argv)
{
    try {
        std::string project;
        int64_t from = 5, steps = 5;
        size_t top = 25;
        std::vector<Override> overrides;
        for (int i = 1; i < argc; ++i) {
            if (!std::strcmp(argv[i], "--from") && i + 1 < argc) from = std::stoll(argv[++i]);
            else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::stoll(argv[++i]);
            else if (!std::strcmp(argv[i], "--top") && i + 1 < argc) top = std::stoul(argv[++i]);
            else if (!std::strcmp(argv[i], "--set") && i + 1 < argc) overrides.push_back(parse_override(argv[++i]));
            else if (project.empty() && argv[i][0] != '-') project = argv[i];
            else {
                std::fprintf(stderr, "usage: gpu_profile PROJECT.json [--from STEP] [--steps N] [--top K] [--set key=value]...\n");
                return 2;
            }
        }
        if (project.empty() || from < 1 || steps < 1) {
            std::fprintf(stderr, "usage: gpu_profile PROJECT.json [--from STEP >= 1] [--steps N >= 1] [--top K] [--set key=value]...\n");
            return 2;
        }
        // One step past the window: a frame may reach the sinks a step after its own.
        overrides.push_back({"training.steps", std::to_string(from + steps + 1)});
        overrides.push_back({"eval.interval", "0"});
        const ProjectConfig config = load_project_file(project, overrides);
        Trainer trainer(config);
        const bool device = config.training.device == "cuda" || (config.training.device == "auto" && torch::cuda::is_available());
        StepsProfile profile(trainer, from, steps, device);
        trainer.run(profile);
        if (!profile.done()) {
            std::fprintf(stderr, "gpu_profile: the run ended before step %lld\n", static_cast<long long>(from + steps));
            return 1;
        }

        const double n = static_cast<double>(steps);
        double device_us = 0.0;
        std::map<std::string, std::pair<double, int64_t>> by_kind, by_kernel; // us, calls
        for (const auto& e : profile.device_events()) {
            device_us += e.us;
            auto& k = by_kind[kind_of(e.name)];
            k.first += e.us;
            ++k.second;
            auto& b = by_kernel[e.name];
            b.first += e.us;
            ++b.second;
        }
        const auto top_ops = profile.top_level_ops();
        double step_ms = 0.0;
        for (double ms : profile.step_ms()) step_ms += ms;
        step_ms /= std::max<size_t>(1, profile.step_ms().size());
        std::printf("# gpu_profile %s: steps %lld-%lld on %s\n", project.c_str(), static_cast<long long>(from + 1),
                    static_cast<long long>(from + steps), device ? "cuda" : "cpu");
        std::printf("wall %.2f ms/step (the trainer's step time %.2f), device kernels %.2f ms/step busy (%.0f%% of the wall), "
                    "%.0f device events/step, %.0f launches/step, %.0f top-level ATen ops/step\n",
                    profile.wall_ms() / n, step_ms, device_us / 1e3 / n,
                    profile.wall_ms() > 0 ? 100.0 * device_us / 1e3 / profile.wall_ms() : 0.0,
                    static_cast<double>(profile.device_events().size()) / n, static_cast<double>(profile.launches()) / n,
                    static_cast<double>(top_ops.size()) / n);
        const auto descending = [](const auto& map) {
            std::vector<std::pair<std::string, std::pair<double, int64_t>>> v(map.begin(), map.end());
            std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
            return v;
        };
        if (profile.device_events().empty()) {
            // On a CPU the host's ops are the work: the top-level ones with the most time.
            std::printf("(no device events: a CPU run, or CUPTI was not found)\n");
            std::map<std::string, std::pair<double, int64_t>> by_op; // us, calls
            for (const auto& op : top_ops) {
                auto& b = by_op[op.name];
                b.first += static_cast<double>(op.end_ns - op.start_ns) / 1e3;
                ++b.second;
            }
            std::printf("\n| top-level ATen op | ms/step | calls/step |\n|---|---|---|\n");
            size_t shown = 0;
            for (const auto& [name, t] : descending(by_op)) {
                if (shown++ == top) break;
                std::printf("| %s | %.3f | %.1f |\n", name.c_str(), t.first / 1e3 / n, static_cast<double>(t.second) / n);
            }
            return 0;
        }
        std::printf("\n| kind of work | ms/step | %% of kernel time | kernels/step |\n|---|---|---|---|\n");
        for (const auto& [kind, t] : descending(by_kind))
            std::printf("| %s | %.3f | %.1f%% | %.1f |\n", kind.c_str(), t.first / 1e3 / n, 100.0 * t.first / device_us,
                        static_cast<double>(t.second) / n);
        std::printf("\n| kernel | ms/step | calls/step | us/call | kind |\n|---|---|---|---|---|\n");
        size_t shown = 0;
        for (const auto& [name, t] : descending(by_kernel)) {
            if (shown++ == top) break;
            std::printf("| %s | %.3f | %.1f | %.1f | %s |\n", shortened(name, 110).c_str(), t.first / 1e3 / n,
                        static_cast<double>(t.second) / n, t.first / static_cast<double>(t.second), kind_of(name).c_str());
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpu_profile: %s\n", e.what());
        return 1;
    }
    return 0;
}
