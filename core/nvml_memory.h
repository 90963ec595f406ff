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

} // namespace mantissa
