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

} // namespace mantissa
