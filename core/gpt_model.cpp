// SPDX-License-Identifier: GPL-3.0-or-later
#include "gpt_model.h"

#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "cpu_attention_scores.h"
#include "cpu_causal_mask.h"
#include "cpu_log_z.h"
#include "fused_cross_entropy.h"
#include "kernel_probe.h"

#ifdef MANTISSA_CUDA_KERNELS
#include "cuda/attention_scores.h"
#endif

namespace mantissa {

std::shared_ptr<LayerGemm> GemmRegistry::make(const std::string& layer_name)
{
    auto gemm = std::make_shared<LayerGemm>(layer_name, resolve_layer_formats(precision_, layer_name, n_layer_),
                                            resolve_layer_recipe(precision_, layer_name), precision_.backend);
    // Auto is resolved by the Trainer, which knows the device: here it means the emulator.
    gemm->set_native(precision_.backend == GemmBackend::Native);
    layers_.push_back(gemm);
    return gemm;
}

GemmLinearImpl::GemmLinearImpl(std::shared_ptr<LayerGemm> gemm, int64_t in_features, int64_t out_features, bool bias)
    : gemm_(std::move(gemm))
{
    weight_ = register_parameter("weight", torch::empty({out_features, in_features}));
    if (bias) bias_ = register_parameter("bias", torch::zeros({out_features}));
}

GemmLinearImpl::GemmLinearImpl(std::shared_ptr<LayerGemm> gemm, torch::Tensor tied_weight)
    : gemm_(std::move(gemm)), weight_(std::move(tied_weight))
{
    gemm_->set_weight_shared(true);
}

torch::Tensor GemmLinearImpl::forward(const torch::Tensor& x)
{
    gemm_->set_training(is_training());
    return gemm_->linear(x, weight_, bias_);
}

torch::Tensor GemmLinearImpl::forward_of_gelu(const torch::Tensor& u)
{
    gemm_->set_training(is_training());
    return gemm_->linear_of_gelu(u, weight_, bias_);
}

NormImpl::NormImpl(int64_t features, bool bias) : features_(features)
{
    weight_ = register_parameter("weight", torch::ones({features}));
    if (bias) bias_ = register_parameter("bias", torch::zeros({features}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x)
{
    // LayerNorm is on autocast's FP32 list: a 16-bit input is widened first.
    return at::layer_norm(x.to(torch::kFloat32), {features_}, weight_, bias_, 1e-5);
}

namespace {

// The scores of one block of queries against a span of keys, (B, H, r, keys) or, on the 16-bit
// route, (B·H, r, keys), in FP32 either way.
struct ScoreReader {
    torch::Tensor q, k; // (B, H, T, D): FP32 copies, or the 16-bit tensors made contiguous
    bool sixteen_bit = false;
    torch::Tensor scores(int64_t start, int64_t r, int64_t key_start, int64_t keys) const
    {
        if (!sixteen_bit)
            return q.narrow(2, start, r).matmul(k.narrow(2, key_start, keys).transpose(-2, -1));
        // Views, no copies: (B, H) folds into one batch dimension of a contiguous tensor.
        return at::bmm(q.narrow(2, start, r).flatten(0, 1), k.narrow(2, key_start, keys).flatten(0, 1).transpose(1, 2),
                       torch::kFloat32);
    }
};

torch::Tensor max_abs_over_blocks(const ScoreReader& read, int64_t T, int64_t rows, const torch::Device& device)
{
    std::vector<torch::Tensor> maxima;
    // Entry (i, j) of a block's own keys is in the future when j > i: one mask for every block,
    // the last one (which may be shorter) taking its top-left corner.
    const int64_t widest = std::min(rows, T);
    const auto future_of_widest = torch::ones({widest, widest}, torch::dtype(torch::kBool).device(device)).triu(1);
    for (int64_t start = 0; start < T; start += rows) {
        const int64_t r = std::min(rows, T - start);
        if (start > 0) {
            // Every query of the block sees the keys before it: no mask, and the largest |score|
            // from one read (a masked copy of |scores| cost three more passes over them; on an
            // H200 this read was a good part of a telemetry step, 2026-12-04). NaN propagates
            // through both, as through amax.
            const auto [lowest, highest] = at::aminmax(read.scores(start, r, 0, start));
            maxima.push_back(at::maximum(highest, lowest.neg()));
        }
        // The block's own keys: query start + i sees keys start .. start + i.
        auto own = read.scores(start, r, start, r).abs_(); // (..., r, r)
        const auto future = r == widest ? future_of_widest : future_of_widest.narrow(0, 0, r).narrow(1, 0, r);
        maxima.push_back(own.masked_fill_(future, 0.0f).amax());
    }
    return torch::stack(maxima).amax();
}

ScoreReader fp32_reader(const torch::Tensor& q, const torch::Tensor& k)
{
    return {q.to(torch::kFloat32), k.to(torch::kFloat32), false};
}

bool is_16bit(const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kHalf; }

// Whether this GPU's 16-bit batched GEMM with an FP32 output (at::bmm's out_dtype) gives the
// FP32 route's maximum to within the FP32 rounding of a sum in another order, NaN as NaN, on
// fixed heads in small and whole blocks and with a NaN in one query: once per process and
// dtype, else the FP32 route stays. The products of 16-bit values are exact in FP32 either way.
bool sixteen_bit_scores_agree(const torch::Device& device, torch::ScalarType dtype)
{
    static std::map<torch::ScalarType, bool> known;
    static std::mutex lock;
    const std::lock_guard<std::mutex> guard(lock);
    if (const auto it = known.find(dtype); it != known.end()) return it->second;
    const bool agrees = kernel_agrees(dtype == torch::kHalf ? "FP16 attention-score GEMM" : "BF16 attention-score GEMM", [&] {
        torch::NoGradGuard no_grad;
        // Fixed values, no random draws: a probe must not move the run's generator.
        const auto i = torch::arange(2 * 3 * 200 * 64, torch::kFloat32);
        auto q = (torch::sin(i * 0.37f) * 3.0f).reshape({2, 3, 200, 64}).to(dtype).to(device);
        const auto k = (torch::cos(i * 0.11f) * 3.0f).reshape({2, 3, 200, 64}).to(dtype).to(device);
        for (int64_t rows : {37, 200}) {
            const double a = max_abs_over_blocks(fp32_reader(q, k), 200, rows, device).item<double>();
            const double b = max_abs_over_blocks({q.contiguous(), k.contiguous(), true}, 200, rows, device).item<double>();
            if (!(std::abs(a - b) <= 1e-5 * std::abs(a))) return false;
        }
        q.index_put_({1, 2, 150, 5}, std::numeric_limits<float>::quiet_NaN());
        return std::isnan(max_abs_over_blocks({q.contiguous(), k.contiguous(), true}, 200, 37, device).item<double>());
    });
    known[dtype] = agrees;
    return agrees;
}

#ifdef MANTISSA_CUDA_KERNELS
// Whether the fused kernel (cuda/attention_scores.h) gives the FP32 route's maximum on this GPU,
// to within the FP32 rounding of sums in another order, for heads of this dtype and width: once
// per process and pair, else the routes above stay. Fixed heads of 208 queries (the last block
// of 64 ragged) with a planted pair on each side of the causal edge: a future pair across a
// tile boundary that must not count, and a diagonal one that must; then the same heads read in
// place from a qkv-like tensor, which must give the same bits; then a NaN query, which must
// give NaN.
bool fused_scores_agree(const torch::Device& device, torch::ScalarType dtype, int64_t width)
{
    static std::map<std::pair<torch::ScalarType, int64_t>, bool> known;
    static std::mutex lock;
    const std::lock_guard<std::mutex> guard(lock);
    if (!cuda_kernels::causal_max_abs_score_takes_width(width)) return false; // not a failure: LibTorch's ops
    if (const auto it = known.find({dtype, width}); it != known.end()) return it->second;
    const std::string name = std::string(dtype == torch::kHalf ? "FP16" : "BF16") + " attention max score (width " +
                             std::to_string(width) + ")";
    const bool agrees = kernel_agrees(name.c_str(), [&] {
        torch::NoGradGuard no_grad;
        const int64_t B = 2, H = 3, T = 208;
        const auto i = torch::arange(B * H * T * width, torch::kFloat32);
        auto q = (torch::sin(i * 0.37f) * 3.0f).reshape({B, H, T, width});
        auto k = (torch::cos(i * 0.11f) * 3.0f).reshape({B, H, T, width});
        using torch::indexing::Slice;
        q.index_put_({Slice(), Slice(), Slice(), 0}, 0.0f);
        k.index_put_({Slice(), Slice(), Slice(), 0}, 0.0f);
        q.index_put_({0, 1, 15, 0}, 64.0f); // query 15 against key 16: the future
        k.index_put_({0, 1, 16, 0}, 64.0f);
        q.index_put_({1, 2, 130, 0}, 48.0f); // query 130 against itself
        k.index_put_({1, 2, 130, 0}, 48.0f);
        q = q.to(dtype).to(device);
        k = k.to(dtype).to(device);
        const double ours = cuda_kernels::causal_max_abs_score(q, k).item<double>();
        const double fp32 = max_abs_over_blocks(fp32_reader(q, k), T, 37, device).item<double>();
        if (!(std::abs(ours - fp32) <= 1e-5 * std::abs(fp32))) return false;
        // (B, T, 3·H·width) as the qkv projection's output, q and k its first two thirds.
        const auto qkv = torch::cat({q.transpose(1, 2).reshape({B, T, H * width}), k.transpose(1, 2).reshape({B, T, H * width}),
                                     torch::zeros({B, T, H * width}, q.options())},
                                    2);
        auto heads = [&](int64_t part) { return qkv.narrow(2, part * H * width, H * width).view({B, T, H, width}).transpose(1, 2); };
        if (cuda_kernels::causal_max_abs_score(heads(0), heads(1)).item<double>() != ours) return false;
        q.index_put_({1, 2, 150, 5}, std::numeric_limits<float>::quiet_NaN());
        return std::isnan(cuda_kernels::causal_max_abs_score(q, k).item<double>());
    });
    known[{dtype, width}] = agrees;
    return agrees;
}
#endif

} // namespace

bool causal_max_abs_score_fused(const torch::Tensor& q, const torch::Tensor& k)
{
#ifdef MANTISSA_CUDA_KERNELS
    return q.is_cuda() && cuda_kernels::causal_max_abs_score_takes(q, k) &&
           fused_scores_agree(q.device(), q.scalar_type(), q.size(3));
#else
    (void)q, (void)k;
    return false;
#endif
}

void probe_attention_score_routes(const torch::Device& device, int64_t head_width)
{
    if (!device.is_cuda()) return;
    for (const auto dtype : {torch::kBFloat16, torch::kHalf}) {
        sixteen_bit_scores_agree(device, dtype);
#ifdef MANTISSA_CUDA_KERNELS
        fused_scores_agree(device, dtype, head_width);
#else
        (void)head_width;
#endif
    }
}

torch::Tensor causal_max_abs_score(const torch::Tensor& q, const torch::Tensor& k, int64_t max_scores)
{
#ifdef MANTISSA_CUDA_KERNELS
    if (causal_max_abs_score_fused(q, k)) return cuda_kernels::causal_max_abs_score(q, k);
#endif
    // On the CPU, one pass over each head's causal products, read in place: the ops' blocks of
    // scores cost copies of the heads, a GEMM and a pass over the scores (about 0.65 ms of a
    // 22-ms shakespeare-char telemetry step, perf, 2026-12-05).
    if (q.is_cpu() && k.is_cpu()) return causal_max_abs_score_cpu(q.to(torch::kFloat32), k.to(torch::kFloat32));
    return causal_max_abs_score_of_ops(q, k, max_scores);
}

torch::Tensor causal_max_abs_score_of_ops(const torch::Tensor& q, const torch::Tensor& k, int64_t max_scores)
{
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
    const int64_t rows = std::max<int64_t>(1, max_scores / std::max<int64_t>(1, B * H * T));
    // On a GPU, 16-bit heads go through the tensor cores with FP32 sums: the FP32 route's two
    // widened copies and its FP32 GEMMs (no TF32) were a good part of a telemetry step's
    // attention cost on an H200 (read from the code, 2026-12-04). The CPU keeps the FP32 route.
    if (q.is_cuda() && is_16bit(q) && k.scalar_type() == q.scalar_type() && sixteen_bit_scores_agree(q.device(), q.scalar_type()))
        return max_abs_over_blocks({q.contiguous(), k.contiguous(), true}, T, rows, q.device());
    return max_abs_over_blocks(fp32_reader(q, k), T, rows, q.device());
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const std::string& prefix, const ModelConfig& config,
                                                 GemmRegistry& gemms)
    : n_head_(config.n_head), dropout_(config.dropout)
{
    qkv = register_module("qkv", GemmLinear(gemms.make(prefix + ".qkv"), config.n_embd, 3 * config.n_embd, config.bias));
    sdpa_ = gemms.make(prefix + ".sdpa");
    proj = register_module("proj", GemmLinear(gemms.make(prefix + ".proj"), config.n_embd, config.n_embd, config.bias));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x)
{
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
    const auto parts = qkv->forward(x).split(C, /*dim=*/2); // 3 x (B, T, C)
    auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head_, C / n_head_}).transpose(1, 2); };
    const auto q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]); // (B, H, T, D)
    const double p = is_training() ? dropout_ : 0.0;
    sdpa_->set_training(is_training());
    const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(C / n_head_));
    if (sdpa_->telemetry_armed()) {
        // Wortsman et al. 2023: attention logit growth precedes divergence. Read on the side,
        // in FP32 and a block of queries at a time, so that neither the step's kernels nor its
        // peak memory change (the fused kernel never materialises the scores).
        torch::NoGradGuard no_grad;
        sdpa_->set_attention_max_score(causal_max_abs_score(q, k), inv_sqrt_d); // stays on the device
    }
    torch::Tensor y;
    const bool native_fused = sdpa_->native() && sdpa_->uniform_16bit();
    if (sdpa_->formats().all_fp32() || native_fused) {
        // FP32, or autocast's choice for 16-bit attention: the fused kernel (flash, cuDNN or
        // memory-efficient on CUDA) in the layer's dtype.
        const auto dtype = sdpa_->formats().all_fp32() ? torch::kFloat32 : sdpa_->output_dtype();
        y = at::scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype), {}, p, /*is_causal=*/true);
        if (native_fused) sdpa_->note_backend(true); // (B, H, T, D)
    } else {
        // Spelled out so that both products go through the layer's formats; softmax stays FP32.
        const auto qk = sdpa_->matmul(q, k.transpose(-2, -1), LayerGemm::AttentionProduct::Scores);
        const auto scores = scaled_causal_mask(qk.to(torch::kFloat32), inv_sqrt_d); // (B, H, T, T), the future at -inf
        auto probs = torch::dropout(torch::softmax(scores, -1), p, is_training());
        y = sdpa_->matmul(probs, v, LayerGemm::AttentionProduct::Values); // (B, H, T, D)
    }
    y = y.transpose(1, 2).contiguous().view({B, T, C});
    return torch::dropout(proj->forward(y), dropout_, is_training());
}

MlpImpl::MlpImpl(const std::string& prefix, const ModelConfig& config, GemmRegistry& gemms) : dropout_(config.dropout)
{
    fc1 = register_module("fc1", GemmLinear(gemms.make(prefix + ".fc1"), config.n_embd, 4 * config.n_embd, config.bias));
    fc2 = register_module("fc2", GemmLinear(gemms.make(prefix + ".fc2"), 4 * config.n_embd, config.n_embd, config.bias));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x)
{
    // gelu(u), (B, T, 4C): the exact erf GELU like nn.GELU(), taken by fc2 (an FP8 fc2 casts it
    // straight from u, as TransformerEngine's LayerNormMLP does).
    const auto u = fc1->forward(x);
    return torch::dropout(fc2->forward_of_gelu(u), dropout_, is_training());
}

BlockImpl::BlockImpl(const std::string& prefix, const ModelConfig& config, GemmRegistry& gemms)
{
    ln1 = register_module("ln1", Norm(config.n_embd, config.bias));
    attn = register_module("attn", CausalSelfAttention(prefix + ".attn", config, gemms));
    ln2 = register_module("ln2", Norm(config.n_embd, config.bias));
    mlp = register_module("mlp", Mlp(prefix + ".mlp", config, gemms));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x)
{
    auto h = x + attn->forward(ln1->forward(x));
    return h + mlp->forward(ln2->forward(h));
}

GptImpl::GptImpl(const ModelConfig& config, int64_t vocab_size, const PrecisionConfig& precision)
    : config_(config), vocab_size_(vocab_size), gemms_(precision, config.n_layer)
{
    wte_ = register_parameter("wte", torch::empty({vocab_size, config.n_embd}));
    wpe_ = register_parameter("wpe", torch::empty({config.context_length, config.n_embd}));
    blocks_ = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < config.n_layer; ++i)
        blocks_->push_back(Block("blocks." + std::to_string(i), config, gemms_));
    ln_f_ = register_module("ln_f", Norm(config.n_embd, config.bias));
    // Not registered: its only tensor is wte, which the optimizer must see once.
    lm_head_ = GemmLinear(gemms_.make("lm_head"), wte_);
    reset_parameters();
}

void GptImpl::reset_parameters()
{
    torch::NoGradGuard no_grad;
    // GPT-2: N(0, 0.02) everywhere, residual projections scaled by 1/sqrt(2 n_layer) so the
    // residual stream's variance does not grow with depth.
    const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
    for (auto& item : named_parameters(/*recurse=*/true)) {
        const std::string& name = item.key();
        torch::Tensor& p = item.value();
        auto ends_with = [&](const std::string& suffix) {
            return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
        };
        const bool is_norm = name.find(".ln") != std::string::npos || name.rfind("ln_f", 0) == 0;
        if (is_norm) {
            ends_with("weight") ? p.fill_(1.0) : p.zero_();
        } else if (ends_with("proj.weight") || ends_with("fc2.weight")) {
            p.normal_(0.0, residual_std);
        } else if (p.dim() == 2) {
            p.normal_(0.0, 0.02);
        } else {
            p.zero_();
        }
    }
}

torch::Tensor GptImpl::forward(const torch::Tensor& idx)
{
    const int64_t T = idx.size(1);
    TORCH_CHECK(T <= config_.context_length, "sequence of ", T, " tokens is longer than context_length ",
                config_.context_length);
    const auto pos = torch::arange(T, idx.options());                               // (T)
    auto x = at::embedding(wte_, idx) + at::embedding(wpe_, pos);                 // (B, T, C)
    x = torch::dropout(x, config_.dropout, is_training());
    for (const auto& block : *blocks_) x = block->as<Block>()->forward(x);
    x = ln_f_->forward(x);
    lm_head_->train(is_training()); // not a registered child, so eval()/train() do not reach it
    auto logits = lm_head_->forward(x); // (B, T, V)
    // log Z of the output softmax; z-loss keeps it near 0 (Wortsman et al. 2023). The fused loss
    // computes it for its own sake: then loss() records it.
    if (measure_log_z_ && !takes_fused_cross_entropy(logits)) {
        // A block of rows at a time (at most 2^24 values): widened whole, the logits and
        // logsumexp's temporary would each take another FP32 logits tensor on telemetry steps
        // alone (3.3 GB each for GPT-2 small, batch 16), where a run could then run out of memory.
        set_log_z(log_z_in_blocks(logits, int64_t(1) << 24)); // (B*T)
    }
    return logits;
}

void GptImpl::set_log_z(const torch::Tensor& log_z)
{
    torch::NoGradGuard no_grad;
    log_z_mean_ = log_z.mean(); // device scalars, read back with the telemetry frame
    log_z_max_ = log_z.abs().max();
}

torch::Tensor log_z_in_blocks(const torch::Tensor& logits, int64_t max_values)
{
    const int64_t V = logits.size(-1);
    const auto rows = logits.reshape({-1, V});
    const int64_t block = std::max<int64_t>(1, max_values / V);
    std::vector<torch::Tensor> parts;
    for (int64_t first = 0; first < rows.size(0); first += block) {
        const auto part = rows.narrow(0, first, std::min(block, rows.size(0) - first)).to(torch::kFloat32);
        parts.push_back(part.is_cpu() ? log_z_rows_cpu(part) : part.logsumexp(-1));
    }
    return torch::cat(parts);
}

torch::Tensor GptImpl::loss(const torch::Tensor& logits, const torch::Tensor& targets)
{
    const auto rows = logits.view({-1, logits.size(-1)}); // (B*T, V)
    // 16-bit logits on a GPU: the same FP32 arithmetic in two kernels that read them once, where
    // the ops below make and keep an FP32 copy (fused_cross_entropy.h). Its rows' log Z are
    // telemetry's too (forward() left them to it).
    if (takes_fused_cross_entropy(rows)) {
        torch::Tensor log_z;
        auto mean = fused_cross_entropy(rows.contiguous(), targets.reshape({-1}).contiguous(),
                                        measure_log_z_ ? &log_z : nullptr);
        if (measure_log_z_) set_log_z(log_z);
        return mean;
    }
    // On autocast's FP32 list (log_softmax, nll_loss): 16-bit logits are widened first.
    return torch::nn::functional::cross_entropy(rows.to(torch::kFloat32), targets.reshape({-1}));
}

} // namespace mantissa
