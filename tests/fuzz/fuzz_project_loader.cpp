// SPDX-License-Identifier: GPL-3.0-or-later
// libFuzzer target: any bytes as a project file. The loader either returns a valid config or
// throws ConfigError; anything else (another exception, a crash, a sanitizer report) is a
// finding. The same bytes also go through load_run_config, the reader of stored configs.
// Build and run: docs/RELIABILITY.md.

#include <cstddef>
#include <cstdint>
#include <string>

#include "project_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        // A base folder that does not exist: data paths are resolved, never read.
        const mantissa::ProjectConfig config = mantissa::load_project_json(text, "/nonexistent-mantissa-fuzz");
        // What the loader accepts must survive the store's round trip.
        mantissa::load_run_config(mantissa::to_json_text(config));
    } catch (const mantissa::ConfigError&) {
    }
    try {
        mantissa::load_run_config(text);
    } catch (const mantissa::ConfigError&) {
    }
    return 0;
}
