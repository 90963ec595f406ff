// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A folder name made from a run's name or a swept value ("tiny [precision.preset=bf16]"), in
// characters any file system takes: letters, digits, '.', '=', '-' and '_' stay, the rest
// becomes '_'; at most 96 characters. Internal: std only.

#include <cctype>
#include <string>

namespace mantissa {

inline std::string folder_name(std::string text)
{
    for (char& c : text)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '=' && c != '-' && c != '_') c = '_';
    return text.size() > 96 ? text.substr(0, 96) : text;
}

} // namespace mantissa
