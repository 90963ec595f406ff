// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_session.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include <unistd.h>

#include "checkpoint_file.h"
#include "checkpoint_weights.h"
#include "config_diff.h"
#include "precision_policy.h"
#include "durable_file.h"

namespace mantissa {

namespace {

// The order in which a resume tries checkpoints. First the recorded ones, newest first: a
// checkpoint is recorded only after everything of its step (loss, telemetry, evaluation) was
// committed, so from it every step ends up recorded exactly once. Then, for files the store
// has no record of (a run of an older store, or a process killed between writing and
// recording), newest first those whose step the store has metrics for, then any later ones,
// oldest first. (A step's loss alone does not mean its telemetry was committed too.) A run
// whose store records its checkpoints (`records_checkpoints`: it has an identity) never takes
// a later one: the steps between its last recorded metrics and such a file were trained but
// never committed, and continuing from the file would leave them unrecorded for good.
std::vector<std::string> resume_order(const std::vector<std::string>& files, const std::set<int64_t>& recorded,
                                      int64_t last_step, bool records_checkpoints)
{
    std::vector<std::string> first, known, later;
    for (const auto& f : files) {
        const int64_t step = *checkpoint_step(f);
        if (!recorded.count(step) && step > last_step && records_checkpoints) continue;
        (recorded.count(step) ? first : step <= last_step ? known : later).push_back(f);
    }
    std::reverse(first.begin(), first.end());
    std::reverse(known.begin(), known.end());
    first.insert(first.end(), known.begin(), known.end());
    first.insert(first.end(), later.begin(), later.end());
    return first;
}

std::string describe_run(const RunInfo& info) { return describe_identity({info.uuid, info.id, {}}); }

// Made now, before a run trains: a folder that cannot be made or written in (a file on its
// path, /proc, no permission, a read-only mount) would otherwise fail every checkpoint of a
// long run, which would end with nothing to resume from. A folder the project names is a
// setting (ConfigError, exit 2); the store's own one is the store's (StoreError, exit 3).
void require_checkpoint_folder(const std::string& folder, bool named_by_project)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(folder, ec);
    std::string problem;
    if (!fs::is_directory(folder)) {
        problem = "cannot make the folder '" + folder + "': " + (ec ? ec.message() : "a file is in its place");
    } else if (const std::string denied = access_problem(folder, W_OK | X_OK); !denied.empty()) {
        problem = "cannot write in the folder '" + folder + "': " + denied;
    }
    if (problem.empty()) return;
    if (named_by_project) throw ConfigError("training.checkpoint_dir: " + problem);
    throw StoreError("checkpoints beside the run store: " + problem);
}

// The folder a run's relative paths resolve against: its project file's. Runs made before
// project paths were stored absolute resolve against the current folder, as then; a run
// without one (made in memory) has no folder of its own.
std::string run_base_dir(const RunInfo& info)
{
    namespace fs = std::filesystem;
    return info.project_path.empty() ? fs::current_path().string()
                                     : fs::absolute(info.project_path).parent_path().string();
}

// Where a saved run's checkpoints are and which to try, in resume_order.
struct CheckpointSearch {
    std::string write_dir; // where the run goes on writing
    std::string read_dir;  // where they are read (a legacy folder until the first new one)
    bool store_folder = false; // read_dir is the store's own folder for this run, shared with no other run
    std::map<int64_t, CheckpointRow> recorded;
    std::vector<std::string> files;
};

CheckpointSearch search_checkpoints(RunStore& store, const RunInfo& info, const ProjectConfig& config)
{
    namespace fs = std::filesystem;
    CheckpointSearch found;
    std::set<int64_t> recorded_steps;
    for (auto& row : store.checkpoints(info.id)) {
        recorded_steps.insert(row.step);
        found.recorded[row.step] = std::move(row);
    }
    const bool own_folder = config.training.checkpoint_dir.empty();
    found.write_dir =
        own_folder ? store.checkpoint_dir(info.id) : resolve_data_path(config, config.training.checkpoint_dir);
    // Earlier versions took a relative training.checkpoint_dir from where the run was
    // started, not from the project file's folder: such a run's recorded files say where it
    // writes.
    // Only a relative record is such a run's: an absolute one, in a copied store, names the
    // original store's folder, whose files the copy's resume would write beside and rotate.
    if (!own_folder && !found.recorded.empty() && list_checkpoints(found.write_dir).empty() &&
        fs::path(found.recorded.rbegin()->second.path).is_relative()) {
        std::error_code ec;
        // Relative as such a run recorded it: from where it was started, as then.
        const auto folder = fs::absolute(fs::path(found.recorded.rbegin()->second.path).parent_path(), ec);
        if (!ec && fs::is_directory(folder, ec)) found.write_dir = folder.lexically_normal().string();
    }
    found.read_dir = found.write_dir;
    // A run recorded before schema 4 kept its checkpoints in "checkpoints/run-<id>"; read them
    // there until it has written one into its own folder.
    if (own_folder && info.legacy_checkpoints && list_checkpoints(found.read_dir).empty())
        found.read_dir = store.legacy_checkpoint_dir(info.id);
    // A run trained through a link to the store's file before 2026-12-07 kept its checkpoints
    // beside the link (LINK.checkpoints): read them there until it writes one into its own.
    if (own_folder && !found.recorded.empty() && list_checkpoints(found.read_dir).empty()) {
        const fs::path folder = fs::path(found.recorded.rbegin()->second.path).parent_path();
        const std::string base = folder.parent_path().string();
        const std::string suffix = ".checkpoints";
        std::error_code ec;
        if (base.size() > suffix.size() && base.ends_with(suffix)) {
            const std::string link = base.substr(0, base.size() - suffix.size());
            if (fs::is_symlink(link, ec) && fs::equivalent(link, store.path(), ec) && !ec &&
                !list_checkpoints(folder.string()).empty())
                found.read_dir = folder.string();
        }
    }
    // Not the legacy folder, which two stores in one folder shared.
    found.store_folder = own_folder && found.read_dir == found.write_dir;
    found.files = resume_order(list_checkpoints(found.read_dir), recorded_steps, info.last_step, !info.uuid.empty());
    return found;
}

// Throws ConfigError when there is no checkpoint file to `purpose` from.
void require_files(const CheckpointSearch& found, const RunInfo& info, const std::string& purpose)
{
    // A folder that cannot be listed looks empty: say why instead of "none in". (One that is
    // not there is "none in".)
    std::error_code ec;
    const bool absent = !std::filesystem::exists(found.read_dir, ec) && !ec;
    const std::string problem =
        found.files.empty() && !absent ? access_problem(found.read_dir, R_OK | X_OK) : std::string();
    if (!problem.empty())
        throw ConfigError("run " + std::to_string(info.id) + "'s checkpoint folder '" + found.read_dir +
                          "' cannot be read: " + problem);
    if (found.files.empty() && !found.recorded.empty()) {
        // The store recorded them: "none in" read as if there had never been any (read-only
        // audit 'ckpt-scale'). Only the newest is named: rotation deleted older ones, whose
        // records stay.
        const auto& [last, last_row] = *found.recorded.rbegin();
        throw ConfigError("run " + std::to_string(info.id) + "'s newest recorded checkpoint (step " +
                          std::to_string(last) + ", '" + last_row.path + "') is missing from '" + found.read_dir +
                          "', and no other of its checkpoints is there (deleted or moved): put it back there to " +
                          purpose + " from it");
    }
    if (found.files.empty())
        throw ConfigError("run " + std::to_string(info.id) + " has no checkpoint to " + purpose + " from (none in '" +
                          found.read_dir + "')");
}

// Tries the files in order until `load` takes one, and returns its path. A file whose
// checksum differs from its record, or that `load` cannot read (ConfigError), goes to `report`
// as checkpoint_damaged and the next is tried; `damaged_own` collects those of them that the
// store recorded as this run's. Throws ConfigError when there is no file, CheckpointMismatch
// for another run's file, CheckpointUnusable when every one is damaged; anything else `load`
// throws passes through.
std::string load_first_good(const CheckpointSearch& found, const RunInfo& info, const RunSession::Report& report,
                            const std::function<void(const std::string&)>& load,
                            std::vector<std::string>* damaged_own = nullptr, const std::string& purpose = "resume")
{
    require_files(found, info, purpose);
    std::vector<std::string> damaged;
    for (const auto& path : found.files) {
        const int64_t step = *checkpoint_step(path);
        // Not damage: nothing was read. Falling back would write the next checkpoint over it.
        if (const std::string why = unreadable_reason(path); !why.empty())
            throw ConfigError("checkpoint '" + path + "' cannot be read: " + why +
                              "; it is not damaged, and nothing was changed (make it readable, or move it away to " +
                              "resume from an older checkpoint)");
        std::string problem;
        if (const auto row = found.recorded.find(step); row != found.recorded.end()) {
            try {
                const auto sum = checksum_file(path);
                if (sum.checksum != row->second.checksum || sum.bytes != row->second.bytes)
                    problem = "its checksum is " + sum.checksum + " over " + std::to_string(sum.bytes) +
                              " bytes, but " + row->second.checksum + " over " + std::to_string(row->second.bytes) +
                              " bytes was recorded when it was written";
            } catch (const std::exception& e) {
                problem = e.what();
            }
            // Another run's file under this name is refused, not mistaken for damage.
            if (!problem.empty())
                if (const auto theirs = read_checkpoint_identity(path); theirs && theirs->run_uuid != info.uuid)
                    throw CheckpointMismatch("checkpoint '" + path + "' belongs to " + describe_identity(*theirs) +
                                             ", not to " + describe_run(info));
        }
        if (problem.empty()) {
            try {
                load(path);
                return path;
            } catch (const CheckpointMismatch&) {
                throw;
            } catch (const ConfigError& e) {
                problem = e.what();
                // The event names the file already: "checkpoint 'X' is damaged (cannot be read: …)".
                if (const std::string named = "checkpoint '" + path + "' "; problem.starts_with(named))
                    problem.erase(0, named.size());
            }
        }
        damaged.push_back(path);
        if (const auto row = found.recorded.find(step); damaged_own && row != found.recorded.end()) {
            // The store's record of this very file (not of this step elsewhere), or a recorded
            // step's file in the store's own folder, which no other run writes in: a store moved
            // or copied with its folder keeps the old paths in its rows, and its damaged file,
            // not adopted, refused the checkpoint of that step on every resume.
            namespace fs = std::filesystem;
            std::error_code ec;
            const bool recorded_here =
                fs::weakly_canonical(row->second.path, ec) == fs::weakly_canonical(path, ec) && !ec;
            if (recorded_here || found.store_folder) damaged_own->push_back(path);
        }
        if (report) {
            RunEvent e;
            e.step = step;
            e.kind = EventKind::CheckpointDamaged;
            e.path = path;
            e.text = problem;
            report(e);
        }
    }
    std::string names;
    for (const auto& d : damaged) names += (names.empty() ? "'" : ", '") + d + "'";
    throw CheckpointUnusable("run " + std::to_string(info.id) + " has no good checkpoint left to " + purpose +
                             " from: " + names + (damaged.size() == 1 ? " is" : " are") + " damaged");
}

// The precision changes a user made at or after the step the trainer resumes from: the steps
// after a checkpoint are trained again, and without them would be another run's. (A watcher's
// changes follow from the telemetry, which the same steps reproduce.) Each is recorded once,
// as the user's: a resume makes it again under ChangeCause::Resume, and the next resume drops
// those (RunStore::discard_steps_after), so a change that a resumed run had not reached yet
// when it was interrupted too is still made. Events come in the order they were recorded.
void replay_precision_changes(RunStore& store, int64_t run_id, Trainer& trainer)
{
    for (const auto& row : store.events(run_id)) {
        const RunEvent& e = row.event;
        if (e.kind == EventKind::PrecisionChanged && e.cause == ChangeCause::User && !e.pattern.empty() &&
            e.new_formats && e.step >= trainer.step())
            trainer.replay_layer_formats(e.step, e.pattern, *e.new_formats, e.new_scaling);
    }
}

// How a resume event of an older store names the settings its overrides changed in its text.
constexpr const char* kLegacySettingsChanged = "settings changed: ";
// The settings that decide the layers' formats: a resume's change of them is also recorded as
// the user's precision changes at its step, which a later resume makes again at that step.
constexpr std::array<const char*, 4> kFormatKeys = {"precision.preset", "precision.layers", "precision.keep_last_bf16",
                                                    "precision.fp8.scaling"};

bool changes_formats(const std::string& key)
{
    return std::any_of(kFormatKeys.begin(), kFormatKeys.end(), [&](const char* k) { return key.starts_with(k); });
}

// Whether a layer computes otherwise under `now` than under `before`: in other formats, or
// (with an FP8 GEMM) under another recipe. A format key changed to no layer's effect (an FP8
// recipe in a BF16 run) supersedes none of the interrupted run's live changes.
bool layers_compute_otherwise(const ProjectConfig& before, const ProjectConfig& now)
{
    const int64_t n = now.model.n_layer;
    if (before.model.n_layer != n) return true;
    for (const auto& name : gemm_layer_names(n)) {
        const GemmFormats a = resolve_layer_formats(before.precision, name, n);
        const GemmFormats b = resolve_layer_formats(now.precision, name, n);
        if (!(a == b)) return true;
        if (b.any_fp8() &&
            resolve_layer_recipe(before.precision, name).scaling != resolve_layer_recipe(now.precision, name).scaling)
            return true;
    }
    return false;
}

// Records that claim() dropped the steps after the checkpoint, so that a replica of this store
// drops them too and one of an older store (which kept them) does not.
class ResumeRecordingSink : public StoreSink {
public:
    ResumeRecordingSink(RunStore& store, int64_t run_id, bool dropped, bool superseded,
                        std::vector<SettingChange> config_changes, std::string settings_moved_earlier)
        : StoreSink(store, run_id), dropped_(dropped), superseded_(superseded),
          config_changes_(std::move(config_changes)), settings_moved_earlier_(std::move(settings_moved_earlier))
    {
    }
    void on_event(const RunEvent& e) override
    {
        if (e.kind != EventKind::ResumedFromCheckpoint ||
            (!dropped_ && config_changes_.empty() && settings_moved_earlier_.empty()))
            return StoreSink::on_event(e);
        RunEvent recorded = e;
        recorded.later_steps_dropped = dropped_ || e.later_steps_dropped; // the latter: a start over's
        recorded.live_changes_superseded = dropped_ && superseded_;
        const auto add = [&](const std::string& part) {
            if (!part.empty()) recorded.text += (recorded.text.empty() ? "" : "; ") + part;
        };
        recorded.settings_changed = config_changes_;
        add(settings_moved_earlier_);
        StoreSink::on_event(recorded);
    }

private:
    bool dropped_, superseded_;
    std::vector<SettingChange> config_changes_;
    std::string settings_moved_earlier_;
};

} // namespace

std::string final_checkpoint_problem(const SessionOutcome& outcome)
{
    if (outcome.final_checkpoint_error.empty()) return {};
    const std::string newest = outcome.newest_checkpoint_step >= 0
                                   ? "the newest this run saved is step " +
                                         std::to_string(outcome.newest_checkpoint_step) +
                                         ", and a resume trains the steps after it again"
                                   : "this run saved no checkpoint";
    return "the final checkpoint could not be written (" + outcome.final_checkpoint_error + "); " + newest;
}

namespace {

// What a resume that loaded the checkpoint of `from_step` says of the settings that earlier
// resumes changed after that step (RunSession::settings_moved_earlier). `replays`: this resume
// makes the live precision changes again (its own settings leave the layers' formats alone).
std::string settings_changed_after(RunStore& store, int64_t run_id, int64_t from_step, bool replays)
{
    std::string out;
    for (const auto& row : store.events(run_id)) {
        if (row.event.kind != EventKind::ResumedFromCheckpoint || row.step <= from_step) continue;
        std::string changes = describe_setting_changes(row.event.settings_changed);
        bool formats = std::any_of(row.event.settings_changed.begin(), row.event.settings_changed.end(),
                                   [](const SettingChange& c) { return changes_formats(c.key); });
        if (changes.empty()) { // an older store's resume said them in its text alone
            const std::string& text = row.event.text;
            const auto at = text.find(kLegacySettingsChanged);
            if (at == std::string::npos) continue;
            const auto begin = at + std::string_view(kLegacySettingsChanged).size();
            changes = text.substr(begin, text.find("; ", begin) - begin);
            formats = std::any_of(kFormatKeys.begin(), kFormatKeys.end(),
                                  [&](const char* key) { return changes.find(key) != std::string::npos; });
        }
        out += (out.empty() ? "" : "; ") + std::string("the settings the resume at step ") + std::to_string(row.step) +
               " changed (" + changes + ") apply from step " + std::to_string(from_step + 1) + " on";
        if (formats && replays)
            out += ", but for the layers' formats, which change at step " + std::to_string(row.step) + " as they did";
        else if (formats) // this resume's own settings decide them, from its step on
            out += ", the layers' formats among them";
    }
    return out;
}

} // namespace

DeletedRun delete_run_with_checkpoints(RunStore& store, int64_t run_id)
{
    namespace fs = std::filesystem;
    std::set<std::string> files;
    std::string uuid;
    for (const auto& info : store.list_runs()) // by id only: find_run would take a run named "12"
        if (info.id == run_id) uuid = info.uuid;
    for (const auto& row : store.checkpoints(run_id)) files.insert(row.path);
    const std::string own_folder = store.checkpoint_dir(run_id);
    for (auto& f : list_checkpoints(own_folder)) files.insert(std::move(f));
    store.delete_run(run_id); // first: a refused delete touches no file

    DeletedRun deleted;
    const fs::path own = fs::path(own_folder).lexically_normal();
    for (const auto& path : files) {
        std::error_code ec;
        if (!fs::exists(path, ec)) continue; // rotated away, or removed by hand
        std::string why;
        // Only this store's own folder is this store's to empty. A training.checkpoint_dir may
        // be shared, and a copy of the store (cp runs.sqlite trial.sqlite) records the same
        // runs, identities and paths as the original: deleting there must not take the
        // original's files.
        if (fs::absolute(path, ec).parent_path().lexically_normal() != own) {
            deleted.kept.push_back("'" + path + "': outside this store's folder '" + own_folder + "'");
            continue;
        }
        const auto ownership = read_checkpoint_ownership(path);
        if (!ownership.readable) why = "cannot be read as a checkpoint";
        else if (!ownership.identity) why = "carries no run identity";
        else if (uuid.empty() || ownership.identity->run_uuid != uuid) why = "belongs to " + describe_identity(*ownership.identity);
        const auto bytes = fs::file_size(path, ec);
        if (why.empty() && !fs::remove(path, ec)) why = ec ? ec.message() : "already gone";
        if (!why.empty()) {
            deleted.kept.push_back("'" + path + "': " + why);
            continue;
        }
        ++deleted.checkpoints_removed;
        deleted.bytes_removed += static_cast<int64_t>(bytes);
    }
    std::error_code ec;
    remove_stale_temporaries(own_folder);
    if (fs::is_directory(own_folder, ec) && fs::is_empty(own_folder, ec)) fs::remove(own_folder, ec);
    return deleted;
}

RunSession::RunSession(ProjectConfig config) : trainer_(std::make_unique<Trainer>(std::move(config))) {}

RunSession::~RunSession() = default;

std::unique_ptr<RunSession> RunSession::reopen(RunStore& store, const RunInfo& info,
                                               const std::vector<Override>& overrides, const Report& report)
{
    const auto base = run_base_dir(info);
    const ProjectConfig config = [&] {
        try {
            return load_stored_run_json(info.config_json, base, overrides);
        } catch (const ConfigError& e) {
            // The store's copy, not the user's project file, which "not valid JSON (in model)"
            // alone sent them looking at.
            const std::string what = e.what();
            if (!what.starts_with("not valid JSON")) throw;
            throw ConfigError("run " + std::to_string(info.id) + "'s settings in the run store are damaged: " + what);
        }
    }();
    std::unique_ptr<RunSession> session(new RunSession());
    bool formats_overridden = false; // the overrides change which formats the layers take
    std::optional<ProjectConfig> before_config; // the stored settings, where overrides change them
    if (!overrides.empty()) {
        // Against the stored settings as this version reads them, so that keys a newer version
        // added (with their defaults) are not taken for the overrides' changes.
        std::string before = info.config_json;
        try {
            before_config = load_stored_run_json(info.config_json, base);
            before = to_json_text(*before_config);
        } catch (const ConfigError&) {
            // Valid only with the overrides (they mend it): the stored text is the baseline.
        }
        const std::string now = to_json_text(config);
        for (const auto& d : diff_configs(before, now)) {
            session->config_changes_.push_back({d.key, d.a.value_or("(none)"), d.b.value_or("(none)")});
            formats_overridden |= changes_formats(d.key);
        }
        // Read as the layers compute where the stored settings can be read.
        if (formats_overridden && before_config) formats_overridden = layers_compute_otherwise(*before_config, config);
        if (!session->config_changes_.empty()) session->resumed_config_json_ = now;
    }
    // A --set of training.checkpoint_dir: the checkpoints are read where the run kept them, and
    // the next ones written into the new folder (the new folder used to be ignored: its
    // emptiness sent the run back to where its recorded files are).
    const bool moved = before_config && before_config->training.checkpoint_dir != config.training.checkpoint_dir;
    CheckpointSearch found = search_checkpoints(store, info, moved ? *before_config : config);
    if (moved)
        found.write_dir = config.training.checkpoint_dir.empty()
                              ? store.checkpoint_dir(info.id)
                              : resolve_data_path(config, config.training.checkpoint_dir);
    const auto build = [&] {
        session->trainer_ = std::make_unique<Trainer>(config);
        session->attach(store, info.id, info.uuid, found.write_dir);
    };
    // Killed before its first checkpoint: nothing was lost that the seed cannot redo.
    const bool starts_over =
        found.files.empty() && found.recorded.empty() && !info.legacy_checkpoints && !info.uuid.empty();
    if (!starts_over) require_files(found, info, "resume"); // first: a folder it cannot read says so
    // As a new run's (create_run), before the data is loaded: a resume that trains on to a folder
    // it cannot write in ends with nothing saved, and a --set's folder would be stored as the run's.
    require_checkpoint_folder(found.write_dir, !config.training.checkpoint_dir.empty());
    if (starts_over) {
        build();
        session->starts_over_ = true;
        replay_precision_changes(store, info.id, *session->trainer_);
        return session;
    }
    // The model's shape is its checkpoint's: "checkpoint ... does not fit this model" sent the user
    // looking at the file when their own --set asked for another model.
    for (const auto& c : session->config_changes_)
        if (c.key == "model.n_layer" || c.key == "model.n_head" || c.key == "model.n_embd" ||
            c.key == "model.context_length" || c.key == "model.bias")
            throw ConfigError(c.key + ": a resume keeps the model its checkpoints hold (" + c.key + " " + c.before +
                              ", not " + c.after + "); resume without this --set, or start a new run");
    build();
    std::vector<std::string> damaged_own;
    session->loaded_checkpoint_ = load_first_good(
        found, info, report,
        [&](const std::string& path) {
            try {
                session->trainer_->load_checkpoint(path);
            } catch (const CheckpointOfOtherData& e) {
                // Nothing on disk changed where the resume's own settings made other data (a
                // synthetic set's seed): "restore the data" sent the user looking for a file.
                std::string keys;
                for (const auto& c : session->config_changes_)
                    if (c.key.starts_with("data.") || c.key == "training.seed")
                        keys += (keys.empty() ? "" : ", ") + c.key;
                if (keys.empty()) throw;
                throw CheckpointOfOtherData("checkpoint '" + path + "' was trained on other data: this resume's " +
                                            keys + " makes other data than the run trained on; resume without it, "
                                            "or start a new run");
            } catch (const CheckpointMismatch&) {
                throw;
            } catch (const ConfigError&) {
                build(); // a half-loaded trainer is not trusted: start the next try from scratch
                throw;
            }
        },
        &damaged_own);
    // The checkpoint resumed from is the run's newest saved until this session writes one: a
    // resume whose every write failed said "this run saved no checkpoint" of a run that had
    // one (read-only audit 'ckpt-scale').
    if (!session->loaded_checkpoint_.empty()) session->newest_checkpoint_step_ = session->trainer_->step();
    // The steps after the loaded checkpoint are trained again, and their checkpoints written
    // over the damaged files (a recorded file is this run's own, readable or not).
    for (const auto& path : damaged_own) session->trainer_->adopt_damaged_checkpoint(path);
    // Looked for where the resume reads (a copied store's rows name the original's files).
    for (const auto& [step, row] : found.recorded) {
        std::error_code ec;
        const auto expected = (std::filesystem::path(found.read_dir) / checkpoint_file_name(step)).string();
        if (step <= session->trainer_->step() || step > info.last_step) continue;
        const auto type = std::filesystem::status(expected, ec).type();
        if (type == std::filesystem::file_type::not_found)
            session->missing_checkpoints_.push_back("step " + std::to_string(step) + " ('" + expected + "')");
        else if (type == std::filesystem::file_type::directory) // not a file of ours to read, or write over
            session->missing_checkpoints_.push_back("step " + std::to_string(step) + " ('" + expected +
                                                    "', a folder in its place)");
    }
    session->settings_moved_earlier_ =
        settings_changed_after(store, info.id, session->trainer_->step(), /*replays=*/!formats_overridden);
    if (config.training.steps < session->trainer_->step())
        throw ConfigError("training.steps=" + std::to_string(config.training.steps) + " ends before step " +
                          std::to_string(session->trainer_->step()) + ", where run " + std::to_string(info.id) +
                          " resumes (from '" + session->loaded_checkpoint_ + "')");
    if (!formats_overridden) {
        replay_precision_changes(store, info.id, *session->trainer_);
        return session;
    }
    session->live_changes_superseded_ = true;
    // A checkpoint holds its layers' formats (a live change included). Formats that the
    // overrides ask for are changed at the first step boundary, as a user's change: recorded
    // as precision_changed, so the run's history says when its layers changed. The
    // interrupted run's later live changes are not made again: replayed, they would switch
    // layers back from what was asked for at their steps.
    for (const auto& layer : session->trainer_->layers()) {
        const auto wanted = resolve_layer_formats(config.precision, layer.name, config.model.n_layer);
        const auto recipe = resolve_layer_recipe(config.precision, layer.name).scaling;
        // A recipe is a layer's with an FP8 GEMM: a BF16 layer is left as the checkpoint has it.
        const bool other_recipe = wanted.any_fp8() && session->trainer_->layer_scaling(layer.name) != recipe;
        if (!(wanted == layer.formats) || other_recipe)
            session->trainer_->request_layer_formats(layer.name, wanted,
                                                     other_recipe ? std::optional<Fp8Scaling>(recipe) : std::nullopt);
    }
    return session;
}

RunSession::ExportedRunWeights RunSession::export_weights(RunStore& store, const RunInfo& info, const std::string& out,
                                                          const Report& report)
{
    // The stored settings as they are, without the machine checks of a run: exporting reads a
    // checkpoint, it trains nothing (a CUDA run exports on a laptop).
    ProjectConfig config = load_run_config(info.config_json);
    config.base_dir = run_base_dir(info);
    const CheckpointSearch found = search_checkpoints(store, info, config);
    require_files(found, info, "export weights");
    ExportedRunWeights exported;
    exported.checkpoint = load_first_good(
        found, info, report,
        [&](const std::string& path) {
            exported.step = export_checkpoint_weights(path, out, {info.uuid, info.id, {}},
                                                      {{"format", "pt"}, {"producer", "mantissa"},
                                                       {"project", to_json_text(config)}});
        },
        nullptr, "export weights");
    return exported;
}

void RunSession::attach(RunStore& store, int64_t run_id, const std::string& uuid, const std::string& dir)
{
    store_ = &store;
    run_id_ = run_id;
    trainer_->set_checkpoint_dir(dir);
    trainer_->set_checkpoint_identity(uuid, run_id);
    trainer_->set_checkpoint_listener([this](const Trainer::CheckpointWrite& w) { return on_checkpoint_written(w); });
}

int64_t RunSession::create_run(RunStore& store, const std::string& name, const std::string& project_path)
{
    const auto& wanted = trainer_->config().training.checkpoint_dir;
    require_checkpoint_folder(wanted.empty() ? std::filesystem::path(store.checkpoint_dir(0)).parent_path().string()
                                             : resolve_data_path(trainer_->config(), wanted),
                              !wanted.empty());
    const int64_t id = store.create_run(name, project_path, to_json_text(trainer_->config()));
    const auto info = store.find_run(std::to_string(id));
    const auto& explicit_dir = trainer_->config().training.checkpoint_dir;
    // A relative explicit folder stays relative: the trainer takes it from the project file's folder.
    attach(store, id, info ? info->uuid : std::string(), explicit_dir.empty() ? store.checkpoint_dir(id) : explicit_dir);
    return id;
}

void RunSession::claim(const std::vector<RunEvent>& notices)
{
    // Claimed first: a run that another process still trains refuses, with nothing dropped.
    store_->claim_run(run_id_);
    if (!resumed_config_json_.empty()) store_->set_run_config(run_id_, resumed_config_json_);
    if (starts_over_) store_->start_run_over(run_id_);
    else if (!loaded_checkpoint_.empty()) {
        store_->discard_steps_after(run_id_, trainer_->step(), live_changes_superseded_);
        dropped_after_checkpoint_ = true;
    }
    for (const auto& e : notices) store_->append_event(run_id_, e);
}

bool RunSession::on_checkpoint_written(const Trainer::CheckpointWrite& write)
{
    last_checkpoint_error_ = write.error;
    if (!write.error.empty()) {
        ++checkpoints_failed_;
        return true; // the trainer's checkpoint_failed event said it already
    }
    newest_checkpoint_step_ = write.step;
    try {
        // Everything of this step is committed before the checkpoint is recorded, so a resume
        // from a recorded checkpoint never leaves a step of it unrecorded (see resume_order).
        // The listener runs before rotation: the store always knows a checkpoint still on disk.
        store_->flush();
        // A checkpoint after lost rows would be resumed from with those steps missing for
        // good: unrecorded, a resume takes the last one from before the loss and trains them
        // again (resume_order).
        if (const int64_t lost = store_->rows_lost() - rows_lost_at_start_; lost > 0)
            throw StoreError("the run store could not write " + std::to_string(lost) + " rows of this run (" +
                             store_->last_write_error() + "); a resume takes an earlier checkpoint");
        // Made as the file was written: reading 1 GB back for it cost 1.7 s of the step's stall.
        const auto sum =
            write.checksum.empty() ? checksum_file(write.path) : FileChecksum{write.checksum, write.bytes};
        store_->record_checkpoint({run_id_, write.step, write.path, sum.checksum, sum.bytes});
        return true;
    } catch (const std::exception& e) {
        // The file stays usable; a resume just cannot verify it.
        if (live_sink_) {
            RunEvent unrecorded;
            unrecorded.step = write.step;
            unrecorded.kind = EventKind::CheckpointUnrecorded;
            unrecorded.path = write.path;
            unrecorded.text = e.what();
            live_sink_->on_event(unrecorded);
        }
        return false;
    }
}

SessionOutcome RunSession::run(const std::vector<TelemetrySink*>& sinks)
{
    ResumeRecordingSink store_sink(*store_, run_id_, dropped_after_checkpoint_, live_changes_superseded_,
                                   config_changes_, settings_moved_earlier_);
    std::vector<TelemetrySink*> all{&store_sink};
    all.insert(all.end(), sinks.begin(), sinks.end());
    FanOutSink sink(std::move(all));
    live_sink_ = &sink;
    rows_lost_at_start_ = store_->rows_lost();
    checkpoints_failed_ = 0;
    last_checkpoint_error_.clear();
    SessionOutcome out;
    if (starts_over_) {
        // claim() dropped what the attempt before recorded: a window following the run, or a
        // replica of it, must drop those steps too, as after a resume (a resume's event, at
        // step 0, with later_steps_dropped). Followers showed the killed attempt's values until
        // the new one passed them.
        RunEvent again;
        again.kind = EventKind::ResumedFromCheckpoint;
        again.later_steps_dropped = true;
        again.text = "the interrupted attempt ended before its first checkpoint: trained again from step 0";
        sink.on_event(again);
    }
    try {
        out.summary = trainer_->run(sink);
        out.status = out.summary.stopped_early ? RunStatus::Stopped : RunStatus::Finished;
    } catch (const std::exception& e) {
        out.status = RunStatus::Failed;
        out.error = e.what();
    } catch (...) {
        out.status = RunStatus::Failed;
        out.error = "training failed with an unknown error";
    }
    if (out.status == RunStatus::Failed) {
        RunEvent failed;
        failed.step = trainer_->step();
        failed.kind = EventKind::RunFailed;
        failed.text = out.error;
        sink.on_event(failed);
    }
    live_sink_ = nullptr;
    out.checkpoints_failed = checkpoints_failed_;
    out.newest_checkpoint_step = newest_checkpoint_step_;
    // The last write of a run that ended is its final state's.
    if (out.status != RunStatus::Failed) out.final_checkpoint_error = last_checkpoint_error_;
    store_->flush();
    out.rows_lost = store_->rows_lost() - rows_lost_at_start_;
    out.store_error = out.rows_lost > 0 ? store_->last_write_error() : std::string();
    // A run whose rows the store lost is not whole: recorded "finished", it listed 0 steps and
    // nothing said rows were missing (read-only audit 'badinput'). Interrupted, a resume takes
    // the last checkpoint from before the loss and trains the lost steps again.
    const RunStatus recorded =
        out.rows_lost > 0 && out.status != RunStatus::Failed ? RunStatus::Interrupted : out.status;
    try {
        store_->finish_run(run_id_, recorded);
    } catch (const std::exception& e) {
        out.status = RunStatus::Failed;
        out.error = e.what(); // names the store already
        out.store_failed = true;
    }
    return out;
}

} // namespace mantissa
