// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A checkpoint records what decided its run's arithmetic beyond the project (the device, ATen's
// CPU kernels, the executor, LibTorch's version: Trainer::Impl::arithmetic_text), so that a
// resume elsewhere can say it is not bit-identical. No LibTorch.

#include <string>

namespace mantissa {

// What a resume's event says of it: "" where the checkpoint's record (`recorded`; "" when it
// kept none) matches this process's `now`, else "trained on ..., continuing on ...: not
// bit-identical to a run never stopped". A CPU record from before 2026-12-06 ("the CPU, ...")
// named no CPU kernels: it is compared with `now_without_cpu_kernels`.
std::string arithmetic_change(const std::string& recorded, const std::string& now,
                              const std::string& now_without_cpu_kernels);

} // namespace mantissa
