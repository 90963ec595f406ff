// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Two FP8 codes from one instruction, with c10's bits. c10's conversion takes about twenty
// integer instructions per value, which left Mantissa's FP8 kernels bound by their
// arithmetic rather than by memory (cuobjdump, sm_90, 2026-12-04); sm_89 and newer convert
// two FP32 values in one cvt.rn.satfinite (cuda_fp8.h). Both round to nearest even; satfinite
// clamps past the largest finite value and writes a NaN as 0x7F, so what c10 writes otherwise
// is put back with selects. Device code on sm_89 and newer only: callers keep
// c10's conversion for the rest, the CPU's simulator included, and each kernel's start-up
// probe holds the device's bits to LibTorch's ops before the pairs are used.

#include <c10/util/Float8_e4m3fn.h>

#include "launch.h" // __device__ and the rest on the CPU's simulator too

#include <cstdint>
#include <type_traits>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

namespace mantissa::cuda_kernels {

// Two codes as the paired conversion lays them out, a in the low byte: c10's one-at-a-time
// conversion packed the same way, where the hardware's is not taken.
template <typename Code>
__device__ __forceinline__ uint32_t pack_codes(Code a, Code b)
{
    return static_cast<uint32_t>(a.x) | (static_cast<uint32_t>(b.x) << 8);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// How a value past the format's range is written, where the caller does not clamp it first.
enum class Past {
    Clamped,      // the caller clamped (or the values cannot be past): satfinite's own bits
    PositiveNan,  // E4M3 past 464 and Inf as 0x7F (code_of's NaN for non-saturating E4M3)
    AsC10,        // c10's: E4M3 past 464 and Inf as 0x7F | sign, E5M2 from 61440 on as 0x7C | sign
};

// The codes of a and b (a in the low byte), as c10's Code(a), Code(b) would write them.
template <typename Code>
__device__ __forceinline__ uint32_t code_pair_as_c10(float a, float b, Past past)
{
    constexpr bool kE4m3 = std::is_same_v<Code, c10::Float8_e4m3fn>;
    const uint32_t pair = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kE4m3 ? __NV_E4M3 : __NV_E5M2);
    const auto as_c10 = [&](float v, uint32_t code) { // selects, not branches
        const uint32_t sign = (__float_as_uint(v) >> 24) & 0x80u;
        const float mag = fabsf(v); // the comparisons below are false for NaN
        const bool beyond = past != Past::Clamped && (kE4m3 ? mag > 464.0f : mag >= 61440.0f);
        const uint32_t beyond_code = kE4m3 ? (past == Past::PositiveNan ? 0x7Fu : sign | 0x7Fu) : sign | 0x7Cu;
        code = beyond ? beyond_code : code;
        return isnan(v) ? sign | 0x7Fu : code;
    };
    return as_c10(a, pair & 0xFFu) | (as_c10(b, pair >> 8) << 8);
}

// The codes of finite a and b (a in the low byte), saturated to the format's largest finite
// value: c10's codes of the values clamped to it first.
template <typename Code>
__device__ __forceinline__ uint32_t code_pair_saturated(float a, float b)
{
    constexpr __nv_fp8_interpretation_t kKind = std::is_same_v<Code, c10::Float8_e4m3fn> ? __NV_E4M3 : __NV_E5M2;
    return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kKind);
}

// a and b, finite and within the format's range, rounded to its grid and read back (every
// E4M3 and E5M2 code is a half, so the way back through a pair of halves is exact).
template <typename Code>
__device__ __forceinline__ void round_pair_in_range(float& a, float& b)
{
    constexpr __nv_fp8_interpretation_t kKind = std::is_same_v<Code, c10::Float8_e4m3fn> ? __NV_E4M3 : __NV_E5M2;
    const __half2 h(__nv_cvt_fp8x2_to_halfraw2(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kKind), kKind));
    const float2 f = __half22float2(h);
    a = f.x, b = f.y;
}

// Two codes (a in the low byte) as FP32 values, through a pair of halves in one cvt: every
// E4M3 and E5M2 code is a half, so the values are c10's (a NaN code stays a NaN, its payload
// aside), where c10's decode takes a dozen integer instructions a value.
template <typename Code>
__device__ __forceinline__ float2 values_of_code_pair(uint32_t pair)
{
    constexpr __nv_fp8_interpretation_t kKind = std::is_same_v<Code, c10::Float8_e4m3fn> ? __NV_E4M3 : __NV_E5M2;
    return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), kKind)));
}
#endif

} // namespace mantissa::cuda_kernels
