// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The micro-benchmarks' clock: one warm-up call, then the mean of `reps` calls.

#include <chrono>

template <typename F>
double micros(int reps, F&& f)
{
    f();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) f();
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
}
