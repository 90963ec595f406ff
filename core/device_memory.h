// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Memory readings for the telemetry frame: process RSS everywhere; on CUDA builds the caching
// allocator's counters and NVML's device total, where the driver library is present.

#include "telemetry.h"

namespace mantissa {

MemorySnapshot read_memory(bool on_cuda);

} // namespace mantissa
