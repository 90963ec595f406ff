// SPDX-License-Identifier: GPL-3.0-or-later
#include "cpu_cast_compare.h"

#include <bit>

#include <c10/util/Exception.h>

#include "x86_intrinsics.h"

namespace mantissa {

#if defined(MANTISSA_X86_INTRINSICS)

__attribute__((target("avx512f,popcnt"))) int64_t cast_compare_avx512(const float* xp, const float* qp, int64_t n,
                                                                      LaneSums& sums)
{
    const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    __m512d err_lo = _mm512_loadu_pd(sums.err), err_hi = _mm512_loadu_pd(sums.err + 8);
    __m512d signal_lo = _mm512_loadu_pd(sums.signal), signal_hi = _mm512_loadu_pd(sums.signal + 8);
    int64_t compared = 0, underflow = 0;
    const int64_t whole = n / 16 * 16;
    for (int64_t i = 0; i < whole; i += 16) {
        const __m512 v = _mm512_loadu_ps(xp + i), r = _mm512_loadu_ps(qp + i);
        const __mmask16 ok = _mm512_cmplt_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), magnitude), inf) &
                             _mm512_cmplt_epi32_mask(_mm512_and_si512(_mm512_castps_si512(r), magnitude), inf);
        const __m512 vz = _mm512_maskz_mov_ps(ok, v), rz = _mm512_maskz_mov_ps(ok, r);
        const __m512d v_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(vz));
        const __m512d v_hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(vz), 1)));
        const __m512d r_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(rz));
        const __m512d r_hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(rz), 1)));
        const __m512d e_lo = _mm512_sub_pd(v_lo, r_lo), e_hi = _mm512_sub_pd(v_hi, r_hi);
        // A product, then a sum: two roundings, as the portable pass (no FMA there).
        err_lo = _mm512_add_pd(err_lo, _mm512_mul_pd(e_lo, e_lo));
        err_hi = _mm512_add_pd(err_hi, _mm512_mul_pd(e_hi, e_hi));
        signal_lo = _mm512_add_pd(signal_lo, _mm512_mul_pd(v_lo, v_lo));
        signal_hi = _mm512_add_pd(signal_hi, _mm512_mul_pd(v_hi, v_hi));
        compared += std::popcount(static_cast<uint32_t>(ok));
        const __mmask16 lost = _mm512_mask_cmp_ps_mask(ok, v, _mm512_setzero_ps(), _CMP_NEQ_UQ) &
                               _mm512_mask_cmp_ps_mask(ok, r, _mm512_setzero_ps(), _CMP_EQ_OQ);
        underflow += std::popcount(static_cast<uint32_t>(lost));
    }
    _mm512_storeu_pd(sums.err, err_lo);
    _mm512_storeu_pd(sums.err + 8, err_hi);
    _mm512_storeu_pd(sums.signal, signal_lo);
    _mm512_storeu_pd(sums.signal + 8, signal_hi);
    sums.compared += compared;
    sums.underflow += underflow;
    return whole;
}

bool cast_compare_avx512_available()
{
    static const bool available = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("popcnt");
    return available;
}

#else

int64_t cast_compare_avx512(const float*, const float*, int64_t, LaneSums&)
{
    TORCH_CHECK(false, "cast_compare_avx512 is not built for this CPU");
}

bool cast_compare_avx512_available() { return false; }

#endif

} // namespace mantissa
