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
    void restore(std::vector<float> history, float scale)
    {
        history_ = std::move(history);
        scale_ = scale;
    }

private:
    std::vector<float> history_;
    float scale_ = 1.0f;
};

// Per-tensor scale from an amax: (fp8_max / amax) / 2^margin; `previous` when amax is 0 or
// not finite.
float scale_from_amax(float amax, double fp8_max, int64_t margin, float previous);

// The result of quantising one operand.
struct QuantizedOperand {
    torch::Tensor values; // dequantised FP32, same shape as the input
    float amax = 0.0f;    // of the input
    float scale = 1.0f;   // per-tensor recipes; 0 for per-row/block recipes
};

// Quantises `x` to an FP8 `format` under `recipe`. `contraction_dim` is the GEMM's K
// dimension of this operand: per-row scales group every other dimension, blocks of 32 run
// along it. `delayed` holds the state for the Delayed recipe (ignored otherwise); its
// amax history is updated here. `role` matters to the block recipes only (fp8-block, nvfp4).
QuantizedOperand quantize_fp8(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe,
                              int64_t contraction_dim, DelayedScaling* delayed,
                              TensorRole role = TensorRole::Activation);

} // namespace mantissa
