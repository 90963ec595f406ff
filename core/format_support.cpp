// SPDX-License-Identifier: GPL-3.0-or-later
#include "format_support.h"

namespace mantissa {

Execution format_execution(NumberFormat format, ComputeCapability device)
{
    if (format == NumberFormat::FP32) return Execution::Native;
    if (!device.is_gpu()) return Execution::Emulated;
    bool native = false;
    switch (format) {
    case NumberFormat::FP32: native = true; break;
    case NumberFormat::TF32: native = false; break; // the native executor rounds TF32 operands itself (EXECUTORS.md)
    case NumberFormat::BF16: native = device.at_least(8, 0); break;
    case NumberFormat::FP16: native = device.at_least(7, 0); break;
    case NumberFormat::E4M3:
    case NumberFormat::E5M2: native = device.at_least(8, 9); break;
    case NumberFormat::E2M1: native = device.major == 10; break; // sm_100's FP4 GEMM, untested (block_fp4_gemm.h)
    case NumberFormat::E8M0: native = false; break;                  // a scale format, never a GEMM's
    }
    return native ? Execution::Native : Execution::Emulated;
}

Execution mxfp8_execution(ComputeCapability)
{
    return Execution::Emulated; // sm_100's block-scaled GEMMs are not used by the engine
}

// What the two FP4 rows say on every device.
constexpr const char* kFp4Note = "sm_100 GEMMs, UNTESTED: never run on a Blackwell GPU (if a start-up probe passes); "
                                 "the casts are emulated; elsewhere emulated";

std::vector<FormatSupport> format_support_table(ComputeCapability device)
{
    return {
        {"FP32", format_execution(NumberFormat::FP32, device), "any device"},
        {"TF32", format_execution(NumberFormat::TF32, device), "emulated only (hardware: sm_80)"},
        {"BF16", format_execution(NumberFormat::BF16, device), "sm_80"},
        {"FP16", format_execution(NumberFormat::FP16, device), "sm_70"},
        {"FP8 E4M3", format_execution(NumberFormat::E4M3, device), "sm_89 / sm_90"},
        {"FP8 E5M2", format_execution(NumberFormat::E5M2, device), "sm_89 / sm_90"},
        {"MXFP8", mxfp8_execution(device), "emulated only (hardware: sm_100)"},
        // fp8-block: cuBLAS's blockwise FP8 GEMM on sm_90 (CUDA 12.9+), E4M3 operands with
        // power-of-two scales and whole 128-blocks, if a start-up probe gets its known answer
        // (blockwise_fp8.h); anything else is emulated. Only the GEMM: the block casts around it
        // produce the emulator's FP32 values (in one kernel launch each since 2026-12-04,
        // core/cuda/fp8_block.h) and its autograd runs in FP32 (on an H200, 2026-12-04, a step
        // took 4.4x FP8 delayed's, before those kernels). NVFP4 and MXFP4: on sm_100 their GEMMs
        // through LibTorch's block-scaled FP4 GEMM (block_fp4_gemm.h), never yet run on one.
        {"FP8 block (fp8-block)", device.major == 9 ? Execution::Native : Execution::Emulated,
         "sm_90 GEMMs (blockwise cuBLAS, if a start-up probe passes); the casts are emulated"},
        {"NVFP4", format_execution(NumberFormat::E2M1, device), kFp4Note},
        {"MXFP4", format_execution(NumberFormat::E2M1, device), kFp4Note},
    };
}

const char* execution_name(Execution execution)
{
    return execution == Execution::Native ? "native" : "emulated";
}

} // namespace mantissa
