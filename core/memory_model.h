// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What a recipe needs in memory, computed from the shapes alone, so a user sees the bill
// before renting a GPU (docs/TELEMETRY.md gives the formulas). No LibTorch.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "project_config.h"

namespace mantissa {

struct MemoryBreakdown {
    int64_t parameters = 0;
    int64_t master_weights_bytes = 0;        // FP32, 4 B a parameter
    int64_t low_precision_weights_bytes = 0; // the copies each GEMM's route keeps (linear_route): 2 B a
                                             // value (16-bit), codes and scales (FP8), FP32 values (emulated)
    int64_t gradients_bytes = 0;             // FP32, 4 B a parameter
    int64_t optimizer_state_bytes = 0;       // Adam m and v, 8 B a parameter
    int64_t activations_bytes = 0;           // saved for backward, no recomputation
    std::vector<std::pair<std::string, int64_t>> activations_by_layer; // blocks.N, then "logits"
    int64_t total_bytes() const
    {
        return master_weights_bytes + low_precision_weights_bytes + gradients_bytes + optimizer_state_bytes +
               activations_bytes;
    }
};

// Gpu: what the recipe needs on a GPU, the native executor's dtypes and fused attention (the
// figure shown before a run and in the memory_estimate event); a recipe the native executor
// does not multiply as itself (MX, nvfp4 and mxfp4 on Hopper, fp8-block off whole 128-blocks)
// is billed as the emulator holds it on the GPU. CpuEmulator: a CPU run's, whose emulator
// keeps saved tensors and weight casts in FP32 and writes 16-bit attention scores out.
enum class MemoryTarget { Gpu, CpuEmulator };
MemoryBreakdown estimate_memory(const ProjectConfig& config, int64_t vocab_size, MemoryTarget target = MemoryTarget::Gpu);

// One GEMM-bearing layer's trainable parameters (weight and bias), in forward order.
// `blocks.N.attn.sdpa` has none; `lm_head` shares the token embedding (tied = true).
struct LayerShape {
    std::string name;
    int64_t parameters = 0;
    bool tied = false;
};
std::vector<LayerShape> gemm_layer_shapes(const ModelConfig& model, int64_t vocab_size);

// What check_fits_machine measures a project against.
struct MachineLimits {
    int64_t memory_bytes = 0;     // physical memory; 0 = unknown (no memory check)
    int64_t hardware_threads = 1; // std::thread::hardware_concurrency, at least 1
    int64_t device_memory_bytes = 0; // the largest GPU's memory (NVML) when asked for; 0 = unknown (no check)
    bool gpu_available = false;      // this build sees a CUDA device: training.device auto trains there
};
// `with_gpu`: also look for a GPU and read its memory (training.device cuda or auto).
MachineLimits this_machine(bool with_gpu = false);

// At most this many LibTorch threads per hardware thread (training.threads).
constexpr int64_t kMaxThreadsPerHardwareThread = 4;

// Refuses, before anything is allocated, a project this machine cannot run: training.threads
// beyond kMaxThreadsPerHardwareThread per hardware thread, or an estimated memory need (the
// breakdown above, the synthetic data set, the FP8 amax histories and, with telemetry on, the
// copies of the GEMM weights a telemetry step keeps) above its physical memory; with
// training.device cuda (or auto where a GPU is available), what lives on the GPU (all but the
// data set) above the largest GPU's memory (when NVML can tell it), and above the host's
// memory only what the host holds (the data set, a checkpoint). The
// message names the key, the estimate and the machine's figure. The vocabulary is not known
// before the data is read: `vocab_size` when it is, else (0) a lower bound stands in (13 for
// synthetic-addition, 256 for bytes, 1 for characters, data.vocab_size for bin), so the
// estimate never overstates. A text file is held to the machine's memory alone for what
// reading it takes (the text, its code points and token ids: 7 B a byte, 4 B for the byte
// tokenizer; a pipe's size is unknown), before the model exists.
void check_fits_machine(const ProjectConfig& config, const MachineLimits& machine, int64_t vocab_size = 0);
void check_fits_machine(const ProjectConfig& config, int64_t vocab_size = 0); // against this_machine()

// This process's resident set size, from /proc/self/statm; 0 where that is unavailable.
int64_t resident_memory_bytes();

} // namespace mantissa
