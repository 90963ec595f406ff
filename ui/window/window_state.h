// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What a user arranged survives a restart: the window's geometry and toolbars, every
// splitter's sizes and the page shown. Each splitter is kept under its objectName (every one
// has its own); one whose saved state is missing, of the other orientation or of another
// number of panes (a new version laid its page out differently) keeps its default. They were kept by their order in the
// window until 2026-12-07, an order that the page shown at exit changes (a tab widget raises
// its current page): a restart then gave the Monitor's vertical stack a horizontal state.

class QSettings;

namespace mantissa {

class MainWindow;

void save_window_state(const MainWindow& window, QSettings& settings);
void restore_window_state(MainWindow& window, QSettings& settings);

} // namespace mantissa
