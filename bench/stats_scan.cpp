// SPDX-License-Identifier: GPL-3.0-or-later
// Cost of the CPU statistics scan (tensor_stats_rows_cpu) of one shakespeare-char-sized tensor,
// by what the values look like, with the passes this CPU gets (AVX-512 where it has it) and
// with the portable ones; of the attention max logit of one layer's heads, the CPU kernel
// against the ops' route; of log Z's rows, the FP64 kernel against LibTorch's logsumexp; and of
// the update ratio's norms of shakespeare-char's weights, one
// pass against LibTorch's: where a telemetry step's extra time goes (issue 12).
//   build/dev/bench/stats_scan [values reps [B H T D]]

#include <cstdio>
#include <cstdlib>

#include <torch/torch.h>

#include "cpu_attention_scores.h"
#include "cpu_binade_count.h"
#include "cpu_log_z.h"
#include "cpu_update_norms.h"
#include "gpt_model.h"
#include "tensor_stats.h"

#include "micros.h"

using namespace mantissa;

int main(int argc, char** argv)
{
    // 768 tokens x 128: an activation; a whole number of softmax rows of 64.
    const int64_t n = (argc > 1 ? std::atoll(argv[1]) : 98304) / 64 * 64;
    const int reps = argc > 2 ? std::atoi(argv[2]) : 2000;
    torch::manual_seed(0);
    const auto gauss = torch::randn({n});
    struct Case {
        const char* name;
        torch::Tensor x;
    };
    // GELU's output spans dozens of binades below its top (its negative tail), as do softmax's
    // probabilities; a gradient is Gaussian-like, far below 1.
    const Case cases[] = {{"gaussian", gauss},
                          {"gelu output", torch::gelu(gauss * 3)},
                          {"gradient-like (1e-4)", gauss * 1e-4},
                          {"softmax rows of 64", torch::softmax(gauss.view({-1, 64}) * 8, -1).view({-1})}};
    std::printf("%lld values, %d repetitions, %d threads\n", static_cast<long long>(n), reps, at::get_num_threads());
    std::printf("  the scan's passes here: %s\n", binade_count_avx512_available() ? "AVX-512" : "portable");
    for (const auto kernel : {StatsKernel::FusedCpu, StatsKernel::FusedCpuPortable}) {
        if (kernel == StatsKernel::FusedCpuPortable) std::printf("  with the portable passes:\n");
        for (const auto& c : cases) {
            const double fp32 =
                micros(reps, [&] { tensor_stats_rows_cpu({{c.x, NumberFormat::FP32, 1.0f, {}}}, kernel); });
            const auto bf16 = c.x.to(torch::kBFloat16).to(torch::kFloat32);
            const double cmp =
                micros(reps, [&] { tensor_stats_rows_cpu({{c.x, NumberFormat::BF16, 1.0f, bf16}}, kernel); });
            std::printf("  %-22s  FP32 %8.1f us (%.3f ns/value)   BF16 compared %8.1f us (%.3f ns/value)\n", c.name,
                        fp32, 1e3 * fp32 / static_cast<double>(n), cmp, 1e3 * cmp / static_cast<double>(n));
        }
    }
    // shakespeare-char's heads (or B H T D), read in place from the qkv projection's output as the model does.
    const auto arg = [&](int i, int64_t otherwise) { return argc > i ? std::atoll(argv[i]) : otherwise; };
    const int64_t B = arg(3, 12), H = arg(4, 4), T = arg(5, 64), D = arg(6, 32);
    const auto qkv = torch::randn({B, T, 3 * H * D});
    const auto heads = [&](int64_t part) {
        return qkv.narrow(2, part * H * D, H * D).view({B, T, H, D}).transpose(1, 2); // (B, H, T, D)
    };
    const auto q = heads(0), k = heads(1);
    const auto ll = [](int64_t v) { return static_cast<long long>(v); };
    std::printf("  attention max logit, (B, H, T, D) = (%lld, %lld, %lld, %lld): kernel %.1f us, ops %.1f us\n", ll(B),
                ll(H), ll(T), ll(D), micros(reps, [&] { causal_max_abs_score_cpu(q, k); }),
                micros(reps, [&] { causal_max_abs_score_of_ops(q, k); }));
    const auto logits = torch::randn({768, 65}) * 3; // shakespeare-char's, a step's rows
    std::printf("  log Z of logits (768, 65): FP64 rows %.1f us, LibTorch's logsumexp %.1f us\n",
                micros(reps, [&] { log_z_rows_cpu(logits); }), micros(reps, [&] { logits.logsumexp(-1); }));
    std::vector<torch::Tensor> befores, afters; // the 17 weights of the model, 0.8 M values
    for (int layer = 0; layer < 4; ++layer)
        for (const auto& [rows, cols] : {std::pair{384, 128}, {128, 128}, {512, 128}, {128, 512}}) {
            befores.push_back(torch::randn({rows, cols}));
            afters.push_back(befores.back() + torch::randn({rows, cols}) * 1e-3);
        }
    befores.push_back(torch::randn({65, 128}));
    afters.push_back(befores.back() * 1.001);
    std::printf("  update ratio's norms, 17 weights: one pass %.1f us, LibTorch %.1f us\n",
                micros(reps, [&] { update_norms_cpu(befores, afters); }), micros(reps, [&] {
                    torch::stack(torch::_foreach_norm(befores));
                    torch::stack(torch::_foreach_norm(torch::_foreach_sub(afters, befores)));
                }));
    return 0;
}
