// SPDX-License-Identifier: GPL-3.0-or-later
#include "token_ids.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace mantissa {

TokenIds::TokenIds(std::vector<uint16_t> owned)
{
    auto held = std::make_shared<const std::vector<uint16_t>>(std::move(owned));
    data_ = held->data();
    size_ = held->size();
    keep_ = std::move(held);
}

TokenIds TokenIds::map_file(const std::string& path, std::size_t bytes)
{
    TokenIds ids;
    ids.mapped_ = true;
    if (bytes == 0) return ids; // mmap refuses a length of 0
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(std::strerror(errno));
    void* at = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_errno = errno;
    ::close(fd); // the mapping keeps the file
    if (at == MAP_FAILED) throw std::runtime_error(std::strerror(map_errno));
    ids.keep_ = std::shared_ptr<const void>(at, [bytes](const void* p) { ::munmap(const_cast<void*>(p), bytes); });
    ids.data_ = static_cast<const uint16_t*>(at);
    ids.size_ = bytes / sizeof(uint16_t);
    return ids;
}

bool operator==(const TokenIds& a, const std::vector<uint16_t>& b)
{
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

} // namespace mantissa
