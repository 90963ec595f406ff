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
using NvmlHandleByBus = int (*)(const char*, void**);
using NvmlMemoryInfo = int (*)(void*, NvmlMemory*);

struct Nvml {
    NvmlHandleByIndex by_index = nullptr;
    NvmlHandleByBus by_bus = nullptr;
    NvmlMemoryInfo memory = nullptr;
    bool ready = false;
};

const Nvml& nvml()
{
    static const Nvml n = [] {
        Nvml out;
        void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
        if (!lib) return out;
        const auto init = reinterpret_cast<NvmlInit>(dlsym(lib, "nvmlInit_v2"));
        out.by_index = reinterpret_cast<NvmlHandleByIndex>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
        out.by_bus = reinterpret_cast<NvmlHandleByBus>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
        out.memory = reinterpret_cast<NvmlMemoryInfo>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
        out.ready = init && out.memory && init() == 0;
        return out;
    }();
    return n;
}

bool memory_of(void* handle, int64_t& total_bytes, int64_t& used_bytes)
{
    NvmlMemory info{};
    if (nvml().memory(handle, &info) != 0) return false;
    total_bytes = static_cast<int64_t>(info.total);
    used_bytes = static_cast<int64_t>(info.used);
    return true;
}

} // namespace

bool nvml_memory(int device, int64_t& total_bytes, int64_t& used_bytes)
{
    void* handle = nullptr;
    if (!nvml().ready || !nvml().by_index || nvml().by_index(static_cast<unsigned int>(device), &handle) != 0)
        return false;
    return memory_of(handle, total_bytes, used_bytes);
}

bool nvml_memory_of_bus(const char* pci_bus_id, int64_t& total_bytes, int64_t& used_bytes)
{
    void* handle = nullptr;
    if (!nvml().ready || !nvml().by_bus || nvml().by_bus(pci_bus_id, &handle) != 0) return false;
    return memory_of(handle, total_bytes, used_bytes);
}

} // namespace mantissa
