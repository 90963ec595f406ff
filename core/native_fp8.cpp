// SPDX-License-Identifier: GPL-3.0-or-later
#include "native_fp8.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "first_line.h"
#include "kernel_probe.h"
#include "layer_gemm.h"
#ifdef MANTISSA_CUDA_KERNELS
#include "cuda/delayed_scaling.h"
#include "cuda/fp8_cast.h"
#endif

namespace mantissa {

namespace {

c10::ScalarType fp8_dtype(NumberFormat f) { return f == NumberFormat::E4M3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2; }

bool column_major(const torch::Tensor& t) { return t.dim() == 2 && t.stride(0) == 1 && t.stride(1) == t.size(0); }

} // namespace

torch::Tensor Fp8Tensor::dequantized() const { return codes.to(torch::kFloat32) * inv_scale; }

c10::ScalarType activation_dtype(NumberFormat format)
{
    switch (format) {
    case NumberFormat::BF16:
    case NumberFormat::E4M3:
    case NumberFormat::E5M2: return torch::kBFloat16;
    case NumberFormat::FP16: return torch::kHalf;
    default: return torch::kFloat32;
    }
}

void DeviceDelayedScaling::upload(const DelayedScaling& host, const torch::Device& device)
{
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
    // Uploaded inside a step (the first after a load or a precision change): from pinned
    // memory without waiting, as a pageable copy would make the host wait for the GPU.
    auto history = torch::tensor(host.history(), f32);
    history_ = device.is_cuda() && history.numel() > 0 ? history.pin_memory().to(device, /*non_blocking=*/true)
                                                       : history.to(device);
    if (history_.numel() == 0) history_ = torch::zeros({1}, f32.device(device));
    scale_ = torch::full({}, host.scale(), f32.device(device));
    inv_scale_ = scale_.reciprocal();
}

void DeviceDelayedScaling::rescale(float ratio)
{
    if (!defined() || !std::isfinite(ratio) || ratio <= 0.0f) return;
    const auto recorded = (scale_ != 1.0f) | (torch::isfinite(history_) & (history_ != 0.0f)).any();
    history_ = history_ * ratio;
    // A () tensor divisor: CUDA divides by a CPU scalar as a * (1 / b), an ulp from the host's
    // a / b where b is not a power of two (init_scale 1000).
    const auto divided = torch::clamp(scale_ / torch::full({}, ratio, scale_.options()),
                                      std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max());
    scale_ = torch::where(recorded, divided, scale_);
    inv_scale_ = scale_.reciprocal();
}

void DeviceDelayedScaling::download(DelayedScaling& host) const
{
    if (!defined()) return;
    const auto h = history_.to(torch::kCPU).contiguous();
    host.restore(std::vector<float>(h.data_ptr<float>(), h.data_ptr<float>() + h.numel()), scale_.item<float>());
}

namespace {

// DeviceDelayedScaling::record in LibTorch ops: a new history (nothing that used the old
// scale, e.g. a cast saved for the backward, is overwritten) and its scale.
std::pair<torch::Tensor, torch::Tensor> record_with_ops(const torch::Tensor& amax, const torch::Tensor& history,
                                                        const torch::Tensor& scale, double fp8_max, bool use_max,
                                                        int64_t margin)
{
    auto rolled = torch::cat({amax.reshape({1}).to(torch::kFloat32), history.narrow(0, 0, history.size(0) - 1)});
    // fmax over the window, as the host's: NaN entries skipped, an inf wins (and keeps the
    // previous scale while it is in the window), all zero/NaN reduces to 0.
    const auto reduced = use_max ? rolled.masked_fill(rolled.isnan(), 0.0f).max() : rolled[0];
    auto next = device_scale_from_amax(reduced, fp8_max, margin, scale);
    return {std::move(rolled), std::move(next)};
}

#ifdef MANTISSA_CUDA_KERNELS
float scaled_max_of(double fp8_max, int64_t margin)
{
    return std::ldexp(static_cast<float>(fp8_max), -static_cast<int>(margin));
}

// The one-launch record against the ops it replaces, once per process, on crafted windows
// (zeros, NaN, inf, amaxes too small for a finite quotient, a full 1,024 window) and every
// branch of the rule: any difference and the ops stay.
bool fused_record_agrees(const torch::Device& device)
{
    static const bool agrees = kernel_agrees("delayed-scaling record", [&] {
        const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
        const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
        const auto long_window = torch::exp2(torch::linspace(-130.0, 20.0, 1024)).to(device);
        std::vector<torch::Tensor> by_ops, by_kernel; // compared in one read-back at the end
        for (const auto& window : {torch::tensor({0.0f}), torch::tensor({3.0f, nan, 0.0f, 1e-38f, 7.5f, 0.0f, nan, 2.0f}),
                                   torch::tensor({nan, nan, nan}), torch::tensor({0.0f, inf, 5.0f, 0.0f})}) {
            for (const auto& history : {window.to(device), long_window})
                for (float a : {nan, inf, 0.0f, 1e-38f, 3.0f, 448.0f, 6e4f})
                    for (float previous : {1.0f, inf, 2.5f})
                        for (bool use_max : {true, false})
                            for (double fp8_max : {448.0, 57344.0})
                                for (int64_t margin : {0, 2}) {
                                    const auto amax = torch::full({}, a, opts), prev = torch::full({}, previous, opts);
                                    const auto ops = record_with_ops(amax, history, prev, fp8_max, use_max, margin);
                                    const auto own = cuda_kernels::record_amax(amax, history, prev,
                                                                               scaled_max_of(fp8_max, margin), use_max);
                                    by_ops.insert(by_ops.end(), {ops.first, ops.second.reshape({1}),
                                                                 ops.second.reciprocal().reshape({1})});
                                    by_kernel.insert(by_kernel.end(), {own.history, own.scale.reshape({1}),
                                                                       own.inv_scale.reshape({1})});
                                }
        }
        return torch::equal(torch::cat(by_ops).view(torch::kInt32).cpu(), torch::cat(by_kernel).view(torch::kInt32).cpu());
    });
    return agrees;
}
#endif

} // namespace

void DeviceDelayedScaling::record(const torch::Tensor& amax, double fp8_max, bool use_max, int64_t margin)
{
    if (journal_on_) journal_.push_back({amax.reshape({}).to(torch::kFloat32), fp8_max, use_max, margin});
#ifdef MANTISSA_CUDA_KERNELS
    if (history_.is_cuda() && history_.is_contiguous() && fused_record_agrees(history_.device())) {
        auto r = cuda_kernels::record_amax(amax, history_, scale_, scaled_max_of(fp8_max, margin), use_max);
        history_ = std::move(r.history);
        scale_ = std::move(r.scale);
        inv_scale_ = std::move(r.inv_scale);
        return;
    }
#endif
    std::tie(history_, scale_) = record_with_ops(amax, history_, scale_, fp8_max, use_max, margin);
    inv_scale_ = scale_.reciprocal();
}

void DeviceDelayedScaling::begin_journal()
{
    journal_on_ = true;
    journal_.clear();
    journal_history_ = history_;
    journal_scale_ = scale_;
    journal_inv_scale_ = inv_scale_;
}

torch::Tensor DeviceDelayedScaling::journal_amaxes() const
{
    if (journal_.empty()) return torch::empty({0}, history_.options());
    std::vector<torch::Tensor> amaxes;
    for (const auto& r : journal_) amaxes.push_back(r.amax.reshape({1}));
    const auto all = torch::cat(amaxes);
    return all.masked_fill(all.isnan(), -1.0f);
}

void DeviceDelayedScaling::replay(const torch::Tensor& reduced)
{
    const auto records = std::move(journal_);
    journal_.clear();
    journal_on_ = false;
    history_ = journal_history_;
    scale_ = journal_scale_;
    inv_scale_ = journal_inv_scale_;
    journal_history_ = journal_scale_ = journal_inv_scale_ = torch::Tensor();
    const auto amaxes = reduced.masked_fill(reduced == -1.0f, std::numeric_limits<float>::quiet_NaN());
    for (size_t i = 0; i < records.size(); ++i)
        record(amaxes[static_cast<int64_t>(i)], records[i].fp8_max, records[i].use_max, records[i].margin);
}

torch::Tensor device_scale_from_amax(const torch::Tensor& amax, double fp8_max, int64_t margin,
                                     const torch::Tensor& previous)
{
    constexpr float kMax = std::numeric_limits<float>::max();
    const auto a = amax.to(torch::kFloat32);
    // One float division of an exact float, then FLT_MAX where it overflows: the host's rule.
    const float scaled_max = std::ldexp(static_cast<float>(fp8_max), -static_cast<int>(margin));
    auto scale = torch::full({}, scaled_max, a.options()) / a;
    scale = scale.masked_fill(scale.isinf(), kMax);
    const auto prev = previous.to(torch::kFloat32);
    return torch::where((a > 0) & torch::isfinite(a), scale, prev.masked_fill(prev.isinf(), kMax));
}

torch::Tensor to_fp8_codes(const torch::Tensor& scaled, NumberFormat format, Overflow overflow)
{
    const double max = format_info(format).max_finite;
    if (overflow == Overflow::Saturate) return scaled.clamp(-max, max).to(fp8_dtype(format));
    if (format == NumberFormat::E4M3) {
        // As round_to_format: past the midpoint 464 E4M3 has no code but NaN.
        const auto overflowed = scaled.abs() > 464.0;
        return scaled.masked_fill(overflowed, std::numeric_limits<float>::quiet_NaN()).to(fp8_dtype(format));
    }
    return scaled.to(fp8_dtype(format));
}

#ifdef MANTISSA_CUDA_KERNELS
namespace {

// What the cast probes cast: every binade from 2^-140 to 2^20 with both signs, then the
// formats' edges, subnormals, inf and NaN of both signs (4,111 FP32 values, on the CPU). No
// random numbers: the run's generators must not move.
torch::Tensor crafted_cast_values()
{
    const auto magnitudes = torch::exp2(torch::linspace(-140.0, 20.0, 4096));
    const auto signs = 1.0 - 2.0 * (torch::arange(4096) % 2).to(torch::kFloat32);
    return torch::cat({magnitudes * signs, torch::tensor({0.0f, -0.0f, 1e-45f, 1e-40f, 447.9f, 448.0f, 464.0f, 465.0f,
                                                          57344.0f, 61440.0f, 1e38f, INFINITY, -INFINITY, NAN, -NAN})});
}

// The fused cast against the LibTorch ops it replaces, once per process on crafted values
// (subnormals, the format's edges, inf, NaN, three dtypes): with the hardware's paired
// conversion first, then c10's; any difference in both and the ops stay.
ProbedKernel fused_cast_kernel(const torch::Device& device)
{
    static const ProbedKernel kernel = probe_paired_then_plain("fused FP8 cast", [&](bool paired) {
        const auto base = crafted_cast_values();
        for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kHalf})
            for (bool e4m3 : {true, false})
                for (bool saturate : {true, false})
                    for (float s : {1.0f, 0.37f, 1e4f}) {
                        const auto x = base.to(device, dtype);
                        const auto scale = torch::full({}, s, x.options().dtype(torch::kFloat32));
                        const auto format = e4m3 ? NumberFormat::E4M3 : NumberFormat::E5M2;
                        torch::Tensor amax;
                        const auto fused = cuda_kernels::fused_scale_cast_amax(x, scale, e4m3, saturate, amax, paired);
                        const auto x32 = x.to(torch::kFloat32);
                        const auto ops = to_fp8_codes(x32 * scale, format,
                                                      saturate ? Overflow::Saturate : Overflow::Propagate);
                        const auto want_amax = amax_ignoring_nan(x32).cpu();
                        if (!torch::equal(fused.view(torch::kUInt8).cpu(), ops.view(torch::kUInt8).cpu()) ||
                            !torch::equal(amax.cpu(), want_amax) ||
                            !torch::equal(cuda_kernels::amax_ignoring_nan(x).cpu(), want_amax))
                            return false;
                    }
        // The amax alone where there is nothing to measure: no element, only NaN.
        for (const auto& x : {torch::empty({0}, torch::TensorOptions().device(device)),
                              torch::full({1000}, NAN, torch::TensorOptions().device(device).dtype(torch::kBFloat16))})
            if (cuda_kernels::amax_ignoring_nan(x).item<float>() != 0.0f) return false;
        return true;
    });
    return kernel;
}
bool fused_cast_agrees(const torch::Device& device) { return fused_cast_kernel(device) != ProbedKernel::Unavailable; }
bool fused_cast_paired(const torch::Device& device) { return fused_cast_kernel(device) == ProbedKernel::Paired; }

// The cast-transpose against the fused cast and a transposing copy, on 2-D shapes that leave
// partial tiles on both edges, are one row or column wide or empty, or have more tiles than
// the grid (so that blocks walk several). `tiles_64`: with the 64 x 64 kernel wherever it
// applies (sides multiples of 64, aligned data: the crafted values as 64 x 64, 64 x 128 and
// 128 x 64, a tensor of 2,049 tiles against its grid of 2,048 blocks; the rest and a 64 x 64
// view whose data starts one element into its storage take the general kernel), else with the
// general kernel throughout (the 64 x 64 pass skips the shapes that kernel does not take). The
// two are probed apart: the 64 x 64 kernel converts with the hardware's paired instruction
// only, and if it disagreed the general kernel (which can also convert with c10's, `paired`
// false) would still serve. Any difference and the copy stays. Built and compared on the
// device, so that a run without FP8 pays little for it. The reference is the fused cast as its
// own probe left it.
bool transpose_kernel_agrees(const torch::Device& device, bool tiles_64, bool paired)
{
    const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    const auto base = crafted_cast_values().to(device); // 4,111 values
    // 33 x 131,109: 2 x 4,098 = 8,196 tiles of 32 x 32, partial on both edges, against a
    // grid of at most 8,192 blocks.
    const int64_t big_cols = 4097 * 32 + 5;
    const auto big = torch::exp2(torch::arange(33 * big_cols, opts).fmod(301.0) - 150.0).reshape({33, big_cols});
    const int64_t wide_cols = 2049 * 64; // 64 x 64 tiles, one more than the wide kernel's grid
    const auto wide = torch::exp2(torch::arange(64 * wide_cols, opts).fmod(301.0) - 150.0).reshape({64, wide_cols});
    const auto twice = torch::cat({base, base});
    const std::vector<std::vector<int64_t>> shapes = {{2, 2055}, {2055, 2}, {1, 4110}, {4110, 1}, {0, 7},
                                                      {64, 64}, {64, 128}, {128, 64}};
    for (size_t s = 0; s <= shapes.size() + 2; ++s)
        for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kHalf})
            for (bool e4m3 : {true, false})
                for (bool saturate : {true, false})
                    for (float scale_value : {0.37f, 1e4f}) {
                        const auto crafted = [&](const std::vector<int64_t>& shape) {
                            return twice.narrow(0, 0, shape[0] * shape[1]).reshape(shape).to(dtype);
                        };
                        // A contiguous 64 x 64 view, one element into its storage.
                        const auto unaligned = [&] {
                            return twice.to(dtype).narrow(0, 1, 4096).view({64, 64});
                        };
                        const auto x = s == shapes.size()       ? big.to(dtype)
                                       : s == shapes.size() + 1 ? wide.to(dtype)
                                       : s == shapes.size() + 2 ? unaligned()
                                       : shapes[s][0] == 0      ? torch::empty(shapes[s], opts.dtype(dtype))
                                                                : crafted(shapes[s]);
                        // The 64 x 64 pass takes only what that kernel takes (sides multiples of
                        // 64, aligned): the rest is the general pass's, already done.
                        const bool sides_of_64 = x.size(0) > 0 && x.size(0) % 64 == 0 && x.size(1) % 64 == 0;
                        if (tiles_64 && (!sides_of_64 || s == shapes.size() + 2)) continue;
                        const auto scale = torch::full({}, scale_value, opts);
                        torch::Tensor amax, amax_t, codes_t;
                        const auto codes =
                            cuda_kernels::fused_scale_cast_amax(x, scale, e4m3, saturate, amax, fused_cast_paired(device));
                        const auto both = cuda_kernels::fused_scale_cast_amax_transpose(x, scale, e4m3, saturate,
                                                                                        amax_t, codes_t, tiles_64, paired);
                        if (codes_t.sizes() != torch::IntArrayRef{x.size(1), x.size(0)} ||
                            !torch::equal(both.view(torch::kUInt8), codes.view(torch::kUInt8)) ||
                            !torch::equal(codes_t.view(torch::kUInt8), codes.view(torch::kUInt8).t().contiguous()) ||
                            !torch::equal(amax_t, amax))
                            return false;
                    }
    return true;
}

ProbedKernel fused_transpose_kernel(const torch::Device& device)
{
    static const ProbedKernel kernel =
        fused_cast_agrees(device) ? probe_paired_then_plain("FP8 cast-transpose",
                                                            [&](bool paired) { return transpose_kernel_agrees(device, false, paired); })
                                  : ProbedKernel::Unavailable;
    return kernel;
}
bool fused_transpose_agrees(const torch::Device& device) { return fused_transpose_kernel(device) != ProbedKernel::Unavailable; }

bool transpose_64_agrees(const torch::Device& device)
{
    static const bool agrees = fused_transpose_agrees(device) && kernel_agrees("FP8 cast-transpose, 64 x 64 tiles", [&] {
                                   return transpose_kernel_agrees(device, true,
                                                                  fused_transpose_kernel(device) == ProbedKernel::Paired);
                               });
    return agrees;
}

// The 64 x 64 kernel's column sums (a bias's gradient, from the cast's own read) against the
// FP64 sums of the same values: within the bound of any FP32 summation order, (rows - 1) *
// 2^-24 * sum |x| (Higham), with a column holding a NaN and one holding an Inf summed to NaN and
// Inf as any order sums them. Smooth values, not random ones: a probe leaves the RNG alone.
bool column_sums_agree(const torch::Device& device)
{
    static const bool agrees = transpose_64_agrees(device) && kernel_agrees("FP8 cast-transpose's column sums", [&] {
        const auto opts = torch::TensorOptions().device(device).dtype(torch::kFloat32);
        const bool paired = fused_transpose_kernel(device) == ProbedKernel::Paired;
        for (const auto& shape : {std::vector<int64_t>{64, 64}, std::vector<int64_t>{256, 192}, std::vector<int64_t>{64 * 45, 128}}) {
            const int64_t rows = shape[0], cols = shape[1];
            const auto i = torch::arange(rows * cols, opts);
            auto x = (torch::sin(i * 0.37f) * torch::exp2(torch::remainder(i, 13.0f) - 6.0f)).view({rows, cols});
            x.index_put_({rows - 1, 1}, std::numeric_limits<float>::quiet_NaN());
            x.index_put_({rows / 2, 2}, std::numeric_limits<float>::infinity());
            for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kHalf}) {
                const auto xd = x.to(dtype);
                torch::Tensor amax, codes_t, sums;
                cuda_kernels::fused_scale_cast_amax_transpose(xd, torch::full({}, 0.5f, opts), false, true, amax, codes_t,
                                                              /*tiles_64=*/true, paired, &sums);
                if (!sums.defined() || sums.sizes() != torch::IntArrayRef{cols}) return false;
                const auto x64 = xd.to(torch::kFloat64);
                const auto exact = x64.sum(0), got = sums.to(torch::kFloat64);
                const auto bound = x64.abs().sum(0) * (static_cast<double>(rows - 1) * std::ldexp(1.0, -24));
                const auto finite = torch::isfinite(exact);
                const bool same_non_finite = torch::equal(torch::isnan(got), torch::isnan(exact)) &&
                                             torch::equal(got.masked_select(torch::isinf(exact)), exact.masked_select(torch::isinf(exact)));
                const bool within = ((got - exact).abs() <= bound).logical_or(~finite).all().item<bool>();
                if (!same_non_finite || !within) return false;
            }
        }
        return true;
    });
    return agrees;
}

// The GELU cast-transpose (the input of a linear after a GELU, cast from the GELU's input)
// against at::gelu and then the 64 x 64 cast-transpose it stands in for: codes, transposed
// codes and amax to the bit, so that the device's erff and rounding are at::gelu's. On every
// crafted value both ways round (the GELU's own edges: large negative values whose GELU is a
// tiny negative or zero, values where erf saturates, Inf, NaN), in BF16 and FP16, both
// formats, saturating or not, at a scale that is not a power of two and one that pushes the
// largest values past the format; and a tensor of more tiles than the kernel's grid.
bool gelu_cast_agrees(const torch::Device& device)
{
    static const bool agrees = transpose_64_agrees(device) && kernel_agrees("GELU + FP8 cast-transpose", [&] {
        const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
        const auto crafted = crafted_cast_values().to(device);
        const auto ramp = torch::linspace(-12.0, 12.0, 4096, opts); // through erf's saturation, both sides
        // 4,081 of the binades and the 15 edges (zeros, subnormals, the formats' edges, Inf, NaN).
        const auto edges = torch::cat({crafted.narrow(0, 0, 4081), crafted.narrow(0, 4096, 15)});
        const auto x = torch::cat({edges, ramp, -edges, ramp * 0.01f}).view({128, 128}); // 16,384 values
        const int64_t wide_cols = 2049 * 64; // one tile more than the grid
        const auto wide = (torch::sin(torch::arange(64 * wide_cols, opts) * 0.37f) * 6.0f).view({64, wide_cols});
        const bool paired = fused_transpose_kernel(device) == ProbedKernel::Paired;
        for (const auto& u32 : {x, wide})
            for (auto dtype : {torch::kBFloat16, torch::kHalf})
                for (bool e4m3 : {true, false})
                    for (bool saturate : {true, false})
                        for (float scale_value : {0.37f, 1e4f}) {
                            const auto u = u32.to(dtype);
                            const auto scale = torch::full({}, scale_value, opts);
                            torch::Tensor amax, codes_t, want_amax, want_t;
                            const auto codes =
                                cuda_kernels::fused_gelu_scale_cast_amax_transpose(u, scale, e4m3, saturate, amax, codes_t);
                            const auto want = cuda_kernels::fused_scale_cast_amax_transpose(
                                at::gelu(u), scale, e4m3, saturate, want_amax, want_t, /*tiles_64=*/true, paired);
                            if (!torch::equal(codes.view(torch::kUInt8), want.view(torch::kUInt8)) ||
                                !torch::equal(codes_t.view(torch::kUInt8), want_t.view(torch::kUInt8)) ||
                                !torch::equal(amax, want_amax))
                                return false;
                        }
        return true;
    });
    return agrees;
}

} // namespace
#endif

std::string native_fp8_kernels_report()
{
#ifdef MANTISSA_CUDA_KERNELS
    if (!torch::cuda::is_available()) return "no GPU";
    const torch::Device gpu(torch::kCUDA);
    return std::string("fused cast: ") + probed_kernel_report(fused_cast_kernel(gpu)) +
           ", cast-transpose: " + probed_kernel_report(fused_transpose_kernel(gpu)) +
           ", 64x64 tiles: " + (transpose_64_agrees(gpu) ? "yes" : "NO") +
           ", their column sums: " + (column_sums_agree(gpu) ? "yes" : "NO") +
           ", GELU cast: " + (gelu_cast_agrees(gpu) ? "yes" : "NO") + ", delayed record: " + (fused_record_agrees(gpu) ? "yes" : "NO");
#else
    return "not built";
#endif
}

Fp8Tensor quantize_fp8_native(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe,
                              DeviceDelayedScaling* delayed, bool record, bool with_transpose, bool column_sums)
{
    TORCH_CHECK(!with_transpose || x.dim() == 2, "quantize_fp8_native: a transpose of a 2-D tensor only");
    TORCH_CHECK(format_info(format).is_fp8, "quantize_fp8_native needs an FP8 format");
    TORCH_CHECK(recipe.scaling == Fp8Scaling::Delayed || recipe.scaling == Fp8Scaling::Current,
                "the native FP8 cast does per-tensor scaling only");
    const double fp8_max = format_info(format).max_finite;
    const Overflow overflow = recipe.saturate ? Overflow::Saturate : Overflow::Propagate;
#ifdef MANTISSA_CUDA_KERNELS
    const bool delayed_ready = recipe.scaling == Fp8Scaling::Delayed && delayed && delayed->defined();
    const auto dtype = x.scalar_type(); // the kernels read these three; any other takes the ops
    const bool kernel_reads = dtype == torch::kFloat32 || dtype == torch::kBFloat16 || dtype == torch::kHalf;
    if (x.is_cuda() && kernel_reads && (delayed_ready || recipe.scaling == Fp8Scaling::Current) &&
        fused_cast_agrees(x.device())) {
        const auto xc = x.contiguous();
        Fp8Tensor out;
        out.format = format;
        if (delayed_ready) {
            // The scale is known before the tensor is read: one pass casts and measures. The
            // record below replaces the state's scale, not these tensors.
            out.scale = delayed->scale();
            out.inv_scale = delayed->inv_scale();
        } else {
            // Current scaling, as TE's: one pass for the amax, the scale on the device, one to cast.
            const auto amax = cuda_kernels::amax_ignoring_nan(xc);
            out.scale = device_scale_from_amax(amax, fp8_max, recipe.margin, torch::ones({}, amax.options()));
        }
        torch::Tensor measured;
        const bool e4m3 = format == NumberFormat::E4M3;
        if (with_transpose && fused_transpose_agrees(x.device()))
            out.codes = cuda_kernels::fused_scale_cast_amax_transpose(
                xc, out.scale, e4m3, recipe.saturate, measured, out.codes_t, transpose_64_agrees(x.device()),
                fused_transpose_kernel(x.device()) == ProbedKernel::Paired,
                column_sums && column_sums_agree(x.device()) ? &out.column_sums : nullptr);
        else
            out.codes = cuda_kernels::fused_scale_cast_amax(xc, out.scale, e4m3, recipe.saturate, measured,
                                                            fused_cast_paired(x.device()));
        if (with_transpose && !out.codes_t.defined()) out.codes_t = out.codes.t().contiguous();
        if (delayed_ready && record) delayed->record(measured, fp8_max, recipe.amax_use_max, recipe.margin);
        if (!out.inv_scale.defined()) out.inv_scale = out.scale.reciprocal();
        return out;
    }
#else
    (void)column_sums; // only Mantissa's kernel makes them
#endif
    const auto x32 = x.to(torch::kFloat32); // BF16 -> FP32 is exact; the scaled product must be FP32
    const auto amax = amax_ignoring_nan(x32); // () on the device; NaN skipped, as the host's
    Fp8Tensor out;
    out.format = format;
    if (recipe.scaling == Fp8Scaling::Delayed) {
        TORCH_CHECK(delayed != nullptr && delayed->defined(), "delayed scaling needs its device state");
        out.scale = delayed->scale(); // from the amaxes up to the previous use
        out.inv_scale = delayed->inv_scale();
        if (record) delayed->record(amax, fp8_max, recipe.amax_use_max, recipe.margin);
    } else {
        out.scale = device_scale_from_amax(amax, fp8_max, recipe.margin, torch::ones({}, amax.options()));
        out.inv_scale = out.scale.reciprocal();
    }
    out.codes = to_fp8_codes(x32 * out.scale, format, overflow);
    if (with_transpose) out.codes_t = out.codes.t().contiguous();
    return out;
}

Fp8Tensor quantize_gelu_fp8_native(const torch::Tensor& u, NumberFormat format, const Fp8Recipe& recipe,
                                   DeviceDelayedScaling* delayed, bool record)
{
    TORCH_CHECK(u.dim() == 2, "quantize_gelu_fp8_native: a 2-D u");
#ifdef MANTISSA_CUDA_KERNELS
    const bool delayed_ready = recipe.scaling == Fp8Scaling::Delayed && delayed && delayed->defined();
    if (u.is_cuda() && delayed_ready && format_info(format).is_fp8 && cuda_kernels::gelu_cast_transpose_takes(u) &&
        gelu_cast_agrees(u.device())) {
        // The scale is known before u is read (delayed scaling): one pass takes the GELU, casts
        // and measures, and the record is quantize_fp8_native's.
        Fp8Tensor out;
        out.format = format;
        out.scale = delayed->scale();
        out.inv_scale = delayed->inv_scale();
        torch::Tensor measured;
        out.codes = cuda_kernels::fused_gelu_scale_cast_amax_transpose(u, out.scale, format == NumberFormat::E4M3,
                                                                       recipe.saturate, measured, out.codes_t);
        if (record) delayed->record(measured, format_info(format).max_finite, recipe.amax_use_max, recipe.margin);
        return out;
    }
#endif
    return quantize_fp8_native(at::gelu(u), format, recipe, delayed, record, /*with_transpose=*/true);
}

Fp8Tensor quantize_fp8_rowwise_native(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe,
                                      int64_t k_dim)
{
    TORCH_CHECK(format_info(format).is_fp8 && recipe.scaling == Fp8Scaling::PerRow, "quantize_fp8_rowwise_native: a per-row FP8 cast");
    const auto x32 = x.to(torch::kFloat32);
    Fp8Tensor out;
    out.format = format;
    out.scale = rowwise_scale(x32, format, recipe, k_dim);
    out.codes = to_fp8_codes(x32 * out.scale, format, recipe.saturate ? Overflow::Saturate : Overflow::Propagate);
    out.inv_scale = out.scale.reciprocal();
    return out;
}

bool per_row(const Fp8Tensor& t) { return t.scale.defined() && t.scale.dim() > 0; }

bool scaled_mm_takes(const torch::Tensor& a_codes, const torch::Tensor& a_inv, const torch::Tensor& b_codes,
                     const torch::Tensor& b_inv, c10::ScalarType out_dtype)
{
    const int64_t M = a_codes.size(0), N = b_codes.size(1);
    const bool a_e4m3 = a_codes.scalar_type() == torch::kFloat8_e4m3fn;
    const bool b_e4m3 = b_codes.scalar_type() == torch::kFloat8_e4m3fn;
    if (!a_e4m3 && !b_e4m3) return false; // no E5M2 x E5M2 on Hopper (an E5M2 forward GEMM)
    if (a_inv.numel() > 1 || b_inv.numel() > 1) // row-wise: E4M3 x E4M3 -> BF16, scales (M, 1) and (1, N)
        return a_e4m3 && b_e4m3 && out_dtype == torch::kBFloat16 && a_inv.sizes() == torch::IntArrayRef{M, 1} &&
               b_inv.sizes() == torch::IntArrayRef{1, N};
    return true;
}

bool rowwise_fp8_available()
{
    static const bool available = [] {
        if (!native_fp8_available()) return false; // no CUDA, or no FP8 _scaled_mm at all
        int64_t probing_m = 0;
        try {
            // The GEMMs' calls exactly: E4M3 codes of 1, scales (M, 1) and (1, N) that differ
            // per row and column, BF16 output; the forward's with fast accumulation, with a BF16
            // bias in the epilogue and without (model.bias false), the gradients' with neither.
            // Every output 32 * 2^-(i % 4) * 2^(j % 3) (+ j) is exact in BF16. (Ones cannot tell
            // fast accumulation from the other; the probe is of the calls and the scales.)
            const auto f32 = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
            const int64_t K = 32, N = 16;
            // An odd M too: scaled_mm_padded leaves M unpadded (PyTorch's checks allow any M),
            // and no GPU had run one here when the probe took it up (a 65-token vocabulary's
            // wgrad has one). Should it fail, every per-row GEMM runs dequantised, as above.
            for (const int64_t M : {int64_t(16), int64_t(17)}) {
                probing_m = M;
                const auto a = torch::ones({M, K}, f32).to(torch::kFloat8_e4m3fn);
                const auto b = torch::ones({N, K}, f32).to(torch::kFloat8_e4m3fn).t(); // (K, N) column-major
                // Powers of two made on the host (a device's exp2 need not be exact), so every
                // product and sum is exact and no fused rounding can tell the two sides apart.
                std::vector<float> row_scales, col_scales;
                for (int64_t i = 0; i < M; ++i) row_scales.push_back(std::ldexp(1.0f, -static_cast<int>(i % 4)));
                for (int64_t j = 0; j < N; ++j) col_scales.push_back(std::ldexp(1.0f, static_cast<int>(j % 3)));
                const auto rows = torch::tensor(row_scales).to(f32.device()).unsqueeze(1); // (M, 1)
                const auto cols = torch::tensor(col_scales).to(f32.device()).unsqueeze(0); // (1, N)
                const auto product = rows * cols * static_cast<float>(K);
                const auto bias = torch::arange(N, f32);
                struct Call {
                    bool bias, fast_accum;
                    const char* what;
                };
                for (const Call c : {Call{true, true, "the forward"}, Call{false, true, "a forward without bias"},
                                     Call{false, false, "a gradient"}}) {
                    const auto y = scaled_mm_call(a, rows, b, cols, c.bias ? bias : torch::Tensor(), torch::kBFloat16,
                                                  c.fast_accum);
                    const auto expected = (c.bias ? product + bias.unsqueeze(0) : product).to(torch::kBFloat16);
                    if (torch::equal(y.cpu(), expected.cpu())) continue;
                    std::fprintf(stderr,
                                 "mantissa: _scaled_mm's row-wise scaling gave a wrong product (%s GEMM's call, M=%lld): "
                                 "per-row FP8 GEMMs run from the dequantised codes\n",
                                 c.what, static_cast<long long>(M));
                    return false;
                }
            }
            return true;
        } catch (const std::exception& e) {
            std::fprintf(stderr,
                         "mantissa: _scaled_mm's row-wise scaling is not available (M=%lld: %s): per-row FP8 GEMMs "
                         "run from the dequantised codes\n",
                         static_cast<long long>(probing_m), first_line(e).c_str());
            return false;
        }
    }();
    return available;
}

namespace {

// A scale as _scaled_mm's stride checks want it. The per-row wgrad's (M, 1) scale is dy's (1, M)
// one transposed: strides (1, M), which LibTorch counts contiguous (a size-1 dimension has any
// stride), and _scaled_mm refuses on the CPU and on some of its CUDA routes ("expected
// scale_a.stride(1) to be 1"). The copy is M floats.
torch::Tensor packed_scale(const torch::Tensor& scale)
{
    if (scale.dim() == 2 && scale.size(1) == 1 && scale.stride(1) != 1)
        return scale.clone(at::MemoryFormat::Contiguous);
    return scale.contiguous();
}

} // namespace

torch::Tensor scaled_mm_call(const torch::Tensor& a_codes, const torch::Tensor& a_inv, const torch::Tensor& b_codes,
                             const torch::Tensor& b_inv, const torch::Tensor& bias, c10::ScalarType out_dtype,
                             bool fast_accum)
{
    const auto a = a_codes.is_contiguous() ? a_codes : a_codes.contiguous();    // row-major
    const auto b = column_major(b_codes) ? b_codes : b_codes.t().contiguous().t(); // column-major
    // The bias joins in the epilogue, in the output dtype. No bias is an empty optional: an
    // undefined tensor in one reads as a bias of numel() 1, which _scaled_mm refuses.
    std::optional<at::Tensor> bias_out;
    if (bias.defined()) bias_out = bias.to(out_dtype);
    return at::_scaled_mm(a, b, packed_scale(a_inv), packed_scale(b_inv), bias_out, std::nullopt, out_dtype,
                          fast_accum);
}

torch::Tensor scaled_mm_padded(const torch::Tensor& a_codes, const torch::Tensor& a_inv, const torch::Tensor& b_codes,
                               const torch::Tensor& b_inv, const torch::Tensor& bias, c10::ScalarType out_dtype,
                               bool fast_accum)
{
    // _scaled_mm (and cuBLASLt under it) needs K and N in multiples of 16; M may be any.
    const int64_t K = a_codes.size(1), N = b_codes.size(1);
    const auto up = [](int64_t n) { return (n + 15) / 16 * 16; };
    const int64_t K16 = up(K), N16 = up(N);
    if (K16 == K && N16 == N) return scaled_mm_call(a_codes, a_inv, b_codes, b_inv, bias, out_dtype, fast_accum);
    // Code 0x00 is +0 in both formats: padded K adds exact zeros to every sum, and padded
    // columns are cut off again. Padded as bytes (constant_pad_nd has no FP8 kernels).
    const auto pad_codes = [](const torch::Tensor& t, int64_t rows, int64_t cols) { // -> (rows, cols) row-major
        return torch::constant_pad_nd(t.view(torch::kUInt8), {0, cols - t.size(1), 0, rows - t.size(0)}, 0)
            .view(t.scalar_type());
    };
    const auto a = K16 == K ? a_codes : pad_codes(a_codes, a_codes.size(0), K16);
    const auto b = pad_codes(b_codes.t(), N16, K16).t(); // (K16, N16) column-major, as _scaled_mm takes it
    // Row-wise scales of the padded columns multiply zeros: any finite value does. Row-wise is
    // one decision for both (as fp8_gemm's): a single row's scales are (1, 1).
    const bool rowwise = a_inv.numel() > 1 || b_inv.numel() > 1;
    const auto b_s = rowwise ? torch::constant_pad_nd(b_inv, {0, N16 - N}, 1.0) : b_inv; // (1, N16)
    const auto bias16 = bias.defined() ? torch::constant_pad_nd(bias, {0, N16 - N}, 0.0) : bias;
    const auto y = scaled_mm_call(a, a_inv, b, b_s, bias16, out_dtype, fast_accum);
    return N16 == N ? y : y.narrow(1, 0, N).contiguous(); // callers view it as (..., N)
}

torch::Tensor fp8_gemm(const torch::Tensor& a_codes, const torch::Tensor& a_inv, const torch::Tensor& b_codes,
                       const torch::Tensor& b_inv, const torch::Tensor& bias, c10::ScalarType out_dtype,
                       bool fast_accum, bool* native)
{
    const bool rowwise = a_inv.numel() > 1 || b_inv.numel() > 1;
    if (a_codes.is_cuda() && scaled_mm_takes(a_codes, a_inv, b_codes, b_inv, out_dtype) && native_fp8_available() &&
        (!rowwise || rowwise_fp8_available())) {
        if (native) *native = true;
        return scaled_mm_padded(a_codes, a_inv, b_codes, b_inv, bias, out_dtype, fast_accum);
    }
    // The same products from the dequantised codes, accumulated in FP32, rounded once.
    if (native) *native = false;
    const auto a = a_codes.to(torch::kFloat32) * a_inv;
    const auto b = b_codes.to(torch::kFloat32) * b_inv;
    // The bias in the output dtype, as _scaled_mm's epilogue takes it (scaled_mm_call).
    auto y = bias.defined() ? at::addmm(bias.to(out_dtype).to(torch::kFloat32), a, b) : at::mm(a, b);
    return y.to(out_dtype);
}

} // namespace mantissa
