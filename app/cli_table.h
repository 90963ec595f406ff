// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// mantissa-train's tables (list, compare, sweep) and the cells in them.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace mantissa {

// Prints rows as aligned columns (two blanks apart); `right` marks right-aligned columns.
void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right = {},
                 const char* indent = "", std::FILE* out = stdout);

// One table cell: "-" for a missing (non-finite) value, else `v` printed with `format`.
std::string fmt_finite(double v, const char* format);
std::string fmt_loss(double v);  // 0.1234
std::string fmt_delta(double v); // +0.1234
// A loss the run recorded: "nan" or "inf" where it diverged, which "-" (nothing recorded)
// would hide; "-" where `recorded` is false.
std::string fmt_recorded_loss(double v, bool recorded);
std::string fmt_recorded_delta(double v, bool recorded);
std::string fmt_ratio(double v); // 1.23x
std::string fmt_rate(double v);  // 1234
std::string fmt_bytes(int64_t bytes); // 12.3 MiB, "-" when negative (unknown)
std::string join_tags(const std::vector<std::string>& tags);

// `v` for printf: a NaN loses its sign, which glibc prints ("-nan" beside another line's "nan").
inline double unsigned_nan(double v) { return std::isnan(v) ? std::fabs(v) : v; }

} // namespace mantissa
