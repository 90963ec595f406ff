// SPDX-License-Identifier: GPL-3.0-or-later
#include "tensor_stats.h"

#include <cmath>

namespace mantissa {

TensorStats compute_tensor_stats(const torch::Tensor& x_in, NumberFormat format, float scale,
                                 const torch::Tensor& dequantized)
{
    torch::NoGradGuard no_grad;
    TensorStats s;
    s.format = format_name(format);
    s.scale = scale;
    const auto x = x_in.detach().to(torch::kFloat32).reshape({-1}).cpu();
    s.count = x.numel();
    if (s.count == 0) return s;
    const auto finite = torch::isfinite(x);
    s.nans = torch::isnan(x).sum().item<int64_t>();
    s.infs = torch::isinf(x).sum().item<int64_t>();
    s.zeros = x.eq(0).sum().item<int64_t>();

    const auto magnitudes = x.abs().masked_select(finite & x.ne(0));
    if (magnitudes.numel() > 0) {
        s.amax = magnitudes.max().item<double>();
        // frexp: |x| = m * 2^e with m in [0.5, 1), so floor(log2|x|) = e - 1, exact for subnormals too.
        const auto exponents = std::get<1>(torch::frexp(magnitudes)).to(torch::kLong) - 1;
        const int64_t lo = exponents.min().item<int64_t>();
        const auto counts = torch::bincount(exponents - lo);
        s.first_exponent = static_cast<int>(lo);
        s.exponent_counts.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
    }

    if (!dequantized.defined() || format == NumberFormat::FP32) {
        s.quant_snr_db = std::numeric_limits<double>::infinity();
        return s;
    }
    const auto q = dequantized.detach().to(torch::kFloat32).reshape({-1}).cpu();
    const FormatInfo& info = format_info(format);
    const double n = static_cast<double>(s.count);
    s.underflow = (x.ne(0) & finite & q.eq(0)).sum().item<double>() / n;
    if (scale > 0.0f) {
        // In the scaled domain, where the format's ranges apply.
        const auto v = x * scale;
        const auto qv = (q * scale).abs();
        s.subnormal = (qv.ne(0) & (qv < info.min_normal)).sum().item<double>() / n;
        s.overflow = ((finite & (v.abs() > info.max_finite)) | (finite & ~torch::isfinite(q))).sum().item<double>() / n;
    } else {
        // Per-row and per-block scales differ by element: only the ones that broke are counted.
        s.subnormal = -1.0;
        s.overflow = (finite & ~torch::isfinite(q)).sum().item<double>() / n;
    }
    // In FP64: squared errors of values near FP32's max overflow FP32.
    const auto both = finite & torch::isfinite(q);
    const auto err = (x.to(torch::kFloat64) - q.to(torch::kFloat64)).masked_select(both);
    const auto ref = x.to(torch::kFloat64).masked_select(both);
    const double err_energy = err.square().sum().item<double>();
    const double signal = ref.square().sum().item<double>();
    s.quant_mse = err.numel() ? err_energy / static_cast<double>(err.numel()) : 0.0;
    s.quant_snr_db = err_energy > 0 ? 10.0 * std::log10(signal / err_energy) : std::numeric_limits<double>::infinity();
    return s;
}

} // namespace mantissa
