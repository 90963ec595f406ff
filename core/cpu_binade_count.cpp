// SPDX-License-Identifier: GPL-3.0-or-later
#include "cpu_binade_count.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include <c10/util/Exception.h>

#include "vector_clones.h"
#include "x86_intrinsics.h"

namespace mantissa {
namespace {

#if defined(MANTISSA_X86_INTRINSICS)
// A value's exponent byte is byte 3 of its bits doubled (the sign shifted out), and the doubled
// bits of |x| order like |x| with Inf and NaN above every finite value.
constexpr uint32_t kDoubledInf = 0xFF000000u;
constexpr int64_t kBlock = 64;      // values a block: two vectors of 32 16-bit exponents
constexpr int64_t kStripBlocks = 8; // a strip's 16 vectors make one round of the adder tree
constexpr int kWindow = 16;         // binades a 16-bit word's bits can hold
// A window top of at least 16 keeps byte 0 (zeros, subnormals) out of the window, where the
// block's zero test counts it.
constexpr uint32_t kLowestTop = kWindow;
constexpr int64_t kPrefetch = 2048; // values ahead (8 KB), as the portable count

uint32_t window_top(uint32_t amax_bits) { return std::max(amax_bits >> 23, kLowestTop); }

// One value the window did not count: binned by its byte (a zero or subnormal is counted by the
// block's vector test instead).
inline void bin_outside(uint32_t bits, BinadeCount& out)
{
    const uint32_t m = bits & 0x7FFFFFFFu;
    ++out.by_biased[m >> 23];
    out.nans += m > 0x7F800000u;
}

#define MANTISSA_AVX512_WORDS __attribute__((target("avx512f,avx512bw,avx512vbmi,popcnt")))
#define MANTISSA_AVX512_INLINE MANTISSA_AVX512_WORDS __attribute__((always_inline)) inline

// The window's counts, bit-sliced: each value in the window is a 16-bit word with one bit set,
// bit j for binade top - j (a value outside is a word of zeros). Their sum, position by
// position, is kept as Harley and Seal's carry-save adders keep a popcount: `ones` holds each
// position's count mod 2 in each word lane, `twos` the next bit of it, and so on, and every 16
// words that reach the sixteens are counted into `sixteens` position by position. About a
// third of the operations of counting each binade with a compare and an add (vpternlogd does
// an adder's sum or carry in one).
struct SlicedCounts {
    __m512i ones, twos, fours, eights;
    uint32_t sixteens[kWindow];
};

MANTISSA_AVX512_INLINE void carry_save(__m512i& carry, __m512i& sum, __m512i a, __m512i b)
{
    carry = _mm512_ternarylogic_epi32(sum, a, b, 0xE8); // majority
    sum = _mm512_ternarylogic_epi32(sum, a, b, 0x96);   // a ^ b ^ sum
}

// Each position's count in the words of v (a lane holds each position at most once).
MANTISSA_AVX512_INLINE void count_positions(__m512i v, uint32_t (&counts)[kWindow], uint32_t weight)
{
    for (int j = 0; j < kWindow; ++j) {
        const __mmask32 set = _mm512_test_epi16_mask(v, _mm512_set1_epi16(static_cast<short>(1 << j)));
        counts[j] += weight * static_cast<uint32_t>(std::popcount(static_cast<uint32_t>(set)));
    }
}

// Adds the counts to the table (bit j: binade top - j) and empties them.
MANTISSA_AVX512_INLINE void flush_window(SlicedCounts& c, uint32_t top, BinadeCount& out)
{
    count_positions(c.ones, c.sixteens, 1);
    count_positions(c.twos, c.sixteens, 2);
    count_positions(c.fours, c.sixteens, 4);
    count_positions(c.eights, c.sixteens, 8);
    for (int j = 0; j < kWindow; ++j) {
        out.by_biased[top - static_cast<uint32_t>(j)] += c.sixteens[j]; // top >= 16: a normal binade
        c.sixteens[j] = 0;
    }
    c.ones = c.twos = c.fours = c.eights = _mm512_setzero_si512();
}

// The block of 64 values at i: their two vectors of one-hot words (zeros outside the window),
// the largest doubled bits, and, one by one, what the window left out. A block past `whole`
// (the end of the range's whole blocks) is two vectors of zeros.
MANTISSA_AVX512_INLINE void count_block(const float* xp, int64_t i, int64_t whole, int64_t n, const float* qp,
                                        __m512i pick, __m512i top_words, __m512i& strip_max, __m512i& lo,
                                        __m512i& hi, BinadeCount& out)
{
    if (i >= whole) {
        lo = hi = _mm512_setzero_si512();
        return;
    }
    for (int64_t line = 0; line < kBlock; line += 16) {
        if (i + line + kPrefetch < n)
            _mm_prefetch(reinterpret_cast<const char*>(xp + i + line + kPrefetch), _MM_HINT_T0);
        if (qp) _mm_prefetch(reinterpret_cast<const char*>(qp + i + line), _MM_HINT_T0);
    }
    __m512i d[4];
    for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_loadu_si512(xp + i + 16 * k);
        d[k] = _mm512_add_epi32(v, v);
    }
    const __m512i block_max = _mm512_max_epu32(_mm512_max_epu32(d[0], d[1]), _mm512_max_epu32(d[2], d[3]));
    strip_max = _mm512_max_epu32(strip_max, block_max);
    // Word w of `lo` is value w's exponent byte (byte 3 of d[w / 16]'s lane w % 16), its high byte
    // zeroed by the mask; `hi` the same for values 32..63.
    const __mmask64 low_bytes = 0x5555555555555555ull;
    const __m512i e_lo = _mm512_maskz_permutex2var_epi8(low_bytes, d[0], pick, d[1]);
    const __m512i e_hi = _mm512_maskz_permutex2var_epi8(low_bytes, d[2], pick, d[3]);
    // 1 << (top - e): zero for a byte above the top (the difference wraps past 15) or 16 and more
    // below it, byte 0 included (top >= 16).
    const __m512i one = _mm512_set1_epi16(1);
    lo = _mm512_sllv_epi16(one, _mm512_sub_epi16(top_words, e_lo));
    hi = _mm512_sllv_epi16(one, _mm512_sub_epi16(top_words, e_hi));
    const uint64_t left_out = static_cast<uint64_t>(_mm512_testn_epi16_mask(lo, lo)) |
                              static_cast<uint64_t>(_mm512_testn_epi16_mask(hi, hi)) << 32;
    if (left_out == 0) [[likely]]
        return;
    const uint64_t byte0 = static_cast<uint64_t>(_mm512_testn_epi16_mask(e_lo, e_lo)) |
                           static_cast<uint64_t>(_mm512_testn_epi16_mask(e_hi, e_hi)) << 32;
    if (byte0 != 0) {
        int64_t zeros = 0;
        for (int k = 0; k < 4; ++k) zeros += std::popcount(static_cast<uint32_t>(_mm512_testn_epi32_mask(d[k], d[k])));
        out.zeros += zeros;
        out.subnormals += std::popcount(byte0) - zeros;
    }
    for (uint64_t m = left_out & ~byte0; m != 0; m &= m - 1) {
        uint32_t bits;
        std::memcpy(&bits, xp + i + std::countr_zero(m), sizeof bits);
        bin_outside(bits, out);
    }
}

} // namespace

MANTISSA_AVX512_WORDS void binade_count_avx512(const float* xp, int64_t n, BinadeCount& out, const float* qp)
{
    TORCH_CHECK(n <= (int64_t{1} << 14), "binade_count_avx512 takes a chunk of the scan at a time");
    // The window starts at the first values' largest binade, and moves up with the amax.
    uint32_t amax = finite_amax_bits(xp, 0, std::min<int64_t>(n, 256)), top = window_top(amax);
    SlicedCounts c{_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), {}};
    // Byte b of a word vector is byte 3 of lane (b / 2) % 16 of the first (b < 32) or second
    // vector of a pair (bit 6 of the index picks the second); odd bytes are zeroed.
    alignas(64) uint8_t pick_bytes[64];
    for (int b = 0; b < 64; ++b) pick_bytes[b] = static_cast<uint8_t>((b / 32) * 64 + ((b / 2) % 16) * 4 + 3);
    const __m512i pick = _mm512_load_si512(pick_bytes);
    const int64_t whole = n / kBlock * kBlock;
    for (int64_t s = 0; s < whole; s += kStripBlocks * kBlock) {
        const __m512i top_words = _mm512_set1_epi16(static_cast<short>(top));
        __m512i strip_max = _mm512_setzero_si512(); // doubled bits, Inf and NaN included
        // A strip's 8 blocks (16 vectors of words) through the adder tree; blocks past the end
        // of the range count as words of zeros.
        __m512i twos_a, twos_b, fours_a, fours_b, eights_a, eights_b, sixteens;
        __m512i w[4];
#define MANTISSA_BLOCK(b, lo, hi) \
    count_block(xp, s + (b) * kBlock, whole, n, qp, pick, top_words, strip_max, lo, hi, out)
        for (int half = 0; half < 2; ++half) {
            MANTISSA_BLOCK(4 * half + 0, w[0], w[1]);
            carry_save(twos_a, c.ones, w[0], w[1]);
            MANTISSA_BLOCK(4 * half + 1, w[2], w[3]);
            carry_save(twos_b, c.ones, w[2], w[3]);
            carry_save(fours_a, c.twos, twos_a, twos_b);
            MANTISSA_BLOCK(4 * half + 2, w[0], w[1]);
            carry_save(twos_a, c.ones, w[0], w[1]);
            MANTISSA_BLOCK(4 * half + 3, w[2], w[3]);
            carry_save(twos_b, c.ones, w[2], w[3]);
            carry_save(fours_b, c.twos, twos_a, twos_b);
            carry_save(half == 0 ? eights_a : eights_b, c.fours, fours_a, fours_b);
        }
#undef MANTISSA_BLOCK
        carry_save(sixteens, c.eights, eights_a, eights_b);
        count_positions(sixteens, c.sixteens, 16);
        const int64_t strip_end = std::min(s + kStripBlocks * kBlock, whole);
        uint32_t strip_amax = _mm512_reduce_max_epu32(strip_max);
        strip_amax = strip_amax >= kDoubledInf ? finite_amax_bits(xp, s, strip_end) : strip_amax >> 1;
        amax = std::max(amax, strip_amax);
        // Values above the top were left out of the window, and binned one by one; the values
        // after them go in a window from the new top.
        if (window_top(amax) != top) {
            flush_window(c, top, out);
            top = window_top(amax);
        }
    }
    flush_window(c, top, out);
    for (int64_t i = whole; i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, xp + i, sizeof bits);
        const uint32_t m = bits & 0x7FFFFFFFu;
        if (m < 0x00800000u) {
            out.zeros += m == 0u;
            out.subnormals += m != 0u;
            continue;
        }
        bin_outside(bits, out);
        if (m < 0x7F800000u) amax = std::max(amax, m);
    }
    out.amax_bits = amax;
}

bool binade_count_avx512_available()
{
    static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                  __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("popcnt");
    return available;
}

#else // not x86-64: the portable count only

} // namespace

void binade_count_avx512(const float*, int64_t, BinadeCount&, const float*)
{
    TORCH_CHECK(false, "binade_count_avx512 is not built for this CPU");
}

bool binade_count_avx512_available() { return false; }

#endif

MANTISSA_VECTOR_CLONES
uint32_t finite_amax_bits(const float* xp, int64_t begin, int64_t end)
{
    uint32_t amax = 0;
    for (int64_t i = begin; i < end; ++i) {
        uint32_t m;
        std::memcpy(&m, xp + i, sizeof m);
        m &= 0x7FFFFFFFu;
        amax = std::max(amax, m & (0u - static_cast<uint32_t>(m < 0x7F800000u)));
    }
    return amax;
}

} // namespace mantissa
