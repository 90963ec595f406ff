// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// One training job into the run store, whoever starts it: mantissa-train's run, resume,
// sweep and export, and the GUI's Start all go through a RunSession. It builds the Trainer,
// creates (or re-opens) the run record, decides the checkpoint folder, finds and verifies the
// checkpoint to resume from, fans telemetry out to the store and the caller's sinks, and
// always finishes the record: finished, stopped, or failed with the reason.
//
// Checkpoint folders (docs/CHECKPOINTS.md): training.checkpoint_dir when set, else
// RunStore::checkpoint_dir(id) = "<store file>.checkpoints/run-<id>". A run of a store made
// before schema 4 whose new folder holds nothing resumes from its old "checkpoints/run-<id>".

#include <atomic>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "project_config.h"
#include "run_store.h"
#include "trainer.h"

namespace mantissa {

// Every checkpoint of a run failed its checksum or could not be read: nothing is left to
// resume from. The message names the files. (mantissa-train exits 3: the run store's files.)
class CheckpointUnusable : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// What deleting a run removed besides its records.
struct DeletedRun {
    int checkpoints_removed = 0;
    int64_t bytes_removed = 0;
    std::vector<std::string> kept; // "'<file>': why", for each checkpoint file left in place
};

// Deletes a run (RunStore::delete_run: refused while another process trains it), then the
// checkpoint files in its own folder (RunStore::checkpoint_dir) that name this run as their
// owner; the folder goes when nothing is left in it. Files it recorded elsewhere (an explicit
// training.checkpoint_dir, which others may share; the original store's folder, for a copy of
// a store), another run's file, one that cannot be read, and checkpoints from before schema 4
// (which carry no owner) are left, and listed in `kept`.
DeletedRun delete_run_with_checkpoints(RunStore& store, int64_t run_id);

struct SessionOutcome {
    RunStatus status = RunStatus::Failed; // Finished, Stopped or Failed
    std::string error;  // why it failed; empty otherwise
    // Why the store could not keep some of the run's rows (e.g. "disk full"); empty when it
    // kept them all. The run itself may still have finished.
    std::string store_error; // the last write error, where rows_lost > 0
    int64_t rows_lost = 0;   // rows of this run the store could not write (mantissa-train exits 3)
    bool store_failed = false; // the run could not be recorded as ended (mantissa-train exits 3)
    // Checkpoints that could not be written (each a checkpoint_failed event; training went on).
    int64_t checkpoints_failed = 0;
    // Why the run's final checkpoint, which a resume starts from, could not be written; empty
    // when it was (or the run failed, or trained no step). mantissa-train exits 3.
    std::string final_checkpoint_error;
    int64_t newest_checkpoint_step = -1; // the newest this session wrote; -1 none
    RunSummary summary;
};

// "the final checkpoint could not be written (…); the newest this run saved is step 20, and a
// resume trains the steps after it again", or "" when it was written: what mantissa-train and
// the window say of a run that trained but cannot be resumed from its end.
std::string final_checkpoint_problem(const SessionOutcome& outcome);

class RunSession {
public:
    // Something the session noticed before training (a damaged checkpoint skipped).
    using Report = std::function<void(const RunEvent&)>;

    // A new job of `config`: builds the Trainer (loads the data). Throws ConfigError;
    // nothing is recorded yet.
    explicit RunSession(ProjectConfig config);
    // A saved run at its newest good checkpoint, `overrides` applied to its stored config.
    // Damaged checkpoints (checksum differs from the one recorded, or unreadable) go to
    // `report` as checkpoint_damaged events and the previous one is tried. Only reads the
    // store. Throws ConfigError (no checkpoint, bad override), CheckpointMismatch (the
    // checkpoint is another run's or another model's; the message says whose) or
    // CheckpointUnusable (none is good).
    static std::unique_ptr<RunSession> reopen(RunStore& store, const RunInfo& info, const std::vector<Override>& overrides,
                                              const Report& report = {});
    // A saved run's weights at its newest good checkpoint, written to `out` as safetensors
    // straight from the file (export_checkpoint_weights): no Trainer is built, so neither the
    // run's data nor its device is needed. The checkpoint is chosen and checked as reopen does
    // (damaged ones to `report`), and throws the same, plus WeightsWriteError when `out`
    // cannot be written.
    struct ExportedRunWeights {
        std::string checkpoint;
        int64_t step = 0;
    };
    static ExportedRunWeights export_weights(RunStore& store, const RunInfo& info, const std::string& out,
                                             const Report& report = {});
    ~RunSession();
    RunSession(const RunSession&) = delete;
    RunSession& operator=(const RunSession&) = delete;

    // Records a new run ("running", claimed by `store`) and returns its id. Throws StoreError.
    int64_t create_run(RunStore& store, const std::string& name, const std::string& project_path);
    // Takes a reopened run over again ("running"); `report`'s events were already shown, this
    // records them. What the steps after the loaded checkpoint recorded is dropped first: they
    // are trained again (RunStore::discard_steps_after; a run that starts over drops its first
    // attempt, RunStore::start_run_over). Throws StoreError (in use by another process).
    void claim(const std::vector<RunEvent>& notices = {});

    // Trains until done or stopped, telemetry to the store and to `sinks`. Never throws; the
    // record is never left "running": an exception ends it "failed" with a run_failed event.
    SessionOutcome run(const std::vector<TelemetrySink*>& sinks);

    // Thread-safe controls, applied at the next step boundary (see Trainer).
    bool request_pause() { return trainer_->request_pause(); }
    bool request_resume() { return trainer_->request_resume(); }
    bool request_stop() { return trainer_->request_stop(); }
    bool request_checkpoint() { return trainer_->request_checkpoint(); }
    // Throws ConfigError if the pattern matches no layer or a format is no GEMM's.
    bool request_layer_formats(const std::string& pattern, const GemmFormats& formats,
                               std::optional<Fp8Scaling> scaling = std::nullopt)
    {
        return trainer_->request_layer_formats(pattern, formats, scaling);
    }

    Trainer& trainer() { return *trainer_; }
    const ProjectConfig& config() const { return trainer_->config(); }
    int64_t run_id() const { return run_id_; }
    const std::string& loaded_checkpoint() const { return loaded_checkpoint_; } // "" for a new run
    // The reopened run died before its first checkpoint: it starts again from step 0 (the
    // seed makes that the same run), and claim() drops all that the attempt recorded but the
    // user's precision changes (RunStore::start_run_over).
    bool starts_over() const { return starts_over_; }
    // What the resume's overrides changed in the stored settings (describe_setting_changes
    // writes them out): claim() stores the new settings as the run's, so that show, compare and
    // a later resume describe the run as it now trains, and the resume event says what changed.
    const std::vector<SettingChange>& config_changes() const { return config_changes_; }
    // Checkpoints the store recorded after the one the resume loaded, up to the run's last
    // committed step, whose files are gone (deleted or moved by hand): "step N ('path')" each.
    // Not damage (nothing was read), but steps the resume trains again.
    const std::vector<std::string>& missing_checkpoints() const { return missing_checkpoints_; }
    // Settings an earlier resume changed at a later step than the checkpoint this one loaded
    // (the newer checkpoints damaged or gone): the run's stored settings are those, so they now
    // apply from the loaded step on. "the settings the resume at step N changed (key a -> b, ...)
    // apply from step M on", joined by "; "; "" for none. The resume event says it too.
    const std::string& settings_moved_earlier() const { return settings_moved_earlier_; }

private:
    RunSession() = default;
    void attach(RunStore& store, int64_t run_id, const std::string& uuid, const std::string& dir);
    bool on_checkpoint_written(const Trainer::CheckpointWrite& write);

    std::unique_ptr<Trainer> trainer_;
    RunStore* store_ = nullptr;
    std::atomic<int64_t> run_id_{-1}; // read by a server's threads (run --serve listens before the run is made)
    std::string loaded_checkpoint_;
    bool starts_over_ = false;
    bool dropped_after_checkpoint_ = false; // by claim(): the resume event says so
    // The resume's settings change what the layers compute in: the interrupted run's live
    // changes from the checkpoint on are not made again, and claim() drops their records.
    bool live_changes_superseded_ = false;
    std::vector<SettingChange> config_changes_;
    std::vector<std::string> missing_checkpoints_;
    std::string settings_moved_earlier_;
    int64_t checkpoints_failed_ = 0;       // this session's, for SessionOutcome
    std::string last_checkpoint_error_;    // of the newest write, "" where it was written
    int64_t newest_checkpoint_step_ = -1;
    std::string resumed_config_json_; // the settings the resume trains with, when they changed
    TelemetrySink* live_sink_ = nullptr; // the fan-out while run() is in progress
    int64_t rows_lost_at_start_ = 0;      // the store's rows_lost() when run() began
};

} // namespace mantissa
