// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/table_export.h"

#include <QAbstractItemModel>
#include <QFile>
#include <QSaveFile>
#include <QStringList>

#include "run_store.h"

namespace mantissa {

QString csv_field(const QString& input)
{
    // A spreadsheet runs a cell that starts with = + - @ (or a tab or CR before one) as a
    // formula: a run named "=HYPERLINK(...)" would run in whoever opens the export. Such text
    // gets a leading apostrophe, as OWASP advises; numbers such as -0.5 stay numbers.
    QString text = input;
    static const QString formula_starts = QStringLiteral("=+-@\t\r");
    bool is_number = false;
    if (!text.isEmpty() && formula_starts.contains(text.front())) {
        text.toDouble(&is_number);
        if (!is_number) text.prepend(QLatin1Char('\''));
    }
    const bool quote = text.contains(QLatin1Char(',')) || text.contains(QLatin1Char('"')) ||
                       text.contains(QLatin1Char('\n')) || text.contains(QLatin1Char('\r')) ||
                       (!text.isEmpty() && (text.front().isSpace() || text.back().isSpace()));
    if (!quote) return text;
    QString out = text;
    out.replace(QLatin1String("\""), QLatin1String("\"\""));
    return QLatin1Char('"') + out + QLatin1Char('"');
}

QString model_to_csv(const QAbstractItemModel& model)
{
    const int columns = model.columnCount();
    QString out;
    QStringList line;
    for (int c = 0; c < columns; ++c) line << csv_field(model.headerData(c, Qt::Horizontal).toString());
    out += line.join(QLatin1Char(',')) + QLatin1String("\r\n");
    for (int r = 0; r < model.rowCount(); ++r) {
        line.clear();
        for (int c = 0; c < columns; ++c) {
            const QModelIndex index = model.index(r, c);
            QVariant value = model.data(index, kCsvExportRole);
            if (!value.isValid()) value = model.data(index, Qt::DisplayRole);
            line << csv_field(value.toString());
        }
        out += line.join(QLatin1Char(',')) + QLatin1String("\r\n");
    }
    return out;
}

bool export_model_csv(const QAbstractItemModel& model, const QString& path, QString* error)
{
    // The save dialog offers every file: a run store picked there (runs.sqlite, beside the CSVs)
    // would have been replaced by a table, every run gone. The CLI's export refuses it too. Read
    // through SQLite: a QFile opened and closed on the window's own store dropped its locks.
    if (RunStore::is_sqlite_file(QFile::encodeName(path).toStdString())) {
        if (error)
            *error = QStringLiteral("'%1' is an SQLite database (a run store?): it was not replaced; pick another "
                                    "file")
                         .arg(path);
        return false;
    }
    // The files beside a store (kStoreSideFiles), as the CLI's export refuses them.
    for (const auto& side : kStoreSideFiles) {
        const QLatin1String suffix(side.suffix);
        if (!path.endsWith(suffix)) continue;
        const QString store = path.chopped(suffix.size());
        if (!RunStore::is_sqlite_file(QFile::encodeName(store).toStdString())) continue;
        if (error)
            *error = QStringLiteral("'%1' belongs to the run store '%2': it was not written; pick another file")
                         .arg(path, store);
        return false;
    }
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        if (error) *error = QStringLiteral("Cannot write '%1': %2").arg(path, file.errorString());
        return false;
    }
    file.write(model_to_csv(model).toUtf8());
    if (!file.commit()) {
        if (error) *error = QStringLiteral("Cannot write '%1': %2").arg(path, file.errorString());
        return false;
    }
    return true;
}

} // namespace mantissa
