// SPDX-License-Identifier: GPL-3.0-or-later
// The ATen ops of one of Mantissa's optimizer steps, for bench/op_count.py, which counts them
// beside PyTorch's own training step (bench/torch_twin.py --op-events). On a GPU nearly every
// op launches a kernel, and at GPT-2 small's size the host's launch rate can set the step
// time (issue 11); the CPU dispatches the same ops, so their number is measured here.
//
//   op_events --after STEPS [--memory] [--set key=value]...   > events.tsv
//
// Trains the default project with the overrides and records, with LibTorch's own profiler (the
// one torch.profiler drives), every ATen op from the end of step STEPS to the end of the next:
// one line per op, "name <tab> thread <tab> start ns <tab> end ns <tab> bytes". With --memory
// also every allocation ("[memory]", bytes > 0) and free (bytes < 0); ops have bytes 0.

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "project_config.h"
#include "step_profile.h" // tests/: the sink that profiles one step

using namespace mantissa;

int main(int argc, char** argv)
{
    try {
        int64_t after = 3;
        bool memory = false;
        std::vector<Override> overrides;
        for (int i = 1; i < argc; ++i) {
            if (!std::strcmp(argv[i], "--after") && i + 1 < argc) after = std::stoll(argv[++i]);
            else if (!std::strcmp(argv[i], "--memory")) memory = true;
            else if (!std::strcmp(argv[i], "--set") && i + 1 < argc) overrides.push_back(parse_override(argv[++i]));
            else {
                std::fprintf(stderr, "usage: op_events --after STEPS [--memory] [--set key=value]...\n");
                return 2;
            }
        }
        overrides.push_back({"training.steps", std::to_string(after + 2)});
        Trainer trainer(load_project_json("{}", ".", overrides));
        OneStepProfile profile(trainer, after, memory);
        trainer.run(profile);
        if (!profile.profiled()) {
            std::fprintf(stderr, "op_events: the run ended before step %lld\n", static_cast<long long>(after + 1));
            return 1;
        }
        for (const auto& op : profile.ops())
            std::printf("%s\t%llu\t%llu\t%llu\t%lld\n", op.name.c_str(), static_cast<unsigned long long>(op.thread),
                        static_cast<unsigned long long>(op.start_ns), static_cast<unsigned long long>(op.end_ns),
                        static_cast<long long>(op.bytes));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "op_events: %s\n", e.what());
        return 1;
    }
    return 0;
}
