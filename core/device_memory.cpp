// SPDX-License-Identifier: GPL-3.0-or-later
#include "device_memory.h"

#include <dlfcn.h>

#include "memory_model.h"

// The CPU wheel of LibTorch lacks the generated c10/cuda config: compile the allocator query only
// where they exist (a CUDA build), so one source tree serves both.
#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>) && __has_include(<cuda_runtime_api.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#define MANTISSA_HAVE_CUDA_ALLOCATOR 1
#endif

namespace mantissa {
namespace {

// NVML through dlopen: no build-time dependency, and a machine without the driver just
// reports nothing. Signatures from nvml.h (v2 API).
struct NvmlMemory {
    unsigned long long total, free, used;
};
using NvmlInit = int (*)();
using NvmlHandleByIndex = int (*)(unsigned int, void**);
using NvmlMemoryInfo = int (*)(void*, NvmlMemory*);

int64_t nvml_used_bytes(int device)
{
    static void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!lib) return -1;
    static auto init = reinterpret_cast<NvmlInit>(dlsym(lib, "nvmlInit_v2"));
    static auto by_index = reinterpret_cast<NvmlHandleByIndex>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    static auto memory = reinterpret_cast<NvmlMemoryInfo>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    static const bool ready = init && by_index && memory && init() == 0;
    if (!ready) return -1;
    void* handle = nullptr;
    NvmlMemory info{};
    if (by_index(static_cast<unsigned int>(device), &handle) != 0 || memory(handle, &info) != 0) return -1;
    return static_cast<int64_t>(info.used);
}

} // namespace

MemorySnapshot read_memory(bool on_cuda)
{
    MemorySnapshot m;
    m.resident_bytes = resident_memory_bytes();
    if (!on_cuda) return m;
#ifdef MANTISSA_HAVE_CUDA_ALLOCATOR
    const auto device = c10::cuda::current_device();
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    m.cuda_allocated_bytes = stats.allocated_bytes[all].current;
    m.cuda_reserved_bytes = stats.reserved_bytes[all].current;
    m.cuda_peak_bytes = stats.allocated_bytes[all].peak;
    m.nvml_used_bytes = nvml_used_bytes(device);
#else
    m.nvml_used_bytes = nvml_used_bytes(0);
#endif
    return m;
}

} // namespace mantissa
