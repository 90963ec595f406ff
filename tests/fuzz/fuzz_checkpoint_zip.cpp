// SPDX-License-Identifier: GPL-3.0-or-later
// libFuzzer target: any bytes as a checkpoint's zip container. zip_damage and zip_stored_record
// read offsets and sizes from the file itself; whatever they say, they must answer without
// reading outside the bytes (ASan) or overflowing (UBSan). Build and run: docs/RELIABILITY.md.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "zip_records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string_view bytes(reinterpret_cast<const char*>(data), size);
    (void)mantissa::zip_damage(bytes);
    if (const auto record = mantissa::zip_stored_record(bytes, "/data.pkl"))
        if (record->data() < bytes.data() || record->data() + record->size() > bytes.data() + bytes.size()) __builtin_trap();
    return 0;
}
