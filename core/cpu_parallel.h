// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Whether the engine's own CPU kernels share LibTorch's intra-op threads. at::parallel_for is a
// header template (ATen/ParallelOpenMP.h) that splits a range only in a file compiled with
// OpenMP; without it every fused kernel of ours (the statistics scan, the block quantizers, the
// FP8 and BF16 casts) runs on the calling thread alone, with no warning. core/CMakeLists.txt
// compiles the engine with OpenMP; the tests hold it to that. Torch-free.

#include <cstdint>

namespace mantissa {

// How many distinct threads at::parallel_for, compiled as the engine's kernels are, hands a
// range of `tasks` tasks of grain one under LibTorch's current thread count: 1 in an engine
// built without OpenMP.
int cpu_kernel_threads(int64_t tasks);

} // namespace mantissa
