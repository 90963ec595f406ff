// SPDX-License-Identifier: GPL-3.0-or-later
#include "device_memory.h"

#include "memory_model.h"
#include "nvml_memory.h"

// The CPU wheel of LibTorch lacks the generated c10/cuda config: compile the allocator query only
// where they exist (a CUDA build), so one source tree serves both.
#if __has_include(<c10/cuda/impl/cuda_cmake_macros.h>) && __has_include(<cuda_runtime_api.h>)
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#define MANTISSA_HAVE_CUDA_ALLOCATOR 1
#endif

#include <cstdio>

namespace mantissa {
namespace {

int64_t nvml_used_bytes(int device)
{
    int64_t total = 0, used = 0;
#ifdef MANTISSA_HAVE_CUDA_ALLOCATOR
    // NVML numbers GPUs by PCI bus and ignores CUDA_VISIBLE_DEVICES; the bus id names the same GPU
    // in both.
    return nvml_memory_of_bus(cuda_pci_bus_id(device).c_str(), total, used) ? used : -1;
#else
    return nvml_memory(device, total, used) ? used : -1;
#endif
}

} // namespace

std::string cuda_pci_bus_id([[maybe_unused]] int cuda_device)
{
#ifdef MANTISSA_HAVE_CUDA_ALLOCATOR
    const auto* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(cuda_device));
    char bus_id[32];
    std::snprintf(bus_id, sizeof bus_id, "%08x:%02x:%02x.0", static_cast<unsigned>(p->pciDomainID),
                  static_cast<unsigned>(p->pciBusID), static_cast<unsigned>(p->pciDeviceID));
    return bus_id;
#else
    return {};
#endif
}

void reset_peak_memory([[maybe_unused]] int cuda_device)
{
#ifdef MANTISSA_HAVE_CUDA_ALLOCATOR
    if (cuda_device >= 0) c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(cuda_device));
#endif
}

MemorySnapshot read_memory(int cuda_device)
{
    MemorySnapshot m;
    m.resident_bytes = resident_memory_bytes();
    if (cuda_device < 0) return m;
#ifdef MANTISSA_HAVE_CUDA_ALLOCATOR
    const auto device = static_cast<c10::DeviceIndex>(cuda_device);
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
    const auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    m.cuda_allocated_bytes = stats.allocated_bytes[all].current;
    m.cuda_reserved_bytes = stats.reserved_bytes[all].current;
    m.cuda_peak_bytes = stats.allocated_bytes[all].peak;
    m.nvml_used_bytes = nvml_used_bytes(device);
#else
    m.nvml_used_bytes = nvml_used_bytes(cuda_device);
#endif
    return m;
}

} // namespace mantissa
