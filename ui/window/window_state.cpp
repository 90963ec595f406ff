// SPDX-License-Identifier: GPL-3.0-or-later
#include "window/window_state.h"

#include <QSettings>
#include <QSplitter>

#include "window/main_window.h"

namespace mantissa {
namespace {

const QString kGeometry = QStringLiteral("window/geometry");
const QString kState = QStringLiteral("window/state");
const QString kPage = QStringLiteral("window/page");
const QString kSplitters = QStringLiteral("window/splitter/"); // + the splitter's objectName
const QString kSplitterPanes = QStringLiteral("window/splitter-panes/"); // + the same: its count()
const QString kSplittersByOrder = QStringLiteral("window/splitters"); // before 2026-12-07: not read

} // namespace

void save_window_state(const MainWindow& window, QSettings& settings)
{
    settings.setValue(kGeometry, window.saveGeometry());
    settings.setValue(kState, window.saveState());
    settings.setValue(kPage, static_cast<int>(window.currentPage()));
    settings.remove(kSplittersByOrder);
    for (const QSplitter* splitter : window.findChildren<QSplitter*>())
        if (!splitter->objectName().isEmpty()) {
            settings.setValue(kSplitters + splitter->objectName(), splitter->saveState());
            settings.setValue(kSplitterPanes + splitter->objectName(), splitter->count());
        }
}

void restore_window_state(MainWindow& window, QSettings& settings)
{
    if (settings.contains(kGeometry)) window.restoreGeometry(settings.value(kGeometry).toByteArray());
    if (settings.contains(kState)) window.restoreState(settings.value(kState).toByteArray());
    for (QSplitter* splitter : window.findChildren<QSplitter*>()) {
        if (splitter->objectName().isEmpty()) continue;
        const QVariant saved = settings.value(kSplitters + splitter->objectName());
        // Sizes for another number of panes are another layout's (restoreState would take them).
        if (!saved.isValid() || settings.value(kSplitterPanes + splitter->objectName()).toInt() != splitter->count())
            continue;
        // restoreState sets the orientation too: a state of the other one is another layout's.
        const QByteArray defaults = splitter->saveState();
        const Qt::Orientation orientation = splitter->orientation();
        if (!splitter->restoreState(saved.toByteArray()) || splitter->orientation() != orientation)
            splitter->restoreState(defaults);
    }
    bool ok = false;
    const int page = settings.value(kPage).toInt(&ok);
    if (ok && page >= static_cast<int>(MainWindow::Page::Project) && page <= static_cast<int>(MainWindow::Page::Compare))
        window.showPage(static_cast<MainWindow::Page>(page));
}

} // namespace mantissa
