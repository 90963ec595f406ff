// SPDX-License-Identifier: GPL-3.0-or-later
#include "gemm_probe.h"

namespace mantissa {

torch::Tensor gemm_probe_operand(int64_t rows, int64_t cols, int64_t block, float frequency, float salt)
{
    const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
    const auto r = torch::arange(rows, opts).unsqueeze(1), c = torch::arange(cols, opts).unsqueeze(0);
    const auto grid = r * static_cast<float>(cols) + c;
    const auto wave = torch::sin(grid * frequency) * torch::exp2(torch::remainder(grid, 7.0f) - 3.0f);
    const auto block_of = torch::floor(c / static_cast<float>(block));
    return wave * torch::exp2(torch::remainder(r + 3.0f * block_of + salt, 9.0f) - 4.0f);
}

double gemm_excess_past_bound(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& w,
                              const torch::Tensor& bias, double accumulation, double output_step)
{
    const auto x64 = x.to(torch::kFloat64), w64 = w.to(torch::kFloat64);
    auto reference = at::mm(x64, w64.t());
    if (bias.defined()) reference = reference + bias.to(torch::kFloat64);
    const auto bound = at::mm(x64.abs(), w64.abs().t()) * accumulation + reference.abs() * output_step;
    return ((y.to(torch::kFloat64) - reference).abs() - bound).max().item<double>();
}

} // namespace mantissa
