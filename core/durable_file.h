// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A file replaced whole or not at all: a checkpoint, or an export over an earlier one, where a full
// disk or a crash must never leave a short file in place of a good one.

#include <stdexcept>
#include <string>
#include <string_view>

namespace mantissa {

// A write the device had no room for (ENOSPC, EDQUOT): the caller may make room and try again
// (a checkpoint's rotation).
struct NoSpaceError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

class DurableFile {
public:
    // Opens a temporary file of its own beside `path` ("<path>.tmp.<host>.<pid>.<n>") for writing;
    // throws std::runtime_error naming `path`, with the OS's reason ("No such file or directory").
    explicit DurableFile(std::string path);
    // Without commit() (an error on the way): the temporary file is removed, `path` untouched.
    ~DurableFile();
    DurableFile(const DurableFile&) = delete;
    DurableFile& operator=(const DurableFile&) = delete;

    // All of `data`, or std::runtime_error ("No space left on device": a NoSpaceError).
    void write(std::string_view data);
    // Flushes the data to the device, renames the temporary file over `path`, and flushes the
    // folder (where the file system can), so the new file is there after a power loss.
    void commit();

private:
    [[noreturn]] void fail(int error);
    std::string path_, temporary_;
    std::string untouched_; // "(the file is as it was)", or "(nothing was written there)"
    int fd_ = -1;
};

// Removes the temporary files in `folder` that a DurableFile of this host left when its
// process died (killed while writing a checkpoint): one of a process still alive, or of
// another host (a shared folder), is left.
void remove_stale_temporaries(const std::string& folder);

// All of `data` to the descriptor, through short writes and EINTR; false with errno set
// (ENOSPC where the device took nothing) where it could not.
bool write_all(int fd, std::string_view data);

// The whole of `data` as `path`, through a DurableFile.
void replace_file_durably(const std::string& path, std::string_view data);

// Why this process cannot open `path` for reading ("Permission denied", "it is a directory"),
// or "" when it can, without opening it (safe beside SQLite's locks): a file that cannot be
// opened was never read, so it is neither damaged nor some other kind of file, and nothing may
// be written over it on that account.
std::string unreadable_reason(const std::string& path);
// Why this process (its effective user) may not use `path` as `mode` asks (R_OK, W_OK, X_OK as
// for access(2)), or "" when it may. Never opens the file, as above.
std::string access_problem(const std::string& path, int mode);

} // namespace mantissa
