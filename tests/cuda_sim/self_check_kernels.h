// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Kernels that check the simulator itself (tests/test_cuda_kernels_on_cpu.cpp): the barriers and
// warp intrinsics that every reduction of Mantissa's kernels goes through, and the mistakes the
// simulator must refuse rather than run.
#include <cstdint>

namespace cuda_sim::self_check {

// The sum of 0 .. blocks * threads - 1 by a shuffle tree per warp, the warps' sums through
// shared memory after __syncthreads, and an atomicAdd per block.
int64_t block_sums(int blocks, int threads);
// The ballot of odd lanes' predicates, as lane 5 of the first warp sees it.
uint32_t odd_lanes_ballot();
// Each throws std::runtime_error from the launch: half the block at a __syncthreads; a thread
// that returns before its block's __syncthreads; a shuffle with a partial mask.
void divergent_barrier();
void early_return();
void partial_mask();

} // namespace cuda_sim::self_check
