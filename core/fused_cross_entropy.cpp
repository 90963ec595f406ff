// SPDX-License-Identifier: GPL-3.0-or-later
#include "fused_cross_entropy.h"

#ifdef MANTISSA_CUDA_KERNELS
#include "cuda/cross_entropy.h"
#include "kernel_probe.h"
#endif

namespace mantissa {

#ifdef MANTISSA_CUDA_KERNELS
namespace {

constexpr int64_t kIgnoreIndex = -100; // cross_entropy's default, which the ops' route keeps

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets)
    {
        const auto rows = cuda_kernels::cross_entropy_rows(logits, targets, kIgnoreIndex);
        const auto count = targets.ne(kIgnoreIndex).sum().to(torch::kFloat32); // () on the device: no sync
        ctx->save_for_backward({logits, targets, rows.log_z, count});
        return rows.row_loss.sum() / count;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        const auto saved = ctx->get_saved_variables();
        return {cuda_kernels::cross_entropy_backward(saved[0], saved[1], saved[2], grads[0], saved[3], kIgnoreIndex),
                torch::Tensor()};
    }
};

// The kernels against cross_entropy over the widened logits, forward and backward, in both
// 16-bit dtypes: rows of a few scales (up to +-60), a row whose target holds its largest
// logit by far, an ignored row, a vocabulary that is no multiple of the kernels' strides.
bool kernels_agree()
{
    const torch::AutoGradMode grad(true);
    const auto opts = torch::TensorOptions().device(torch::kCUDA);
    const int64_t rows = 24;
    for (const int64_t vocab : {int64_t(1000), int64_t(50304)})
        for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
            const auto i = torch::arange(rows * vocab, opts.dtype(torch::kFloat32)).view({rows, vocab});
            auto base = torch::sin(i * 0.37f) * torch::exp2(torch::remainder(torch::floor(i / vocab), 7.0f) - 1.0f);
            auto targets = torch::remainder(torch::arange(rows, opts.dtype(torch::kInt64)) * 7919, vocab);
            base[3][targets[3].item<int64_t>()].fill_(60.0f);
            targets[5].fill_(kIgnoreIndex);
            const auto logits = base.to(dtype);
            auto ours = logits.clone().requires_grad_(true), theirs = logits.clone().requires_grad_(true);
            const auto loss = FusedCrossEntropy::apply(ours, targets);
            const auto reference = torch::nn::functional::cross_entropy(theirs.to(torch::kFloat32), targets);
            loss.backward();
            reference.backward();
            const double a = loss.item<double>(), b = reference.item<double>();
            if (!(std::abs(a - b) <= 1e-5 * std::abs(b))) return false;
            const auto g = ours.grad().to(torch::kFloat32), r = theirs.grad().to(torch::kFloat32);
            // A step of the 16-bit format (the two round FP32 values a few ulps apart), or a
            // millionth of the largest gradient.
            const double step = dtype == torch::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
            const auto allowed = r.abs() * (2.0 * step) + 1e-6 * r.abs().max();
            if (!(g - r).abs().le(allowed).all().item<bool>()) return false;
            if (!g[5].eq(0).all().item<bool>()) return false;
        }
    return true;
}

} // namespace
#endif

bool fused_cross_entropy_available()
{
#ifdef MANTISSA_CUDA_KERNELS
    static const bool agrees = torch::cuda::is_available() && kernel_agrees("cross entropy", [] { return kernels_agree(); });
    return agrees;
#else
    return false;
#endif
}

torch::Tensor fused_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets)
{
#ifdef MANTISSA_CUDA_KERNELS
    return FusedCrossEntropy::apply(logits, targets);
#else
    (void)logits;
    (void)targets;
    TORCH_CHECK(false, "fused_cross_entropy: built without Mantissa's CUDA kernels");
#endif
}

} // namespace mantissa
