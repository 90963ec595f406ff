// SPDX-License-Identifier: GPL-3.0-or-later
// mantissa-train compare: config differences, summaries side by side, where train/loss diverges.
#include "train_cli.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli_table.h"
#include "config_diff.h"
#include "project_config.h"
#include "run_compare.h"
#include "run_store.h"

namespace mantissa {

namespace {

// Looks every named run up; complains about the first unknown one.
std::optional<std::vector<RunInfo>> find_all_or_complain(RunStore& store, const std::vector<std::string>& runs,
                                                         std::FILE* err)
{
    std::vector<RunInfo> out;
    for (const auto& r : runs) {
        auto info = find_or_complain(store, r, RunUse::Read, err);
        if (!info) return std::nullopt;
        out.push_back(*info);
    }
    return out;
}

} // namespace

int cmd_compare(RunStore& store, const std::vector<std::string>& run_args, double tolerance, bool relative,
                const CliStreams& io)
{
    if (run_args.size() < 2) {
        std::fprintf(io.err, "error: compare needs at least two runs\n");
        return 2;
    }
    const auto infos = find_all_or_complain(store, run_args, io.err);
    if (!infos) return 2;
    RunFilter filter;
    for (const auto& info : *infos) filter.ids.push_back(info.id);
    std::map<int64_t, RunSummaryRow> by_id;
    for (auto& r : store.list_run_summaries(filter)) by_id[r.id] = std::move(r);
    std::vector<RunSummaryRow> runs;
    std::vector<std::string> configs, heads;
    for (const auto& info : *infos) {
        runs.push_back(by_id.at(info.id));
        configs.push_back(info.config_json);
        heads.push_back("run " + std::to_string(info.id));
    }

    std::vector<ConfigDifferenceN> diff;
    try {
        diff = diff_configs(configs);
    } catch (const ConfigError& e) {
        std::fprintf(io.err, "error: %s\n", e.what());
        return 2;
    }
    if (diff.empty()) {
        std::fprintf(io.out, "config differences: none\n");
    } else {
        std::fprintf(io.out, "config differences (%zu %s):\n", diff.size(), diff.size() == 1 ? "key" : "keys");
        std::vector<std::vector<std::string>> rows = {{"key"}};
        rows[0].insert(rows[0].end(), heads.begin(), heads.end());
        for (const auto& d : diff) {
            rows.push_back({d.key});
            for (const auto& v : d.values) rows.back().push_back(v ? *v : "(absent)");
        }
        print_table(rows, {}, "  ", io.out);
    }

    std::fprintf(io.out, "\nsummary:\n");
    std::vector<std::vector<std::string>> rows = {{""}};
    rows[0].insert(rows[0].end(), heads.begin(), heads.end());
    const auto line = [&](const char* label, auto field) {
        rows.push_back({label});
        for (const auto& r : runs) rows.back().push_back(field(r));
    };
    line("name", [](const RunSummaryRow& r) { return r.name; });
    line("status", [](const RunSummaryRow& r) { return std::string(run_status_name(r.status)); });
    line("recipe", [](const RunSummaryRow& r) { return r.recipe; });
    line("steps", [](const RunSummaryRow& r) { return std::to_string(r.steps_done); });
    line("final train", [](const RunSummaryRow& r) { return fmt_recorded_loss(r.final_train_loss, r.steps_done > 0); });
    line("final val", [](const RunSummaryRow& r) { return fmt_recorded_loss(r.final_val_loss, r.final_val_step >= 0); });
    line("best val", [](const RunSummaryRow& r) { return fmt_recorded_loss(r.best_val_loss, r.best_val_step >= 0); });
    line("tokens/s", [](const RunSummaryRow& r) { return fmt_rate(r.median_tokens_per_s); });
    line("skipped", [](const RunSummaryRow& r) { return std::to_string(r.skipped_steps); });
    line("peak memory", [](const RunSummaryRow& r) { return fmt_bytes(r.peak_memory_bytes()); });
    line("tags", [](const RunSummaryRow& r) { return join_tags(r.tags); });
    print_table(rows, {}, "  ", io.out);

    std::fprintf(io.out, "\ntrain/loss divergence vs run %lld (tolerance %g, %s):\n",
                 static_cast<long long>(runs[0].id), tolerance, relative ? "relative" : "absolute");
    const Series first = store.series(runs[0].id, "train/loss");
    for (size_t i = 1; i < runs.size(); ++i) {
        const Series other = store.series(runs[i].id, "train/loss");
        const auto aligned = align_on_steps(first, other);
        const auto common = aligned.size();
        const auto step = first_divergence_step(first, other, tolerance, relative);
        // Matched by step: where the runs' steps hold different numbers of tokens, say so, the
        // same step being another point of training for each.
        std::string by_step;
        try {
            if (tokens_per_step(runs[0].config_json) != tokens_per_step(runs[i].config_json))
                by_step = " (tokens per step differ: compared step by step, not at equal tokens)";
        } catch (const std::exception&) {
        }
        if (step) {
            const auto at =
                std::find_if(aligned.begin(), aligned.end(), [&](const AlignedPoint& p) { return p.step == *step; });
            std::fprintf(io.out, "  run %lld: diverges at step %lld (%s vs %s)%s\n", static_cast<long long>(runs[i].id),
                         static_cast<long long>(*step), fmt_recorded_loss(at->a, true).c_str(),
                         fmt_recorded_loss(at->b, true).c_str(), by_step.c_str());
        } else if (common == 0)
            std::fprintf(io.out, "  run %lld: no train/loss step in common to compare\n",
                         static_cast<long long>(runs[i].id));
        else
            std::fprintf(io.out, "  run %lld: within tolerance over %zu common steps%s\n",
                         static_cast<long long>(runs[i].id), common, by_step.c_str());
    }
    return 0;
}

} // namespace mantissa
