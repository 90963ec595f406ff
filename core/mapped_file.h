// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A file mapped read-only: its pages come off the disk as they are read, and stay page cache
// (reclaimable), not this process's own memory. Internal: POSIX and std only.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <string_view>

namespace mantissa {

class MappedFile {
public:
    explicit MappedFile(const std::string& path)
    {
        const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            error_ = errno;
            return;
        }
        struct stat st {};
        if (::fstat(fd, &st) != 0) error_ = errno;
        else if (!S_ISREG(st.st_mode)) error_ = EISDIR;
        else if (st.st_size > 0) {
            void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) error_ = errno;
            else {
                data_ = static_cast<const char*>(p);
                size_ = static_cast<size_t>(st.st_size);
            }
        }
        ::close(fd);
    }
    ~MappedFile()
    {
        if (data_) ::munmap(const_cast<char*>(data_), size_);
    }
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    std::string_view bytes() const { return {data_, size_}; } // empty: an empty file, or an error
    int error() const { return error_; }                       // errno of the failure; 0: none

private:
    const char* data_ = nullptr;
    size_t size_ = 0;
    int error_ = 0;
};

} // namespace mantissa
