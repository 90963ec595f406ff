// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The number formats a GEMM operand can be rounded to, with their limits (see
// docs/NUMERICS.md). No LibTorch here: the GUI and the config parser use these too.

#include <optional>
#include <string>
#include <vector>

namespace mantissa {

// The first six are GEMM operand formats (project files, the precision table). E2M1 and E8M0
// only label telemetry: the elements of nvfp4/mxfp4 operands and MX block scales, so that a
// histogram is drawn against their own range. Appended last: checkpoints store the index.
enum class NumberFormat { FP32, TF32, BF16, FP16, E4M3, E5M2, E2M1, E8M0 };

struct FormatInfo {
    NumberFormat format;
    const char* name;      // as written in project files: "fp32", "tf32", "bf16", "fp16", "e4m3", "e5m2"
    int exponent_bits;
    int mantissa_bits;
    int exponent_bias;
    double max_finite;
    double min_normal;
    double min_subnormal;  // 0 when the format keeps no subnormals of its own (TF32 lives in FP32)
    bool has_infinity;
    bool is_fp8;
    bool gemm_operand;     // may be chosen for a GEMM; false for the telemetry-only formats
};

const FormatInfo& format_info(NumberFormat format);
// Any format's name, telemetry-only ones included (stored statistics name them).
std::optional<NumberFormat> parse_number_format(const std::string& name);
const char* format_name(NumberFormat format);
// The GEMM operand formats, in order: what a project or the precision table may choose.
std::vector<std::string> number_format_names();
std::string number_format_names_joined(); // "fp32, tf32, ...": what a refusal lists

// GEMM outputs are rounded to the output dtype: the format itself for 16-bit formats, BF16
// for FP8 GEMMs (TransformerEngine's default output type), FP32 otherwise.
NumberFormat gemm_output_format(NumberFormat operand_format);

inline bool is_16bit(NumberFormat f) { return f == NumberFormat::BF16 || f == NumberFormat::FP16; }

} // namespace mantissa
