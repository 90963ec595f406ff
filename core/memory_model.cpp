// SPDX-License-Identifier: GPL-3.0-or-later
#include "memory_model.h"
#include "nvml_memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <thread>
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
    case NumberFormat::E2M1:
    case NumberFormat::E8M0: return 1; // telemetry labels only; never a GEMM's copy
    }
    return 4;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The weight copy a GEMM reads, `rows` x `cols` (the scales run along the rows), as the native
// executor keeps it: none for FP32 (it reads the master); 2 B a value for BF16/FP16; for FP8,
// 1 B a value and the recipe's scales. The FP4 recipes take an FP8 format as E2M1: half a byte
// a value, and an E4M3 scale per 16 values and an FP32 per tensor (nvfp4) or an E8M0 per 32
// (mxfp4); only a Blackwell GPU's FP4 GEMM would keep them so (linear_route).
int64_t weight_copy_bytes(int64_t rows, int64_t cols, NumberFormat f, Fp8Scaling scaling)
{
    if (f == NumberFormat::FP32 || f == NumberFormat::TF32) return 0;
    const int64_t elements = rows * cols;
    if (!format_info(f).is_fp8) return elements * bytes_per_element(f);
    switch (scaling) {
    case Fp8Scaling::Delayed:
    case Fp8Scaling::Current: return elements + 4;
    case Fp8Scaling::PerRow: return elements + 4 * rows;
    case Fp8Scaling::Block32: return elements + rows * ceil_div(cols, 32);                    // E8M0 per 32
    case Fp8Scaling::Block128: return elements + 4 * ceil_div(rows, 128) * ceil_div(cols, 128); // a weight's tiles
    case Fp8Scaling::NvFp4: return ceil_div(elements, 2) + rows * ceil_div(cols, 16) + 4;
    case Fp8Scaling::MxFp4: return ceil_div(elements, 2) + rows * ceil_div(cols, 32);
    }
    return elements + 4;
}

// The casts of one weight the emulator caches for a step (LayerGemm::quantized_weight), each
// in FP32 values: the forward GEMM's, and the dgrad GEMM's where that one needs another.
int64_t emulated_weight_casts(const GemmFormats& f, const Fp8Recipe& recipe)
{
    const NumberFormat dgrad = saved_operand_format(f.dgrad);
    const bool shared = dgrad == f.forward && weight_cast_serves_both_layouts(dgrad, recipe);
    return (f.forward != NumberFormat::FP32 ? 1 : 0) + (dgrad != NumberFormat::FP32 && !shared ? 1 : 0);
}

// What a linear keeps of its (rows, in_features) input for the backward, as each route's
// forward saves it (layer_gemm.cpp, layer_gemm_native.cpp, layer_gemm_blockwise.cpp).
// `arrives`: the input's own width, 4 B after a LayerNorm; `gpu`: a GPU's native executor.
int64_t saved_input_bytes(LinearRoute route, const GemmFormats& f, const Fp8Recipe& recipe, int64_t rows,
                          int64_t in_features, int64_t arrives, bool gpu)
{
    const int64_t values = rows * in_features;
    switch (route) {
    case LinearRoute::Fp32: return 4 * values;       // ATen's linear keeps its FP32 input
    case LinearRoute::Autocast16: return 2 * values; // the 16-bit cast
    case LinearRoute::Native:
        // TE keeps the FP8 input (transposed) for the wgrad GEMM when that GEMM takes it; per-row
        // scales run along K, which the wgrad GEMM does not contract, so that input stays as it came.
        if (format_info(f.forward).is_fp8)
            return (f.forward == saved_operand_format(f.wgrad) && recipe.scaling != Fp8Scaling::PerRow ? 1 : arrives) *
                   values;
        return (f.wgrad == f.forward ? bytes_per_element(f.forward) : arrives) * values;
    case LinearRoute::BlockwiseCodes: return values + 4 * ceil_div(rows, 128) * in_features; // codes, 1x128 along M
    case LinearRoute::Emulated: {
        // FP32 values (its cast, or the input widened), except a 16-bit input that fp8-block's
        // GPU cast reads as it is (fp8_block_reads_as_is).
        const bool as_is = gpu && fp8_block_reads_16bit(recipe);
        return (as_is ? arrives : 4) * values;
    }
    }
    return 4 * values;
}

// Which executor runs the GEMMs: the native one on a GPU unless the emulator is asked for, on
// a CPU only when it is asked for. The emulator keeps every tensor in FP32.
bool native_executor(const PrecisionConfig& p, bool cpu_emulator)
{
    return cpu_emulator ? p.backend == GemmBackend::Native : p.backend != GemmBackend::Emulated;
}

// Whether a block's attention runs the fused kernel (gpt_model.cpp), which keeps q, k, v, its
// output and a log-sum-exp per row, never the (T, T) scores: FP32 attention, or uniform
// 16-bit attention on the native executor (a GPU run's by default). The CPU emulator's 16-bit
// attention, and FP8 attention, write the scores out.
bool fused_attention(const PrecisionConfig& p, const std::string& sdpa_layer, int64_t n_layer, bool cpu_emulator)
{
    const GemmFormats f = resolve_layer_formats(p, sdpa_layer, n_layer);
    return f.all_fp32() || (uniform_16bit(f) && native_executor(p, cpu_emulator));
}

} // namespace

MemoryBreakdown estimate_memory(const ProjectConfig& config, int64_t vocab_size, MemoryTarget target)
{
    const bool cpu_emulator = target == MemoryTarget::CpuEmulator;
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

    const bool native = native_executor(config.precision, cpu_emulator);
    // The weight copies a layer's GEMMs keep through a step, a weight `out_features` x
    // `in_features`. The native executor's: the forward GEMM's, and where the dgrad GEMM runs
    // in FP8 a second one laid out transposed (codes and codes_t per step), its scales along
    // the other side. The emulator's: FP32 values, one or two casts.
    const auto copies = [&](int64_t out_features, int64_t in_features, const std::string& layer) -> int64_t {
        const GemmFormats f = resolve_layer_formats(config.precision, layer, L);
        const Fp8Recipe recipe = resolve_layer_recipe(config.precision, layer);
        switch (linear_route(f, recipe, native, T * B, in_features, out_features)) {
        case LinearRoute::Fp32: return 0;
        case LinearRoute::Emulated: return 4 * out_features * in_features * emulated_weight_casts(f, recipe);
        default: break;
        }
        const Fp8Scaling scaling = recipe.scaling;
        const int64_t transposed =
            format_info(f.dgrad).is_fp8 ? weight_copy_bytes(in_features, out_features, NumberFormat::E4M3, scaling) : 0;
        return weight_copy_bytes(out_features, in_features, f.forward, scaling) + transposed;
    };
    // What a layer's linear keeps of its (T * B, in_features) input.
    const auto input = [&](const std::string& layer, int64_t in_features, int64_t out_features, int64_t arrives) {
        const GemmFormats f = resolve_layer_formats(config.precision, layer, L);
        const Fp8Recipe recipe = resolve_layer_recipe(config.precision, layer);
        return saved_input_bytes(linear_route(f, recipe, native, T * B, in_features, out_features), f, recipe, T * B,
                                 in_features, arrives, native && !cpu_emulator);
    };
    out.low_precision_weights_bytes = copies(V, C, "lm_head");
    // Activations per block, after Korthikanti et al. 2022 (34 s b h + 5 a s^2 b bytes with
    // 16-bit activations), split by what is saved so each part takes its own format.
    const int64_t sbh = T * B * C;
    const bool dropout = m.dropout > 0.0;
    for (int64_t i = 0; i < L; ++i) {
        const std::string p = "blocks." + std::to_string(i);
        out.low_precision_weights_bytes += copies(3 * C, C, p + ".attn.qkv") + copies(C, C, p + ".attn.proj") +
                                           copies(4 * C, C, p + ".mlp.fc1") + copies(C, 4 * C, p + ".mlp.fc2");
        // The emulator keeps every saved tensor in FP32 (it rounds values, not dtypes).
        const auto saved = [&](NumberFormat f) { return native ? bytes_per_element(f) : int64_t(4); };
        // Non-GEMM tensors (GELU input) are in the block's activation dtype: 4 B when its GEMMs
        // run FP32, else 2 B. The residual stream stays FP32 (an FP32 embedding plus a 16-bit
        // branch is FP32), so the norms' inputs and outputs are 4 B.
        const NumberFormat qkv = fmt(p + ".attn.qkv");
        const int64_t act = !native || qkv == NumberFormat::FP32 || qkv == NumberFormat::TF32 ? 4 : 2;
        const int64_t sdpa = saved(fmt(p + ".attn.sdpa"));
        int64_t bytes = 0;
        bytes += 4 * sbh;                                      // ln1 input
        bytes += input(p + ".attn.qkv", C, 3 * C, 4);          // qkv input (ln1's FP32 output)
        bytes += sdpa * 3 * sbh;                               // q, k, v
        if (fused_attention(config.precision, p + ".attn.sdpa", L, cpu_emulator) && !(cpu_emulator && dropout)) {
            bytes += sdpa * sbh + 4 * B * A * T;               // the kernel's output and log-sum-exp
        } else {
            // Scores written out, in FP32 (the unfused path computes them there).
            bytes += 4 * A * T * T * B;                                    // softmax output
            if (dropout) bytes += 4 * A * T * T * B + 4 * A * T * T * B;   // mask and dropped copy
        }
        const int64_t attention_out = native && sdpa < 4 ? 2 : 4; // low-precision attention hands on BF16
        bytes += input(p + ".attn.proj", C, C, attention_out); // proj input
        bytes += 4 * sbh;                                      // ln2 input
        bytes += input(p + ".mlp.fc1", C, 4 * C, 4);           // fc1 input (ln2's FP32 output)
        bytes += act * 4 * sbh;                                // GELU input
        bytes += input(p + ".mlp.fc2", 4 * C, C, act);         // fc2 input (the GELU's output)
        if (dropout) bytes += 2 * sbh;                         // residual dropout masks (1 B)
        out.activations_by_layer.emplace_back(p, bytes);
        out.activations_bytes += bytes;
    }
    // ln_f input, and what the loss keeps of the logits: log_softmax's FP32 output, or on a GPU
    // with 16-bit logits (the native executor's under every 16-bit and FP8 head) the logits
    // themselves, which the fused loss's backward reads again (fused_cross_entropy.h).
    const NumberFormat head = fmt("lm_head"), head_out = gemm_output_format(head);
    const bool fused_loss = !cpu_emulator && config.precision.backend != GemmBackend::Emulated &&
                            (head_out == NumberFormat::BF16 || head_out == NumberFormat::FP16);
    const int64_t logits = 4 * sbh + input("lm_head", C, V, 4) + (fused_loss ? 2 : 4) * T * B * V;
    out.activations_by_layer.emplace_back("logits", logits);
    out.activations_bytes += logits;
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

namespace {

std::string bytes_text(double bytes)
{
    static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (bytes >= 1024.0 && u < 6) {
        bytes /= 1024.0;
        ++u;
    }
    char out[64];
    std::snprintf(out, sizeof out, bytes >= 1e6 ? "%.3g %s" : "%.1f %s", bytes, units[u]);
    return out;
}

int64_t vocab_lower_bound(const DataConfig& d)
{
    switch (d.kind) {
    case DataKind::TokenBin: return d.vocab_size;
    case DataKind::Text: return d.tokenizer == "byte" ? 256 : 1;
    case DataKind::SyntheticAddition: return 13;
    }
    return 1;
}

struct Need {
    std::string key;    // the key the message starts with
    std::string detail; // what the bytes are for
    double bytes = 0;
};

} // namespace

MachineLimits this_machine(bool with_gpu)
{
    MachineLimits m;
    // The largest GPU: which one a run takes (CUDA_VISIBLE_DEVICES, CUDA's own order, a
    // rank's local index) is not known here, and a check must never refuse what would fit.
    int64_t total = 0, used = 0;
    for (int d = 0; with_gpu && nvml_memory(d, total, used); ++d) m.device_memory_bytes = std::max(m.device_memory_bytes, total);
    // This library does not link LibTorch: a CUDA build of it (MANTISSA_TORCH_CUDA) with a GPU
    // that NVML sees is what makes training.device auto train on a GPU.
#ifdef MANTISSA_TORCH_CUDA
    m.gpu_available = m.device_memory_bytes > 0;
#endif
    // NVML sees every GPU; CUDA only those CUDA_VISIBLE_DEVICES lists. Hidden all ("", "-1"),
    // an auto run trains on the CPU, and a cuda run is refused by the trainer.
    if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
        visible && (visible[0] == '\0' || std::string_view(visible).starts_with("-1"))) {
        m.gpu_available = false;
        m.device_memory_bytes = 0;
    }
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    if (pages > 0 && page > 0) m.memory_bytes = static_cast<int64_t>(pages) * page;
    m.hardware_threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
    return m;
}

void check_fits_machine(const ProjectConfig& config, int64_t vocab_size)
{
    check_fits_machine(config, this_machine(config.training.device != "cpu"), vocab_size);
}

void check_fits_machine(const ProjectConfig& config, const MachineLimits& machine, int64_t vocab_size)
{
    const auto& t = config.training;
    const int64_t max_threads = kMaxThreadsPerHardwareThread * machine.hardware_threads;
    if (t.threads > max_threads)
        throw ConfigError("training.threads: " + std::to_string(t.threads) + " is more than " +
                          std::to_string(kMaxThreadsPerHardwareThread) + " per hardware thread of this machine (" +
                          std::to_string(machine.hardware_threads) + "): at most " + std::to_string(max_threads) +
                          "; 0 = all hardware threads");
    // Where the run trains (as Trainer picks its device), and whether that GPU's size is known.
    const bool gpu_run = t.device == "cuda" || (t.device == "auto" && machine.gpu_available);
    const bool on_gpu = gpu_run && machine.device_memory_bytes > 0;
    if (machine.memory_bytes <= 0 && !on_gpu) return;

    // In double first: the sizes are the user's and their int64 products may overflow. Every
    // term is a lower bound of estimate_memory's (FP8 activations at 1 B, no biases, a GPU's
    // fused loss's 16-bit logits), so a project refused here is refused by the exact estimate too.
    const auto& m = config.model;
    const double C = static_cast<double>(m.n_embd), L = static_cast<double>(m.n_layer),
                 T = static_cast<double>(m.context_length), A = static_cast<double>(m.n_head),
                 B = static_cast<double>(t.batch_size);
    const int64_t vocab = std::max(vocab_size, vocab_lower_bound(config.data));
    const double V = static_cast<double>(vocab);
    const double parameters = V * C + T * C + L * 12.0 * C * C;
    const double sbh = T * B * C;
    const MemoryTarget target = gpu_run ? MemoryTarget::Gpu : MemoryTarget::CpuEmulator;
    const double logit_bytes = gpu_run ? 2.0 : 4.0; // a GPU's fused loss keeps 16-bit logits
    // The (T, T) scores count only in the blocks whose attention writes them out.
    double unfused_blocks = 0;
    for (int64_t i = 0; i < m.n_layer; ++i)
        unfused_blocks += fused_attention(config.precision, "blocks." + std::to_string(i) + ".attn.sdpa", m.n_layer,
                                          target == MemoryTarget::CpuEmulator)
                              ? 0.0
                              : 1.0;
    std::vector<Need> needs;
    needs.push_back({"model", "weights, gradients and Adam state for model.n_layer " + std::to_string(m.n_layer) + ", model.n_embd " +
                                  std::to_string(m.n_embd) + ", model.context_length " +
                                  std::to_string(m.context_length),
                     16.0 * parameters});
    needs.push_back({"training.batch_size",
                     "activations for training.batch_size " + std::to_string(t.batch_size) + " x model.context_length " +
                         std::to_string(m.context_length) + " tokens",
                     L * 22.0 * sbh + unfused_blocks * 4.0 * A * T * T * B + 5.0 * sbh + logit_bytes * T * B * V});
    if (config.data.kind == DataKind::SyntheticAddition) {
        // The generated text (1 B a character), its code points (4 B) and the uint16 token ids (2 B).
        const double chars = static_cast<double>(config.data.examples) * static_cast<double>(3 * config.data.digits + 4);
        needs.push_back({"data.examples", "data set of data.examples " + std::to_string(config.data.examples), 7.0 * chars});
    }
    if (config.data.kind == DataKind::Text && !config.data.path.empty() && machine.memory_bytes > 0) {
        // Read whole, then decoded: the text, its code points (4 B) and the uint16 ids (2 B),
        // at once while it is read, before the model exists (so not added to the rest).
        std::error_code ec;
        const std::string path = resolve_data_path(config, config.data.path);
        const double bytes = std::filesystem::is_regular_file(path, ec) ? double(std::filesystem::file_size(path, ec)) : 0;
        const double reading = (config.data.tokenizer == "byte" ? 4.0 : 7.0) * bytes;
        if (!ec && reading > static_cast<double>(machine.memory_bytes))
            throw ConfigError("data.path: reading '" + path + "' (" + std::to_string(int64_t(bytes)) +
                              " bytes) needs an estimated " + bytes_text(reading) +
                              " of memory (the text, its code points and token ids), more than this machine's " +
                              bytes_text(static_cast<double>(machine.memory_bytes)));
    }
    // Every GEMM layer keeps six delayed-scaling histories (input, weight, gradient, each in
    // E4M3 and E5M2), FP8 or not: a live switch to FP8 needs them. (Three were billed: half.)
    // An attention layer keeps six for each of its two products.
    const double histories = 6.0 * (5.0 * L + 1.0) + 6.0 * L;
    const double history_bytes = histories * 4.0 * static_cast<double>(config.precision.fp8.amax_history_length);
    needs.push_back({"precision.fp8.amax_history_length",
                     "amax histories of precision.fp8.amax_history_length " +
                         std::to_string(config.precision.fp8.amax_history_length) + " for " +
                         std::to_string(static_cast<int64_t>(histories)) + " tensors",
                     history_bytes});
    // A telemetry step keeps each GEMM weight as it was before the update, for the
    // update/weight ratio: FP32 copies beside the weights, on the run's device.
    if (config.telemetry.interval > 0)
        needs.push_back({"telemetry.interval",
                         "GEMM weights kept on telemetry steps (telemetry.interval " +
                             std::to_string(config.telemetry.interval) + ") for the update/weight ratio",
                         4.0 * (L * 12.0 * C * C + V * C)});
    double lower = 0;
    for (const auto& n : needs) lower += n.bytes;
    if (lower <= std::max(static_cast<double>(machine.memory_bytes), static_cast<double>(machine.device_memory_bytes))) {
        // The exact figures now fit in int64: they are within a small factor of the bounds.
        const MemoryBreakdown exact = estimate_memory(config, vocab, target);
        needs[0].bytes = static_cast<double>(exact.master_weights_bytes + exact.gradients_bytes +
                                             exact.optimizer_state_bytes + exact.low_precision_weights_bytes);
        needs[1].bytes = static_cast<double>(exact.activations_bytes);
    }
    // A CUDA run's gradients and activations never leave the GPU; on the host it holds the data
    // set and, at a resume, the checkpoint read back: the FP32 weights and Adam state (12 B a
    // parameter) and the histories, on the host before each goes to the GPU. Checkpoints are
    // written a tensor at a time since 2026-12-07; they were built in one host buffer first,
    // and up to 24 B a parameter were billed for it.
    std::vector<Need> host_needs;
    // A checkpoint read back in host memory. `where`: how the message says it is read.
    const auto checkpoint_need = [&](const char* where) {
        return Need{"model",
                    std::string("checkpoint of the FP32 weights, Adam state and amax histories, ") + where +
                        " for model.n_layer " + std::to_string(m.n_layer) + ", model.n_embd " +
                        std::to_string(m.n_embd),
                    12.0 * parameters + history_bytes};
    };
    if (gpu_run) {
        for (const auto& n : needs)
            if (n.key == "data.examples") host_needs.push_back(n);
        host_needs.push_back(checkpoint_need("read on the host at a resume,"));
    }
    // A CPU run resumed holds its checkpoint beside the weights, gradients, Adam state, histories
    // and data set it loads them into, its activations not yet made. (Its checkpoint's buffer,
    // before checkpoints were streamed, peaked at 2.2x the training figure for 100 M parameters:
    // a project that fit trained until its first checkpoint, then ran out.)
    std::vector<Need> checkpoint_needs;
    if (!gpu_run) {
        for (const auto& n : needs) // by key, as host_needs: the activations and the weight copies go
            if (n.key != "training.batch_size" && n.key != "telemetry.interval") checkpoint_needs.push_back(n);
        checkpoint_needs.push_back(checkpoint_need("read back at a resume,"));
    }
    // `where`: "this machine's" (host memory: every need, or host_needs on CUDA) or "the GPU's"
    // (all but the data set, which stays on the host). `phase`: the needs of another moment
    // than the step (a CPU run's checkpoint).
    const auto refuse_above = [&](double limit, bool gpu, const char* where,
                                  const std::vector<Need>* phase = nullptr) {
        double total = 0;
        std::vector<const Need*> counted;
        for (const auto& n : phase ? *phase : gpu_run && !gpu ? host_needs : needs)
            if (!gpu || n.key != "data.examples") {
                total += n.bytes;
                counted.push_back(&n);
            }
        if (!(total > limit)) return;
        const auto largest = *std::max_element(counted.begin(), counted.end(),
                                               [](const Need* a, const Need* b) { return a->bytes < b->bytes; });
        std::string parts;
        for (const Need* n : counted) parts += (parts.empty() ? "" : "; ") + n->detail + ": " + bytes_text(n->bytes);
        throw ConfigError(largest->key + ": the project needs an estimated " + bytes_text(total) + " of " +
                          (gpu ? "GPU memory" : "memory") + " (" + parts + "), more than " + where + " " + bytes_text(limit));
    };
    if (machine.memory_bytes > 0) refuse_above(static_cast<double>(machine.memory_bytes), false, "this machine's");
    if (machine.memory_bytes > 0 && !checkpoint_needs.empty())
        refuse_above(static_cast<double>(machine.memory_bytes), false, "this machine's", &checkpoint_needs);
    if (on_gpu) refuse_above(static_cast<double>(machine.device_memory_bytes), true, "the GPU's");
}

int64_t resident_memory_bytes()
{
    std::ifstream statm("/proc/self/statm");
    int64_t size_pages = 0, resident_pages = 0;
    if (!(statm >> size_pages >> resident_pages)) return 0;
    return resident_pages * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

} // namespace mantissa
