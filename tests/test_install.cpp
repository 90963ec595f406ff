// SPDX-License-Identifier: GPL-3.0-or-later
// `cmake --install` into a temporary DESTDIR installs exactly the expected files into the XDG
// places, and the installed executables run from there without LD_LIBRARY_PATH (RPATH).

#include <QDir>
#include <QDirIterator>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <sqlite3.h>

namespace {

const QString kPrefix = QStringLiteral("/opt/mantissa");

// Every file a default install (the Runtime component) lays down, relative to the prefix.
QStringList expected_files()
{
    QStringList files{
        "bin/mantissa",
        "bin/mantissa-train",
        "share/applications/io.github.mantissa.Mantissa.desktop",
        "share/doc/mantissa/changelog.gz",
        "share/doc/mantissa/copyright",
        "share/icons/hicolor/scalable/apps/io.github.mantissa.Mantissa.svg",
        "share/mantissa/projects/default.json",
        "share/mantissa/projects/shakespeare-char.json",
        "share/metainfo/io.github.mantissa.Mantissa.metainfo.xml",
        "share/mime/packages/io.github.mantissa.Mantissa.xml",
    };
    for (int size : {16, 22, 24, 32, 48, 64, 128, 256})
        files << QStringLiteral("share/icons/hicolor/%1x%1/apps/io.github.mantissa.Mantissa.png").arg(size);
    files.sort();
    return files;
}

struct Result {
    int exit_code = -1;
    QString out;
};

Result run(const QString& program, const QStringList& args, const QProcessEnvironment& env,
           const QString& working_directory = {})
{
    QProcess p;
    p.setProcessEnvironment(env);
    if (!working_directory.isEmpty()) p.setWorkingDirectory(working_directory);
    p.start(program, args);
    if (!p.waitForFinished(300000)) return {};
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1,
            QString::fromUtf8(p.readAllStandardOutput() + p.readAllStandardError())};
}

// Nothing from the environment may help the installed binaries find a library.
QProcessEnvironment clean_environment()
{
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove(QStringLiteral("LD_LIBRARY_PATH"));
    env.remove(QStringLiteral("LD_PRELOAD"));
    env.remove(QStringLiteral("QT_PLUGIN_PATH"));
    return env;
}

QString expected_version_text(const QString& program, const QString& qt)
{
    return QStringLiteral("%1 " MANTISSA_VERSION "\nMantissa: " MANTISSA_VERSION "\n").arg(program) +
           QStringLiteral("Qt: %1\nSQLite: %2\n").arg(qt, QString::fromLatin1(sqlite3_libversion()));
}

// The version text without its LibTorch, CUDA and cuDNN lines, which depend on the build.
QString without_engine_lines(const QString& text)
{
    QStringList kept;
    for (const QString& line : text.split(QLatin1Char('\n')))
        if (!line.startsWith(QLatin1String("LibTorch: ")) && !line.startsWith(QLatin1String("CUDA: ")) &&
            !line.startsWith(QLatin1String("cuDNN: ")))
            kept << line;
    return kept.join(QLatin1Char('\n'));
}

} // namespace

class TestInstall : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QVERIFY(destdir_.isValid());
        QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
        env.insert(QStringLiteral("DESTDIR"), destdir_.path());
        const Result r = run(QStringLiteral(MANTISSA_CMAKE),
                             {"--install", MANTISSA_BINARY_DIR, "--prefix", kPrefix}, env);
        QVERIFY2(r.exit_code == 0, qPrintable(r.out));
        root_ = destdir_.path() + kPrefix;
    }

    void installsExactlyTheExpectedFiles()
    {
        QStringList found;
        QDirIterator it(destdir_.path(), QDir::Files | QDir::Hidden | QDir::System, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            const QString path = QDir(destdir_.path()).relativeFilePath(it.next());
            found << (path.startsWith(kPrefix.mid(1) + QLatin1Char('/')) ? path.mid(kPrefix.size()) : path);
        }
        found.sort();
        QCOMPARE(found, expected_files());
        QVERIFY(QFileInfo(root_ + QStringLiteral("/bin/mantissa-train")).isExecutable());
    }

    void installedTrainerPrintsItsVersions()
    {
        const Result r = run(root_ + QStringLiteral("/bin/mantissa-train"), {"--version"}, clean_environment());
        QVERIFY2(r.exit_code == 0, qPrintable(r.out));
        QCOMPARE(without_engine_lines(r.out),
                 expected_version_text(QStringLiteral("mantissa-train"),
                                       QStringLiteral(MANTISSA_QT_RUNTIME_VERSION " for the GUI")));
        QVERIFY2(r.out.contains(QRegularExpression(QStringLiteral("\nLibTorch: \\d+\\.\\d+\\.\\d+\nCUDA: .+\ncuDNN: .+\n"))),
                 qPrintable(r.out));
    }

    void installedGuiPrintsItsVersionsWithoutADisplay()
    {
        QProcessEnvironment env = clean_environment();
        env.remove(QStringLiteral("QT_QPA_PLATFORM"));
        env.remove(QStringLiteral("DISPLAY"));
        env.remove(QStringLiteral("WAYLAND_DISPLAY"));
        const Result r = run(root_ + QStringLiteral("/bin/mantissa"), {"--version"}, env);
        QVERIFY2(r.exit_code == 0, qPrintable(r.out));
        QCOMPARE(without_engine_lines(r.out),
                 expected_version_text(QStringLiteral("mantissa"), QString::fromLatin1(qVersion())));
        // And its help (it aborted: "could not connect to display").
        const Result help = run(root_ + QStringLiteral("/bin/mantissa"), {"--help"}, env);
        QVERIFY2(help.exit_code == 0, qPrintable(help.out));
        QVERIFY2(help.out.contains(QStringLiteral("--screenshot-dir <dir>")), qPrintable(help.out));
    }

    // The build tree's executables carried a RUNPATH ending in ':', an empty element that is
    // the working directory: a libsqlite3.so.0 in the folder they were started from was loaded
    // before the system's ("file too short" for an empty one). Neither they nor the installed
    // ones look there.
    void noLibraryComesFromTheWorkingDirectory()
    {
        QTemporaryDir cwd;
        for (const char* planted : {"libsqlite3.so.0", "libQt6Core.so.6", "libcrypto.so.3", "libstdc++.so.6"}) {
            QFile f(cwd.filePath(QString::fromLatin1(planted)));
            QVERIFY(f.open(QIODevice::WriteOnly));
        }
        QProcessEnvironment env = clean_environment();
        env.remove(QStringLiteral("QT_QPA_PLATFORM"));
        env.remove(QStringLiteral("DISPLAY"));
        env.remove(QStringLiteral("WAYLAND_DISPLAY"));
        const QStringList executables{QStringLiteral(MANTISSA_BINARY_DIR "/app/mantissa-train"),
                                      QStringLiteral(MANTISSA_BINARY_DIR "/app/mantissa"),
                                      root_ + QStringLiteral("/bin/mantissa-train"),
                                      root_ + QStringLiteral("/bin/mantissa")};
        for (const QString& exe : executables) {
            const Result r = run(exe, {"--version"}, env, cwd.path());
            QVERIFY2(r.exit_code == 0, qPrintable(exe + QStringLiteral(": ") + r.out));
        }
    }

private:
    QTemporaryDir destdir_;
    QString root_;
};

QTEST_MAIN(TestInstall)
#include "test_install.moc"
