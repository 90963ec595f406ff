// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Stores written before schema v4 kept events as a kind and English text only. When such a
// store is upgraded, this reads the facts out of that text once, so old runs show their
// blamed layers, loss scales and checkpoint files like new ones. It is the only place that
// parses event messages, and it only ever sees messages that earlier versions wrote.

#include <cstdint>
#include <string>

#include "run_event.h"

namespace mantissa {

RunEvent legacy_event(int64_t step, const std::string& tag, const std::string& message);

} // namespace mantissa
