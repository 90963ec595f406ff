// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Operands of an FP8 GEMM whose product is exact on every path: small integers (-2..2, exact in
// E4M3) times power-of-two scales, per tensor or per row, and a bias of quarters. Shared by
// tests/test_native.cpp (scaled_mm_padded on the CPU) and bench/cuda_checks.cpp (the same
// shapes through _scaled_mm on a GPU).

#include <torch/torch.h>

#include <cstdint>

struct ExactFp8Gemm {
    torch::Tensor a, b;         // (M, K), and the weight (N, K), FP32 values of E4M3 codes
    torch::Tensor a_inv, b_inv; // () each, or per row (M, 1) and (1, N)
    torch::Tensor bias;         // (N) FP32, or undefined
    torch::Tensor expected;     // (M, N) FP32: (a * a_inv) (b * b_inv)^T + bias, exact
};

inline ExactFp8Gemm exact_fp8_gemm(int64_t m, int64_t k, int64_t n, bool rowwise, bool with_bias)
{
    const auto values = [](int64_t rows, int64_t cols, int64_t seed) {
        return (torch::arange(rows * cols).reshape({rows, cols}) * seed % 5 - 2).to(torch::kFloat32);
    };
    ExactFp8Gemm g;
    g.a = values(m, k, 3);
    g.b = values(n, k, 7);
    g.a_inv = torch::full({}, 0.5f);
    g.b_inv = torch::full({}, 4.0f);
    if (rowwise) {
        g.a_inv = torch::pow(2.0f, torch::arange(m).remainder(4).to(torch::kFloat32) - 2).unsqueeze(1); // (M, 1)
        g.b_inv = torch::pow(2.0f, torch::arange(n).remainder(3).to(torch::kFloat32)).unsqueeze(0);     // (1, N)
    }
    if (with_bias) g.bias = torch::arange(n).to(torch::kFloat32) * 0.25 + 1;
    g.expected = torch::mm(g.a * g.a_inv, g.b.t() * g.b_inv);
    if (with_bias) g.expected = g.expected + g.bias;
    return g;
}
