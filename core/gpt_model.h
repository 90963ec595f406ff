// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// GPT decoder (GPT-2 shape, pre-LN). Each GEMM-bearing layer is its own module with a
// stable dotted name, so per-layer precision and telemetry can key on it.
//
// Shapes: B batch, T sequence, C n_embd, H heads, D = C / H, V vocabulary.

#include <string>
#include <vector>

#include <torch/torch.h>

#include "layer_gemm.h"
#include "project_config.h"

namespace mantissa {

// Builds each layer's GEMM state from the precision config, and keeps the list in forward order.
class GemmRegistry {
public:
    GemmRegistry(const PrecisionConfig& precision, int64_t n_layer) : precision_(precision), n_layer_(n_layer) {}
    std::shared_ptr<LayerGemm> make(const std::string& layer_name);
    const std::vector<std::shared_ptr<LayerGemm>>& layers() const { return layers_; }

private:
    PrecisionConfig precision_;
    int64_t n_layer_;
    std::vector<std::shared_ptr<LayerGemm>> layers_;
};

// y = x W^T + b through the layer's precision policy. Owns its weight, or borrows one (the
// tied LM head).
class GemmLinearImpl : public torch::nn::Module {
public:
    GemmLinearImpl(std::shared_ptr<LayerGemm> gemm, int64_t in_features, int64_t out_features, bool bias);
    GemmLinearImpl(std::shared_ptr<LayerGemm> gemm, torch::Tensor tied_weight); // weight not registered here

    torch::Tensor forward(const torch::Tensor& x); // (..., in) -> (..., out)
    // forward(gelu(u)) with the exact GELU, which an FP8 layer may cast straight from u
    // (LayerGemm::linear_of_gelu).
    torch::Tensor forward_of_gelu(const torch::Tensor& u);
    const std::string& layer_name() const { return gemm_->name(); }
    const torch::Tensor& weight() const { return weight_; }

private:
    std::shared_ptr<LayerGemm> gemm_;
    torch::Tensor weight_; // (out, in)
    torch::Tensor bias_;   // (out) or undefined
};
TORCH_MODULE(GemmLinear);

// LayerNorm whose bias is optional (nanoGPT's bias=False), kept in FP32 by every recipe.
class NormImpl : public torch::nn::Module {
public:
    NormImpl(int64_t features, bool bias);
    torch::Tensor forward(const torch::Tensor& x);

private:
    int64_t features_;
    torch::Tensor weight_, bias_;
};
TORCH_MODULE(Norm);

// max |q_i . k_j| over the pairs causal attention scores (key j <= query i), every head: (),
// FP32, on q's device, NaN if one of them is NaN. q, k (B, H, T, D). On a GPU, 16-bit heads the
// fused kernel takes (cuda/attention_scores.h) go through it once its probe has passed; the
// rest through the ops. On the CPU, causal_max_abs_score_cpu (`max_scores` plays no part).
torch::Tensor causal_max_abs_score(const torch::Tensor& q, const torch::Tensor& k, int64_t max_scores = int64_t(1) << 24);
// Whether causal_max_abs_score takes these heads through the fused kernel.
bool causal_max_abs_score_fused(const torch::Tensor& q, const torch::Tensor& k);
// Runs causal_max_abs_score's start-up probes for 16-bit heads of this width on this GPU (the
// fused kernel's, the 16-bit GEMM route's), so that their host syncs come before the first
// step rather than inside the first telemetry step. Nothing on other devices.
void probe_attention_score_routes(const torch::Device& device, int64_t head_width);
// The ops' route: queries in blocks whose FP32 scores stay near `max_scores`, each block
// multiplying only the keys it may see.
torch::Tensor causal_max_abs_score_of_ops(const torch::Tensor& q, const torch::Tensor& k,
                                          int64_t max_scores = int64_t(1) << 24);

class CausalSelfAttentionImpl : public torch::nn::Module {
public:
    CausalSelfAttentionImpl(const std::string& prefix, const ModelConfig& config, GemmRegistry& gemms);
    torch::Tensor forward(const torch::Tensor& x); // (B, T, C) -> (B, T, C)

    GemmLinear qkv{nullptr}, proj{nullptr};

private:
    std::shared_ptr<LayerGemm> sdpa_; // the score and value products, one switch
    int64_t n_head_;
    double dropout_;
};
TORCH_MODULE(CausalSelfAttention);

class MlpImpl : public torch::nn::Module {
public:
    MlpImpl(const std::string& prefix, const ModelConfig& config, GemmRegistry& gemms);
    torch::Tensor forward(const torch::Tensor& x); // (B, T, C) -> (B, T, C)

    GemmLinear fc1{nullptr}, fc2{nullptr};

private:
    double dropout_;
};
TORCH_MODULE(Mlp);

class BlockImpl : public torch::nn::Module {
public:
    BlockImpl(const std::string& prefix, const ModelConfig& config, GemmRegistry& gemms);
    torch::Tensor forward(const torch::Tensor& x); // (B, T, C) -> (B, T, C)

    Norm ln1{nullptr};
    CausalSelfAttention attn{nullptr};
    Norm ln2{nullptr};
    Mlp mlp{nullptr};
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
public:
    GptImpl(const ModelConfig& config, int64_t vocab_size, const PrecisionConfig& precision = {});

    // idx (B, T) int64 -> logits (B, T, V)
    torch::Tensor forward(const torch::Tensor& idx);
    // Mean cross-entropy of next-token prediction; targets (B, T).
    torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& targets);

    // Every GEMM-bearing layer in forward order: blocks.N.attn.qkv, .attn.sdpa, .attn.proj,
    // .mlp.fc1, .mlp.fc2, then lm_head.
    const std::vector<std::shared_ptr<LayerGemm>>& gemm_layers() const { return gemms_.layers(); }
    // GPT-2 initialisation, consuming the global generator in registration order.
    void reset_parameters();

    int64_t context_length() const { return config_.context_length; }

    BlockImpl* block(int64_t index) { return blocks_[static_cast<size_t>(index)]->as<Block>(); }

    // Telemetry: measure the output's log partition function on the next forwards. The
    // results are device scalars (undefined until measured).
    void measure_log_z(bool on)
    {
        measure_log_z_ = on;
        if (on) log_z_mean_ = log_z_max_ = torch::Tensor();
    }
    const torch::Tensor& log_z_mean() const { return log_z_mean_; }
    const torch::Tensor& log_z_max() const { return log_z_max_; }

private:
    void set_log_z(const torch::Tensor& log_z); // (rows) FP32: the frame's mean and max |log Z|
    bool measure_log_z_ = false;
    torch::Tensor log_z_mean_, log_z_max_;
    ModelConfig config_;
    int64_t vocab_size_;
    GemmRegistry gemms_;
    torch::Tensor wte_; // (V, C), also the LM head's weight
    torch::Tensor wpe_; // (T_max, C)
    torch::nn::ModuleList blocks_;
    Norm ln_f_{nullptr};
    GemmLinear lm_head_{nullptr};
};
TORCH_MODULE(Gpt);

// log Z (logsumexp over the vocabulary) of every row of the logits (..., V), widened to FP32 a
// block of rows at a time (at most max_values values): the values of one whole widening, with a
// block's memory instead of another FP32 logits tensor. (B*T): FP32 on a GPU, FP64 on the CPU
// (log_z_rows_cpu, whose bits do not depend on threads or timing).
torch::Tensor log_z_in_blocks(const torch::Tensor& logits, int64_t max_values);

} // namespace mantissa
