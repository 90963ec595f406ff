// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Stands in for LibTorch's header under tests/cuda_sim (see ATen/cuda/CUDAContext.h here).
#include <c10/core/Device.h>

namespace c10::cuda {
struct CUDAGuard {
    explicit CUDAGuard(c10::Device) {}
};
} // namespace c10::cuda
