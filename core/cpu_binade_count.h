// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The statistics scan's count (tensor_stats.cpp) in AVX-512: the exponents of 64 values picked
// into two vectors of 16-bit words, each a one-hot word of its binade within a window of 16 below
// the running top, summed position by position in carry-save adders. About twice as fast as the
// portable count (16 values a step in 32-bit lanes, a compare and an add per binade group;
// bench/stats_scan, 2026-12-05). Used where the CPU has AVX-512 BW and VBMI (Ice Lake, Sapphire
// Rapids, Zen 4 and later); the portable count elsewhere. Both give the same counts to the value
// (tests/test_telemetry.cpp runs the scan's tests through both).

#include <array>
#include <cstdint>

namespace mantissa {

struct BinadeCount {
    std::array<uint32_t, 256> by_biased{}; // values by biased exponent, 1..254 and 255 (Inf, NaN); 0 unused
    int64_t zeros = 0, nans = 0;
    int64_t subnormals = 0; // only whether there are any is used: it runs the scan's subnormal pass
    uint32_t amax_bits = 0; // the largest finite |x|, as bits (0: none)
};

// The largest finite |x| of [begin, end), as bits (0: none): where a count's window starts, in
// both counts. (|x| of finite values orders like its bit pattern.)
uint32_t finite_amax_bits(const float* xp, int64_t begin, int64_t end);

// Whether binade_count_avx512 runs here: the CPU has the instructions and the build has the code
// (x86-64 with GCC or Clang).
bool binade_count_avx512_available();

// Counts n values (at most 2^14, a chunk of the scan) into `out`, which must start zeroed. `qp`:
// the cast that a comparison pass reads next over the same range (its lines are asked for as
// x's are counted), or nullptr.
void binade_count_avx512(const float* xp, int64_t n, BinadeCount& out, const float* qp);

} // namespace mantissa
