#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Builds the Debian package with CPack and checks it as far as one machine can:
#   1. dpkg-deb: the control fields and the file list;
#   2. lintian, when installed (its findings are printed, not fatal: a bundled LibTorch draws some);
#   3. dpkg -x into an empty folder, then ldd on both executables with LD_LIBRARY_PATH unset:
#      every library must resolve, LibTorch's from the package, and the RPATH must not reach
#      back into the build machine;
#   4. the extracted mantissa-train --version runs.
#   scripts/check-package.sh [build-dir]     (default: build/dev; the .deb goes to <build-dir>/package)
# Slow (LibTorch is ~450 MB), so not part of the test suite.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="$(cd "${1:-$ROOT/build/dev}" && pwd)"
OUT="$BUILD_DIR/package"
say() { printf '\n== %s\n' "$*"; }

cmake --build "$BUILD_DIR" --target mantissa mantissa-train >"$BUILD_DIR/check-package-build.log" 2>&1 || { cat "$BUILD_DIR/check-package-build.log"; exit 1; }
rm -rf "$OUT" && mkdir -p "$OUT"
say "cpack -G DEB"
(cd "$BUILD_DIR" && cpack -G DEB -B "$OUT" >"$OUT/cpack.log" 2>&1) || { cat "$OUT/cpack.log"; exit 1; }
deb="$(ls "$OUT"/mantissa_*.deb)"
ls -l "$deb"

say "dpkg-deb --info"
dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
say "dpkg-deb --contents (files)"
dpkg-deb --contents "$deb" | awk '$1 !~ /^d/ {print $6, $7, $8}'

say "lintian"
if command -v lintian >/dev/null; then
    lintian --tag-display-limit 0 "$deb" || true
else
    echo "lintian not installed: skipped (apt-get install lintian)"
fi

say "dpkg -x and ldd without LD_LIBRARY_PATH"
root="$OUT/extracted"
dpkg -x "$deb" "$root"
failed=0
for exe in mantissa mantissa-train; do
    bin="$root/usr/bin/$exe"
    rpath="$(readelf -d "$bin" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p; s/.*(RPATH).*\[\(.*\)\]/\1/p')"
    echo "$exe: RUNPATH $rpath"
    [ "$rpath" = '$ORIGIN/../lib/mantissa' ] || { echo "  RPATH reaches outside the package"; failed=1; }
    deps="$(env -u LD_LIBRARY_PATH ldd "$bin")"
    if grep -q 'not found' <<<"$deps"; then grep 'not found' <<<"$deps"; failed=1; fi
    # ldd prints .../usr/bin/../lib/mantissa/...: compare resolved paths.
    ours="$(awk '$2 == "=>" && $3 ~ /^\// {print $3}' <<<"$deps" | while IFS= read -r p; do realpath "$p"; done |
            grep "^$root/usr/lib/mantissa/" || true)"
    echo "  $(wc -l <<<"$deps") libraries, $(grep -c . <<<"$ours" || true) of them from the package:"
    sed 's|.*/|    |' <<<"$ours"
    if grep -E '/\.venv/|site-packages' <<<"$deps"; then echo "  loads from the build machine's torch"; failed=1; fi
done

# ldd above resolves on this machine, where the -dev packages bring every library; a clean
# machine has only what Depends names. Each system library a program links directly must
# come from a package Depends names.
say "every linked system library is a declared dependency"
depends="$(dpkg-deb -f "$deb" Depends)"
echo "Depends: $depends"
for exe in mantissa mantissa-train; do
    bin="$root/usr/bin/$exe"
    deps="$(env -u LD_LIBRARY_PATH ldd "$bin")"
    while IFS= read -r lib; do
        [ -e "$root/usr/lib/mantissa/$lib" ] && continue # bundled
        path="$(awk -v l="$lib" '$1 == l && $2 == "=>" {print $3}' <<<"$deps")"
        [ -n "$path" ] || continue # the dynamic loader itself
        real="$(realpath "$path")"
        owner="$( (dpkg -S "$real" 2>/dev/null || dpkg -S "${real#/usr}" 2>/dev/null || true) | head -1 | cut -d: -f1)"
        if [ -z "$owner" ]; then
            echo "  $exe: $lib ($real) belongs to no Debian package"; failed=1
        elif ! tr ',|' '\n\n' <<<"$depends" | sed 's/^ *//; s/[ (].*//' | grep -qxF "$owner"; then
            echo "  $exe: $lib comes from $owner, which Depends does not name"; failed=1
        fi
    done < <(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done

say "extracted mantissa-train --version"
env -u LD_LIBRARY_PATH "$root/usr/bin/mantissa-train" --version || failed=1

[ $failed -eq 0 ] && say "package OK: $deb" || { say "package check FAILED"; exit 1; }
