// SPDX-License-Identifier: GPL-3.0-or-later
#include "fp4.h"

#include <tuple>

namespace mantissa {
namespace {

// The grid spacing of E2M1 at |x|: 0.5 below 2, 1 in [2, 4), 2 from 4 up. Dividing by it is
// exact (a power of two), so round() decides ties to even on the code itself.
torch::Tensor e2m1_step(const torch::Tensor& magnitude)
{
    // masked_fill with Scalars: torch::where with CPU 0-dim tensors would copy them to a GPU
    // with a blocking copy. NaN compares false and gets 2, as before.
    return torch::full_like(magnitude, 2.0f).masked_fill(magnitude < 4.0, 1.0f).masked_fill(magnitude < 2.0, 0.5f);
}

// 2^e for integral e in [-149, 127], assembled from the bits so that no exp2 rounds.
torch::Tensor pow2_from_bits(const torch::Tensor& exponent)
{
    const auto e = exponent.to(torch::kInt32);
    const auto normal = torch::bitwise_left_shift(e + 127, 23);
    const auto subnormal = torch::bitwise_left_shift(torch::ones_like(e), (e + 149).clamp(0, 22));
    return torch::where(e >= -126, normal, subnormal).view(torch::kFloat32);
}

} // namespace

torch::Tensor round_to_e2m1(const torch::Tensor& x_in)
{
    const auto x = x_in.to(torch::kFloat32);
    const auto magnitude = x.abs().clamp_max(kE2M1Max); // NaN stays NaN, inf becomes 6
    const auto step = e2m1_step(magnitude);
    return torch::copysign(torch::round(magnitude / step) * step, x); // round(): half to even
}

torch::Tensor round_to_e2m1_stochastic(const torch::Tensor& x_in, const torch::Tensor& uniform)
{
    // Blackwell's cvt.rs (TransformerEngine's software copy of it, ptx.cuh): add u steps of
    // the grid at |x|, then floor on the grid at the sum. u * step is exact (u has 8 bits, step
    // is a power of two), so the one rounding of the sum is the fused multiply-add's.
    const auto x = x_in.to(torch::kFloat32);
    const auto magnitude = x.abs().clamp_max(kE2M1Max);
    const auto t = magnitude + uniform * e2m1_step(magnitude);
    const auto step_t = e2m1_step(t);
    return torch::copysign((torch::floor(t / step_t) * step_t).clamp_max(kE2M1Max), x); // NaN stays NaN
}

torch::Tensor e2m1_encode(const torch::Tensor& on_grid)
{
    const auto x = on_grid.to(torch::kFloat32);
    const auto a = x.abs();
    // 0, 0.5, 1, 1.5 -> 0..3; 2, 3 -> 4, 5; 4, 6 -> 6, 7.
    auto index = torch::where(a < 2.0, a * 2.0, torch::where(a < 4.0, a + 2.0, a * 0.5 + 4.0));
    index = torch::nan_to_num(index, 0.0).to(torch::kUInt8);
    const auto sign = (torch::signbit(x) | torch::isnan(x)).to(torch::kUInt8) * 8;
    return torch::bitwise_or(index, sign);
}

torch::Tensor e2m1_decode(const torch::Tensor& codes)
{
    // From the code's bits on its own device (a table copied from the host would be a blocking
    // copy on a GPU): exponent field e, mantissa bit m; e 0 is subnormal, m * 0.5.
    const auto c = codes.to(torch::kInt32).bitwise_and(15);
    const auto e = c.bitwise_right_shift(1).bitwise_and(3);
    const auto m = c.bitwise_and(1).to(torch::kFloat32);
    const auto magnitude = torch::where(e == 0, m * 0.5, pow2_from_bits(e - 1) * (m * 0.5 + 1.0));
    return torch::where(c.bitwise_and(8) != 0, -magnitude, magnitude); // code 8 is -0
}

torch::Tensor e8m0_decode(const torch::Tensor& codes)
{
    const auto c = codes.to(torch::kInt32);
    const auto value = pow2_from_bits(c - 127);
    return value.masked_fill(c == 255, std::numeric_limits<float>::quiet_NaN());
}

torch::Tensor e8m0_encode_exponent(const torch::Tensor& exponent)
{
    return (exponent.to(torch::kInt32).clamp(-127, 127) + 127).to(torch::kUInt8);
}

torch::Tensor floor_log2(const torch::Tensor& x)
{
    const auto [mantissa, exponent] = torch::frexp(x.to(torch::kFloat32)); // x = m 2^e, m in [0.5, 1)
    (void)mantissa;
    return (exponent - 1).to(torch::kFloat32);
}

torch::Tensor ceil_log2(const torch::Tensor& x)
{
    const auto [mantissa, exponent] = torch::frexp(x.to(torch::kFloat32));
    return torch::where(mantissa == 0.5, exponent - 1, exponent).to(torch::kFloat32);
}

torch::Tensor pow2_exact(const torch::Tensor& exponent) { return pow2_from_bits(exponent); }

} // namespace mantissa
