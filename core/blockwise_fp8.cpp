// SPDX-License-Identifier: GPL-3.0-or-later
#include "blockwise_fp8.h"

#include <cmath>

#include "block_scaling.h"
#include "layer_gemm.h"

namespace mantissa {

namespace {

constexpr int64_t kBlock = 128;
constexpr float kE4m3Max = 448.0f;

} // namespace

Fp8BlockOperand split_fp8_blocks(const torch::Tensor& values)
{
    TORCH_CHECK(values.dim() == 2 && values.size(1) % kBlock == 0, "split_fp8_blocks: (R, K) with K a multiple of 128");
    const int64_t rows = values.size(0), k = values.size(1);
    const auto blocks = values.to(torch::kFloat32).contiguous().view({rows, k / kBlock, kBlock});
    const auto amax = blocks.abs().amax(-1); // (R, K/128); NaN where the block holds one
    // The smallest power of two d with amax / d <= 448: log2 lands within a binade of it, and
    // the two comparisons settle it exactly (a division by a power of two is exact). A larger
    // d would shift code bits out below E4M3's subnormals.
    auto d = torch::exp2(torch::ceil(torch::log2(amax / kE4m3Max))).clamp_min(std::ldexp(1.0f, -149));
    d = torch::where(amax / d > kE4m3Max, d * 2.0f, d);
    d = torch::where((amax / (d * 0.5f) <= kE4m3Max) & (d > std::ldexp(1.0f, -149)), d * 0.5f, d);
    d = torch::where(amax > 0, d, torch::ones_like(d)); // zeros (and NaN blocks, whose codes stay NaN)
    Fp8BlockOperand out;
    out.codes = (blocks / d.unsqueeze(-1)).view({rows, k}).to(torch::kFloat8_e4m3fn);
    out.decode = d;
    return out;
}

torch::Tensor join_fp8_blocks(const Fp8BlockOperand& op)
{
    const int64_t rows = op.codes.size(0), k = op.codes.size(1);
    return (op.codes.to(torch::kFloat32).view({rows, k / kBlock, kBlock}) * op.decode.unsqueeze(-1)).view({rows, k});
}

torch::Tensor blockwise_fp8_mm(const Fp8BlockOperand& a, const Fp8BlockOperand& bt)
{
    if (!a.codes.is_cuda()) return at::mm(join_fp8_blocks(a), join_fp8_blocks(bt).t());
    // cuBLAS's layouts, as PyTorch's test_scaled_mm_vs_emulated_block_wise lays them out: a
    // row-major (M, K) with its scales (M, K/128) outer-dimension-major (stride 1 along M);
    // b column-major (K, N), i.e. bt's rows transposed, with scales (K/128, N) row-major.
    const auto scale_a = a.decode.t().contiguous().t();
    const auto scale_b = bt.decode.t().contiguous();
    return at::_scaled_mm(a.codes.contiguous(), bt.codes.contiguous().t(), scale_a, scale_b, {}, {}, torch::kFloat32,
                          /*use_fast_accum=*/false);
}

bool blockwise_fp8_available()
{
    static const bool available = [] {
        if (!native_fp8_available()) return false; // no CUDA, or no FP8 _scaled_mm at all
        try {
            // Operands fp8-block itself rounded (1x128 and 128x128 tiles, power-of-two scales),
            // spanning a few binades, from a formula: the probe draws nothing from any generator.
            const auto opts = torch::TensorOptions().device(torch::kCUDA);
            const auto grid = torch::arange(256 * 256, opts).view({256, 256}).to(torch::kFloat32);
            const auto x = torch::sin(grid * 0.37f) * torch::exp2(torch::remainder(grid, 7.0f) - 3.0f);
            const auto w = torch::cos(grid * 0.11f) * torch::exp2(torch::remainder(grid, 5.0f) - 2.0f);
            const auto xq = quantize_fp8_block_2d(x, NumberFormat::E4M3, true, false).values;
            const auto wq = quantize_fp8_block_2d(w, NumberFormat::E4M3, true, true).values;
            const auto y = blockwise_fp8_mm(split_fp8_blocks(xq), split_fp8_blocks(wq));
            const auto reference = at::mm(xq.to(torch::kFloat64), wq.to(torch::kFloat64).t());
            // FP32 accumulation in another order: far inside 1e-4 of the largest output.
            const double err = (y.to(torch::kFloat64) - reference).abs().max().item<double>();
            return err <= 1e-4 * reference.abs().max().item<double>();
        } catch (const std::exception&) {
            return false;
        }
    }();
    return available;
}

} // namespace mantissa
