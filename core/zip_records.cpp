// SPDX-License-Identifier: GPL-3.0-or-later
// Torch-free, so that the fuzz target tests/fuzz/fuzz_checkpoint_zip can feed it any bytes.
#include "zip_records.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>

namespace mantissa {

namespace {

// Eight bytes a step (slicing-by-8, tables of the reflected polynomial): a byte at a time it
// was 3 s a GB, a quarter of a resume's time (read-only audit 'ckpt-scale').
uint32_t crc32(std::string_view bytes)
{
    static const auto tables = [] {
        std::array<std::array<uint32_t, 256>, 8> t{};
        for (uint32_t i = 0; i < 256; ++i) {
            uint32_t c = i;
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            t[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; ++i)
            for (size_t k = 1; k < 8; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
        return t;
    }();
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    size_t n = bytes.size();
    uint32_t c = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        const uint32_t lo = c ^ (uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24);
        const uint32_t hi = uint32_t(p[4]) | uint32_t(p[5]) << 8 | uint32_t(p[6]) << 16 | uint32_t(p[7]) << 24;
        c = tables[7][lo & 0xFF] ^ tables[6][(lo >> 8) & 0xFF] ^ tables[5][(lo >> 16) & 0xFF] ^ tables[4][lo >> 24] ^
            tables[3][hi & 0xFF] ^ tables[2][(hi >> 8) & 0xFF] ^ tables[1][(hi >> 16) & 0xFF] ^ tables[0][hi >> 24];
    }
    for (; n > 0; ++p, --n) c = tables[0][(c ^ *p) & 0xFF] ^ (c >> 8);
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

// Walks the central directory; `visit(name, method, crc, data)` sees each record in turn (its
// data cut to the compressed size) and returns false to stop. The archive's damage, or "".
template <typename Visit>
std::string walk_records(std::string_view bytes, Visit visit)
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
        if (!visit(name, *method, static_cast<uint32_t>(*crc), bytes.substr(data, compressed))) return {};
        at += 46 + name_length + extra_length + comment_length;
    }
    return {};
}

} // namespace

std::string zip_damage(std::string_view bytes)
{
    std::string damage;
    const std::string walked =
        walk_records(bytes, [&](const std::string& name, uint64_t method, uint32_t crc, std::string_view data) {
            if (method == 0 && crc32(data) != crc) damage = "record '" + name + "' does not match its CRC-32";
            return damage.empty();
        });
    return walked.empty() ? damage : walked;
}

std::optional<std::string_view> zip_stored_record(std::string_view bytes, std::string_view suffix)
{
    std::optional<std::string_view> found;
    bool damaged = false;
    const std::string walked =
        walk_records(bytes, [&](const std::string& name, uint64_t method, uint32_t crc, std::string_view data) {
            if (!name.ends_with(suffix)) return true;
            damaged = method != 0 || crc32(data) != crc;
            if (!damaged) found = data;
            return false;
        });
    if (!walked.empty() || damaged) return std::nullopt;
    return found;
}

} // namespace mantissa
