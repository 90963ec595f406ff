// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A GPU's memory as the driver sees it (NVML, loaded with dlopen): no CUDA and no build-time
// dependency, so the torch-free size check can ask for it too; a machine without the driver
// just reports nothing.

#include <cstdint>

namespace mantissa {

// Total and used bytes of GPU `device` (every process); false where there is no driver or no
// such device.
bool nvml_memory(int device, int64_t& total_bytes, int64_t& used_bytes);
// The same for the GPU at PCI bus id "domain:bus:device.function" (hex, as CUDA's
// cudaDeviceGetPCIBusId writes it): the way to name CUDA's device d to NVML, whose indices
// follow the PCI order whatever CUDA_VISIBLE_DEVICES says.
bool nvml_memory_of_bus(const char* pci_bus_id, int64_t& total_bytes, int64_t& used_bytes);

} // namespace mantissa
