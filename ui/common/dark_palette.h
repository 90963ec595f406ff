// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A dark palette for the Fusion style: what `mantissa --dark` uses where the desktop gives
// none (offscreen screenshots, tests). On a desktop the system palette is followed as is.

#include <QPalette>

namespace mantissa {

QPalette dark_palette();

} // namespace mantissa
