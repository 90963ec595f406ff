// SPDX-License-Identifier: GPL-3.0-or-later
#include "sweep.h"
#include "folder_name.h"
#include "unread_settings.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

namespace mantissa {
namespace {

std::string trim(const std::string& s)
{
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string::npos) return {};
    return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// Splits on commas outside [], {} and "..." (with \" escapes inside strings).
std::vector<std::string> split_values(const std::string& text, const std::string& whole)
{
    std::vector<std::string> out;
    std::string current;
    int depth = 0;
    bool in_string = false, escaped = false;
    for (char c : text) {
        if (in_string) {
            current += c;
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') in_string = true;
        else if (c == '[' || c == '{') ++depth;
        else if (c == ']' || c == '}') --depth;
        if (c == ',' && depth == 0) {
            out.push_back(trim(current));
            current.clear();
        } else {
            current += c;
        }
        if (depth < 0) throw ConfigError("--vary '" + whole + "': unbalanced brackets");
    }
    if (in_string || depth != 0) throw ConfigError("--vary '" + whole + "': unbalanced quotes or brackets");
    out.push_back(trim(current));
    return out;
}

double ratio(double value, double reference)
{
    if (!std::isfinite(value) || !std::isfinite(reference) || reference == 0.0) return RunSummaryRow::kNone;
    return value / reference;
}

} // namespace

SweepSpec parse_vary(const std::string& text)
{
    const auto eq = text.find('=');
    if (eq == std::string::npos || trim(text.substr(0, eq)).empty())
        throw ConfigError("--vary '" + text + "': expected dotted.key=value1,value2,...");
    SweepSpec spec;
    spec.key = trim(text.substr(0, eq));
    spec.values = split_values(text.substr(eq + 1), text);
    for (size_t i = 0; i < spec.values.size(); ++i) {
        if (spec.values[i].empty())
            throw ConfigError("--vary " + spec.key + ": value " + std::to_string(i + 1) + " is empty");
        for (size_t k = 0; k < i; ++k)
            if (spec.values[k] == spec.values[i])
                throw ConfigError("--vary " + spec.key + ": value '" + spec.values[i] + "' is listed twice");
    }
    return spec;
}

namespace {

// "3-precision.preset=bf16": the point's place and value.
std::string point_folder_name(size_t index, const std::string& key, const std::string& value)
{
    return folder_name(std::to_string(index + 1) + "-" + key + "=" + value);
}

// An explicit training.checkpoint_dir holds one run's checkpoints: the points of a sweep that
// share one each get a folder of their own in it. Otherwise, from the second point on, every
// checkpoint (the final one too) is refused as another run's, and no point but the first
// could be resumed or exported. After the duplicate check: the folders differ, the settings not.
void give_each_its_own_checkpoint_folder(std::vector<SweepRunPlan>& plans, const std::string& key)
{
    std::map<std::string, int> points_in; // folder -> points that name it
    for (const auto& p : plans) ++points_in[p.config.training.checkpoint_dir];
    for (size_t i = 0; i < plans.size(); ++i) {
        std::string& dir = plans[i].config.training.checkpoint_dir;
        if (dir.empty() || points_in[dir] < 2) continue; // beside the store (per run id), or its own
        dir = (std::filesystem::path(dir) / point_folder_name(i, key, plans[i].value)).string();
    }
}

template <typename Load>
std::vector<SweepRunPlan> plan_each(const SweepSpec& spec, const std::vector<Override>& common_overrides, Load load)
{
    if (spec.values.empty()) throw ConfigError("--vary " + spec.key + ": no values");
    // The name labels a run and changes nothing it computes: a sweep of names trained the same
    // run again and again.
    if (spec.key == "name")
        throw ConfigError("--vary name: the name only labels a run, so every value would train the same run; vary a "
                          "setting (the runs are named after it), and name the sweep with --name");
    std::vector<SweepRunPlan> plans;
    for (const auto& value : spec.values) {
        SweepRunPlan plan;
        plan.value = value;
        plan.overrides = common_overrides;
        plan.overrides.emplace_back(spec.key, value);
        try {
            plan.config = load(plan.overrides);
        } catch (const ConfigError& e) {
            std::string why = e.what();
            // Not the value's fault where the project and the --set options fail the same without
            // it (a missing project file, a --set n_head that n_embd does not divide): named as
            // themselves, not as "--vary KEY=VALUE is rejected".
            try {
                (void)load(common_overrides);
            } catch (const ConfigError& base) {
                if (why == base.what()) throw;
            }
            // The varied value itself at fault: named once, as --vary's.
            if (const std::string as_set = "--set " + spec.key + "=" + value + ": "; why.starts_with(as_set))
                why.erase(0, as_set.size());
            throw ConfigError("--vary " + spec.key + "=" + value + " is rejected: " + why);
        }
        plan.name = plan.config.name + " [" + spec.key + "=" + value + "]";
        // 1e-3 and 0.001, or a preset and the overrides it stands for, would train twice.
        const std::string settings = settings_as_read(plan.config);
        for (const SweepRunPlan& earlier : plans) {
            if (settings_as_read(earlier.config) != settings) continue;
            const std::string both = "--vary " + spec.key + ": values '" + earlier.value + "' and '" + value + "' ";
            if (to_json_text(earlier.config) == to_json_text(plan.config))
                throw ConfigError(both + "give the same settings; the sweep would train the same run twice");
            throw ConfigError(both + "would train the same run twice: " +
                              why_the_same_run(plan.config, spec.key));
        }
        plans.push_back(std::move(plan));
    }
    give_each_its_own_checkpoint_folder(plans, spec.key);
    return plans;
}

} // namespace

std::vector<SweepRunPlan> plan_sweep(const std::string& project_path, const SweepSpec& spec,
                                     const std::vector<Override>& common_overrides)
{
    return plan_each(spec, common_overrides,
                     [&](const std::vector<Override>& o) { return load_project_file(project_path, o); });
}

std::vector<SweepRunPlan> plan_sweep(const ProjectConfig& base, const SweepSpec& spec,
                                     const std::vector<Override>& common_overrides)
{
    const std::string text = to_json_text(base);
    // A path typed in the window is relative to the project's folder, not to the folder the
    // workbench was started from (which load_project_json would take, as the CLI's --set does).
    const auto in_project_folder = [&](std::vector<Override> overrides) {
        for (auto& [key, raw] : overrides) {
            if (!is_path_key(key)) continue;
            std::string path = raw;
            if (const auto parsed = nlohmann::json::parse(raw, nullptr, false); parsed.is_string())
                path = parsed.get<std::string>();
            else if (!parsed.is_discarded())
                continue; // not a path: the project's check names it
            if (!path.empty() && !base.base_dir.empty() && std::filesystem::path(path).is_relative())
                raw = (std::filesystem::path(base.base_dir) / path).lexically_normal().string();
        }
        return overrides;
    };
    return plan_each(spec, common_overrides, [&](const std::vector<Override>& o) {
        return load_project_json(text, base.base_dir, in_project_folder(o));
    });
}

SweepSummary summarize_sweep(const std::vector<std::pair<std::string, RunSummaryRow>>& runs)
{
    SweepSummary summary;
    if (runs.empty()) return summary;
    // A diverged reference (its val loss NaN) left every delta NaN: one with a val loss is
    // taken first, the FP32 run before any other.
    const auto first = [&](auto wanted) -> std::optional<size_t> {
        for (size_t i = 0; i < runs.size(); ++i)
            if (wanted(runs[i].second)) return i;
        return std::nullopt;
    };
    const auto has_val = [](const RunSummaryRow& r) { return std::isfinite(r.final_val_loss); };
    // Among FP32 runs, the one that trained furthest: a run stopped at step 19 of 60 became the
    // reference of runs that trained 40 steps, and every delta was against its step-10
    // evaluation (read-only audit 'gui-look').
    const auto furthest_fp32 = [&]() -> std::optional<size_t> {
        std::optional<size_t> best;
        for (size_t i = 0; i < runs.size(); ++i) {
            const RunSummaryRow& r = runs[i].second;
            if (r.is_fp32() && has_val(r) && (!best || r.steps_done > runs[*best].second.steps_done)) best = i;
        }
        return best;
    };
    summary.reference = furthest_fp32()
                            .value_or(first(has_val).value_or(
                                first([](const RunSummaryRow& r) { return r.is_fp32(); }).value_or(0)));
    const RunSummaryRow& chosen = runs[summary.reference].second;
    summary.reference_passed_over =
        !chosen.is_fp32() && has_val(chosen) &&
        (summary.reference != 0 || first([](const RunSummaryRow& r) { return r.is_fp32(); }).has_value());
    const RunSummaryRow& ref = runs[summary.reference].second;
    const auto ref_memory = static_cast<double>(ref.peak_memory_bytes());
    for (const auto& [value, run] : runs) {
        SweepRow row;
        row.value = value;
        row.run = run;
        if (std::isfinite(run.final_val_loss) && std::isfinite(ref.final_val_loss)) {
            row.val_loss_delta = run.final_val_loss - ref.final_val_loss;
            row.val_at_another_step = run.final_val_step != ref.final_val_step;
        }
        row.tokens_per_s_ratio = ratio(run.median_tokens_per_s, ref.median_tokens_per_s);
        if (run.peak_memory_bytes() > 0 && ref_memory > 0)
            row.peak_memory_ratio = ratio(static_cast<double>(run.peak_memory_bytes()), ref_memory);
        summary.rows.push_back(std::move(row));
    }
    return summary;
}

} // namespace mantissa
