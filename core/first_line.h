// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// LibTorch's and c10d's messages run to many lines (a C++ stack, hints); Mantissa's own
// messages quote only the first, the one that says what went wrong. Internal: std only.

#include <exception>
#include <string>

namespace mantissa {

inline std::string first_line(const std::exception& e)
{
    const std::string text = e.what();
    return text.substr(0, text.find('\n'));
}

} // namespace mantissa
