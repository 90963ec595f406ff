// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What a reading command (list, show, export, compare) prints, held until its read of the
// store is known to be whole: read_consistently may read again, and a view that a writer tore
// must never reach the terminal or a redirected file. Held in memory up to 16 MiB, and past
// that in an unlinked temporary file (in $TMPDIR, else /tmp): `export 1 --table layers > l.csv`
// of a long run is gigabytes. Where that file cannot be made or fills up, in memory again:
// a full $TMPDIR must not stop `list`.

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
    // Past `memoryBytes` the output goes to the file. Throws std::bad_alloc where no stream can
    // be made.
    explicit HeldOutput(size_t memoryBytes = kMemoryBytes);
    ~HeldOutput();
    HeldOutput(const HeldOutput&) = delete;
    HeldOutput& operator=(const HeldOutput&) = delete;

    CliStreams streams() const { return {out_, err_}; }
    void clear(); // drops what was written so far
    // Writes the messages to stderr, then the output to stdout. Where the output could not all
    // be held or could not all reach stdout (a full disk behind `> m.csv`): why, else "". A cut
    // table must not read as a whole one.
    std::string release(std::FILE* to = stdout, std::FILE* messages_to = stderr);
    bool spilled() const; // the output went to the temporary file

    static constexpr size_t kMemoryBytes = size_t(16) << 20;

    struct Spilling; // the output's buffer: memory, then the file

private:
    void open();
    void close();
    size_t memoryBytes_;
    std::FILE* out_ = nullptr;
    std::FILE* err_ = nullptr;
    char* errData_ = nullptr; // err_'s memory stream
    size_t errSize_ = 0;
    Spilling* spilling_ = nullptr;
};

// Opens the store read-only and runs `command` on it with held streams, again where a writer
// outdated the view meanwhile (consistent_read.h); then, where it exited 0, what it left to do
// after the read (CliStreams::then); then prints what they printed. Returns the exit code, or 2
// where stdout could not take the output.
int run_reading_command(const std::string& db_path, const std::function<int(RunStore&, const CliStreams&)>& command);

} // namespace mantissa
