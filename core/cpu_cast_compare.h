// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The statistics scan's comparison of x with its cast (tensor_stats.cpp) where no value can take a
// scaled verdict (a BF16 or FP16 cast, nearly always): the error and signal energies in sixteen
// FP64 lanes, and the compared and underflow counts. In AVX-512 where the CPU has it (GCC 12
// scalarizes the 64-byte vector types' compares under the AVX-512 clone, ten times slower than
// eight lanes); tensor_stats.cpp's portable pass keeps the same sixteen lanes, so that both give
// the same bits.

#include <cstdint>

namespace mantissa {

struct LaneSums {
    double err[16] = {}, signal[16] = {}; // lane l: values l, l + 16, l + 32, ... of the range
    int64_t compared = 0, underflow = 0;
};

bool cast_compare_avx512_available();

// Adds the first n / 16 * 16 values of x (xp) against their cast (qp) to `sums`: a value whose x
// or cast is not finite takes part as a zero (stats_value::compare_cast's rules); an underflow
// is a value that is not zero whose cast is. Returns how many values it took.
int64_t cast_compare_avx512(const float* xp, const float* qp, int64_t n, LaneSums& sums);

} // namespace mantissa
