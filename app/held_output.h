// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What a reading command (list, show, export, compare) prints, held until its read of the
// store is known to be whole: read_consistently may read again, and a view that a writer tore
// must never reach the terminal or a redirected file. The output is held in an unlinked
// temporary file (in $TMPDIR, else /tmp), not in memory: `export 1 --table layers > l.csv` of a
// long run is gigabytes; the messages, and the output where no such file can be made, in memory.

#include <cstdio>
#include <functional>
#include <string>

namespace mantissa {

class RunStore;

// Where a command writes: its output and its messages.
struct CliStreams {
    std::FILE* out = stdout;
    std::FILE* err = stderr;
    // Where a reading command leaves what it does with what it read (an export writes its
    // file): done once, after the read stood. A file written from a view that a writer outdated
    // was written again by the next read, or left behind by a command that then failed.
    // Null: done at once.
    std::function<int()>* then = nullptr;
};

// `act` once the read stands (io.then), or now; its exit code where now, else 0.
int after_the_read(const CliStreams& io, std::function<int()> act);

class HeldOutput {
public:
    HeldOutput(); // throws std::bad_alloc where no stream can be made
    ~HeldOutput();
    HeldOutput(const HeldOutput&) = delete;
    HeldOutput& operator=(const HeldOutput&) = delete;

    CliStreams streams() const { return {out_.file, err_.file}; }
    void clear(); // drops what was written so far
    // Writes the messages to stderr, then the output to stdout. Where the output could not all
    // be held or could not all reach stdout (a full disk behind `> m.csv`): why, else "". A cut
    // table must not read as a whole one.
    std::string release();

private:
    struct HeldStream {
        std::FILE* file = nullptr;
        char* data = nullptr; // a memory stream's
        size_t size = 0;
        bool on_disk = false;
    };
    static void open(HeldStream& s, bool on_disk);
    static void close(HeldStream& s);
    HeldStream out_, err_;
};

// Opens the store read-only and runs `command` on it with held streams, again where a writer
// outdated the view meanwhile (consistent_read.h); then, where it exited 0, what it left to do
// after the read (CliStreams::then); then prints what they printed. Returns the exit code, or 2
// where stdout could not take the output.
int run_reading_command(const std::string& db_path, const std::function<int(RunStore&, const CliStreams&)>& command);

} // namespace mantissa
