// SPDX-License-Identifier: GPL-3.0-or-later
#include "quantize.h"

namespace mantissa {
namespace {

c10::ScalarType torch_dtype(NumberFormat format)
{
    switch (format) {
    case NumberFormat::BF16: return torch::kBFloat16;
    case NumberFormat::FP16: return torch::kHalf;
    case NumberFormat::E4M3: return torch::kFloat8_e4m3fn;
    case NumberFormat::E5M2: return torch::kFloat8_e5m2;
    default: return torch::kFloat32;
    }
}

} // namespace

torch::Tensor round_to_tf32(const torch::Tensor& x)
{
    // Keep 10 of the 23 mantissa bits: add half an ulp of the kept part to the magnitude and
    // truncate. A carry into the exponent is the correct rounding, up to inf at the top.
    auto bits = x.contiguous().view(torch::kInt32);
    auto rounded = torch::bitwise_and(bits + 0x1000, ~int32_t(0x1FFF));
    const auto finite = torch::isfinite(x);
    return torch::where(finite, rounded.view(torch::kFloat32), x);
}

torch::Tensor round_to_format(const torch::Tensor& x_in, NumberFormat format, Overflow overflow)
{
    const auto x = x_in.to(torch::kFloat32);
    const FormatInfo& info = format_info(format);
    switch (format) {
    case NumberFormat::FP32:
        return x;
    case NumberFormat::TF32: {
        auto r = round_to_tf32(x);
        return overflow == Overflow::Saturate ? r.clamp(-info.max_finite, info.max_finite) : r;
    }
    default:
        break;
    }
    const double max = info.max_finite;
    if (overflow == Overflow::Saturate) {
        // clamp keeps NaN as NaN and turns +-inf into +-max, as the FP8 recipes do.
        return x.clamp(-max, max).to(torch_dtype(format)).to(torch::kFloat32);
    }
    auto r = x.to(torch_dtype(format)).to(torch::kFloat32);
    if (format == NumberFormat::E4M3) {
        // Without saturation anything that rounds past 448 has no encoding but NaN. The
        // rounding midpoint between 448 and the next binade step (480) is 464, a tie that
        // goes to even (448).
        const auto overflowed = x.abs() > 464.0; // true for +-inf too
        r = r.masked_fill(overflowed, std::numeric_limits<float>::quiet_NaN());
    }
    return r;
}

NumberFormat gemm_output_format(NumberFormat operand_format)
{
    switch (operand_format) {
    case NumberFormat::BF16:
    case NumberFormat::FP16:
        return operand_format;
    case NumberFormat::E4M3:
    case NumberFormat::E5M2:
        return NumberFormat::BF16;
    default:
        return NumberFormat::FP32;
    }
}

} // namespace mantissa
