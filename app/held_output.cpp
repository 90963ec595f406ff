// SPDX-License-Identifier: GPL-3.0-or-later
#include "held_output.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include <sys/types.h>
#include <unistd.h>

#include "consistent_read.h"
#include "durable_file.h"
#include "run_store.h"

namespace mantissa {

namespace {

// An unlinked file in $TMPDIR (else /tmp) that goes with its descriptor; -1 where none can be
// made. std::tmpfile() ignores TMPDIR.
int anonymous_temporary_file()
{
    const char* dir = std::getenv("TMPDIR");
    std::string name = std::string(dir && *dir ? dir : "/tmp") + "/mantissa-output.XXXXXX";
    const int fd = ::mkstemp(name.data());
    if (fd >= 0) ::unlink(name.c_str());
    return fd;
}

} // namespace

struct HeldOutput::Spilling {
    size_t limit = 0;
    std::string memory; // all of it, or, once there is a file, nothing
    int fd = -1;
    size_t filed = 0;             // bytes the file holds whole
    bool gave_up_on_file = false; // it could not be made, or filled up: memory from then on

    // Back into memory, all the file held whole (a piece whose write failed part way is left
    // out: it is appended again whole).
    void unspill()
    {
        std::string held;
        held.reserve(filed);
        char piece[64 * 1024];
        if (::lseek(fd, 0, SEEK_SET) == 0)
            while (held.size() < filed) {
                const ssize_t n = ::read(fd, piece, std::min(sizeof piece, filed - held.size()));
                if (n <= 0) break;
                held.append(piece, static_cast<size_t>(n));
            }
        ::close(fd);
        fd = -1;
        gave_up_on_file = true;
        memory = std::move(held);
    }
    bool to_file(const char* data, size_t size)
    {
        if (!write_all(fd, std::string_view(data, size))) return false;
        filed += size;
        return true;
    }
    void append(const char* data, size_t size)
    {
        if (fd < 0 && !gave_up_on_file && memory.size() + size > limit) {
            fd = anonymous_temporary_file();
            if (fd < 0) gave_up_on_file = true;
            else if (to_file(memory.data(), memory.size())) memory.clear();
            else unspill(); // restores nothing (filed 0): memory keeps it all
        }
        // A full $TMPDIR (or a file-size limit): memory again, as before there was a file.
        if (fd >= 0 && !to_file(data, size)) unspill();
        if (fd < 0) memory.append(data, size);
    }
};

namespace {

ssize_t spilling_write(void* cookie, const char* data, size_t size)
{
    try {
        static_cast<HeldOutput::Spilling*>(cookie)->append(data, size);
    } catch (const std::bad_alloc&) {
        errno = ENOMEM;
        return -1;
    }
    return static_cast<ssize_t>(size);
}

} // namespace

HeldOutput::HeldOutput(size_t memoryBytes) : memoryBytes_(memoryBytes) { open(); }

HeldOutput::~HeldOutput() { close(); }

void HeldOutput::open()
{
    auto spilling = std::make_unique<Spilling>();
    spilling->limit = memoryBytes_;
    cookie_io_functions_t io{};
    io.write = spilling_write;
    out_ = ::fopencookie(spilling.get(), "w", io);
    err_ = open_memstream(&errData_, &errSize_);
    if (!out_ || !err_) {
        close();
        throw std::bad_alloc();
    }
    spilling_ = spilling.release();
}

void HeldOutput::close()
{
    if (out_) std::fclose(out_); // flushes into spilling_
    if (err_) std::fclose(err_);
    std::free(errData_);
    if (spilling_ && spilling_->fd >= 0) ::close(spilling_->fd);
    delete spilling_;
    out_ = err_ = nullptr;
    errData_ = nullptr;
    errSize_ = 0;
    spilling_ = nullptr;
}

void HeldOutput::clear()
{
    close();
    open();
}

bool HeldOutput::spilled() const
{
    std::fflush(out_);
    return spilling_->fd >= 0;
}

std::string HeldOutput::release(std::FILE* to, std::FILE* messages_to)
{
    std::fflush(err_);
    std::fwrite(errData_, 1, errSize_, messages_to);
    const auto os_reason = [](const std::string& what) { return what + ": " + std::strerror(errno); };
    // Nothing of an output that was cut: a table short of its end must not read as whole.
    if (std::fflush(out_) != 0 || std::ferror(out_)) return os_reason("cannot hold the output until the read stands");
    const Spilling& s = *spilling_;
    if (s.fd < 0) {
        if (std::fwrite(s.memory.data(), 1, s.memory.size(), to) != s.memory.size())
            return os_reason("cannot write to standard output");
    } else {
        if (::lseek(s.fd, 0, SEEK_SET) != 0) return os_reason("cannot read back the held output");
        char piece[64 * 1024];
        ssize_t n = 0;
        while ((n = ::read(s.fd, piece, sizeof piece)) > 0)
            if (std::fwrite(piece, 1, static_cast<size_t>(n), to) != static_cast<size_t>(n))
                return os_reason("cannot write to standard output");
        if (n < 0) return os_reason("cannot read back the held output");
    }
    if (std::fflush(to) != 0 || std::ferror(to)) return os_reason("cannot write to standard output");
    return {};
}

int after_the_read(const CliStreams& io, std::function<int()> act)
{
    if (!io.then) return act();
    *io.then = std::move(act);
    return 0;
}

int run_reading_command(const std::string& db_path, const std::function<int(RunStore&, const CliStreams&)>& command)
{
    auto store = RunStore::open_read_only(db_path);
    HeldOutput held;
    std::function<int()> then;
    int code = read_consistently(store, [&](RunStore& s) {
        held.clear(); // an earlier, outdated read's
        then = nullptr;
        CliStreams io = held.streams();
        io.then = &then;
        return command(s, io);
    });
    if (code == 0 && then) code = then();
    if (const std::string problem = held.release(); !problem.empty()) {
        if (code != 0) return code; // the command said what went wrong (an export's cut table)
        std::fprintf(stderr, "error: %s\n", problem.c_str());
        return 2;
    }
    return code;
}

} // namespace mantissa
