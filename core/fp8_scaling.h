// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// FP8 scaling recipes (docs/NUMERICS.md): delayed (TransformerEngine's DelayedScaling),
// current per-tensor, per-row, and 32-element blocks with E8M0 scales (MXFP8). Each turns
// an FP32 operand into the FP32 values an FP8 GEMM would effectively multiply: q / scale.

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "block_scaling.h"
#include "number_format.h"
#include "precision_policy.h"
#include "quantize.h"

namespace mantissa {

// The FP8 scaling rules at their edges (docs/NUMERICS.md, "FP8 scaling at the edges"). These
// two functions are the single definition; any other implementation (a device-tensor mirror)
// follows them to the bit.
//
// scale_from_amax(amax, fp8_max, margin, previous), all arithmetic in float32 as TE's kernels:
//   amax NaN, ±inf, 0 or negative -> `previous` (nothing to measure);
//   otherwise scale = float(fp8_max / 2^margin) / amax, one IEEE float division (round to
//   nearest even), and if that overflows to inf (amax < fp8_max / 2^margin / FLT_MAX, about
//   1.3e-36 for E4M3 at margin 0) the scale is FLT_MAX, as TE's compute_scale_from_amax.
//   A `previous` that is inf becomes FLT_MAX too; a scale is never inf, NaN or 0.
//
// DelayedScaling::record(amax, ...), TE's amax_and_scale_update (the unfused kernel):
//   the history rolls by one and `amax` enters slot 0 whatever it is: 0, NaN and inf are
//   stored as given, so the history shows what happened;
//   "max" reduces the whole history with fmax semantics: NaN entries are skipped (one NaN
//   does not freeze the scale for the window), an inf entry wins and keeps the previous scale
//   for as long as it is in the window (TE's fmaxf does the same), 0 entries change nothing;
//   an all-zero/NaN history reduces to 0 -> previous scale;
//   "most_recent" takes slot 0: NaN, inf or 0 keep the previous scale;
//   then scale = scale_from_amax(reduced, fp8_max, margin, previous scale).
//   Zero amaxes are entered (they push older amaxes out of the window), as TE's Python path
//   and its unfused kernel do; TE's fused multi-tensor update instead skips a step whose amax
//   is 0 (no roll, scale kept).
//
// The amax of a tensor (quantize_fp8's QuantizedOperand::amax, the per-row amaxes) is the
// largest |x| over its non-NaN elements, as TE's amax kernel (fmaxf): a NaN in the tensor
// neither becomes the amax nor hides the others; an all-NaN tensor has amax 0.

// TE's DelayedScaling state for one tensor role of one layer. The scale used at step t
// comes from the amaxes recorded up to step t-1; the amax of step t is recorded after.
class DelayedScaling {
public:
    explicit DelayedScaling(int64_t history_length = 1024) : history_(static_cast<size_t>(history_length), 0.0f) {}

    float scale() const { return scale_; }
    const std::vector<float>& history() const { return history_; } // slot 0 = newest

    // Rolls the history, stores `amax` in slot 0, and recomputes the scale for the next use.
    void record(float amax, double fp8_max, bool use_max, int64_t margin);
    void reset(); // fresh history, scale 1 (after a live precision change)
    // The tensor it measures is now `ratio` times what it was (a gradient after the loss scale
    // changed): each amax times ratio, the scale over it (kept within (0, FLT_MAX], as
    // scale_from_amax keeps it). A state that never recorded keeps scale 1, as a fresh one; a
    // ratio that is not positive and finite changes nothing.
    void rescale(float ratio);
    void restore(std::vector<float> history, float scale)
    {
        history_ = std::move(history);
        scale_ = scale;
    }

    // Data parallel (trainer_data_parallel.cpp): from begin_journal() on, record() also notes
    // each amax with the rule it was recorded under; replay() goes back to the state
    // begin_journal() found and records the step again with `amaxes` (the MAX over the ranks,
    // one per journal entry), ending the journal. DeviceDelayedScaling does the same on a device.
    struct Record {
        float amax;
        double fp8_max;
        bool use_max;
        int64_t margin;
    };
    void begin_journal()
    {
        journal_on_ = true;
        journal_.clear();
        journal_history_ = history_;
        journal_scale_ = scale_;
    }
    const std::vector<Record>& journal() const { return journal_; }
    void replay(const std::vector<float>& amaxes);

private:
    std::vector<float> history_;
    float scale_ = 1.0f;
    bool journal_on_ = false;
    std::vector<Record> journal_;
    std::vector<float> journal_history_; // the state begin_journal() found
    float journal_scale_ = 1.0f;
};

// Per-tensor scale from an amax: float(fp8_max / 2^margin) / amax in float32, FLT_MAX where
// that overflows; `previous` when amax is 0, negative or not finite (see above).
float scale_from_amax(float amax, double fp8_max, int64_t margin, float previous);

// The per-row recipe's scales (torchao's amax_to_scale): one per slice along `k_dim` (kept as
// a size-1 dimension), fp8_max / 2^margin / max(amax, 1e-12), floored to a power of two when
// asked; NaN for a slice holding NaN or Inf, which makes the whole row NaN as in torchao. The
// emulator and the native cast share this to the bit.
torch::Tensor rowwise_scale(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe, int64_t k_dim);

// MXFP8 (OCP MX v1.0): floor(log2(|v|)) of each FP32 element, from its exponent bits (a
// subnormal's from its leading mantissa bit), as an int32 tensor. Exact where float log2 is
// not: 127.99999237 gives 6. Undefined for 0, inf and NaN (the caller masks them).
torch::Tensor floor_log2_from_bits(const torch::Tensor& v);

// MXFP8's shared exponent of a block whose amax is `amax` (finite, > 0), before E8M0's clamp:
// floor(log2(amax)) - emax of `format` (OCP MX v1.0), or with `round_up` the smallest e with
// amax <= max_finite * 2^e (arXiv 2506.08027). int32.
torch::Tensor mx_shared_exponent(const torch::Tensor& amax, NumberFormat format, bool round_up);

// The result of quantising one operand.
struct QuantizedOperand {
    torch::Tensor values; // dequantised FP32, same shape as the input
    float amax = 0.0f;    // of the input, NaN skipped (per-tensor recipes; 0 for per-row/block recipes)
    float scale = 1.0f;   // per-tensor recipes; 0 for per-row/block recipes
};

// The outlier split of `recipe.outlier_rms_multiple` k > 0 on FP32 values: outliers (|x| > k *
// rms(x), the rest 0) skip FP8 and are added back in BF16; inliers = x - outliers go through
// the FP8 cast. Device ops only: no read of the rms on the host.
struct OutlierSplit {
    torch::Tensor inliers, outliers;
    // The inliers' FP8-cast values with the outliers added back in BF16.
    torch::Tensor rejoin(const torch::Tensor& cast_inliers) const;
};
OutlierSplit split_outliers(const torch::Tensor& x32, double rms_multiple);

// Quantises `x` to an FP8 `format` under `recipe`. `contraction_dim` is the GEMM's K
// dimension of this operand: per-row scales group every other dimension, blocks of 32 run
// along it. `delayed` holds the state for the Delayed recipe (ignored otherwise); its
// amax history is updated here. `role` matters to the block recipes only (fp8-block, nvfp4);
// `block_record` (telemetry steps) receives what a block recipe did to the blocks.
QuantizedOperand quantize_fp8(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe,
                              int64_t contraction_dim, DelayedScaling* delayed,
                              TensorRole role = TensorRole::Activation, BlockCastRecord* block_record = nullptr,
                              Nvfp4Scales* nvfp4_scales = nullptr);

} // namespace mantissa
