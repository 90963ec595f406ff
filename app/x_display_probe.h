// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Whether the X server that DISPLAY names answers, before Qt tries it: Qt's xcb platform
// aborts the process when it cannot connect ("Reinstalling the application may fix this
// problem"), and a stale DISPLAY is common (ssh and tmux sessions that outlived their X
// forwarding, sudo, containers).

#include <optional>
#include <string_view>

namespace mantissa {

// For a local display (":0", ":1.0", "unix:2"): whether its socket takes a connection (the
// abstract one Xorg and Xvfb open, then /tmp/.X11-unix/X<n>), or for ":n" as libxcb falls back,
// 127.0.0.1's TCP port 6000 + n. nullopt for any other form ("localhost:10.0" from ssh -X, a
// host name): those are left to Qt, and no packet is sent.
std::optional<bool> local_x_display_answers(std::string_view display);

} // namespace mantissa
