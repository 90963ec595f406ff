// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The values a format's statistics and casts are held to: zeros of both signs, FP32's
// smallest and largest subnormals and normals, infinities, NaNs, and for `format` at `scale`
// its largest finite value, the float and the format's code just under it, just over it, half
// a step past it (where round-to-nearest-even overflows or not), twice it, its smallest normal and
// subnormal and the halves and quarters below; then 100,000 values spread over every binade
// (seeded). Shared by tests/test_telemetry.cpp and bench/cuda_checks.cpp (the same values on
// the CPU here and on a GPU there). A scale of 0 (per-row FP8) puts them in the format's own
// domain.

#include <torch/torch.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "number_format.h"

inline torch::Tensor edge_values(mantissa::NumberFormat format, float scale)
{
    const mantissa::FormatInfo& info = mantissa::format_info(format);
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const float s = scale > 0.0f ? scale : 1.0f;
    std::vector<float> v = {0.0f, -0.0f, std::ldexp(1.0f, -149), -std::ldexp(1.0f, -149), 3 * std::ldexp(1.0f, -149),
                            std::bit_cast<float>(0x007FFFFFu), std::ldexp(1.0f, -126), std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(), inf, -inf, nan, -nan, 1.0f, -1.5f};
    const double max = info.max_finite, min_sub = info.min_subnormal > 0 ? info.min_subnormal : info.min_normal;
    const double overflow_tie = max + std::ldexp(0.5, std::ilogb(max) - info.mantissa_bits); // half a step past max
    for (double m : {max, std::nextafter(max, 0.0), overflow_tie, max * (1.0 + 1.0 / 64), 2 * max, info.min_normal,
                     min_sub, min_sub / 2, min_sub / 4, min_sub * 1.5}) {
        v.push_back(static_cast<float>(m / s));
        v.push_back(static_cast<float>(-m / s));
    }
    // Just under max as the tensor holds it: the float below max / s (nextafter in double above
    // narrowed back to max itself), and the format's own code below max (416 in E4M3).
    const float under = std::nextafter(static_cast<float>(max / s), 0.0f);
    const float code_below = static_cast<float>((max - std::ldexp(1.0, std::ilogb(max) - info.mantissa_bits)) / s);
    for (float u : {under, code_below}) {
        v.push_back(u);
        v.push_back(-u);
    }
    torch::manual_seed(7);
    return torch::cat({torch::tensor(v), torch::randn({100000}) * torch::exp2(torch::randint(-150, 128, {100000}))});
}
