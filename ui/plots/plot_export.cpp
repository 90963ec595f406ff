// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/plot_export.h"

#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QMenu>
#include <QMessageBox>

#include <qcustomplot.h>

namespace mantissa {

bool export_plot(QCustomPlot& plot, const QString& path, QString* error)
{
    const QString suffix = QFileInfo(path).suffix().toLower();
    bool ok = false;
    if (suffix == QLatin1String("png"))
        ok = plot.savePng(path, 0, 0, 2.0);
    else if (suffix == QLatin1String("pdf"))
        ok = plot.savePdf(path);
    else {
        if (error) *error = QObject::tr("Cannot export to '%1': use a .png or .pdf file name.").arg(path);
        return false;
    }
    if (!ok && error) *error = QObject::tr("Cannot write '%1'.").arg(path);
    return ok;
}

void export_plot_interactively(QCustomPlot& plot, QWidget* parent, const QString& suggestedName)
{
    QString filter = QObject::tr("PNG image (*.png)");
    const QString path = QFileDialog::getSaveFileName(parent, QObject::tr("Export plot"),
                                                      QDir::home().filePath(suggestedName + QStringLiteral(".png")),
                                                      QObject::tr("PNG image (*.png);;PDF document (*.pdf)"), &filter);
    if (path.isEmpty()) return;
    QString target = path;
    if (QFileInfo(target).suffix().isEmpty())
        target += filter.contains(QLatin1String("pdf")) ? QStringLiteral(".pdf") : QStringLiteral(".png");
    QString error;
    if (!export_plot(plot, target, &error)) QMessageBox::warning(parent, QObject::tr("Export plot"), error);
}

void install_plot_export_menu(QCustomPlot* plot, const QString& suggestedName)
{
    plot->setContextMenuPolicy(Qt::CustomContextMenu);
    QObject::connect(plot, &QWidget::customContextMenuRequested, plot, [plot, suggestedName](const QPoint& pos) {
        QMenu menu(plot);
        menu.addAction(QObject::tr("Export plot…"),
                       [plot, suggestedName] { export_plot_interactively(*plot, plot->window(), suggestedName); });
        menu.exec(plot->mapToGlobal(pos));
    });
}

} // namespace mantissa
