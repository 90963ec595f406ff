// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// How Mantissa's kernels are launched and where their tensors live, in one place, so that the
// CPU tests can run the same files on a thread-block simulator (tests/cuda_sim, which compiles
// them as C++ with MANTISSA_CUDA_SIM): MANTISSA_LAUNCH(grid, block, stream, kernel)(arguments)
// is kernel<<<grid, block, 0, stream>>>(arguments) under nvcc.
#include <torch/torch.h>

#if defined(MANTISSA_CUDA_SIM)
#include "cuda_sim.h"
#define MANTISSA_LAUNCH(grid, block, stream, ...) ((void)(stream), ::cuda_sim::Launch(grid, block, __VA_ARGS__))
#else
#define MANTISSA_LAUNCH(grid, block, stream, ...) __VA_ARGS__<<<grid, block, 0, stream>>>
#endif

namespace mantissa::cuda_kernels {

// A tensor on the kernels' device: the GPU, or the CPU under the simulator.
inline bool on_kernel_device(const torch::Tensor& t)
{
#if defined(MANTISSA_CUDA_SIM)
    return t.is_cpu();
#else
    return t.is_cuda();
#endif
}

} // namespace mantissa::cuda_kernels
