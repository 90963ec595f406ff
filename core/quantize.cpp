// SPDX-License-Identifier: GPL-3.0-or-later
#include "quantize.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <limits>

#include "fp8_rounder.h"
#include "vector_clones.h"

namespace mantissa {
namespace {

constexpr int64_t kGrain = 32768; // elements per parallel task: a few microseconds of work

// A tensor whose result needs no autograd history: one that needs no gradient, or any under
// no-grad (a custom Function's forward and backward, where the emulator's casts run).
bool untracked(const torch::Tensor& x) { return !x.requires_grad() || !torch::GradMode::is_enabled(); }

// An FP32 CPU tensor a fused pass may take, in whatever layout (Auto).
bool fusable_cpu(const torch::Tensor& x, RoundKernel kernel)
{
    return kernel == RoundKernel::Auto && x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && untracked(x);
}

bool fused_cpu(const torch::Tensor& x, RoundKernel kernel) { return fusable_cpu(x, kernel) && x.is_contiguous(); }

MANTISSA_VECTOR_CLONES
void bf16_range(const float* x, float* out, int64_t begin, int64_t end)
{
    for (int64_t i = begin; i < end; ++i) out[i] = rounding::round_bf16(x[i]);
}

// out = round(x * scale) * inverse, in that order of roundings (as the tensor ops).
MANTISSA_VECTOR_CLONES
void fp8_range(const float* x, float* out, int64_t begin, int64_t end, NumberFormat format, float scale, float inverse)
{
    const rounding::Fp8Rounder round(format);
    for (int64_t i = begin; i < end; ++i) out[i] = round(x[i] * scale) * inverse;
}

MANTISSA_VECTOR_CLONES
float amax_range(const float* x, int64_t begin, int64_t end)
{
    // Sixteen running maxima, so that the loop is one vector max per 16 values (a max is exact,
    // so the order of the reduction does not matter; GCC will not reorder a float reduction
    // by itself). `a > m` is false for NaN: skipped, as fmax would, without its library call.
    float m[16] = {};
    int64_t i = begin;
    for (; i + 16 <= end; i += 16)
        for (int j = 0; j < 16; ++j) {
            const float a = std::fabs(x[i + j]);
            m[j] = a > m[j] ? a : m[j];
        }
    for (; i < end; ++i) {
        const float a = std::fabs(x[i]);
        m[0] = a > m[0] ? a : m[0];
    }
    float out = 0.0f;
    for (float v : m) out = v > out ? v : out;
    return out;
}

c10::ScalarType torch_dtype(NumberFormat format)
{
    switch (format) {
    case NumberFormat::BF16: return torch::kBFloat16;
    case NumberFormat::FP16: return torch::kHalf;
    case NumberFormat::E4M3: return torch::kFloat8_e4m3fn;
    case NumberFormat::E5M2: return torch::kFloat8_e5m2;
    default: return torch::kFloat32;
    }
}

} // namespace

torch::Tensor round_to_tf32(const torch::Tensor& x)
{
    // Keep 10 of the 23 mantissa bits: add half an ulp of the kept part to the magnitude and
    // truncate. A carry into the exponent is the correct rounding, up to inf at the top.
    auto bits = x.contiguous().view(torch::kInt32);
    auto rounded = torch::bitwise_and(bits + 0x1000, ~int32_t(0x1FFF));
    const auto finite = torch::isfinite(x);
    return torch::where(finite, rounded.view(torch::kFloat32), x);
}

namespace {

// bf16_range over n elements, split over the threads (out may be x: in place).
void bf16_pass(const float* x, float* out, int64_t n)
{
    at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) { bf16_range(x, out, begin, end); });
}

// BF16 rounding of an FP32 CPU tensor in the layout x.to() gives it (empty_like's: a dense
// tensor keeps its strides, another gets dense ones in the same order): a dense one, contiguous
// or not, in one pass over its block, or one whose rows along the last dimension are
// contiguous in both (attention's q, k and v, column slices of the fused qkv projection) row
// by row. Else undefined. One pass instead of LibTorch's two casts (FP32 -> BF16 -> FP32).
torch::Tensor round_bf16_strided(const torch::Tensor& x_in)
{
    const float* x = x_in.data_ptr<float>();
    auto out = torch::empty_like(x_in);
    float* o = out.data_ptr<float>();
    if (x_in.is_non_overlapping_and_dense()) { // contiguous ones included
        bf16_pass(x, o, x_in.numel());
        return out;
    }
    if (x_in.dim() < 2 || x_in.size(-1) == 0 || x_in.stride(-1) != 1 || out.stride(-1) != 1) return {};
    const int64_t cols = x_in.size(-1), rows = x_in.numel() / cols, lead = x_in.dim() - 1;
    const auto sizes = x_in.sizes();
    const auto in_strides = x_in.strides();
    const auto out_strides = out.strides();
    at::parallel_for(0, rows, std::max<int64_t>(1, kGrain / cols), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
            int64_t in_offset = 0, out_offset = 0, rest = r;
            for (int64_t d = lead - 1; d >= 0; --d) { // row r's index in the leading dimensions
                const int64_t i = rest % sizes[d];
                rest /= sizes[d];
                in_offset += i * in_strides[d];
                out_offset += i * out_strides[d];
            }
            bf16_range(x + in_offset, o + out_offset, 0, cols);
        }
    });
    return out;
}

} // namespace

torch::Tensor round_result_to_format(torch::Tensor y, NumberFormat format)
{
    if (format != NumberFormat::BF16 || !fused_cpu(y, RoundKernel::Auto) || y.use_count() != 1 ||
        y.storage().use_count() != 1)
        return round_to_format(y, format, Overflow::Propagate);
    float* p = y.data_ptr<float>();
    bf16_pass(p, p, y.numel());
    return y;
}

torch::Tensor round_to_format(const torch::Tensor& x_in, NumberFormat format, Overflow overflow, RoundKernel kernel)
{
    const bool fp8_saturated = format_info(format).is_fp8 && overflow == Overflow::Saturate;
    if (fp8_saturated && fused_cpu(x_in, kernel)) return scaled_round_saturated(x_in, 1.0f, format, kernel);
    // The fused BF16 pass rounds past max to Inf: a saturated cast takes the clamp below.
    if (format == NumberFormat::BF16 && overflow == Overflow::Propagate && fusable_cpu(x_in, kernel))
        if (auto out = round_bf16_strided(x_in); out.defined()) return out;
    const auto x = x_in.to(torch::kFloat32);
    const FormatInfo& info = format_info(format);
    switch (format) {
    case NumberFormat::FP32:
        return x;
    case NumberFormat::TF32: {
        auto r = round_to_tf32(x);
        return overflow == Overflow::Saturate ? r.clamp(-info.max_finite, info.max_finite) : r;
    }
    default:
        break;
    }
    const double max = info.max_finite;
    if (overflow == Overflow::Saturate) {
        // clamp keeps NaN as NaN and turns +-inf into +-max, as the FP8 recipes do.
        return x.clamp(-max, max).to(torch_dtype(format)).to(torch::kFloat32);
    }
    auto r = x.to(torch_dtype(format)).to(torch::kFloat32);
    if (format == NumberFormat::E4M3) {
        // Without saturation anything that rounds past 448 has no encoding but NaN. The
        // rounding midpoint between 448 and the next binade step (480) is 464, a tie that
        // goes to even (448).
        const auto overflowed = x.abs() > 464.0; // true for +-inf too
        r = r.masked_fill(overflowed, std::numeric_limits<float>::quiet_NaN());
    }
    return r;
}

torch::Tensor scaled_round_saturated(const torch::Tensor& x_in, float scale, NumberFormat format, RoundKernel kernel)
{
    TORCH_CHECK(format_info(format).is_fp8, "scaled_round_saturated needs an FP8 format");
    const float inverse = 1.0f / scale;
    if (!fused_cpu(x_in, kernel)) {
        const auto x = x_in.to(torch::kFloat32);
        // A float scalar multiplies in FP32, as the fused pass and the () FP32 scale tensor did.
        return round_to_format(x * scale, format, Overflow::Saturate, RoundKernel::TensorOps) * inverse;
    }
    auto out = torch::empty_like(x_in);
    const float* x = x_in.data_ptr<float>();
    float* o = out.data_ptr<float>();
    at::parallel_for(0, x_in.numel(), kGrain,
                     [&](int64_t begin, int64_t end) { fp8_range(x, o, begin, end, format, scale, inverse); });
    return out;
}

torch::Tensor amax_ignoring_nan(const torch::Tensor& x, RoundKernel kernel)
{
    if (x.numel() == 0) return torch::zeros({}, x.options().dtype(torch::kFloat32));
    if (!fused_cpu(x, kernel)) {
        const auto a = x.abs();
        return a.masked_fill(a.isnan(), 0.0).max().to(torch::kFloat32);
    }
    const float* p = x.data_ptr<float>();
    // Partial maxima per task, then their max: max is exact, so the order does not matter.
    const float m = at::parallel_reduce(
        0, x.numel(), kGrain, 0.0f, [&](int64_t begin, int64_t end, float) { return amax_range(p, begin, end); },
        [](float a, float b) { return std::fmax(a, b); });
    return torch::tensor(m);
}

} // namespace mantissa
