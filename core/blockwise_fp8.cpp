// SPDX-License-Identifier: GPL-3.0-or-later
#include "blockwise_fp8.h"

#include <array>
#include <cmath>

#include <cstdio>

#include "block_scaling.h"
#include "first_line.h"
#include "gemm_probe.h"
#include "tensor_stats.h"
#include "fp4.h"
#include "layer_gemm.h"

#ifdef MANTISSA_CUDA_KERNELS
#include "cuda/fp8_block.h"
#include "kernel_probe.h"
#endif

namespace mantissa {

namespace {

constexpr int64_t kBlock = 128;
constexpr float kE4m3Max = 448.0f;

Fp8BlockOperand split_fp8_blocks_ops(const torch::Tensor& values)
{
    const int64_t rows = values.size(0), k = values.size(1);
    const auto blocks = values.to(torch::kFloat32).contiguous().view({rows, k / kBlock, kBlock});
    const auto amax = blocks.abs().amax(-1); // (R, K/128); NaN where the block holds one
    // The smallest power of two d with amax / d <= 448: log2 lands within a binade of it, and
    // the two comparisons settle it exactly (a division by a power of two is exact). A larger
    // d would shift code bits out below E4M3's subnormals.
    // Built from the bits (fp4.h): a device's exp2/log2 need not be exact at powers of two.
    auto d = pow2_exact(ceil_log2(amax / kE4m3Max).clamp(-149.0, 127.0));
    d = torch::where(amax / d > kE4m3Max, d * 2.0f, d);
    d = torch::where((amax / (d * 0.5f) <= kE4m3Max) & (d > std::ldexp(1.0f, -149)), d * 0.5f, d);
    d = torch::where(amax > 0, d, torch::ones_like(d)); // zeros (and NaN blocks, whose codes stay NaN)
    Fp8BlockOperand out;
    const auto q = (blocks / d.unsqueeze(-1)).view({rows, k});
    // Past 464 (an Inf) E4M3 has no code but NaN, signed, as Mantissa's casts write it: c10's
    // own conversion saturates to 448 from LibTorch 2.13 on, and wrote NaN in 2.11.
    const auto nan = torch::full_like(q, std::numeric_limits<float>::quiet_NaN());
    out.codes = torch::where(q.abs() > 464.0f, torch::copysign(nan, q), q).to(torch::kFloat8_e4m3fn);
    out.decode = d;
    return out;
}

#ifdef MANTISSA_CUDA_KERNELS
// cuda_kernels::split_fp8_blocks against the ops, once per process, on what it is handed: the
// 1x128 and 128x128 casts of rows across the FP32 range (a block of zeros, one of NaN, tiny
// and huge blocks), and a few values that are no cast's (an E4M3 overflow, a lone subnormal).
ProbedKernel split_kernel(const torch::Device& device)
{
    static const ProbedKernel kernel = probe_paired_then_plain("fp8-block split", [&](bool paired) {
        const int64_t rows = 256, cols = 384;
        const auto i = torch::arange(rows * cols, torch::kFloat32).view({rows, cols});
        auto x = torch::sin(i * 0.29f) * torch::exp2(torch::remainder(i, 53.0f) - 26.0f);
        x.narrow(0, 0, 1).narrow(1, 0, 128).zero_();
        x.narrow(0, 1, 1).narrow(1, 128, 128).mul_(std::ldexp(1.0f, -110));
        x.narrow(0, 2, 1).narrow(1, 256, 128).mul_(std::ldexp(1.0f, 100));
        x[3][5].fill_(std::numeric_limits<float>::quiet_NaN());
        x = x.to(device);
        std::vector<torch::Tensor> inputs;
        for (const bool tile_2d : {false, true})
            inputs.push_back(quantize_fp8_block_2d(x, NumberFormat::E4M3, true, tile_2d).values);
        auto odd = inputs[0].clone();
        odd[4][0].fill_(1000.0f);
        odd[5][130].fill_(std::ldexp(1.0f, -149));
        inputs.push_back(odd);
        for (const auto& v : inputs) {
            const auto ops = split_fp8_blocks_ops(v);
            const auto [codes, decode] = cuda_kernels::split_fp8_blocks(v.contiguous(), paired);
            if (!torch::equal(ops.codes.view(torch::kUInt8).cpu(), codes.view(torch::kUInt8).cpu()) ||
                !torch::equal(ops.decode.view(torch::kInt32).cpu(), decode.view(torch::kInt32).cpu()))
                return false;
        }
        return true;
    });
    return kernel;
}
#endif

} // namespace

Fp8BlockOperand split_fp8_blocks(const torch::Tensor& values)
{
    TORCH_CHECK(values.dim() == 2 && values.size(1) % kBlock == 0, "split_fp8_blocks: (R, K) with K a multiple of 128");
#ifdef MANTISSA_CUDA_KERNELS
    const ProbedKernel kernel = values.is_cuda() ? split_kernel(values.device()) : ProbedKernel::Unavailable;
    if (kernel != ProbedKernel::Unavailable) {
        auto [codes, decode] = cuda_kernels::split_fp8_blocks(values.to(torch::kFloat32).contiguous(),
                                                              kernel == ProbedKernel::Paired);
        return {std::move(codes), std::move(decode)};
    }
#endif
    return split_fp8_blocks_ops(values);
}

std::string fp8_block_kernels_report()
{
#ifdef MANTISSA_CUDA_KERNELS
    if (!torch::cuda::is_available()) return "no GPU";
    return "block cast: " + fp8_block_cast_kernel_report(false) + ", tile cast: " + fp8_block_cast_kernel_report(true) +
           ", rows and columns cast: " + fp8_block_rows_cols_kernel_report() +
           ", block split: " + probed_kernel_report(split_kernel(torch::Device(torch::kCUDA)));
#else
    return "not built";
#endif
}

torch::Tensor join_fp8_blocks(const Fp8BlockOperand& op) { return dequantize_codes(op.codes, op.decode); }

namespace {

// _scaled_mm's blockwise call: cuBLAS's layouts, as PyTorch's test_scaled_mm_vs_emulated_block_wise
// lays them out: a row-major (M, K) with its scales (M, K/128) outer-dimension-major (stride 1
// along M); b column-major (K, N), i.e. bt's rows transposed, with scales (K/128, N) row-major.
torch::Tensor blockwise_scaled_mm(const Fp8BlockOperand& a, const Fp8BlockOperand& bt, const torch::Tensor& bias,
                                  c10::ScalarType out_dtype)
{
    const auto scale_a = a.decode.t().contiguous().t();
    const auto scale_b = bt.decode.t().contiguous();
    std::optional<at::Tensor> epilogue_bias; // empty, never an undefined tensor (read as a bias of numel 1)
    if (bias.defined()) epilogue_bias = bias;
    return at::_scaled_mm(a.codes.contiguous(), bt.codes.contiguous().t(), scale_a, scale_b, epilogue_bias, {},
                          out_dtype, /*use_fast_accum=*/false);
}

} // namespace

torch::Tensor blockwise_fp8_mm(const Fp8BlockOperand& a, const Fp8BlockOperand& bt, const torch::Tensor& bias)
{
    if (!a.codes.is_cuda()) {
        // The emulator's own call on the same values (addmm with the bias in it), so that the
        // two agree bit for bit on a CPU.
        const auto b = join_fp8_blocks(bt).t();
        return bias.defined() ? at::addmm(bias, join_fp8_blocks(a), b) : at::mm(join_fp8_blocks(a), b);
    }
    auto y = blockwise_scaled_mm(a, bt, {}, torch::kFloat32);
    return bias.defined() ? y + bias : y;
}

torch::Tensor blockwise_fp8_mm_bf16(const Fp8BlockOperand& a, const Fp8BlockOperand& bt, const torch::Tensor& bias)
{
    TORCH_CHECK(a.codes.is_cuda(), "blockwise_fp8_mm_bf16: CUDA operands");
    return blockwise_scaled_mm(a, bt, bias.defined() ? bias.to(torch::kBFloat16) : bias, torch::kBFloat16);
}

torch::Tensor tile_decode_as_rows(const torch::Tensor& tile_decode, int64_t rows)
{
    // A broadcast and a copy: repeat_interleave can size its output from a count read back.
    const int64_t tile_rows = tile_decode.size(0), tile_cols = tile_decode.size(1);
    return tile_decode.unsqueeze(1)
        .expand({tile_rows, kBlock, tile_cols})
        .reshape({tile_rows * kBlock, tile_cols})
        .narrow(0, 0, rows);
}

namespace {

// (M, N, K) of the probes: square, wider than tall and taller than wide, K of 2 and 4 blocks.
constexpr std::array<std::array<int64_t, 3>, 3> kProbeShapes = {{{256, 256, 256}, {128, 384, 256}, {384, 128, 512}}};

// Hopper's FP8 tensor cores keep about 14 bits while they add up a 128-block (DeepSeek-V3,
// section 3.3.2) before the FP32 promotion the block scale needs: each output may be off by
// 2^-5 of the sum of its products' magnitudes.
double excess_past_bound(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& w,
                         const torch::Tensor& bias, double output_step)
{
    return gemm_excess_past_bound(y, x, w, bias, std::ldexp(1.0, -5), output_step);
}

torch::Tensor probe_operand(int64_t rows, int64_t cols, float frequency, float salt)
{
    return gemm_probe_operand(rows, cols, kBlock, frequency, salt);
}

} // namespace

bool blockwise_fp8_available()
{
    static const bool available = [] {
        if (!native_fp8_available()) return false; // no CUDA, or no FP8 _scaled_mm at all
        try {
            // Operands fp8-block itself rounded (1x128 and 128x128 tiles, power-of-two scales).
            for (const auto& [m, n, k] : kProbeShapes) {
                const auto xq = quantize_fp8_block_2d(probe_operand(m, k, 0.37f, 0.0f), NumberFormat::E4M3, true, false).values;
                const auto wq = quantize_fp8_block_2d(probe_operand(n, k, 0.11f, 5.0f), NumberFormat::E4M3, true, true).values;
                const auto y = blockwise_fp8_mm(split_fp8_blocks(xq), split_fp8_blocks(wq));
                const double excess = excess_past_bound(y, xq, wq, {}, 0.0);
                if (!(excess <= 0.0)) {
                    std::fprintf(stderr,
                                 "mantissa: cuBLAS's blockwise FP8 GEMM is off by %g past its bound on %lld x %lld x "
                                 "%lld: fp8-block stays emulated\n",
                                 excess, static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k));
                    return false;
                }
            }
            return true;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "mantissa: cuBLAS's blockwise FP8 GEMM is not available (%s): fp8-block stays emulated\n",
                         first_line(e).c_str());
            return false;
        }
    }();
    return available;
}

bool blockwise_fp8_bf16_output_available()
{
    static const bool available = [] {
        if (!blockwise_fp8_available()) return false;
        try {
            // The same products, with a bias of every sign and size in the epilogue and the BF16
            // rounding: within the FP32 product's bound plus half a BF16 step of the answer.
            for (const auto& [m, n, k] : kProbeShapes) {
                const auto xq = cast_fp8_block_codes(probe_operand(m, k, 0.37f, 0.0f), NumberFormat::E4M3, true, false);
                const auto wq = cast_fp8_block_codes(probe_operand(n, k, 0.11f, 5.0f), NumberFormat::E4M3, true, true);
                const Fp8BlockOperand a{xq.codes, xq.decode}, bt{wq.codes, tile_decode_as_rows(wq.decode, n)};
                const auto bias = (probe_operand(1, n, 0.53f, 2.0f).squeeze(0) * 4.0f).to(torch::kBFloat16);
                const auto y = blockwise_fp8_mm_bf16(a, bt, bias);
                const double excess =
                    excess_past_bound(y, join_fp8_blocks(a), join_fp8_blocks(bt), bias, std::ldexp(1.0, -8));
                if (!(excess <= 0.0)) {
                    std::fprintf(stderr,
                                 "mantissa: cuBLAS's blockwise FP8 GEMM with a BF16 output is off by %g past its bound "
                                 "on %lld x %lld x %lld: fp8-block's GEMMs write FP32 and round after\n",
                                 excess, static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k));
                    return false;
                }
            }
            return true;
        } catch (const std::exception& e) {
            std::fprintf(stderr,
                         "mantissa: cuBLAS's blockwise FP8 GEMM takes no BF16 output or bias here (%s): fp8-block's "
                         "GEMMs write FP32 and round after\n",
                         first_line(e).c_str());
            return false;
        }
    }();
    return available;
}

} // namespace mantissa
