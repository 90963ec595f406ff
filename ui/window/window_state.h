// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What a user arranged survives a restart: the window's geometry and toolbars, every
// splitter's sizes and the page shown. Splitters are keyed by their order in the window;
// when that count changes (a new version laid the pages out differently) they are left at
// their defaults rather than given sizes meant for others.

class QSettings;

namespace mantissa {

class MainWindow;

void save_window_state(const MainWindow& window, QSettings& settings);
void restore_window_state(MainWindow& window, QSettings& settings);

} // namespace mantissa
