// SPDX-License-Identifier: GPL-3.0-or-later
#include "delayed_scaling.h"
#include "launch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "../scale_rule.h"

namespace mantissa::cuda_kernels {
namespace {

constexpr int kThreads = 1024;

// One block: every thread copies and reduces a stride of the window; thread 0 finishes. fmax
// is order-free (max is associative, and NaN is skipped whichever side it is on), so the
// result is the host's sequential loop's to the bit.
__global__ void __launch_bounds__(kThreads)
    record_amax_kernel(const float* __restrict__ amax, const float* __restrict__ history, int64_t length,
                       const float* __restrict__ previous, float scaled_max, bool use_max,
                       float* __restrict__ out_history, float* __restrict__ out_scale, float* __restrict__ out_inv_scale)
{
    __shared__ float warp_max[kThreads / 32];
    const float newest = *amax;
    float m = 0.0f;
    for (int64_t i = threadIdx.x; i < length; i += kThreads) {
        const float v = i == 0 ? newest : history[i - 1];
        out_history[i] = v;
        m = scale_rule::fmax_skipping_nan(m, v);
    }
    for (int offset = 16; offset > 0; offset /= 2)
        m = scale_rule::fmax_skipping_nan(m, __shfl_down_sync(0xffffffffu, m, offset));
    if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float reduced = 0.0f;
        for (int w = 0; w < kThreads / 32; ++w) reduced = scale_rule::fmax_skipping_nan(reduced, warp_max[w]);
        const float scale = scale_rule::scale_from_amax(use_max ? reduced : newest, scaled_max, *previous);
        *out_scale = scale;
        *out_inv_scale = 1.0f / scale; // IEEE division (no fast math), as at::reciprocal's
    }
}

} // namespace

RecordedAmax record_amax(const torch::Tensor& amax, const torch::Tensor& history, const torch::Tensor& previous,
                         float scaled_max, bool use_max)
{
    TORCH_CHECK(on_kernel_device(history) && history.scalar_type() == torch::kFloat32 && history.is_contiguous() &&
                    history.dim() == 1 && history.numel() >= 1,
                "record_amax: a contiguous (length) FP32 CUDA history");
    const c10::cuda::CUDAGuard guard(history.device());
    const auto a = amax.to(history.device(), torch::kFloat32).reshape({}).contiguous();
    const auto prev = previous.to(history.device(), torch::kFloat32).reshape({}).contiguous();
    RecordedAmax out{torch::empty_like(history), torch::empty({}, history.options()), torch::empty({}, history.options())};
    MANTISSA_LAUNCH(1, kThreads, at::cuda::getCurrentCUDAStream(), record_amax_kernel)(
        a.data_ptr<float>(), history.data_ptr<float>(), history.numel(), prev.data_ptr<float>(), scaled_max, use_max,
        out.history.data_ptr<float>(), out.scale.data_ptr<float>(), out.inv_scale.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

} // namespace mantissa::cuda_kernels
