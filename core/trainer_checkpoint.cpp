// SPDX-License-Identifier: GPL-3.0-or-later
// Checkpoints: everything a bit-exact resume needs, written atomically, and their rotation.
#include "trainer_impl.h"
#include "checkpoint_archive.h"
#include "build_info.h"
#include "durable_file.h"
#include "first_line.h"
#include "fnv1a.h"
#include "zip_records.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include <cerrno>
#include <cstring>

namespace mantissa {

void Trainer::Impl::write_state(const std::function<void(const char*, size_t)>& out)
{
    torch::serialize::OutputArchive archive;
    archive.write("format_version", torch::tensor(kCheckpointFormatVersion));
    archive.write("identity", c10::IValue(identity_text(current_identity())));
    archive.write("step", torch::tensor(step));
    archive.write("data_fingerprint", c10::IValue(data_fingerprint_text()));
    for (const auto& item : model->named_parameters()) archive.write("model/" + item.key(), item.value());
    optimizer->save(archive);
    const auto sc = scaler.state();
    archive.write("scaler", torch::tensor({sc.scale, static_cast<double>(sc.growth_tracker),
                                           static_cast<double>(sc.overflows_left)},
                                          torch::kFloat64));
    // The scale the gradients were multiplied by (1 while scaling is off, whatever the state
    // holds): what the FP8 gradient histories measured under, for a resume under another mode.
    archive.write("loss_scale_in_effect", torch::tensor(scaler.scale(), torch::kFloat64));
    // Whether the `scaler` state was in use: an unscaled run's holds an init_scale it never
    // trained with, which a resume that turns scaling on must not take over its own.
    archive.write("loss_scaling_on", torch::tensor(int64_t(scaler.enabled())));
    for (const auto& g : model->gemm_layers()) g->save(archive);
    archive.write("rng/global", at::detail::getDefaultCPUGenerator().get_state());
    archive.write("rng/train_batches", train_batches->generator().get_state());
    // Dropout on a GPU draws from the device's own generator (Philox seed and offset).
    if (device.is_cuda()) {
        at::Generator generator = at::globalContext().defaultGenerator(device);
        std::lock_guard<std::mutex> lock(generator.mutex()); // as the load takes it, and PyTorch does
        archive.write("rng/cuda", generator.get_state());
    }
    archive.write("watchers", c10::IValue(watchers.state_text()));
    // ATen's CPU reductions split their work by thread: the count is part of a CPU run's
    // arithmetic (the resume says so when it changes). A GPU run's is not.
    if (!device.is_cuda()) archive.write("cpu_threads", torch::tensor(int64_t(threads)));
    archive.write("arithmetic", c10::IValue(arithmetic_text(true)));
    // Through a writer that never fails the archive: an error thrown into torch's zip writer (a
    // full disk, memory out) made it throw again from its destructor, which ended the process
    // (SIGABRT) and left the run "running". The first error is kept and thrown once the archive
    // is done; what comes after it is dropped.
    std::exception_ptr failed;
    archive.save_to([&](const void* data, size_t n) -> size_t {
        if (!failed) {
            try {
                out(static_cast<const char*>(data), n);
            } catch (...) {
                failed = std::current_exception();
            }
        }
        return n;
    });
    if (failed) std::rethrow_exception(failed);
}

std::string Trainer::Impl::serialize_state()
{
    std::string bytes;
    try {
        write_state([&](const char* data, size_t n) { bytes.append(data, n); });
    } catch (const std::bad_alloc&) {
        const size_t held = bytes.size();
        std::string().swap(bytes);
        throw std::runtime_error("out of memory while serialising the checkpoint (" + std::to_string(held >> 20) +
                                 " MiB of it were held)");
    }
    return bytes;
}

std::string Trainer::Impl::arithmetic_text(bool cpu_kernels) const
{
    // ATen picks its CPU kernels by the vector instructions it finds (or ATEN_CPU_CAPABILITY):
    // its AVX2 and AVX-512 kernels sum in different orders, so a run resumed on a machine
    // without AVX-512 rounds differently, and under nvfp4 the difference grows within steps.
    const EngineVersions versions = engine_versions();
    std::string text = cpu_kernels ? "the CPU (ATen's " + versions.cpu_kernels + " kernels)" : "the CPU";
    if (device.is_cuda()) {
        const GpuInfo gpu = current_gpu();
        text = (gpu.name.empty() ? std::string("a GPU") : gpu.name) + " (sm_" + std::to_string(gpu.capability.major) +
               std::to_string(gpu.capability.minor) + (config.training.deterministic ? ", deterministic" : "") + ")";
    }
    text += std::string(", the ") + (executor == GemmBackend::Native ? "native" : "emulated") + " executor";
    return text + ", LibTorch " + versions.libtorch;
}

std::string arithmetic_change(const std::string& recorded, const std::string& now,
                              const std::string& now_without_cpu_kernels)
{
    if (recorded.empty()) return {}; // a checkpoint from before it was kept says nothing
    // A CPU checkpoint from before the kernels were named ("the CPU, ...") is held to what it named.
    const std::string& compared = recorded.starts_with("the CPU,") ? now_without_cpu_kernels : now;
    if (recorded == compared) return {};
    return "trained on " + recorded + ", continuing on " + compared + ": not bit-identical to a run never stopped";
}

FileChecksum Trainer::Impl::save_checkpoint(const std::string& path)
{
    namespace fs = std::filesystem;
    const fs::path target(path);
    if (target.has_parent_path()) fs::create_directories(target.parent_path());
    // Streamed into a temporary file, flushed, then renamed (atomic on POSIX: a crash leaves the
    // old file or the new one); a full disk leaves no half-written file behind. The whole
    // checkpoint was built in host memory first, 24 bytes a parameter at its peak even for a
    // GPU run (3 GB for an 85 M model), and the file was read again for its checksum: both come
    // out of this one pass now (read-only audit 'ckpt-scale'). LibTorch's own file writer is
    // not used: it finishes the zip in its destructor, and a full disk aborted the process.
    DurableFile file(path);
    Fnv1a64 hash;
    int64_t bytes = 0;
    constexpr size_t kPiece = size_t(8) << 20; // the zip writer's many small calls, gathered
    std::string piece;
    piece.reserve(kPiece);
    write_state([&](const char* data, size_t n) {
        hash.add(data, n);
        bytes += static_cast<int64_t>(n);
        if (piece.size() + n > kPiece) {
            file.write(piece);
            piece.clear();
        }
        if (n >= kPiece) file.write(std::string_view(data, n)); // a tensor's storage: as it is
        else piece.append(data, n);
    });
    file.write(piece);
    file.commit();
    return {hash.text(), bytes};
}

bool Trainer::Impl::is_our_checkpoint(const std::string& path)
{
    if (identity.run_uuid.empty()) return true; // no run attached: the folder is the caller's alone
    if (const auto known = checkpoint_is_ours.find(path); known != checkpoint_is_ours.end()) return known->second;
    // A checkpoint without an identity predates identities: it can only be this run's own. A
    // file that cannot be read may be anyone's (a shared training.checkpoint_dir): it is never
    // rotated away.
    const auto theirs = read_checkpoint_ownership(path);
    const bool ours = theirs.readable && (!theirs.identity || theirs.identity->run_uuid == identity.run_uuid);
    checkpoint_is_ours[path] = ours;
    return ours;
}

const std::string& Trainer::Impl::data_fingerprint_text() const
{
    if (data_fingerprint_.empty()) data_fingerprint_ = data_fingerprint(data); // once: the data never changes
    return data_fingerprint_;
}

CheckpointIdentity Trainer::Impl::current_identity() const
{
    CheckpointIdentity id = identity;
    id.model_shape = model_shape_text(config.model, static_cast<int64_t>(data.vocabulary.size()));
    return id;
}

std::string Trainer::Impl::whose_model(const CheckpointIdentity& theirs) const
{
    if (theirs.model_shape.empty()) return {};
    return "; it holds the model of " + describe_identity(theirs) + ": " + theirs.model_shape + ", this one is " +
           current_identity().model_shape;
}

void Trainer::Impl::load_checkpoint(const std::string& path)
{
    load_archive(path, [&](torch::serialize::InputArchive& archive) {
        // Checked, onto the CPU first; load_archive moves each tensor to where this trainer keeps it.
        open_checkpoint_archive(path, archive);
    });
    resumed_from_file = true;
    abandoned_checkpoints.clear();
    if (!config.training.checkpoint_dir.empty())
        for (auto& file : list_checkpoints(resolve_data_path(config, config.training.checkpoint_dir))) {
            const auto at = checkpoint_step(file);
            if (at && *at > step && is_our_checkpoint(file)) abandoned_checkpoints.insert(std::move(file));
        }
}

void Trainer::Impl::load_state(std::istream& in, const std::string& source)
{
    load_archive(source, [&](torch::serialize::InputArchive& archive) { archive.load_from(in, torch::Device(torch::kCPU)); });
}

void Trainer::Impl::load_archive(const std::string& path,
                                 const std::function<void(torch::serialize::InputArchive&)>& open)
{
    torch::serialize::InputArchive archive;
    // A fresh tensor per key: reading into a used one would try to resize the archive's storage.
    auto get = [&](const std::string& key) {
        torch::Tensor t;
        archive.read(key, t);
        return t;
    };
    try {
        open(archive);
        const CheckpointIdentity theirs = read_checkpoint_header(path, archive);
        refuse_another_runs_checkpoint(path, theirs, current_identity());
        // Checkpoints from before fingerprints were kept resume on whatever data there is. Before
        // the shapes: other data with another character set makes another vocabulary, which
        // read as "does not fit this model (wte)" and sent the user looking at the model.
        if (c10::IValue trained_on; archive.try_read("data_fingerprint", trained_on) && trained_on.isString() &&
                                    trained_on.toStringRef() != data_fingerprint_text())
            throw CheckpointOfOtherData("checkpoint '" + path + "' was trained on other data (" + trained_on.toStringRef() +
                                     "); the project's data now gives " + data_fingerprint_text() +
                                     ". Resuming would train on other tokens: restore the data the run was "
                                     "trained on, or start a new run");
        // Every shape is checked before the first tensor is copied: a checkpoint of another run
        // or model leaves this trainer as it was. One that turns out unreadable further on (a
        // record missing) may leave it half-loaded: RunSession::reopen then builds a new one.
        for (auto& item : model->named_parameters()) {
            // A parameter the archive lacks is another model's (one with more layers), not
            // damage: a good file must not be skipped, and recorded, as damaged.
            torch::Tensor theirs_value;
            if (!archive.try_read("model/" + item.key(), theirs_value) ||
                !theirs_value.sizes().equals(item.value().sizes()))
                throw CheckpointMismatch("checkpoint '" + path + "' does not fit this model (" + item.key() + ")" +
                                         whose_model(theirs));
        }
        if (!theirs.model_shape.empty() && theirs.model_shape != current_identity().model_shape)
            throw CheckpointMismatch("checkpoint '" + path + "' does not fit this model" + whose_model(theirs));
        torch::NoGradGuard no_grad;
        for (auto& item : model->named_parameters()) item.value().copy_(get("model/" + item.key()));
        optimizer->load(archive);
        // A run that trained unscaled and resumes scaled starts from this run's init_scale, as a
        // live change that turns scaling on does; checkpoints from before 2026-12-07 do not say,
        // and restore the state they hold.
        torch::Tensor scaled_then;
        if (!archive.try_read("loss_scaling_on", scaled_then) || scaled_then.item<int64_t>() != 0) {
            const auto sc = get("scaler");
            scaler.restore({sc[0].item<double>(), static_cast<int64_t>(sc[1].item<double>()),
                            static_cast<int64_t>(sc[2].item<double>())});
        } else {
            scaler = LossScaler(scaler.config()); // a trainer that has trained already drops its own
        }
        for (const auto& g : model->gemm_layers()) g->load(archive);
        follow_formats_with_loss_scaling(/*keep_state=*/true); // the checkpoint's formats, its scale
        // A resume whose settings scale the gradients otherwise (precision.loss_scaling.mode set
        // to dynamic over a run that trained unscaled, or off): the FP8 gradient histories
        // follow, as at a live change (set_layer_formats). Checkpoints before 2026-12-07 do not
        // say the scale in effect; theirs stay as they were.
        if (torch::Tensor then; archive.try_read("loss_scale_in_effect", then))
            rescale_gradient_amaxes(then.item<double>());
        at::Generator global = at::detail::getDefaultCPUGenerator(); // a handle to the shared generator
        global.set_state(get("rng/global"));
        train_batches->generator().set_state(get("rng/train_batches"));
        // A checkpoint written on a GPU continues that GPU's dropout stream; one written on a
        // CPU (none kept) leaves this device's generator as the seed set it.
        if (torch::Tensor cuda_rng; device.is_cuda() && archive.try_read("rng/cuda", cuda_rng)) {
            at::Generator generator = at::globalContext().defaultGenerator(device);
            std::lock_guard<std::mutex> lock(generator.mutex());
            generator.set_state(cuda_rng);
        }
        // Checkpoints from before watcher state was kept resume with fresh watchers.
        if (c10::IValue state; archive.try_read("watchers", state) && state.isString())
            watchers.restore_state(state.toStringRef());
        torch::Tensor cpu_threads;
        resumed_cpu_threads = archive.try_read("cpu_threads", cpu_threads) ? cpu_threads.item<int64_t>() : 0;
        // Checkpoints from before it was kept say nothing of it.
        c10::IValue arithmetic;
        resumed_arithmetic = archive.try_read("arithmetic", arithmetic) && arithmetic.isString()
                                 ? arithmetic.toStringRef()
                                 : std::string();
        step = get("step").item<int64_t>();
        resumed_from = path;
    } catch (const std::exception&) {
        // Out of memory is not damage: a resume that took it for damage would fall back to an
        // older checkpoint and drop the steps after it.
        rethrow_checkpoint_load_failure(path);
    }
}

std::string Trainer::Impl::write_periodic_checkpoint(TelemetrySink& sink)
{
    namespace fs = std::filesystem;
    if (config.training.checkpoint_dir.empty()) return {};
    // Relative to the project file's folder, as data paths are (RunSession passes it absolute).
    const std::string dir = resolve_data_path(config, config.training.checkpoint_dir);
    const std::string path = (fs::path(dir) / checkpoint_file_name(step)).string();
    auto fail = [&](const std::string& reason) {
        RunEvent failed;
        failed.step = step;
        failed.kind = EventKind::CheckpointFailed;
        failed.path = path;
        failed.text = reason;
        sink.on_event(failed);
        if (checkpoint_listener) checkpoint_listener({step, path, failed.text});
        return std::string();
    };
    std::error_code exists_error;
    if (fs::is_directory(path, exists_error)) return fail("a folder is in its place; not overwritten");
    if (fs::exists(path, exists_error) && !is_our_checkpoint(path)) {
        // A file that does not read as a checkpoint (empty, cut, junk) names nobody: saying
        // "another run" sent users looking for a second run that was never there.
        const auto theirs = read_checkpoint_ownership(path);
        if (!theirs.readable)
            return fail("a file that does not read as a checkpoint is in its place (it may be another run's); not "
                        "overwritten: move it away");
        return fail("the file belongs to " + (theirs.identity ? describe_identity(*theirs.identity) : "another run") +
                    " (two runs share training.checkpoint_dir); not overwritten");
    }
    // Rotation keeps the newest `keep` files up to this step. Files of later steps are another
    // future of this run, left when it resumed from an earlier checkpoint (its newest was
    // damaged): counted, they would push out the file just written and keep only them. While
    // the store cannot record checkpoints (a full disk), the newest recorded one stays: a
    // resume trusts no unrecorded file past the store's last committed step.
    // The files of a future this run left when it resumed (abandoned_checkpoints) are not
    // counted: one left by a double Ctrl-C pushed out a recorded checkpoint, and only keep - 1
    // usable ones stayed (read-only audit 'badinput'). Once the run is past one, it goes.
    const auto rotate = [&](size_t keep) {
        std::vector<std::string> existing;
        std::error_code ignored;
        for (auto& file : list_checkpoints(dir)) {
            const auto at = checkpoint_step(file);
            if (!at || *at > step || !is_our_checkpoint(file)) continue;
            if (!abandoned_checkpoints.contains(file)) existing.push_back(std::move(file));
            else if (fs::remove(file, ignored)) abandoned_checkpoints.erase(file);
        }
        const auto newest_recorded = std::find_if(existing.rbegin(), existing.rend(), [&](const std::string& file) {
            return !unrecorded_checkpoints.contains(file);
        });
        for (size_t i = 0; i + keep < existing.size(); ++i)
            if (newest_recorded == existing.rend() || existing[i] != *newest_recorded)
                fs::remove(existing[i], ignored);
    };
    abandoned_checkpoints.erase(path); // written again: this future's now
    // A write that a kill cut short left its temporary file: removed before this write, which on
    // a tight disk it made fail, and every one after it (read-only audit 'ckpt-scale').
    remove_stale_temporaries(dir);
    FileChecksum written;
    try {
        try {
            written = save_checkpoint(path);
        } catch (const NoSpaceError&) {
            // A disk with room for `keep` checkpoints had none for the next one's temporary file
            // (rotation came after a write), and every later checkpoint failed: the oldest goes
            // first, and the write is tried once more.
            const auto keep = static_cast<size_t>(config.training.checkpoint_keep);
            if (keep < 2) throw;
            rotate(keep - 1);
            written = save_checkpoint(path);
        }
    } catch (const std::exception& error) {
        return fail(first_line(error));
    }
    checkpoint_is_ours[path] = true;
    checkpoint_written_at = step;
    // Told before rotation, so the listener (the run store) records the file while it exists.
    if (checkpoint_listener && !checkpoint_listener({step, path, {}, written.checksum, written.bytes}))
        unrecorded_checkpoints.insert(path);
    else unrecorded_checkpoints.erase(path);
    rotate(static_cast<size_t>(config.training.checkpoint_keep));
    RunEvent e;
    e.step = step;
    e.kind = EventKind::Checkpoint;
    e.path = path;
    sink.on_event(e);
    return path;
}

} // namespace mantissa
