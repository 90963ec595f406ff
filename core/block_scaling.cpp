// SPDX-License-Identifier: GPL-3.0-or-later
#include "block_scaling.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu_hadamard.h"
#include "cpu_transpose.h"
#include "fp4.h"
#include "fp8_rounder.h"
#include "fp8_scaling.h"
#include "quantize.h"
#include "tensor_stats.h"
#include "vector_clones.h"

#ifdef MANTISSA_CUDA_KERNELS
#include "cuda/fp8_block.h"
#include "kernel_probe.h"
#endif

namespace mantissa {
namespace {

constexpr float kFltMax = std::numeric_limits<float>::max();
constexpr float kE4M3Max = 448.0f;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// TE's NVFP4 dequantize kernel (dequantize_nvfp4.cuh): factor_inv = 1.0f / (6.0f * E4M3_MAX).
constexpr float kInv2688 = 1.0f / (6.0f * kE4M3Max);

// What one E2M1 step of an nvfp4 block is worth, as TE's dequantize kernel computes it:
// (s * amax) * fl(1/2688). Where s * amax overflows (a tensor amax above FLT_MAX / 448) that
// order would give Inf, so s * (amax * fl(1/2688)) instead.
inline float nvfp4_value_scale(float block_scale, float tensor_amax)
{
    const float sa = block_scale * tensor_amax;
    return std::isinf(sa) ? block_scale * (tensor_amax * kInv2688) : sa * kInv2688;
}
torch::Tensor nvfp4_value_scale(const torch::Tensor& block_scale, const torch::Tensor& tensor_amax)
{
    const auto sa = block_scale * tensor_amax;
    return torch::where(torch::isinf(sa), block_scale * (tensor_amax * kInv2688), sa * kInv2688);
}

// A block holding Inf or NaN has no scale (OCP MX's NaN scale; nothing decodes from it).
// masked_fill with a Scalar, never torch::where with a CPU 0-dim tensor: where() copies such a
// tensor to the GPU with a blocking copy, a host sync in every cast.
torch::Tensor nan_where_non_finite(const torch::Tensor& scales, const torch::Tensor& amax)
{
    return scales.masked_fill(~torch::isfinite(amax), kNaN);
}

// x (R, C) zero-padded to multiples of (tile_rows, tile_cols) and viewed as
// (R/tr, tr, C/tc, tc), so that per-block quantities broadcast as (R/tr, 1, C/tc, 1).
struct Tiled {
    torch::Tensor x4;
    int64_t rows = 0, cols = 0;

    Tiled(const torch::Tensor& x, int64_t tile_rows, int64_t tile_cols)
    {
        TORCH_CHECK(x.dim() == 2, "block quantizers take a 2-D operand");
        rows = x.size(0);
        cols = x.size(1);
        const int64_t pr = (tile_rows - rows % tile_rows) % tile_rows;
        const int64_t pc = (tile_cols - cols % tile_cols) % tile_cols;
        auto padded = (pr || pc) ? torch::constant_pad_nd(x, {0, pc, 0, pr}) : x.contiguous();
        x4 = padded.view({(rows + pr) / tile_rows, tile_rows, (cols + pc) / tile_cols, tile_cols});
    }
    torch::Tensor amax() const { return x4.abs().amax({1, 3}, /*keepdim=*/true); }
    // Back to (R, C): cut the padding off.
    torch::Tensor unpad(const torch::Tensor& v4) const
    {
        auto v = v4.reshape({x4.size(0) * x4.size(1), x4.size(2) * x4.size(3)});
        if (v.size(0) != rows || v.size(1) != cols) v = v.narrow(0, 0, rows).narrow(1, 0, cols);
        return v.contiguous();
    }
};

// The non-finite rule: every element of a block whose amax is Inf or NaN becomes NaN.
torch::Tensor poison_non_finite_blocks(const torch::Tensor& values4, const torch::Tensor& amax)
{
    const auto bad = ~torch::isfinite(amax);
    // The shortcut reads a flag back: free on the CPU, a stalled stream on a GPU.
    if (values4.is_cpu() && !bad.any().item<bool>()) return values4;
    return values4.masked_fill(bad, kNaN);
}

torch::Tensor squeeze_grid(const torch::Tensor& g) { return g.squeeze(3).squeeze(1); }

// The uniform numbers of stochastic rounding: element `index` of the padded operand (row-major)
// gets murmur3's 32-bit finalizer of index * golden ratio + seed, top 8 bits / 2^8: 8 random
// bits per element, as Blackwell's cvt.rs.satfinite.e2m1x4 takes from its rbits. A hash of
// the position rather than a generator's stream: the fused loop computes its own number where
// it needs it, and every kernel and device draws the same ones.
constexpr uint32_t kGolden = 0x9E3779B1u, kMix1 = 0x85EBCA6Bu, kMix2 = 0xC2B2AE35u;

// The hash after its first step: h = index * golden + low seed (wrapping), which a run of
// consecutive indices gets as a base plus a constant per element, one product per run.
inline float hashed_uniform_after_index(uint32_t h, uint64_t seed)
{
    h ^= static_cast<uint32_t>(seed >> 32);
    h ^= h >> 16;
    h *= kMix1;
    h ^= h >> 13;
    h *= kMix2;
    h ^= h >> 16;
    return static_cast<float>(h >> 24) * (1.0f / 256.0f);
}

inline float hashed_uniform(uint64_t seed, uint32_t index)
{
    return hashed_uniform_after_index(index * kGolden + static_cast<uint32_t>(seed), seed);
}

// (h * c) mod 2^32 for h < 2^32 in int64 without overflow: two products below 2^48.
torch::Tensor mul_mod32(const torch::Tensor& h, uint32_t c)
{
    const auto high = torch::bitwise_left_shift(torch::bitwise_and(h * static_cast<int64_t>(c >> 16), 0xFFFF), 16);
    return torch::bitwise_and(high + h * static_cast<int64_t>(c & 0xFFFF), 0xFFFFFFFFLL);
}

// `seed`: () int64 holding the seed's 64 bits, on `device` or the CPU.
torch::Tensor uniforms(const torch::Tensor& seed, int64_t padded_rows, int64_t padded_cols, const torch::Device& device)
{
    const auto low = torch::bitwise_and(seed, 0xFFFFFFFFLL);
    // seed >> 32 as unsigned: an arithmetic shift, then the sign's copies masked off.
    const auto high = torch::bitwise_and(torch::bitwise_right_shift(seed, 32), 0xFFFFFFFFLL);
    auto h = torch::arange(padded_rows * padded_cols, torch::TensorOptions().dtype(torch::kInt64).device(device));
    h = torch::bitwise_and(mul_mod32(torch::bitwise_and(h, 0xFFFFFFFFLL), kGolden) + low, 0xFFFFFFFFLL);
    h = torch::bitwise_xor(h, high);
    h = torch::bitwise_xor(h, torch::bitwise_right_shift(h, 16));
    h = mul_mod32(h, kMix1);
    h = torch::bitwise_xor(h, torch::bitwise_right_shift(h, 13));
    h = mul_mod32(h, kMix2);
    h = torch::bitwise_xor(h, torch::bitwise_right_shift(h, 16));
    return (torch::bitwise_right_shift(h, 24).to(torch::kFloat32) * (1.0f / 256.0f)).view({padded_rows, padded_cols});
}

// fp8-block's cast as tensor ops, up to the rounded codes (as FP32, on the codes' grid, in
// the tiled view) and the scale they are multiplied back by.
struct Fp8BlockSteps {
    Tiled t;
    torch::Tensor amax, scale_inv, codes4;
};
Fp8BlockSteps fp8_block_steps(const torch::Tensor& x_in, NumberFormat format, bool power_of_two, bool tile_2d)
{
    const auto x = x_in.to(torch::kFloat32);
    Tiled t(x, tile_2d ? 128 : 1, 128);
    const auto amax = t.amax();
    const float fp8_max = static_cast<float>(format_info(format).max_finite);
    auto scale = torch::full({}, fp8_max) / amax;
    scale = scale.masked_fill(torch::isinf(scale), kFltMax);
    if (power_of_two) scale = pow2_exact(floor_log2(torch::nan_to_num(scale, 1.0f)));
    scale = torch::where(amax == 0, torch::ones_like(scale), scale);
    const auto scale_inv = 1.0f / scale;
    auto codes4 = round_to_format(t.x4 * scale, format, Overflow::Saturate);
    return {std::move(t), amax, scale_inv, std::move(codes4)};
}

BlockQuantized fp8_block_tensor_ops(const torch::Tensor& x_in, NumberFormat format, bool power_of_two, bool tile_2d)
{
    const auto s = fp8_block_steps(x_in, format, power_of_two, tile_2d);
    const auto values = poison_non_finite_blocks(s.codes4 * s.scale_inv, s.amax);
    return {s.t.unpad(values), squeeze_grid(nan_where_non_finite(s.scale_inv, s.amax)), squeeze_grid(s.amax), {}};
}

// The same cast's codes themselves (NaN throughout a block holding Inf or NaN).
Fp8BlockCodes fp8_block_codes_tensor_ops(const torch::Tensor& x_in, NumberFormat format, bool power_of_two, bool tile_2d)
{
    const auto s = fp8_block_steps(x_in, format, power_of_two, tile_2d);
    const auto dtype = format == NumberFormat::E4M3 ? torch::kFloat8_e4m3fn : torch::kFloat8_e5m2;
    // No shortcut that reads a flag back: the native executor's CPU step reads no scalar.
    return {s.t.unpad(s.codes4.masked_fill(~torch::isfinite(s.amax), kNaN)).to(dtype),
            squeeze_grid(nan_where_non_finite(s.scale_inv, s.amax)), squeeze_grid(s.amax)};
}

// nvfp4's per-tensor encode scale S = 448 * 6 / amax over the finite blocks, capped at FLT_MAX
// (so FLT_MAX for an all-zero tensor, as TE's reference; 1 only if the division gave 0).
// The largest block amax; 0 for an operand with no blocks (max() of nothing throws). The
// emptiness is the tensor's shape, known on the host: no sync.
torch::Tensor max_or_zero(const torch::Tensor& amax)
{
    return amax.numel() > 0 ? amax.max() : torch::zeros({}, amax.options());
}

torch::Tensor nvfp4_encode_scale(const torch::Tensor& finite_amax)
{
    auto encode = torch::clamp_max(torch::full({}, kE4M3Max * 6.0f) / max_or_zero(finite_amax), kFltMax);
    return torch::where(encode == 0, torch::ones_like(encode), encode);
}

// What each block's E4M3 decode scale is rounded from: TE's kernel folds 1/6 into the
// multiplier, amax_block * (S * (1/6)), capped at FLT_MAX.
torch::Tensor nvfp4_unrounded_block_scale(const torch::Tensor& finite_amax, const torch::Tensor& encode)
{
    return torch::clamp_max(finite_amax * (encode * (1.0f / 6.0f)), kFltMax);
}

// What nvfp4 multiplies a block's elements by before the E2M1 cast, as TE's kernel:
// 1 / (s * fl(1/S)), capped at FLT_MAX. `decode`: fl(1/S).
torch::Tensor nvfp4_element_scale(const torch::Tensor& block_scale, const torch::Tensor& decode)
{
    return torch::clamp_max(1.0f / (block_scale * decode), kFltMax);
}

// mxfp4's shared exponent of blocks with a positive finite amax `safe`, before E8M0's clamp:
// floor(log2 amax) - 2 (OCP MX, exact from the bits), or with `round_scale_up` TE's reference
// rule ceil(log2(amax / 6)) with the quotient and its log2 rounded to FP32, as torch computes
// them on FP32 tensors (so an amax / 6 within half an FP32 ulp of log2 above 2^k takes 2^k and
// its largest element saturates at 6); -127 where amax / 6 underflows to 0.
torch::Tensor mxfp4_exponent(const torch::Tensor& safe, bool round_scale_up)
{
    if (!round_scale_up) return floor_log2(safe) - static_cast<float>(kE2M1EmaxElem);
    const auto ratio = safe / 6.0f;
    // log2 in FP64 rounded once to FP32: the correctly rounded FP32 log2 on every device.
    const auto log2_f32 = torch::log2(ratio.to(torch::kFloat64)).to(torch::kFloat32);
    return torch::ceil(log2_f32).masked_fill(~(ratio > 0), -127.0f);
}

torch::Tensor seed_tensor(uint64_t seed) { return torch::tensor(static_cast<int64_t>(seed), torch::kInt64); }

BlockQuantized nvfp4_tensor_ops(const torch::Tensor& x_in, bool tile_2d, const SrSeed& sr_seed)
{
    const auto x = x_in.to(torch::kFloat32);
    const Tiled t(x, tile_2d ? 16 : 1, 16);
    const auto amax = t.amax();
    const auto finite_amax = torch::where(torch::isfinite(amax), amax, torch::zeros_like(amax));
    const auto tensor_amax = max_or_zero(finite_amax);
    const auto encode = nvfp4_encode_scale(finite_amax);
    const auto decode = 1.0f / encode;
    const auto block_scale = round_to_format(nvfp4_unrounded_block_scale(finite_amax, encode), NumberFormat::E4M3,
                                             Overflow::Saturate); // (gr, 1, gc, 1)
    const auto element_scale = nvfp4_element_scale(block_scale, decode);
    const auto scaled = torch::clamp(t.x4 * element_scale, -kE2M1Max, kE2M1Max);
    torch::Tensor q;
    if (sr_seed.stochastic()) {
        const auto seed = sr_seed.host ? seed_tensor(*sr_seed.host) : sr_seed.on_device;
        const auto u = uniforms(seed, t.x4.size(0) * t.x4.size(1), t.x4.size(2) * t.x4.size(3), x.device());
        q = round_to_e2m1_stochastic(scaled, u.view(scaled.sizes()));
    } else {
        q = round_to_e2m1(scaled);
    }
    auto values = q * nvfp4_value_scale(block_scale, tensor_amax);
    values = poison_non_finite_blocks(values, amax);
    return {t.unpad(values), squeeze_grid(nan_where_non_finite(block_scale, amax)), squeeze_grid(amax), tensor_amax};
}

BlockQuantized mxfp4_tensor_ops(const torch::Tensor& x_in, bool round_scale_up)
{
    const auto x = x_in.to(torch::kFloat32);
    const Tiled t(x, 1, 32);
    const auto amax = t.amax();
    const auto safe = torch::where(torch::isfinite(amax) & (amax > 0), amax, torch::ones_like(amax));
    // A block of zeros takes E8M0's smallest scale 2^-127 (code 0x00), as TE and torchao give it.
    const auto exponent =
        mxfp4_exponent(safe, round_scale_up).masked_fill(~(amax > 0), -127.0f).clamp(-127, 127);
    const auto scale = pow2_exact(exponent);
    auto values = round_to_e2m1(t.x4 / scale) * scale;
    values = poison_non_finite_blocks(values, amax);
    return {t.unpad(values), squeeze_grid(nan_where_non_finite(scale, amax)), squeeze_grid(amax), {}};
}


// content_seed's sums on the CPU (wrapping uint64 additions: any order gives the same bits).
MANTISSA_VECTOR_CLONES
void content_sums(const float* p, int64_t n, uint64_t& sum_out, uint64_t& squares_out)
{
    constexpr int32_t kPrime = 1000003;
    uint64_t sum = 0, squares = 0;
    for (int64_t i = 0; i < n; ++i) {
        int32_t bits;
        std::memcpy(&bits, p + i, sizeof bits);
        int32_t r = bits % kPrime;
        r += r < 0 ? kPrime : 0; // torch's remainder takes the divisor's sign
        sum += static_cast<uint64_t>(static_cast<int64_t>(bits));
        const auto ur = static_cast<uint32_t>(r); // r >= 0: an unsigned 32 x 32 -> 64 product
        squares += static_cast<uint64_t>(ur) * ur;
    }
    sum_out = sum;
    squares_out = squares;
}

// content_seed's final mix of the sums and the element count.
uint64_t mix_content(uint64_t sum, uint64_t squares, int64_t n)
{
    return (sum * 0x9E3779B97F4A7C15ULL) ^ squares ^ static_cast<uint64_t>(n);
}

// ---- Fused CPU kernels: the same arithmetic, element by element, one pass per block -------
namespace cpu {

struct Grid {
    int64_t rows, cols, tile_rows, tile_cols, grid_rows, grid_cols;
    Grid(int64_t r, int64_t c, int64_t tr, int64_t tc)
        : rows(r), cols(c), tile_rows(tr), tile_cols(tc), grid_rows((r + tr - 1) / tr), grid_cols((c + tc - 1) / tc)
    {
    }
    int64_t padded_cols() const { return grid_cols * tile_cols; }
};

// The element loops below are cloned per vector width (vector_clones.h): a 16-element NVFP4
// block is then one AVX-512 register instead of four SSE ones.

inline float from_bits(uint32_t bits)
{
    float out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
}

// Walks blocks [begin, end) row-major with one division per range instead of one per block.
// A plain loop, not a callback: with the block body passed as a lambda, the nvfp4 pass ran
// several times slower (GCC 12 did not compile it as part of the vector clone).
struct BlockCursor {
    int64_t k, bi, bj, grid_cols;
    BlockCursor(const Grid& g, int64_t begin) : k(begin), bi(begin / g.grid_cols), bj(begin % g.grid_cols), grid_cols(g.grid_cols) {}
    void next()
    {
        ++k;
        if (++bj == grid_cols) bj = 0, ++bi;
    }
};

// Calls `range(begin, end)` over the grid's blocks, in parallel: tasks of up to 256 blocks and
// at least two of 128 x 128 (a grain of 256 blocks left a weight's 24 tiles on one thread).
template <typename F>
void each_block_range(const Grid& g, F&& range)
{
    const int64_t grain = std::clamp<int64_t>(32768 / (g.tile_rows * g.tile_cols), 1, 256);
    at::parallel_for(0, g.grid_rows * g.grid_cols, grain, [&](int64_t begin, int64_t end) { range(begin, end); });
}

// f(row, col, flat index) over the block's elements that exist (the padding has none).
template <typename F>
inline void each_element(const Grid& g, int64_t bi, int64_t bj, F&& f)
{
    const int64_t r1 = std::min(g.rows, (bi + 1) * g.tile_rows), c1 = std::min(g.cols, (bj + 1) * g.tile_cols);
    for (int64_t r = bi * g.tile_rows; r < r1; ++r)
        for (int64_t c = bj * g.tile_cols; c < c1; ++c) f(r, c, r * g.cols + c);
}

// The largest |x| of a block from the largest bits of |x|: every NaN pattern orders above Inf's.
inline float amax_of_bits(uint32_t m) { return m > 0x7F800000u ? kNaN : from_bits(m); }

// amax as torch computes it: NaN when any element is NaN, Inf when one is infinite. On the bits
// of |x|, which order like the magnitudes they encode (every NaN above Inf): an integer max,
// which vectorizes where a float max with NaN rules does not.
inline float block_amax(const float* x, const Grid& g, int64_t bi, int64_t bj)
{
    uint32_t m = 0;
    const int64_t c0 = bj * g.tile_cols;
    if (g.tile_cols == 16 && c0 + 16 <= g.cols) { // whole 16-wide rows: a known trip count
        const int64_t r1 = std::min(g.rows, (bi + 1) * g.tile_rows);
        for (int64_t r = bi * g.tile_rows; r < r1; ++r) {
            const float* xr = x + r * g.cols + c0;
            for (int c = 0; c < 16; ++c) {
                uint32_t bits;
                std::memcpy(&bits, xr + c, sizeof bits);
                bits &= 0x7FFFFFFFu;
                m = bits > m ? bits : m;
            }
        }
        return amax_of_bits(m);
    }
    each_element(g, bi, bj, [&](int64_t, int64_t, int64_t i) {
        uint32_t bits;
        std::memcpy(&bits, x + i, sizeof bits);
        bits &= 0x7FFFFFFFu;
        m = bits > m ? bits : m;
    });
    return amax_of_bits(m);
}

// E2M1's grid step at |a| <= 6: 0.5 below 2, 1 below 4, 2 above: 2^(e - 1) for a's binade
// 2^e, at least 0.5. On the bits (an integer max), so the element loops vectorize.
inline float e2m1_step(float a)
{
    uint32_t bits;
    std::memcpy(&bits, &a, sizeof bits);
    const int32_t half_binade = static_cast<int32_t>(bits & 0x7F800000u) - 0x00800000;
    return from_bits(static_cast<uint32_t>(std::max(half_binade, 0x3F000000))); // 0x3F000000: 0.5
}

// Round to nearest even on the E2M1 grid, saturating at 6: |v| rounded to a multiple of its
// binade's step, by adding and taking away step * 2^23 (whose ulp is the step; even multiples
// are E2M1's even codes: 0.25 -> 0, 0.75 -> 1, 2.5 -> 2, 5 -> 4). Branch-free, so the element
// loops vectorize; the same bits as the seven threshold tests it replaced, for every float in
// [-6, 6] (checked exhaustively, 2026-12-05). The fused kernels call these on finite values
// only: a block with an Inf or a NaN is poisoned before its elements are seen.
inline float e2m1_rne(float v)
{
    const float a = std::min(std::fabs(v), 6.0f);
    const float shift = e2m1_step(a) * 8388608.0f; // exact: a power of two
    return std::copysign((a + shift) - shift, v);
}

// round_to_e2m1_stochastic's rule (Blackwell's cvt.rs): |v| (clamped to 6) plus u grid steps,
// floored on the grid at the sum. With u = k / 256 it goes up with probability
// floor(256 (|v| - lo) / step) / 256: at most 1/256 of a step low, and never below step / 256.
// The floor: from 1 up the grid is FP32 cut to one mantissa bit (1, 1.5, 2, 3, 4, 6; the sum
// stays below 8), below it 0.5 or 0 (same bits as trunc(t / step) * step, every float in
// [-6, 6] with a spread of u, 2026-12-05).
inline float e2m1_stochastic(float v, float u)
{
    const float a = std::min(std::fabs(v), 6.0f);
    const float t = a + u * e2m1_step(a); // the product is exact: one rounding
    uint32_t bits;
    std::memcpy(&bits, &t, sizeof bits);
    const float floored = t >= 1.0f ? from_bits(bits & 0xFFC00000u) : 0.5f * (t >= 0.5f);
    return std::copysign(std::min(floored, 6.0f), v);
}

float floor_log2(float x)
{
    int e = 0;
    std::frexp(x, &e);
    return static_cast<float>(e - 1);
}

float pow2(float exponent)
{
    const auto e = static_cast<int32_t>(exponent);
    return from_bits(e >= -126 ? static_cast<uint32_t>(e + 127) << 23 : 1u << std::clamp(e + 149, 0, 22));
}

// fp8-block's scale for a block of amax `a`: the format's max over a (FLT_MAX where that
// overflows), floored to a power of two when asked, 1 for a block of zeros. Meaningless for a
// NaN or Inf block, whose values are poisoned and whose stored scale is NaN.
// For a finite a the quotient is a normal float (at least 448 / FLT_MAX), so its power-of-two
// floor is its exponent bits: selects and a mask, which vectorize where frexp is a call.
inline float fp8_block_scale(float a, float fp8_max, bool power_of_two)
{
    float scale = fp8_max / a;
    scale = scale == std::numeric_limits<float>::infinity() ? kFltMax : scale;
    if (power_of_two) scale = from_bits(rounding::bits_of(scale) & 0x7F800000u);
    return a == 0.0f ? 1.0f : scale;
}

using rounding::Fp8Rounder;

struct Buffers {
    torch::Tensor values, scales, amax;
    float* out;
    float* scale;
    float* am;
    explicit Buffers(const Grid& g) : Buffers(g, torch::empty({g.rows, g.cols})) {}
    // `values_out`: where the values go, when not in g's own layout.
    Buffers(const Grid& g, torch::Tensor values_out)
        : values(std::move(values_out)), scales(torch::empty({g.grid_rows, g.grid_cols})),
          amax(torch::empty({g.grid_rows, g.grid_cols})), out(values.data_ptr<float>()),
          scale(scales.data_ptr<float>()), am(amax.data_ptr<float>())
    {
    }
};

inline void poison(const Grid& g, int64_t bi, int64_t bj, float* out)
{
    each_element(g, bi, bj, [&](int64_t, int64_t, int64_t i) { out[i] = kNaN; });
}

MANTISSA_VECTOR_CLONES
void block_amaxes(const float* x, const Grid& g, float* am, int64_t begin, int64_t end)
{
    for (BlockCursor at(g, begin); at.k < end; at.next()) am[at.k] = block_amax(x, g, at.bi, at.bj);
}

// 16 lanes of 32 bits (a GCC/clang vector): one AVX-512 register, two AVX2 or four SSE2 ones,
// whichever clone runs. For the 16-wide blocks whose reductions GCC 12 leaves scalar: a
// 16-trip max over one block compiled to 16 scalar loads and maxes.
// Taken by reference only: GCC warns that such a value passed by value has another ABI with
// and without AVX-512.
using U32x16 = uint32_t __attribute__((vector_size(64)));

// a = max(a, b) lane by lane.
inline void max_into(U32x16& a, const U32x16& b) { a = a > b ? a : b; }

// The largest of the 16 lanes, halves folded onto each other (a max is exact in any order).
inline uint32_t max_lane(U32x16& v)
{
    max_into(v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
    max_into(v, __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
    max_into(v, __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
    max_into(v, __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
    return v[0];
}

// The largest lane of each of 16 vectors v[0..15] into lane j of `out`: four levels that each
// halve the vectors and the lanes per vector (a max of two shuffles of a pair), 45 operations
// for all 16 against 16 x 12 folding each vector on its own. The last level leaves vector j's
// maximum in lane bitreverse4(j); one shuffle puts them in order.
inline void max_lanes_16(U32x16* v, U32x16& out)
{
    for (int p = 0; p < 8; ++p) { // v[p]: lanes 0-7 from v[2p], 8-15 from v[2p + 1]
        U32x16 lo = __builtin_shufflevector(v[2 * p], v[2 * p + 1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
        max_into(lo, __builtin_shufflevector(v[2 * p], v[2 * p + 1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29,
                                             30, 31));
        v[p] = lo;
    }
    for (int q = 0; q < 4; ++q) { // v[q]: four lanes each of vectors 4q, 4q + 2, 4q + 1, 4q + 3
        U32x16 lo = __builtin_shufflevector(v[2 * q], v[2 * q + 1], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
        max_into(lo, __builtin_shufflevector(v[2 * q], v[2 * q + 1], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30,
                                             31));
        v[q] = lo;
    }
    for (int r = 0; r < 2; ++r) { // v[r]: two lanes each of vectors 8r + 0, 4, 2, 6, 1, 5, 3, 7
        U32x16 lo = __builtin_shufflevector(v[2 * r], v[2 * r + 1], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
        max_into(lo, __builtin_shufflevector(v[2 * r], v[2 * r + 1], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30,
                                             31));
        v[r] = lo;
    }
    U32x16 z = __builtin_shufflevector(v[0], v[1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
    max_into(z, __builtin_shufflevector(v[0], v[1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31));
    out = __builtin_shufflevector(z, z, 0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15);
}

// What row_block_amaxes finds over a range of blocks: the largest finite block amax (0 if
// none), nvfp4's tensor amax over it, and content_seed's sums of the range when asked.
struct RowBlocksPass {
    float finite_max = 0.0f;
    uint64_t sum = 0, squares = 0;
};

// block_amaxes for 1x16 blocks of rows that hold whole blocks (cols % 16 == 0): block k is
// elements [16k, 16k + 16), a flat range of memory. The finite maximum on bits, as every amax
// is >= 0. `sums`: content_seed's sums too, 256 elements at a time while they are in L1 (the
// stochastic rounding of a gradient needs its seed only in the second pass).
MANTISSA_VECTOR_CLONES
RowBlocksPass row_block_amaxes(const float* x, float* am, int64_t begin, int64_t end, bool sums)
{
    constexpr uint32_t kInfBits = 0x7F800000u;
    RowBlocksPass pass;
    const auto add_sums = [&](int64_t first_block, int64_t blocks) {
        uint64_t sum = 0, squares = 0;
        content_sums(x + 16 * first_block, 16 * blocks, sum, squares);
        pass.sum += sum;
        pass.squares += squares;
    };
    U32x16 finite_max16 = {};
    int64_t k = begin;
    for (; k + 16 <= end; k += 16) { // 16 blocks at a time
        U32x16 v[16], m;
        std::memcpy(v, x + 16 * k, sizeof v);
        if (sums) add_sums(k, 16);
        for (auto& block : v) block &= 0x7FFFFFFFu;
        max_lanes_16(v, m);
        const auto nan = static_cast<U32x16>(m > kInfBits);
        const U32x16 amax_bits = (m & ~nan) | (0x7FC00000u & nan); // amax_of_bits, lane by lane
        std::memcpy(am + k, &amax_bits, sizeof amax_bits);
        max_into(finite_max16, m & static_cast<U32x16>(m < kInfBits));
    }
    uint32_t finite_max = max_lane(finite_max16);
    if (sums && k < end) add_sums(k, end - k);
    for (; k < end; ++k) {
        U32x16 v;
        std::memcpy(&v, x + 16 * k, sizeof v);
        v &= 0x7FFFFFFFu;
        const uint32_t m = max_lane(v);
        am[k] = amax_of_bits(m);
        finite_max = m < kInfBits && m > finite_max ? m : finite_max;
    }
    pass.finite_max = from_bits(finite_max);
    return pass;
}

// The bits of |x| for 128 values x[0..127], folded lane by lane to 16: eight vectors maxed as a
// tree, so that no max waits on more than three others.
inline void abs_max_128(const float* x, U32x16& out)
{
    U32x16 w[8];
    std::memcpy(w, x, sizeof w);
    for (auto& u : w) u &= 0x7FFFFFFFu;
    max_into(w[0], w[4]), max_into(w[1], w[5]), max_into(w[2], w[6]), max_into(w[3], w[7]);
    max_into(w[0], w[2]), max_into(w[1], w[3]);
    max_into(w[0], w[1]);
    out = w[0];
}

// The amax of `rows` rows of 128 values each, `stride` apart.
inline float amax_of_rows128(const float* x, int64_t stride, int64_t rows)
{
    U32x16 m = {}, row;
    for (int64_t r = 0; r < rows; ++r) {
        abs_max_128(x + r * stride, row);
        max_into(m, row);
    }
    return amax_of_bits(max_lane(m));
}

// fp8_block_range for 1x128 blocks of rows that hold whole blocks (cols % 128 == 0): block k is
// elements [128k, 128k + 128). 16 blocks at a time, so that no step waits on the one before:
// each block's eight vectors folded to one, the 16 maxima by max_lanes_16, the 16 scales in
// vector lanes, then the casts. One block at a time, the chain of maxes and the scalar scale
// made the pass slower than the generic loops (96 against 73 us per 768 x 512 operand).
MANTISSA_VECTOR_CLONES
void fp8_row_blocks(const float* x, const Buffers& b, NumberFormat format, bool power_of_two, int64_t begin,
                    int64_t end)
{
    const float fp8_max = static_cast<float>(format_info(format).max_finite);
    const Fp8Rounder round(format);
    for (int64_t k0 = begin; k0 < end; k0 += 16) {
        const int n = static_cast<int>(std::min<int64_t>(16, end - k0));
        U32x16 v[16] = {}, m; // blocks past n stay zero
        for (int j = 0; j < n; ++j) abs_max_128(x + 128 * (k0 + j), v[j]);
        max_lanes_16(v, m);
        float a[16], scale[16], inv[16];
        for (int j = 0; j < 16; ++j) {
            a[j] = amax_of_bits(m[j]);
            scale[j] = fp8_block_scale(a[j], fp8_max, power_of_two);
            inv[j] = 1.0f / scale[j];
        }
        for (int j = 0; j < n; ++j) {
            const int64_t k = k0 + j;
            b.am[k] = a[j];
            b.scale[k] = std::isfinite(a[j]) ? inv[j] : kNaN;
            float* out = b.out + 128 * k;
            if (!std::isfinite(a[j])) {
                std::fill_n(out, 128, kNaN);
                continue;
            }
            const float* xb = x + 128 * k;
            for (int c = 0; c < 128; ++c) out[c] = round(xb[c] * scale[j]) * inv[j];
        }
    }
}

MANTISSA_VECTOR_CLONES
void fp8_block_range(const float* x, const Grid& g, const Buffers& b, NumberFormat format, bool power_of_two,
                     int64_t begin, int64_t end)
{
    const float fp8_max = static_cast<float>(format_info(format).max_finite);
    const Fp8Rounder round(format);
    for (BlockCursor at(g, begin); at.k < end; at.next()) {
        const int64_t bi = at.bi, bj = at.bj, k = at.k;
        const int64_t c0 = bj * 128, r0 = bi * g.tile_rows, r1 = std::min(g.rows, r0 + g.tile_rows);
        if (c0 + 128 <= g.cols) {
            // A block of whole 128-value rows: trip counts the compiler knows, so the amax and
            // the cast run in full vectors (the generic loops below have runtime bounds).
            const float a = b.am[k] = amax_of_rows128(x + r0 * g.cols + c0, g.cols, r1 - r0);
            const float scale = fp8_block_scale(a, fp8_max, power_of_two);
            const float inv = 1.0f / scale;
            b.scale[k] = std::isfinite(a) ? inv : kNaN;
            for (int64_t r = r0; r < r1; ++r) {
                const float* xr = x + r * g.cols + c0;
                float* out = b.out + r * g.cols + c0;
                if (std::isfinite(a))
                    for (int c = 0; c < 128; ++c) out[c] = round(xr[c] * scale) * inv;
                else
                    std::fill_n(out, 128, kNaN);
            }
            continue;
        }
        const float a = b.am[k] = block_amax(x, g, bi, bj);
        const float scale = fp8_block_scale(a, fp8_max, power_of_two);
        const float inv = 1.0f / scale;
        b.scale[k] = std::isfinite(a) ? inv : kNaN;
        if (!std::isfinite(a)) {
            poison(g, bi, bj, b.out);
            continue;
        }
        each_element(g, bi, bj, [&](int64_t, int64_t, int64_t i) { b.out[i] = round(x[i] * scale) * inv; });
    }
}

BlockQuantized fp8_block(const torch::Tensor& x_in, NumberFormat format, bool power_of_two, bool tile_2d)
{
    const auto x_t = contiguous_on_threads(x_in);
    const float* x = x_t.data_ptr<float>();
    const Grid g(x_t.size(0), x_t.size(1), tile_2d ? 128 : 1, 128);
    Buffers b(g);
    const bool whole_row_blocks = !tile_2d && g.cols % 128 == 0;
    each_block_range(g, [&](int64_t begin, int64_t end) {
        if (whole_row_blocks) fp8_row_blocks(x, b, format, power_of_two, begin, end);
        else fp8_block_range(x, g, b, format, power_of_two, begin, end);
    });
    return {b.values, b.scales, b.amax, {}};
}

// fp8-block's 1x128 cast along x's columns (each block: 128 rows of one column) read where they
// lie, as TE's columnwise cast does: the same arithmetic as fp8_block_range on x^T, without the
// transposing copy in (a two-thread fp8-block step of shakespeare-char went from 1.83x to 1.63x
// FP32's, docs/BENCHMARKS.md, 2026-12-05). A task is a panel of 128 rows by kPanel columns: the amax and the cast run along
// the panel's rows, kPanel columns in vector lanes (four AVX-512 registers), each row's piece a
// whole cache line or four. Panels of 16 columns took 272 us per 768x512 operand on one thread,
// of 64 147 us, the row cast of the transpose 143 us plus the copy (bench/block_quantizers).
constexpr int64_t kPanel = 64;

MANTISSA_VECTOR_CLONES
void fp8_block_columns_range(const float* x, int64_t rows, int64_t cols, const Buffers& b, NumberFormat format,
                             bool power_of_two, int64_t begin, int64_t end)
{
    const float fp8_max = static_cast<float>(format_info(format).max_finite);
    const Fp8Rounder round(format);
    const int64_t blocks = (rows + 127) / 128, panels = (cols + kPanel - 1) / kPanel;
    for (int64_t task = begin; task < end; ++task) {
        const int64_t bi = task / panels, c0 = (task % panels) * kPanel;
        const int64_t r0 = bi * 128, r1 = std::min(rows, r0 + 128), width = std::min(kPanel, cols - c0);
        uint32_t m[kPanel] = {};
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * cols + c0;
            if (width == kPanel) { // a known trip count, so the lanes stay in vector registers
                for (int64_t c = 0; c < kPanel; ++c) {
                    uint32_t bits;
                    std::memcpy(&bits, xr + c, sizeof bits);
                    m[c] = std::max(m[c], bits & 0x7FFFFFFFu);
                }
            } else {
                for (int64_t c = 0; c < width; ++c) {
                    uint32_t bits;
                    std::memcpy(&bits, xr + c, sizeof bits);
                    m[c] = std::max(m[c], bits & 0x7FFFFFFFu);
                }
            }
        }
        float scale[kPanel], inv[kPanel];
        bool finite[kPanel];
        for (int64_t c = 0; c < width; ++c) { // fp8_block_range's rule, block (column c0 + c, bi) of x^T
            const float a = amax_of_bits(m[c]);
            scale[c] = fp8_block_scale(a, fp8_max, power_of_two);
            inv[c] = 1.0f / scale[c], finite[c] = std::isfinite(a);
            const int64_t k = (c0 + c) * blocks + bi;
            b.am[k] = a;
            b.scale[k] = finite[c] ? inv[c] : kNaN;
        }
        // Every column cast, then the non-finite ones poisoned: a select in the loop kept it scalar.
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = x + r * cols + c0;
            float* out = b.out + r * cols + c0;
            if (width == kPanel)
                for (int64_t c = 0; c < kPanel; ++c) out[c] = round(xr[c] * scale[c]) * inv[c];
            else
                for (int64_t c = 0; c < width; ++c) out[c] = round(xr[c] * scale[c]) * inv[c];
        }
        for (int64_t c = 0; c < width; ++c)
            if (!finite[c])
                for (int64_t r = r0; r < r1; ++r) b.out[r * cols + c0 + c] = kNaN;
    }
}

BlockQuantized fp8_block_columns(const torch::Tensor& x_in, NumberFormat format, bool power_of_two)
{
    const auto x_t = contiguous_on_threads(x_in);
    const float* x = x_t.data_ptr<float>();
    const int64_t rows = x_t.size(0), cols = x_t.size(1);
    const Grid transposed(cols, rows, 1, 128); // x^T's grid: its scales' and amaxes' layout
    Buffers b(transposed, torch::empty({rows, cols})); // the values in x's layout
    const int64_t tasks = transposed.grid_cols * ((cols + kPanel - 1) / kPanel);
    at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) { // a task: 8,192 values
        fp8_block_columns_range(x, rows, cols, b, format, power_of_two, begin, end);
    });
    return {b.values, b.scales, b.amax, {}};
}

// One row of a whole 16-wide nvfp4 block, with a trip count the compiler knows: a single
// AVX-512 register, no loop or remainder code (the per-block overhead otherwise costs more
// than the 16 elements). `u0`: the stochastic-rounding index of the row's first element.
template <bool kStochastic>
inline void nvfp4_row16(const float* xr, float* out, float element_scale, float value_scale, uint64_t seed, uint32_t u0)
{
    const uint32_t base = u0 * kGolden + static_cast<uint32_t>(seed); // (u0 + c) * golden = base + c * golden
    for (uint32_t c = 0; c < 16; ++c) {
        const float v = std::min(std::max(xr[c] * element_scale, -6.0f), 6.0f);
        if constexpr (kStochastic)
            out[c] = e2m1_stochastic(v, hashed_uniform_after_index(base + c * kGolden, seed)) * value_scale;
        else out[c] = e2m1_rne(v) * value_scale;
    }
}

// nvfp4's block scales, for blocks [begin, end): each block's E4M3 decode scale from its amax
// and the tensor's encode scale, the element scale that maps the block onto E2M1's range, and
// what one E2M1 step is worth. A pass of its own so that it vectorizes too (Fp8Rounder gives
// the bits of clamp + cast).
struct Nvfp4BlockScales {
    std::vector<float> element, value;
    explicit Nvfp4BlockScales(int64_t blocks) : element(static_cast<size_t>(blocks)), value(static_cast<size_t>(blocks)) {}
};

MANTISSA_VECTOR_CLONES
void nvfp4_scales(const Buffers& b, Nvfp4BlockScales& s, float decode, float multiplier, float tensor_amax,
                  int64_t begin, int64_t end)
{
    const Fp8Rounder e4m3(NumberFormat::E4M3);
    for (int64_t k = begin; k < end; ++k) {
        const bool finite = std::isfinite(b.am[k]);
        const float block_scale = e4m3(std::min((finite ? b.am[k] : 0.0f) * multiplier, kFltMax));
        b.scale[k] = finite ? block_scale : kNaN;
        s.element[k] = std::min(1.0f / (block_scale * decode), kFltMax);
        s.value[k] = nvfp4_value_scale(block_scale, tensor_amax);
    }
}

// The second pass of nvfp4: the elements of blocks [begin, end). `sr_seed` null: round to
// nearest even.
MANTISSA_VECTOR_CLONES
void nvfp4_range(const float* x, const Grid& g, const Buffers& b, const Nvfp4BlockScales& s, const uint64_t* sr_seed,
                 int64_t begin, int64_t end)
{
    const int64_t u_cols = g.padded_cols();
    for (BlockCursor at(g, begin); at.k < end; at.next()) {
        const int64_t bi = at.bi, bj = at.bj, k = at.k;
        const float value_scale = s.value[k], element_scale = s.element[k];
        if (!std::isfinite(b.am[k])) {
            poison(g, bi, bj, b.out);
            continue;
        }
        const int64_t c0 = bj * g.tile_cols;
        if (g.tile_cols == 16 && c0 + 16 <= g.cols) { // the common case: whole 16-wide rows
            const int64_t r1 = std::min(g.rows, (bi + 1) * g.tile_rows);
            for (int64_t r = bi * g.tile_rows; r < r1; ++r) {
                const int64_t i = r * g.cols + c0;
                if (sr_seed)
                    nvfp4_row16<true>(x + i, b.out + i, element_scale, value_scale, *sr_seed,
                                      static_cast<uint32_t>(r * u_cols + c0));
                else
                    nvfp4_row16<false>(x + i, b.out + i, element_scale, value_scale, 0, 0);
            }
            continue;
        }
        // Two loops, so that neither carries a branch and both vectorize.
        if (sr_seed) {
            const uint64_t seed = *sr_seed;
            each_element(g, bi, bj, [&](int64_t r, int64_t c, int64_t i) {
                const float v = std::min(std::max(x[i] * element_scale, -6.0f), 6.0f);
                const float u = hashed_uniform(seed, static_cast<uint32_t>(r * u_cols + c));
                b.out[i] = e2m1_stochastic(v, u) * value_scale;
            });
        } else {
            each_element(g, bi, bj, [&](int64_t, int64_t, int64_t i) {
                const float v = std::min(std::max(x[i] * element_scale, -6.0f), 6.0f);
                b.out[i] = e2m1_rne(v) * value_scale;
            });
        }
    }
}

// nvfp4_row_blocks' loop, with the choice of rounding made once per range, not per block.
template <bool kStochastic>
inline void nvfp4_row_blocks_rounded(const float* x, const Buffers& b, const Nvfp4BlockScales& s, uint64_t seed,
                                     int64_t begin, int64_t end)
{
    for (int64_t k = begin; k < end; ++k) {
        if (std::isfinite(b.am[k]))
            nvfp4_row16<kStochastic>(x + 16 * k, b.out + 16 * k, s.element[k], s.value[k], seed,
                                     static_cast<uint32_t>(16 * k));
        else
            std::fill_n(b.out + 16 * k, 16, kNaN);
    }
}

// nvfp4_range for 1x16 blocks of rows that hold whole blocks: block k is elements
// [16k, 16k + 16), and its stochastic-rounding indices start at 16k.
MANTISSA_VECTOR_CLONES
void nvfp4_row_blocks(const float* x, const Buffers& b, const Nvfp4BlockScales& s, const uint64_t* sr_seed,
                      int64_t begin, int64_t end)
{
    if (sr_seed) nvfp4_row_blocks_rounded<true>(x, b, s, *sr_seed, begin, end);
    else nvfp4_row_blocks_rounded<false>(x, b, s, 0, begin, end);
}

// `seed_from_content`: stochastic rounding seeded with content_seed(x_in) (sr_seed unused).
BlockQuantized nvfp4(const torch::Tensor& x_in, bool tile_2d, std::optional<uint64_t> sr_seed, bool seed_from_content)
{
    const auto x_t = contiguous_on_threads(x_in);
    const float* x = x_t.data_ptr<float>();
    const Grid g(x_t.size(0), x_t.size(1), tile_2d ? 16 : 1, 16);
    const bool flat_blocks = !tile_2d && g.cols % 16 == 0; // block k is elements [16k, 16k + 16)
    Buffers b(g);
    const int64_t blocks = b.amax.numel();
    float global_amax = 0.0f;
    if (flat_blocks) {
        // Wrapping sums and a max: any split over the threads gives the same bits.
        const auto pass = at::parallel_reduce(
            0, blocks, 256, RowBlocksPass{},
            [&](int64_t begin, int64_t end, RowBlocksPass) {
                return row_block_amaxes(x, b.am, begin, end, seed_from_content);
            },
            [](RowBlocksPass a, RowBlocksPass c) {
                return RowBlocksPass{std::max(a.finite_max, c.finite_max), a.sum + c.sum, a.squares + c.squares};
            });
        global_amax = pass.finite_max;
        if (seed_from_content) sr_seed = mix_content(pass.sum, pass.squares, x_t.numel());
    } else {
        each_block_range(g, [&](int64_t begin, int64_t end) { block_amaxes(x, g, b.am, begin, end); });
        for (int64_t k = 0; k < blocks; ++k)
            if (std::isfinite(b.am[k])) global_amax = std::max(global_amax, b.am[k]);
        if (seed_from_content) sr_seed = content_seed(x_t);
    }
    float encode = std::min(kE4M3Max * 6.0f / global_amax, kFltMax);
    if (encode == 0.0f) encode = 1.0f;
    const float decode = 1.0f / encode;
    const float multiplier = encode * (1.0f / 6.0f);
    const uint64_t* seed = sr_seed ? &*sr_seed : nullptr;
    Nvfp4BlockScales scales(blocks);
    each_block_range(g, [&](int64_t begin, int64_t end) {
        nvfp4_scales(b, scales, decode, multiplier, global_amax, begin, end);
        if (flat_blocks) nvfp4_row_blocks(x, b, scales, seed, begin, end);
        else nvfp4_range(x, g, b, scales, seed, begin, end);
    });
    return {b.values, b.scales, b.amax, torch::tensor(global_amax)};
}

MANTISSA_VECTOR_CLONES
void mxfp4_range(const float* x, const Grid& g, const Buffers& b, bool round_scale_up, int64_t begin, int64_t end)
{
    for (BlockCursor at(g, begin); at.k < end; at.next()) {
        const int64_t bi = at.bi, bj = at.bj, k = at.k;
        const float a = b.am[k] = block_amax(x, g, bi, bj);
        const float safe = std::isfinite(a) && a > 0.0f ? a : 1.0f;
        float e = 0.0f;
        if (round_scale_up) { // mxfp4_exponent's rule: log2 rounded to FP32, then ceil
            const float ratio = safe / 6.0f;
            e = ratio > 0.0f ? std::ceil(static_cast<float>(std::log2(static_cast<double>(ratio)))) : -127.0f;
        } else {
            e = floor_log2(safe) - static_cast<float>(kE2M1EmaxElem);
        }
        e = std::clamp(a > 0.0f ? e : -127.0f, -127.0f, 127.0f); // a block of zeros: 2^-127
        const float scale = pow2(e);
        b.scale[k] = std::isfinite(a) ? scale : kNaN;
        if (!std::isfinite(a)) {
            poison(g, bi, bj, b.out);
            continue;
        }
        const float inverse = pow2(-e); // exactly 1 / scale, so * gives the bits of /
        each_element(g, bi, bj, [&](int64_t, int64_t, int64_t i) { b.out[i] = e2m1_rne(x[i] * inverse) * scale; });
    }
}

BlockQuantized mxfp4(const torch::Tensor& x_in, bool round_scale_up)
{
    const auto x_t = contiguous_on_threads(x_in);
    const float* x = x_t.data_ptr<float>();
    const Grid g(x_t.size(0), x_t.size(1), 1, 32);
    Buffers b(g);
    each_block_range(g, [&](int64_t begin, int64_t end) { mxfp4_range(x, g, b, round_scale_up, begin, end); });
    return {b.values, b.scales, b.amax, {}};
}

} // namespace cpu

bool fused(const torch::Tensor& x, BlockKernel kernel)
{
    if (kernel == BlockKernel::FusedCpu) TORCH_CHECK(x.device().is_cpu(), "the fused block kernels run on the CPU");
    return kernel == BlockKernel::FusedCpu || (kernel == BlockKernel::Auto && x.device().is_cpu());
}

#ifdef MANTISSA_CUDA_KERNELS
// Equal bit for bit, where NaN equals any NaN (the ops' amax keeps an input NaN's payload).
bool same_bits_nan_equal(const torch::Tensor& a, const torch::Tensor& b)
{
    if (a.sizes() != b.sizes()) return false;
    const auto x = a.cpu().contiguous(), y = b.cpu().contiguous();
    const auto nx = x.isnan(), ny = y.isnan();
    return torch::equal(nx, ny) &&
           torch::equal(x.masked_fill(nx, 0.0f).view(torch::kInt32), y.masked_fill(ny, 0.0f).view(torch::kInt32));
}

// A kernel's codes against the ops': codes byte for byte, scales and amaxes bit for bit.
bool same_codes(const Fp8BlockCodes& ops, const cuda_kernels::Fp8BlockRows& own)
{
    return torch::equal(ops.codes.view(torch::kUInt8).cpu(), own.codes.view(torch::kUInt8).cpu()) &&
           same_bits_nan_equal(ops.decode, own.scale_inv) && same_bits_nan_equal(ops.amax, own.amax);
}

// One of the cast kernels (1x128 rows, or 128x128 tiles) against fp8_block_tensor_ops on x, in
// both formats and both kinds of scale: values, scales and amaxes bit for bit.
bool cast_matches_ops(const torch::Tensor& x, bool tile_2d, bool paired_conversion)
{
    for (const NumberFormat format : {NumberFormat::E4M3, NumberFormat::E5M2})
        for (const bool power_of_two : {true, false}) {
            const bool e4m3 = format == NumberFormat::E4M3;
            const auto ops = fp8_block_tensor_ops(x, format, power_of_two, tile_2d);
            const auto own = tile_2d ? cuda_kernels::fp8_block_tiles(x, e4m3, power_of_two, paired_conversion)
                                     : cuda_kernels::fp8_block_rows(x, e4m3, power_of_two, paired_conversion);
            if (!same_bits_nan_equal(ops.values, own.values) || !same_bits_nan_equal(ops.block_scales, own.scale_inv) ||
                !same_bits_nan_equal(ops.block_amax, own.amax))
                return false;
            // The codes the blockwise GEMM takes, byte for byte, with the same scales.
            const auto own_codes = tile_2d ? cuda_kernels::fp8_block_tiles(x, e4m3, power_of_two, paired_conversion, true)
                                           : cuda_kernels::fp8_block_rows(x, e4m3, power_of_two, paired_conversion, true);
            if (!same_codes(fp8_block_codes_tensor_ops(x, format, power_of_two, tile_2d), own_codes)) return false;
        }
    return true;
}

// fp8_block_rows against fp8_block_tensor_ops, once per process, on fp8_block_probe_rows();
// both formats, both kinds of scale.
ProbedKernel fp8_block_cast_kernel(const torch::Device& device)
{
    static const ProbedKernel kernel = probe_paired_then_plain("fp8-block cast", [&](bool paired) {
        const auto x = fp8_block_probe_rows().to(device);
        // Also as BF16 and FP16, as a gradient or a 16-bit activation reaches the kernel.
        for (const auto& in : {x, x.to(torch::kBFloat16), x.to(torch::kHalf)})
            if (!cast_matches_ops(in, /*tile_2d=*/false, paired)) return false;
        return true;
    });
    return kernel;
}

// fp8_block_rows_cols against fp8_block_codes_tensor_ops of x and of x^T, once per process, on
// fp8_block_probe_square() as FP32, BF16 and FP16: codes byte for byte, scales and amaxes bit
// for bit, both formats, both kinds of scale.
ProbedKernel fp8_block_rows_cols_kernel(const torch::Device& device)
{
    static const ProbedKernel kernel = probe_paired_then_plain("fp8-block rows and columns cast", [&](bool paired) {
        const auto x32 = fp8_block_probe_square().to(device);
        for (const auto& x : {x32, x32.to(torch::kBFloat16), x32.to(torch::kHalf)})
            for (const NumberFormat format : {NumberFormat::E4M3, NumberFormat::E5M2})
                for (const bool power_of_two : {true, false}) {
                    const auto own = cuda_kernels::fp8_block_rows_cols(x, format == NumberFormat::E4M3, power_of_two, paired);
                    if (!same_codes(fp8_block_codes_tensor_ops(x, format, power_of_two, false), own.rows) ||
                        !same_codes(fp8_block_codes_tensor_ops(x.t().contiguous(), format, power_of_two, false), own.cols))
                        return false;
                }
        return true;
    });
    return kernel;
}

// fp8_block_tiles against fp8_block_tensor_ops (128 x 128 tiles), once per process, on
// fp8_block_probe_tiles(); both formats, both kinds of scale.
ProbedKernel fp8_block_tile_cast_kernel(const torch::Device& device)
{
    static const ProbedKernel kernel = probe_paired_then_plain("fp8-block tile cast", [&](bool paired) {
        return cast_matches_ops(fp8_block_probe_tiles().to(device), /*tile_2d=*/true, paired);
    });
    return kernel;
}
// The dtypes the cast kernels read as they arrive; any other is widened to FP32 first.
bool kernel_reads_as_is(const torch::Tensor& x)
{
    const auto dtype = x.scalar_type();
    return dtype == torch::kFloat32 || dtype == torch::kBFloat16 || dtype == torch::kHalf;
}

// fp8-block's cast of a CUDA x by Mantissa's kernel (1x128 rows, or 128x128 tiles of FP32),
// writing values or codes, as its probe left it; nothing where the probe found it wrong.
std::optional<cuda_kernels::Fp8BlockRows> fp8_block_kernel_cast(const torch::Tensor& x, NumberFormat format,
                                                                bool power_of_two, bool tile_2d, bool codes)
{
    const ProbedKernel kernel = tile_2d ? fp8_block_tile_cast_kernel(x.device()) : fp8_block_cast_kernel(x.device());
    if (kernel == ProbedKernel::Unavailable) return std::nullopt;
    const bool e4m3 = format == NumberFormat::E4M3, paired = kernel == ProbedKernel::Paired;
    if (tile_2d)
        return cuda_kernels::fp8_block_tiles(x.to(torch::kFloat32).contiguous(), e4m3, power_of_two, paired, codes);
    return cuda_kernels::fp8_block_rows((kernel_reads_as_is(x) ? x : x.to(torch::kFloat32)).contiguous(), e4m3,
                                        power_of_two, paired, codes);
}
#endif

} // namespace

torch::Tensor fp8_block_probe_rows()
{
    const int64_t rows = 12, cols = 300;
    const auto i = torch::arange(rows * cols, torch::kFloat32).view({rows, cols});
    auto x = torch::sin(i * 0.37f) * torch::exp2(torch::remainder(i, 31.0f) - 15.0f); // (rows, cols)
    x[1].narrow(0, 128, 128).zero_();
    x[2][140].fill_(std::numeric_limits<float>::quiet_NaN());
    x[3][7].fill_(-std::numeric_limits<float>::infinity());
    x[4].narrow(0, 0, 128).copy_(torch::linspace(-1.0, 1.0, 128) * std::ldexp(1.0f, -140));
    x[5][260].fill_(std::numeric_limits<float>::max());
    x[6].narrow(0, 128, 128).fill_(std::ldexp(1.0f, -149));
    x[7].narrow(0, 0, 128).copy_(torch::linspace(-464.0, 464.0, 128)); // amax 464: scale just under 1
    x[8].narrow(0, 128, 128).copy_(torch::linspace(-61440.0, 61440.0, 128));
    x[9].narrow(0, 256, 44).fill_(-0.0f);
    return x;
}

torch::Tensor fp8_block_probe_tiles()
{
    const int64_t rows = 300, cols = 260;
    const auto i = torch::arange(rows * cols, torch::kFloat32).view({rows, cols});
    auto x = torch::sin(i * 0.37f) * torch::exp2(torch::remainder(i, 31.0f) - 15.0f);
    const auto tile = [&](int64_t tr, int64_t tc) {
        return x.narrow(0, tr * 128, std::min<int64_t>(128, rows - tr * 128))
            .narrow(1, tc * 128, std::min<int64_t>(128, cols - tc * 128));
    };
    tile(0, 0).zero_();
    tile(0, 1)[5][17].fill_(std::numeric_limits<float>::quiet_NaN());
    tile(1, 0)[100][3].fill_(-std::numeric_limits<float>::infinity());
    tile(1, 1).copy_(torch::linspace(-1.0, 1.0, 128 * 128).view({128, 128}) * std::ldexp(1.0f, -140));
    tile(2, 0)[10][64].fill_(std::numeric_limits<float>::max());
    tile(0, 2).copy_(torch::linspace(-464.0, 464.0, 128 * 4).view({128, 4}));
    tile(2, 1).copy_(torch::linspace(-61440.0, 61440.0, 44 * 128).view({44, 128}));
    tile(1, 2)[7][1].fill_(1.0e6f); // amaxes in the last warps' rows (rows w, w + 8, ... of a tile)
    tile(2, 2)[14][2].fill_(-2.0e6f);
    return x;
}

torch::Tensor fp8_block_probe_square()
{
    const int64_t n = 384;
    const auto i = torch::arange(n * n, torch::kFloat32).view({n, n});
    auto x = torch::sin(i * 0.23f) * torch::exp2(torch::remainder(i, 37.0f) - 18.0f);
    x.narrow(0, 0, 300).narrow(1, 0, 260).copy_(fp8_block_probe_tiles());
    x.narrow(0, 300, 12).narrow(1, 0, 300).copy_(fp8_block_probe_rows());
    x.narrow(0, 320, 64).narrow(1, 300, 1).fill_(std::ldexp(1.0f, -149)); // a column block of the smallest subnormal
    x.narrow(1, 330, 1).copy_(torch::linspace(-464.0, 464.0, n).unsqueeze(1)); // columns whose amax gives a scale just under 1
    x.narrow(0, 256, 128).narrow(1, 370, 1).zero_();                       // a column block of zeros
    return x;
}

std::string fp8_block_cast_kernel_report(bool tiles)
{
#ifdef MANTISSA_CUDA_KERNELS
    if (!torch::cuda::is_available()) return "no GPU";
    const torch::Device gpu(torch::kCUDA);
    return probed_kernel_report(tiles ? fp8_block_tile_cast_kernel(gpu) : fp8_block_cast_kernel(gpu));
#else
    (void)tiles;
    return "not built";
#endif
}

BlockQuantized quantize_fp8_block_2d(const torch::Tensor& x, NumberFormat format, bool power_of_two, bool tile_2d,
                                     BlockKernel kernel)
{
    TORCH_CHECK(x.dim() == 2, "block quantizers take a 2-D operand");
#ifdef MANTISSA_CUDA_KERNELS
    // Activations and gradients (1x128) in one launch, read in the dtype they arrive in (FP32,
    // BF16 or FP16), and weights' 128x128 tiles (once a step) in another, where the ops take
    // about nine full-size passes.
    if (x.is_cuda() && kernel == BlockKernel::Auto && format_info(format).is_fp8)
        if (auto own = fp8_block_kernel_cast(x, format, power_of_two, tile_2d, /*codes=*/false))
            return {std::move(own->values), std::move(own->scale_inv), std::move(own->amax), {}};
#endif
    const auto x32 = x.to(torch::kFloat32);
    return fused(x32, kernel) ? cpu::fp8_block(x32, format, power_of_two, tile_2d)
                              : fp8_block_tensor_ops(x32, format, power_of_two, tile_2d);
}

BlockQuantized quantize_fp8_block_columns(const torch::Tensor& x, NumberFormat format, bool power_of_two)
{
    TORCH_CHECK(x.dim() == 2 && x.device().is_cpu(), "quantize_fp8_block_columns takes a 2-D CPU operand");
    return cpu::fp8_block_columns(x.to(torch::kFloat32), format, power_of_two);
}

Fp8BlockCodes cast_fp8_block_codes(const torch::Tensor& x, NumberFormat format, bool power_of_two, bool tile_2d)
{
    TORCH_CHECK(x.dim() == 2 && format_info(format).is_fp8, "cast_fp8_block_codes: a 2-D operand and an FP8 format");
#ifdef MANTISSA_CUDA_KERNELS
    if (x.is_cuda())
        if (auto own = fp8_block_kernel_cast(x, format, power_of_two, tile_2d, /*codes=*/true))
            return {std::move(own->codes), std::move(own->scale_inv), std::move(own->amax)};
#endif
    return fp8_block_codes_tensor_ops(x, format, power_of_two, tile_2d);
}

Fp8BlockCodesBoth cast_fp8_block_codes_both(const torch::Tensor& x, NumberFormat format, bool power_of_two)
{
    TORCH_CHECK(x.dim() == 2 && format_info(format).is_fp8, "cast_fp8_block_codes_both: a 2-D operand and an FP8 format");
#ifdef MANTISSA_CUDA_KERNELS
    const bool whole_tiles = x.size(0) % 128 == 0 && x.size(1) % 128 == 0;
    const ProbedKernel kernel = x.is_cuda() && whole_tiles && kernel_reads_as_is(x) ? fp8_block_rows_cols_kernel(x.device())
                                                                                  : ProbedKernel::Unavailable;
    if (kernel != ProbedKernel::Unavailable) {
        auto own = cuda_kernels::fp8_block_rows_cols(x.contiguous(), format == NumberFormat::E4M3, power_of_two,
                                                     kernel == ProbedKernel::Paired);
        return {{std::move(own.rows.codes), std::move(own.rows.scale_inv), std::move(own.rows.amax)},
                {std::move(own.cols.codes), std::move(own.cols.scale_inv), std::move(own.cols.amax)}};
    }
#endif
    return {cast_fp8_block_codes(x, format, power_of_two, false),
            cast_fp8_block_codes(x.t().contiguous(), format, power_of_two, false)};
}

std::string fp8_block_rows_cols_kernel_report()
{
#ifdef MANTISSA_CUDA_KERNELS
    if (!torch::cuda::is_available()) return "no GPU";
    return probed_kernel_report(fp8_block_rows_cols_kernel(torch::Device(torch::kCUDA)));
#else
    return "not built";
#endif
}

BlockQuantized quantize_nvfp4_2d(const torch::Tensor& x, bool tile_2d, const SrSeed& sr_seed, BlockKernel kernel)
{
    TORCH_CHECK(x.dim() == 2, "block quantizers take a 2-D operand");
    const auto x32 = x.to(torch::kFloat32);
    if (!fused(x32, kernel)) {
        if (!sr_seed.content) return nvfp4_tensor_ops(x32, tile_2d, sr_seed);
        return nvfp4_tensor_ops(x32, tile_2d, x32.is_cpu() ? SrSeed(content_seed(x32)) : SrSeed(content_seed_tensor(x32)));
    }
    std::optional<uint64_t> host = sr_seed.host; // the fused pass runs on the CPU: reading the seed is free
    if (!host && sr_seed.on_device.defined()) host = static_cast<uint64_t>(sr_seed.on_device.item<int64_t>());
    return cpu::nvfp4(x32, tile_2d, host, sr_seed.content);
}

BlockQuantized quantize_mxfp4_2d(const torch::Tensor& x, bool round_scale_up, BlockKernel kernel)
{
    TORCH_CHECK(x.dim() == 2, "block quantizers take a 2-D operand");
    const auto x32 = x.to(torch::kFloat32);
    return fused(x32, kernel) ? cpu::mxfp4(x32, round_scale_up) : mxfp4_tensor_ops(x32, round_scale_up);
}

torch::Tensor random_hadamard_transform(const torch::Tensor& x)
{
    TORCH_CHECK(x.size(-1) % 16 == 0, "the Hadamard transform needs a multiple of 16");
    // The matrix is built on x's device from integers: a table made on the host and copied
    // there would be a blocking copy, a host sync in every nvfp4 wgrad cast on a GPU.
    // Sylvester's H16 is (-1)^popcount(i & j); row i is scaled by TE's wgrad sign s_i
    // ({1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1}: kNegativeRows has bit i set
    // where s_i = -1) and by 1/4, so every entry is exactly +-1/4.
    constexpr int64_t kNegativeRows = 0b1101011111101000;
    const auto i = torch::arange(16, x.options().dtype(torch::kInt32));
    const auto both = torch::bitwise_and(i.unsqueeze(1), i.unsqueeze(0)); // (16, 16): i & j
    auto odd = torch::bitwise_xor(both, torch::bitwise_right_shift(both, 1));
    odd = torch::bitwise_xor(odd, torch::bitwise_right_shift(odd, 2)); // bit 0: parity of the 4 bits
    const auto negative_row = torch::bitwise_right_shift(torch::full({16, 1}, kNegativeRows, i.options()), i.unsqueeze(1));
    const auto minus = torch::bitwise_and(torch::bitwise_xor(odd, negative_row), 1); // (16, 16) 0 or 1
    const auto transform = (1 - 2 * minus).to(torch::kFloat32) * 0.25f;
    const auto shape = x.sizes().vec();
    return torch::matmul(contiguous_on_threads(x).view({-1, 16}), transform).view(shape);
}

torch::Tensor stochastic_uniforms(uint64_t seed, int64_t rows, int64_t cols)
{
    return uniforms(seed_tensor(seed), rows, cols, torch::kCPU);
}

uint64_t content_seed(const torch::Tensor& x_in)
{
    // sum of the FP32 bit patterns (as int32) and of their squares modulo 1000003, mixed.
    if (!x_in.device().is_cpu()) return static_cast<uint64_t>(content_seed_tensor(x_in).item<int64_t>());
    const auto x = contiguous_on_threads(x_in.to(torch::kFloat32));
    // Wrapping additions give the same bits in any order, so the ranges may go to any thread.
    struct Sums {
        uint64_t sum = 0, squares = 0;
    };
    const float* p = x.data_ptr<float>();
    const Sums total = at::parallel_reduce(
        0, x.numel(), int64_t{1} << 16, Sums{},
        [&](int64_t begin, int64_t end, Sums) {
            Sums s;
            content_sums(p + begin, end - begin, s.sum, s.squares);
            return s;
        },
        [](Sums a, Sums b) { return Sums{a.sum + b.sum, a.squares + b.squares}; });
    return mix_content(total.sum, total.squares, x.numel());
}

torch::Tensor content_seed_tensor(const torch::Tensor& x_in)
{
    constexpr int64_t kPrime = 1000003;
    const auto x = x_in.to(torch::kFloat32).contiguous();
    // int64 sums and products wrap as uint64's do: the same 64 bits as content_seed's.
    const auto bits = x.view(torch::kInt32).to(torch::kInt64);
    const auto sum = bits.sum();
    const auto squares = bits.remainder(kPrime).square().sum();
    return torch::bitwise_xor(torch::bitwise_xor(sum * static_cast<int64_t>(0x9E3779B97F4A7C15ULL), squares), x.numel());
}

torch::Tensor nvfp4_value_multiplier(const torch::Tensor& block_scale, const torch::Tensor& tensor_amax)
{
    return nvfp4_value_scale(block_scale, tensor_amax);
}

torch::Tensor nvfp4_tensor_decode(const torch::Tensor& tensor_amax) { return tensor_amax * kInv2688; }

BlockCastRecord block_cast_record(const BlockQuantized& q, NumberFormat format, const Fp8Recipe& recipe)
{
    BlockCastRecord r;
    const auto amax = q.block_amax.reshape({-1}).to(torch::kFloat32);
    const auto finite = torch::isfinite(amax);
    const auto finite_amax = torch::where(finite, amax, torch::zeros_like(amax));
    torch::Tensor requested;
    switch (recipe.scaling) {
    case Fp8Scaling::Block128:
        r.element_format = format;
        r.scale_format = NumberFormat::FP32;
        requested = finite_amax / static_cast<float>(format_info(format).max_finite); // amax lands on the format's max
        break;
    case Fp8Scaling::NvFp4: {
        r.element_format = NumberFormat::E2M1;
        r.scale_format = NumberFormat::E4M3;
        requested = nvfp4_unrounded_block_scale(finite_amax, nvfp4_encode_scale(finite_amax)); // the quantizer's own
        break;
    }
    case Fp8Scaling::Block32: { // mxfp8
        r.element_format = format;
        r.scale_format = NumberFormat::E8M0;
        const auto safe = torch::where(finite & (amax > 0), amax, torch::ones_like(amax));
        const auto exponent = mx_shared_exponent(safe, format, recipe.mx_round_scale_up).to(torch::kFloat32);
        requested = torch::where(exponent >= -149, pow2_exact(exponent.clamp_min(-149)), torch::zeros_like(exponent));
        break;
    }
    case Fp8Scaling::MxFp4: {
        r.element_format = NumberFormat::E2M1;
        r.scale_format = NumberFormat::E8M0;
        const auto safe = torch::where(finite & (amax > 0), amax, torch::ones_like(amax));
        const auto exponent = mxfp4_exponent(safe, recipe.mx_round_scale_up); // before E8M0's clamp to [-127, 127]
        // pow2_exact covers FP32's subnormals; an exponent below them asks for 0.
        requested = torch::where(exponent >= -149, pow2_exact(exponent.clamp_min(-149)), torch::zeros_like(exponent));
        break;
    }
    default:
        TORCH_CHECK(false, "block_cast_record: not a block recipe");
    }
    // Each block's largest value as the element cast saw it, scaled as the quantizer scales.
    const auto used = q.block_scales.reshape({-1}).to(torch::kFloat32);
    const auto element_amax = recipe.scaling == Fp8Scaling::NvFp4
                                  ? finite_amax * nvfp4_element_scale(used, 1.0f / nvfp4_encode_scale(finite_amax))
                                  : finite_amax / used;
    // Past max by half a step, or at it where round-to-nearest-even takes that tie upward
    // (E2M1's 7): the statistics' own overflow rule.
    const auto c = cast_comparison(r.element_format, /*scaled_domain=*/true, 1.0);
    const auto beyond = c.overflow_at_tie ? element_amax >= c.overflow_from : element_amax > c.overflow_from;
    // A block whose scale underflowed to 0 was flushed to zero: the row's underflow, not this.
    r.clipped_blocks = (beyond & finite & (amax > 0) & (used > 0)).sum().to(torch::kFloat64);
    const auto zero_block = amax == 0;
    r.requested_scales = requested.masked_fill(~finite, kNaN).masked_fill(zero_block, 0.0f);
    r.used_scales = q.block_scales.reshape({-1}).to(torch::kFloat32).masked_fill(zero_block, 0.0f);
    return r;
}

torch::Tensor quantize_block_recipe(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe,
                                    int64_t k_dim_in, TensorRole role, BlockCastRecord* record, Nvfp4Scales* nvfp4_scales)
{
    const int64_t k_dim = k_dim_in < 0 ? k_dim_in + x.dim() : k_dim_in;
    const bool columnwise = k_dim != x.dim() - 1;
    // Neither a widened copy nor a wider transpose of what fp8-block's kernel reads as it is.
    const auto moved = (fp8_block_reads_as_is(x, recipe) ? x : x.to(torch::kFloat32)).movedim(k_dim, -1);
    const int64_t k = moved.size(-1);
    auto x2 = moved.reshape({-1, k}); // (rows, K)
    const bool weight_2d = role == TensorRole::Weight && x.dim() == 2;
    // A CPU matrix cast along its columns in place: the values come in x's own layout.
    const bool in_place_columns =
        recipe.scaling == Fp8Scaling::Block128 && columnwise && x.dim() == 2 && x.is_cpu() && !weight_2d;
    BlockQuantized q;
    switch (recipe.scaling) {
    case Fp8Scaling::Block128:
        q = in_place_columns ? quantize_fp8_block_columns(x, format, recipe.block_power_of_two)
                             : quantize_fp8_block_2d(x2, format, recipe.block_power_of_two, weight_2d);
        break;
    case Fp8Scaling::NvFp4: {
        const bool rht = recipe.nvfp4_rht && role != TensorRole::Weight && columnwise && k % 16 == 0;
        const auto plain = x2;
        // The transform's output in BF16, as TE's: its kernel takes BF16 and writes BF16 (the
        // unfused path rounds there for the same bits), so the amax and every value after it
        // are those of the rounded operand. NaN bits differ between the CPU's fused pass and
        // LibTorch's casts (and so the content seed of an operand holding one).
        if (rht && x2.is_cpu()) x2 = hadamard16_bf16_cpu(x2); // the same bits in one pass
        else if (rht) x2 = round_to_format(random_hadamard_transform(x2), NumberFormat::BF16, Overflow::Propagate);
        const bool stochastic = role == TensorRole::Gradient && recipe.nvfp4_stochastic_rounding;
        // Each cast's own content_seed, which the quantizer takes as it reads the operand (on a
        // GPU it stays there: reading it back would stall the stream every cast).
        const SrSeed seed = stochastic ? SrSeed::of_content() : SrSeed();
        const bool tiles = weight_2d && recipe.nvfp4_weight_2d;
        q = quantize_nvfp4_2d(x2, tiles, seed);
        if (nvfp4_scales) {
            const int64_t rows = x2.size(0);
            auto s = q.block_scales.to(torch::kFloat32).reshape({tiles ? -1 : rows, (k + 15) / 16});
            if (tiles) // a 16x16 tile's scale is that of each of its 16 rows' blocks
                s = s.unsqueeze(1).expand({s.size(0), 16, s.size(1)}).reshape({s.size(0) * 16, s.size(1)}).narrow(0, 0, rows);
            *nvfp4_scales = {s, q.tensor_amax};
        }
        if (record && rht) { // what the transform bought: the same operand cast without it
            record->transformed = x2;
            record->transformed_cast = q.values;
            record->plain = plain;
            record->plain_cast = quantize_nvfp4_2d(plain, false, seed).values;
        }
        break;
    }
    case Fp8Scaling::MxFp4:
        q = quantize_mxfp4_2d(x2, recipe.mx_round_scale_up);
        break;
    default:
        TORCH_CHECK(false, "quantize_block_recipe: not a block recipe");
    }
    if (record) {
        auto rht_rows = std::move(*record);
        *record = block_cast_record(q, format, recipe);
        record->transformed = std::move(rht_rows.transformed);
        record->transformed_cast = std::move(rht_rows.transformed_cast);
        record->plain = std::move(rht_rows.plain);
        record->plain_cast = std::move(rht_rows.plain_cast);
    }
    if (in_place_columns) return q.values;
    const auto values = q.values.reshape(moved.sizes()).movedim(-1, k_dim);
    // An operand cast along a leading dimension (the wgrad GEMM's, blocks along M) stays a view
    // of the rows the cast wrote: that GEMM multiplies this view's transpose, exactly those rows,
    // and takes either layout without a copy (cuBLAS's and MKL's transpose flags). Copying them
    // back was a full transposing copy of every wgrad operand for nothing: 25-40 ms of a wide
    // step on an H200 (read-through, 2026-12-04), and on this CPU about 10% of an nvfp4 step
    // with two threads (docs/BENCHMARKS.md, 2026-12-05). On the CPU every stored
    // value of 20-step runs of each block recipe, telemetry included, was the same bits either way.
    // Batched operands (attention's GEMMs, k_dim -2) still get the copy their GEMMs always had.
    return columnwise && values.dim() == 2 ? values : contiguous_on_threads(values);
}

BlockFormatStats block_format_stats(const torch::Tensor& x_in, const BlockQuantized& q, NumberFormat element)
{
    BlockFormatStats s;
    const auto x = x_in.to(torch::kFloat32).reshape(q.values.sizes());
    const auto nonzero_block = torch::isfinite(q.block_amax) & (q.block_amax > 0);
    const bool nvfp4 = q.tensor_amax.defined();
    // The factor each block's elements were multiplied by before the cast: nvfp4's from its
    // E4M3 block scale and the tensor's encode scale (not the value scale, which stops undoing
    // it once the encode scale is capped at FLT_MAX); else the decode scale's inverse, exact for
    // mxfp4's powers of two and for fp8-block's within an ulp, which the margin below absorbs.
    const auto element_scale = nvfp4 ? nvfp4_element_scale(q.block_scales, 1.0f / nvfp4_encode_scale(q.tensor_amax))
                                     : 1.0f / q.block_scales;
    // Clipped: the scaled amax lies above the element maximum, by more than FP32's rounding of
    // the scale itself could put it there. fp8-block's scale fl(448 / amax) maps the amax onto
    // 448 give or take an ulp: none clip. nvfp4's E4M3 block scale, rounded down, maps it up
    // to 6.4; mxfp4's floor rule up to 8.
    const float past_max = static_cast<float>(format_info(element).max_finite * (1.0 + std::ldexp(1.0, -20)));
    // A block scale that underflowed: nvfp4's E4M3 scale rounded to 0, mxfp4's E8M0 at its
    // floor 2^-127. fp8-block's FP32 scales do not underflow (a tiny amax gets a huge scale).
    const auto underflow = element == NumberFormat::E2M1
                               ? nonzero_block & (q.block_scales <= (nvfp4 ? 0.0f : std::ldexp(1.0f, -127)))
                               : torch::zeros_like(nonzero_block);
    const auto clipped = nonzero_block & ~underflow & (q.block_amax * element_scale > past_max);
    const double blocks = static_cast<double>(q.block_scales.numel());
    if (blocks > 0) {
        s.clipped_block_fraction = clipped.sum().item<double>() / blocks;
        s.scale_underflow_fraction = underflow.sum().item<double>() / blocks;
    }
    const auto finite = torch::isfinite(x) & torch::isfinite(q.values);
    const auto nonzero = (x != 0) & finite;
    const double n_nonzero = nonzero.sum().item<double>();
    if (n_nonzero > 0) s.zero_fraction = (nonzero & (q.values == 0)).sum().item<double>() / n_nonzero;
    const auto xf = torch::where(finite, x, torch::zeros_like(x)).to(torch::kFloat64);
    const auto qf = torch::where(finite, q.values, torch::zeros_like(x)).to(torch::kFloat64);
    const double signal = xf.square().sum().item<double>();
    const double noise = (xf - qf).square().sum().item<double>();
    s.snr_db = noise > 0 ? 10.0 * std::log10(signal / noise) : std::numeric_limits<double>::infinity();
    return s;
}

} // namespace mantissa
