// SPDX-License-Identifier: GPL-3.0-or-later
#include "cli_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mantissa {

void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right, const char* indent)
{
    std::vector<size_t> width;
    for (const auto& row : rows)
        for (size_t c = 0; c < row.size(); ++c) {
            if (width.size() <= c) width.push_back(0);
            width[c] = std::max(width[c], row[c].size());
        }
    for (const auto& row : rows) {
        std::string line = indent;
        for (size_t c = 0; c < row.size(); ++c) {
            const std::string pad(width[c] - row[c].size(), ' ');
            const bool r = c < right.size() && right[c];
            line += (c ? "  " : "") + (r ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : ""));
        }
        std::printf("%s\n", line.c_str());
    }
}

std::string fmt_finite(double v, const char* format)
{
    if (!std::isfinite(v)) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, format, v);
    return buf;
}

std::string fmt_loss(double v) { return fmt_finite(v, "%.4f"); }
std::string fmt_delta(double v) { return fmt_finite(v, "%+.4f"); }

namespace {

std::string non_finite_name(double v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

std::string fmt_recorded(double v, bool recorded, const char* format)
{
    if (!recorded) return "-";
    return std::isfinite(v) ? fmt_finite(v, format) : non_finite_name(v);
}

} // namespace

std::string fmt_recorded_loss(double v, bool recorded) { return fmt_recorded(v, recorded, "%.4f"); }
std::string fmt_recorded_delta(double v, bool recorded) { return fmt_recorded(v, recorded, "%+.4f"); }

std::string fmt_ratio(double v) { return fmt_finite(v, "%.2fx"); }
std::string fmt_rate(double v) { return fmt_finite(v, "%.0f"); }

std::string fmt_bytes(int64_t bytes)
{
    if (bytes < 0) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

std::string join_tags(const std::vector<std::string>& tags)
{
    std::string out;
    for (const auto& t : tags) out += (out.empty() ? "" : ", ") + t;
    return out;
}

} // namespace mantissa
