// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Runs the built mantissa-train (MANTISSA_TRAIN_EXE, set by tests/CMakeLists.txt) as a user
// would, for the tests that check its exit codes, output and the files it leaves.

#include <QProcess>
#include <QProcessEnvironment>
#include <QString>
#include <QStringList>

struct CliResult {
    int exit_code = -1; // -1: it crashed or did not end in time
    QString out, err;
};

// Any program, as run_cli runs mantissa-train (a wrapper such as setpriv in front of it).
inline CliResult run_program(const QString& program, const QStringList& args, int timeout_ms = 120000,
                             const QString& working_dir = {}, const QProcessEnvironment& env = {})
{
    QProcess p;
    if (!working_dir.isEmpty()) p.setWorkingDirectory(working_dir);
    if (!env.isEmpty()) p.setProcessEnvironment(env);
    p.start(program, args);
    p.waitForFinished(timeout_ms);
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1, QString::fromUtf8(p.readAllStandardOutput()),
            QString::fromUtf8(p.readAllStandardError())};
}

// `working_dir` empty: the test's own. `env`: the test's own where empty.
inline CliResult run_cli(const QStringList& args, int timeout_ms = 120000, const QString& working_dir = {},
                         const QProcessEnvironment& env = {})
{
    return run_program(MANTISSA_TRAIN_EXE, args, timeout_ms, working_dir, env);
}
