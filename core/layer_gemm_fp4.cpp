// SPDX-License-Identifier: GPL-3.0-or-later
// nvfp4 and mxfp4 in LayerGemm on Blackwell (sm_100): the layer's FP8-format GEMMs multiply
// E2M1 codes and block scales on the FP4 tensor cores (block_fp4_gemm.h, untested on
// hardware), split from the operands the emulator rounded. mxfp4's split needs the values
// alone; nvfp4's needs each cast's own E4M3 block scales and tensor amax, which round_operand
// hands here beside the values it returns, kept until the GEMM that takes those values.
#include "layer_gemm.h"

#include "block_fp4_gemm.h"

namespace mantissa {

bool LayerGemm::keeps_fp4_scales(const torch::Tensor& x) const
{
    return recipe_.scaling == Fp8Scaling::NvFp4 && recipe_.outlier_rms_multiple == 0.0 && use_native(x) &&
           fp4_block_mm_available(true);
}

void LayerGemm::remember_fp4_operand(const torch::Tensor& values, Nvfp4Scales scales, bool weight)
{
    // Values nobody else holds any more can no longer reach a GEMM (a weight's old cast, an
    // evaluation's operand); holding the rest keeps their data from being reused meanwhile.
    std::erase_if(fp4_operands_, [](const Fp4Operand& o) { return o.values.use_count() == 1; });
    fp4_operands_.push_back({values, std::move(scales), weight});
}

const Nvfp4Scales* LayerGemm::fp4_scales_of(const torch::Tensor& operand) const
{
    // A 16 x 16-tiled weight's cast serves the dgrad too (square_weight_tiles), as its
    // transpose: sizes alone matched a square weight's, whose scales are then the transposed
    // tiles' (the dgrad of every attn.proj was wrong, found by reading). That product is
    // emulated; a split of the transposed tiles would let it run on FP4.
    for (const auto& o : fp4_operands_)
        if (o.values.data_ptr() == operand.data_ptr() && nvfp4_scales_fit(o.scales.block_scales, operand))
            return &o.scales;
    return nullptr;
}

torch::Tensor LayerGemm::block_fp4_product(const torch::Tensor& a, const torch::Tensor& b, NumberFormat format)
{
    // The recipe casts a layer's FP8 GEMMs' operands; a 16-bit or FP32 GEMM of the same layer
    // multiplies values of its own format.
    const bool nvfp4 = recipe_.scaling == Fp8Scaling::NvFp4;
    if ((!nvfp4 && recipe_.scaling != Fp8Scaling::MxFp4) || !format_info(format).is_fp8 ||
        recipe_.outlier_rms_multiple != 0.0 || a.dim() != 2 ||
        b.dim() != 2 || a.size(1) % 32 != 0 || b.size(1) % 16 != 0 || !use_native(a) || !fp4_block_mm_available(nvfp4))
        return {};
    const auto bt = b.t(); // (N, K): the rows of the cast along K
    if (!nvfp4) return fp4_block_mm(split_mxfp4_blocks(a), split_mxfp4_blocks(bt));
    const Nvfp4Scales* sa = fp4_scales_of(a);
    const Nvfp4Scales* sb = fp4_scales_of(bt);
    if (!sa || !sb) return {};
    auto y = fp4_block_mm(split_nvfp4_blocks(a, sa->block_scales, sa->tensor_amax),
                          split_nvfp4_blocks(bt, sb->block_scales, sb->tensor_amax));
    // An activation's or a gradient's cast serves one GEMM; a weight's stays while it is cached.
    const void* used[2] = {a.data_ptr(), bt.data_ptr()};
    std::erase_if(fp4_operands_, [&](const Fp4Operand& o) {
        return !o.weight && (o.values.data_ptr() == used[0] || o.values.data_ptr() == used[1]);
    });
    return y;
}

} // namespace mantissa
