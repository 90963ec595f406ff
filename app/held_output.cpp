// SPDX-License-Identifier: GPL-3.0-or-later
#include "held_output.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include <unistd.h>

#include "consistent_read.h"
#include "run_store.h"

namespace mantissa {

namespace {

// An unlinked file in $TMPDIR (else /tmp) that goes with its last descriptor; null where none
// can be made. std::tmpfile() ignores TMPDIR.
std::FILE* anonymous_temporary_file()
{
    const char* dir = std::getenv("TMPDIR");
    std::string name = std::string(dir && *dir ? dir : "/tmp") + "/mantissa-output.XXXXXX";
    const int fd = ::mkstemp(name.data());
    if (fd < 0) return nullptr;
    ::unlink(name.c_str());
    std::FILE* file = ::fdopen(fd, "w+");
    if (!file) ::close(fd);
    return file;
}

} // namespace

HeldOutput::HeldOutput()
{
    open(out_, /*on_disk=*/true);
    open(err_, /*on_disk=*/false);
}

HeldOutput::~HeldOutput()
{
    close(out_);
    close(err_);
}

void HeldOutput::open(HeldStream& s, bool on_disk)
{
    s.file = on_disk ? anonymous_temporary_file() : nullptr;
    s.on_disk = s.file != nullptr;
    if (!s.file) s.file = open_memstream(&s.data, &s.size);
    if (!s.file) throw std::bad_alloc();
}

void HeldOutput::close(HeldStream& s)
{
    if (s.file) std::fclose(s.file);
    std::free(s.data);
    s = {};
}

void HeldOutput::clear()
{
    const bool on_disk = out_.on_disk;
    close(out_);
    close(err_);
    open(out_, on_disk);
    open(err_, /*on_disk=*/false);
}

std::string HeldOutput::release()
{
    std::fflush(err_.file);
    std::fwrite(err_.data, 1, err_.size, stderr);
    const auto os_reason = [](const std::string& what) { return what + ": " + std::strerror(errno); };
    // Nothing of an output that was cut: a table short of its end must not read as whole.
    if (std::fflush(out_.file) != 0 || std::ferror(out_.file))
        return os_reason("cannot hold the output until the read stands (in $TMPDIR, else /tmp)");
    if (!out_.on_disk) {
        if (std::fwrite(out_.data, 1, out_.size, stdout) != out_.size)
            return os_reason("cannot write to standard output");
    } else {
        std::rewind(out_.file);
        char piece[64 * 1024];
        size_t n = 0;
        while ((n = std::fread(piece, 1, sizeof piece, out_.file)) > 0)
            if (std::fwrite(piece, 1, n, stdout) != n) return os_reason("cannot write to standard output");
        if (std::ferror(out_.file)) return os_reason("cannot read back the held output");
    }
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) return os_reason("cannot write to standard output");
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
