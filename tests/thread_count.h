// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Restores LibTorch's intra-op thread count when a test that changes it ends, passed or not.

#include <ATen/Parallel.h>

struct ThreadCount {
    ThreadCount() : threads(at::get_num_threads()) {}
    ~ThreadCount() { at::set_num_threads(threads); }
    ThreadCount(const ThreadCount&) = delete;
    ThreadCount& operator=(const ThreadCount&) = delete;
    int threads;
};
