// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The layout of a statistics row (tensor_stats.h), and what one value adds to it: its slot in
// the exponent histogram and what its cast did to it. One definition for the fused CPU pass
// and the CUDA kernel (core/cuda/tensor_stats_row.cu), so that the CPU tests hold the
// kernel's per-value rules. Plain C++17 with no library, as nvcc compiles it too.

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MANTISSA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MANTISSA_HOST_DEVICE inline
#endif

namespace mantissa {

// FP32 exponents of finite non-zero values: floor(log2|x|) from -149 (smallest subnormal)
// to 127, one bin each.
constexpr int kMinExponent = -149;
constexpr int kMaxExponent = 127;
constexpr int64_t kExponentBins = kMaxExponent - kMinExponent + 1;

// One tensor's statistics row (float64; counts are exact in a double below 2^53).
namespace stats_row {
constexpr int64_t kZeros = 0;
constexpr int64_t kFirstBin = 1;                          // exponent kMinExponent, then one per binade
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

namespace stats_value {

MANTISSA_HOST_DEVICE uint32_t magnitude_bits(float v)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(v) & 0x7FFFFFFFu;
#else
    return __builtin_bit_cast(uint32_t, v) & 0x7FFFFFFFu;
#endif
}

// |x| without a branch: `x < 0 ? -x : x` compiled to a branch on the sign, which random signs
// mispredict about every other value (most of a compared row's time in the CPU scan, perf,
// 2026-12-04). Only zeros' and NaNs' signs differ from the branch's, and no rule here reads them.
// fabs clears the sign bit (float and double alike, host and device).
template <typename T>
MANTISSA_HOST_DEVICE T abs_of(T x)
{
#if defined(__CUDA_ARCH__)
    return fabs(x);
#else
    return std::fabs(x);
#endif
}

// Row slot of a value from the bits of |x|: zero, its binade (exact for subnormals, whose
// binade is the highest set bit of their mantissa), or non-finite (Inf and NaN).
MANTISSA_HOST_DEVICE int slot_of(uint32_t mag_bits)
{
    const uint32_t biased = mag_bits >> 23;
    if (biased == 0xFFu) return static_cast<int>(stats_row::kNonFinite);
    if (biased != 0) return static_cast<int>(biased) + 23; // kFirstBin + (biased - 127) - kMinExponent
    if (mag_bits == 0) return static_cast<int>(stats_row::kZeros);
#if defined(__CUDA_ARCH__)
    const int highest_bit = 31 - __clz(static_cast<int>(mag_bits));
#else
    const int highest_bit = 31 - __builtin_clz(mag_bits);
#endif
    return static_cast<int>(stats_row::kFirstBin) + highest_bit;
}

// How a value is compared with its cast. Per-tensor scaled FP8 (`scaled_domain`) also counts
// results that are subnormal in the format, and values whose scaled magnitude overflows it.
// Overflow is IEEE's: the magnitude rounds (to nearest even, exponent unbounded) past the
// largest finite value, i.e. it reaches `overflow_from`, half a step past max (and on that
// tie only where max's last mantissa bit is odd: E4M3's 448 keeps 464). A saturating cast
// clamps exactly these; 449 in E4M3 or 65505 in FP16 round to max as any value rounds.
struct CastComparison {
    bool scaled_domain = false;
    double scale = 1.0;
    double min_normal = 0.0;
    double overflow_from = 0.0;
    bool overflow_at_tie = true;
    double min_subnormal = 0.0;
};

// Whether a scaled cast's code was subnormal. The code q is not kept: r = fl(q * fl(1/scale)),
// so |r| * scale is q to within two FP32 roundings, below or above it. Where 1/scale is not
// exact (a scale that is not a power of two), a q of exactly min_normal comes back just under
// it; the test is therefore made halfway between the largest subnormal code (min_normal -
// min_subnormal) and min_normal, a gap of 2^-(mantissa bits + 1) relative, far above FP32's.
MANTISSA_HOST_DEVICE bool scaled_code_is_subnormal(double rv, const CastComparison& c)
{
    return (rv != 0.0) & (rv < c.min_normal - 0.5 * c.min_subnormal); // & and not &&: no branch
}

// Whether a scaled cast overflowed the format: the cast multiplies in FP32 (fl(|v| * scale)),
// and its verdict is that product's, not the exact one's (0.1f * fl(448/0.1f) is 448 in FP32
// and 448.0000067 exactly).
MANTISSA_HOST_DEVICE bool scaled_value_overflows(float v, const CastComparison& c)
{
    const float mag = abs_of(v);
    const double scaled = static_cast<double>(mag * static_cast<float>(c.scale));
    return (scaled > c.overflow_from) | ((scaled == c.overflow_from) & c.overflow_at_tie); // no branch
}

// Adds finite `v`'s comparison with its cast `r` to `t` (fields underflow, subnormal, overflow,
// compared, err_energy, signal), in FP64 as the host reference does it: squares of values
// near FP32's max overflow FP32.
// A non-finite cast of a finite value is an overflow under a per-tensor scale. Under per-row
// and block scales it is a value whose row or block holds an Inf or NaN (every element of it
// becomes NaN): neither compared nor an overflow, as the value was not beyond the format.
template <typename Tally>
MANTISSA_HOST_DEVICE void compare_cast(float v, float r, const CastComparison& c, Tally& t)
{
    if ((magnitude_bits(r) >> 23) == 0xFFu) {
        if (c.scaled_domain) ++t.overflow;
        return;
    }
    t.underflow += (v != 0.0f) & (r == 0.0f); // counts added without a branch: their outcomes vary value by value
    const double vd = static_cast<double>(v);
    const double mag = abs_of(vd);
    if (c.scaled_domain) {
        const double scaled_r = static_cast<double>(r) * c.scale;
        t.subnormal += scaled_code_is_subnormal(abs_of(scaled_r), c);
        t.overflow += scaled_value_overflows(v, c);
    }
    const double e = vd - static_cast<double>(r);
    t.err_energy += e * e;
    t.signal += mag * mag;
    ++t.compared;
}

} // namespace stats_value
} // namespace mantissa
