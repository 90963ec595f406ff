// SPDX-License-Identifier: GPL-3.0-or-later
// Cost of one block quantization of a shakespeare-char-sized operand (768 x 128), per recipe,
// fused CPU kernel against the tensor-op kernel: where the emulation time of the block recipes goes;
// and the per-tensor FP8 cast, its amax and the BF16 rounding, fused against LibTorch's casts;
// and the columnwise casts' transposing copy, LibTorch's against contiguous_on_threads.
//   build/dev/bench/block_quantizers [rows cols reps]

#include <cstdio>
#include <cstdlib>

#include <torch/torch.h>

#include "block_scaling.h"
#include "cpu_hadamard.h"
#include "cpu_transpose.h"
#include "quantize.h"

#include "micros.h"

using namespace mantissa;

int main(int argc, char** argv)
{
    const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 768, cols = argc > 2 ? std::atoll(argv[2]) : 128;
    const int reps = argc > 3 ? std::atoi(argv[3]) : 200;
    torch::manual_seed(0);
    const auto x = torch::randn({rows, cols}) * 1e-3;
    std::printf("operand %lld x %lld, %d repetitions, %d threads (microseconds per call)\n", static_cast<long long>(rows),
                static_cast<long long>(cols), reps, at::get_num_threads());
    // The per-tensor recipes' passes: one fused loop (Auto) against LibTorch's casts.
    for (auto kernel : {RoundKernel::Auto, RoundKernel::TensorOps}) {
        const char* k = kernel == RoundKernel::Auto ? "fused" : "tensor ops";
        std::printf("  %-28s %10.1f  (%s)\n", "e4m3 per-tensor cast",
                    micros(reps, [&] { scaled_round_saturated(x, 448.0f, NumberFormat::E4M3, kernel); }), k);
        std::printf("  %-28s %10.1f  (%s)\n", "amax, NaN skipped", micros(reps, [&] { amax_ignoring_nan(x, kernel); }), k);
        std::printf("  %-28s %10.1f  (%s)\n", "bf16 rounding",
                    micros(reps, [&] { round_to_format(x, NumberFormat::BF16, Overflow::Propagate, kernel); }), k);
    }
    for (auto kernel : {BlockKernel::FusedCpu, BlockKernel::TensorOps}) {
        const char* k = kernel == BlockKernel::FusedCpu ? "fused" : "tensor ops";
        std::printf("  %-28s %10.1f  (%s)\n", "fp8-block 1x128", micros(reps, [&] { quantize_fp8_block_2d(x, NumberFormat::E4M3, true, false, kernel); }), k);
        std::printf("  %-28s %10.1f  (%s)\n", "fp8-block 128x128", micros(reps, [&] { quantize_fp8_block_2d(x, NumberFormat::E4M3, true, true, kernel); }), k);
        std::printf("  %-28s %10.1f  (%s)\n", "nvfp4 1x16 RNE", micros(reps, [&] { quantize_nvfp4_2d(x, false, std::nullopt, kernel); }), k);
        std::printf("  %-28s %10.1f  (%s)\n", "nvfp4 1x16 SR", micros(reps, [&] { quantize_nvfp4_2d(x, false, 7, kernel); }), k);
        std::printf("  %-28s %10.1f  (%s)\n", "mxfp4", micros(reps, [&] { quantize_mxfp4_2d(x, false, kernel); }), k);
    }
    std::printf("  %-28s %10.1f\n", "hadamard transform", micros(reps, [&] { random_hadamard_transform(x); }));
    // nvfp4's wgrad transform of a transposed operand: copy, GEMM and BF16 pass against one pass.
    std::printf("  %-28s %10.1f  (GEMM, then BF16)\n", "hadamard of the transpose", micros(reps, [&] {
                    round_to_format(random_hadamard_transform(x.t()), NumberFormat::BF16, Overflow::Propagate);
                }));
    std::printf("  %-28s %10.1f  (one pass)\n", "hadamard of the transpose", micros(reps, [&] { hadamard16_bf16_cpu(x.t()); }));
    std::printf("  %-28s %10.1f\n", "content seed", micros(reps, [&] { content_seed(x); }));
    // What a columnwise (wgrad) cast copies twice: the operand's transpose made contiguous.
    const auto xt = x.t();
    std::printf("  %-28s %10.1f  (LibTorch)\n", "transposing copy", micros(reps, [&] { xt.contiguous(); }));
    std::printf("  %-28s %10.1f  (tiles on threads)\n", "transposing copy", micros(reps, [&] { contiguous_on_threads(xt); }));
    // fp8-block's cast along the columns (the wgrad operands): in place against copy-then-rows.
    std::printf("  %-28s %10.1f  (in place)\n", "fp8-block 1x128 columns",
                micros(reps, [&] { quantize_fp8_block_columns(x, NumberFormat::E4M3, true); }));
    std::printf("  %-28s %10.1f  (transpose, then rows)\n", "fp8-block 1x128 columns",
                micros(reps, [&] { quantize_fp8_block_2d(xt, NumberFormat::E4M3, true, false); }));
    return 0;
}
