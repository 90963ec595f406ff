// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Bit-identical runs on a GPU (training.deterministic). Torch-free header.
//
// On CUDA, flash and memory-efficient attention's backward passes add partial gradients in
// whatever order their atomics land, so two runs of one project drift apart from the first
// step, and no resume could be bit-identical to a run never stopped. LibTorch's deterministic
// mode gives each of them a fixed order (flash attention's deterministic backward,
// memory-efficient attention without split keys, no cuDNN attention) and stops with an error
// naming any op that has no deterministic kernel, rather than letting it drift silently.
// On the CPU every kernel Mantissa runs is already deterministic.

namespace mantissa {

// LibTorch allows cuBLAS in deterministic mode only when CUBLAS_WORKSPACE_CONFIG names a fixed
// workspace (":4096:8", the size it picks on Hopper anyway), and reads the variable once, at
// the process's first GEMM. Sets it unless the user set it; call first thing in main(), before
// any thread starts. The Trainer calls it too, for programs that do not.
void prepare_cublas_for_determinism();

// Switches LibTorch's deterministic algorithms on or off for this process (a GPU run's
// training.deterministic; the Trainer calls it before its model reaches the device).
void set_deterministic_kernels(bool on);

// Whether `message` is LibTorch's refusal of an op that has no deterministic kernel (or of
// cuBLAS without a fixed workspace): the run then says how to train without the guarantee.
bool is_determinism_refusal(const char* message);

} // namespace mantissa
