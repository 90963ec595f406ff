// SPDX-License-Identifier: GPL-3.0-or-later
#include "x_display_probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace mantissa {
namespace {

bool connects(const std::string& path, bool abstract)
{
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const size_t offset = abstract ? 1 : 0; // an abstract name starts with a NUL byte
    if (path.size() + offset >= sizeof address.sun_path) return false;
    std::memcpy(address.sun_path + offset, path.data(), path.size());
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + offset + path.size());
    const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), length) == 0;
    ::close(fd);
    return ok;
}

// TCP to this machine's port 6000 + n: where libxcb goes for ":n" when the socket is not there
// (WSL with VcXsrv, servers started with -listen tcp).
bool connects_on_loopback(long display_number)
{
    const long port = 6000 + display_number;
    if (port > 65535) return false;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0;
    ::close(fd);
    return ok;
}

} // namespace

std::optional<bool> local_x_display_answers(std::string_view display)
{
    const bool unix_only = display.starts_with("unix:"); // libxcb tries no TCP for these
    if (unix_only) display.remove_prefix(4);
    if (!display.starts_with(':')) return std::nullopt;
    display.remove_prefix(1);
    size_t digits = 0;
    while (digits < display.size() && std::isdigit(static_cast<unsigned char>(display[digits]))) ++digits;
    if (digits == 0 || digits > 5 || (digits < display.size() && display[digits] != '.')) return std::nullopt;
    const std::string number(display.substr(0, digits));
    const std::string socket = "/tmp/.X11-unix/X" + number;
    return connects(socket, true) || connects(socket, false) || (!unix_only && connects_on_loopback(std::stol(number)));
}

} // namespace mantissa
