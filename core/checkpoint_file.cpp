// SPDX-License-Identifier: GPL-3.0-or-later
#include "checkpoint_file.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <torch/torch.h>

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
    return std::stoll(digits);
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

std::optional<CheckpointIdentity> read_checkpoint_identity(const std::string& path)
{
    try {
        torch::serialize::InputArchive archive;
        archive.load_from(path);
        c10::IValue value;
        if (!archive.try_read("identity", value) || !value.isString()) return std::nullopt;
        auto id = parse_identity_text(value.toStringRef());
        if (id.run_uuid.empty()) return std::nullopt;
        return id;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

namespace {

uint32_t crc32(std::string_view bytes)
{
    static const auto table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[i] = c;
        }
        return t;
    }();
    uint32_t c = 0xFFFFFFFFu;
    for (const char b : bytes) c = table[(c ^ static_cast<unsigned char>(b)) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

// Little-endian fields at `at`; nullopt past the end, so that a cut file reads as damaged.
std::optional<uint64_t> field(std::string_view bytes, uint64_t at, int size)
{
    if (at > bytes.size() || bytes.size() - at < static_cast<uint64_t>(size)) return std::nullopt;
    uint64_t v = 0;
    for (int i = size - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + static_cast<uint64_t>(i)]);
    return v;
}

} // namespace

std::string zip_damage(std::string_view bytes)
{
    // The end-of-central-directory record: 22 bytes plus a comment of up to 64 KiB.
    const uint64_t size = bytes.size();
    std::optional<uint64_t> eocd;
    for (uint64_t back = 22; back <= std::min<uint64_t>(size, 22 + 0xFFFF) && !eocd; ++back)
        if (field(bytes, size - back, 4) == 0x06054b50u) eocd = size - back;
    if (!eocd) return "it is not a complete zip archive (no end-of-directory record)";
    uint64_t entries = *field(bytes, *eocd + 10, 2), directory = *field(bytes, *eocd + 16, 4);
    if (entries == 0xFFFF || directory == 0xFFFFFFFFu) { // zip64: the locator sits just before
        const auto locator = *eocd >= 20 ? field(bytes, *eocd - 20, 4) : std::nullopt;
        const auto record = *eocd >= 20 ? field(bytes, *eocd - 12, 8) : std::nullopt;
        if (locator != 0x07064b50u || !record || field(bytes, *record, 4) != 0x06064b50u)
            return "its zip64 directory record is missing";
        entries = field(bytes, *record + 32, 8).value_or(0);
        directory = field(bytes, *record + 48, 8).value_or(size);
    }
    uint64_t at = directory;
    for (uint64_t i = 0; i < entries; ++i) {
        if (field(bytes, at, 4) != 0x02014b50u) return "its zip directory is damaged (entry " + std::to_string(i) + ")";
        const auto method = field(bytes, at + 10, 2), crc = field(bytes, at + 16, 4);
        uint64_t compressed = field(bytes, at + 20, 4).value_or(0), offset = field(bytes, at + 42, 4).value_or(0);
        const uint64_t name_length = field(bytes, at + 28, 2).value_or(0), extra_length = field(bytes, at + 30, 2).value_or(0),
                       comment_length = field(bytes, at + 32, 2).value_or(0);
        if (!method || !crc || at + 46 + name_length > size) return "its zip directory is cut short";
        const std::string name(bytes.substr(at + 46, name_length));
        // Zip64 sizes and offsets: the extra field 0x0001 holds those whose 32-bit field is all ones.
        const uint64_t uncompressed32 = field(bytes, at + 24, 4).value_or(0);
        for (uint64_t x = at + 46 + name_length; x + 4 <= at + 46 + name_length + extra_length;) {
            const uint64_t id = field(bytes, x, 2).value_or(0), length = field(bytes, x + 2, 2).value_or(0);
            if (id == 1) {
                uint64_t y = x + 4;
                if (uncompressed32 == 0xFFFFFFFFu) y += 8;
                if (compressed == 0xFFFFFFFFu) {
                    compressed = field(bytes, y, 8).value_or(size);
                    y += 8;
                }
                if (offset == 0xFFFFFFFFu) offset = field(bytes, y, 8).value_or(size);
            }
            x += 4 + length;
        }
        if (field(bytes, offset, 4) != 0x04034b50u) return "record '" + name + "' is missing";
        const uint64_t data = offset + 30 + field(bytes, offset + 26, 2).value_or(0) + field(bytes, offset + 28, 2).value_or(0);
        if (data > size || size - data < compressed) return "record '" + name + "' is cut short";
        if (*method == 0 && crc32(bytes.substr(data, compressed)) != *crc)
            return "record '" + name + "' does not match its CRC-32";
        at += 46 + name_length + extra_length + comment_length;
    }
    return {};
}

FileChecksum checksum_file(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("checkpoint '" + path + "' cannot be opened");
    uint64_t hash = 0xcbf29ce484222325ULL; // FNV-1a offset basis and prime
    int64_t bytes = 0;
    std::vector<char> buffer(1 << 16);
    while (in) {
        in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        const auto n = in.gcount();
        for (std::streamsize i = 0; i < n; ++i) {
            hash ^= static_cast<unsigned char>(buffer[static_cast<size_t>(i)]);
            hash *= 0x100000001b3ULL;
        }
        bytes += n;
    }
    if (in.bad()) throw std::runtime_error("checkpoint '" + path + "' cannot be read");
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
    return {std::string("fnv1a64:") + hex, bytes};
}

} // namespace mantissa
