// SPDX-License-Identifier: GPL-3.0-or-later
#include "memory_model.h"

#include <fstream>
#include <unistd.h>

namespace mantissa {
namespace {

int64_t bytes_per_element(NumberFormat f)
{
    switch (f) {
    case NumberFormat::FP32:
    case NumberFormat::TF32: return 4;
    case NumberFormat::BF16:
    case NumberFormat::FP16: return 2;
    case NumberFormat::E4M3:
    case NumberFormat::E5M2: return 1;
    }
    return 4;
}

// The weight copy a GEMM reads: none for FP32 (it reads the master), else the format plus,
// for FP8, one FP32 scale.
int64_t weight_copy_bytes(int64_t elements, NumberFormat f)
{
    if (f == NumberFormat::FP32 || f == NumberFormat::TF32) return 0;
    return elements * bytes_per_element(f) + (format_info(f).is_fp8 ? 4 : 0);
}

} // namespace

MemoryBreakdown estimate_memory(const ProjectConfig& config, int64_t vocab_size)
{
    const auto& m = config.model;
    const int64_t C = m.n_embd, L = m.n_layer, T = m.context_length, V = vocab_size, A = m.n_head;
    const int64_t B = config.training.batch_size; // per micro-batch: accumulation does not add activations
    const int64_t bias = m.bias ? 1 : 0;
    const auto fmt = [&](const std::string& layer) { return resolve_layer_formats(config.precision, layer, L).forward; };

    MemoryBreakdown out;
    const int64_t norm = C + bias * C;
    const int64_t per_block = 2 * norm + (3 * C * C + bias * 3 * C) + (C * C + bias * C) + (4 * C * C + bias * 4 * C) +
                              (4 * C * C + bias * C);
    out.parameters = V * C + T * C + L * per_block + norm;
    out.master_weights_bytes = 4 * out.parameters;
    out.gradients_bytes = 4 * out.parameters;
    out.optimizer_state_bytes = 8 * out.parameters;

    out.low_precision_weights_bytes = weight_copy_bytes(V * C, fmt("lm_head"));
    // Activations per block, after Korthikanti et al. 2022 (34 s b h + 5 a s^2 b bytes with
    // 16-bit activations), split by what is saved so each part takes its own format.
    const int64_t sbh = T * B * C;
    const bool dropout = m.dropout > 0.0;
    for (int64_t i = 0; i < L; ++i) {
        const std::string p = "blocks." + std::to_string(i);
        out.low_precision_weights_bytes += weight_copy_bytes(3 * C * C, fmt(p + ".attn.qkv")) +
                                           weight_copy_bytes(C * C, fmt(p + ".attn.proj")) +
                                           weight_copy_bytes(4 * C * C, fmt(p + ".mlp.fc1")) +
                                           weight_copy_bytes(4 * C * C, fmt(p + ".mlp.fc2"));
        // Non-GEMM tensors (norm inputs, GELU input, softmax) are in the block's activation
        // dtype: 4 B when its GEMMs run FP32, else 2 B.
        const NumberFormat qkv = fmt(p + ".attn.qkv");
        const int64_t act = (qkv == NumberFormat::FP32 || qkv == NumberFormat::TF32) ? 4 : 2;
        const int64_t sdpa = bytes_per_element(fmt(p + ".attn.sdpa"));
        int64_t bytes = 0;
        bytes += act * sbh;                                    // ln1 input
        bytes += bytes_per_element(qkv) * sbh;                 // qkv input
        bytes += sdpa * 3 * sbh;                               // q, k, v
        bytes += act * A * T * T * B;                          // softmax output
        bytes += bytes_per_element(fmt(p + ".attn.proj")) * sbh; // proj input
        bytes += act * sbh;                                    // ln2 input
        bytes += bytes_per_element(fmt(p + ".mlp.fc1")) * sbh; // fc1 input
        bytes += act * 4 * sbh;                                // GELU input
        bytes += bytes_per_element(fmt(p + ".mlp.fc2")) * 4 * sbh; // fc2 input
        if (dropout) bytes += 2 * sbh + A * T * T * B + act * A * T * T * B; // masks (1 B) and attention dropout output
        out.activations_by_layer.emplace_back(p, bytes);
        out.activations_bytes += bytes;
    }
    // ln_f input, and the FP32 logits the cross-entropy keeps.
    const int64_t head = 4 * sbh + bytes_per_element(fmt("lm_head")) * sbh + 4 * T * B * V;
    out.activations_by_layer.emplace_back("logits", head);
    out.activations_bytes += head;
    return out;
}

std::vector<LayerShape> gemm_layer_shapes(const ModelConfig& m, int64_t vocab_size)
{
    const int64_t C = m.n_embd, bias = m.bias ? 1 : 0;
    std::vector<LayerShape> out;
    for (const std::string& name : gemm_layer_names(m.n_layer)) {
        const auto ends = [&](const char* suffix) { return name.ends_with(suffix); };
        int64_t n = 0;
        if (ends(".attn.qkv")) n = 3 * C * C + bias * 3 * C;
        else if (ends(".attn.proj")) n = C * C + bias * C;
        else if (ends(".mlp.fc1")) n = 4 * C * C + bias * 4 * C;
        else if (ends(".mlp.fc2")) n = 4 * C * C + bias * C;
        else if (name == "lm_head") n = vocab_size * C;
        out.push_back({name, n, name == "lm_head"});
    }
    return out;
}

int64_t resident_memory_bytes()
{
    std::ifstream statm("/proc/self/statm");
    int64_t size_pages = 0, resident_pages = 0;
    if (!(statm >> size_pages >> resident_pages)) return 0;
    return resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

} // namespace mantissa
