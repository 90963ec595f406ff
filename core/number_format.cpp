// SPDX-License-Identifier: GPL-3.0-or-later
#include "number_format.h"

#include <array>
#include <cmath>

namespace mantissa {
namespace {

const std::array<FormatInfo, 8> kFormats = {{
    {NumberFormat::FP32, "fp32", 8, 23, 127, 3.4028234663852886e38, std::ldexp(1.0, -126), std::ldexp(1.0, -149), true, false, true},
    {NumberFormat::TF32, "tf32", 8, 10, 127, 3.4011621342146535e38, // (2 - 2^-10) * 2^127
     std::ldexp(1.0, -126), 0.0, true, false, true},
    {NumberFormat::BF16, "bf16", 8, 7, 127, 3.3895313892515355e38, std::ldexp(1.0, -126), std::ldexp(1.0, -133), true, false, true},
    {NumberFormat::FP16, "fp16", 5, 10, 15, 65504.0, std::ldexp(1.0, -14), std::ldexp(1.0, -24), true, false, true},
    {NumberFormat::E4M3, "e4m3", 4, 3, 7, 448.0, std::ldexp(1.0, -6), std::ldexp(1.0, -9), false, true, true},
    {NumberFormat::E5M2, "e5m2", 5, 2, 15, 57344.0, std::ldexp(1.0, -14), std::ldexp(1.0, -16), true, true, true},
    // E2M1 (OCP MX FP4): 6 = 1.5 * 2^2 at the top, 0.5 the only subnormal, no Inf or NaN.
    {NumberFormat::E2M1, "e2m1", 2, 1, 1, 6.0, 1.0, 0.5, false, false, false},
    // E8M0 (OCP MX scale): powers of two 2^-127 .. 2^127, no zero, no subnormals.
    {NumberFormat::E8M0, "e8m0", 8, 0, 127, std::ldexp(1.0, 127), std::ldexp(1.0, -127), 0.0, false, false, false},
}};

} // namespace

const FormatInfo& format_info(NumberFormat format) { return kFormats[static_cast<size_t>(format)]; }

const char* format_name(NumberFormat format) { return format_info(format).name; }

std::optional<NumberFormat> parse_number_format(const std::string& name)
{
    for (const auto& f : kFormats)
        if (name == f.name) return f.format;
    return std::nullopt;
}

std::vector<std::string> number_format_names()
{
    std::vector<std::string> names;
    for (const auto& f : kFormats)
        if (f.gemm_operand) names.emplace_back(f.name);
    return names;
}

std::string number_format_names_joined()
{
    std::string out;
    for (const auto& name : number_format_names()) out += (out.empty() ? "" : ", ") + name;
    return out;
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
