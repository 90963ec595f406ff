// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// FP8 for the native executor: the per-tensor recipes of fp8_scaling.h (delayed and current)
// with real FP8 codes and every amax and scale kept as a device tensor, so that a step never
// waits on the host. The rules are the emulator's, op for op (tests/test_native.cpp holds
// them together): the emulator is the reference, this is the fast path.

#include <string>
#include <vector>

#include <torch/torch.h>

#include "fp8_scaling.h"

namespace mantissa {

// One operand cast to FP8: codes = cast(x * scale), x ~ codes * inv_scale.
struct Fp8Tensor {
    torch::Tensor codes;     // float8_e4m3fn / float8_e5m2, the source's shape
    torch::Tensor scale;     // () FP32 on the codes' device; per-row: one per slice, K kept as size 1
    torch::Tensor inv_scale; // 1 / scale, same shape: what _scaled_mm multiplies back
    // Only where asked for (a 2-D per-tensor cast for the wgrad GEMM): codes transposed,
    // contiguous (K, M), the layout the wgrad GEMM takes with M innermost. On CUDA written by
    // the cast itself (TransformerEngine's cast-transpose), elsewhere a copy.
    torch::Tensor codes_t;
    // Only where asked for and made by the cast (CUDA's 64 x 64 cast-transpose): x summed over
    // its rows, (C) FP32, from the cast's own read of x (a bias's gradient). Undefined otherwise.
    torch::Tensor column_sums;
    NumberFormat format = NumberFormat::E4M3;

    bool defined() const { return codes.defined(); }
    torch::Tensor dequantized() const; // FP32 codes * inv_scale: the emulator's values
};

// DelayedScaling's history and scale as device tensors. The host DelayedScaling stays the
// state that checkpoints keep; this mirror is filled from it on first use and written back
// before a checkpoint.
class DeviceDelayedScaling {
public:
    bool defined() const { return scale_.defined(); }
    void upload(const DelayedScaling& host, const torch::Device& device);
    void download(DelayedScaling& host) const;
    void clear() { history_ = scale_ = inv_scale_ = torch::Tensor(); }
    const torch::Tensor& scale() const { return scale_; }
    // scale().reciprocal(), made by the record that made the scale: a cast takes both.
    const torch::Tensor& inv_scale() const { return inv_scale_; }
    // DelayedScaling::rescale on the device, queued (no sync), to the bit: the host's float
    // operations on each entry and the scale.
    void rescale(float ratio);
    // A copy that casts with `scale` (a () FP32 tensor on the device; one this state had) and
    // the history as it is: a recast of what the forward cast, which records nothing.
    DeviceDelayedScaling with_scale(const torch::Tensor& scale) const
    {
        DeviceDelayedScaling copy = *this;
        copy.scale_ = scale;
        copy.inv_scale_ = scale.reciprocal(); // as record() makes it: one IEEE division
        return copy;
    }
    // DelayedScaling::record on the device: roll, store `amax` (a () FP32 tensor) in slot 0,
    // recompute the scale for the next use.
    void record(const torch::Tensor& amax, double fp8_max, bool use_max, int64_t margin);

    // Data parallel (trainer_data_parallel.cpp): DelayedScaling's journal, on the device.
    // From begin_journal() on, record() notes its arguments; the step's amaxes go to the
    // other ranks as one device tensor, and replay() puts the state back where
    // begin_journal() found it and records again with the MAX over the ranks. No host sync.
    void begin_journal();
    size_t journal_size() const { return journal_.size(); }
    // (journal_size()) FP32 on the device, a NaN amax as -1: MAX then keeps the other ranks'
    // finite amaxes, with the fmax semantics of the history's own reduction.
    torch::Tensor journal_amaxes() const;
    // `reduced` laid out as journal_amaxes(); ends the journal.
    void replay(const torch::Tensor& reduced);

private:
    struct Record {
        torch::Tensor amax; // () FP32, on the device
        double fp8_max;
        bool use_max;
        int64_t margin;
    };
    torch::Tensor history_; // (length) FP32, slot 0 newest
    torch::Tensor scale_;   // () FP32
    torch::Tensor inv_scale_; // () FP32
    // A record never writes into history_ or scale_ (it makes new tensors), so holding the
    // handles is the snapshot.
    torch::Tensor journal_history_, journal_scale_, journal_inv_scale_;
    bool journal_on_ = false;
    std::vector<Record> journal_;
};

// Which of Mantissa's own CUDA kernels the native FP8 path uses on this process's GPU, after
// their probes: "fused cast: yes, cast-transpose: yes, delayed record: yes"; "not built" without
// MANTISSA_CUDA_KERNELS, "no GPU" without one (bench/cuda_checks prints it).
std::string native_fp8_kernels_report();

// scale_from_amax on the device, to the bit (fp8_scaling.h states the rule): one FP32
// division float(fp8_max / 2^margin) / amax, FLT_MAX where it overflows, `previous` where amax
// is 0 or not finite.
torch::Tensor device_scale_from_amax(const torch::Tensor& amax, double fp8_max, int64_t margin,
                                     const torch::Tensor& previous);

// The FP8 code of FP32 values already multiplied by their scale, saturating or not as the
// emulator's round_to_format does.
torch::Tensor to_fp8_codes(const torch::Tensor& scaled, NumberFormat format, Overflow overflow);

// Casts `x` (any float dtype) under a per-tensor recipe. `delayed` is the role's state for
// Delayed scaling (null for Current); `record` false for evaluation, which must not move it.
// `with_transpose` (a 2-D x): codes_t as well; `column_sums` with it: column_sums too, where
// the cast's kernel can make them.
Fp8Tensor quantize_fp8_native(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe,
                              DeviceDelayedScaling* delayed, bool record, bool with_transpose = false,
                              bool column_sums = false);

// quantize_fp8_native(at::gelu(u), ..., with_transpose = true): the input of a linear that
// follows an exact GELU, cast with its transpose. On CUDA under delayed scaling, where u takes
// the fused kernel and its probe passed, from one read of u without gelu(u) ever being
// written (TransformerEngine's fused activation cast); elsewhere at::gelu(u), then the cast.
// The same codes, scale and record either way.
Fp8Tensor quantize_gelu_fp8_native(const torch::Tensor& u, NumberFormat format, const Fp8Recipe& recipe,
                                   DeviceDelayedScaling* delayed, bool record);

// The per-row recipe (torchao's rowwise): one scale per slice along `k_dim`, the emulator's
// rowwise_scale. Stateless, so there is nothing to record.
Fp8Tensor quantize_fp8_rowwise_native(const torch::Tensor& x, NumberFormat format, const Fp8Recipe& recipe,
                                      int64_t k_dim);
bool per_row(const Fp8Tensor& t);

// Whether at::_scaled_mm (sm_89+) can multiply these operands as fp8_gemm lays them out
// (K and N padded to multiples of 16: scaled_mm_padded): at least one E4M3 operand, and for
// row-wise scales E4M3 on both sides with a BF16 output. The device is the caller's to check.
bool scaled_mm_takes(const torch::Tensor& a_codes, const torch::Tensor& a_inv, const torch::Tensor& b_codes,
                     const torch::Tensor& b_inv, c10::ScalarType out_dtype);

// Whether this process's GPU runs _scaled_mm with row-wise scales as fp8_gemm calls it (BF16
// output; the forward's fast accumulation with a BF16 bias and without, and the gradients'
// call without either): products with a known answer, tried once; false without CUDA. Where it is false,
// per-row GEMMs take the FP32 route and stderr says why.
bool rowwise_fp8_available();

// a (M, K) x b (K, N) of FP8 codes -> (M, N) in `out_dtype`, plus `bias` (N) in the epilogue.
// On CUDA where scaled_mm_takes them: at::_scaled_mm (`fast_accum` only for the
// forward GEMM, as TransformerEngine does). Otherwise the same products in FP32 from the
// dequantised codes. `native` (optional) says which ran.
// `a_inv`/`b_inv` are the operands' inv_scale: () per tensor, or per row, a_inv (M, 1) and
// b_inv (1, N) -- _scaled_mm's row-wise scaling, which wants E4M3 on both sides and a BF16
// output; other per-row GEMMs (E5M2 gradients) take the FP32 route.
torch::Tensor fp8_gemm(const torch::Tensor& a_codes, const torch::Tensor& a_inv, const torch::Tensor& b_codes,
                       const torch::Tensor& b_inv, const torch::Tensor& bias, c10::ScalarType out_dtype,
                       bool fast_accum, bool* native = nullptr);

// scaled_mm_call with K and N padded to multiples of 16, which _scaled_mm needs (a vocabulary
// of 50257, an odd width); M (the tokens) may be any. Zero codes, unit row-wise scales and a
// zero bias in the padding, cut off the product again. Padded K adds exact zeros to each sum.
torch::Tensor scaled_mm_padded(const torch::Tensor& a_codes, const torch::Tensor& a_inv, const torch::Tensor& b_codes,
                               const torch::Tensor& b_inv, const torch::Tensor& bias, c10::ScalarType out_dtype,
                               bool fast_accum);

// fp8_gemm's _scaled_mm call, on any device that has one (CPU too, which is how the tests
// hold it): `a_codes` made row-major and `b_codes` column-major, `bias` (undefined for none)
// cast to `out_dtype` for the epilogue.
torch::Tensor scaled_mm_call(const torch::Tensor& a_codes, const torch::Tensor& a_inv, const torch::Tensor& b_codes,
                             const torch::Tensor& b_inv, const torch::Tensor& bias, c10::ScalarType out_dtype,
                             bool fast_accum);

// The dtype that carries a format between ops in the native executor: BF16/FP16 for
// themselves, BF16 for FP8 GEMM outputs, FP32 for FP32 and TF32.
c10::ScalarType activation_dtype(NumberFormat format);

} // namespace mantissa
