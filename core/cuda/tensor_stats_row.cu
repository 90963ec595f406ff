// SPDX-License-Identifier: GPL-3.0-or-later
#include "tensor_stats_row.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

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

// Each warp scans a grid-stride share of x, kWarpSpan values at a time (lane l takes values
// l, l + 32, ...: each of the eight loads is one coalesced read of the warp), and each block
// writes its partial row slot-major (slot s of block b at s * gridDim.x + b), so that the
// finishing warps read the blocks' partials of a slot in one coalesced sweep. Every lane of a
// warp takes every pass, so all reach the warp-wide match below.
template <typename X, typename Q>
__global__ void __launch_bounds__(kThreads, 4)
    partial_rows(const X* __restrict__ x, const Q* __restrict__ q, int64_t n, const double* __restrict__ scale,
                 stats_value::CastComparison comparison, unsigned long long* __restrict__ ints, double* __restrict__ sums)
{
    __shared__ unsigned int hist[kBins];
    __shared__ unsigned long long warp_ints[kWarps][kCounts];
    __shared__ unsigned int warp_amax[kWarps];
    __shared__ double warp_sums[kWarps][2];
    for (int s = threadIdx.x; s < kBins; s += kThreads) hist[s] = 0;
    __syncthreads();

    if (scale != nullptr) comparison.scale = *scale;
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
            c[j] = q != nullptr && i < n ? static_cast<float>(q[i]) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kUnroll; ++j) {
            int slot = -1;
            if (base + j * 32 + lane < n) {
                const uint32_t mag_bits = stats_value::magnitude_bits(v[j]);
                slot = stats_value::slot_of(mag_bits);
                if (slot == static_cast<int>(row::kNonFinite)) nans += mag_bits > 0x7F800000u ? 1 : 0;
                else {
                    amax_bits = max(amax_bits, mag_bits);
                    if (q != nullptr) stats_value::compare_cast(v[j], c[j], comparison, t);
                }
            }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
            // Neighbouring values mostly share a binade: one shared-memory add per distinct slot.
            const unsigned peers = __match_any_sync(0xffffffffu, slot);
            if (slot >= 0 && lane == __ffs(peers) - 1) atomicAdd(&hist[slot], static_cast<unsigned>(__popc(peers)));
#else
            if (slot >= 0) atomicAdd(&hist[slot], 1u);
#endif
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
    for (int s = threadIdx.x; s < kBins; s += kThreads) ints[s * blocks + b] = hist[s];
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

template <typename X, typename Q>
void launch_partials(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& scale,
                     const stats_value::CastComparison& comparison, int blocks, torch::Tensor& ints, torch::Tensor& sums)
{
    const auto stream = at::cuda::getCurrentCUDAStream();
    partial_rows<X, Q><<<blocks, kThreads, 0, stream>>>(
        reinterpret_cast<const X*>(x.data_ptr()), q.defined() ? reinterpret_cast<const Q*>(q.data_ptr()) : nullptr,
        x.numel(), scale.defined() ? scale.data_ptr<double>() : nullptr, comparison,
        reinterpret_cast<unsigned long long*>(ints.data_ptr<int64_t>()), sums.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename X>
void launch_for_x(const torch::Tensor& x, const torch::Tensor& q, const torch::Tensor& scale,
                  const stats_value::CastComparison& comparison, int blocks, torch::Tensor& ints, torch::Tensor& sums)
{
    switch (q.defined() ? q.scalar_type() : torch::kFloat32) {
    case torch::kFloat32: launch_partials<X, float>(x, q, scale, comparison, blocks, ints, sums); break;
    case torch::kBFloat16: launch_partials<X, c10::BFloat16>(x, q, scale, comparison, blocks, ints, sums); break;
    case torch::kHalf: launch_partials<X, c10::Half>(x, q, scale, comparison, blocks, ints, sums); break;
    default: TORCH_CHECK(false, "tensor_stats_row: the cast is read as FP32, BF16 or FP16");
    }
}

} // namespace

torch::Tensor tensor_stats_row(const torch::Tensor& x_in, const torch::Tensor& dequantized,
                               const stats_value::CastComparison& comparison, const torch::Tensor& device_scale)
{
    TORCH_CHECK(x_in.is_cuda(), "tensor_stats_row: a CUDA tensor");
    const c10::cuda::CUDAGuard guard(x_in.device());
    const auto f64 = x_in.options().dtype(torch::kFloat64);
    const int64_t n = x_in.numel();
    if (n == 0) return torch::zeros({row::kSize}, f64);
    // Other dtypes (FP64, FP8 codes) are widened first: their values convert to FP32 as the
    // tensor ops convert them.
    const auto as_read = [&](const torch::Tensor& t) {
        const auto d = t.detach().to(x_in.device());
        return (read_as_is(d.scalar_type()) ? d : d.to(torch::kFloat32)).contiguous();
    };
    const auto x = as_read(x_in);
    const auto q = dequantized.defined() ? as_read(dequantized) : torch::Tensor();
    TORCH_CHECK(!q.defined() || q.numel() == n, "tensor_stats_row: the cast has another number of values");
    const auto scale = device_scale.defined()
                           ? device_scale.detach().to(x.device(), torch::kFloat64).reshape({}).contiguous()
                           : torch::Tensor();

    // Four blocks per SM (as many as __launch_bounds__ keeps resident) fill the GPU; a small
    // tensor takes a block per kWarps * kWarpSpan values.
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int64_t per_block = static_cast<int64_t>(kWarps) * kWarpSpan;
    const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + per_block - 1) / per_block, 4 * sms)));
    auto ints = torch::empty({static_cast<int64_t>(blocks) * kPartialInts}, x.options().dtype(torch::kInt64));
    auto sums = torch::empty({2 * static_cast<int64_t>(blocks)}, f64);
    switch (x.scalar_type()) {
    case torch::kFloat32: launch_for_x<float>(x, q, scale, comparison, blocks, ints, sums); break;
    case torch::kBFloat16: launch_for_x<c10::BFloat16>(x, q, scale, comparison, blocks, ints, sums); break;
    case torch::kHalf: launch_for_x<c10::Half>(x, q, scale, comparison, blocks, ints, sums); break;
    default: TORCH_CHECK(false, "tensor_stats_row: x is read as FP32, BF16 or FP16");
    }
    auto out = torch::empty({row::kSize}, f64);
    finish_row<<<kFinishBlocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
        reinterpret_cast<const unsigned long long*>(ints.data_ptr<int64_t>()), sums.data_ptr<double>(), blocks,
        out.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

} // namespace mantissa::cuda_kernels
