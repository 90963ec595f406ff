// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// log Z (logsumexp) of every row of the logits on the CPU, each row on one thread, in sums whose
// order is fixed: the same bits on any thread count and in every run. LibTorch's logsumexp was
// not: in 1 to 3 of 14 telemetry runs under load, the rows its second thread took came out about
// 3e-5 off (a second call right after it was right; cause not found, 2026-12-05).

#include <torch/torch.h>

namespace mantissa {

// (rows) FP64 from rows (rows, V), FP32 on the CPU: max + log(sum exp(x - max)), the
// exponentials in FP32 (within about two ulps), summed in FP64. A row with an infinite max is
// that max (logsumexp's -Inf for a row of -Inf, +Inf for a row with +Inf), a row with NaN NaN.
torch::Tensor log_z_rows_cpu(const torch::Tensor& rows);

} // namespace mantissa
