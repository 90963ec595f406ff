// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// 64-bit FNV-1a, the project's one content hash: checkpoint checksums and data fingerprints.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace mantissa {

class Fnv1a64 {
public:
    void add(const void* data, size_t bytes)
    {
        const auto* p = static_cast<const unsigned char*>(data);
        for (size_t i = 0; i < bytes; ++i) {
            hash_ ^= p[i];
            hash_ *= 0x100000001b3ULL; // the FNV prime
        }
    }
    // "fnv1a64:" and 16 hex digits.
    std::string text() const
    {
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash_));
        return std::string("fnv1a64:") + hex;
    }

private:
    uint64_t hash_ = 0xcbf29ce484222325ULL; // the FNV offset basis
};

} // namespace mantissa
