// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Sweeps: one project run several times, one setting varied (`--vary key=v1,v2,...`), and
// the summary that sets the runs side by side, relative to the FP32 run. No LibTorch.

#include <optional>
#include <string>
#include <vector>

#include "project_config.h"
#include "run_summary.h"

namespace mantissa {

struct SweepSpec {
    std::string key;                 // dotted project key, e.g. "precision.preset"
    std::vector<std::string> values; // raw value texts, as `--set key=value` takes them
};

// "key=v1,v2,...". Commas inside brackets, braces or double quotes do not split, so JSON
// values work: `precision.layers=[{"match":"lm_head","format":"bf16"}],[]`. Throws
// ConfigError (naming the text) for a missing key or '=', an empty value or a repeated one.
SweepSpec parse_vary(const std::string& text);

struct SweepRunPlan {
    std::string value;              // the varied value, as given
    std::string name;               // "<project name> [key=value]"
    std::vector<Override> overrides; // the common --set overrides, then key=value
    ProjectConfig config;           // resolved and validated
};

// Resolves every run of the sweep before anything runs: each value is applied through
// load_project_file(project_path, overrides + {key=value}). Throws ConfigError naming the
// key and value when the project rejects one.
std::vector<SweepRunPlan> plan_sweep(const std::string& project_path, const SweepSpec& spec,
                                     const std::vector<Override>& common_overrides = {});
// The same for a project held in memory (the GUI's document, possibly unsaved): each value is
// applied to to_json_text(base), relative data paths (in the project and in the values)
// resolving against base.base_dir. Both throw ConfigError when two values give the same
// settings (1e-3 and 0.001).
std::vector<SweepRunPlan> plan_sweep(const ProjectConfig& base, const SweepSpec& spec,
                                     const std::vector<Override>& common_overrides = {});

struct SweepRow {
    std::string value;
    RunSummaryRow run;
    // Relative to the reference run; NaN where either side lacks the figure.
    double val_loss_delta = RunSummaryRow::kNone;  // final val - reference final val
    // The two final evaluations are of different steps (a run stopped early): the delta then
    // mixes precision with training length, and the tables mark it.
    bool val_at_another_step = false;
    double tokens_per_s_ratio = RunSummaryRow::kNone; // median tokens/s / reference's
    double peak_memory_ratio = RunSummaryRow::kNone;  // peak memory / reference's
};

struct SweepSummary {
    // Index into rows: the first FP32 run with a final val loss, else the first run with one,
    // else the first FP32 run, else the first.
    size_t reference = 0;
    // The reference is no FP32 run and not simply the first: runs before it, or the FP32 ones,
    // had no val loss (diverged, or not evaluated). The tables say "the first with a val loss".
    bool reference_passed_over = false;
    std::vector<SweepRow> rows;
};

// `runs`: (value, summary) in sweep order. Empty input gives an empty summary.
SweepSummary summarize_sweep(const std::vector<std::pair<std::string, RunSummaryRow>>& runs);

} // namespace mantissa
