// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Reads that a writer starting meanwhile cannot tear.
//
// A read-only open of a store with no WAL beside it reads the file as immutable, without locks
// (RunStore::open_read_only). A writer that starts during such a read and checkpoints into the
// file (on its close, or every ~1000 pages) can hand the reader pages of two versions of the
// file: rows that never stood together, or "database disk image is malformed". The window
// reopens before each use; a one-shot command (`mantissa-train list/show/export/compare`) and
// a request of the store server read once, so they check afterwards and read again.

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "run_store.h"

namespace mantissa {

// A store that changed under this many reads in a row is reported, not read a fourth time.
// One more read nearly always suffices: the fresh connection finds the writer's WAL and reads
// through it, with locks, and is then never outdated.
inline constexpr int kConsistentReadTries = 3;

inline StoreError store_kept_changing(const std::string& path)
{
    return StoreError("run store '" + path + "' changed under " + std::to_string(kConsistentReadTries) +
                      " reads in a row (a writer started or ended each time): try again");
}

// One try of `read(RunStore&)` on `store`: its result, or none where the view it read was
// outdated by its end (RunStore::snapshot_outdated). A StoreError from a torn view
// ("malformed") is none too; one from a view that stayed current is the store's own and is
// thrown.
template <class Read>
auto read_once_consistently(RunStore& store, Read&& read) -> std::optional<decltype(read(store))>
{
    try {
        auto result = read(store);
        if (!store.snapshot_outdated()) return result;
    } catch (const StoreError&) {
        if (!store.snapshot_outdated()) throw;
    }
    return std::nullopt;
}

// `read(RunStore&)` on `store`, and again on a fresh read-only connection (put in `store`)
// while read_once_consistently finds the view it read outdated. `read` may run more than
// once: it must hold its results back (return them) rather than act on them.
template <class Read>
auto read_consistently(std::unique_ptr<RunStore>& store, Read&& read) -> decltype(read(*store))
{
    for (int attempt = 1;; ++attempt) {
        if (auto result = read_once_consistently(*store, read)) return std::move(*result);
        if (attempt == kConsistentReadTries) throw store_kept_changing(store->path());
        // Checked whole once already, by the first open.
        store = RunStore::open_read_only(store->path(), /*quick_check=*/false);
    }
}

} // namespace mantissa
