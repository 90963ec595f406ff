// SPDX-License-Identifier: GPL-3.0-or-later
#include "tensor_stats.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include <ATen/Parallel.h>

#include "cpu_binade_count.h"
#include "cpu_cast_compare.h"
#include "kernel_probe.h"
#include "vector_clones.h"

#if defined(MANTISSA_CUDA_KERNELS)
#include "cuda/tensor_stats_row.h"
#endif

namespace mantissa {
namespace {

constexpr int kBins = kMaxExponent - kMinExponent + 1;

// Everything one pass over the data accumulates; chunks are merged at the end.
struct Accumulator {
    std::array<int64_t, kBins> bins{};
    int64_t zeros = 0, infs = 0, nans = 0, underflow = 0, subnormal = 0, overflow = 0, compared = 0;
    double amax = 0.0, err_energy = 0.0, signal = 0.0;

    void merge(const Accumulator& o)
    {
        for (int i = 0; i < kBins; ++i) bins[static_cast<size_t>(i)] += o.bins[static_cast<size_t>(i)];
        zeros += o.zeros, infs += o.infs, nans += o.nans;
        underflow += o.underflow, subnormal += o.subnormal, overflow += o.overflow, compared += o.compared;
        amax = std::max(amax, o.amax);
        err_energy += o.err_energy, signal += o.signal;
    }
};

// floor(log2|v|) of a finite non-zero float, straight from its bits (exact for subnormals).
int exponent_of(float v)
{
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    const int biased = static_cast<int>((bits >> 23) & 0xFF);
    if (biased != 0) return biased - 127;
    const uint32_t mantissa = bits & 0x7FFFFF;
    return (31 - std::countl_zero(mantissa)) - 149;
}

// The cast's MSE and SNR from the compared values' sums. `lost`: a finite value's cast became
// Inf or NaN (a per-tensor or 16-bit cast past its max, unsaturated). Its error is no finite
// number and is in no sum: an SNR of the rest called a tensor that overflowed whole exact
// (+inf), and one that overflowed more the better. MSE +inf and SNR -inf say what it lost.
void set_cast_error(TensorStats& s, double err_energy, double signal, double compared, bool lost)
{
    constexpr double inf = std::numeric_limits<double>::infinity();
    if (lost) {
        s.quant_mse = inf;
        s.quant_snr_db = -inf;
        return;
    }
    if (compared == 0) {
        // Nothing finite was cast (a tensor of NaN and Inf, as after a divergence): there is no
        // error to tell, and +inf ("exact") coloured the dead tensor as the best cast of all.
        s.quant_mse = std::numeric_limits<double>::quiet_NaN();
        s.quant_snr_db = std::numeric_limits<double>::quiet_NaN();
        return;
    }
    s.quant_mse = compared > 0 ? err_energy / compared : 0.0;
    s.quant_snr_db = err_energy > 0 ? 10.0 * std::log10(signal / err_energy) : inf;
}

} // namespace

// The overflow threshold is half a step past max, max's step being 2^(floor(log2 max) -
// mantissa bits); max / step odd means RNE takes the tie upward, past max.
stats_value::CastComparison cast_comparison(NumberFormat format, bool scaled_domain, double scale)
{
    const FormatInfo& info = format_info(format);
    const double step = std::ldexp(1.0, std::ilogb(info.max_finite) - info.mantissa_bits);
    const auto steps = static_cast<int64_t>(info.max_finite / step);
    return {scaled_domain, scale, info.min_normal, info.max_finite + 0.5 * step, steps % 2 == 1, info.min_subnormal};
}

TensorStats compute_tensor_stats_reference(const torch::Tensor& x_in, NumberFormat format, float scale,
                                           const torch::Tensor& dequantized)
{
    torch::NoGradGuard no_grad;
    TensorStats s;
    s.format = format_name(format);
    s.scale = scale;
    const auto x = x_in.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    s.count = x.numel();
    if (s.count == 0) return s;
    const bool compare = stats_compared(dequantized);
    const auto q = compare ? dequantized.detach().to(torch::kCPU, torch::kFloat32).contiguous() : torch::Tensor();
    const float* xp = x.data_ptr<float>();
    const float* qp = compare ? q.data_ptr<float>() : nullptr;
    const bool scaled_domain = scale > 0.0f; // per-row/block FP8 scales differ per element
    const stats_value::CastComparison comparison = cast_comparison(format, scaled_domain, scale);

    Accumulator total;
    std::mutex merge_mutex;
    at::parallel_for(0, s.count, 1 << 15, [&](int64_t begin, int64_t end) {
        Accumulator a;
        for (int64_t i = begin; i < end; ++i) {
            const float v = xp[i];
            if (std::isnan(v)) { ++a.nans; continue; }
            if (std::isinf(v)) { ++a.infs; continue; }
            const double mag = std::fabs(static_cast<double>(v));
            if (v == 0.0f) ++a.zeros;
            else {
                ++a.bins[static_cast<size_t>(exponent_of(v) - kMinExponent)];
                a.amax = std::max(a.amax, mag);
            }
            if (!qp) continue;
            const float r = qp[i];
            if (!std::isfinite(r)) { // see stats_value::compare_cast
                if (scaled_domain) ++a.overflow;
                continue;
            }
            if (v != 0.0f && r == 0.0f) ++a.underflow;
            if (scaled_domain) {
                if (stats_value::scaled_code_is_subnormal(std::fabs(static_cast<double>(r) * scale), comparison))
                    ++a.subnormal;
                if (stats_value::scaled_value_overflows(v, comparison)) ++a.overflow;
            }
            const double e = static_cast<double>(v) - static_cast<double>(r);
            a.err_energy += e * e; // FP64: squares of values near FP32's max overflow FP32
            a.signal += mag * mag;
            ++a.compared;
        }
        std::lock_guard lock(merge_mutex);
        total.merge(a);
    });

    s.zeros = total.zeros;
    s.infs = total.infs;
    s.nans = total.nans;
    s.amax = total.amax;
    const auto first = std::find_if(total.bins.begin(), total.bins.end(), [](int64_t c) { return c != 0; });
    if (first != total.bins.end()) {
        const auto last = std::find_if(total.bins.rbegin(), total.bins.rend(), [](int64_t c) { return c != 0; }).base();
        s.first_exponent = static_cast<int>(first - total.bins.begin()) + kMinExponent;
        s.exponent_counts.assign(first, last);
    }
    if (!compare) {
        s.quant_snr_db = std::numeric_limits<double>::infinity();
        return s;
    }
    const double n = static_cast<double>(s.count);
    s.underflow = static_cast<double>(total.underflow) / n;
    s.subnormal = scaled_domain ? static_cast<double>(total.subnormal) / n : -1.0;
    s.overflow = scaled_domain ? static_cast<double>(total.overflow) / n : -1.0;
    const auto lost = scaled_domain ? s.count - total.infs - total.nans - total.compared : 0;
    set_cast_error(s, total.err_energy, total.signal, static_cast<double>(total.compared), lost > 0);
    return s;
}

namespace {

namespace row = stats_row;

// The fused pass's partial sums: the histogram straight from the bits (no FP64 work unless
// the tensor was cast), merged across chunks at the end.
struct RowAccumulator {
    std::array<int64_t, row::kNonFinite + 1> bins{}; // zeros, one per binade, non-finite
    int64_t nans = 0, underflow = 0, subnormal = 0, overflow = 0, compared = 0;
    uint32_t amax_bits = 0; // |x| of finite values orders like its bit pattern
    double err_energy = 0.0, signal = 0.0;

    void merge(const RowAccumulator& o)
    {
        for (size_t i = 0; i < bins.size(); ++i) bins[i] += o.bins[i];
        nans += o.nans, underflow += o.underflow, subnormal += o.subnormal, overflow += o.overflow;
        compared += o.compared;
        amax_bits = std::max(amax_bits, o.amax_bits);
        err_energy += o.err_energy, signal += o.signal;
    }
};

// One source prepared for the fused pass: contiguous FP32 on the host.
struct ScanInput {
    torch::Tensor x, q; // q undefined: not compared
    const float* xp = nullptr;
    const float* qp = nullptr;
    stats_value::CastComparison comparison;
};

// A strip's binades within kWindow of a running top, the largest finite binade seen so far in
// the range, are counted in 8-bit lanes of four 32-bit sums: the binade top - j adds
// 1 << 8 (j % 4) to sum j / 4. A strip holds at most 255 values, so no lane carries into the
// next, and the compiler keeps the sums in vector lanes (the scalar increments of a table took
// about 0.4 ns a value, the most of the scan's time, 2026-12-05). Values outside the window
// (far below the top, above it, Inf and NaN) are found by difference (outside_of), then binned
// one by one, NaNs counted among them. The same pass takes the strip's amax (finite values),
// zeros and subnormals from the bits of |x|: integer lanes only. Counting the values outside,
// and the NaNs, in the pass took a tenth more time (bench/stats_scan, 2026-12-05).
constexpr uint32_t kWindow = 16;
constexpr int64_t kStrip = 240; // <= 255, and a multiple of 16 lanes

// The scan goes by chunks of a fixed size, each summed on its own and merged in order, so that
// a row does not depend on the thread count. Small enough that an activation of
// shakespeare-char (96 K values) splits evenly over two threads: in chunks of 32 K one thread
// scanned two and the other one. Chunks of 8 K were slower again: each has its own histogram.
constexpr int64_t kChunk = 1 << 14;

struct StripCount {
    uint32_t sums[4] = {0, 0, 0, 0};
    uint32_t amax_bits = 0, zeros = 0, subnormals = 0;
};

MANTISSA_VECTOR_CLONES
StripCount count_strip(const float* xp, int64_t begin, int64_t end, uint32_t top)
{
    uint32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, amax = 0, zeros = 0, subnormals = 0;
    for (int64_t i = begin; i < end; ++i) {
        uint32_t m;
        std::memcpy(&m, xp + i, sizeof m);
        m &= 0x7FFFFFFFu;
        // Masks, not selects: GCC 12 leaves a loop with `?:` here scalar (a max over a select too).
        const uint32_t finite = m & (0u - static_cast<uint32_t>(m < 0x7F800000u));
        amax = std::max(amax, finite);
        zeros += m == 0u;
        subnormals += m - 1u < 0x007FFFFFu; // 1 <= m < 2^23
        const uint32_t byte = m >> 23, below = top - byte; // wraps above the top
        const uint32_t one = 1u << ((below & 3u) * 8u), sum = below >> 2;
        s0 += one & (0u - static_cast<uint32_t>(sum == 0u));
        s1 += one & (0u - static_cast<uint32_t>(sum == 1u));
        s2 += one & (0u - static_cast<uint32_t>(sum == 2u));
        s3 += one & (0u - static_cast<uint32_t>(sum == 3u));
    }
    return {{s0, s1, s2, s3}, amax, zeros, subnormals};
}

// How many values of a strip of n the window left out, by difference: those it counted, and
// byte 0 (zeros and subnormals), which is in the window only when the top is below kWindow.
// (Counting them in the pass took four more vector operations a value.)
uint32_t outside_of(const StripCount& c, int64_t n, uint32_t top)
{
    uint32_t counted = 0;
    for (const uint32_t sum : c.sums)
        counted += (sum & 0xFFu) + ((sum >> 8) & 0xFFu) + ((sum >> 16) & 0xFFu) + (sum >> 24);
    const uint32_t byte0 = top < kWindow ? 0u : c.zeros + c.subnormals;
    return static_cast<uint32_t>(n) - counted - byte0;
}

// For a strip that has values outside the window: outside_at[i - begin] is 1 where value i is
// one, 0 elsewhere, so that they are found without a branch per value. A GELU's output (its
// negative tail runs a hundred binades below its top) has some in nearly every strip, and a
// branch per value took about 1 ns a value there, four times the vector count
// (bench/stats_scan, 2026-12-05). A pass of its own: storing the flags in the count's loop
// slowed the count of every strip by a third.
MANTISSA_VECTOR_CLONES
void mark_outside(const float* xp, int64_t begin, int64_t end, uint32_t top, uint8_t* outside_at)
{
    for (int64_t i = begin; i < end; ++i) {
        uint32_t bits;
        std::memcpy(&bits, xp + i, sizeof bits);
        const uint32_t byte = (bits >> 23) & 0xFFu;
        outside_at[i - begin] = static_cast<uint8_t>(static_cast<uint32_t>(top - byte >= kWindow) &
                                                     static_cast<uint32_t>(byte != 0u));
    }
}

// The portable count of [begin, end) (at most a chunk): the histogram by biased exponent, zeros,
// subnormals, NaNs and the finite amax, in one vector pass of 16 lanes.
//
// The count asks for the lines kPrefetch values ahead as it goes, for a tensor that is no
// longer in cache (the weights' gradients, read after the backward; anything larger than the
// caches): when every row was read after the backward, the vector pass alone waited on memory
// for three quarters of its samples (perf, 2026-12-05). qp: the cast, when a comparison pass
// over the same range follows (its lines are asked for as x's are counted), or nullptr.
constexpr int64_t kPrefetch = 2048; // 8 KB ahead
BinadeCount count_portable(const float* xp, int64_t begin, int64_t end, const float* qp)
{
    static_assert(kStrip % 8 == 0, "the flags are read eight at a time");
    constexpr int64_t kLine = 64 / sizeof(float);
    BinadeCount out;
    auto& h = out.by_biased; // byte 0 (zeros, subnormals) left out
    std::array<uint8_t, kStrip> outside_at;
    uint32_t amax = finite_amax_bits(xp, begin, std::min(begin + kStrip, end)), top = amax >> 23;
    // The window's counts, two 16-bit counters a word: word 2i holds bytes 0 and 2 of sum i
    // (binades top - 4i and top - 4i - 2), word 2i + 1 bytes 1 and 3, added to the table when
    // the top moves and at the end. Unpacking every strip's sums took about 7% of the scan
    // (bench/stats_scan, 2026-12-05).
    static_assert((kChunk + kStrip - 1) / kStrip * 255 <= 0xFFFF, "a chunk's counts fit 16 bits");
    TORCH_CHECK(end - begin <= kChunk, "the statistics scan takes a chunk at a time");
    uint32_t window[8] = {};
    const auto flush_window = [&] {
        for (uint32_t j = 0; j < kWindow && j < top; ++j) { // top - j >= 1
            const uint32_t word = window[2 * (j / 4) + (j % 2)];
            h[top - j] += (word >> (16u * ((j % 4) / 2))) & 0xFFFFu;
        }
        std::fill(std::begin(window), std::end(window), 0u);
    };
    for (int64_t s = begin; s < end; s += kStrip) {
        const int64_t e = std::min(s + kStrip, end);
        for (int64_t i = s; i < e; i += kLine) { // a strip's worth of lines at a time
            if (i + kPrefetch < end) __builtin_prefetch(xp + i + kPrefetch);
            if (qp) __builtin_prefetch(qp + i); // for the comparison pass that follows the range
        }
        const StripCount c = count_strip(xp, s, e, top);
        for (int i = 0; i < 4; ++i) {
            window[2 * i] += c.sums[i] & 0x00FF00FFu;
            window[2 * i + 1] += (c.sums[i] >> 8) & 0x00FF00FFu;
        }
        out.zeros += c.zeros, out.subnormals += c.subnormals;
        if (outside_of(c, e - s, top) != 0) {
            mark_outside(xp, s, e, top, outside_at.data());
            // Eight flags a word (each 0 or 1); a strip's last word may hold a previous strip's.
            const int64_t n = e - s;
            for (int64_t w = 0; w < n; w += 8) {
                uint64_t word;
                std::memcpy(&word, outside_at.data() + w, sizeof word);
                if (n - w < 8) word &= (uint64_t(1) << (8 * (n - w))) - 1;
                for (; word != 0; word &= word - 1) {
                    uint32_t bits;
                    std::memcpy(&bits, xp + s + w + std::countr_zero(word) / 8, sizeof bits);
                    ++h[(bits >> 23) & 0xFFu];
                    out.nans += (bits & 0x7FFFFFFFu) > 0x7F800000u; // above every finite top: always outside
                }
            }
        }
        amax = std::max(amax, c.amax_bits);
        // Never lower: a window that follows each strip's own top left more values outside.
        if (amax >> 23 != top) flush_window();
        top = amax >> 23;
    }
    flush_window();
    out.amax_bits = amax;
    return out;
}

// The histogram, zeros, non-finite and amax of [begin, end) with no cast to compare: the AVX-512
// count where the CPU has it and the caller asks for it (core/cpu_binade_count.h), else the
// portable one. Subnormals share byte 0 with zeros and are binned by a second pass that runs
// only when there are any.
void scan_uncompared(const float* xp, int64_t begin, int64_t end, bool avx512, RowAccumulator& a,
                     const float* qp = nullptr)
{
    static_assert(row::kNonFinite == 255 + 23 && row::kFirstBin + (-126 - kMinExponent) == 1 + 23,
                  "a normal value's slot is its biased exponent + 23");
    BinadeCount c;
    if (avx512) binade_count_avx512(xp + begin, end - begin, c, qp ? qp + begin : nullptr);
    else c = count_portable(xp, begin, end, qp);
    for (uint32_t b = 1; b < 256; ++b) // normal binades, and 255 (Inf, NaN) on kNonFinite
        a.bins[b + 23] += c.by_biased[b];
    a.bins[row::kZeros] += c.zeros;
    if (c.subnormals > 0) {
        for (int64_t j = begin; j < end; ++j) {
            uint32_t m;
            std::memcpy(&m, xp + j, sizeof m);
            m &= 0x7FFFFFFFu;
            if (m - 1u < 0x007FFFFFu) ++a.bins[static_cast<size_t>(stats_value::slot_of(m))];
        }
    }
    a.nans += c.nans;
    a.amax_bits = std::max(a.amax_bits, c.amax_bits);
}

// What comparing [begin, end) of x with its cast adds to a row: stats_value::compare_cast's rules
// for the finite values of x, sixteen values a step in GCC's vector types (a value whose x or
// cast is not finite takes part as a zero, with no branch), two halves of eight. Each of the
// sixteen lanes keeps its own FP64 sums, added in lane order at the end: the lanes of
// cast_compare_avx512 (core/cpu_cast_compare.h), which takes the unscaled comparisons where the
// CPU has AVX-512, with the same bits. The scalar loop over compare_cast took about 4 ns a value
// here (2026-12-04), about eight times the histogram's pass: its FP64 sums were one chain of
// dependent adds, and GCC's vectorizer leaves it scalar (selects, mixed widths). The last
// values of the range, fewer than sixteen, go through compare_cast itself; the tests hold the
// two to the reference scan (test_telemetry::deviceStatsMatchReference).
struct CompareTally {
    int64_t underflow = 0, subnormal = 0, overflow = 0, compared = 0;
    double err_energy = 0.0, signal = 0.0;
};

using F8 = float __attribute__((vector_size(32)));
using I8 = int32_t __attribute__((vector_size(32)));
using U8 = uint32_t __attribute__((vector_size(32)));
using D4 = double __attribute__((vector_size(32)));
using L4 = int64_t __attribute__((vector_size(32)));

// The halves of eight lanes, widened (FP32 to FP64 exactly; a -1/0 mask to 64 bits). Macros, not
// functions: a function returning a 32-byte vector changes the ABI under AVX, which the clones
// below differ in.
#define MANTISSA_LOW_HALF(v, T) __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3), T)
#define MANTISSA_HIGH_HALF(v, T) __builtin_convertvector(__builtin_shufflevector(v, v, 4, 5, 6, 7), T)

template <bool Scaled>
MANTISSA_VECTOR_CLONES CompareTally compare_pass(const float* xp, const float* qp, int64_t begin, int64_t end,
                                                 const stats_value::CastComparison c)
{
    constexpr uint32_t kSignOff = 0x7FFFFFFFu, kInfBits = 0x7F800000u;
    const U8 sign_off = {kSignOff, kSignOff, kSignOff, kSignOff, kSignOff, kSignOff, kSignOff, kSignOff};
    const L4 at_tie = c.overflow_at_tie ? L4{-1, -1, -1, -1} : L4{};
    const double subnormal_below = c.min_normal - 0.5 * c.min_subnormal; // scaled_code_is_subnormal's bound
    D4 err_lo[2] = {}, err_hi[2] = {}, signal_lo[2] = {}, signal_hi[2] = {}; // by half of the sixteen
    I8 compared{}, underflow{}, cast_overflow{}; // a lane counts at most a chunk's values / 8 (both halves)
    L4 subnormal_lo{}, subnormal_hi{}, overflow_lo{}, overflow_hi{};
    int64_t i = begin;
    for (; i + 16 <= end; i += 16) {
        for (int half = 0; half < 2; ++half) {
            F8 v, r;
            std::memcpy(&v, xp + i + 8 * half, sizeof v);
            std::memcpy(&r, qp + i + 8 * half, sizeof r);
            const I8 x_finite = (__builtin_bit_cast(U8, v) & sign_off) < kInfBits;
            const I8 r_finite = (__builtin_bit_cast(U8, r) & sign_off) < kInfBits;
            const I8 ok = x_finite & r_finite; // -1 where compared
            const F8 vz = __builtin_bit_cast(F8, __builtin_bit_cast(I8, v) & ok);
            const F8 rz = __builtin_bit_cast(F8, __builtin_bit_cast(I8, r) & ok);
            const D4 v_lo = MANTISSA_LOW_HALF(vz, D4), v_hi = MANTISSA_HIGH_HALF(vz, D4);
            const D4 r_lo = MANTISSA_LOW_HALF(rz, D4), r_hi = MANTISSA_HIGH_HALF(rz, D4);
            const D4 e_lo = v_lo - r_lo, e_hi = v_hi - r_hi;
            err_lo[half] += e_lo * e_lo;
            err_hi[half] += e_hi * e_hi;
            signal_lo[half] += v_lo * v_lo;
            signal_hi[half] += v_hi * v_hi;
            compared -= ok;
            underflow -= ok & (v != 0.0f) & (r == 0.0f);
            if constexpr (Scaled) {
                cast_overflow -= x_finite & ~r_finite; // a finite value whose cast is Inf or NaN
                const L4 ok_lo = MANTISSA_LOW_HALF(ok, L4), ok_hi = MANTISSA_HIGH_HALF(ok, L4);
                const L4 no_sign = {0x7FFFFFFFFFFFFFFFll, 0x7FFFFFFFFFFFFFFFll, 0x7FFFFFFFFFFFFFFFll,
                                    0x7FFFFFFFFFFFFFFFll};
                const D4 code_lo = __builtin_bit_cast(D4, __builtin_bit_cast(L4, r_lo * c.scale) & no_sign);
                const D4 code_hi = __builtin_bit_cast(D4, __builtin_bit_cast(L4, r_hi * c.scale) & no_sign);
                subnormal_lo -= ok_lo & (code_lo != 0.0) & (code_lo < subnormal_below);
                subnormal_hi -= ok_hi & (code_hi != 0.0) & (code_hi < subnormal_below);
                // scaled_value_overflows: |v| times the scale in FP32, as the cast, then in FP64.
                const F8 scaled =
                    __builtin_bit_cast(F8, __builtin_bit_cast(U8, vz) & sign_off) * static_cast<float>(c.scale);
                const D4 s_lo = MANTISSA_LOW_HALF(scaled, D4), s_hi = MANTISSA_HIGH_HALF(scaled, D4);
                overflow_lo -= ok_lo & ((s_lo > c.overflow_from) | ((s_lo == c.overflow_from) & at_tie));
                overflow_hi -= ok_hi & ((s_hi > c.overflow_from) | ((s_hi == c.overflow_from) & at_tie));
            }
        }
    }
    CompareTally t;
    for (int lane = 0; lane < 16; ++lane) { // lane l: values l, l + 16, ... of the range
        const int half = lane / 8, k = lane % 4;
        const bool low = lane % 8 < 4;
        t.err_energy += low ? err_lo[half][k] : err_hi[half][k];
        t.signal += low ? signal_lo[half][k] : signal_hi[half][k];
    }
    for (int lane = 0; lane < 8; ++lane) {
        t.compared += compared[lane], t.underflow += underflow[lane], t.overflow += cast_overflow[lane];
        const int k = lane % 4;
        t.subnormal += lane < 4 ? subnormal_lo[k] : subnormal_hi[k];
        t.overflow += lane < 4 ? overflow_lo[k] : overflow_hi[k];
    }
    for (; i < end; ++i)
        if (stats_value::magnitude_bits(xp[i]) < kInfBits) stats_value::compare_cast(xp[i], qp[i], c, t);
    return t;
}

// compare_pass<false> in AVX-512: the same lanes, the same bits.
CompareTally compare_unscaled_avx512(const float* xp, const float* qp, int64_t begin, int64_t end,
                                     const stats_value::CastComparison& c)
{
    LaneSums sums;
    const int64_t done = cast_compare_avx512(xp + begin, qp + begin, end - begin, sums);
    CompareTally t;
    t.compared = sums.compared;
    t.underflow = sums.underflow;
    for (int lane = 0; lane < 16; ++lane) {
        t.err_energy += sums.err[lane];
        t.signal += sums.signal[lane];
    }
    for (int64_t i = begin + done; i < end; ++i)
        if (stats_value::magnitude_bits(xp[i]) < 0x7F800000u) stats_value::compare_cast(xp[i], qp[i], c, t);
    return t;
}
#undef MANTISSA_LOW_HALF
#undef MANTISSA_HIGH_HALF

// The largest and the smallest non-zero |cast| of a range, as bits.
struct CastRange {
    uint32_t largest = 0, smallest_nonzero_less_one = ~0u; // ~0u: no non-zero cast
};

MANTISSA_VECTOR_CLONES
CastRange cast_range(const float* qp, int64_t begin, int64_t end)
{
    uint32_t largest = 0, low = ~0u;
    for (int64_t i = begin; i < end; ++i) {
        uint32_t r;
        std::memcpy(&r, qp + i, sizeof r);
        r &= 0x7FFFFFFFu;
        largest = std::max(largest, r);
        low = std::min(low, r - 1u); // a zero wraps to the largest
    }
    return {largest, low};
}

// Whether no value of a range can take a scaled verdict (a subnormal code, an overflow): every
// cast finite, the smallest non-zero one's code normal, and the largest finite |x| (`x_max`,
// as bits: the histogram pass's amax) short of the overflow bound. Both verdicts are monotone
// in the magnitude (the code is |r| times the scale in FP64, the overflow test fl(|v| * scale)
// in FP32), so the range's extremes decide for all of its values. A BF16 or FP16 run's casts
// (scale 1) nearly always pass: the comparison then skips the verdicts' FP64 products and
// compares, which took about 9 ms off a BF16 telemetry step of shakespeare-char
// (docs/BENCHMARKS.md, 2026-12-05).
bool no_scaled_verdicts(uint32_t x_max, const float* qp, int64_t begin, int64_t end,
                        const stats_value::CastComparison& c)
{
    const CastRange r = cast_range(qp, begin, end);
    if (r.largest >= 0x7F800000u) return false; // an Inf or NaN cast: an overflow, or a poisoned block
    if (r.smallest_nonzero_less_one != ~0u) {
        const double smallest = std::bit_cast<float>(r.smallest_nonzero_less_one + 1u);
        if (stats_value::scaled_code_is_subnormal(smallest * c.scale, c)) return false;
    }
    return !stats_value::scaled_value_overflows(std::bit_cast<float>(x_max), c);
}

// x's histogram, zeros, NaNs and amax as for a row without a cast, then its comparison.
void scan(const ScanInput& in, int64_t begin, int64_t end, bool avx512, RowAccumulator& a)
{
    scan_uncompared(in.xp, begin, end, avx512, a, in.qp);
    if (!in.qp) return;
    // a.amax_bits now holds at least the range's largest finite |x| (more only if `a` held an
    // earlier range's, which can only send the range to the verdicts' pass).
    const bool verdicts =
        in.comparison.scaled_domain && !no_scaled_verdicts(a.amax_bits, in.qp, begin, end, in.comparison);
    const CompareTally t = verdicts ? compare_pass<true>(in.xp, in.qp, begin, end, in.comparison)
                           : avx512  ? compare_unscaled_avx512(in.xp, in.qp, begin, end, in.comparison)
                                     : compare_pass<false>(in.xp, in.qp, begin, end, in.comparison);
    a.underflow += t.underflow, a.subnormal += t.subnormal, a.overflow += t.overflow, a.compared += t.compared;
    a.err_energy += t.err_energy, a.signal += t.signal;
}

torch::Tensor row_of(const RowAccumulator& total)
{
    auto out = torch::zeros({row::kSize}, torch::kFloat64);
    double* o = out.data_ptr<double>();
    for (size_t i = 0; i < total.bins.size(); ++i) o[i] = static_cast<double>(total.bins[i]);
    o[row::kNans] = static_cast<double>(total.nans);
    o[row::kUnderflow] = static_cast<double>(total.underflow);
    o[row::kSubnormal] = static_cast<double>(total.subnormal);
    o[row::kOverflow] = static_cast<double>(total.overflow);
    o[row::kCompared] = static_cast<double>(total.compared);
    o[row::kAmax] = static_cast<double>(std::bit_cast<float>(total.amax_bits));
    o[row::kErrorEnergy] = total.err_energy;
    o[row::kSignalEnergy] = total.signal;
    return out;
}

torch::Tensor fused_cpu_row(const torch::Tensor& x, NumberFormat format, float scale, const torch::Tensor& dequantized,
                            StatsKernel kernel = StatsKernel::FusedCpu)
{
    return tensor_stats_rows_cpu({{x, format, scale, dequantized}}, kernel).front();
}

// The same row from tensor ops on x's device: no host sync, nothing but x and `dequantized` read.
// `scale`: () FP64 on x's device, or undefined where the format has no per-tensor scale.
torch::Tensor tensor_ops_row(const torch::Tensor& x_in, NumberFormat format, const torch::Tensor& scale,
                             const torch::Tensor& dequantized)
{
    const auto x = x_in.detach().to(torch::kFloat32).contiguous().view(-1); // (n)
    const auto f64 = x.options().dtype(torch::kFloat64);
    if (x.numel() == 0) return torch::zeros({row::kSize}, f64);
    const auto mag_bits = x.view(torch::kInt32).bitwise_and(0x7FFFFFFF); // (n) bits of |x|
    const auto biased = mag_bits.bitwise_right_shift(23);                // (n) 0..255
    // Below 2^23 an integer converts to FP32 exactly, and that float's exponent is
    // floor(log2) of it: the binade of a subnormal, whose bits are its mantissa.
    const auto sub_biased = mag_bits.to(torch::kFloat32).view(torch::kInt32).bitwise_right_shift(23);
    const auto bin = torch::where(biased == 0, (sub_biased - 126).clamp_min(0), biased + 23).to(torch::kLong);
    // A fixed-size scatter, not bincount: CUDA's bincount reads its max back to size the output.
    // Not scatter_add_: on CUDA under deterministic algorithms that becomes index_put_
    // (accumulate), whose range check reads the indices' max and min back, two host syncs per
    // row. The bins are in [0, kNonFinite] by construction, so the check is skipped; integer
    // counts are exact in any order. (On the CPU only the tests run this path, and hold it to
    // the fused scan.)
    auto counts = torch::zeros({row::kNonFinite + 1}, x.options().dtype(torch::kLong));
    c10::List<std::optional<at::Tensor>> index;
    index.push_back(bin);
    at::_index_put_impl_(counts, index, torch::ones_like(bin), /*accumulate=*/true, /*unsafe=*/true);
    const auto finite = biased != 255;
    const auto amax = torch::where(finite, mag_bits, 0).amax().view(torch::kFloat32).to(torch::kFloat64);
    const auto nans = (mag_bits > 0x7F800000).sum();

    const auto zero = torch::zeros({}, f64);
    torch::Tensor underflow = zero, subnormal = zero, overflow = zero, compared = zero, err = zero, signal = zero;
    if (stats_compared(dequantized)) {
        const auto q = dequantized.detach().to(x.device(), torch::kFloat32).contiguous().view(-1); // (n)
        const auto q_finite = torch::isfinite(q);
        const auto kept = finite & q_finite; // the values the reference compares
        underflow = (kept & (x != 0) & (q == 0)).sum();
        const auto xd = x.to(torch::kFloat64), qd = q.to(torch::kFloat64);
        if (scale.defined()) {
            // The rules of stats_value::compare_cast, scaled_code_is_subnormal and
            // scaled_value_overflows. The threshold is exact in FP32 for every format.
            const FormatInfo& info = format_info(format);
            const auto c = cast_comparison(format, true, 1.0);
            const auto& s = scale;
            const auto rv = (qd * s).abs();
            subnormal = (kept & (rv != 0) & (rv < info.min_normal - 0.5 * info.min_subnormal)).sum();
            const auto scaled = x.abs() * s.to(torch::kFloat32);
            const auto beyond = c.overflow_at_tie ? scaled >= c.overflow_from : scaled > c.overflow_from;
            overflow = (finite & q_finite.logical_not()).sum() + (kept & beyond).sum();
        }
        compared = kept.sum();
        err = torch::where(kept, xd - qd, 0.0).square().sum();
        signal = torch::where(kept, xd, 0.0).square().sum();
    }
    const auto d = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };
    return torch::cat({counts.to(torch::kFloat64),
                       torch::stack({d(nans), d(underflow), d(subnormal), d(overflow), d(compared), amax, d(err),
                                     d(signal)})});
}

} // namespace

std::vector<torch::Tensor> tensor_stats_rows_cpu(const std::vector<StatsSource>& sources, StatsKernel kernel)
{
    TORCH_CHECK(kernel == StatsKernel::FusedCpu || kernel == StatsKernel::FusedCpuPortable,
                "tensor_stats_rows_cpu: a fused CPU kernel");
    // Both AVX-512 passes or neither (the count needs BW and VBMI, the comparison F alone); the
    // rows are the same bits either way.
    const bool avx512 =
        kernel == StatsKernel::FusedCpu && binade_count_avx512_available() && cast_compare_avx512_available();
    torch::NoGradGuard no_grad;
    std::vector<ScanInput> inputs(sources.size());
    struct Chunk {
        size_t input;
        int64_t begin, end;
    };
    // Chunks of kChunk values: the row must not depend on the thread count.
    std::vector<Chunk> chunks;
    for (size_t i = 0; i < sources.size(); ++i) {
        const auto& s = sources[i];
        auto& in = inputs[i];
        in.x = s.x.detach().to(torch::kCPU, torch::kFloat32).contiguous();
        if (stats_compared(s.dequantized))
            in.q = s.dequantized.detach().to(torch::kCPU, torch::kFloat32).contiguous();
        in.xp = in.x.data_ptr<float>();
        in.qp = in.q.defined() ? in.q.data_ptr<float>() : nullptr;
        // Per-row/block FP8 scales differ per element: no scaled domain to compare in.
        in.comparison = cast_comparison(s.format, s.scale > 0.0f, s.scale);
        for (int64_t b = 0; b < in.x.numel(); b += kChunk) chunks.push_back({i, b, std::min(b + kChunk, in.x.numel())});
    }
    // One parallel region for all the tensors given: a step's weight gradients come together,
    // where a region each would cost a thread barrier each. A tensor recorded during the step
    // comes alone, while it is still in cache (LayerGemm::record_cast).
    std::vector<RowAccumulator> partial(chunks.size());
    at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t c = begin; c < end; ++c) {
            const auto& ch = chunks[static_cast<size_t>(c)];
            scan(inputs[ch.input], ch.begin, ch.end, avx512, partial[static_cast<size_t>(c)]);
        }
    });
    std::vector<RowAccumulator> totals(sources.size());
    for (size_t c = 0; c < chunks.size(); ++c) totals[chunks[c].input].merge(partial[c]); // fixed order
    std::vector<torch::Tensor> rows;
    for (const auto& t : totals) rows.push_back(row_of(t));
    return rows;
}

namespace {

// Mantissa's CUDA kernel for the row; `device_scale` (a () tensor) replaces `scale` when defined.
// `dequantized` may be FP8 codes, whose values are code * codes_scale where that is defined.
torch::Tensor fused_cuda_row(const torch::Tensor& x, NumberFormat format, float scale, const torch::Tensor& device_scale,
                             const torch::Tensor& dequantized, const torch::Tensor& codes_scale = {})
{
#if defined(MANTISSA_CUDA_KERNELS)
    const bool compared = stats_compared(dequantized);
    const auto comparison = cast_comparison(format, device_scale.defined() || scale > 0.0f, scale);
    return cuda_kernels::tensor_stats_row(x, compared ? dequantized : torch::Tensor(), comparison, device_scale,
                                          compared ? codes_scale : torch::Tensor());
#else
    (void)x, (void)format, (void)scale, (void)device_scale, (void)dequantized, (void)codes_scale;
    TORCH_CHECK(false, "the fused CUDA statistics kernel is not built (MANTISSA_CUDA_KERNELS)");
#endif
}

#if defined(MANTISSA_CUDA_KERNELS)
// Crafted values for the probe: every edge the statistics name (zeros of both signs, the
// smallest subnormal, subnormals of every binade, each format's largest finite values and
// just past them, FP32's max, infinities, NaN), then a long run spanning 40 binades, so
// that every block of the kernel's grid and its grid-stride loop take part.
torch::Tensor probe_values()
{
    std::vector<float> v = {0.0f, -0.0f, std::ldexp(1.0f, -149), -std::ldexp(3.0f, -149), std::ldexp(1.0f, -127),
                            std::ldexp(1.0f, -126), 448.0f, 464.0f, 480.0f, 57344.0f, 61440.0f, 65504.0f, 65536.0f,
                            3.3895314e38f, std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
    for (int e = -149; e < -126; ++e) v.push_back(std::ldexp(1.5f, e));
    const auto head = torch::tensor(v);
    const auto i = torch::arange(300000, torch::kFloat32);
    const auto run = torch::sin(i * 0.37f) * torch::exp2(torch::remainder(i, 40.0f) - 20.0f);
    return torch::cat({head, run});
}

bool same_row(const torch::Tensor& a, const torch::Tensor& b)
{
    const auto x = a.to(torch::kCPU).contiguous(), y = b.to(torch::kCPU).contiguous();
    const double* p = x.data_ptr<double>();
    const double* q = y.data_ptr<double>();
    for (int64_t s = 0; s < stats_row::kSize; ++s) {
        const bool energy = s == stats_row::kErrorEnergy || s == stats_row::kSignalEnergy;
        const bool same = p[s] == q[s] || (energy && std::abs(p[s] - q[s]) <= 1e-12 * std::abs(q[s]));
        if (!same) return false;
    }
    return true;
}

bool fused_cuda_agrees_with_tensor_ops()
{
    const auto opts = torch::TensorOptions().device(torch::kCUDA);
    const auto x = probe_values().to(opts.device());
    const auto scale = torch::full({}, 64.0, opts.dtype(torch::kFloat64));
    const auto e5m2 = (x * 64.0f).to(torch::kFloat8_e5m2).to(torch::kFloat32) / 64.0f;
    // The native executor's records: 16-bit activations beside their FP8 cast (dequantized), and
    // beside themselves (an operand already in its format: the kernel reads it once).
    const auto x_bf16 = x.to(torch::kBFloat16), x_half = x.to(torch::kHalf);
    const auto e4m3_of_bf16 = (x_bf16.to(torch::kFloat32) * 64.0f).to(torch::kFloat8_e4m3fn).to(torch::kFloat32) / 64.0f;
    // A block recipe's FP32 scales beside their power-of-two rounding (an FP32 comparison).
    const auto pow2 = torch::where(torch::isfinite(x) & (x != 0),
                                   torch::sign(x) * torch::exp2(torch::floor(torch::log2(x.abs()))), x);
    struct Case {
        torch::Tensor x;
        NumberFormat format;
        float scale;
        torch::Tensor device_scale, q;
    };
    for (const Case& c : {Case{x, NumberFormat::FP32, 1.0f, {}, {}}, Case{x.to(torch::kBFloat16), NumberFormat::FP32, 1.0f, {}, {}},
                          Case{x, NumberFormat::BF16, 1.0f, {}, x.to(torch::kBFloat16)},
                          Case{x, NumberFormat::E5M2, 64.0f, {}, e5m2}, Case{x, NumberFormat::E5M2, 1.0f, scale, e5m2},
                          Case{x, NumberFormat::E4M3, 0.0f, {}, x.to(torch::kFloat8_e4m3fn)},
                          Case{x, NumberFormat::FP16, 1.0f, {}, x_half}, Case{x_half, NumberFormat::FP32, 1.0f, {}, {}},
                          Case{x_half, NumberFormat::FP16, 1.0f, {}, x_half}, Case{x_bf16, NumberFormat::BF16, 1.0f, {}, x_bf16},
                          Case{x_bf16, NumberFormat::E4M3, 1.0f, scale, e4m3_of_bf16},
                          Case{x, NumberFormat::FP32, 1.0f, {}, pow2}}) {
        const auto host_scale = c.scale > 0.0f ? torch::full({}, static_cast<double>(c.scale), opts.dtype(torch::kFloat64))
                                               : torch::Tensor();
        const auto ops = tensor_ops_row(c.x, c.format, c.device_scale.defined() ? c.device_scale : host_scale, c.q);
        const auto fused = fused_cuda_row(c.x, c.format, c.scale, c.device_scale, c.q);
        if (!same_row(fused, ops)) return false;
    }
    // An FP8 operand as the native executor records it: the kernel reads its codes and 1 / scale.
    const auto codes = (x_bf16.to(torch::kFloat32) * 64.0f).to(torch::kFloat8_e4m3fn);
    const auto inv_scale = torch::full({}, 1.0f / 64.0f, opts.dtype(torch::kFloat32));
    const auto ops = tensor_ops_row(x_bf16, NumberFormat::E4M3, scale, codes.to(torch::kFloat32) * inv_scale);
    if (!same_row(fused_cuda_row(x_bf16, NumberFormat::E4M3, 1.0f, scale, codes, inv_scale), ops)) return false;
    const auto codes5 = (x_bf16.to(torch::kFloat32) * 64.0f).to(torch::kFloat8_e5m2); // a gradient's
    const auto ops5 = tensor_ops_row(x_bf16, NumberFormat::E5M2, scale, codes5.to(torch::kFloat32) * inv_scale);
    if (!same_row(fused_cuda_row(x_bf16, NumberFormat::E5M2, 1.0f, scale, codes5, inv_scale), ops5)) return false;
    // An fp8-block operand: codes (R, 384) and an inverse scale per 1x128 block, 2^-10 .. 2^10.
    const int64_t rows = x.numel() / 384;
    const auto xb = x_bf16.narrow(0, 0, rows * 384).view({rows, 384});
    const auto block_inv = torch::exp2(torch::remainder(torch::arange(rows * 3, opts.dtype(torch::kFloat32)), 21.0f) - 10.0f)
                               .view({rows, 3});
    const auto block_codes =
        (xb.to(torch::kFloat32).view({rows, 3, 128}) / block_inv.unsqueeze(-1)).view({rows, 384}).to(torch::kFloat8_e4m3fn);
    const auto block_ops = tensor_ops_row(xb, NumberFormat::E4M3, {}, dequantize_codes(block_codes, block_inv));
    return same_row(fused_cuda_row(xb, NumberFormat::E4M3, 0.0f, {}, block_codes, block_inv), block_ops);
}
#endif

} // namespace

bool fused_cuda_stats_available()
{
#if defined(MANTISSA_CUDA_KERNELS)
    static const bool agrees = torch::cuda::is_available() && kernel_agrees("fused CUDA statistics", [] {
        torch::NoGradGuard no_grad;
        return fused_cuda_agrees_with_tensor_ops();
    });
    return agrees;
#else
    return false;
#endif
}

torch::Tensor tensor_stats_row(const torch::Tensor& x, NumberFormat format, float scale,
                               const torch::Tensor& dequantized, StatsKernel kernel)
{
    torch::NoGradGuard no_grad;
    if (kernel == StatsKernel::Auto)
        kernel = x.is_cpu() ? StatsKernel::FusedCpu
                 : x.is_cuda() && fused_cuda_stats_available() ? StatsKernel::FusedCuda
                                                                : StatsKernel::TensorOps;
    if (kernel == StatsKernel::FusedCpu || kernel == StatsKernel::FusedCpuPortable)
        return fused_cpu_row(x, format, scale, dequantized, kernel);
    if (kernel == StatsKernel::FusedCuda) return fused_cuda_row(x, format, scale, {}, dequantized);
    const auto scale_t = scale > 0.0f ? torch::full({}, static_cast<double>(scale), x.options().dtype(torch::kFloat64))
                                      : torch::Tensor();
    return tensor_ops_row(x, format, scale_t, dequantized);
}

float cpu_scalar(const torch::Tensor& t)
{
    TORCH_CHECK(t.is_cpu() && t.numel() == 1, "cpu_scalar: one value in the CPU's memory");
    if (t.scalar_type() == torch::kFloat32) return *t.data_ptr<float>();
    return static_cast<float>(*t.to(torch::kFloat64).data_ptr<double>());
}

torch::Tensor tensor_stats_row(const torch::Tensor& x, NumberFormat format, const torch::Tensor& scale,
                               const torch::Tensor& dequantized)
{
    torch::NoGradGuard no_grad;
    if (x.is_cpu()) return fused_cpu_row(x, format, cpu_scalar(scale), dequantized);
    if (x.is_cuda() && fused_cuda_stats_available()) return fused_cuda_row(x, format, 1.0f, scale, dequantized);
    return tensor_ops_row(x, format, scale.detach().to(torch::kFloat64), dequantized);
}

torch::Tensor tensor_stats_row_of_codes(const torch::Tensor& x, NumberFormat format, const torch::Tensor& scale,
                                        const torch::Tensor& codes, const torch::Tensor& inv_scale)
{
    torch::NoGradGuard no_grad;
    if (x.is_cuda() && stats_compared(codes) && fused_cuda_stats_available())
        return fused_cuda_row(x, format, 1.0f, scale, codes, inv_scale);
    return tensor_stats_row(x, format, scale, dequantize_codes(codes, inv_scale));
}

torch::Tensor tensor_stats_row_of_block_codes(const torch::Tensor& x, NumberFormat format, const torch::Tensor& codes,
                                              const torch::Tensor& inv_scale)
{
    torch::NoGradGuard no_grad;
    if (x.is_cuda() && stats_compared(codes) && fused_cuda_stats_available())
        return fused_cuda_row(x, format, 0.0f, {}, codes, inv_scale);
    return tensor_stats_row(x, format, 0.0f, dequantize_codes(codes, inv_scale));
}

torch::Tensor dequantize_codes(const torch::Tensor& codes, const torch::Tensor& inv_scale)
{
    const auto values = codes.to(torch::kFloat32);
    if (inv_scale.numel() == 1) return values * inv_scale;
    TORCH_CHECK(codes.dim() == 2 && codes.size(1) % 128 == 0 && inv_scale.numel() * 128 == codes.numel(),
                "dequantize_codes: one inverse scale, or one per 128 codes along a row");
    const int64_t rows = codes.size(0), cols = codes.size(1);
    return (values.reshape({rows, cols / 128, 128}) * inv_scale.reshape({rows, cols / 128, 1})).view({rows, cols});
}

TensorStats tensor_stats_from_row(const double* r, NumberFormat format, float scale, int64_t count, bool compared,
                                  bool values_only)
{
    TensorStats s;
    s.format = format_name(format);
    s.scale = scale;
    s.count = count;
    const auto unseen_cast = [&] {
        s.underflow = -1.0;
        s.overflow = -1.0;
        s.quant_mse = std::numeric_limits<double>::quiet_NaN();
        s.quant_snr_db = std::numeric_limits<double>::quiet_NaN();
    };
    if (count == 0) { // a gradient that never came: nothing measured either way
        if (values_only) unseen_cast();
        return s;
    }
    const auto c = [&](int64_t i) { return static_cast<int64_t>(r[i]); };
    s.zeros = c(row::kZeros);
    s.nans = c(row::kNans);
    s.infs = c(row::kNonFinite) - s.nans;
    s.amax = r[row::kAmax];
    const double* bins = r + row::kFirstBin;
    const double* bins_end = bins + kExponentBins;
    const double* first = std::find_if(bins, bins_end, [](double v) { return v != 0.0; });
    if (first != bins_end) {
        const double* last = bins_end;
        while (*(last - 1) == 0.0) --last;
        s.first_exponent = static_cast<int>(first - bins) + kMinExponent;
        for (const double* b = first; b != last; ++b) s.exponent_counts.push_back(static_cast<int64_t>(*b));
    }
    if (!compared) {
        s.quant_snr_db = std::numeric_limits<double>::infinity();
        return s;
    }
    const double n = static_cast<double>(count);
    const double compared_count = r[row::kCompared];
    s.underflow = r[row::kUnderflow] / n;
    s.subnormal = scale > 0.0f ? r[row::kSubnormal] / n : -1.0;
    s.overflow = scale > 0.0f ? r[row::kOverflow] / n : -1.0;
    const bool lost = scale > 0.0f && n - r[row::kNonFinite] - compared_count > 0;
    set_cast_error(s, r[row::kErrorEnergy], r[row::kSignalEnergy], compared_count, lost);
    if (values_only) unseen_cast();
    return s;
}

TensorStats compute_tensor_stats(const torch::Tensor& x, NumberFormat format, float scale,
                                 const torch::Tensor& dequantized, StatsKernel kernel)
{
    const auto r = tensor_stats_row(x, format, scale, dequantized, kernel).to(torch::kCPU).contiguous();
    return tensor_stats_from_row(r.data_ptr<double>(), format, scale, x.numel(), stats_compared(dequantized));
}

} // namespace mantissa
