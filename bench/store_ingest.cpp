// SPDX-License-Identifier: GPL-3.0-or-later
// Run-store ingest rate: rows/s for metric rows and for layer-statistics rows, through the
// public API (queue + writer thread + one transaction per batch), flush included.
//   build/dev/bench/store_ingest [rows]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "run_store.h"

using namespace mantissa;

int main(int argc, char** argv)
{
    const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 200000;
    const auto dir = std::filesystem::temp_directory_path() / "mantissa-store-bench";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    RunStore store((dir / "bench.sqlite").string());
    const auto run = store.create_run("bench", "", "{}");
    using clock = std::chrono::steady_clock;

    auto t0 = clock::now();
    for (int64_t i = 0; i < rows; ++i) store.append_scalar(run, i / 8, "tag" + std::to_string(i % 8), 0.5 * double(i));
    store.flush();
    const double metric_s = std::chrono::duration<double>(clock::now() - t0).count();

    TensorStats t;
    t.layer = "blocks.0.mlp.fc1";
    t.format = "e4m3";
    t.count = 65536;
    t.first_exponent = -20;
    t.exponent_counts.assign(30, 1000); // a typical span of 30 binades
    const int64_t stat_rows = rows / 10;
    t0 = clock::now();
    for (int64_t i = 0; i < stat_rows; ++i) {
        t.role = "role" + std::to_string(i % 5);
        store.append_layer_stats(run, i / 5, t);
    }
    store.flush();
    const double stats_s = std::chrono::duration<double>(clock::now() - t0).count();
    std::printf("metric rows:      %lld in %.3f s = %.0f rows/s\n", static_cast<long long>(rows), metric_s, rows / metric_s);
    std::printf("layer-stat rows:  %lld in %.3f s = %.0f rows/s (30-bin histograms)\n",
                static_cast<long long>(stat_rows), stats_s, stat_rows / stats_s);
    store.finish_run(run, RunStatus::Finished);
    std::filesystem::remove_all(dir);
    return 0;
}
