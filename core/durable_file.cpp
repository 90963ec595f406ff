// SPDX-License-Identifier: GPL-3.0-or-later
#include "durable_file.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string_view>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mantissa {

namespace {

std::string host_name()
{
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "host";
    return name;
}

bool all_digits(std::string_view s)
{
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace

void remove_stale_temporaries(const std::string& folder)
{
    namespace fs = std::filesystem;
    const std::string marker = ".tmp." + host_name() + ".";
    std::error_code ec;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        const size_t at = name.rfind(marker);
        if (at == std::string::npos) continue;
        // "<pid>.<n>" after the marker (a host name may hold dots, so the marker is matched whole).
        const std::string_view rest = std::string_view(name).substr(at + marker.size());
        const size_t dot = rest.find('.');
        if (dot == std::string_view::npos || !all_digits(rest.substr(0, dot)) || !all_digits(rest.substr(dot + 1)) ||
            dot > 9)
            continue;
        const auto pid = static_cast<pid_t>(std::stol(std::string(rest.substr(0, dot))));
        if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue; // alive, or not ours to ask
        std::error_code ignored;
        fs::remove(it->path(), ignored);
    }
}

DurableFile::DurableFile(std::string path) : path_(std::move(path))
{
    // What a failed write leaves there: "the file is as it was" was said of files never there.
    struct stat earlier {};
    const bool existed = ::stat(path_.c_str(), &earlier) == 0;
    untouched_ = existed ? "(the file is as it was)" : "(nothing was written there)";
    // A name of its own (O_EXCL): two writers of one file (two runs checkpointing the same step
    // into a shared folder, two exports) must not write into each other's temporary file.
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; fd_ < 0; ++attempt) {
        temporary_ = path_ + ".tmp." + host_name() + "." + std::to_string(::getpid()) + "." + std::to_string(counter++);
        // 0666 less the umask, as any new file; a file replaced keeps its mode (a 0664 export became 0644).
        fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd_ < 0 && (errno != EEXIST || attempt == 100))
            throw std::runtime_error("cannot write '" + path_ + "': " + std::strerror(errno));
    }
    if (existed) (void)::fchmod(fd_, earlier.st_mode & 07777);
}

DurableFile::~DurableFile()
{
    if (fd_ < 0) return;
    ::close(fd_);
    ::unlink(temporary_.c_str());
}

void DurableFile::fail(int error)
{
    ::close(fd_);
    fd_ = -1;
    ::unlink(temporary_.c_str());
    const std::string what = "cannot write '" + path_ + "': " + std::strerror(error) + " " + untouched_;
    // Not EFBIG (a file size limit, ulimit -f): removing other files makes no room for this one.
    if (error == ENOSPC || error == EDQUOT) throw NoSpaceError(what);
    throw std::runtime_error(what);
}

bool write_all(int fd, std::string_view data)
{
    size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = ENOSPC;
            return false;
        }
        done += static_cast<size_t>(n);
    }
    return true;
}

void DurableFile::write(std::string_view data)
{
    if (!write_all(fd_, data)) fail(errno);
}

void DurableFile::commit()
{
    // fsync also reports a disk that filled while the page cache was being written back.
    if (::fsync(fd_) != 0) fail(errno);
    const int closed = ::close(fd_);
    fd_ = -1;
    if (closed != 0 || std::rename(temporary_.c_str(), path_.c_str()) != 0) {
        const int error = errno;
        ::unlink(temporary_.c_str());
        throw std::runtime_error("cannot write '" + path_ + "': " + std::strerror(error) + " " + untouched_);
    }
    // The rename is an entry in the folder: until the folder is flushed too, a power loss can
    // bring back the old file (or none). Best effort: the file is in place by now, and a file
    // system that cannot flush a folder (EINVAL, ENOTSUP) must not make a written checkpoint
    // read as a failed one.
    const std::string folder = std::filesystem::path(path_).parent_path().string();
    const int dir = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
        (void)::fsync(dir);
        ::close(dir);
    }
}

void replace_file_durably(const std::string& path, std::string_view data)
{
    DurableFile file(path);
    file.write(data);
    file.commit();
}

std::string unreadable_reason(const std::string& path)
{
    // Asked, never opened: closing a descriptor of a file drops every POSIX lock this process
    // holds on it, and SQLite's connections to a run store hold theirs that way (an open and
    // close here once left a store "malformed" under a test's second connection).
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::strerror(errno);
    if (S_ISDIR(st.st_mode)) return "it is a directory";
    return access_problem(path, R_OK);
}

std::string access_problem(const std::string& path, int mode)
{
    return ::faccessat(AT_FDCWD, path.c_str(), mode, AT_EACCESS) == 0 ? std::string() : std::strerror(errno);
}

} // namespace mantissa
