// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Stands in for LibTorch's header where tests/cuda_sim compiles core/cuda/*.cu as C++: the
// stream, the device's properties and the launch check, as far as the kernels' host code
// reads them. The tensors are the CPU's.
#include <torch/torch.h>

#include "../../../cuda_sim.h"

struct cudaDeviceProp {
    int multiProcessorCount = 0;
};
enum cudaError_t { cudaSuccess = 0 };
enum cudaFuncAttribute { cudaFuncAttributePreferredSharedMemoryCarveout = 9 };
enum cudaSharedCarveout { cudaSharedmemCarveoutMaxShared = 100 };
template <typename F>
cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int)
{
    return cudaSuccess;
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }

namespace at::cuda {
struct CUDAStream {};
inline CUDAStream getCurrentCUDAStream() { return {}; }
inline const cudaDeviceProp* getCurrentDeviceProperties()
{
    static cudaDeviceProp prop;
    prop.multiProcessorCount = ::cuda_sim::multiprocessors();
    return &prop;
}
} // namespace at::cuda

#define C10_CUDA_KERNEL_LAUNCH_CHECK() ((void)0)
