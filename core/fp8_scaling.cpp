// SPDX-License-Identifier: GPL-3.0-or-later
#include "fp8_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "fp4.h"
#include "scale_rule.h"

namespace mantissa {

float scale_from_amax(float amax, double fp8_max, int64_t margin, float previous)
{
    // fp8_max (448, 57344) over a power of two is exact in float; one float division follows,
    // as TE's scaled_max / amax. For every amax where the quotient is a finite float this
    // equals the double-precision formula rounded once to float. An amax below ~1.3e-36
    // (E4M3) overflows the quotient: TE clamps it to FLT_MAX (scale_rule.h, shared with CUDA).
    const float scaled_max = std::ldexp(static_cast<float>(fp8_max), -static_cast<int>(margin));
    return scale_rule::scale_from_amax(amax, scaled_max, previous);
}

void DelayedScaling::replay(const std::vector<float>& amaxes)
{
    const auto records = std::move(journal_);
    journal_.clear();
    journal_on_ = false;
    restore(std::move(journal_history_), journal_scale_);
    journal_history_.clear();
    for (size_t i = 0; i < records.size(); ++i) record(amaxes[i], records[i].fp8_max, records[i].use_max, records[i].margin);
}

void DelayedScaling::record(float amax, double fp8_max, bool use_max, int64_t margin)
{
    if (journal_on_) journal_.push_back({amax, fp8_max, use_max, margin});
    if (history_.empty()) history_.push_back(0.0f);
    std::rotate(history_.rbegin(), history_.rbegin() + 1, history_.rend()); // roll by one
    history_[0] = amax;
    float reduced = history_[0];
    if (use_max) {
        reduced = 0.0f;
        for (float a : history_) reduced = scale_rule::fmax_skipping_nan(reduced, a); // as TE's fmaxf
    }
    scale_ = scale_from_amax(reduced, fp8_max, margin, scale_);
}

torch::Tensor floor_log2_from_bits(const torch::Tensor& v)
{
    auto a = v.to(torch::kFloat32).abs().contiguous();
    // A subnormal times 2^64 is normal and exact: its exponent then counts from the leading bit.
    const auto subnormal = a < std::numeric_limits<float>::min();
    a = torch::where(subnormal, a * 0x1p64f, a);
    const auto biased = torch::bitwise_and(torch::bitwise_right_shift(a.view(torch::kInt32), 23), 0xFF);
    return (biased - 127 - subnormal.to(torch::kInt32) * 64).to(torch::kInt32);
}

void DelayedScaling::rescale(float ratio)
{
    if (!std::isfinite(ratio) || ratio <= 0.0f) return; // a loss scale that collapsed to 0: nothing to follow
    // A scale that some amax made: a record moved it off 1, or a finite amax is in the window.
    bool recorded = scale_ != 1.0f;
    for (float& a : history_) {
        recorded |= std::isfinite(a) && a != 0.0f;
        a *= ratio; // a NaN entry stays NaN (skipped), an Inf one Inf (it keeps the scale)
    }
    // Within scale_from_amax's range: an amax under FLT_MAX's reach was clamped to FLT_MAX,
    // and FLT_MAX / (1/65536) would be an Inf scale, which casts every zero to NaN.
    if (recorded) scale_ = std::clamp(scale_ / ratio, std::numeric_limits<float>::denorm_min(),
                                      std::numeric_limits<float>::max());
}

void DelayedScaling::reset()
{
    std::fill(history_.begin(), history_.end(), 0.0f);
    scale_ = 1.0f;
}

namespace {

Overflow overflow_of(const Fp8Recipe& r) { return r.saturate ? Overflow::Saturate : Overflow::Propagate; }

// q = cast(x * scale), x ~ q * (1 / scale), as TE multiplies by scale_inv. `scale`: per row.
torch::Tensor scaled_round(const torch::Tensor& x, const torch::Tensor& scale, NumberFormat format, Overflow overflow)
{
    return round_to_format(x * scale, format, overflow) * scale.reciprocal();
}

// Per-tensor: the same with one host scale (one fused pass on the CPU when saturating).
torch::Tensor scaled_round(const torch::Tensor& x, float scale, NumberFormat format, Overflow overflow)
{
    if (overflow == Overflow::Saturate) return scaled_round_saturated(x, scale, format);
    return scaled_round(x, torch::tensor(scale), format, overflow);
}

} // namespace

constexpr double kTorchaoAmaxEps = 1e-12; // torchao/float8/float8_utils.py: EPS

torch::Tensor rowwise_scale(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe, int64_t k_dim)
{
    // torchao's amax_to_scale: fp8_max / clamp(amax, min=1e-12) in FP64, then FP32 (the same
    // bits as an FP32 division for amax >= 1e-12; a smaller or zero amax takes 1e-12's scale).
    // The margin scales fp8_max first, as scale_from_amax does, so nothing overflows.
    const double scaled_max = std::ldexp(format_info(format).max_finite, -static_cast<int>(recipe.margin));
    const auto amax = x.abs().amax({k_dim}, /*keepdim=*/true); // NaN and Inf propagate, as in torchao
    auto scale = (scaled_max / amax.to(torch::kFloat64).clamp_min(kTorchaoAmaxEps)).to(torch::kFloat32);
    // torchao's rounding, float log2 included (it rounds up just below a power of two). The
    // power itself is built from the bits: a device's exp2 need not be exact at integers. (A
    // row whose amax is Inf has scale 0 here, -inf after log2; it is NaN-filled below.)
    if (recipe.rowwise_power_of_two)
        scale = pow2_exact(torch::floor(torch::log2(scale)).clamp(-149.0, 127.0));
    // A row holding NaN or Inf: torchao's scale is NaN or 0 and the whole row comes out NaN;
    // a NaN scale does that on every path (the emulator's cast, the native codes, _scaled_mm).
    // masked_fill, not torch::where with a CPU 0-dim NaN: where() would copy it to the GPU with
    // a blocking copy in every cast.
    return scale.masked_fill(~torch::isfinite(amax), std::numeric_limits<float>::quiet_NaN());
}

namespace {

torch::Tensor quantize_rows(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe, int64_t k_dim)
{
    return scaled_round(x, rowwise_scale(x, format, recipe, k_dim), format, overflow_of(recipe));
}

torch::Tensor quantize_blocks(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe, int64_t k_dim,
                              BlockCastRecord* record)
{
    constexpr int64_t kBlock = 32;
    // Move K last and pad it to a multiple of 32; padding zeros do not change a block's amax.
    auto moved = x.movedim(k_dim, -1);
    const int64_t k = moved.size(-1);
    const int64_t padded = (k + kBlock - 1) / kBlock * kBlock;
    auto work = padded == k ? moved : torch::constant_pad_nd(moved, {0, padded - k});
    auto shape = work.sizes().vec();
    shape.back() = padded / kBlock;
    shape.push_back(kBlock);
    auto blocks = work.reshape(shape); // (..., K/32, 32)
    auto amax = blocks.abs().amax({-1}, /*keepdim=*/true); // NaN propagates: see below
    auto shared_exp = mx_shared_exponent(amax, format, recipe.mx_round_scale_up);
    const auto finite = torch::isfinite(amax);
    shared_exp = torch::where((amax > 0) & finite, shared_exp, torch::zeros_like(shared_exp)).clamp(-127, 127); // E8M0
    // From the bits, as the block recipes do: a device's exp2 need not be exact at integers.
    auto block_scale = pow2_exact(shared_exp.to(torch::kFloat32));
    // Elements saturate per the spec: beyond max they clamp (OCP "saturating" conversion).
    auto q = round_to_format(blocks / block_scale, format, Overflow::Saturate) * block_scale;
    // A block holding Inf or NaN: OCP MX's scale is NaN (microxcaling sets shared_exp > emax
    // to NaN), and X = NaN makes every element of the block NaN.
    q = torch::where(finite, q, torch::full_like(q, std::numeric_limits<float>::quiet_NaN()));
    if (record) { // a telemetry step: the blocks' scales, and those whose rounding clipped the block
        BlockQuantized blocks_seen;
        blocks_seen.block_amax = amax;
        blocks_seen.block_scales =
            torch::where(finite, block_scale, torch::full_like(block_scale, std::numeric_limits<float>::quiet_NaN()));
        *record = block_cast_record(blocks_seen, format, recipe);
    }
    q = q.reshape(work.sizes());
    if (padded != k) q = q.narrow(-1, 0, k);
    return q.movedim(-1, k_dim).contiguous();
}

} // namespace

torch::Tensor mx_shared_exponent(const torch::Tensor& amax, NumberFormat format, bool round_up)
{
    const int emax_elem = format == NumberFormat::E4M3 ? 8 : 15; // exponent of the format's largest binade
    // OCP MX v1.0: shared_exp = floor(log2(amax)) - emax_elem, floor(log2) from the exponent
    // bits (a float log2 rounds 127.99999237 up to 7). Rounding up instead (arXiv
    // 2506.08027) takes the smallest e with amax <= max_finite * 2^e: floor's e, or one more.
    auto shared_exp = floor_log2_from_bits(amax) - emax_elem;
    if (round_up) {
        const auto fits =
            amax.to(torch::kFloat64) <= format_info(format).max_finite * torch::exp2(shared_exp.to(torch::kFloat64));
        shared_exp = shared_exp + (~fits).to(torch::kInt32);
    }
    return shared_exp;
}

OutlierSplit split_outliers(const torch::Tensor& x32, double rms_multiple)
{
    const auto rms = x32.square().mean().sqrt();
    const auto is_outlier = x32.abs() > rms * rms_multiple;
    OutlierSplit split;
    split.outliers = torch::where(is_outlier, x32, torch::zeros_like(x32));
    split.inliers = x32 - split.outliers;
    return split;
}

torch::Tensor OutlierSplit::rejoin(const torch::Tensor& cast_inliers) const
{
    return cast_inliers + round_to_format(outliers, NumberFormat::BF16, Overflow::Propagate);
}

QuantizedOperand quantize_fp8(const torch::Tensor& x_in, NumberFormat format, const Fp8Recipe& recipe,
                              int64_t contraction_dim, DelayedScaling* delayed, TensorRole role,
                              BlockCastRecord* block_record, Nvfp4Scales* nvfp4_scales)
{
    TORCH_CHECK(format_info(format).is_fp8, "quantize_fp8 needs an FP8 format");
    const double fp8_max = format_info(format).max_finite;
    // Widening what fp8-block's kernel reads as it is would be the very pass it saves.
    auto x = fp8_block_reads_as_is(x_in, recipe) ? x_in : x_in.to(torch::kFloat32);
    const int64_t k_dim = contraction_dim < 0 ? contraction_dim + x.dim() : contraction_dim;

    // Outliers bypass FP8 and travel in BF16 beside it.
    OutlierSplit split;
    if (recipe.outlier_rms_multiple > 0.0) {
        split = split_outliers(x, recipe.outlier_rms_multiple);
        x = split.inliers;
    }

    QuantizedOperand out;
    // Only the per-tensor recipes use one amax (and read it to the host); the per-row and block
    // recipes take theirs inside their own pass, and a whole-tensor scan would cost them about
    // as much as their cast.
    if (per_tensor_scaling(recipe)) out.amax = amax_ignoring_nan(x).item<float>();
    switch (recipe.scaling) {
    case Fp8Scaling::Delayed: {
        TORCH_CHECK(delayed != nullptr, "delayed scaling needs its state");
        out.scale = delayed->scale();
        out.values = scaled_round(x, out.scale, format, overflow_of(recipe));
        delayed->record(out.amax, fp8_max, recipe.amax_use_max, recipe.margin);
        break;
    }
    case Fp8Scaling::Current:
        out.scale = scale_from_amax(out.amax, fp8_max, recipe.margin, 1.0f);
        out.values = scaled_round(x, out.scale, format, overflow_of(recipe));
        break;
    case Fp8Scaling::PerRow:
        out.scale = 0.0f;
        out.values = quantize_rows(x, format, recipe, k_dim);
        break;
    case Fp8Scaling::Block32:
        out.scale = 0.0f;
        out.values = quantize_blocks(x, format, recipe, k_dim, block_record);
        break;
    case Fp8Scaling::Block128:
    case Fp8Scaling::NvFp4:
    case Fp8Scaling::MxFp4:
        out.scale = 0.0f;
        out.values = quantize_block_recipe(x, format, recipe, k_dim, role, block_record, nvfp4_scales);
        break;
    }
    if (split.outliers.defined()) out.values = split.rejoin(out.values);
    return out;
}

} // namespace mantissa
