// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Mantissa's own CUDA kernels are used only once they agree with the LibTorch ops they
// replace, on crafted inputs, tried once per process. Internal: std only.

#include <cstdio>
#include <exception>
#include <functional>

#include "first_line.h"

namespace mantissa {

// Runs a kernel's probe `agrees`: a disagreement or an error is said on stderr, and the
// caller keeps LibTorch's ops.
inline bool kernel_agrees(const char* kernel, const std::function<bool()>& agrees)
{
    try {
        if (agrees()) return true;
        std::fprintf(stderr, "mantissa: the %s kernel disagrees with LibTorch's ops on this GPU: the ops stay\n", kernel);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mantissa: the %s kernel failed its probe (%s): LibTorch's ops stay\n", kernel,
                     first_line(e).c_str());
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
    try {
        if (agrees(true)) return ProbedKernel::Paired;
        std::fprintf(stderr,
                     "mantissa: the %s kernel disagrees with LibTorch's ops when it converts two values at once on this "
                     "GPU: it converts one at a time\n",
                     kernel);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mantissa: the %s kernel failed its probe with the paired conversion (%s)\n", kernel,
                     first_line(e).c_str());
    }
    return kernel_agrees(kernel, [&] { return agrees(false); }) ? ProbedKernel::Plain : ProbedKernel::Unavailable;
}

// How a probed kernel is described in reports: "yes (paired conversion)", "yes (c10 conversion)", "NO".
inline const char* probed_kernel_report(ProbedKernel k)
{
    return k == ProbedKernel::Paired ? "yes (paired conversion)" : k == ProbedKernel::Plain ? "yes (c10 conversion)" : "NO";
}

} // namespace mantissa
