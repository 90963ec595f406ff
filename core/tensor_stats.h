// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Numerics of one tensor against one format: the exponent histogram, what the format does
// to it (underflow, subnormals, overflow), and the error of the cast. Computed on the
// telemetry cadence only, on the tensor's own device: each tensor becomes one row of
// doubles there, without a host sync, and a telemetry step reads all its rows back in one
// copy (telemetry_frame.cpp).

#include <torch/torch.h>

#include "number_format.h"
#include "stats_row.h"
#include "telemetry.h"

namespace mantissa {

// How a row is computed. Auto: one fused pass on the CPU (where a dozen separate ops over the
// same data cost several times the fused pass); on CUDA, Mantissa's fused kernel where it is
// built and agreed with the tensor ops on a probe, else the tensor ops. FusedCpu takes the
// AVX-512 count and comparison where the CPU has them (core/cpu_binade_count.h,
// core/cpu_cast_compare.h), FusedCpuPortable the portable passes everywhere: the same rows (the
// tests hold both). FusedCuda asks for the kernel itself (an error where it is not built).
enum class StatsKernel { Auto, TensorOps, FusedCpu, FusedCpuPortable, FusedCuda };

// Whether CUDA rows come from the fused kernel: built (MANTISSA_CUDA_KERNELS), a GPU present,
// and its rows equal to the tensor ops' on crafted tensors, tried once per process (a host sync
// then, none after). Where it disagrees, telemetry keeps the tensor ops and says so on stderr.
bool fused_cuda_stats_available();

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

// The same for an FP8 operand as the native executor holds its cast: `codes` (FP8, x's shape)
// whose values are codes * inv_scale (a () FP32 tensor on x's device; Fp8Tensor::dequantized()).
// With Mantissa's CUDA kernel the codes are read as they are, 1 byte a value, where the
// dequantized tensor is 4 bytes written and read again; elsewhere they are dequantized first.
torch::Tensor tensor_stats_row_of_codes(const torch::Tensor& x, NumberFormat format, const torch::Tensor& scale,
                                        const torch::Tensor& codes, const torch::Tensor& inv_scale);
// The same compared unscaled (scale 0, as tensor_stats_row takes block recipes' casts), for
// fp8-block's codes (R, C) with inv_scale (R, C / 128): a 1x128 block's values are its codes
// times its inverse scale, as join_fp8_blocks makes them.
torch::Tensor tensor_stats_row_of_block_codes(const torch::Tensor& x, NumberFormat format, const torch::Tensor& codes,
                                              const torch::Tensor& inv_scale);
// codes * inv_scale in FP32: one inverse scale (a () tensor), or one per 1x128 block of the
// rows of codes (R, C): (R, C / 128).
torch::Tensor dequantize_codes(const torch::Tensor& codes, const torch::Tensor& inv_scale);

// A CPU tensor's one value, read from its memory. On the CPU there is no queue to wait for, but
// the step's code calls item() nowhere (test_native::aNativeStepReadsNoScalar), so that a read
// that would stall a GPU's queue shows in a CPU test.
float cpu_scalar(const torch::Tensor& t);

// The FusedCpu rows of many tensors in one parallel pass (one thread barrier for all).
struct StatsSource {
    torch::Tensor x;
    NumberFormat format = NumberFormat::FP32;
    float scale = 1.0f;
    torch::Tensor dequantized;
};
std::vector<torch::Tensor> tensor_stats_rows_cpu(const std::vector<StatsSource>& sources,
                                                StatsKernel kernel = StatsKernel::FusedCpu);

// How a row judges `format`'s casts (stats_value::CastComparison); `scaled_domain` for a
// per-tensor FP8 scale, x having been multiplied by `scale` before the cast.
stats_value::CastComparison cast_comparison(NumberFormat format, bool scaled_domain, double scale);

// Whether a row of these arguments compares against a cast: wherever one is given. Callers
// give none for an FP32 operand (nothing was cast); fp8-block's FP32 block scales are given
// theirs, rounded to powers of two, so that their row says what the rounding cost.
inline bool stats_compared(const torch::Tensor& dequantized) { return dequantized.defined(); }

// TensorStats from a row read back to the host; `count` is x.numel(). values_only: a 16-bit
// row whose tensor already held the format's values, compared against itself (the native
// executor's activations, gradients and GEMM outputs, rounded by the op that made them): its
// subnormal share is counted, and underflow, overflow, MSE and SNR, which only the cast
// itself could tell, read "not measured" (-1, -1, NaN, NaN).
TensorStats tensor_stats_from_row(const double* row, NumberFormat format, float scale, int64_t count, bool compared,
                                  bool values_only = false);

// One tensor, row and read-back together (a host sync: for tests and one-off use).
TensorStats compute_tensor_stats(const torch::Tensor& x, NumberFormat format, float scale,
                                 const torch::Tensor& dequantized, StatsKernel kernel = StatsKernel::Auto);

// The original host scan, element by element in FP64: the reference the device path is held
// to (tests/test_telemetry.cpp, deviceStatsMatchReference). Not used by training.
TensorStats compute_tensor_stats_reference(const torch::Tensor& x, NumberFormat format, float scale,
                                           const torch::Tensor& dequantized);

} // namespace mantissa
