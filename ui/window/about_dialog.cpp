// SPDX-License-Identifier: GPL-3.0-or-later
#include "window/about_dialog.h"

#include <QDialogButtonBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QTableWidget>
#include <QVBoxLayout>

#include "common/app_icons.h"
#include "version_report.h"

namespace mantissa {
namespace {

QTableWidget* make_table(const QStringList& headers, int rows, QWidget* parent)
{
    auto* table = new QTableWidget(rows, static_cast<int>(headers.size()), parent);
    table->setHorizontalHeaderLabels(headers);
    table->verticalHeader()->hide();
    table->horizontalHeader()->setStretchLastSection(true);
    table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table->setSelectionMode(QAbstractItemView::NoSelection);
    table->setFocusPolicy(Qt::NoFocus);
    return table;
}

void set_row(QTableWidget* table, int row, const QStringList& cells)
{
    for (int column = 0; column < cells.size(); ++column)
        table->setItem(row, column, new QTableWidgetItem(cells[column]));
}

} // namespace

QString gpu_description(const GpuInfo& gpu)
{
    if (!gpu.present) return AboutDialog::tr("none (CPU)");
    const QString name = gpu.name.empty() ? QStringLiteral("GPU") : QString::fromStdString(gpu.name);
    if (!gpu.capability.is_gpu()) return name;
    return QStringLiteral("%1 (sm_%2%3)").arg(name).arg(gpu.capability.major).arg(gpu.capability.minor);
}

AboutDialog::AboutDialog(const GpuInfo& gpu, QWidget* parent) : QDialog(parent)
{
    setWindowTitle(tr("About Mantissa"));
    const auto lines = version_lines(qVersion());

    auto* icon = new QLabel(this);
    icon->setPixmap(app_icon().pixmap(64, 64));
    auto* title = new QLabel(tr("<b>Mantissa %1</b><br>Mixed-precision transformer training workbench<br>"
                                "GPL-3.0-or-later")
                                 .arg(QString::fromStdString(lines.front().second)),
                             this);
    auto* header = new QHBoxLayout;
    header->addWidget(icon);
    header->addWidget(title, 1);

    versions_ = make_table({tr("Component"), tr("Version")}, static_cast<int>(lines.size()) + 1, this);
    versions_->setObjectName(QStringLiteral("versionTable"));
    int row = 0;
    for (const auto& [component, version] : lines)
        set_row(versions_, row++, {QString::fromStdString(component), QString::fromStdString(version)});
    set_row(versions_, row, {tr("GPU"), gpu_description(gpu)});

    // Without a usable GPU the engine runs on the CPU, whatever card the machine has.
    const ComputeCapability device = gpu.present ? gpu.capability : ComputeCapability{};
    const auto support = format_support_table(device);
    formats_ = make_table({tr("Format"), tr("Here"), tr("Native from")}, static_cast<int>(support.size()), this);
    formats_->setObjectName(QStringLiteral("formatTable"));
    row = 0;
    for (const auto& s : support)
        set_row(formats_, row++,
                {QString::fromStdString(s.format), QString::fromLatin1(execution_name(s.execution)),
                 QString::fromStdString(s.requirement)});

    auto* note = new QLabel(tr("Emulated formats round every operand and result to the format and multiply "
                               "in FP32: the numbers are the format's, the speed is not."),
                            this);
    note->setWordWrap(true);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);

    auto* layout = new QVBoxLayout(this);
    layout->addLayout(header);
    layout->addWidget(versions_);
    layout->addWidget(new QLabel(tr("Number formats on this device"), this));
    layout->addWidget(formats_);
    layout->addWidget(note);
    layout->addWidget(buttons);
    resize(460, 560);
}

} // namespace mantissa
