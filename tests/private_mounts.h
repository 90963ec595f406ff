// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Real read-only and full file systems for tests, where the machine allows: the test process
// takes its own mount namespace (so its mounts are private and end with it) and mounts a
// read-only bind or a tiny tmpfs. Root ignores permission bits, not these. Callers QSKIP when
// a helper returns false (no CAP_SYS_ADMIN). Plus snapshot(), what "nothing changed" compares.

#include <QCryptographicHash>
#include <QDirIterator>
#include <QFile>
#include <QString>
#include <QStringList>

#include <sched.h>
#include <sys/mount.h>

#include <string>

namespace mantissa::test {

inline QByteArray sha256_hex(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return "-";
    return QCryptographicHash::hash(f.readAll(), QCryptographicHash::Sha256).toHex();
}

// Every file and folder under `dir` (the dir's own entries included), with the hash of each
// file: what "nothing changed" compares, byte for byte and entry for entry.
inline QStringList snapshot(const QString& dir)
{
    QStringList out;
    QDirIterator it(dir, QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot,
                    QDirIterator::Subdirectories);
    while (it.hasNext()) {
        const QString path = it.next();
        out << path + " " + QString::fromLatin1(sha256_hex(path));
    }
    out.sort();
    return out;
}

// This process's own mount namespace, so that what the tests mount is private to it and gone
// when it ends. False where that is not permitted (no CAP_SYS_ADMIN): the caller skips.
inline bool own_mount_namespace()
{
    static const bool ok =
        ::unshare(CLONE_NEWNS) == 0 && ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
    return ok;
}

// `dir` as a read-only mount of itself: writes fail with EROFS, for root too.
inline bool mount_read_only(const QString& dir)
{
    const std::string d = dir.toStdString();
    return own_mount_namespace() && ::mount(d.c_str(), d.c_str(), nullptr, MS_BIND, nullptr) == 0 &&
           ::mount(nullptr, d.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0;
}

inline bool mount_tmpfs(const QString& dir, const char* size)
{
    return own_mount_namespace() &&
           ::mount("tmpfs", dir.toStdString().c_str(), "tmpfs", 0, (std::string("size=") + size).c_str()) == 0;
}

// Unmounts `dir` when it goes, so that a failed test leaves no mount behind.
class MountGuard {
public:
    explicit MountGuard(const QString& dir) : dir_(dir) {}
    ~MountGuard() { ::umount2(dir_.toStdString().c_str(), MNT_DETACH); }
    MountGuard(const MountGuard&) = delete;
    MountGuard& operator=(const MountGuard&) = delete;

private:
    QString dir_;
};

} // namespace mantissa::test
