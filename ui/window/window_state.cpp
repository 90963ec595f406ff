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
const QString kSplitters = QStringLiteral("window/splitters");

} // namespace

void save_window_state(const MainWindow& window, QSettings& settings)
{
    settings.setValue(kGeometry, window.saveGeometry());
    settings.setValue(kState, window.saveState());
    settings.setValue(kPage, static_cast<int>(window.currentPage()));
    QVariantList splitters;
    for (const QSplitter* splitter : window.findChildren<QSplitter*>()) splitters << splitter->saveState();
    settings.setValue(kSplitters, splitters);
}

void restore_window_state(MainWindow& window, QSettings& settings)
{
    if (settings.contains(kGeometry)) window.restoreGeometry(settings.value(kGeometry).toByteArray());
    if (settings.contains(kState)) window.restoreState(settings.value(kState).toByteArray());
    const QVariantList saved = settings.value(kSplitters).toList();
    const QList<QSplitter*> splitters = window.findChildren<QSplitter*>();
    if (saved.size() == splitters.size())
        for (int i = 0; i < splitters.size(); ++i) splitters[i]->restoreState(saved[i].toByteArray());
    bool ok = false;
    const int page = settings.value(kPage).toInt(&ok);
    if (ok && page >= static_cast<int>(MainWindow::Page::Project) && page <= static_cast<int>(MainWindow::Page::Compare))
        window.showPage(static_cast<MainWindow::Page>(page));
}

} // namespace mantissa
