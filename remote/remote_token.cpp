// SPDX-License-Identifier: GPL-3.0-or-later
#include "remote_token.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mantissa {

namespace {

bool is_token(const std::string& s)
{
    if (s.size() != 32) return false;
    for (const char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

} // namespace

std::string random_token_hex()
{
    unsigned char bytes[16];
    std::ifstream in("/dev/urandom", std::ios::binary);
    if (!in.read(reinterpret_cast<char*>(bytes), sizeof bytes))
        throw std::runtime_error("cannot read /dev/urandom for the server token");
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (const unsigned char b : bytes) {
        out += hex[b >> 4];
        out += hex[b & 15];
    }
    return out;
}

std::string load_or_create_token(const std::string& path)
{
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
        // A file that is there is read, never replaced: --token-file may name a file of the
        // user's own by mistake (a key), and a token file is not worth losing one.
        if (!S_ISREG(st.st_mode))
            throw std::runtime_error("token file '" + path + "' is not a plain file (a link, a folder, ...): "
                                     "name another with --token-file");
        if ((st.st_mode & 077) != 0 || st.st_uid != ::getuid())
            throw std::runtime_error("token file '" + path +
                                     "' may be read by others (its mode is not 0600, or another user owns it): "
                                     "delete it and start again for a new token");
        std::ifstream in(path);
        std::string token;
        std::getline(in, token);
        if (!token.empty() && token.back() == '\r') token.pop_back(); // edited on Windows
        // Hex digits in upper case are the same token (the Connect dialog lower-cases a typed one).
        for (char& c : token)
            if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
        if (is_token(token)) return token;
        throw std::runtime_error("token file '" + path + "' holds no token (32 hex digits on its first line); "
                                 "left as it is: delete it if it is an old token file, or name another with "
                                 "--token-file");
    }
    const std::string token = random_token_hex();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) throw std::runtime_error("cannot write token file '" + path + "': " + std::strerror(errno));
    const std::string line = token + "\n";
    const bool ok = ::fchmod(fd, 0600) == 0 && ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ::close(fd);
    if (!ok) throw std::runtime_error("cannot write token file '" + path + "': " + std::strerror(errno));
    return token;
}

bool tokens_equal(std::string_view a, std::string_view b)
{
    if (a.size() != b.size()) return false;
    // Hex digits in either case (a token file written in upper case by hand is read lower-cased,
    // and curl sends what the file says), folded without a branch on the secret's bytes.
    const auto fold = [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return static_cast<unsigned char>(u | (static_cast<unsigned char>(u - 'A') < 26u ? 0x20 : 0));
    };
    unsigned char diff = 0;
    for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(fold(a[i]) ^ fold(b[i]));
    return diff == 0;
}

} // namespace mantissa
