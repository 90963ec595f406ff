// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What this engine was built with and what it runs on: Mantissa's own version, LibTorch's,
// the CUDA runtime and cuDNN it was compiled against ("none" on a CPU build), and the GPU.
// Torch-free header; --version and Help > About read these.

#include <string>

#include "format_support.h"

namespace mantissa {

struct EngineVersions {
    std::string mantissa; // "0.1.0"
    std::string libtorch; // "2.13.0"
    std::string cuda;     // "12.8", or "none"
    std::string cudnn;    // "9.8.0", or "none"
    std::string cpu_kernels; // the vector instructions ATen's CPU kernels use: "AVX512", "AVX2", "DEFAULT"
};
EngineVersions engine_versions();

struct GpuInfo {
    bool present = false;   // CUDA usable by LibTorch
    std::string name;       // from NVML; empty when the driver library does not say
    ComputeCapability capability;
};
GpuInfo current_gpu();

// "12.8" from CUDART_VERSION 12080; "9.8.0" from cuDNN's 90800 (8.x used 1000 for the major).
std::string cuda_version_string(long version);
std::string cudnn_version_string(long version);

} // namespace mantissa
