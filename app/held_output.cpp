// SPDX-License-Identifier: GPL-3.0-or-later
#include "held_output.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "consistent_read.h"
#include "run_store.h"

namespace mantissa {

HeldOutput::HeldOutput()
{
    open(out_);
    open(err_);
}

HeldOutput::~HeldOutput()
{
    close(out_);
    close(err_);
}

void HeldOutput::open(MemoryStream& s)
{
    s.file = open_memstream(&s.data, &s.size);
    if (!s.file) throw std::bad_alloc();
}

void HeldOutput::close(MemoryStream& s)
{
    if (s.file) std::fclose(s.file);
    std::free(s.data);
    s = {};
}

void HeldOutput::clear()
{
    close(out_);
    close(err_);
    open(out_);
    open(err_);
}

bool HeldOutput::release()
{
    std::fflush(out_.file);
    std::fflush(err_.file);
    std::fwrite(err_.data, 1, err_.size, stderr);
    const bool written = std::fwrite(out_.data, 1, out_.size, stdout) == out_.size;
    return written && std::fflush(stdout) == 0 && !std::ferror(stdout);
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
    if (!held.release()) {
        std::fprintf(stderr, "error: cannot write to standard output: %s\n", std::strerror(errno));
        return 2;
    }
    return code;
}

} // namespace mantissa
