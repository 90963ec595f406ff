// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Numerics of one tensor against one format: the exponent histogram, what the format does
// to it (underflow, subnormals, overflow), and the error of the cast. Computed on the
// telemetry cadence only, on the tensor's own device: each tensor becomes one row of
// doubles there, without a host sync, and a telemetry step reads all its rows back in one
// copy (telemetry_frame.cpp).

#include <torch/torch.h>

#include "number_format.h"
#include "telemetry.h"

namespace mantissa {

// FP32 exponents of finite non-zero values: floor(log2|x|) from -149 (smallest subnormal)
// to 127, one bin each.
constexpr int kMinExponent = -149;
constexpr int kMaxExponent = 127;
constexpr int64_t kExponentBins = kMaxExponent - kMinExponent + 1;

// One tensor's statistics row (float64; counts are exact in a double below 2^53).
namespace stats_row {
constexpr int64_t kZeros = 0;
constexpr int64_t kFirstBin = 1;                       // exponent kMinExponent, then one per binade
constexpr int64_t kNonFinite = kFirstBin + kExponentBins; // infs + NaNs
constexpr int64_t kNans = kNonFinite + 1;
constexpr int64_t kUnderflow = kNans + 1;
constexpr int64_t kSubnormal = kUnderflow + 1;
constexpr int64_t kOverflow = kSubnormal + 1;
constexpr int64_t kCompared = kOverflow + 1;
constexpr int64_t kAmax = kCompared + 1;
constexpr int64_t kErrorEnergy = kAmax + 1; // sum (x - q)^2 over the compared values
constexpr int64_t kSignalEnergy = kErrorEnergy + 1;
constexpr int64_t kSize = kSignalEnergy + 1;
} // namespace stats_row

// How a row is computed. Auto: tensor ops on an accelerator, one fused pass on the CPU (where
// a dozen separate ops over the same data cost several times the fused pass).
enum class StatsKernel { Auto, TensorOps, FusedCpu };

// `x` is the FP32 tensor before the cast, `scale` what it was multiplied by before rounding
// (1 for 16-bit formats, 0 for per-row/block FP8 scales), `dequantized` the value the GEMM
// used (undefined: not cast, e.g. FP32 layers, where every fraction is then 0 and the error
// is 0). Returns stats_row::kSize doubles on x's device; only reads x and `dequantized`.
torch::Tensor tensor_stats_row(const torch::Tensor& x, NumberFormat format, float scale,
                               const torch::Tensor& dequantized, StatsKernel kernel = StatsKernel::Auto);

// The same with a per-tensor scale that is still a () tensor on x's device (native FP8): the
// row is computed without reading the scale back.
torch::Tensor tensor_stats_row(const torch::Tensor& x, NumberFormat format, const torch::Tensor& scale,
                               const torch::Tensor& dequantized);

// The FusedCpu rows of many tensors in one parallel pass (one thread barrier for all).
struct StatsSource {
    torch::Tensor x;
    NumberFormat format = NumberFormat::FP32;
    float scale = 1.0f;
    torch::Tensor dequantized;
};
std::vector<torch::Tensor> tensor_stats_rows_cpu(const std::vector<StatsSource>& sources);

// Whether a row of these arguments compares against a cast.
inline bool stats_compared(NumberFormat format, const torch::Tensor& dequantized)
{
    return dequantized.defined() && format != NumberFormat::FP32;
}

// TensorStats from a row read back to the host; `count` is x.numel().
TensorStats tensor_stats_from_row(const double* row, NumberFormat format, float scale, int64_t count, bool compared);

// One tensor, row and read-back together (a host sync: for tests and one-off use).
TensorStats compute_tensor_stats(const torch::Tensor& x, NumberFormat format, float scale,
                                 const torch::Tensor& dequantized, StatsKernel kernel = StatsKernel::Auto);

// The original host scan, element by element in FP64: the reference the device path is held
// to (tests/test_telemetry.cpp, deviceStatsMatchReference). Not used by training.
TensorStats compute_tensor_stats_reference(const torch::Tensor& x, NumberFormat format, float scale,
                                           const torch::Tensor& dequantized);

} // namespace mantissa
