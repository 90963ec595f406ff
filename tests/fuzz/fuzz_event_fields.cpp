// SPDX-License-Identifier: GPL-3.0-or-later
// libFuzzer target: the run store's reader of an event's stored fields (events.fields, JSON
// written by any Mantissa version or edited by hand). It must never throw or crash: unknown or
// unreadable fields fall back to the stored message. The first byte picks the stored tag.
// Build and run: docs/RELIABILITY.md.

#include <cstddef>
#include <cstdint>
#include <string>

#include "run_event.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    // Every kind this version knows, an alert, and a tag from a newer version.
    constexpr int kKinds = static_cast<int>(mantissa::EventKind::Other) + 1;
    const int pick = size > 0 ? data[0] % (kKinds + 1) : 0;
    std::string tag = pick == kKinds ? "from_a_newer_mantissa"
                                     : std::string(mantissa::event_kind_name(static_cast<mantissa::EventKind>(pick)));
    if (pick == static_cast<int>(mantissa::EventKind::Alert)) tag = "alert_nan";
    const std::string fields = size > 0 ? std::string(reinterpret_cast<const char*>(data) + 1, size - 1) : "";
    const mantissa::RunEvent event = mantissa::event_from_stored(7, tag, fields, "stored message");
    (void)event.message();
    (void)event.tag();
    // What was read back is written again as the store would.
    const mantissa::RunEvent again =
        mantissa::event_from_stored(7, event.tag(), mantissa::event_fields_json(event), event.message());
    (void)again.message();
    return 0;
}
