#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Sets everything up, then opens the workbench on the default project, or trains that
# project headless with mantissa-train when there is no display.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build/dev"
"$ROOT/scripts/setup.sh" "$BUILD_DIR"
PROJECT="${1:-$ROOT/projects/default.json}"
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] || [ "${QT_QPA_PLATFORM:-}" = "offscreen" ]; then
    exec "$BUILD_DIR/app/mantissa" "$PROJECT"
fi
echo "[run] no display: training headless with mantissa-train" >&2
exec "$BUILD_DIR/app/mantissa-train" run "$PROJECT" --db "$ROOT/runs/mantissa.sqlite"
