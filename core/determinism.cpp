// SPDX-License-Identifier: GPL-3.0-or-later
#include "determinism.h"

#include <cstdlib>
#include <cstring>

#include <ATen/Context.h>

namespace mantissa {

void prepare_cublas_for_determinism() { ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0); }

void set_deterministic_kernels(bool on)
{
    if (on) prepare_cublas_for_determinism();
    at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/false);
    // The mode would also fill every torch::empty with NaN, a write pass per allocation that
    // guards against reading memory never written. Mantissa's kernels write every element they
    // allocate, and the resume checks (bench/cuda_checks) would show a read that did not.
    at::globalContext().setDeterministicFillUninitializedMemory(false);
}

bool is_determinism_refusal(const char* message)
{
    // LibTorch's wording: "... does not have a deterministic implementation, but you set
    // 'torch.use_deterministic_algorithms(True)'", and for cuBLAS "Deterministic behavior was
    // enabled with either `torch.use_deterministic_algorithms(True)` ...".
    return std::strstr(message, "use_deterministic_algorithms") != nullptr ||
           std::strstr(message, "setDeterministicAlgorithms") != nullptr;
}

} // namespace mantissa
