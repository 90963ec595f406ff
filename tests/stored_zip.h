// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Small zip archives built in the tests, for the checkpoint container's readers.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// A zip of stored (uncompressed) records, as LibTorch writes its archives.
inline std::string tiny_stored_zip(const std::vector<std::pair<std::string, std::string>>& records)
{
    const auto le = [](std::string& out, uint64_t v, int bytes) {
        for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xFF));
    };
    const auto crc32 = [](const std::string& data) {
        uint32_t c = 0xFFFFFFFFu;
        for (const char ch : data) {
            c ^= uint8_t(ch);
            for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        }
        return c ^ 0xFFFFFFFFu;
    };
    std::string out, directory;
    for (const auto& [name, data] : records) {
        const uint64_t offset = out.size();
        le(out, 0x04034b50u, 4); le(out, 20, 2); le(out, 0, 2); le(out, 0, 2); le(out, 0, 4);
        le(out, crc32(data), 4); le(out, data.size(), 4); le(out, data.size(), 4); le(out, name.size(), 2); le(out, 0, 2);
        out += name;
        out += data;
        le(directory, 0x02014b50u, 4); le(directory, 20, 2); le(directory, 20, 2); le(directory, 0, 2); le(directory, 0, 2);
        le(directory, 0, 4); le(directory, crc32(data), 4); le(directory, data.size(), 4); le(directory, data.size(), 4);
        le(directory, name.size(), 2); le(directory, 0, 2); le(directory, 0, 2); le(directory, 0, 2); le(directory, 0, 2);
        le(directory, 0, 4); le(directory, offset, 4);
        directory += name;
    }
    const uint64_t at = out.size();
    out += directory;
    le(out, 0x06054b50u, 4); le(out, 0, 2); le(out, 0, 2); le(out, records.size(), 2); le(out, records.size(), 2);
    le(out, directory.size(), 4); le(out, at, 4); le(out, 0, 2);
    return out;
}


inline std::string tiny_stored_zip_of(const std::string& name, const std::string& data)
{
    return tiny_stored_zip({{name, data}});
}
