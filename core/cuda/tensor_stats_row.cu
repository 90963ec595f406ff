// SPDX-License-Identifier: GPL-3.0-or-later
#include "tensor_stats_row.h"
#include "fp8_pair.h"
#include "launch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>

#include <cfloat>
#include <cmath>
#include <type_traits>

namespace mantissa::cuda_kernels {
namespace {

namespace row = stats_row;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = static_cast<int>(row::kNonFinite) + 1; // zeros, the binades, non-finite
// A block's partial row: the histogram, then NaNs, underflow, subnormal, overflow, compared (the
// row's own order from kNans on), then the amax bits; and apart, the two FP64 energies.
constexpr int kCounts = 5;
constexpr int kPartialInts = kBins + kCounts + 1;
static_assert(row::kNans == kBins && row::kCompared == kBins + kCounts - 1 && row::kAmax == kBins + kCounts &&
                  row::kErrorEnergy == row::kAmax + 1 && row::kSignalEnergy == row::kAmax + 2,
              "a partial's slots follow the row's");
constexpr int kFinishBlocks = static_cast<int>((row::kSize + kWarps - 1) / kWarps); // a warp per slot

// A thread's counts fit 32 bits (a thread sees n / (grid x 256) values), and a 32-bit add is
// one instruction where a 64-bit one is two; they are widened before the warp adds them up.
struct Tally {
    unsigned int underflow = 0, subnormal = 0, overflow = 0, compared = 0;
    double err_energy = 0.0, signal = 0.0;
};

template <typename T>
__device__ T warp_sum(T v)
{
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// Values a lane reads before it tallies any: eight loads in flight per lane (sixteen with the
// cast), where one at a time left the kernel waiting on memory at a fraction of the H200's
// bandwidth (2026-12-04: 0.7 ms for a row of 50 M FP32 values, about 0.3-0.6 TB/s).
constexpr int kUnroll = 8;
constexpr int kWarpSpan = 32 * kUnroll;

// A cast handed over as FP8 codes and their inverse scale (the native executor's FP8 operands):
// read as 1-byte codes, where the dequantized FP32 tensor would be 4 bytes written and read.
template <typename Q>
constexpr bool kIsCodes = std::is_same_v<Q, c10::Float8_e4m3fn> || std::is_same_v<Q, c10::Float8_e5m2>;

// The row slot of |x|'s bits without a branch: stats_value::slot_of's rule (zero, the binade,
// a subnormal's highest bit, Inf/NaN at kNonFinite = 255 + 23), where __clz(0) = 32 makes a
// zero slot 0. The statistics kernel probe holds the two together.
static_assert(row::kNonFinite == 255 + 23 && row::kZeros == 0 && row::kFirstBin == 1, "the slot arithmetic below");
__device__ __forceinline__ int slot_without_branch(uint32_t mag_bits)
{
    const int biased = static_cast<int>(mag_bits >> 23);
    return biased != 0 ? biased + 23 : 32 - __clz(static_cast<int>(mag_bits));
}

// A scaled comparison's bounds in FP32, where stats_value's rules take FP64: the same verdicts
// for four FP64 operations and two conversions fewer a value. Exact: every format's bounds are
// FP32 numbers (checked where the kernel is launched; FP32's own overflow bound lies past
// FLT_MAX and becomes Inf, which only an Inf product reaches, as in FP64), the scale is one
// (a float widened), and |v| * scale is the FP32 product scaled_value_overflows takes.
// |c| * scale in FP32 instead of FP64 adds one rounding (2^-24 relative) to the two that
// scaled_code_is_subnormal's midpoint already allows for with a margin of 2^-(mantissa + 1),
// and stays a normal FP32 number for every code (the smallest, BF16's 2^-133 at scale 1, is
// exact as an FP32 subnormal).
struct ScaledBounds {
    float scale = 1.0f, subnormal_below = 0.0f, overflow_from = 0.0f;
    bool overflow_at_tie = false;
};

__device__ __forceinline__ ScaledBounds scaled_bounds(const stats_value::CastComparison& c)
{
    const float overflow_from = c.overflow_from > FLT_MAX ? INFINITY : static_cast<float>(c.overflow_from);
    return {static_cast<float>(c.scale), static_cast<float>(c.min_normal - 0.5 * c.min_subnormal), overflow_from,
            c.overflow_at_tie};
}

// scaled_bounds' premise, on the host: the bounds and the scale are FP32 numbers, as they are
// for every format narrower than FP32. FP32 itself is compared too (a block recipe's FP32
// scales with their power-of-two rounding, at scale 1): its subnormal bound 2^-126 - 2^-150 is
// no FP32 number, but it rounds up to 2^-126, the smallest FP32 number above it, and an FP32
// value times 1 is below the one exactly when it is below the other (the CPU's FP64 verdict).
void check_fp32_bounds(const stats_value::CastComparison& c)
{
    const auto is_fp32 = [](double d) { return static_cast<double>(static_cast<float>(d)) == d; };
    const double subnormal_below = c.min_normal - 0.5 * c.min_subnormal;
    const bool rounds_up_at_scale_1 =
        c.scale == 1.0 && static_cast<double>(static_cast<float>(subnormal_below)) > subnormal_below;
    TORCH_CHECK(!c.scaled_domain || (is_fp32(c.scale) && (is_fp32(subnormal_below) || rounds_up_at_scale_1) &&
                                     (is_fp32(c.overflow_from) || (c.overflow_from > FLT_MAX && c.overflow_at_tie))),
                "tensor_stats_row: a scaled comparison whose scale or bounds are no FP32 numbers");
}

// What a value is compared with: nothing (a row of an FP32 GEMM's tensor), its cast, or itself
// (an operand that arrived in the GEMM's 16-bit format and was multiplied as it is: x is read
// once, and the verdicts that cannot differ from zero for a value against itself are not made).
enum class Against { Nothing, Cast, Itself };

// What one value adds to its lane's share of the row: its histogram slot, NaN count and amax,
// and when compared stats_value::compare_cast's verdicts on its cast c, without a branch
// (compare_cast returns early on a non-finite cast, which left a divergent branch per value
// in the kernel). `Scaled` is the comparison's scaled_domain, fixed per launch. Against
// itself (c == v) a finite value is compared; it cannot underflow (v != 0 and c == 0), its cast
// cannot be non-finite, its error is 0, and at scale 1 it cannot overflow the format its dtype
// is (launch_for_x takes this path only then): those terms are left out, the rest are as above.
template <Against A, bool Scaled>
__device__ __forceinline__ void tally_value(float v, float c, unsigned int* column, const ScaledBounds& bounds,
                                            Tally& t, unsigned int& nans, unsigned int& amax_bits)
{
    const uint32_t mag_bits = stats_value::magnitude_bits(v);
    atomicAdd(column + slot_without_branch(mag_bits) * 32, 1u);
    const bool finite = mag_bits < 0x7F800000u;
    nans += mag_bits > 0x7F800000u ? 1u : 0u;
    amax_bits = max(amax_bits, finite ? mag_bits : 0u);
    if constexpr (A == Against::Itself) {
        // At scale 1 (launch_for_x): no finite value passes its own dtype's bound, and the
        // subnormals are the histogram's binades below the format's min normal (the block's
        // epilogue adds them up: subnormal_slots_end).
        const double vd = static_cast<double>(finite ? v : 0.0f);
        t.signal += vd * vd;
        t.compared += finite;
        (void)c, (void)bounds;
    } else if constexpr (A == Against::Cast) {
        const bool cast_finite = (stats_value::magnitude_bits(c) >> 23) != 0xFFu;
        const bool compared = finite & cast_finite;
        t.underflow += compared & (v != 0.0f) & (c == 0.0f);
        if constexpr (Scaled) {
            t.overflow += finite & !cast_finite; // the scaled value left the format
            const float code = fabsf(c) * bounds.scale;
            t.subnormal += compared & (c != 0.0f) & (code < bounds.subnormal_below);
            const float scaled = fabsf(v) * bounds.scale;
            t.overflow += compared & ((scaled > bounds.overflow_from) |
                                      ((scaled == bounds.overflow_from) & bounds.overflow_at_tie));
        }
        // Selected (in FP32, one instruction each) before they are widened and squared: an
        // infinite v or c never meets a multiplication.
        const double vd = static_cast<double>(compared ? v : 0.0f);
        const double e = vd - static_cast<double>(compared ? c : 0.0f);
        t.err_energy += e * e;
        t.signal += vd * vd;
        t.compared += compared;
    } else {
        (void)c, (void)bounds, (void)t;
    }
}

// The smallest and largest |x| bits of a run, in one min and one max a value (three-input on
// sm_90). A run whose bits all lie in [0x00800000, 0x7F800000) holds only normal finite values:
// no zero, subnormal, Inf or NaN. In the rows of a telemetry step nearly every run is such a
// plain run, and it needs none of tally_value's selects: its slot is its biased exponent + 23,
// it is finite, it is no NaN, and the run's largest bits are its amax.
struct BitsRange {
    uint32_t low = 0xFFFFFFFFu, high = 0;
    __device__ __forceinline__ bool plain() const { return (low >= 0x00800000u) & (high < 0x7F800000u); }
};

__device__ __forceinline__ BitsRange magnitude_range(const float (&v)[kUnroll])
{
    BitsRange r;
#pragma unroll
    for (int j = 0; j < kUnroll; ++j) {
        const uint32_t m = stats_value::magnitude_bits(v[j]);
        r.low = min(r.low, m);
        r.high = max(r.high, m);
    }
    return r;
}

// A plain run's value counted in its binade: slot = biased exponent + 23. `column_of_normals`
// is the lane's counter of slot 23 (biased exponent 0). On the GPU the counter is addressed by
// its 32-bit shared-memory offset: nvcc otherwise adds the shared window's base to each
// value's address (one instruction a value more).
__device__ __forceinline__ void count_in_binade(float v, unsigned int* column_of_normals)
{
    const uint32_t biased = stats_value::magnitude_bits(v) >> 23;
#if defined(__CUDA_ARCH__)
    const auto offset = static_cast<uint32_t>(__cvta_generic_to_shared(column_of_normals)) + biased * 32 * 4;
    asm volatile("red.shared.add.u32 [%0], 1;" ::"r"(offset) : "memory");
#else
    atomicAdd(column_of_normals + biased * 32, 1u);
#endif
}

// tally_value for a value of a plain run: the same counts and sums, where the caller takes the
// run's amax from its BitsRange and counts the run compared. Against its cast, the run's cast
// holds no zero, no non-finite value, and under a scale no code that is subnormal or value that
// overflows (plain_cast_run), so v and c only add their energies. The square of an FP32 value
// is exact in FP64, so one fused multiply-add gives tally_value's product and sum to the bit
// (the kernels are built with --fmad=false, which leaves only a written-out fma() fused).
template <Against A>
__device__ __forceinline__ void tally_plain(float v, float c, unsigned int* column_of_normals, Tally& t)
{
    count_in_binade(v, column_of_normals);
    const double vd = static_cast<double>(v);
    if constexpr (A == Against::Cast) {
        const double e = vd - static_cast<double>(c);
        t.err_energy += e * e;
    }
    if constexpr (A != Against::Nothing) t.signal = fma(vd, vd, t.signal);
    (void)c, (void)t;
}

// Whether a run of x and its cast is plain: x's values normal and finite, the cast's finite and
// non-zero, and under a scale no code below the subnormal bound and no value whose FP32 product
// with the scale reaches the overflow bound. Both products are monotone in |x| (rounding is), so
// the run's smallest code and largest value decide for the whole run: compare_cast's verdicts
// are then all false but `compared`.
template <bool Scaled>
__device__ __forceinline__ bool plain_cast_run(const BitsRange& x, const BitsRange& cast, const ScaledBounds& bounds)
{
    bool plain = x.plain() & (cast.high < 0x7F800000u);
    if constexpr (Scaled)
        plain &= (__uint_as_float(x.high) * bounds.scale < bounds.overflow_from) &
                 (__uint_as_float(cast.low) * bounds.scale >= bounds.subnormal_below);
    else plain &= cast.low != 0;
    return plain;
}

// kUnroll consecutive values from 16-byte loads (8-byte for FP8 codes), as FP32: p aligned to
// its run (the caller's spans start at multiples of kWarpSpan on a 16-byte aligned tensor).
template <typename T>
__device__ __forceinline__ void load_run(const T* __restrict__ p, float (&out)[kUnroll])
{
    static_assert(kUnroll * sizeof(T) % 8 == 0, "a run is whole 8-byte words");
    if constexpr (kUnroll * sizeof(T) >= 16) {
        constexpr int kPerLoad = 16 / static_cast<int>(sizeof(T));
#pragma unroll
        for (int l = 0; l < kUnroll / kPerLoad; ++l) {
            const uint4 raw = reinterpret_cast<const uint4*>(p)[l];
            T values[kPerLoad];
            memcpy(values, &raw, sizeof raw);
#pragma unroll
            for (int k = 0; k < kPerLoad; ++k) out[l * kPerLoad + k] = static_cast<float>(values[k]);
        }
    } else {
        const uint2 raw = *reinterpret_cast<const uint2*>(p);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
        const uint32_t words[2] = {raw.x, raw.y}; // FP8 codes: two a cvt (fp8_pair.h)
#pragma unroll
        for (int k = 0; k < kUnroll; k += 2) {
            const float2 f = values_of_code_pair<T>(words[k / 4] >> (8 * (k % 4)));
            out[k] = f.x, out[k + 1] = f.y;
        }
#else
        T values[kUnroll];
        memcpy(values, &raw, sizeof raw);
#pragma unroll
        for (int k = 0; k < kUnroll; ++k) out[k] = static_cast<float>(values[k]);
#endif
    }
}

// Each warp scans a grid-stride share of x, kWarpSpan values at a time, and each block
// writes its partial row slot-major (slot s of block b at s * gridDim.x + b), so that the
// finishing warps read the blocks' partials of a slot in one coalesced sweep. A whole span of
// an aligned tensor is read in runs: lane l takes values 8l .. 8l + 7 in 16-byte loads (one
// or two per operand, where eight 2-byte loads each carried their own bounds check); the last,
// partial span and unaligned tensors are read value by value (lane l takes l, l + 32, ...).
//
// The histogram keeps one counter column per lane (hist[slot][lane]: the bank is the lane's,
// whatever the slot), so that a value costs one conflict-free shared add. Until 2026-12-04 the
// lanes agreed first with __match_any_sync on one add per distinct slot: the H200 ran that at
// about 133 G values/s for FP32 and BF16 alike, several times under its memory bandwidth.
// `A`: what each value is compared with (q is read only against a cast); `Scaled`: the
// comparison's scaled_domain.
template <typename X, typename Q, Against A, bool Scaled>
__global__ void __launch_bounds__(kThreads, 4)
    partial_rows(const X* __restrict__ x, const Q* q, const float* __restrict__ q_scale, int q_scale_shift, int64_t n, bool runs,
                 const double* __restrict__ scale, stats_value::CastComparison comparison, int subnormal_slots_end,
                 unsigned long long* __restrict__ ints, double* __restrict__ sums)
{
    __shared__ unsigned int hist[kBins][32];
    __shared__ unsigned long long slot_totals[kBins];
    __shared__ unsigned long long warp_ints[kWarps][kCounts];
    __shared__ unsigned int warp_amax[kWarps];
    __shared__ double warp_sums[kWarps][2];
    for (int s = threadIdx.x; s < kBins * 32; s += kThreads) (&hist[0][0])[s] = 0;
    __syncthreads();

    if (A != Against::Nothing && scale != nullptr) comparison.scale = *scale;
    const ScaledBounds bounds = scaled_bounds(comparison);
    constexpr bool kReadsQ = A == Against::Cast;
    // FP8 codes stand for code * q_scale[i >> q_scale_shift], in FP32 as codes.to(float) *
    // inv_scale computes them: one scale (a shift of 63) or one per 128 consecutive codes (7).
    const auto q_times = [&](int64_t i) {
        if constexpr (kIsCodes<Q>) return q_scale != nullptr ? q_scale[i >> q_scale_shift] : 1.0f;
        else return (void)i, 1.0f;
    };
    Tally t;
    unsigned int nans = 0;
    unsigned int amax_bits = 0;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    unsigned int* const column = &hist[0][lane]; // slot s of this lane: column[s * 32]
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps * kWarpSpan;
    for (int64_t base = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kWarpSpan; base < n; base += stride) {
        float v[kUnroll], c[kUnroll] = {};
        if (runs && base + kWarpSpan <= n) { // whole span: the same branch for the whole warp
            const int64_t first = base + static_cast<int64_t>(lane) * kUnroll;
            load_run(x + first, v);
            if constexpr (kReadsQ) {
                load_run(q + first, c);
                if constexpr (kIsCodes<Q>) { // a run lies within one 128-block: one scale
                    const float times = q_times(first);
#pragma unroll
                    for (int j = 0; j < kUnroll; ++j) c[j] *= times;
                }
            }
            // A lane's own branch: a warp diverges only on a run that is not plain.
            const BitsRange range = magnitude_range(v);
            bool plain = range.plain();
            if constexpr (A == Against::Cast) plain = plain_cast_run<Scaled>(range, magnitude_range(c), bounds);
            if (plain) {
#pragma unroll
                for (int j = 0; j < kUnroll; ++j) tally_plain<A>(v[j], c[j], column + 23 * 32, t);
                amax_bits = max(amax_bits, range.high);
                if constexpr (A != Against::Nothing) t.compared += kUnroll; // all finite
                continue;
            }
#pragma unroll
            for (int j = 0; j < kUnroll; ++j) tally_value<A, Scaled>(v[j], c[j], column, bounds, t, nans, amax_bits);
            continue;
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            const int64_t i = base + j * 32 + lane;
            v[j] = i < n ? static_cast<float>(x[i]) : 0.0f;
            if constexpr (kReadsQ) {
                c[j] = i < n ? static_cast<float>(q[i]) : 0.0f;
                if constexpr (kIsCodes<Q>) c[j] *= i < n ? q_times(i) : 1.0f;
            }
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j)
            if (base + j * 32 + lane < n) tally_value<A, Scaled>(v[j], c[j], column, bounds, t, nans, amax_bits);
    }

    const auto wide = [](unsigned int count) { return warp_sum(static_cast<unsigned long long>(count)); };
    const unsigned long long counts[kCounts] = {wide(nans), wide(t.underflow), wide(t.subnormal), wide(t.overflow),
                                                wide(t.compared)};
    const double err = warp_sum(t.err_energy), signal = warp_sum(t.signal);
    for (int offset = 16; offset > 0; offset /= 2) amax_bits = max(amax_bits, __shfl_down_sync(0xffffffffu, amax_bits, offset));
    if (lane == 0) {
        for (int c = 0; c < kCounts; ++c) warp_ints[warp][c] = counts[c];
        warp_amax[warp] = amax_bits;
        warp_sums[warp][0] = err;
        warp_sums[warp][1] = signal;
    }
    __syncthreads();

    const int64_t blocks = gridDim.x, b = blockIdx.x;
    // A slot's 32 columns, each thread starting at its own column: the warp's reads fall in 32
    // different banks.
    for (int s = threadIdx.x; s < kBins; s += kThreads) {
        unsigned long long total = 0;
        for (int col = 0; col < 32; ++col) total += hist[s][(col + threadIdx.x) % 32];
        ints[s * blocks + b] = total;
        slot_totals[s] = total;
    }
    __syncthreads();
    if (threadIdx.x < kCounts) {
        unsigned long long total = 0;
        for (int w = 0; w < kWarps; ++w) total += warp_ints[w][threadIdx.x];
        // Against itself, the subnormals are the values in the binades below the format's min
        // normal (launch_for_x takes this path only for a 16-bit operand in its own format).
        if (A == Against::Itself && Scaled && kBins + threadIdx.x == row::kSubnormal)
            for (int s = static_cast<int>(row::kFirstBin); s < subnormal_slots_end; ++s) total += slot_totals[s];
        ints[(kBins + threadIdx.x) * blocks + b] = total;
    } else if (threadIdx.x == kCounts) {
        unsigned int m = 0;
        for (int w = 0; w < kWarps; ++w) m = max(m, warp_amax[w]);
        ints[(kBins + kCounts) * blocks + b] = m;
    } else if (threadIdx.x == kCounts + 1 || threadIdx.x == kCounts + 2) {
        const int which = threadIdx.x - kCounts - 1;
        double total = 0.0;
        for (int w = 0; w < kWarps; ++w) total += warp_sums[w][which];
        sums[which * blocks + b] = total;
    }
}

// One warp per row slot sums that slot's partials: lane l takes blocks l, l + 32, ... in turn,
// then the lanes are added in a fixed tree, so a tensor gives the same row on every run.
// (One thread per slot, looping over 500-odd strided partials, took tens of microseconds a row.)
__global__ void __launch_bounds__(kThreads)
    finish_row(const unsigned long long* __restrict__ ints, const double* __restrict__ sums, int blocks,
               double* __restrict__ out)
{
    const int lane = threadIdx.x % 32;
    const int s = blockIdx.x * kWarps + threadIdx.x / 32; // whole warps: the branches below are uniform
    if (s < kBins + kCounts) {
        unsigned long long total = 0;
        for (int b = lane; b < blocks; b += 32) total += ints[static_cast<int64_t>(s) * blocks + b];
        total = warp_sum(total);
        if (lane == 0) out[s] = static_cast<double>(total);
    } else if (s == row::kAmax) {
        unsigned int m = 0;
        for (int b = lane; b < blocks; b += 32)
            m = max(m, static_cast<unsigned int>(ints[static_cast<int64_t>(kBins + kCounts) * blocks + b]));
        for (int offset = 16; offset > 0; offset /= 2) m = max(m, __shfl_down_sync(0xffffffffu, m, offset));
        if (lane == 0) out[s] = static_cast<double>(__uint_as_float(m)); // |x| of finite values orders like its bits
    } else if (s == row::kErrorEnergy || s == row::kSignalEnergy) {
        const int which = s == row::kErrorEnergy ? 0 : 1;
        double total = 0.0;
        for (int b = lane; b < blocks; b += 32) total += sums[static_cast<int64_t>(which) * blocks + b];
        total = warp_sum(total);
        if (lane == 0) out[s] = total;
    }
}

bool read_as_is(c10::ScalarType t) { return t == torch::kFloat32 || t == torch::kBFloat16 || t == torch::kHalf; }

// Whether whole spans may be read in 16-byte runs: both tensors start on a 16-byte boundary
// (a span starts a multiple of kWarpSpan values in, so every run is aligned too).
bool aligned_for_runs(const torch::Tensor& x, const torch::Tensor& q)
{
    const auto aligned = [](const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
    return aligned(x) && (!q.defined() || aligned(q));
}

template <typename X, typename Q, Against A, bool Scaled>
void launch_partials(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& q_scale,
                     const torch::Tensor& scale, const stats_value::CastComparison& comparison, int blocks,
                     torch::Tensor& ints, torch::Tensor& sums, int subnormal_slots_end = 0)
{
    // The counters and their totals take 38 KB of shared memory per block: ask for the largest
    // carveout, so that the four blocks per SM of __launch_bounds__ fit beside each other (150 KB
    // of 228). A hint only: if it is refused, the error is cleared so that the launch check below
    // does not take it for the kernel's.
    static const bool carved = [] {
        const bool ok = cudaFuncSetAttribute(partial_rows<X, Q, A, Scaled>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared) == cudaSuccess;
        if (!ok) (void)cudaGetLastError();
        return ok;
    }();
    (void)carved;
    const auto stream = at::cuda::getCurrentCUDAStream();
    const bool reads_q = A == Against::Cast;
    MANTISSA_LAUNCH(blocks, kThreads, stream, partial_rows<X, Q, A, Scaled>)(
        reinterpret_cast<const X*>(x.data_ptr()), reads_q ? reinterpret_cast<const Q*>(q.data_ptr()) : nullptr,
        q_scale.defined() ? q_scale.data_ptr<float>() : nullptr, !q_scale.defined() || q_scale.numel() == 1 ? 63 : 7,
        x.numel(), aligned_for_runs(x, reads_q ? q : torch::Tensor()),
        scale.defined() ? scale.data_ptr<double>() : nullptr, comparison, subnormal_slots_end,
        reinterpret_cast<unsigned long long*>(ints.data_ptr<int64_t>()), sums.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename X, typename Q, Against A>
void launch_scaled_or_not(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& q_scale,
                          const torch::Tensor& scale, const stats_value::CastComparison& comparison, int blocks,
                          torch::Tensor& ints, torch::Tensor& sums, int subnormal_slots_end = 0)
{
    if (comparison.scaled_domain)
        launch_partials<X, Q, A, true>(x, q, q_scale, scale, comparison, blocks, ints, sums, subnormal_slots_end);
    else launch_partials<X, Q, A, false>(x, q, q_scale, scale, comparison, blocks, ints, sums, subnormal_slots_end);
}

// Whether an operand handed over as its own cast can be read once (Against::Itself), and if so
// the row slot that ends the binades whose values the comparison counts as subnormal; -1 where
// it cannot. Unscaled, nothing is counted as subnormal or overflow (0). Scaled, only a 16-bit
// operand in its own format at a host scale of 1: no finite value of it reaches the format's
// overflow bound, and none lies between that format's largest subnormal and its min normal, so
// its subnormals are exactly the values of the binades below the min normal (the partial rows'
// epilogue adds those up, where each value would take a comparison).
int itself_subnormal_slots_end(c10::ScalarType dtype, const torch::Tensor& device_scale,
                               const stats_value::CastComparison& c)
{
    if (!c.scaled_domain) return 0;
    if (device_scale.defined() || c.scale != 1.0) return -1;
    const bool bf16 = dtype == torch::kBFloat16 && c.min_normal == std::ldexp(1.0, -126) &&
                      c.min_subnormal == std::ldexp(1.0, -133) && 3.3895313892515355e38 < c.overflow_from;
    const bool fp16 = dtype == torch::kHalf && c.min_normal == std::ldexp(1.0, -14) &&
                      c.min_subnormal == std::ldexp(1.0, -24) && 65504.0 < c.overflow_from;
    if (!bf16 && !fp16) return -1;
    return stats_value::slot_of(stats_value::magnitude_bits(static_cast<float>(c.min_normal)));
}

template <typename X>
void launch_for_x(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& q_scale, const torch::Tensor& scale,
                  const stats_value::CastComparison& comparison, int blocks, torch::Tensor& ints, torch::Tensor& sums)
{
    if (!q.defined()) return launch_partials<X, X, Against::Nothing, false>(x, q, q_scale, scale, comparison, blocks, ints, sums);
    if (q.data_ptr() == x.data_ptr() && q.scalar_type() == x.scalar_type() && !q_scale.defined()) {
        const int slots_end = itself_subnormal_slots_end(x.scalar_type(), scale, comparison);
        if (slots_end >= 0)
            return launch_scaled_or_not<X, X, Against::Itself>(x, q, q_scale, scale, comparison, blocks, ints, sums,
                                                               slots_end);
    }
    const auto launch = [&](auto tag) {
        launch_scaled_or_not<X, decltype(tag), Against::Cast>(x, q, q_scale, scale, comparison, blocks, ints, sums);
    };
    switch (q.scalar_type()) {
    case torch::kFloat32: launch(float{}); break;
    case torch::kBFloat16: launch(c10::BFloat16{}); break;
    case torch::kHalf: launch(c10::Half{}); break;
    case torch::kFloat8_e4m3fn: launch(c10::Float8_e4m3fn{}); break;
    case torch::kFloat8_e5m2: launch(c10::Float8_e5m2{}); break;
    default: TORCH_CHECK(false, "tensor_stats_row: the cast is read as FP32, BF16, FP16 or FP8 codes");
    }
}

} // namespace

torch::Tensor tensor_stats_row(const torch::Tensor& x_in, const torch::Tensor& dequantized,
                               const stats_value::CastComparison& comparison, const torch::Tensor& device_scale,
                               const torch::Tensor& codes_scale)
{
    TORCH_CHECK(on_kernel_device(x_in), "tensor_stats_row: a CUDA tensor");
    const c10::cuda::CUDAGuard guard(x_in.device());
    const auto f64 = x_in.options().dtype(torch::kFloat64);
    const int64_t n = x_in.numel();
    if (n == 0) return torch::zeros({row::kSize}, f64);
    // Other dtypes (FP64; FP8 for x) are widened first: their values convert to FP32 as the
    // tensor ops convert them.
    const auto as_read = [&](const torch::Tensor& t, bool codes_too) {
        const auto d = t.detach().to(x_in.device());
        const bool codes = d.scalar_type() == torch::kFloat8_e4m3fn || d.scalar_type() == torch::kFloat8_e5m2;
        return (read_as_is(d.scalar_type()) || (codes_too && codes) ? d : d.to(torch::kFloat32)).contiguous();
    };
    const auto x = as_read(x_in, false);
    // FP8 casts are read as codes (times codes_scale where it is given; 1 otherwise, exactly as widened).
    const auto q = dequantized.defined() ? as_read(dequantized, true) : torch::Tensor();
    const auto q_scale = codes_scale.defined() ? codes_scale.detach().to(x.device(), torch::kFloat32).contiguous()
                                               : torch::Tensor();
    TORCH_CHECK(!q.defined() || q.numel() == n, "tensor_stats_row: the cast has another number of values");
    TORCH_CHECK(!q_scale.defined() || (q.defined() && (q.scalar_type() == torch::kFloat8_e4m3fn ||
                                                       q.scalar_type() == torch::kFloat8_e5m2)),
                "tensor_stats_row: a codes scale goes with FP8 codes");
    // One scale, or one per 1x128 block of rows of codes (R, C): (R, C / 128), fp8-block's casts.
    TORCH_CHECK(!q_scale.defined() || q_scale.numel() == 1 ||
                    (q.dim() == 2 && q.size(1) % 128 == 0 && q_scale.numel() * 128 == n),
                "tensor_stats_row: a codes scale is one value or one per 128 codes along a row");
    const auto scale = device_scale.defined()
                           ? device_scale.detach().to(x.device(), torch::kFloat64).reshape({}).contiguous()
                           : torch::Tensor();

    // Four blocks per SM (as many as __launch_bounds__ keeps resident) fill the GPU; a small
    // tensor takes a block per eight passes of its warps (16 K values), since a block clears and
    // adds up its 279 x 32 counters whatever it reads.
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int64_t per_block = static_cast<int64_t>(kWarps) * kWarpSpan * 8;
    const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + per_block - 1) / per_block, 4 * sms)));
    auto ints = torch::empty({static_cast<int64_t>(blocks) * kPartialInts}, x.options().dtype(torch::kInt64));
    auto sums = torch::empty({2 * static_cast<int64_t>(blocks)}, f64);
    if (q.defined()) check_fp32_bounds(comparison); // a device scale is an FP32 tensor
    switch (x.scalar_type()) {
    case torch::kFloat32: launch_for_x<float>(x, q, q_scale, scale, comparison, blocks, ints, sums); break;
    case torch::kBFloat16: launch_for_x<c10::BFloat16>(x, q, q_scale, scale, comparison, blocks, ints, sums); break;
    case torch::kHalf: launch_for_x<c10::Half>(x, q, q_scale, scale, comparison, blocks, ints, sums); break;
    default: TORCH_CHECK(false, "tensor_stats_row: x is read as FP32, BF16 or FP16");
    }
    auto out = torch::empty({row::kSize}, f64);
    MANTISSA_LAUNCH(kFinishBlocks, kThreads, at::cuda::getCurrentCUDAStream(), finish_row)(
        reinterpret_cast<const unsigned long long*>(ints.data_ptr<int64_t>()), sums.data_ptr<double>(), blocks,
        out.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

} // namespace mantissa::cuda_kernels
