// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Delayed scaling's scale rule for one amax, in FP32 as TransformerEngine's kernels compute it
// (fp8_scaling.h states it): one definition for the host's DelayedScaling and the CUDA kernel
// that records an amax on the device (core/cuda/delayed_scaling.cu), so the CPU tests hold
// the kernel's arithmetic. Plain C++17 with no library, as nvcc compiles it too.

#if defined(__CUDACC__)
#define MANTISSA_SCALE_RULE __host__ __device__ __forceinline__
#else
#define MANTISSA_SCALE_RULE inline
#endif

namespace mantissa::scale_rule {

constexpr float kFloatMax = 3.40282346638528859812e+38f;

// `scaled_max` is the format's max over 2^margin (exact in float). An amax that is not a
// positive finite number keeps `previous` (an infinite one as FLT_MAX); a quotient that
// overflows is FLT_MAX: a scale is never inf.
MANTISSA_SCALE_RULE float scale_from_amax(float amax, float scaled_max, float previous)
{
    const bool positive_finite = amax > 0.0f && amax <= kFloatMax; // false for NaN
    if (!positive_finite) return previous > kFloatMax || previous < -kFloatMax ? kFloatMax : previous;
    const float scale = scaled_max / amax;
    return scale > kFloatMax ? kFloatMax : scale;
}

// The window's reduction: fmax over the history, so NaN entries are skipped, an inf wins, and
// a window of zeros and NaNs reduces to 0. (fmax is its own NaN rule: one side NaN gives the
// other.)
MANTISSA_SCALE_RULE float fmax_skipping_nan(float a, float b)
{
    if (a != a) return b;
    if (b != b) return a;
    return a > b ? a : b;
}

} // namespace mantissa::scale_rule
