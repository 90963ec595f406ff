// SPDX-License-Identifier: GPL-3.0-or-later
#include "self_check_kernels.h"

#include "cuda_sim.h"

namespace cuda_sim::self_check {
namespace {

__global__ void sums(unsigned long long* total)
{
    __shared__ unsigned long long warp_sums[32];
    const unsigned tid = threadIdx.x;
    unsigned long long v = blockIdx.x * blockDim.x + tid;
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (tid % 32 == 0) warp_sums[tid / 32] = v;
    __syncthreads();
    if (tid == 0) {
        unsigned long long block = 0;
        for (unsigned w = 0; w < blockDim.x / 32; ++w) block += warp_sums[w];
        atomicAdd(total, block);
    }
}

__global__ void ballot(unsigned* out)
{
    const unsigned b = __ballot_sync(0xffffffffu, threadIdx.x % 2 == 1);
    if (threadIdx.x == 5) *out = b;
}

__global__ void half_at_barrier()
{
    if (threadIdx.x < 64) __syncthreads();
}

__global__ void returns_early()
{
    if (threadIdx.x == 3) return;
    __syncthreads();
}

__global__ void shuffles_half_warp(float* out)
{
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(0x0000ffffu, 1.0f, 1);
}

} // namespace

int64_t block_sums(int blocks, int threads)
{
    unsigned long long total = 0;
    Launch(blocks, threads, sums)(&total);
    return static_cast<int64_t>(total);
}

uint32_t odd_lanes_ballot()
{
    unsigned out = 0;
    Launch(1, 32, ballot)(&out);
    return out;
}

void divergent_barrier() { Launch(1, 128, half_at_barrier)(); }
void early_return() { Launch(1, 64, returns_early)(); }
void partial_mask()
{
    float out[16] = {};
    Launch(1, 32, shuffles_half_warp)(out);
}

} // namespace cuda_sim::self_check
