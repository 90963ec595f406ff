// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/run_format.h"

#include <QDateTime>

#include <cmath>

namespace mantissa {

namespace {
const QString kNone = QStringLiteral("\u2013");
}

QString format_loss(double loss, bool recorded)
{
    if (!recorded) return kNone;
    if (std::isnan(loss)) return QStringLiteral("NaN");
    if (std::isinf(loss)) return loss > 0 ? QStringLiteral("inf") : QStringLiteral("\u2212inf");
    return QString::number(loss, 'f', 4);
}

QString exact_loss(double loss, bool recorded)
{
    if (!recorded) return {};
    if (std::isnan(loss)) return QStringLiteral("nan");
    if (std::isinf(loss)) return loss > 0 ? QStringLiteral("inf") : QStringLiteral("-inf");
    return QString::number(loss, 'g', 17);
}

QString format_delta(double delta)
{
    if (!std::isfinite(delta)) return kNone;
    if (delta == 0.0) return QStringLiteral("0");
    const QString digits = QString::number(std::abs(delta), 'f', 4);
    return (delta > 0 ? QStringLiteral("+") : QStringLiteral("\u2212")) + digits;
}

QString format_ratio(double ratio)
{
    return std::isfinite(ratio) ? QString::number(ratio, 'f', 2) + QStringLiteral("\u00d7") : kNone;
}

QString format_rate(double tokens_per_s)
{
    if (!std::isfinite(tokens_per_s)) return kNone;
    if (tokens_per_s >= 1e6) return QString::number(tokens_per_s / 1e6, 'f', 2) + QStringLiteral("M");
    if (tokens_per_s >= 1e4) return QString::number(tokens_per_s / 1e3, 'f', 1) + QStringLiteral("k");
    return QString::number(tokens_per_s, 'f', 0);
}

QString format_bytes(int64_t bytes)
{
    if (bytes < 0) return kNone;
    const double b = static_cast<double>(bytes);
    if (b >= 1024.0 * 1024 * 1024) return QString::number(b / (1024.0 * 1024 * 1024), 'f', 2) + QStringLiteral(" GiB");
    if (b >= 1024.0 * 1024) return QString::number(b / (1024.0 * 1024), 'f', 0) + QStringLiteral(" MiB");
    if (b >= 1024.0) return QString::number(b / 1024.0, 'f', 0) + QStringLiteral(" KiB");
    return QString::number(bytes) + QStringLiteral(" B");
}

QString format_created(const QString& utc)
{
    // The trailing Z makes it UTC.
    const QDateTime t = QDateTime::fromString(utc, Qt::ISODate);
    if (!t.isValid()) return utc;
    return t.toLocalTime().toString(QStringLiteral("yyyy-MM-dd HH:mm"));
}

QString run_label(int64_t id, const QString& name)
{
    return QStringLiteral("#%1 %2").arg(id).arg(name);
}

QString count_text(int64_t n, const QString& one, const QString& many)
{
    return QStringLiteral("%1 %2").arg(n).arg(n == 1 ? one : many);
}

QString format_status(RunStatus status)
{
    const std::string_view name = run_status_name(status);
    return QString::fromLatin1(name.data(), qsizetype(name.size()));
}

} // namespace mantissa
