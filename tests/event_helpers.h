// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Events for tests that only need a step, a tag and some text to show, and run statuses as
// text for QCOMPARE.

#include <string>

#include "run_event.h"
#include "run_status.h"

inline mantissa::RunEvent text_event(int64_t step, const std::string& tag, const std::string& text)
{
    using namespace mantissa;
    RunEvent e;
    e.step = step;
    e.kind = parse_event_kind(tag).value_or(EventKind::Other);
    if (e.kind == EventKind::Other) e.other_tag = tag;
    if (e.kind == EventKind::Alert) e.watcher = tag.substr(std::string("alert_").size());
    e.text = text;
    return e;
}

inline std::string status_text(mantissa::RunStatus status) { return std::string(mantissa::run_status_name(status)); }
