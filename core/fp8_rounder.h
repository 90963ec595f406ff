// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Element-wise rounding for the fused CPU kernels (block_scaling.cpp, quantize.cpp): plain
// float and integer lanes, so that their loops vectorize (vector_clones.h), and bit for bit
// what LibTorch's casts give. Internal to core/.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "number_format.h"

namespace mantissa::rounding {

inline float from_bits(uint32_t bits)
{
    float out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
}

inline uint32_t bits_of(float v)
{
    uint32_t out;
    std::memcpy(&out, &v, sizeof out);
    return out;
}

// An FP8 format's round-to-nearest-even with saturation, as clamp + LibTorch's cast computes
// it: the quantum of |v|'s binade (never below the subnormal one) scales |v| onto integers,
// and adding and subtracting 2^23 rounds those to even in FP32's own rounding. NaN stays NaN
// (its payload may differ from the cast's).
struct Fp8Rounder {
    float max, min_binade, mantissa_scale;
    explicit Fp8Rounder(NumberFormat f)
        : max(static_cast<float>(format_info(f).max_finite)),
          min_binade(std::ldexp(1.0f, 1 - format_info(f).exponent_bias)),
          mantissa_scale(std::ldexp(1.0f, -format_info(f).mantissa_bits))
    {
    }
    float operator()(float v) const
    {
        const float c = std::max(std::min(v, max), -max);
        const float a = std::fabs(c);
        const float binade = from_bits(bits_of(a) & 0x7F800000u); // 2^floor(log2 a); 0 for 0 and subnormals
        const float quantum = std::max(binade, min_binade) * mantissa_scale;
        const float inverse = from_bits(0x7F000000u - bits_of(quantum)); // 1 / quantum, exactly
        const float shifted = a * inverse + 8388608.0f; // no -ffast-math: the sum is rounded here
        return std::copysign((shifted - 8388608.0f) * quantum, c);
    }
};

// FP32 -> BF16 -> FP32, round to nearest even, as c10::BFloat16 rounds; NaN becomes the
// canonical quiet NaN (LibTorch's vectorized cast gives another payload).
inline float round_bf16(float v)
{
    const uint32_t b = bits_of(v);
    const uint32_t rounded = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
    return (b & 0x7FFFFFFFu) > 0x7F800000u ? from_bits(0x7FC00000u) : from_bits(rounded);
}

} // namespace mantissa::rounding
