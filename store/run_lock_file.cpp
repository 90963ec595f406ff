// SPDX-License-Identifier: GPL-3.0-or-later
#include "run_lock_file.h"
#include <cerrno>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mantissa {

namespace {

bool names_same_file(const std::string& path, int fd)
{
    struct stat at_path {}, opened {};
    if (::stat(path.c_str(), &at_path) != 0 || ::fstat(fd, &opened) != 0) return false;
    return at_path.st_dev == opened.st_dev && at_path.st_ino == opened.st_ino;
}

} // namespace

RunLockFile lock_run_file(const std::string& path, RunLockKind kind, bool create,
                          const std::function<void()>& between_open_and_lock)
{
    const int open_flags = create ? (O_CREAT | O_RDWR | O_CLOEXEC) : (O_RDONLY | O_CLOEXEC);
    const int operation = (kind == RunLockKind::Exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB;
    // Each retry follows an unlink by a process that held the lock; they cannot go on for long.
    for (int attempt = 0; attempt < 1000; ++attempt) {
        const int fd = ::open(path.c_str(), open_flags, 0644);
        if (fd < 0) return {errno == ENOENT ? RunLockFile::State::Missing : RunLockFile::State::Failed, -1, errno};
        if (between_open_and_lock) between_open_and_lock();
        if (::flock(fd, operation) != 0) {
            const int error = errno;
            ::close(fd);
            return {error == EWOULDBLOCK ? RunLockFile::State::Held : RunLockFile::State::Failed, -1, error};
        }
        if (names_same_file(path, fd)) return {RunLockFile::State::Locked, fd};
        ::close(fd); // unlinked (and perhaps made anew) between our open and our lock
    }
    return {RunLockFile::State::Failed, -1, EAGAIN};
}

void release_run_file(const std::string& path, int fd)
{
    ::unlink(path.c_str());
    ::close(fd);
}

} // namespace mantissa
