// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A CUDA thread-block simulator, so that the CPU tests run Mantissa's own kernels
// (core/cuda/*.cu) as written, where until now only a GPU could: their index arithmetic, tile
// walks, grid-stride loops, warp reductions and shared-memory hand-overs.
//
// The .cu files are compiled as C++ with MANTISSA_CUDA_SIM defined and this directory's
// include/ ahead of LibTorch's, which stands in for the two CUDA headers they include. A launch
// (core/cuda/launch.h's MANTISSA_LAUNCH) runs the grid's blocks one after another; each CUDA
// thread of a block is a fiber (ucontext) on the calling thread, switched at __syncthreads and
// at warp intrinsics, so a run is deterministic and atomics need no locking. `__shared__` is a
// function-static, which one block at a time makes the block's own.
//
// What it checks beyond the values: a __syncthreads or a warp intrinsic that not every thread
// of its block or warp reaches (a divergent barrier, or a thread that returned early) fails the
// launch with a message; so does a partial warp mask. What it cannot show: timing, memory
// ordering between blocks, or the device's own expf/logf (the host's libm stands in, so a
// kernel calling them agrees with the GPU to within their ulps, not to the bit).

#include <c10/util/Half.h>

#include "cuda_sim_control.h"

#include <math.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

namespace cuda_sim {

const dim3& thread_idx();
const dim3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();

void sync_threads();
// Every lane of the calling warp in `mask` (which must be the warp's whole mask) publishes
// `bits`, and each gets what every lane published (a lane the warp lacks reads as its own).
void warp_gather(unsigned mask, uint64_t bits, uint64_t (&all)[32]);
int lane_id();

// Runs body once per thread of every block of the grid, blocks in order. Throws
// std::runtime_error for a barrier that not all threads reach; not reentrant.
void run_grid(dim3 grid, dim3 block, const std::function<void()>& body);

template <typename T>
T exchange_as(unsigned mask, T v, int src)
{
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t), "a register-sized value");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    uint64_t all[32];
    warp_gather(mask, bits, all);
    bits = all[src];
    T out;
    std::memcpy(&out, &bits, sizeof(T));
    return out;
}

// kernel<<<grid, block>>>(arguments) as MANTISSA_LAUNCH spells it: each thread gets its own
// copy of the arguments, converted to the kernel's parameter types.
template <typename... P>
struct Launch {
    Launch(dim3 grid_, dim3 block_, void (*kernel_)(P...)) : grid(grid_), block(block_), kernel(kernel_) {}
    template <typename... A>
    void operator()(A&&... arguments) const
    {
        static_assert(sizeof...(A) == sizeof...(P), "a kernel's arguments");
        const auto body = [&] { kernel(static_cast<P>(arguments)...); };
        run_grid(grid, block, body);
    }
    dim3 grid, block;
    void (*kernel)(P...);
};

} // namespace cuda_sim

#define threadIdx (::cuda_sim::thread_idx())
#define blockIdx (::cuda_sim::block_idx())
#define blockDim (::cuda_sim::block_dim())
#define gridDim (::cuda_sim::grid_dim())
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

inline void __syncthreads() { ::cuda_sim::sync_threads(); }
// The warp's lanes meet: what each wrote before is seen by all after (wmma's stores in
// particular, which the stand-in <mma.h> makes lane by lane).
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    uint64_t all[32];
    ::cuda_sim::warp_gather(mask, 0, all);
}

template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta)
{
    const int lane = ::cuda_sim::lane_id();
    return ::cuda_sim::exchange_as(mask, v, lane + static_cast<int>(delta) < 32 ? lane + static_cast<int>(delta) : lane);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask)
{
    return ::cuda_sim::exchange_as(mask, v, ::cuda_sim::lane_id() ^ lane_mask);
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int src)
{
    return ::cuda_sim::exchange_as(mask, v, src & 31);
}
inline unsigned __ballot_sync(unsigned mask, int predicate)
{
    uint64_t all[32];
    ::cuda_sim::warp_gather(mask, predicate != 0 ? 1u : 0u, all);
    unsigned ballot = 0;
    for (int lane = 0; lane < 32; ++lane) ballot |= (all[lane] != 0 ? 1u : 0u) << lane;
    return ballot & mask;
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) == mask; }

// One thread runs at a time, so an atomic is a plain read-modify-write.
template <typename T>
T atomicAdd(T* p, T v)
{
    const T old = *p;
    *p = old + v;
    return old;
}
template <typename T>
T atomicMax(T* p, T v)
{
    static_assert(std::is_integral_v<T>, "CUDA's atomicMax takes integers");
    const T old = *p;
    *p = old < v ? v : old;
    return old;
}
template <typename T>
T atomicMin(T* p, T v)
{
    static_assert(std::is_integral_v<T>, "CUDA's atomicMin takes integers");
    const T old = *p;
    *p = v < old ? v : old;
    return old;
}

inline int __clz(int x) { return x == 0 ? 32 : std::countl_zero(static_cast<uint32_t>(x)); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }

using __half = c10::Half;
inline __half __ushort_as_half(unsigned short bits) { return c10::Half(bits, c10::Half::from_bits()); }
inline float __half2float(__half h) { return static_cast<float>(h); }

// CUDA's integer max/min. Floats are left out on purpose: device code takes fmaxf/fminf for
// them (NaN rules), and a float max() here would hide a mistake.
template <typename A, typename B>
    requires(std::is_integral_v<A> && std::is_integral_v<B>)
constexpr std::common_type_t<A, B> max(A a, B b)
{
    return a < b ? b : a;
}
template <typename A, typename B>
    requires(std::is_integral_v<A> && std::is_integral_v<B>)
constexpr std::common_type_t<A, B> min(A a, B b)
{
    return b < a ? b : a;
}

using std::isfinite;
using std::isinf;
using std::isnan;
