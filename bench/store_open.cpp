// SPDX-License-Identifier: GPL-3.0-or-later
// What the Runs and Compare pages wait for: opening the store, listing every run with its
// summary, and loading one long run's train-loss curve. Builds a store with `runs` ordinary
// runs (500 steps, 8 metrics a step) plus one run of `big_rows` metric rows (40 metrics a
// step, like shakespeare-char's 6 scalars + per-layer gradient norms), then times each
// operation `reps` times and prints the median. Drawing is not timed here: the plots
// decimate what they draw, so loading is the part that grows with the run.
// With `long_steps`, also a run still training with that many steps (train/loss and tokens/s):
// the Runs page's refresh while it grows, each run's tokens/s read in full against through a
// TokensMedianCache, one step added before each refresh.
//   build/dev/bench/store_open [runs=300] [big_rows=1000000] [reps=7] [long_steps=0]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "run_store.h"

using namespace mantissa;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median_ms(int reps, const std::function<void()>& f)
{
    std::vector<double> ms;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = Clock::now();
        f();
        ms.push_back(1000.0 * seconds_since(t0));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

std::string config_for(int i)
{
    static const char* presets[] = {"fp32", "bf16", "fp16", "fp8-hybrid"};
    return std::string(R"({"name": "bench", "model": {"n_layer": 4, "n_head": 4, "n_embd": 128,)") +
           R"( "context_length": 64},)" +
           R"( "training": {"steps": 500, "batch_size": 12, "seed": )" + std::to_string(i) +
           R"(}, "precision": {"preset": ")" + presets[i % 4] +
           R"(", "layers": [], "fp8": {"scaling": "delayed"}, "loss_scaling": {"mode": "auto"}}})";
}

// One training step's metrics, as StoreSink writes them.
void append_step(RunStore& store, int64_t run, int64_t step, int layer_norms)
{
    const double s = static_cast<double>(step);
    store.append_scalar(run, step, "train/loss", 4.0 / (1.0 + 0.01 * s));
    store.append_scalar(run, step, "lr", 1e-3);
    store.append_scalar(run, step, "grad_norm", 0.5);
    store.append_scalar(run, step, "step_time_ms", 30.0 + (step % 7));
    store.append_scalar(run, step, "tokens_per_s", 25000.0 + 10.0 * (step % 13));
    store.append_scalar(run, step, "loss_scale", 1.0);
    for (int l = 0; l < layer_norms; ++l) store.append_scalar(run, step, "grad_norm/layer" + std::to_string(l), 0.1);
    if (step % 50 == 0) {
        store.append_scalar(run, step, "val/loss", 4.1 / (1.0 + 0.01 * s));
        store.append_scalar(run, step, "memory/resident_bytes", 4.0e8 + 1000.0 * s);
    }
}

} // namespace

int main(int argc, char** argv)
{
    const int runs = argc > 1 ? std::atoi(argv[1]) : 300;
    const int64_t big_rows = argc > 2 ? std::atoll(argv[2]) : 1000000;
    const int reps = argc > 3 ? std::max(1, std::atoi(argv[3])) : 7;
    const int64_t long_steps = argc > 4 ? std::atoll(argv[4]) : 0;
    const auto dir = std::filesystem::temp_directory_path() / "mantissa-store-open-bench";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "bench.sqlite").string();

    int64_t big = 0;
    auto t0 = Clock::now();
    {
        RunStore store(path);
        for (int i = 0; i < runs; ++i) {
            const auto id = store.create_run("run " + std::to_string(i), "bench.json", config_for(i));
            for (int64_t step = 1; step <= 500; ++step) append_step(store, id, step, 2);
            if (i % 10 == 0) store.add_tags(id, {"tagged"});
            store.finish_run(id, RunStatus::Finished);
        }
        big = store.create_run("long run", "bench.json", config_for(0));
        const int64_t steps = big_rows / 40;
        for (int64_t step = 1; step <= steps; ++step) append_step(store, big, step, 34);
        store.finish_run(big, RunStatus::Finished);
        if (long_steps > 0) {
            const auto id = store.create_run("training run", "bench.json", config_for(1));
            RunEvent started;
            started.kind = EventKind::RunStarted;
            store.append_event(id, started);
            for (int64_t step = 1; step <= long_steps; ++step) {
                store.append_scalar(id, step, "train/loss", 1.0);
                store.append_scalar(id, step, "tokens_per_s", 25000.0 + 10.0 * static_cast<double>(step % 13));
            }
        }
    }
    std::printf("built %d runs + 1 run of %lld metric rows in %.1f s (%.0f MiB on disk)\n", runs,
                static_cast<long long>(big_rows), seconds_since(t0),
                static_cast<double>(std::filesystem::file_size(path)) / (1024.0 * 1024.0));

    const double open_ms = median_ms(reps, [&] { RunStore s(path); }); // includes PRAGMA quick_check
    RunStore store(path);
    size_t listed = 0, points = 0;
    const double list_ms = median_ms(reps, [&] { listed = store.list_run_summaries().size(); });
    RunFilter filter;
    filter.tags = {"tagged"};
    size_t tagged = 0;
    const double filter_ms = median_ms(reps, [&] { tagged = store.list_run_summaries(filter).size(); });
    const double series_ms = median_ms(reps, [&] { points = store.series(big, "train/loss").size(); });
    size_t rows = 0;
    const double all_ms = median_ms(reps, [&] { rows = store.scalars(big).size(); });
    const double old_list_ms = median_ms(reps, [&] { store.list_runs(); });

    std::printf("open store (incl. quick_check)        %8.1f ms\n", open_ms);
    std::printf("list_run_summaries, %zu runs         %8.1f ms\n", listed, list_ms);
    std::printf("list_run_summaries, tag filter (%zu)   %8.1f ms\n", tagged, filter_ms);
    std::printf("series(train/loss), %zu points     %8.1f ms\n", points, series_ms);
    std::printf("scalars(), every metric, %zu rows %8.1f ms\n", rows, all_ms);
    std::printf("list_runs (last train/loss step)    %8.1f ms\n", old_list_ms);
    if (long_steps > 0) {
        // The Runs page's refresh as the training run grows by a step between two.
        const int64_t training = big + 1;
        int64_t next = long_steps + 1;
        const auto add_step = [&] {
            store.append_scalar(training, next, "train/loss", 1.0);
            store.append_scalar(training, next++, "tokens_per_s", 25000.0);
        };
        const double full_ms = median_ms(reps, [&] {
            add_step();
            store.list_run_summaries();
        });
        TokensMedianCache cache;
        const auto cold = Clock::now();
        store.list_run_summaries({}, &cache);
        const double cold_ms = 1000.0 * seconds_since(cold);
        const double cached_ms = median_ms(reps, [&] {
            add_step();
            store.list_run_summaries({}, &cache);
        });
        std::printf("refresh, a %lld-step run growing: full %8.1f ms, cached %6.1f ms (%.1fx; first cached %.1f ms)\n",
                    static_cast<long long>(long_steps), full_ms, cached_ms, full_ms / cached_ms, cold_ms);
    }
    std::printf("median of %d repetitions\n", reps);
    std::filesystem::remove_all(dir);
    return 0;
}
