// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Which number formats Mantissa's engine runs natively on a device (tensor-core GEMMs in that
// format) and which it emulates (operands rounded to the format, FP32 GEMM). Torch-free, so the
// About dialog and the precision table can ask it without LibTorch. The thresholds are
// NVIDIA's: BF16 tensor cores from sm_80 (Ampere), FP16 from sm_70 (Volta), FP8 E4M3/E5M2 from
// sm_89 (Ada) and sm_90 (Hopper). TF32 (sm_80), MXFP8 and FP4 (sm_100) have tensor cores but
// no native path in the engine (docs/EXECUTORS.md): emulated on every device.

#include <string>
#include <vector>

#include "number_format.h"

namespace mantissa {

// A CUDA compute capability; {0, 0} is the CPU.
struct ComputeCapability {
    int major = 0;
    int minor = 0;
    bool is_gpu() const { return major > 0; }
    bool at_least(int maj, int min) const { return major > maj || (major == maj && minor >= min); }
};

enum class Execution { Native, Emulated };

Execution format_execution(NumberFormat format, ComputeCapability device);
// MXFP8 is FP8 with a shared power-of-two scale per 32 elements, a scaling recipe in project
// files, not a NumberFormat; sm_100's block-scaled GEMMs could run it, the engine emulates it.
Execution mxfp8_execution(ComputeCapability device);

struct FormatSupport {
    std::string format;      // "FP32", "TF32", "BF16", "FP16", "FP8 E4M3", "FP8 E5M2", "MXFP8", then the block recipes
    Execution execution;
    std::string requirement; // what runs it natively: "any device", "sm_80", "emulated only (hardware: sm_100)", ...
};
// One row per format, in the order above.
std::vector<FormatSupport> format_support_table(ComputeCapability device);
const char* execution_name(Execution execution); // "native" | "emulated"

} // namespace mantissa
