// SPDX-License-Identifier: GPL-3.0-or-later
#include "cross_entropy.h"
#include "launch.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cmath>

namespace mantissa::cuda_kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4; // loads in flight per thread

// A running log-sum-exp: the largest value seen and the sum of exp(value - largest).
struct Lse {
    float m = -INFINITY;
    float s = 0.0f;
};

__device__ __forceinline__ void add_value(Lse& a, float x)
{
    if (x == -INFINITY) return; // exp(-inf) adds nothing (and -inf - -inf would be NaN)
    if (x > a.m) {
        a.s = a.s * expf(a.m - x) + 1.0f;
        a.m = x;
    } else {
        a.s += expf(x - a.m); // NaN (x, or a NaN already in m) propagates into s
    }
}

__device__ __forceinline__ Lse combine(Lse a, Lse b)
{
    // Empty sides only: a side that saw nothing but NaN is {-inf, NaN}, and its NaN must reach
    // the row's log Z.
    if (a.m == -INFINITY && a.s == 0.0f) return b;
    if (b.m == -INFINITY && b.s == 0.0f) return a;
    const float m = fmaxf(a.m, b.m);
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// Every thread of the block takes part; the result is the block's, in thread 0 (a fixed
// tree: lanes, then warps in order).
__device__ Lse block_lse(Lse v)
{
    __shared__ float ms[kWarps], ss[kWarps];
    for (int offset = 16; offset > 0; offset /= 2) {
        Lse other;
        other.m = __shfl_down_sync(0xffffffffu, v.m, offset);
        other.s = __shfl_down_sync(0xffffffffu, v.s, offset);
        v = combine(v, other);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        ms[warp] = v.m;
        ss[warp] = v.s;
    }
    __syncthreads();
    Lse total;
    if (threadIdx.x == 0)
        for (int w = 0; w < kWarps; ++w) total = combine(total, Lse{ms[w], ss[w]});
    __syncthreads(); // ms/ss are refilled by the next row
    return total;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    rows_forward(const T* __restrict__ logits, const int64_t* __restrict__ targets, int64_t rows, int64_t vocab,
                 int64_t ignore_index, float* __restrict__ row_loss, float* __restrict__ row_max,
                 float* __restrict__ log_sum, float* __restrict__ log_z)
{
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* x = logits + r * vocab;
        Lse acc;
        for (int64_t base = threadIdx.x; base < vocab; base += static_cast<int64_t>(kThreads) * kUnroll) {
            float v[kUnroll];
#pragma unroll
            for (int j = 0; j < kUnroll; ++j) {
                const int64_t i = base + static_cast<int64_t>(j) * kThreads;
                v[j] = i < vocab ? static_cast<float>(x[i]) : -INFINITY;
            }
#pragma unroll
            for (int j = 0; j < kUnroll; ++j) add_value(acc, v[j]);
        }
        const Lse total = block_lse(acc);
        if (threadIdx.x == 0) {
            // As log_softmax: (x - max) - log(sum), never through m + log(sum) rounded to the
            // spacing of log Z, which a confident row's loss and gradient would cancel against.
            const float ls = logf(total.s);
            const int64_t t = targets[r];
            float loss = 0.0f;
            if (t != ignore_index) loss = t >= 0 && t < vocab ? ls - (static_cast<float>(x[t]) - total.m) : NAN;
            row_loss[r] = loss;
            row_max[r] = total.m;
            log_sum[r] = ls;
            log_z[r] = total.m + ls;
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    rows_backward(const T* __restrict__ logits, const int64_t* __restrict__ targets, const float* __restrict__ row_max,
                  const float* __restrict__ log_sum, const float* __restrict__ grad_loss, const float* __restrict__ count,
                  int64_t rows, int64_t vocab, int64_t ignore_index, T* __restrict__ grad)
{
    const float scale = *grad_loss / *count;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T* x = logits + r * vocab;
        T* g = grad + r * vocab;
        const int64_t t = targets[r];
        const bool ignored = t == ignore_index;
        // A target outside the vocabulary: NaN throughout, so that the step's finite check
        // refuses it (ATen stops the process with a device assert).
        const bool invalid = !ignored && (t < 0 || t >= vocab);
        const float m = row_max[r], ls = log_sum[r];
        for (int64_t base = threadIdx.x; base < vocab; base += static_cast<int64_t>(kThreads) * kUnroll) {
            float v[kUnroll];
#pragma unroll
            for (int j = 0; j < kUnroll; ++j) {
                const int64_t i = base + static_cast<int64_t>(j) * kThreads;
                v[j] = i < vocab ? static_cast<float>(x[i]) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < kUnroll; ++j) {
                const int64_t i = base + static_cast<int64_t>(j) * kThreads;
                if (i >= vocab) continue;
                const float p = expf((v[j] - m) - ls);
                const float d = ignored ? 0.0f : invalid ? NAN : (p - (i == t ? 1.0f : 0.0f)) * scale;
                g[i] = static_cast<T>(d);
            }
        }
    }
}

int grid_for(int64_t rows) { return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, 65535))); }

template <typename F>
void with_dtype(const torch::Tensor& logits, F&& f)
{
    switch (logits.scalar_type()) {
    case torch::kBFloat16: f(static_cast<const c10::BFloat16*>(nullptr)); break;
    case torch::kHalf: f(static_cast<const c10::Half*>(nullptr)); break;
    default: TORCH_CHECK(false, "cuda_kernels: cross entropy over BF16 or FP16 logits");
    }
}

void check_arguments(const torch::Tensor& logits, const torch::Tensor& targets)
{
    TORCH_CHECK(on_kernel_device(logits) && logits.is_contiguous() && logits.dim() == 2,
                "cuda_kernels: cross entropy over contiguous (R, V) CUDA logits");
    TORCH_CHECK(targets.device() == logits.device() && targets.scalar_type() == torch::kInt64 && targets.dim() == 1 &&
                    targets.size(0) == logits.size(0) && targets.is_contiguous(),
                "cuda_kernels: cross entropy takes (R) int64 targets on the logits' device");
}

} // namespace

CrossEntropyRows cross_entropy_rows(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index)
{
    check_arguments(logits, targets);
    const c10::cuda::CUDAGuard guard(logits.device());
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    const auto f32 = logits.options().dtype(torch::kFloat32);
    CrossEntropyRows out{torch::empty({rows}, f32), torch::empty({rows}, f32), torch::empty({rows}, f32),
                         torch::empty({rows}, f32)};
    if (rows == 0) return out;
    TORCH_CHECK(vocab > 0, "cuda_kernels: cross entropy over an empty vocabulary");
    const auto stream = at::cuda::getCurrentCUDAStream();
    with_dtype(logits, [&](const auto* tag) {
        using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
        MANTISSA_LAUNCH(grid_for(rows), kThreads, stream, rows_forward<T>)(
            reinterpret_cast<const T*>(logits.data_ptr()), targets.data_ptr<int64_t>(), rows, vocab, ignore_index,
            out.row_loss.data_ptr<float>(), out.row_max.data_ptr<float>(), out.log_sum.data_ptr<float>(),
            out.log_z.data_ptr<float>());
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

torch::Tensor cross_entropy_backward(const torch::Tensor& logits, const torch::Tensor& targets,
                                     const torch::Tensor& row_max, const torch::Tensor& log_sum,
                                     const torch::Tensor& grad_loss, const torch::Tensor& count, int64_t ignore_index)
{
    check_arguments(logits, targets);
    const c10::cuda::CUDAGuard guard(logits.device());
    const int64_t rows = logits.size(0), vocab = logits.size(1);
    auto grad = torch::empty_like(logits);
    if (rows == 0 || vocab == 0) return grad;
    const auto as_f32 = [&](const torch::Tensor& t) { return t.to(logits.device(), torch::kFloat32).contiguous(); };
    const auto m = as_f32(row_max), ls = as_f32(log_sum), g = as_f32(grad_loss), n = as_f32(count);
    const auto stream = at::cuda::getCurrentCUDAStream();
    with_dtype(logits, [&](const auto* tag) {
        using T = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
        MANTISSA_LAUNCH(grid_for(rows), kThreads, stream, rows_backward<T>)(
            reinterpret_cast<const T*>(logits.data_ptr()), targets.data_ptr<int64_t>(), m.data_ptr<float>(),
            ls.data_ptr<float>(), g.data_ptr<float>(), n.data_ptr<float>(), rows, vocab, ignore_index,
            reinterpret_cast<T*>(grad.data_ptr()));
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return grad;
}

} // namespace mantissa::cuda_kernels
