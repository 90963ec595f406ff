// SPDX-License-Identifier: GPL-3.0-or-later
#include "cpu_parallel.h"

#include <mutex>
#include <set>
#include <thread>

#include <ATen/Parallel.h>

namespace mantissa {

int cpu_kernel_threads(int64_t tasks)
{
    std::mutex mutex;
    std::set<std::thread::id> seen;
    at::parallel_for(0, tasks, 1, [&](int64_t, int64_t) {
        const std::lock_guard lock(mutex);
        seen.insert(std::this_thread::get_id());
    });
    return static_cast<int>(seen.size());
}

} // namespace mantissa
