// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Helpers of test_remote: a mantissa-train process that serves a store, and the exact
// comparison of a replica with its source store.

#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QRegularExpression>
#include <QString>
#include <QStringList>
#include <QTest>

#include <bit>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <memory>

#include <sys/prctl.h>

#include "run_store.h"

// `mantissa-train run ... --serve` or `mantissa-train serve`, up to its "listening on" line.
struct ServingProcess {
    std::unique_ptr<QProcess> process = std::make_unique<QProcess>();
    int port = 0;
    QString token;
    QString output; // stdout so far

    // False (with the output in `output`) when it exits or says nothing within the time.
    bool start(const QStringList& args, int timeout_ms = 60000)
    {
        // A test that dies without its destructors (Qt's watchdog, a crash) must not leave the
        // server behind: one training a million steps filled /tmp at ~40 MB a minute.
        process->setChildProcessModifier([] { ::prctl(PR_SET_PDEATHSIG, SIGKILL); });
        process->start(MANTISSA_TRAIN_EXE, args);
        QElapsedTimer t;
        t.start();
        // Not a terminal: the token is not printed, only the file that holds it.
        static const QRegularExpression listening("listening on http://127\\.0\\.0\\.1:(\\d+)\\ntoken: in ([^\\n]+)\\n");
        while (t.elapsed() < timeout_ms) {
            process->waitForReadyRead(100);
            output += QString::fromUtf8(process->readAllStandardOutput());
            const auto m = listening.match(output);
            if (m.hasMatch()) {
                port = m.captured(1).toInt();
                QFile file(m.captured(2));
                if (!file.open(QIODevice::ReadOnly)) return false;
                token = QString::fromLatin1(file.readAll()).trimmed();
                return token.size() == 32 && !output.contains(token); // read from the file, never printed
            }
            if (process->state() == QProcess::NotRunning) {
                output += QString::fromUtf8(process->readAllStandardError());
                return false;
            }
        }
        return false;
    }
    void kill()
    {
        process->kill(); // SIGKILL: no goodbye to any client
        process->waitForFinished(10000);
    }
    ~ServingProcess()
    {
        if (process->state() != QProcess::NotRunning) kill();
    }
};

// Bit for bit, a NaN matching a NaN (SQLite keeps NaN as NULL and hands back one NaN for it):
// -0.0 is not 0.0 here.
inline bool same_value(double a, double b)
{
    return std::isnan(a) ? std::isnan(b) : std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

// Every layer-statistics row of run `id`: the same keys, bit-exact values (NaN stored as NULL
// on both sides), the same histogram blobs. "" when equal, else the first difference.
inline QString compare_layer_stats(mantissa::RunStore& source, mantissa::RunStore& replica, int64_t id)
{
    const auto la = source.layer_stats_page(id, 0, 100000000).rows;
    const auto lb = replica.layer_stats_page(id, 0, 100000000).rows;
    if (la.size() != lb.size())
        return QString("run %1: %2 layer-statistics rows in the source, %3 in the replica").arg(id).arg(la.size()).arg(lb.size());
    for (size_t r = 0; r < la.size(); ++r) {
        const auto &[sa, a] = la[r];
        const auto &[sb, b] = lb[r];
        const bool same = sa == sb && a.layer == b.layer && a.role == b.role && a.format == b.format &&
                          a.count == b.count && a.zeros == b.zeros && a.infs == b.infs && a.nans == b.nans &&
                          same_value(a.underflow, b.underflow) && same_value(a.subnormal, b.subnormal) &&
                          same_value(a.overflow, b.overflow) && same_value(a.amax, b.amax) &&
                          same_value(a.scale, b.scale) && same_value(a.quant_mse, b.quant_mse) &&
                          same_value(a.quant_snr_db, b.quant_snr_db) && same_value(a.update_ratio, b.update_ratio) &&
                          a.first_exponent == b.first_exponent && a.exponent_counts == b.exponent_counts;
        if (!same)
            return QString("run %1: layer-statistics row %2 differs (step %3 %4 %5 vs step %6 %7 %8)")
                .arg(id)
                .arg(r)
                .arg(sa)
                .arg(QString::fromStdString(a.layer), QString::fromStdString(a.role))
                .arg(sb)
                .arg(QString::fromStdString(b.layer), QString::fromStdString(b.role));
    }
    return {};
}

// Every run, scalar row (bit-exact values), event row (id, fields, times) and layer-statistics row
// (bit-exact, histogram blobs) of `source` is in
// `replica` and nothing else; "" when so, else the first difference.
inline QString compare_stores(const QString& source_path, const QString& replica_path)
{
    using namespace mantissa;
    const auto source = RunStore::open_read_only(source_path.toStdString());
    const auto replica = RunStore::open_read_only(replica_path.toStdString());
    const auto runs = source->list_runs();
    const auto copies = replica->list_runs();
    if (runs.size() != copies.size())
        return QString("%1 runs in the source, %2 in the replica").arg(runs.size()).arg(copies.size());
    for (size_t i = 0; i < runs.size(); ++i) {
        const RunInfo &a = runs[i], &b = copies[i];
        if (a.id != b.id || a.name != b.name || a.status != b.status || a.config_json != b.config_json ||
            a.uuid != b.uuid || a.created_at != b.created_at || a.finished_at != b.finished_at)
            return QString("run %1 differs (status %2 vs %3, finished '%4' vs '%5')")
                .arg(a.id)
                .arg(QString::fromStdString(std::string(run_status_name(a.status))),
                     QString::fromStdString(std::string(run_status_name(b.status))),
                     QString::fromStdString(a.finished_at), QString::fromStdString(b.finished_at));
        const auto sa = source->scalars(a.id), sb = replica->scalars(a.id);
        if (sa.size() != sb.size())
            return QString("run %1: %2 scalar rows in the source, %3 in the replica").arg(a.id).arg(sa.size()).arg(sb.size());
        for (size_t r = 0; r < sa.size(); ++r)
            if (sa[r].step != sb[r].step || sa[r].tag != sb[r].tag || !same_value(sa[r].value, sb[r].value))
                return QString("run %1: scalar row %2 differs (%3 %4 %5 vs %6 %7 %8)")
                    .arg(a.id)
                    .arg(r)
                    .arg(sa[r].step)
                    .arg(QString::fromStdString(sa[r].tag))
                    .arg(sa[r].value, 0, 'g', 17)
                    .arg(sb[r].step)
                    .arg(QString::fromStdString(sb[r].tag))
                    .arg(sb[r].value, 0, 'g', 17);
        const auto ea = source->events_after(a.id, 0, 1000000), eb = replica->events_after(a.id, 0, 1000000);
        if (ea != eb) return QString("run %1: events differ (%2 vs %3 rows)").arg(a.id).arg(ea.size()).arg(eb.size());
        if (const QString d = compare_layer_stats(*source, *replica, a.id); !d.isEmpty()) return d;
    }
    return {};
}
