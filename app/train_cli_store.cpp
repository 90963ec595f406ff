// SPDX-License-Identifier: GPL-3.0-or-later
// mantissa-train's commands on saved runs: list, show, rename, delete, export, tag, untag.
#include "train_cli.h"

#include <cstdio>
#include <cctype>
#include <cstring>
#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string_view>

#include "checkpoint_file.h"
#include "checkpoint_weights.h"
#include "cli_table.h"
#include "csv_export.h"
#include "durable_file.h"
#include "run_session.h"
#include "run_store.h"
#include "tensorboard_export.h"
#include "trainer.h"

namespace mantissa {

std::optional<RunInfo> find_or_complain(RunStore& store, const std::string& run, RunUse use, std::FILE* err)
{
    auto info = store.find_run(run);
    if (!info) {
        std::fprintf(err, "error: no run '%s' in %s\n", run.c_str(), store.path().c_str());
        return info;
    }
    if (std::to_string(info->id) == run) { // an id names one run; a run named by digits is said
        // A name of digits comes from a project's name or a GUI rename (`run --name` refuses it):
        // `export 2` took run id 2 without a word while the user meant the run named "2".
        std::string named;
        for (const auto& r : store.list_runs())
            if (r.name == run && r.id != info->id) named += (named.empty() ? "" : ", ") + std::to_string(r.id);
        if (!named.empty())
            std::fprintf(err, "note: '%s' is taken as run id %lld; run%s %s %s named '%s' (give %s id)\n", run.c_str(),
                         static_cast<long long>(info->id), named.find(',') == std::string::npos ? "" : "s",
                         named.c_str(), named.find(',') == std::string::npos ? "is" : "are", run.c_str(),
                         named.find(',') == std::string::npos ? "its" : "their");
        return info;
    }
    // Every run of a project takes the project's name: a name may name many. The newest is
    // read; changing (deleting!) one of several by name is refused.
    std::string ids;
    int named = 0;
    for (const auto& r : store.list_runs())
        if (r.name == run) {
            ids += (named++ ? ", " : "") + std::to_string(r.id);
        }
    if (named < 2) return info;
    if (use == RunUse::Change) {
        std::fprintf(err, "error: '%s' names %d runs in %s (%s): give the id of the one to change\n", run.c_str(),
                     named, store.path().c_str(), ids.c_str());
        return std::nullopt;
    }
    std::fprintf(err, "note: '%s' names %d runs (%s): this is the newest, run %lld; give an id for another\n",
                 run.c_str(), named, ids.c_str(), static_cast<long long>(info->id));
    return info;
}

int cmd_show(RunStore& store, const std::string& run, const CliStreams& io)
{
    auto info = find_or_complain(store, run, RunUse::Read, io.err);
    if (!info) return 2;
    std::fprintf(io.out, "run %lld '%s'\nstatus: %s\nproject: %s\ncreated: %s\nfinished: %s\nsteps: %lld\n",
                 static_cast<long long>(info->id), info->name.c_str(), std::string(run_status_name(info->status)).c_str(),
                 info->project_path.c_str(), info->created_at.c_str(), info->finished_at.c_str(),
                 static_cast<long long>(info->last_step));
    // A diverged run's last loss is NaN, and says so ("nan").
    if (const auto train = store.last_scalar(info->id, "train/loss"))
        std::fprintf(io.out, "last train loss: %.4f\n", unsigned_nan(train->value));
    if (const auto val = store.last_scalar(info->id, "val/loss"))
        std::fprintf(io.out, "last val loss: %.4f (step %lld)\n", unsigned_nan(val->value),
                     static_cast<long long>(val->step));
    std::fprintf(io.out, "events:\n");
    const auto events = store.events(info->id);
    int kind_width = 12; // the longest kind, so that the messages start in one column
    for (const auto& e : events) kind_width = std::max(kind_width, static_cast<int>(e.kind.size()));
    for (const auto& e : events) {
        // One line per event: a sample's text keeps its line breaks as the Monitor's log shows them.
        std::string message = e.message;
        for (size_t at = 0; (at = message.find('\n', at)) != std::string::npos; at += 5)
            message.replace(at, 1, " \u21b5 ");
        std::fprintf(io.out, "  step %6lld  %-*s  %s\n", static_cast<long long>(e.step), kind_width, e.kind.c_str(),
                     message.c_str());
    }
    std::fprintf(io.out, "config:\n%s\n", info->config_json.c_str());
    return 0;
}

int cmd_rename(RunStore& store, const std::string& run, const std::string& new_name)
{
    auto info = find_or_complain(store, run, RunUse::Change);
    if (!info) return 2;
    if (const std::string problem = run_name_problem(new_name); !problem.empty()) {
        std::fprintf(stderr, "error: the new name %s\n", problem.c_str());
        return 2;
    }
    store.rename_run(info->id, new_name);
    std::printf("run %lld renamed '%s' -> '%s'\n", static_cast<long long>(info->id), info->name.c_str(), new_name.c_str());
    return 0;
}

int cmd_delete(RunStore& store, const std::string& run)
{
    auto info = find_or_complain(store, run, RunUse::Change);
    if (!info) return 2;
    if (info->status == RunStatus::Running) {
        std::fprintf(stderr, "error: run %lld is running; stop it first\n", static_cast<long long>(info->id));
        return 2;
    }
    const DeletedRun deleted = delete_run_with_checkpoints(store, info->id);
    std::printf("deleted run %lld '%s'", static_cast<long long>(info->id), info->name.c_str());
    if (deleted.checkpoints_removed > 0)
        std::printf(" and its %d checkpoint%s (%lld bytes)", deleted.checkpoints_removed,
                    deleted.checkpoints_removed == 1 ? "" : "s", static_cast<long long>(deleted.bytes_removed));
    std::printf("\n");
    for (const auto& file : deleted.kept) std::printf("  kept %s\n", file.c_str());
    return 0;
}

namespace {

// The first character of a file that is not blank (a UTF-8 byte-order mark skipped), or 0:
// what tells a JSON document from the CSV an export writes (a safetensors file starts with
// its header's length).
char first_text_char(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::string head(256, '\0');
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    head.resize(static_cast<size_t>(in.gcount()));
    // A safetensors file's 8-byte length holds NUL bytes (and may read " {"): no text at all.
    if (head.find('\0') != std::string::npos) return '\0';
    size_t at = head.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
    while (at < head.size() && std::isspace(static_cast<unsigned char>(head[at]))) ++at;
    return at < head.size() ? head[at] : '\0';
}

// Why an export must not write at `out`, or "": an export writes a new file in the path's
// place, so a device, a FIFO, a link or a folder there would be replaced (a copy of /dev/null
// became a CSV file), and the run store's own files or the run's checkpoints would be lost
// (`--out runs.sqlite` wiped every run).
std::string export_target_problem(RunStore& store, int64_t run_id, const std::string& out)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    // No run's checkpoints, and no new file among them: any run's, not only the exported
    // one's (another run's checkpoint was replaced by a CSV), by where this store keeps them
    // now (a store copied elsewhere with its folder: the records hold the old absolute paths).
    const auto in_folder = [&](const std::string& dir) {
        std::error_code e;
        const auto folder = fs::weakly_canonical(dir, e);
        return !e && fs::weakly_canonical(out, e).parent_path() == folder && !e;
    };
    const auto whose = [&](int64_t id) {
        return std::to_string(id) + (id == run_id ? "" : " (not the one exported)");
    };
    const auto runs = store.list_runs();
    const auto status = fs::symlink_status(out, ec);
    if (!ec && status.type() != fs::file_type::not_found) {
        if (status.type() != fs::file_type::regular) {
            const char* what = status.type() == fs::file_type::directory ? "a folder"
                               : status.type() == fs::file_type::symlink
                                   ? "a symbolic link"
                                   : "not a regular file (a device, FIFO or socket)";
            return "--out '" + out + "' is " + what + ", which the export would replace; give the path of a file";
        }
        const auto same = [&](const std::string& path) { return fs::equivalent(out, path, ec) && !ec; };
        if (same(store.path())) return "--out '" + out + "' is the run store's own file";
        for (const auto& run : runs)
            for (const auto& row : store.checkpoints(run.id))
                if (same(row.path)) return "--out '" + out + "' is a checkpoint of run " + whose(run.id);
        // Another store's file, checkpoint or project, which no export writes: `--out b.sqlite`
        // replaced every run of b.sqlite with a CSV table, exit 0 ("wrote b.sqlite"), as the
        // GUI's export already refused (read-only audit 'badinput').
        const std::string keep = ": it was not replaced; remove it first or pick another file";
        if (RunStore::is_sqlite_file(out)) return "--out '" + out + "' is an SQLite database (another run store?)" + keep;
        if (read_checkpoint_ownership(out).readable) return "--out '" + out + "' is a Mantissa checkpoint" + keep;
        if (first_text_char(out) == '{') return "--out '" + out + "' holds JSON (a project?)" + keep;
    }
    const auto named = [&](const std::string& path) {
        std::error_code e;
        const auto a = fs::weakly_canonical(out, e);
        return !e && a == fs::weakly_canonical(path, e) && !e;
    };
    for (const auto& side : kStoreSideFiles)
        if (named(store.path() + side.suffix)) return "--out '" + out + "' is " + side.what;
    // A run's lock file replaced while it trains reads as a dead run, which a resume then takes.
    if (in_folder(store.path() + ".locks")) return "--out '" + out + "' is in the run store's lock folder";
    for (const auto& run : runs)
        if (in_folder(store.checkpoint_dir(run.id)) || in_folder(store.legacy_checkpoint_dir(run.id)))
            return "--out '" + out + "' is in the checkpoint folder of run " + whose(run.id);
    return {};
}

// A run's newest good checkpoint as safetensors at out_path; the exit code.
int export_weights(RunStore& store, const RunInfo& info, const std::string& out_path, const CliStreams& io)
{
    try {
        const auto w = RunSession::export_weights(store, info, out_path, [&io](const RunEvent& e) {
            std::fprintf(io.err, "warning: %s\n", e.message().c_str()); // shown, never recorded
        });
        std::fprintf(io.out, "run %lld '%s' at step %lld from %s\n", static_cast<long long>(info.id),
                     info.name.c_str(), static_cast<long long>(w.step), w.checkpoint.c_str());
    } catch (const CheckpointUnusable& e) {
        std::fprintf(io.err, "error: %s\n", e.what());
        return 3;
    } catch (const ConfigError& e) {
        std::fprintf(io.err, "error: %s\n", e.what());
        return 2;
    } catch (const WeightsWriteError& e) { // a full disk, a missing folder: an earlier file stays
        std::fprintf(io.err, "error: %s\n", e.what());
        return 2;
    } catch (const StoreError&) {
        throw; // the store's problem: exit 3, as everywhere
    } catch (const std::exception& e) { // out of memory: the file is fine, this machine is short
        std::fprintf(io.err, "error: %s\n", e.what());
        return 1;
    }
    std::fprintf(io.err, "wrote %s\n", out_path.c_str());
    return 0;
}

} // namespace

int cmd_export(RunStore& store, const std::string& run, const std::string& format, const std::string& table,
               const std::string& out_path, const CliStreams& io)
{
    // Taken as asked, a TensorBoard export of the events would be one of the metrics.
    if (format != "csv" && !table.empty()) {
        std::fprintf(io.err, "error: --table chooses a CSV table; --format %s writes %s\n", format.c_str(),
                     format == "safetensors" ? "the weights" : "the metrics and the exponent histograms");
        return 2;
    }
    auto info = find_or_complain(store, run, RunUse::Read, io.err);
    if (!info) return 2;
    if (const std::string problem = format == "tensorboard" || out_path == "-" || out_path.empty()
                                        ? std::string()
                                        : export_target_problem(store, info->id, out_path);
        !problem.empty()) {
        std::fprintf(io.err, "error: %s\n", problem.c_str());
        return 2;
    }
    if (format == "tensorboard") {
        if (out_path.empty() || out_path == "-") {
            std::fprintf(io.err, "error: --format tensorboard needs --out DIR\n");
            return 2;
        }
        // Written as it is read (a long run's histograms are never held whole), in place once
        // the read stands; a read done again drops this one's file and writes its own.
        std::shared_ptr<TensorBoardExport> board;
        try {
            board = std::make_shared<TensorBoardExport>(store, info->id, out_path);
        } catch (const ExportWriteError& e) {
            std::fprintf(io.err, "error: %s\n", e.what());
            return 2;
        }
        if (board->empty()) { // an empty run in TensorBoard's list
            std::fprintf(io.err, "error: run %lld has recorded no metrics yet: nothing was written\n",
                         static_cast<long long>(info->id));
            return 2;
        }
        return after_the_read(io, [io, board] {
            try {
                std::fprintf(io.err, "wrote %s\n", board->commit().c_str());
            } catch (const ExportWriteError& e) {
                std::fprintf(io.err, "error: %s\n", e.what());
                return 2;
            }
            return 0;
        });
    }
    if (format == "safetensors") {
        if (out_path.empty() || out_path == "-") {
            std::fprintf(io.err, "error: --format safetensors needs --out FILE\n");
            return 2;
        }
        // Straight from the checkpoint file: neither the run's data nor its GPU is needed. After
        // the read, as it writes; it reads the run's checkpoint rows again then, from the store
        // the read left open.
        return after_the_read(io, [io, info = *info, &store, &out_path] {
            return export_weights(store, info, out_path, io);
        });
    }
    // No --table: the metrics. Written as it is read: a long run's table is never held whole.
    const auto write = table == "events"   ? write_events_csv
                       : table == "layers" ? write_layer_stats_csv
                                           : write_metrics_csv;
    if (out_path.empty() || out_path == "-") {
        // Held until the read stands (run_reading_command; past 16 MiB in a file in $TMPDIR): a
        // cut table must not read as a whole one, and one that could not all be held is not printed.
        bool written = true;
        write(store, info->id, [&written, &io](std::string_view piece) {
            written = written && std::fwrite(piece.data(), 1, piece.size(), io.out) == piece.size();
        });
        if (!written || std::fflush(io.out) != 0 || std::ferror(io.out)) {
            std::fprintf(io.err, "error: cannot hold the table until the read stands: %s\n", std::strerror(errno));
            return 2;
        }
        return 0;
    }
    // Beside --out while it is read, in its place once the read stands: whole or not at all (an
    // earlier file stays on failure). A read done again drops this one's file and writes its own.
    std::shared_ptr<DurableFile> file;
    try {
        file = std::make_shared<DurableFile>(out_path);
        write(store, info->id, [&file](std::string_view piece) { file->write(piece); });
    } catch (const StoreError&) {
        throw; // the store's, not the output's: run_reading_command reads again or reports it
    } catch (const std::exception& e) { // the output's: a folder that is not there, a full disk
        std::fprintf(io.err, "error: %s\n", e.what());
        return 2;
    }
    return after_the_read(io, [io, file, &out_path] {
        try {
            file->commit();
        } catch (const std::exception& e) {
            std::fprintf(io.err, "error: %s\n", e.what());
            return 2;
        }
        std::fprintf(io.err, "wrote %s\n", out_path.c_str());
        return 0;
    });
}

int cmd_tag(RunStore& store, const std::string& run, const std::vector<std::string>& tags, bool remove)
{
    auto info = find_or_complain(store, run, RunUse::Change);
    if (!info) return 2;
    if (remove) { // a typo in the tag removed nothing, without a word
        const auto had = store.tags(info->id);
        for (const auto& tag : tags)
            if (std::find(had.begin(), had.end(), tag) == had.end())
                std::fprintf(stderr, "note: run %lld has no tag '%s'\n", static_cast<long long>(info->id), tag.c_str());
    }
    try {
        if (remove) store.remove_tags(info->id, tags);
        else store.add_tags(info->id, tags);
    } catch (const StoreArgumentError& e) { // an empty tag; the store's own failures are exit 3
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    std::printf("run %lld '%s' tags: %s\n", static_cast<long long>(info->id), info->name.c_str(),
                join_tags(store.tags(info->id)).c_str());
    return 0;
}

int cmd_list(RunStore& store, const CliStreams& io)
{
    std::vector<std::vector<std::string>> rows = {
        {"id", "name", "status", "steps", "recipe", "final val", "tokens/s", "created", "tags"}};
    for (const auto& r : store.list_run_summaries())
        rows.push_back({std::to_string(r.id), r.name, std::string(run_status_name(r.status)), std::to_string(r.steps_done), r.recipe,
                        fmt_recorded_loss(r.final_val_loss, r.final_val_step >= 0), fmt_rate(r.median_tokens_per_s), r.created_at, join_tags(r.tags)});
    print_table(rows, {true, false, false, true, false, true, true, false, false}, "", io.out);
    return 0;
}

} // namespace mantissa
