// SPDX-License-Identifier: GPL-3.0-or-later
#include "block_fp4_gemm.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "block_scaling.h"
#include "build_info.h"
#include "first_line.h"
#include "gemm_probe.h"
#include "fp4.h"

namespace mantissa {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// LibTorch's ScalingType and SwizzleType (ATen/BlasBackend.h, the same in 2.11 and 2.13), as
// _scaled_mm_v2 takes them.
constexpr int64_t kTensorWise = 0, kBlockWise1x16 = 2;
constexpr int64_t kNoSwizzle = 0, kSwizzle32x4x4 = 1;

torch::Tensor blocks_of(const torch::Tensor& values, int64_t block)
{
    const int64_t rows = values.size(0), k = values.size(1);
    TORCH_CHECK(values.dim() == 2 && k % block == 0, "an FP4 GEMM operand: (rows, K) with whole blocks along K");
    return values.to(torch::kFloat32).contiguous().view({rows, k / block, block});
}

// The scales as the bytes of their format: E4M3 (nvfp4; NaN 0x7F) or E8M0 (mxfp4; NaN 0xFF).
torch::Tensor scale_bytes(const Fp4BlockOperand& op)
{
    if (op.nvfp4) return op.scales.to(torch::kFloat8_e4m3fn).view(torch::kUInt8);
    const auto nan = torch::isnan(op.scales);
    const auto safe = op.scales.masked_fill(nan, 1.0f);
    return e8m0_encode_exponent(floor_log2(safe)).masked_fill(nan, 0xFF);
}

} // namespace

Fp4BlockOperand split_mxfp4_blocks(const torch::Tensor& values)
{
    const auto v = blocks_of(values, 32);
    const auto amax = v.abs().amax(-1); // (R, K/32); NaN where a block holds one (the cast's poisoned blocks)
    const auto positive = amax > 0;
    const auto safe = torch::where(positive, amax, torch::ones_like(amax));
    const auto exponent = (floor_log2(safe) - 2.0f).masked_fill(~positive, -127.0f).clamp(-127.0f, 127.0f);
    const auto scales = pow2_exact(exponent).masked_fill(torch::isnan(amax), kNaN);
    Fp4BlockOperand out;
    out.nvfp4 = false;
    out.codes = e2m1_encode(v / scales.unsqueeze(-1)).view(values.sizes());
    out.scales = scales;
    return out;
}

bool nvfp4_scales_fit(const torch::Tensor& block_scales, const torch::Tensor& operand)
{
    return operand.dim() == 2 && operand.is_contiguous() && block_scales.size(0) == operand.size(0) &&
           block_scales.size(1) * 16 == operand.size(1);
}

Fp4BlockOperand split_nvfp4_blocks(const torch::Tensor& values, const torch::Tensor& block_scales,
                                   const torch::Tensor& tensor_amax)
{
    const auto v = blocks_of(values, 16);
    const auto scales = block_scales.to(torch::kFloat32).reshape({v.size(0), v.size(1)});
    const auto amax = tensor_amax.to(values.device(), torch::kFloat32).reshape({});
    const auto multiplier = nvfp4_value_multiplier(scales, amax).unsqueeze(-1);
    Fp4BlockOperand out;
    out.nvfp4 = true;
    // A value is fl(code * multiplier): the quotient can miss the grid by an ulp (1.5 times a
    // 24-bit multiplier needs 25 bits), and the nearest grid value is the code.
    out.codes = e2m1_encode(round_to_e2m1(torch::where(multiplier == 0, v, v / multiplier))).view(values.sizes());
    out.scales = scales;
    out.global = nvfp4_tensor_decode(amax);
    return out;
}

torch::Tensor join_fp4_blocks(const Fp4BlockOperand& op)
{
    const int64_t rows = op.codes.size(0), k = op.codes.size(1);
    auto v = e2m1_decode(op.codes).view({rows, k / op.block(), op.block()}) * op.scales.unsqueeze(-1);
    if (op.global.defined()) v = v * op.global;
    return v.view({rows, k});
}

torch::Tensor pack_e2m1_pairs(const torch::Tensor& codes)
{
    const int64_t k = codes.size(1);
    TORCH_CHECK(codes.dim() == 2 && k % 2 == 0 && codes.scalar_type() == torch::kUInt8, "pack_e2m1_pairs: (R, K) uint8, K even");
    const auto low = codes.slice(1, 0, k, 2), high = codes.slice(1, 1, k, 2);
    return torch::bitwise_or(low, torch::bitwise_left_shift(high, 4)).contiguous();
}

torch::Tensor swizzled_scale_bytes(const torch::Tensor& bytes)
{
    const int64_t rows = bytes.size(0), cols = bytes.size(1);
    const int64_t padded_rows = (rows + 127) / 128 * 128, padded_cols = (cols + 3) / 4 * 4;
    auto padded = torch::zeros({padded_rows, padded_cols}, bytes.options());
    padded.narrow(0, 0, rows).narrow(1, 0, cols).copy_(bytes);
    return padded.view({padded_rows / 128, 128, padded_cols / 4, 4})
        .permute({0, 2, 1, 3})
        .reshape({-1, 4, 32, 4})
        .transpose(1, 2)
        .reshape({-1, 32, 16})
        .flatten();
}

torch::Tensor fp4_block_mm(const Fp4BlockOperand& a, const Fp4BlockOperand& bt)
{
    TORCH_CHECK(a.nvfp4 == bt.nvfp4 && a.codes.size(1) == bt.codes.size(1), "fp4_block_mm: one recipe, one K");
    if (!a.codes.is_cuda()) return at::mm(join_fp4_blocks(a), join_fp4_blocks(bt).t()).to(torch::kBFloat16);
    const auto scale_dtype = a.nvfp4 ? torch::kFloat8_e4m3fn : torch::kFloat8_e8m0fnu;
    const auto packed = [](const Fp4BlockOperand& op) { return pack_e2m1_pairs(op.codes).view(torch::kFloat4_e2m1fn_x2); };
    const auto blocked = [&](const Fp4BlockOperand& op) { return swizzled_scale_bytes(scale_bytes(op)).view(scale_dtype); };
    const auto pa = packed(a), pb = packed(bt); // (M, K/2), (N, K/2): b is pb.t(), column-major
    const auto sa = blocked(a), sb = blocked(bt);
    if (!a.nvfp4) return at::_scaled_mm(pa, pb.t(), sa, sb, std::nullopt, std::nullopt, torch::kBFloat16, false);
    // NVFP4's per-tensor decodes go beside the block scales; the GEMM multiplies its result by
    // their product.
    const std::array<int64_t, 2> recipe = {kBlockWise1x16, kTensorWise}, swizzle = {kSwizzle32x4x4, kNoSwizzle};
    const std::array<torch::Tensor, 2> scales_a = {sa, a.global.contiguous()}, scales_b = {sb, bt.global.contiguous()};
    return at::_scaled_mm_v2(pa, pb.t(), scales_a, recipe, swizzle, scales_b, recipe, swizzle, std::nullopt,
                             torch::kBFloat16, {}, false);
}

namespace {

bool fp4_probe(bool nvfp4)
{
    // MANTISSA_FP4_GEMM=0 keeps both recipes emulated, for a timing against the emulated path.
    if (const char* v = std::getenv("MANTISSA_FP4_GEMM"); v && std::string(v) == "0") return false;
    if (!torch::cuda::is_available() || current_gpu().capability.major != 10) return false;
    const char* recipe = nvfp4 ? "NVFP4" : "MXFP4";
    try {
        // (M, N, K): square, and a K of several 128-row scale tiles' worth of blocks.
        for (const auto& [m, n, k] : std::array<std::array<int64_t, 3>, 2>{{{128, 128, 128}, {256, 384, 512}}}) {
            const auto block = nvfp4 ? 16 : 32;
            const auto x = gemm_probe_operand(m, k, block, 0.37f, 0.0f), w = gemm_probe_operand(n, k, block, 0.11f, 5.0f);
            Fp4BlockOperand a, bt;
            if (nvfp4) {
                const auto qx = quantize_nvfp4_2d(x, false, SrSeed()), qw = quantize_nvfp4_2d(w, false, SrSeed());
                a = split_nvfp4_blocks(qx.values, qx.block_scales, qx.tensor_amax);
                bt = split_nvfp4_blocks(qw.values, qw.block_scales, qw.tensor_amax);
            } else {
                a = split_mxfp4_blocks(quantize_mxfp4_2d(x, false).values);
                bt = split_mxfp4_blocks(quantize_mxfp4_2d(w, false).values);
            }
            // The products are exact; their sum may be kept narrower than FP32 inside the tensor
            // cores (Blackwell's is not measured here), so 2^-10 of the products' magnitudes,
            // then the BF16 rounding.
            const double excess = gemm_excess_past_bound(fp4_block_mm(a, bt), join_fp4_blocks(a), join_fp4_blocks(bt), {},
                                                         std::ldexp(1.0, -10), std::ldexp(1.0, -8));
            if (!(excess <= 0.0)) {
                std::fprintf(stderr, "mantissa: the %s GEMM is off by %g past its bound on %lld x %lld x %lld: %s stays emulated\n",
                             recipe, excess, static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                             nvfp4 ? "nvfp4" : "mxfp4");
                return false;
            }
        }
        return true;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mantissa: the %s GEMM is not available (%s): it stays emulated\n", recipe,
                     first_line(e).c_str());
        return false;
    }
}

} // namespace

bool fp4_block_mm_available(bool nvfp4)
{
    static const bool nv = fp4_probe(true);
    static const bool mx = fp4_probe(false);
    return nvfp4 ? nv : mx;
}

} // namespace mantissa
