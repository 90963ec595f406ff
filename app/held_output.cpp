// SPDX-License-Identifier: GPL-3.0-or-later
#include "held_output.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

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

int run_reading_command(const std::string& db_path, const std::function<int(RunStore&, const CliStreams&)>& command)
{
    auto store = RunStore::open_read_only(db_path);
    HeldOutput held;
    const int code = read_consistently(store, [&](RunStore& s) {
        held.clear(); // an earlier, outdated read's
        return command(s, held.streams());
    });
    if (!held.release()) {
        std::fprintf(stderr, "error: cannot write to standard output: %s\n", std::strerror(errno));
        return 2;
    }
    return code;
}

} // namespace mantissa
