// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Memory readings for the telemetry frame: process RSS everywhere; on CUDA builds the caching
// allocator's counters and NVML's device total, where the driver library is present.

#include <string>

#include "telemetry.h"

namespace mantissa {

// cuda_device: the trainer's CUDA device index, or -1 for a CPU run. Named, not taken from the
// calling thread's current device: the GUI's thread or a data-parallel rank's may be on another.
MemorySnapshot read_memory(int cuda_device);

// Starts the caching allocator's peak anew (CUDA builds), so that cuda_peak_bytes is this
// run's and not the process's: a sweep, the GUI and the checks run several trainers in one.
void reset_peak_memory(int cuda_device);

// The PCI address of CUDA device `cuda_device` ("00000000:18:00.0", as NVML names it), or ""
// in a build without CUDA.
std::string cuda_pci_bus_id(int cuda_device);

} // namespace mantissa
