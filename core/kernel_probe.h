// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Mantissa's own CUDA kernels are used only once they agree with the LibTorch ops they
// replace, on crafted inputs, tried once per process. Internal: std only.

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "first_line.h"

namespace mantissa {

// MANTISSA_CUDA_KERNELS=0: none of Mantissa's kernels is tried, LibTorch's ops run everywhere.
// The way round a kernel that faults on a GPU it was never run on, without a rebuild.
inline bool cuda_kernels_switched_off()
{
    const char* v = std::getenv("MANTISSA_CUDA_KERNELS");
    return v && std::string_view(v) == "0";
}

// A probe that faulted on the device (an illegal address, a misaligned access) leaves the CUDA
// context unusable: every later call fails, far from the cause. The run stops here instead,
// naming the kernel and the way round it.
[[noreturn]] inline void kernel_faulted(const char* kernel, const std::string& error)
{
    throw std::runtime_error(std::string("the ") + kernel + " kernel faulted in its probe on this GPU (" + error +
                             "), which leaves CUDA unusable in this process: run with MANTISSA_CUDA_KERNELS=0 to use "
                             "LibTorch's ops only, and please report it");
}

// The errors that leave the context unusable (CUDA's "sticky" ones). Others that read "CUDA
// error" leave it working and the ops stay: a cuBLAS status, "no kernel image is available"
// (a GPU the build did not target), "too many resources requested for launch".
inline bool says_cuda_faulted(const std::string& error)
{
    for (const char* sticky : {"illegal memory access", "misaligned address", "unspecified launch failure",
                               "illegal instruction", "hardware stack error", "invalid program counter",
                               "uncorrectable ECC error", "device-side assert", "an illegal address"})
        if (error.find(sticky) != std::string::npos) return true;
    return false;
}

// The first line of a probe's error; a fault that leaves CUDA unusable stops the run here.
inline std::string probe_error(const char* kernel, const std::exception& e)
{
    std::string error = first_line(e);
    if (says_cuda_faulted(error)) kernel_faulted(kernel, error);
    return error;
}

// Runs a kernel's probe `agrees`: a disagreement or an error is said on stderr, and the
// caller keeps LibTorch's ops. A fault on the device stops the run (kernel_faulted).
inline bool kernel_agrees(const char* kernel, const std::function<bool()>& agrees)
{
    if (cuda_kernels_switched_off()) return false;
    try {
        if (agrees()) return true;
        std::fprintf(stderr, "mantissa: the %s kernel disagrees with LibTorch's ops on this GPU: the ops stay\n", kernel);
    } catch (const std::exception& e) {
        const std::string error = probe_error(kernel, e);
        std::fprintf(stderr, "mantissa: the %s kernel failed its probe (%s): LibTorch's ops stay\n", kernel,
                     error.c_str());
    }
    return false;
}

// A kernel that converts to FP8 either two values at once with the hardware's instruction
// (sm_89 and newer) or one at a time with c10's conversion: the paired variant is tried first,
// and if it disagrees (or fails) the plain one, then LibTorch's ops.
enum class ProbedKernel { Unavailable, Plain, Paired };

template <typename Agrees>
ProbedKernel probe_paired_then_plain(const char* kernel, Agrees&& agrees)
{
    if (cuda_kernels_switched_off()) return ProbedKernel::Unavailable;
    try {
        if (agrees(true)) return ProbedKernel::Paired;
        std::fprintf(stderr,
                     "mantissa: the %s kernel disagrees with LibTorch's ops when it converts two values at once on this "
                     "GPU: it converts one at a time\n",
                     kernel);
    } catch (const std::exception& e) {
        const std::string error = probe_error(kernel, e);
        std::fprintf(stderr, "mantissa: the %s kernel failed its probe with the paired conversion (%s)\n", kernel,
                     error.c_str());
    }
    return kernel_agrees(kernel, [&] { return agrees(false); }) ? ProbedKernel::Plain : ProbedKernel::Unavailable;
}

// How a probed kernel is described in reports: "yes (paired conversion)", "yes (c10 conversion)", "NO".
inline const char* probed_kernel_report(ProbedKernel k)
{
    return k == ProbedKernel::Paired ? "yes (paired conversion)" : k == ProbedKernel::Plain ? "yes (c10 conversion)" : "NO";
}

} // namespace mantissa
