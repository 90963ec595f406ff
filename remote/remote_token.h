// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The bearer token a store server requires of every request (docs/REMOTE.md): 128 random
// bits as 32 hex digits, kept in a file only its owner can read.

#include <string>
#include <string_view>

namespace mantissa {

// 16 bytes of /dev/urandom as lowercase hex. Throws std::runtime_error if it cannot be read.
std::string random_token_hex();

// The token kept in `path`: reused when the file holds one and only its owner may read it
// (a restarted server keeps its clients' token), else a new one written there with mode
// 0600. Throws std::runtime_error naming the file when it cannot be written, or when it
// exists with wider permissions (someone else may have read it).
std::string load_or_create_token(const std::string& path);

// Compares in time that depends on the lengths only, not on where the first difference is;
// letters without case (hex digits as a token file or a user may write them).
bool tokens_equal(std::string_view a, std::string_view b);

} // namespace mantissa
