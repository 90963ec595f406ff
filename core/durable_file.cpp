// SPDX-License-Identifier: GPL-3.0-or-later
#include "durable_file.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fcntl.h>
#include <unistd.h>

namespace mantissa {

DurableFile::DurableFile(std::string path) : path_(std::move(path))
{
    // A name of its own (O_EXCL): two writers of one file (two runs checkpointing the same step
    // into a shared folder, two exports) must not write into each other's temporary file.
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; fd_ < 0; ++attempt) {
        temporary_ = path_ + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
        fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd_ < 0 && (errno != EEXIST || attempt == 100))
            throw std::runtime_error("cannot write '" + path_ + "': " + std::strerror(errno));
    }
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
    throw std::runtime_error("cannot write '" + path_ + "': " + std::strerror(error) + " (the file is as it was)");
}

void DurableFile::write(std::string_view data)
{
    size_t done = 0;
    while (done < data.size()) {
        const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail(n < 0 ? errno : ENOSPC);
        done += static_cast<size_t>(n);
    }
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
        throw std::runtime_error("cannot write '" + path_ + "': " + std::strerror(error) + " (the file is as it was)");
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

} // namespace mantissa
