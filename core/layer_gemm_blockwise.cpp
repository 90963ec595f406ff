// SPDX-License-Identifier: GPL-3.0-or-later
// fp8-block (DeepSeek-V3's recipe, TE's Float8BlockScaling) in the native executor: each GEMM
// operand is cast once, straight from the tensor as it arrives, to E4M3 codes and a scale per
// 1x128 block (the weight's per 128x128 tile, once per optimizer step), and cuBLAS's blockwise
// FP8 GEMM multiplies those codes with those scales. The emulator's path (layer_gemm.cpp) rounds
// each operand to FP32 values and splits them back into codes around each GEMM: on an H200 a
// wide step of it took 2.7x one of FP8 delayed scaling (docs/BENCHMARKS.md). The casts are the
// emulator's bit for bit (codes * scales are its values), the telemetry records the same roles in
// the same order, and on a CPU the same path multiplies the dequantized codes with the
// emulator's own call, which tests/test_native.cpp holds to the emulator.
#include "layer_gemm.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "quantize.h"

namespace mantissa {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Fp8BlockOperand operand(const Fp8BlockCodes& c) { return {c.codes, c.decode}; }

// On a GPU whose cuBLAS takes it, each GEMM writes its BF16 output itself (the bias in its
// epilogue): one 2-byte write where an FP32 product, a bias pass and a rounding pass took three.
bool bf16_epilogue(const torch::Tensor& operand) { return operand.is_cuda() && blockwise_fp8_bf16_output_available(); }

// A GEMM's BF16 output against its FP32 accumulator, as the emulator records it; where the
// accumulator never left the tensor cores (the BF16 epilogue), the output alone, as the native
// executor records its per-tensor FP8 GEMMs. Either way the same kernels run armed or not.
void record_gemm_output(LayerGemm& layer, const char* role, const torch::Tensor& accumulator, const torch::Tensor& out)
{
    if (accumulator.defined()) layer.record(role, accumulator, NumberFormat::BF16, 1.0f, out);
    else layer.record(role, out, NumberFormat::BF16, 1.0f, {});
}

// y = x W^T + b, all three GEMMs E4M3 with block scales. x (M, K), W (N, K).
struct BlockwiseLinear : public torch::autograd::Function<BlockwiseLinear> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, int64_t layer_address, bool backward_follows)
    {
        auto* layer = reinterpret_cast<LayerGemm*>(layer_address);
        const bool has_bias = bias.numel() > 0;
        // x along K for this GEMM and, when a backward follows, along M for the wgrad GEMM (TE's
        // "columnwise" copy, quantized from x itself, not from the first cast): one read of x
        // on a GPU. Only the second is kept for the backward: one byte a value.
        Fp8BlockCodesBoth x8;
        if (backward_follows) x8 = layer->blockwise_cast_both(x, OperandRole::Input); // (M, K), (K, M)
        else x8.rows = layer->blockwise_cast(x, OperandRole::Input);
        const auto& xr = x8.rows;
        const auto& w = layer->blockwise_weight(weight, false);               // (N, K)
        // The bias joins the FP32 accumulator rounded to the output's BF16, as the emulator's
        // (and cuBLAS's epilogue) takes it.
        const auto bias_out = has_bias ? round_to_format(bias, NumberFormat::BF16, Overflow::Propagate) : torch::Tensor();
        torch::Tensor accumulator, y;
        if (bf16_epilogue(x)) {
            y = blockwise_fp8_mm_bf16(operand(xr), w.rows, bias_out); // (M, N) BF16
        } else {
            accumulator = blockwise_fp8_mm(operand(xr), w.rows, bias_out); // (M, N) FP32
            y = accumulator.to(torch::kBFloat16);
        }
        layer->note_backend(x.is_cuda());
        if (layer->telemetry_armed()) {
            layer->remember_weight(weight);
            record_gemm_output(*layer, "output", accumulator, y);
            layer->record_block_codes("weight", weight, NumberFormat::E4M3, w.rows.codes, w.rows.decode);
            layer->record_block_codes("input", x, NumberFormat::E4M3, xr.codes, xr.decode);
        }
        ctx->saved_data["layer"] = layer_address;
        ctx->saved_data["has_bias"] = has_bias;
        ctx->save_for_backward({x8.cols.codes, x8.cols.decode, weight});
        return y;
    }

    static variable_list backward(AutogradContext* ctx, variable_list grads)
    {
        auto* layer = reinterpret_cast<LayerGemm*>(ctx->saved_data["layer"].toInt());
        const auto saved = ctx->get_saved_variables();
        const auto& weight = saved[2];
        const auto dy = grads[0].contiguous(); // (M, N)
        const bool armed = layer->telemetry_armed();

        // dy along N for the dgrad GEMM and along M for the wgrad GEMM, from one read.
        const auto dy8 = layer->blockwise_cast_both(dy, OperandRole::GradOutput); // (M, N), (N, M)
        const auto& dyr = dy8.rows;

        // dgrad: dx = dy W, contraction over N: dy along N, W^T (K, N) along N.
        const auto& w = layer->blockwise_weight(weight, true);
        const auto dx = bf16_epilogue(dy) ? blockwise_fp8_mm_bf16(operand(dyr), w.transposed)
                                          : blockwise_fp8_mm(operand(dyr), w.transposed).to(torch::kBFloat16); // (M, K)
        if (armed) layer->record_block_codes("grad_output", dy, NumberFormat::E4M3, dyr.codes, dyr.decode);

        // wgrad: dW = dy^T x, contraction over M: both along M, cast from dy and x themselves.
        // Rounded to BF16 as every FP8 GEMM's output; autograd hands it to the FP32 master
        // weight's gradient with the same values, as it does dx to an FP32 input.
        torch::Tensor accumulator, dw;
        if (bf16_epilogue(dy)) {
            dw = blockwise_fp8_mm_bf16(operand(dy8.cols), {saved[0], saved[1]}); // (N, K) BF16
        } else {
            accumulator = blockwise_fp8_mm(operand(dy8.cols), {saved[0], saved[1]}); // (N, K) FP32
            dw = accumulator.to(torch::kBFloat16);
        }
        if (armed) record_gemm_output(*layer, "weight_grad", accumulator, dw);

        torch::Tensor db;
        if (ctx->saved_data["has_bias"].toBool()) db = dy.to(torch::kFloat32).sum(0); // the emulator's FP32 sum
        return {dx, dw, db, torch::Tensor(), torch::Tensor()};
    }
};

std::atomic<bool>& codes_enabled()
{
    static std::atomic<bool> enabled = [] {
        const char* v = std::getenv("MANTISSA_FP8_BLOCK_CODES");
        return !(v && std::string(v) == "0");
    }();
    return enabled;
}

} // namespace

void LayerGemm::set_blockwise_codes_enabled(bool enabled) { codes_enabled() = enabled; }
bool LayerGemm::blockwise_codes_enabled() { return codes_enabled(); }

bool LayerGemm::blockwise_codes_eligible(const torch::Tensor& x2, const torch::Tensor& weight) const
{
    if (!blockwise_codes_enabled() || x2.dim() != 2 || weight.dim() != 2 ||
        !blockwise_codes_fit(formats_, recipe_, x2.size(0), x2.size(1), weight.size(0)))
        return false;
    return !x2.is_cuda() || blockwise_fp8_available();
}

torch::Tensor LayerGemm::linear_blockwise(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias)
{
    // A 16-bit activation reaches the GPU's cast as it is; elsewhere the cast reads FP32, as
    // the emulator's does (and the same tensor is then recorded as the input).
    const auto x2 = (fp8_block_reads_as_is(x, recipe_) ? x : x.to(torch::kFloat32)).reshape({-1, x.size(-1)}); // (M, K)
    // Evaluation and sampling (no gradient) skip the input's cast along M.
    const bool backward_follows = torch::GradMode::is_enabled() && (x.requires_grad() || weight.requires_grad());
    auto out_shape = x.sizes().vec();
    out_shape.back() = weight.size(0);
    const auto bias_or_empty = bias.defined() ? bias : torch::empty({0}, weight.options().requires_grad(false));
    return BlockwiseLinear::apply(x2, weight, bias_or_empty, reinterpret_cast<int64_t>(this), backward_follows)
        .view(out_shape);
}

void LayerGemm::observe_blockwise_cast(OperandRole role, const torch::Tensor& x, const Fp8BlockCodes& cast)
{
    // As the emulator's round_operand observes its casts: armed training steps only.
    if (!armed_ || !training_) return;
    const BlockQuantized q{{}, cast.decode, cast.amax, {}};
    observe_block_cast(role, x, x.dim() - 1, block_cast_record(q, NumberFormat::E4M3, recipe_));
}

Fp8BlockCodes LayerGemm::blockwise_cast(const torch::Tensor& x, OperandRole role)
{
    auto cast = cast_fp8_block_codes(x, NumberFormat::E4M3, recipe_.block_power_of_two, /*tile_2d=*/false);
    observe_blockwise_cast(role, x, cast);
    return cast;
}

Fp8BlockCodesBoth LayerGemm::blockwise_cast_both(const torch::Tensor& x, OperandRole role)
{
    auto both = cast_fp8_block_codes_both(x, NumberFormat::E4M3, recipe_.block_power_of_two);
    observe_blockwise_cast(role, x, both.rows);
    return both;
}

const LayerGemm::BlockwiseWeight& LayerGemm::blockwise_weight(const torch::Tensor& weight, bool transposed)
{
    // Evaluation casts with the current weight and keeps nothing for the training that follows.
    BlockwiseWeight& w = training_ ? blockwise_weight_ : blockwise_scratch_;
    const int64_t version = static_cast<int64_t>(weight._version());
    if (!training_ || w.version != version || w.data != weight.data_ptr() || !w.rows.codes.defined()) {
        w = {};
        const auto detached = weight.detach();
        const auto cast = cast_fp8_block_codes(detached, NumberFormat::E4M3, recipe_.block_power_of_two, /*tile_2d=*/true);
        observe_blockwise_cast(OperandRole::Weight, detached, cast); // its tiles' scales
        w.rows = {cast.codes, tile_decode_as_rows(cast.decode, weight.size(0))}; // (N, K), (N, K / 128)
        w.tile_decode = cast.decode;
        w.version = version;
        w.data = weight.data_ptr();
    }
    if (transposed && !w.transposed.codes.defined()) {
        const int64_t k = weight.size(1);
        w.transposed = {w.rows.codes.t().contiguous(), tile_decode_as_rows(w.tile_decode.t(), k)}; // (K, N), (K, N / 128)
    }
    return w;
}

} // namespace mantissa
