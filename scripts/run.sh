#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Sets everything up, then opens the workbench on the default project, or trains that
# project headless with mantissa-train when there is no display.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build/dev"
"$ROOT/scripts/setup.sh" "$BUILD_DIR"
PROJECT="${1:-$ROOT/projects/default.json}"
# A display the window can open on. DISPLAY alone is not one: a container or `sudo` keeps the
# variable without the X server, and Qt would abort instead of training. A local display
# (":0") has its socket; a forwarded one ("localhost:10.0", ssh -X) is taken on trust. Wayland
# sessions run X clients through XWayland, which sets DISPLAY too. QT_QPA_PLATFORM=offscreen
# shows no window at all, so it trains headless.
has_display() {
    [ "${QT_QPA_PLATFORM:-}" != "offscreen" ] || return 1
    [ -n "${DISPLAY:-}" ] || return 1
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
