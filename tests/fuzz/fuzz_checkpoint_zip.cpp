// SPDX-License-Identifier: GPL-3.0-or-later
// libFuzzer target: any bytes as a checkpoint's zip container. zip_damage reads offsets and
// sizes from the file itself; whatever they say, it must answer without reading outside the
// bytes (ASan) or overflowing (UBSan). Build and run: docs/RELIABILITY.md.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "zip_records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    (void)mantissa::zip_damage(std::string_view(reinterpret_cast<const char*>(data), size));
    return 0;
}
