#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# Renders the PNG sizes of the icons in resources/icons from their SVG sources. The PNGs are
# committed, so building needs no SVG renderer; run this after editing an SVG.
# Needs rsvg-convert (Debian: librsvg2-bin).
set -euo pipefail
ICONS="$(cd "$(dirname "${BASH_SOURCE[0]}")/../resources/icons" && pwd)"
command -v rsvg-convert >/dev/null || { echo "render-icons: rsvg-convert missing (apt-get install librsvg2-bin)" >&2; exit 1; }
for size in 16 22 24 32 48 64 128 256; do
    rsvg-convert -w "$size" -h "$size" "$ICONS/app/mantissa.svg" -o "$ICONS/app/mantissa-$size.png"
done
for svg in "$ICONS"/actions/*.svg; do
    for size in 16 24 32 48; do
        rsvg-convert -w "$size" -h "$size" "$svg" -o "${svg%.svg}-$size.png"
    done
done
