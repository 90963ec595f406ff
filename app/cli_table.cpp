// SPDX-License-Identifier: GPL-3.0-or-later
#include "cli_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mantissa {

namespace {

// Columns a terminal gives the UTF-8 text: one per code point, two for the wide East Asian
// ranges (CJK, Hangul, full-width forms), none for combining marks. Bytes would pad "lr-ä" one
// column short, and shift every column after it.
size_t display_width(const std::string& text)
{
    size_t width = 0;
    for (size_t i = 0; i < text.size();) {
        const auto byte = static_cast<unsigned char>(text[i]);
        const size_t length = byte < 0x80 ? 1 : byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
        char32_t cp = length == 1 ? byte : byte & (0x7F >> length);
        for (size_t k = 1; k < length && i + k < text.size(); ++k)
            cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
        i += length;
        if (cp >= 0x0300 && cp <= 0x036F) continue; // combining diacritics
        const bool wide = (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
                          (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
                          (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
                          (cp >= 0xFFE0 && cp <= 0xFFE6) || (cp >= 0x1F300 && cp <= 0x1FAFF) ||
                          (cp >= 0x20000 && cp <= 0x3FFFD);
        width += wide ? 2 : 1;
    }
    return width;
}

} // namespace

void print_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& right, const char* indent,
                 std::FILE* out)
{
    std::vector<size_t> width;
    for (const auto& row : rows)
        for (size_t c = 0; c < row.size(); ++c) {
            if (width.size() <= c) width.push_back(0);
            width[c] = std::max(width[c], display_width(row[c]));
        }
    for (const auto& row : rows) {
        std::string line = indent;
        for (size_t c = 0; c < row.size(); ++c) {
            const std::string pad(width[c] - display_width(row[c]), ' ');
            const bool r = c < right.size() && right[c];
            line += (c ? "  " : "") + (r ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : ""));
        }
        std::fprintf(out, "%s\n", line.c_str());
    }
}

std::string fmt_finite(double v, const char* format)
{
    if (!std::isfinite(v)) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, format, v);
    std::string text = buf;
    // A tiny negative rounded to zero read "-0.0000": a zero shown has no sign of its own.
    if (text.starts_with('-') && text.find_first_of("123456789") == std::string::npos)
        text = (std::string_view(format).starts_with("%+") ? "+" : "") + text.substr(1);
    return text;
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
