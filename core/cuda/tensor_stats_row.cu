// SPDX-License-Identifier: GPL-3.0-or-later
#include "tensor_stats_row.h"
#include "launch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e5m2.h>

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

struct Tally {
    unsigned long long underflow = 0, subnormal = 0, overflow = 0, compared = 0;
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

// Each warp scans a grid-stride share of x, kWarpSpan values at a time (lane l takes values
// l, l + 32, ...: each of the eight loads is one coalesced read of the warp), and each block
// writes its partial row slot-major (slot s of block b at s * gridDim.x + b), so that the
// finishing warps read the blocks' partials of a slot in one coalesced sweep.
//
// The histogram keeps one counter column per lane (hist[slot][lane]: the bank is the lane's,
// whatever the slot), so that a value costs one conflict-free shared add. Until 2026-12-04 the
// lanes agreed first with __match_any_sync on one add per distinct slot: the H200 ran that at
// about 133 G values/s for FP32 and BF16 alike, several times under its memory bandwidth.
// With `Compare` the value is compared with its cast q; where q is x itself (an operand that
// was not cast), x is read once.
template <typename X, typename Q, bool Compare>
__global__ void __launch_bounds__(kThreads, 4)
    partial_rows(const X* __restrict__ x, const Q* q, const float* __restrict__ q_scale, int64_t n,
                 const double* __restrict__ scale, stats_value::CastComparison comparison,
                 unsigned long long* __restrict__ ints, double* __restrict__ sums)
{
    __shared__ unsigned int hist[kBins][32];
    __shared__ unsigned long long warp_ints[kWarps][kCounts];
    __shared__ unsigned int warp_amax[kWarps];
    __shared__ double warp_sums[kWarps][2];
    for (int s = threadIdx.x; s < kBins * 32; s += kThreads) (&hist[0][0])[s] = 0;
    __syncthreads();

    if constexpr (Compare) {
        if (scale != nullptr) comparison.scale = *scale;
    } else {
        (void)comparison, (void)scale;
    }
    bool q_is_x = false;
    if constexpr (std::is_same_v<X, Q>) q_is_x = Compare && static_cast<const void*>(q) == static_cast<const void*>(x);
    // FP8 codes stand for code * q_scale, in FP32 as codes.to(float) * inv_scale computes them.
    float q_times = 1.0f;
    if constexpr (kIsCodes<Q>)
        if (q_scale != nullptr) q_times = *q_scale;
    Tally t;
    unsigned long long nans = 0;
    unsigned int amax_bits = 0;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps * kWarpSpan;
    for (int64_t base = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kWarpSpan; base < n; base += stride) {
        float v[kUnroll], c[kUnroll];
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            const int64_t i = base + j * 32 + lane;
            v[j] = i < n ? static_cast<float>(x[i]) : 0.0f;
            if constexpr (Compare) {
                c[j] = i < n && !q_is_x ? static_cast<float>(q[i]) : 0.0f;
                if constexpr (kIsCodes<Q>) c[j] *= q_times;
            }
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            if (base + j * 32 + lane >= n) continue;
            const uint32_t mag_bits = stats_value::magnitude_bits(v[j]);
            atomicAdd(&hist[slot_without_branch(mag_bits)][lane], 1u);
            const bool finite = mag_bits < 0x7F800000u;
            nans += mag_bits > 0x7F800000u ? 1 : 0;
            amax_bits = max(amax_bits, finite ? mag_bits : 0u);
            if constexpr (Compare)
                if (finite) stats_value::compare_cast(v[j], q_is_x ? v[j] : c[j], comparison, t);
        }
    }

    const unsigned long long counts[kCounts] = {warp_sum(nans), warp_sum(t.underflow), warp_sum(t.subnormal),
                                                warp_sum(t.overflow), warp_sum(t.compared)};
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
    }
    if (threadIdx.x < kCounts) {
        unsigned long long total = 0;
        for (int w = 0; w < kWarps; ++w) total += warp_ints[w][threadIdx.x];
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

template <typename X, typename Q, bool Compare>
void launch_partials(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& q_scale,
                     const torch::Tensor& scale, const stats_value::CastComparison& comparison, int blocks,
                     torch::Tensor& ints, torch::Tensor& sums)
{
    // The counters take 36 KB of shared memory per block: ask for the largest carveout, so that
    // the four blocks per SM of __launch_bounds__ fit beside each other (145 KB of 228).
    // A hint only: if it is refused, the error is cleared so that the launch check below does
    // not take it for the kernel's.
    static const bool carved = [] {
        const bool ok = cudaFuncSetAttribute(partial_rows<X, Q, Compare>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                             cudaSharedmemCarveoutMaxShared) == cudaSuccess;
        if (!ok) (void)cudaGetLastError();
        return ok;
    }();
    (void)carved;
    const auto stream = at::cuda::getCurrentCUDAStream();
    MANTISSA_LAUNCH(blocks, kThreads, stream, partial_rows<X, Q, Compare>)(
        reinterpret_cast<const X*>(x.data_ptr()), Compare ? reinterpret_cast<const Q*>(q.data_ptr()) : nullptr,
        q_scale.defined() ? q_scale.data_ptr<float>() : nullptr, x.numel(),
        scale.defined() ? scale.data_ptr<double>() : nullptr, comparison,
        reinterpret_cast<unsigned long long*>(ints.data_ptr<int64_t>()), sums.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename X>
void launch_for_x(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& q_scale, const torch::Tensor& scale,
                  const stats_value::CastComparison& comparison, int blocks, torch::Tensor& ints, torch::Tensor& sums)
{
    if (!q.defined()) return launch_partials<X, X, false>(x, q, q_scale, scale, comparison, blocks, ints, sums);
    const auto launch = [&](auto tag) {
        launch_partials<X, decltype(tag), true>(x, q, q_scale, scale, comparison, blocks, ints, sums);
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
    const auto q_scale = codes_scale.defined()
                             ? codes_scale.detach().to(x.device(), torch::kFloat32).reshape({}).contiguous()
                             : torch::Tensor();
    TORCH_CHECK(!q.defined() || q.numel() == n, "tensor_stats_row: the cast has another number of values");
    TORCH_CHECK(!q_scale.defined() || (q.defined() && (q.scalar_type() == torch::kFloat8_e4m3fn ||
                                                       q.scalar_type() == torch::kFloat8_e5m2)),
                "tensor_stats_row: a codes scale goes with FP8 codes");
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
