// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A checkpoint is a zip archive (LibTorch's format) whose records carry CRC-32s that LibTorch's
// reader does not check; this does, before a checkpoint is loaded.

#include <optional>
#include <string>
#include <string_view>

namespace mantissa {

// What is wrong with the zip container in `bytes`, or "" when every record's bytes match the
// CRC-32 its central directory holds (zip64 included). A flipped bit inside a tensor would
// otherwise load as a different weight. Records stored compressed (LibTorch writes none) are
// not checked. Never reads outside `bytes`, whatever they hold.
std::string zip_damage(std::string_view bytes);

// The data of the record whose name ends with `suffix` (the first such), when it is stored
// uncompressed and matches its CRC-32; nullopt when there is none, it is damaged, or the
// archive's directory is. Never reads outside `bytes`.
std::optional<std::string_view> zip_stored_record(std::string_view bytes, std::string_view suffix);

} // namespace mantissa
