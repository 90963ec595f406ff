#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Sets everything up, builds with warnings as errors, and runs every test offscreen.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$ROOT/build/dev"
"$ROOT/scripts/setup.sh" "$BUILD_DIR"
cd "$BUILD_DIR"
# Tests side by side, one per core up to 4: they are independent (own temp dirs, free ports),
# and CI's time is mostly theirs; each uses every core for LibTorch, hence the cap.
jobs=$(nproc)
# --no-tests=error: a build that found no tests (configured without Qt) is a failure, not a pass.
QT_QPA_PLATFORM=offscreen ctest --output-on-failure --no-tests=error --timeout 900 --parallel "$((jobs < 4 ? jobs : 4))"
# CI also runs the engine and store tests under ASan + UBSan and the thread hand-overs under
# TSan, in build/asan and build/tsan (docs/RELIABILITY.md); locally: scripts/sanitize.sh.
if [ "${CI:-}" = true ] || [ "${MANTISSA_SANITIZE_TESTS:-0}" = 1 ]; then
    "$ROOT/scripts/sanitize.sh"
fi
