// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The columnar encoding of a page's scalar rows (docs/REMOTE.md, "encoding=columnar"): per
// tag, the first step, the step deltas as zigzag LEB128 varints and the values as
// little-endian IEEE-754 doubles, both in base64 inside the page's JSON. Standard library
// only: the server (no Qt) encodes, the window's mirror decodes, with this one codec.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mantissa {

// A column that cannot be decoded; the message names the tag and what is wrong.
struct ColumnError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// One tag's rows of a page, in the store's order (by step).
struct ScalarColumn {
    std::string tag;
    std::vector<int64_t> steps;
    std::vector<double> values; // bit-exact; a NaN is the store's NULL
};

// A column as it travels: the JSON object's fields.
struct EncodedScalarColumn {
    std::string tag;
    int64_t first_step = 0;
    int64_t count = 0;
    std::string step_deltas; // base64 of count - 1 varints
    std::string values;      // base64 of count * 8 bytes
};

// `column` must hold at least one row, as many steps as values.
EncodedScalarColumn encode_scalar_column(const ScalarColumn& column);
// Throws ColumnError for anything but exactly `count` rows (bad base64, a varint cut short or
// longer than 64 bits, bytes left over, a values length that is not 8 * count).
ScalarColumn decode_scalar_column(const EncodedScalarColumn& encoded);

std::string base64_encode(std::string_view bytes);
// Standard alphabet, '=' padding, no whitespace; throws ColumnError naming `what` otherwise.
std::string base64_decode(std::string_view text, const std::string& what);

} // namespace mantissa
