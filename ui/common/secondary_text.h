// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Captions, counts and hints in the palette's secondary text colour, so that a dark palette
// (`--dark`, a dark desktop theme) draws them light: fixed greys (#444 to #777) were dark grey
// on dark grey there.

#include <QColor>
#include <QLabel>
#include <QPalette>

namespace mantissa {

// Follows the palette as it changes (a label draws its text, rich text too, in this role).
inline void show_as_secondary(QLabel* label) { label->setForegroundRole(QPalette::PlaceholderText); }

// The same colour, opaque, for a <span> inside rich text: PlaceholderText is often the text
// colour at half alpha, blended here over the window colour.
inline QColor secondary_text_color(const QPalette& palette)
{
    const QColor fg = palette.color(QPalette::PlaceholderText), bg = palette.color(QPalette::Window);
    const double a = fg.alphaF();
    return QColor::fromRgbF(float(fg.redF() * a + bg.redF() * (1 - a)), float(fg.greenF() * a + bg.greenF() * (1 - a)),
                            float(fg.blueF() * a + bg.blueF() * (1 - a)));
}

// A warning or error colour that reads on the window's background: `on_light` (a dark red or
// orange) on a light window, `on_dark` (a light one) on a dark window, where the dark one was
// unreadable.
inline QString readable_colour(const QPalette& palette, const char* on_light, const char* on_dark)
{
    return QString::fromLatin1(palette.color(QPalette::Window).lightness() < 128 ? on_dark : on_light);
}

} // namespace mantissa
