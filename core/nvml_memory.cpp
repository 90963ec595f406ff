// SPDX-License-Identifier: GPL-3.0-or-later
#include "nvml_memory.h"

#include <dlfcn.h>

namespace mantissa {
namespace {

// Signatures from nvml.h (v2 API).
struct NvmlMemory {
    unsigned long long total, free, used;
};
using NvmlInit = int (*)();
using NvmlHandleByIndex = int (*)(unsigned int, void**);
using NvmlMemoryInfo = int (*)(void*, NvmlMemory*);

} // namespace

bool nvml_memory(int device, int64_t& total_bytes, int64_t& used_bytes)
{
    static void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!lib) return false;
    static auto init = reinterpret_cast<NvmlInit>(dlsym(lib, "nvmlInit_v2"));
    static auto by_index = reinterpret_cast<NvmlHandleByIndex>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    static auto memory = reinterpret_cast<NvmlMemoryInfo>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    static const bool ready = init && by_index && memory && init() == 0;
    if (!ready) return false;
    void* handle = nullptr;
    NvmlMemory info{};
    if (by_index(static_cast<unsigned int>(device), &handle) != 0 || memory(handle, &info) != 0) return false;
    total_bytes = static_cast<int64_t>(info.total);
    used_bytes = static_cast<int64_t>(info.used);
    return true;
}

} // namespace mantissa
