// SPDX-License-Identifier: GPL-3.0-or-later
// mantissa-train sweep: one project trained once per value of one key, then a summary table.
#include "train_cli.h"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <set>

#include "build_info.h"
#include "cli_table.h"
#include "first_line.h"
#include "project_config.h"
#include "run_session.h"
#include "run_store.h"
#include "sweep.h"
#include "watchers.h"

namespace mantissa {

namespace {

void print_sweep_table(const SweepSpec& spec, const std::vector<std::string>& values,
                       const std::vector<std::optional<RunSummaryRow>>& runs, const std::vector<std::string>& notes)
{
    std::vector<std::pair<std::string, RunSummaryRow>> done;
    for (size_t i = 0; i < values.size(); ++i)
        if (runs[i]) done.emplace_back(values[i], *runs[i]);
    const SweepSummary summary = summarize_sweep(done);
    std::printf("\nsweep of %s: %zu runs", spec.key.c_str(), values.size());
    if (!summary.rows.empty()) {
        const auto& ref = summary.rows[summary.reference];
        std::printf(", relative to %s (run %lld%s)", ref.value.c_str(), static_cast<long long>(ref.run.id),
                    ref.run.is_fp32()               ? ", fp32"
                    : summary.reference_passed_over ? ", the first with a val loss"
                                                    : ", the first");
    }
    std::printf("\n");
    std::vector<std::vector<std::string>> rows = {{"value", "run", "status", "final val", "dval vs ref", "tokens/s",
                                                   "x ref", "peak mem", "x ref", "skipped"}};
    size_t row = 0;
    bool another_step = false;
    for (size_t i = 0; i < values.size(); ++i) {
        if (!runs[i]) {
            rows.push_back({values[i], "-", notes[i], "-", "-", "-", "-", "-", "-", "-"});
            continue;
        }
        const SweepRow& r = summary.rows[row++];
        another_step |= r.val_at_another_step;
        // A diverged run's NaN is shown as such, in both columns, not as "no evaluation".
        const bool evaluated = r.run.final_val_step >= 0;
        const bool both_evaluated = evaluated && summary.rows[summary.reference].run.final_val_step >= 0;
        // A run trained but not kept whole (its final checkpoint) says so beside its status.
        const std::string status =
            std::string(run_status_name(r.run.status)) + (notes[i].empty() ? "" : " (" + notes[i] + ")");
        rows.push_back({r.value, std::to_string(r.run.id), status,
                        fmt_recorded_loss(r.run.final_val_loss, evaluated),
                        fmt_recorded_delta(r.val_loss_delta, both_evaluated) + (r.val_at_another_step ? "*" : ""),
                        fmt_rate(r.run.median_tokens_per_s),
                        fmt_ratio(r.tokens_per_s_ratio),
                        fmt_bytes(r.run.peak_memory_bytes()), fmt_ratio(r.peak_memory_ratio),
                        std::to_string(r.run.skipped_steps)});
    }
    print_table(rows, {false, true, false, true, true, true, true, true, true, true});
    if (another_step)
        std::printf("* final evaluations of different steps (%s): not like for like\n",
                    spec.key == "training.steps" ? "training.steps is what varies" : "a run stopped early");
    std::printf("\n");
}

} // namespace

// Runs one project once per value of the varied key, one after another, into one store.
// Every value is validated before the first run starts; Ctrl-C stops the current run and
// skips the rest; a run that fails is marked failed and the sweep goes on.
int cmd_sweep(const std::string& project_path, const std::string& vary, const std::vector<std::string>& sets,
              const std::string& db_path, std::string sweep_name, DataParallelJob& job)
{
    SweepSpec spec;
    std::vector<SweepRunPlan> plans;
    try {
        spec = parse_vary(vary);
        std::vector<Override> overrides;
        for (const auto& s : sets) overrides.push_back(parse_override(s));
        // --vary is applied after the --set overrides: a --set of the same key is replaced.
        for (const auto& [key, value] : overrides)
            if (key == spec.key || spec.key.starts_with(key + ".") || key.starts_with(spec.key + "."))
                std::fprintf(stderr, "note: --set %s=%s is replaced by --vary %s's values\n", key.c_str(),
                             value.c_str(), spec.key.c_str());
        plans = plan_sweep(project_path, spec, overrides);
        // The device is known now, unlike a value's data (loaded when its run starts): a CUDA
        // value on a machine without one is refused before the first run trains.
        const std::string no_cuda = "training.device: 'cuda' was asked for, but this LibTorch has no CUDA device";
        // A watcher's pause would hold the sweep at that run with nobody to resume it, and
        // Ctrl-C, the only way on, skips the values after it.
        for (const auto& p : plans)
            for (const auto& [watcher, action] : p.config.telemetry.watchers.actions)
                if (action == WatchAction::Pause)
                    throw ConfigError("telemetry.watchers.actions." + watcher +
                                      ": 'pause' would hold a headless sweep at the run it fires in, with nothing to "
                                      "resume it; take 'bf16' or 'none' for a sweep");
        for (const auto& p : plans)
            if (p.config.training.device == "cuda" && !current_gpu().present)
                // Blame --vary only where it set the device; otherwise the project or a --set did.
                throw ConfigError(spec.key == "training.device"
                                      ? "--vary " + spec.key + "=" + p.value + " is rejected: " + no_cuda
                                      : no_cuda);
    } catch (const ConfigError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    const bool named_by_time = sweep_name.empty();
    if (named_by_time) {
        char stamp[32];
        const std::time_t now = std::time(nullptr);
        std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
        sweep_name = stamp;
    }
    // The first run's data is loaded before the store is opened: a sweep whose data is missing
    // or unreadable for every value is refused (exit 2) before it creates a store or records a
    // failed run. A value whose data is refused is "rejected" and the next is tried: the
    // outcome does not hang on which value was listed first.
    std::vector<std::string> notes(plans.size());
    bool any_rejected = false, any_model_failed = false;
    std::unique_ptr<RunSession> first;
    size_t first_index = 0;
    for (; !first && first_index < plans.size(); ++first_index) {
        try {
            first = std::make_unique<RunSession>(plans[first_index].config);
            break;
        } catch (const ConfigError& e) {
            std::fprintf(stderr, "error: %s: %s\n", plans[first_index].name.c_str(), e.what());
            notes[first_index] = "rejected";
            any_rejected = true;
        } catch (const std::exception& e) { // LibTorch building the model (memory): the next value is tried
            std::fprintf(stderr, "error: %s: building the model failed: %s\n", plans[first_index].name.c_str(),
                         first_line(e).c_str());
            notes[first_index] = "failed";
            any_model_failed = true;
        }
    }
    if (!first) return any_model_failed ? 1 : 2;
    std::unique_ptr<RunStore> store;
    try {
        store = std::make_unique<RunStore>(db_path);
    } catch (const StoreError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 3;
    }
    // Two sweeps started in one second (a script's loop) shared a tag, and compared as one.
    if (named_by_time) {
        try {
            std::set<std::string> taken;
            for (const auto& [tag, runs] : store->all_tags()) taken.insert(tag);
            const std::string stamp = sweep_name;
            for (int n = 2; taken.count("sweep:" + sweep_name); ++n) sweep_name = stamp + "-" + std::to_string(n);
        } catch (const StoreError& e) {
            std::fprintf(stderr, "error: %s\n", e.what());
            return 3;
        }
    }
    const std::string tag = "sweep:" + sweep_name;
    if (!named_by_time) { // a name given again (the sweep run once more): its runs join the others
        try {
            for (const auto& [taken, runs] : store->all_tags())
                if (taken == tag)
                    std::fprintf(stderr,
                                 "note: %s already tags %lld run%s: this sweep's runs join them under one tag\n",
                                 tag.c_str(), static_cast<long long>(runs), runs == 1 ? "" : "s");
        } catch (const StoreError&) { // the sweep's own writes say what fails
        }
    }
    std::printf("sweep '%s': %zu runs of %s varying %s, tagged %s\n", sweep_name.c_str(), plans.size(),
                project_path.c_str(), spec.key.c_str(), tag.c_str());

    std::vector<std::string> values;
    std::vector<int64_t> run_ids(plans.size(), 0);
    bool any_failed = any_model_failed, store_failed = false;
    for (size_t i = 0; i < plans.size(); ++i) {
        values.push_back(plans[i].value);
        if (i < first_index) continue; // its data or its model refused above
        if (g_stop_requested || store_failed) {
            if (g_stop_requested) note_stopped_by_signal();
            notes[i] = "skipped";
            continue;
        }
        std::printf("\n[%zu/%zu] %s\n", i + 1, plans.size(), plans[i].name.c_str());
        std::unique_ptr<RunSession> session = std::move(first);
        try {
            if (!session) session = std::make_unique<RunSession>(plans[i].config); // loads the data: may take a while
        } catch (const ConfigError& e) {
            std::fprintf(stderr, "error: %s: %s\n", plans[i].name.c_str(), e.what());
            notes[i] = "rejected";
            any_rejected = true;
            continue;
        } catch (const std::exception& e) { // LibTorch building this value's model (memory): the sweep goes on
            std::fprintf(stderr, "error: %s: building the model failed: %s\n", plans[i].name.c_str(),
                         first_line(e).c_str());
            notes[i] = "failed";
            any_failed = true;
            continue;
        }
        if (g_stop_requested) { // Ctrl-C while the data loaded
            note_stopped_by_signal();
            notes[i] = "skipped";
            continue;
        }
        try {
            run_ids[i] = session->create_run(*store, plans[i].name, std::filesystem::absolute(project_path).string());
            store->add_tags(run_ids[i], {tag});
        } catch (const ConfigError& e) { // its checkpoint folder cannot be made: no run was made
            std::fprintf(stderr, "error: %s: %s\n", plans[i].name.c_str(), e.what());
            notes[i] = "rejected";
            any_rejected = true;
            continue;
        } catch (const StoreError& e) {
            // The store cannot record this run, nor the next: the table still shows the runs
            // done, and a run made but not tagged is closed as failed, not left "running".
            std::fprintf(stderr, "error: %s\n", e.what());
            if (!run_ids[i]) notes[i] = "failed"; // a run made says "failed" as its status
            any_failed = store_failed = true;
            if (run_ids[i]) {
                try {
                    store->finish_run(run_ids[i], RunStatus::Failed);
                } catch (const StoreError&) {
                }
            }
            continue;
        }
        std::printf("run %lld '%s' -> %s\n", static_cast<long long>(run_ids[i]), plans[i].name.c_str(),
                    db_path.c_str());
        TrainEnd end;
        const int code = train_session(*session, db_path, job, nullptr, &end);
        if (code != 0) any_failed = true;
        // The store could not record the run: the next runs would not be kept either. A final
        // checkpoint not kept (another sweep's file in its folder, a full disk) is this run's.
        if (end.store_failed || (code == 3 && !end.final_checkpoint_lost)) store_failed = true;
        else if (end.final_checkpoint_lost) notes[i] = "final checkpoint not kept";
    }

    std::vector<int64_t> ids;
    for (const int64_t id : run_ids)
        if (id) ids.push_back(id);
    std::vector<std::optional<RunSummaryRow>> runs(plans.size());
    if (!ids.empty()) {
        try {
            RunFilter filter;
            filter.ids = ids;
            const auto rows = store->list_run_summaries(filter);
            for (size_t i = 0; i < plans.size(); ++i)
                for (const auto& r : rows)
                    if (r.id == run_ids[i]) runs[i] = r;
        } catch (const StoreError& e) {
            std::fprintf(stderr, "error: cannot read the sweep's runs back: %s\n", e.what());
            store_failed = true;
        }
    }
    print_sweep_table(spec, values, runs, notes);
    if (store_failed) return 3;
    if (any_failed) return 1;
    return any_rejected ? 2 : 0; // a value its data refused (missing, too short): a bad argument
}

} // namespace mantissa
