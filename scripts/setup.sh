#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Installs whatever is missing (Debian packages, a .venv with LibTorch), then configures and
# builds. Safe to run again: each step is skipped when already done.
#   scripts/setup.sh [build-dir [target...]]   (default: build/dev, every target)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${1:-$ROOT/build/dev}"
TARGETS=("${@:2}") # scripts/run.sh builds the two programs only: no test is compiled before the window opens
TORCH_VERSION="2.13.0"

APT_PACKAGES=(g++ cmake ninja-build ccache python3 python3-venv pkg-config
              libsqlite3-dev nlohmann-json3-dev libcli11-dev
              libcpp-httplib-dev libssl-dev # the store server (remote/); optional
              libgloo-dev) # data-parallel training on the CPU (docs/DISTRIBUTED.md): gloo headers for ProcessGroupGloo
# A headless build (MANTISSA_CMAKE_ARGS=-DMANTISSA_WITH_QT=OFF, a GPU server) needs none of the
# GUI's: Qt, QCustomPlot, and the tools tests/test_desktop.cpp validates the desktop files with.
WITH_QT=ON
case " ${MANTISSA_CMAKE_ARGS:-} " in *MANTISSA_WITH_QT=OFF*) WITH_QT=OFF ;; esac
[ "$WITH_QT" = OFF ] || APT_PACKAGES+=(qt6-base-dev libqcustomplot-dev libqcustomplot2.1-qt6 libgl-dev
                                      desktop-file-utils appstream shared-mime-info)

log() { printf '[setup] %s\n' "$*" >&2; }

install_debian_packages() {
    local missing=()
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then return; fi
    log "installing Debian packages: ${missing[*]}"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if ! command -v sudo >/dev/null; then
            log "not root and no sudo: install these as root, then run this again: apt-get install ${missing[*]}"
            exit 1
        fi
        sudo=(sudo)
    fi
    # env inside sudo: sudo resets the environment, and apt would ask questions. An install cut
    # short earlier (Ctrl-C while unpacking) leaves dpkg "interrupted", and apt-get refuses every
    # later install until it is finished.
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive dpkg --configure -a
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The .venv is whole when this stamp holds the pins: written only after every pip step of
# install_torch succeeded. A setup cut short (Ctrl-C while pip ran, a venv without pip) or a
# .venv whose Python is gone (a removed interpreter) is made again from scratch, not patched.
VENV_PINS="torch==$TORCH_VERSION numpy==2.4.6"
install_torch() {
    local py="$ROOT/.venv/bin/python" stamp="$ROOT/.venv/.mantissa-pins"
    local pins_import="import torch,numpy,sys; sys.exit(0 if torch.__version__.startswith('$TORCH_VERSION') and numpy.__version__ == '2.4.6' else 1)"
    if [ -x "$py" ] && "$py" -m pip --version >/dev/null 2>&1 && "$py" -c "$pins_import" 2>/dev/null; then
        # A .venv from before the stamp, whole all the same: kept (its LibTorch is what the
        # build links; made anew, it would be downloaded again and everything rebuilt).
        [ "$(cat "$stamp" 2>/dev/null)" = "$VENV_PINS" ] || printf '%s' "$VENV_PINS" >"$stamp"
        return
    fi
    log "creating .venv with $VENV_PINS"
    python3 -m venv --clear "$ROOT/.venv"
    # shellcheck disable=SC2086 # the pins are words
    "$py" -m pip install -q --disable-pip-version-check $VENV_PINS
    local why
    if ! why="$("$py" -c 'import torch' 2>&1)"; then
        log "torch==$TORCH_VERSION was installed but does not import: $why"
        exit 1
    fi
    printf '%s' "$VENV_PINS" >"$stamp"
}

# The TensorBoard export test reads our event files back with the real tensorboard package.
install_tensorboard() {
    "$ROOT/.venv/bin/python" -c "import tensorboard" 2>/dev/null && return
    log "installing tensorboard into .venv"
    "$ROOT/.venv/bin/python" -m pip install -q --disable-pip-version-check "tensorboard==2.21.0"
}

# tests/data/block_formats_reference.txt was generated with ml_dtypes' FP4/E8M0 casts
# (bench/gen_block_format_tables.py); installed so that the table can be regenerated.
install_ml_dtypes() {
    "$ROOT/.venv/bin/python" -c "import ml_dtypes" 2>/dev/null && return
    log "installing ml_dtypes into .venv"
    "$ROOT/.venv/bin/python" -m pip install -q --disable-pip-version-check "ml_dtypes==0.7.0"
}

# Whether BUILD_DIR lacks this script's settings: never configured, configured some other way
# (a plain `cmake -B`, or without Qt, which would leave no tests to run), another .venv, or
# other MANTISSA_CMAKE_ARGS than it was configured with (ARGS_STAMP). Configuring again when
# nothing changed is skipped: it costs seconds at every `scripts/run.sh`.
ARGS_STAMP="$BUILD_DIR/.mantissa-cmake-args"
needs_configure() {
    local cache="$BUILD_DIR/CMakeCache.txt" prefix="$1"
    [ -f "$BUILD_DIR/build.ninja" ] && [ -f "$cache" ] || return 0
    grep -qx 'MANTISSA_WERROR:BOOL=ON' "$cache" || return 0
    grep -qx "MANTISSA_WITH_QT:BOOL=$WITH_QT" "$cache" || return 0
    grep -q "^CMAKE_PREFIX_PATH:[A-Z]*=$prefix\$" "$cache" || return 0
    [ "$(cat "$ARGS_STAMP" 2>/dev/null)" = "${MANTISSA_CMAKE_ARGS:-}" ] || return 0
    return 1
}

configure_and_build() {
    local prefix
    prefix="$("$ROOT/.venv/bin/python" -c 'import torch;print(torch.utils.cmake_prefix_path)')"
    if needs_configure "$prefix"; then
        # A folder configured with another generator (a plain `cmake -B` makes Makefiles): CMake
        # refuses -G Ninja over its cache, at every run. Its cache goes; its objects are rebuilt.
        if [ -f "$BUILD_DIR/CMakeCache.txt" ] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$BUILD_DIR/CMakeCache.txt"; then
            log "$BUILD_DIR was configured with another generator: configuring it anew with Ninja"
            rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
        fi
        # A setting passed once (-DMANTISSA_SANITIZE=address) stayed in the cache, and every later
        # plain run built with it: other arguments than last time configure from an empty cache.
        if [ -f "$ARGS_STAMP" ] && [ "$(cat "$ARGS_STAMP")" != "${MANTISSA_CMAKE_ARGS:-}" ]; then
            log "MANTISSA_CMAKE_ARGS changed since $BUILD_DIR was configured: configuring it anew"
            rm -rf "$BUILD_DIR/CMakeCache.txt" "$BUILD_DIR/CMakeFiles"
        fi
        log "configuring $BUILD_DIR"
        cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMANTISSA_WERROR=ON -DMANTISSA_WITH_QT=ON \
              -DCMAKE_PREFIX_PATH="$prefix" ${MANTISSA_CMAKE_ARGS:-} >&2
        printf '%s' "${MANTISSA_CMAKE_ARGS:-}" >"$ARGS_STAMP"
    fi
    log "building${TARGETS:+ ${TARGETS[*]}}"
    cmake --build "$BUILD_DIR" ${TARGETS:+--target "${TARGETS[@]}"} >&2
}

install_debian_packages
install_torch
install_tensorboard
install_ml_dtypes
configure_and_build
