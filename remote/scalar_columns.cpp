// SPDX-License-Identifier: GPL-3.0-or-later
#include "scalar_columns.h"

#include <array>
#include <bit>
#include <cstring>

namespace mantissa {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr int kMaxVarintBytes = 10; // 64 bits, 7 per byte

constexpr std::array<int8_t, 256> decode_table()
{
    std::array<int8_t, 256> t{};
    for (auto& v : t) v = -1;
    for (int i = 0; i < 64; ++i) t[static_cast<unsigned char>(kAlphabet[i])] = static_cast<int8_t>(i);
    return t;
}
constexpr auto kDecode = decode_table();

uint64_t zigzag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
int64_t unzigzag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

void put_varint(std::string& out, uint64_t v)
{
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7f) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

// The wire is little-endian whatever the host is.
uint64_t to_little_endian(uint64_t v)
{
    if constexpr (std::endian::native == std::endian::big) return __builtin_bswap64(v);
    return v;
}

} // namespace

std::string base64_encode(std::string_view bytes)
{
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
        const uint32_t v = (uint32_t(p[i]) << 16) | (uint32_t(p[i + 1]) << 8) | p[i + 2];
        out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63], kAlphabet[v & 63]};
    }
    if (const size_t rest = bytes.size() - i; rest > 0) {
        const uint32_t v = (uint32_t(p[i]) << 16) | (rest == 2 ? uint32_t(p[i + 1]) << 8 : 0);
        out += {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], rest == 2 ? kAlphabet[(v >> 6) & 63] : '=', '='};
    }
    return out;
}

std::string base64_decode(std::string_view text, const std::string& what)
{
    if (text.size() % 4 != 0)
        throw ColumnError(what + ": base64 of " + std::to_string(text.size()) + " characters, not a multiple of 4");
    size_t padding = 0;
    if (!text.empty() && text.back() == '=') padding = text[text.size() - 2] == '=' ? 2 : 1;
    std::string out;
    out.resize(text.size() / 4 * 3);
    auto* o = reinterpret_cast<unsigned char*>(out.data());
    const auto* p = reinterpret_cast<const unsigned char*>(text.data());
    const size_t n = text.size();
    for (size_t i = 0; i < n; i += 4) {
        const bool last = i + 4 == n;
        int32_t v = 0;
        for (size_t k = 0; k < 4; ++k) {
            const bool pad = last && k >= 4 - padding;
            const int8_t d = pad ? 0 : kDecode[p[i + k]];
            if (d < 0)
                throw ColumnError(what + ": '" + std::string(1, static_cast<char>(p[i + k])) +
                                  "' at character " + std::to_string(i + k) + " is not base64");
            v = (v << 6) | d;
        }
        *o++ = static_cast<unsigned char>(v >> 16);
        *o++ = static_cast<unsigned char>(v >> 8);
        *o++ = static_cast<unsigned char>(v);
    }
    out.resize(out.size() - padding);
    return out;
}

EncodedScalarColumn encode_scalar_column(const ScalarColumn& column)
{
    EncodedScalarColumn e;
    e.tag = column.tag;
    e.count = static_cast<int64_t>(column.steps.size());
    e.first_step = column.steps.empty() ? 0 : column.steps.front();
    std::string deltas;
    deltas.reserve(column.steps.size()); // one byte per delta for steps up to 63 apart
    for (size_t i = 1; i < column.steps.size(); ++i)
        // Wrapping arithmetic: any two int64 steps have a delta that decodes back exactly.
        put_varint(deltas, zigzag(static_cast<int64_t>(static_cast<uint64_t>(column.steps[i]) -
                                                       static_cast<uint64_t>(column.steps[i - 1]))));
    std::string values(column.values.size() * 8, '\0');
    for (size_t i = 0; i < column.values.size(); ++i) {
        const uint64_t bits = to_little_endian(std::bit_cast<uint64_t>(column.values[i]));
        std::memcpy(values.data() + 8 * i, &bits, 8);
    }
    e.step_deltas = base64_encode(deltas);
    e.values = base64_encode(values);
    return e;
}

ScalarColumn decode_scalar_column(const EncodedScalarColumn& e)
{
    const std::string what = "scalar column '" + e.tag + "'";
    if (e.count < 1)
        throw ColumnError(what + ": count " + std::to_string(e.count) + " (a column has at least one row)");
    // The values' length bounds the count before anything is allocated for it.
    const std::string values = base64_decode(e.values, what + " values");
    if (values.size() / 8 != static_cast<uint64_t>(e.count) || values.size() % 8 != 0)
        throw ColumnError(what + ": values hold " + std::to_string(values.size()) + " bytes, not 8 for each of " +
                          std::to_string(e.count) + " rows");
    const std::string deltas = base64_decode(e.step_deltas, what + " step deltas");
    ScalarColumn c;
    c.tag = e.tag;
    const auto n = static_cast<size_t>(e.count);
    c.steps.resize(n);
    c.values.resize(n);
    int64_t step = e.first_step;
    c.steps[0] = step;
    const auto* p = reinterpret_cast<const unsigned char*>(deltas.data());
    const auto* end = p + deltas.size();
    for (size_t i = 1; i < n; ++i) {
        uint64_t v = 0;
        int shift = 0;
        for (int b = 0;; ++b) {
            if (p == end)
                throw ColumnError(what + ": step deltas end after " + std::to_string(i - 1) + " of " +
                                  std::to_string(n - 1));
            if (b == kMaxVarintBytes) throw ColumnError(what + ": step delta " + std::to_string(i) + " is too long");
            const unsigned char byte = *p++;
            if (b == kMaxVarintBytes - 1 && byte > 1)
                throw ColumnError(what + ": step delta " + std::to_string(i) + " has more than 64 bits");
            v |= static_cast<uint64_t>(byte & 0x7f) << shift;
            shift += 7;
            if (!(byte & 0x80)) break;
        }
        // Wrapping, as the encoder: any two int64 steps are one delta apart.
        step = static_cast<int64_t>(static_cast<uint64_t>(step) + static_cast<uint64_t>(unzigzag(v)));
        c.steps[i] = step;
    }
    if (p != end)
        throw ColumnError(what + ": " + std::to_string(end - p) + " bytes after the last of " + std::to_string(n - 1) +
                          " step deltas");
    for (size_t i = 0; i < n; ++i) {
        uint64_t bits = 0;
        std::memcpy(&bits, values.data() + 8 * i, 8);
        c.values[i] = std::bit_cast<double>(to_little_endian(bits));
    }
    return c;
}

} // namespace mantissa
