// SPDX-License-Identifier: GPL-3.0-or-later
#include "checkpoint_weights.h"
#include "checkpoint_archive.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "first_line.h"
#include "mapped_file.h"
#include "safetensors_writer.h"
#include "zip_records.h"

namespace mantissa {

void open_checkpoint_archive(const std::string& path, torch::serialize::InputArchive& archive)
{
    // Mapped, not read into a string a character at a time: that took 2.8 s a GB and held the
    // file twice at its peak, before the archive copied every tensor out of it once more (read-
    // only audit 'ckpt-scale').
    const MappedFile file(path);
    if (file.error() != 0) throw std::runtime_error("cannot be opened: " + std::string(std::strerror(file.error())));
    const std::string_view bytes = file.bytes();
    if (const std::string damage = zip_damage(bytes); !damage.empty())
        throw ConfigError("checkpoint '" + path + "' cannot be read: " + damage);
    archive.load_from(bytes.data(), bytes.size(), torch::Device(torch::kCPU));
}

void rethrow_checkpoint_load_failure(const std::string& path)
{
    const std::string loading = "checkpoint '" + path + "' could not be loaded: out of memory";
    try {
        throw;
    } catch (const ConfigError&) {
        throw;
    } catch (const c10::OutOfMemoryError& e) {
        throw std::runtime_error(loading + ": " + first_line(e));
    } catch (const std::bad_alloc&) {
        throw std::runtime_error(loading);
    } catch (const std::exception& e) {
        // "[enforce fail at alloc_cpu.cpp] DefaultCPUAllocator: can't allocate memory"
        const std::string what = first_line(e);
        if (what.find("DefaultCPUAllocator") != std::string::npos) throw std::runtime_error(loading + ": " + what);
        throw ConfigError("checkpoint '" + path + "' cannot be read: " + what);
    }
}

CheckpointIdentity read_checkpoint_header(const std::string& path, torch::serialize::InputArchive& archive)
{
    torch::Tensor version;
    archive.read("format_version", version);
    // Refused, not taken for damage: a resume would fall back to an older checkpoint, drop the
    // steps after it and write over the newer Mantissa's file when it trains that step again.
    if (const int64_t v = version.item<int64_t>(); v != kCheckpointFormatVersion)
        throw CheckpointMismatch("checkpoint '" + path + "' is format version " + std::to_string(v) +
                                 (v > kCheckpointFormatVersion ? ", written by a newer Mantissa" : "") +
                                 "; this build reads version " + std::to_string(kCheckpointFormatVersion) +
                                 "; nothing was changed");
    CheckpointIdentity identity;
    if (c10::IValue stored; archive.try_read("identity", stored) && stored.isString())
        identity = parse_identity_text(stored.toStringRef());
    return identity;
}

int64_t export_checkpoint_weights(const std::string& checkpoint, const std::string& out,
                                          const CheckpointIdentity& expected, std::map<std::string, std::string> metadata)
{
    static const std::string kModel = "model/";
    int64_t step = 0;
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    try {
        torch::serialize::InputArchive archive;
        open_checkpoint_archive(checkpoint, archive); // as the trainer's resume opens it
        refuse_another_runs_checkpoint(checkpoint, read_checkpoint_header(checkpoint, archive), expected);
        torch::Tensor stored_step;
        archive.read("step", stored_step);
        step = stored_step.item<int64_t>();
        for (const auto& key : archive.keys()) {
            if (key.rfind(kModel, 0) != 0) continue;
            torch::Tensor t;
            archive.read(key, t);
            tensors.emplace_back(key.substr(kModel.size()), t);
        }
        if (tensors.empty()) throw ConfigError("checkpoint '" + checkpoint + "' holds no model weights");
    } catch (const std::exception&) {
        rethrow_checkpoint_load_failure(checkpoint); // out of memory is no damage, as in a resume
    }
    metadata["step"] = std::to_string(step);
    try {
        write_safetensors(out, tensors, metadata);
    } catch (const std::exception& e) {
        throw WeightsWriteError(e.what());
    }
    return step;
}

} // namespace mantissa
