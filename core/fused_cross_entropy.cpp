// SPDX-License-Identifier: GPL-3.0-or-later
#include "fused_cross_entropy.h"

#include <cmath>
#include <limits>

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

// The rows' losses and log Z come in already computed (fused_cross_entropy), so that telemetry
// can read log Z without another pass over the logits.
struct FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                                 const torch::Tensor& row_loss, const torch::Tensor& row_max,
                                 const torch::Tensor& log_sum)
    {
        const auto count = targets.ne(kIgnoreIndex).sum().to(torch::kFloat32); // () on the device: no sync
        ctx->save_for_backward({logits, targets, row_max, log_sum, count});
        return row_loss.sum() / count;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        const auto s = ctx->get_saved_variables();
        return {cuda_kernels::cross_entropy_backward(s[0], s[1], s[2], s[3], grads[0], s[4], kIgnoreIndex),
                torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
};

torch::Tensor apply_fused(const torch::Tensor& logits, const torch::Tensor& targets, torch::Tensor* log_z)
{
    const auto rows = cuda_kernels::cross_entropy_rows(logits.detach(), targets, kIgnoreIndex);
    if (log_z) *log_z = rows.log_z;
    return FusedCrossEntropy::apply(logits, targets, rows.row_loss, rows.row_max, rows.log_sum);
}

// The kernels against cross_entropy over the widened logits, forward and backward (the loss
// scaled by 1024, as a loss scale would), in both 16-bit dtypes: rows of a few scales, a row
// whose target holds a logit of 60 (p = 1), a confident row (1 - p about 1e-3, where the
// target's gradient cancels), an ignored row, vocabularies that are no multiple of the
// kernels' strides; then a NaN logit, which must make the loss and its row's gradient NaN.
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
            base[7][targets[7].item<int64_t>()].fill_(std::log(static_cast<double>(vocab)) + 7.0);
            targets[5].fill_(kIgnoreIndex);
            const auto logits = base.to(dtype);
            auto ours = logits.clone().requires_grad_(true), theirs = logits.clone().requires_grad_(true);
            torch::Tensor log_z;
            const auto loss = apply_fused(ours, targets, &log_z);
            const auto reference = torch::nn::functional::cross_entropy(theirs.to(torch::kFloat32), targets);
            (loss * 1024.0f).backward();
            (reference * 1024.0f).backward();
            const double a = loss.item<double>(), b = reference.item<double>();
            if (!(std::abs(a - b) <= 1e-5 * std::abs(b))) return false;
            const auto g = ours.grad().to(torch::kFloat32), r = theirs.grad().to(torch::kFloat32);
            // A step of the 16-bit format (the two round FP32 values a few ulps apart; FP16's
            // subnormal step below 2^-14), or a millionth of the largest gradient.
            const double step = dtype == torch::kBFloat16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10);
            const double subnormal_step = dtype == torch::kHalf ? std::ldexp(1.0, -24) : 0.0;
            const auto allowed = r.abs() * step + 1e-6 * r.abs().max() + subnormal_step;
            if (!(g - r).abs().le(allowed).all().item<bool>()) return false;
            if (!g[5].eq(0).all().item<bool>()) return false;
            const auto expected_log_z = theirs.detach().to(torch::kFloat32).logsumexp(-1);
            if (!(log_z - expected_log_z).abs().le(1e-5 * expected_log_z.abs() + 1e-6).all().item<bool>()) return false;
            // A NaN logit: the loss and that row's gradient are NaN, as the ops'.
            auto poisoned = logits.clone();
            poisoned[2][11].fill_(std::numeric_limits<float>::quiet_NaN());
            poisoned.requires_grad_(true);
            const auto nan_loss = apply_fused(poisoned, targets, nullptr);
            nan_loss.backward();
            if (!std::isnan(nan_loss.item<double>()) || !poisoned.grad()[2].isnan().all().item<bool>()) return false;
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

torch::Tensor fused_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, torch::Tensor* log_z)
{
#ifdef MANTISSA_CUDA_KERNELS
    return apply_fused(logits, targets, log_z);
#else
    (void)logits;
    (void)targets;
    (void)log_z;
    TORCH_CHECK(false, "fused_cross_entropy: built without Mantissa's CUDA kernels");
#endif
}

} // namespace mantissa
