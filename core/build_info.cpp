// SPDX-License-Identifier: GPL-3.0-or-later
#include "build_info.h"

#include <dlfcn.h>

#include <ATen/Context.h>
#include <ATen/Version.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>
#include <torch/version.h>

// As in device_memory.cpp: the CPU wheel has no CUDA headers, so the device query through the
// CUDA runtime is compiled only into CUDA builds; NVML (dlopen) covers the rest.
#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>) && __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#define MANTISSA_HAVE_CUDA_RUNTIME 1
#endif

#ifndef MANTISSA_VERSION
#error "MANTISSA_VERSION is set by core/CMakeLists.txt from the project's version"
#endif

namespace mantissa {
namespace {

// The hooks of a CPU build throw instead of answering; that answer is "none".
template <typename Query>
long hook_version(Query query)
{
    try {
        return query();
    } catch (const std::exception&) {
        return 0;
    }
}

// NVML's view of device 0: name and compute capability (nvml.h signatures).
[[maybe_unused]] void nvml_describe(GpuInfo& gpu)
{
    using Init = int (*)();
    using HandleByIndex = int (*)(unsigned int, void**);
    using Name = int (*)(void*, char*, unsigned int);
    using Capability = int (*)(void*, int*, int*);
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!lib) return;
    const auto init = reinterpret_cast<Init>(dlsym(lib, "nvmlInit_v2"));
    const auto by_index = reinterpret_cast<HandleByIndex>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    const auto name = reinterpret_cast<Name>(dlsym(lib, "nvmlDeviceGetName"));
    const auto capability = reinterpret_cast<Capability>(dlsym(lib, "nvmlDeviceGetCudaComputeCapability"));
    void* handle = nullptr;
    if (init && by_index && init() == 0 && by_index(0, &handle) == 0) {
        char buffer[96] = {};
        if (name && name(handle, buffer, sizeof buffer) == 0) gpu.name = buffer;
        int major = 0, minor = 0;
        if (capability && capability(handle, &major, &minor) == 0) gpu.capability = {major, minor};
    }
    // The library stays loaded: device_memory.cpp may hold its own handle to it.
}

} // namespace

std::string cuda_version_string(long version)
{
    if (version <= 0) return "none";
    return std::to_string(version / 1000) + "." + std::to_string((version % 1000) / 10);
}

std::string cudnn_version_string(long version)
{
    if (version <= 0) return "none";
    const long major_unit = version >= 90000 ? 10000 : 1000;
    return std::to_string(version / major_unit) + "." + std::to_string((version % major_unit) / 100) + "." +
           std::to_string(version % 100);
}

EngineVersions engine_versions()
{
    const auto& hooks = at::detail::getCUDAHooks();
    EngineVersions v;
    v.mantissa = MANTISSA_VERSION;
    v.libtorch = TORCH_VERSION;
    v.cuda = cuda_version_string(hook_version([&] { return hooks.versionCUDART(); }));
    v.cudnn = cudnn_version_string(
        hook_version([&] { return hooks.compiledWithCuDNN() ? hooks.versionCuDNN() : 0L; }));
    v.cpu_kernels = at::get_cpu_capability(); // by the CPU's instructions, or ATEN_CPU_CAPABILITY
    return v;
}

GpuInfo current_gpu()
{
    GpuInfo gpu;
    gpu.present = torch::cuda::is_available();
    if (!gpu.present) return gpu;
#ifdef MANTISSA_HAVE_CUDA_RUNTIME
    const auto* props = at::cuda::getCurrentDeviceProperties();
    gpu.name = props->name;
    gpu.capability = {props->major, props->minor};
#else
    nvml_describe(gpu);
#endif
    return gpu;
}

} // namespace mantissa
