// SPDX-License-Identifier: GPL-3.0-or-later
#include "tensor_stats.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>

#include <ATen/Parallel.h>

namespace mantissa {
namespace {

constexpr int kBins = kMaxExponent - kMinExponent + 1;

// Everything one pass over the data accumulates; chunks are merged at the end.
struct Accumulator {
    std::array<int64_t, kBins> bins{};
    int64_t zeros = 0, infs = 0, nans = 0, underflow = 0, subnormal = 0, overflow = 0, compared = 0;
    double amax = 0.0, err_energy = 0.0, signal = 0.0;

    void merge(const Accumulator& o)
    {
        for (int i = 0; i < kBins; ++i) bins[static_cast<size_t>(i)] += o.bins[static_cast<size_t>(i)];
        zeros += o.zeros, infs += o.infs, nans += o.nans;
        underflow += o.underflow, subnormal += o.subnormal, overflow += o.overflow, compared += o.compared;
        amax = std::max(amax, o.amax);
        err_energy += o.err_energy, signal += o.signal;
    }
};

// floor(log2|v|) of a finite non-zero float, straight from its bits (exact for subnormals).
int exponent_of(float v)
{
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    const int biased = static_cast<int>((bits >> 23) & 0xFF);
    if (biased != 0) return biased - 127;
    const uint32_t mantissa = bits & 0x7FFFFF;
    return (31 - std::countl_zero(mantissa)) - 149;
}

} // namespace

TensorStats compute_tensor_stats(const torch::Tensor& x_in, NumberFormat format, float scale,
                                 const torch::Tensor& dequantized)
{
    torch::NoGradGuard no_grad;
    TensorStats s;
    s.format = format_name(format);
    s.scale = scale;
    const auto x = x_in.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    s.count = x.numel();
    if (s.count == 0) return s;
    const bool compare = dequantized.defined() && format != NumberFormat::FP32;
    const auto q = compare ? dequantized.detach().to(torch::kCPU, torch::kFloat32).contiguous() : torch::Tensor();
    const float* xp = x.data_ptr<float>();
    const float* qp = compare ? q.data_ptr<float>() : nullptr;
    const FormatInfo& info = format_info(format);
    const bool scaled_domain = scale > 0.0f; // per-row/block FP8 scales differ per element
    const double min_normal = info.min_normal, max_finite = info.max_finite;

    // One pass, in parallel chunks: this runs on the telemetry cadence inside the step.
    Accumulator total;
    std::mutex merge_mutex;
    at::parallel_for(0, s.count, 1 << 15, [&](int64_t begin, int64_t end) {
        Accumulator a;
        for (int64_t i = begin; i < end; ++i) {
            const float v = xp[i];
            if (std::isnan(v)) { ++a.nans; continue; }
            if (std::isinf(v)) { ++a.infs; continue; }
            const double mag = std::fabs(static_cast<double>(v));
            if (v == 0.0f) ++a.zeros;
            else {
                ++a.bins[static_cast<size_t>(exponent_of(v) - kMinExponent)];
                a.amax = std::max(a.amax, mag);
            }
            if (!qp) continue;
            const float r = qp[i];
            if (!std::isfinite(r)) { ++a.overflow; continue; }
            if (v != 0.0f && r == 0.0f) ++a.underflow;
            if (scaled_domain) {
                const double rv = std::fabs(static_cast<double>(r) * scale);
                if (rv != 0.0 && rv < min_normal) ++a.subnormal;
                if (mag * scale > max_finite) ++a.overflow;
            }
            const double e = static_cast<double>(v) - static_cast<double>(r);
            a.err_energy += e * e; // FP64: squares of values near FP32's max overflow FP32
            a.signal += mag * mag;
            ++a.compared;
        }
        std::lock_guard lock(merge_mutex);
        total.merge(a);
    });

    s.zeros = total.zeros;
    s.infs = total.infs;
    s.nans = total.nans;
    s.amax = total.amax;
    const auto first = std::find_if(total.bins.begin(), total.bins.end(), [](int64_t c) { return c != 0; });
    if (first != total.bins.end()) {
        const auto last = std::find_if(total.bins.rbegin(), total.bins.rend(), [](int64_t c) { return c != 0; }).base();
        s.first_exponent = static_cast<int>(first - total.bins.begin()) + kMinExponent;
        s.exponent_counts.assign(first, last);
    }
    if (!compare) {
        s.quant_snr_db = std::numeric_limits<double>::infinity();
        return s;
    }
    const double n = static_cast<double>(s.count);
    s.underflow = static_cast<double>(total.underflow) / n;
    s.subnormal = scaled_domain ? static_cast<double>(total.subnormal) / n : -1.0;
    s.overflow = static_cast<double>(total.overflow) / n;
    s.quant_mse = total.compared ? total.err_energy / static_cast<double>(total.compared) : 0.0;
    s.quant_snr_db = total.err_energy > 0 ? 10.0 * std::log10(total.signal / total.err_energy)
                                          : std::numeric_limits<double>::infinity();
    return s;
}

} // namespace mantissa
