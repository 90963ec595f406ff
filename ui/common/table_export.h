// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Any table as CSV (RFC 4180): the horizontal header, then one line per row. Cells are the
// model's ExportRole text where it gives one (exact figures: bytes, full-precision losses),
// else what the table shows.

#include <QString>

#include <Qt>

class QAbstractItemModel;

namespace mantissa {

// Models that want machine-readable CSV cells answer this role.
constexpr int kCsvExportRole = Qt::UserRole + 100;

// A field quoted when it holds a comma, a double quote, CR or LF, or starts or ends with a
// blank; quotes inside are doubled. Text that a spreadsheet would run as a formula (it starts
// with = + - @, tab or CR and is no number) gets a leading apostrophe.
QString csv_field(const QString& text);
// The whole table, lines ended by CRLF as RFC 4180 says.
QString model_to_csv(const QAbstractItemModel& model);
// Writes model_to_csv atomically (UTF-8). False with a message naming the file on failure.
bool export_model_csv(const QAbstractItemModel& model, const QString& path, QString* error);

} // namespace mantissa
