// SPDX-License-Identifier: GPL-3.0-or-later
#include "checkpoint_file.h"
#include "mapped_file.h"
#include "fnv1a.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <torch/torch.h>

#include "zip_records.h"

namespace mantissa {

std::string checkpoint_file_name(int64_t step)
{
    char name[40];
    std::snprintf(name, sizeof name, "step-%08lld.pt", static_cast<long long>(step));
    return name;
}

std::optional<int64_t> checkpoint_step(const std::string& path)
{
    const std::string name = std::filesystem::path(path).filename().string();
    constexpr size_t kPrefix = 5, kSuffix = 3; // "step-", ".pt"
    if (name.size() <= kPrefix + kSuffix || name.rfind("step-", 0) != 0 ||
        name.compare(name.size() - kSuffix, kSuffix, ".pt") != 0)
        return std::nullopt;
    const std::string digits = name.substr(kPrefix, name.size() - kPrefix - kSuffix);
    if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return std::nullopt;
    // Only the name a checkpoint is written under: "step-5.pt" or "step-0010.pt" is a user's
    // copy, which resume would try and rotation delete.
    const int64_t step = std::stoll(digits);
    if (name != checkpoint_file_name(step)) return std::nullopt;
    return step;
}

std::vector<std::string> list_checkpoints(const std::string& dir)
{
    namespace fs = std::filesystem;
    std::vector<std::pair<int64_t, std::string>> found;
    std::error_code ec;
    if (dir.empty() || !fs::is_directory(dir, ec)) return {};
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (const auto step = checkpoint_step(it->path().string()); step && it->is_regular_file(ec))
            found.emplace_back(*step, it->path().string());
    std::sort(found.begin(), found.end());
    std::vector<std::string> files;
    for (auto& f : found) files.push_back(std::move(f.second));
    return files;
}

std::string model_shape_text(const ModelConfig& m, int64_t vocab_size)
{
    return "n_layer=" + std::to_string(m.n_layer) + " n_head=" + std::to_string(m.n_head) +
           " n_embd=" + std::to_string(m.n_embd) + " context_length=" + std::to_string(m.context_length) +
           " vocab_size=" + std::to_string(vocab_size) + " bias=" + (m.bias ? "1" : "0");
}

// Tab-separated: a model shape has blanks, never tabs.
std::string identity_text(const CheckpointIdentity& id)
{
    return "mantissa-checkpoint-identity-1\t" + id.run_uuid + "\t" + std::to_string(id.run_id) + "\t" + id.model_shape;
}

CheckpointIdentity parse_identity_text(const std::string& text)
{
    std::vector<std::string> fields;
    std::stringstream in(text);
    for (std::string f; std::getline(in, f, '\t');) fields.push_back(f);
    CheckpointIdentity id;
    if (fields.size() != 4 || fields[0] != "mantissa-checkpoint-identity-1") return id;
    id.run_uuid = fields[1];
    try {
        id.run_id = std::stoll(fields[2]);
    } catch (const std::exception&) {
        id.run_id = 0;
    }
    id.model_shape = fields[3];
    return id;
}

std::string describe_identity(const CheckpointIdentity& id)
{
    return "run " + std::to_string(id.run_id) + " (uuid " + (id.run_uuid.empty() ? "unknown" : id.run_uuid) + ")";
}

void refuse_another_runs_checkpoint(const std::string& path, const CheckpointIdentity& theirs,
                                    const CheckpointIdentity& expected)
{
    if (!theirs.run_uuid.empty() && !expected.run_uuid.empty() && theirs.run_uuid != expected.run_uuid)
        throw CheckpointMismatch("checkpoint '" + path + "' belongs to " + describe_identity(theirs) + ", not to " +
                                 describe_identity(expected));
}


CheckpointOwnership read_checkpoint_ownership(const std::string& path)
{
    // Only the archive's pickled values (data.pkl, a few kB) are read, not its tensors: a large
    // model's checkpoint is gigabytes, and rotation and deleting a run ask this of every file.
    // (A file whose bytes are mapped and then cut short by another process raises SIGBUS; the
    // checkpoints asked about are written whole and renamed into place.)
    CheckpointOwnership out;
    const MappedFile file(path);
    const auto pickle = zip_stored_record(file.bytes(), "/data.pkl");
    if (!pickle) return out; // not a zip, damaged, or no values: not a checkpoint to read
    // Another program's archive (a Python torch.save file) has a data.pkl too: only ours holds
    // these keys, each a BINUNICODE string as above.
    const auto has_key = [&](std::string_view key) {
        std::string pickled = "X";
        for (int i = 0; i < 4; ++i) pickled.push_back(static_cast<char>((key.size() >> (8 * i)) & 0xFF));
        pickled += key;
        return pickle->find(pickled) != std::string_view::npos;
    };
    if (!has_key("format_version") || !has_key("scaler") || !has_key("rng/global")) return out;
    out.readable = true;
    // The identity is a string value, which pickle writes as BINUNICODE: 'X', its length in 4
    // bytes little-endian, then the UTF-8 text.
    constexpr std::string_view kMarker = "mantissa-checkpoint-identity-1\t";
    const size_t at = pickle->find(kMarker);
    if (at == std::string_view::npos || at < 5 || (*pickle)[at - 5] != 'X') return out;
    uint32_t length = 0;
    for (int i = 3; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>((*pickle)[at - 4 + size_t(i)]);
    if (length > pickle->size() - at) return out;
    auto id = parse_identity_text(std::string(pickle->substr(at, length)));
    if (!id.run_uuid.empty()) out.identity = std::move(id);
    return out;
}

std::optional<CheckpointIdentity> read_checkpoint_identity(const std::string& path)
{
    return read_checkpoint_ownership(path).identity;
}

FileChecksum checksum_file(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("checkpoint '" + path + "' cannot be opened");
    Fnv1a64 hash;
    int64_t bytes = 0;
    std::vector<char> buffer(1 << 16);
    while (in) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        const auto n = in.gcount();
        hash.add(buffer.data(), static_cast<size_t>(n));
        bytes += n;
    }
    if (in.bad()) throw std::runtime_error("checkpoint '" + path + "' cannot be read");
    return {hash.text(), bytes};
}

} // namespace mantissa
