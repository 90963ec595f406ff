// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Any plot as PNG or PDF (by the file's suffix), and a right-click "Export plot…" for plots
// that have no page-level button (the monitor's).

#include <QString>

class QCustomPlot;
class QWidget;

namespace mantissa {

// .png: the plot at its on-screen size, at 2x for print-quality pixels; .pdf: vector, same
// size in points. False with a message for another suffix or a failed write.
bool export_plot(QCustomPlot& plot, const QString& path, QString* error);
// The interactive path: a save dialog, then export_plot; a failure opens a message box.
void export_plot_interactively(QCustomPlot& plot, QWidget* parent, const QString& suggestedName);
// Adds a context menu with "Export plot…" to the plot.
void install_plot_export_menu(QCustomPlot* plot, const QString& suggestedName);

} // namespace mantissa
