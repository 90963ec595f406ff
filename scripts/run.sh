#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Sets everything up, then opens the workbench on the default project, or trains that
# project headless with mantissa-train when there is no display.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build/dev"
"$ROOT/scripts/setup.sh" "$BUILD_DIR" mantissa mantissa-train
PROJECT="${1:-$ROOT/projects/default.json}"
# A display the window can open on. DISPLAY alone is not one: a container or `sudo` keeps the
# variable without the X server, a tmux session keeps an ssh -X display its ssh took along, a
# killed Xvfb leaves its socket; Qt would abort instead of training. So the display is asked
# (xdpyinfo, from x11-utils, where installed; without it a local display's socket is taken as
# the answer, and a forwarded one on trust). Wayland sessions run X clients through XWayland,
# which sets DISPLAY too.
# QT_QPA_PLATFORM=offscreen shows no window at all, so it trains headless.
has_display() {
    [ "${QT_QPA_PLATFORM:-}" != "offscreen" ] || return 1
    [ -n "${DISPLAY:-}" ] || return 1
    if command -v xdpyinfo >/dev/null; then
        timeout 5 xdpyinfo >/dev/null 2>&1
        return
    fi
    case "$DISPLAY" in
        :*) local n="${DISPLAY#:}"; [ -S "/tmp/.X11-unix/X${n%%.*}" ] ;;
        *) return 0 ;;
    esac
}
if has_display; then
    exec "$BUILD_DIR/app/mantissa" "$PROJECT"
fi
echo "[run] no display: training headless with mantissa-train (the workbench's store, where its Runs page lists it)" >&2
exec "$BUILD_DIR/app/mantissa-train" run "$PROJECT"
