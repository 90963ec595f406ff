// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Settings that differ on paper but not in the arithmetic: a recipe setting that no layer
// reads (precision.fp8 when no GEMM is FP8, nvfp4's switches under delayed scaling), or two
// spellings of the same layer formats (fp8-hybrid and fp8-e4m3 under nvfp4). A sweep over
// such values would train one run again and again, and a `--set` of one changes nothing;
// both are told why. No LibTorch.

#include <string>
#include <vector>

#include "project_config.h"

namespace mantissa {

// The settings as the run reads them: recipe_as_read's precision, with each layer's formats
// as it computes them (formats_as_computed) and its recipe in place of the preset, the
// precision.layers entries and keep_last_bf16 that spell them. Two projects equal here train
// the same arithmetic.
std::string settings_as_read(const ProjectConfig& config);

// Why two settings of `key` train the same run, for a message: "every layer computes in the
// same formats and with the same recipe either way" (a key that spells the layers' formats),
// "no GEMM computes in FP8 under precision.preset=fp32, ..." or "the FP8 layers scale with
// delayed, which does not read precision.nvfp4.rht".
std::string why_the_same_run(const ProjectConfig& config, const std::string& key);

// The recipe settings (precision.fp8.*, precision.nvfp4.*) that no layer of the project reads
// as it starts, each with why_the_same_run's reason: each is changed on its own, and where
// settings_as_read stays the same the arithmetic does not follow it. In the keys' order.
struct UnreadSetting {
    std::string key, why;
    bool operator==(const UnreadSetting&) const = default;
};
std::vector<UnreadSetting> recipe_settings_read_by_no_layer(const ProjectConfig& config);

// The same for the project's own values: the recipe settings that no layer reads and that the
// project sets to other than their defaults, each for a note ("precision.nvfp4.rht=false, as
// the project sets it, changes nothing this run computes as it starts: ..."). Keys that one of
// `overrides` sets are left to overrides_read_by_no_layer.
std::vector<std::string> project_settings_read_by_no_layer(const ProjectConfig& config,
                                                           const std::vector<Override>& overrides);

// The parts of the project's recipe that its layers cannot apply as they start, each said for
// a note: "nvfp4's random Hadamard transform is not applied: a micro-batch of 300 tokens
// (...) is no multiple of 16, the transform's length".
std::vector<std::string> recipe_parts_left_out(const ProjectConfig& config);

// The `--set` overrides that change nothing the run computes as it starts, each with why
// ("--set precision.fp8.scaling=nvfp4 changes nothing this run computes as it starts: ..."). A live
// precision or recipe change may still make a layer read one. `load` reads the project under
// a list of overrides; an override whose removal the project refuses is not named.
template <typename Load>
std::vector<std::string> overrides_read_by_no_layer(const std::vector<Override>& overrides, Load load)
{
    std::vector<std::string> notes;
    if (overrides.empty()) return notes;
    const ProjectConfig with_all = load(overrides);
    const std::string read = settings_as_read(with_all), written = to_json_text(with_all);
    for (size_t i = 0; i < overrides.size(); ++i) {
        std::vector<Override> without = overrides;
        without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
        try {
            const ProjectConfig other = load(without);
            if (to_json_text(other) != written && settings_as_read(other) == read)
                notes.push_back("--set " + overrides[i].first + "=" + overrides[i].second +
                                " changes nothing this run computes as it starts: " +
                                why_the_same_run(with_all, overrides[i].first));
        } catch (const ConfigError&) {
        }
    }
    return notes;
}

} // namespace mantissa
