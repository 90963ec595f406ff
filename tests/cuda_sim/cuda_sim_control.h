// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What a test sets and reads of the thread-block simulator (cuda_sim.h), without the CUDA
// keywords and intrinsics that cuda_sim.h defines as macros for the kernels' files.
#include <cstdint>

namespace cuda_sim {

// The streaming multiprocessors the simulated device reports (an H200's 132 unless set): the
// kernels' host code sizes grids by it.
void set_multiprocessors(int count);
int multiprocessors();
// Launches run so far, so that a test knows the kernel ran.
int64_t launches();

// The order in which a block's threads run between barriers: by index, or the reverse. A
// kernel that reads what another thread wrote without a barrier between (a race on a GPU)
// sees the write in one order and not in the other, so a test that runs both and requires
// the same result finds it.
enum class Order { Forward, Reverse };
void set_order(Order order);

} // namespace cuda_sim
