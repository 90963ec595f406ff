// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Read-only connections to the served store, reused across requests: opening one checks the
// whole file (PRAGMA quick_check), which a 1-M-row store must not pay per request.
// A connection lent again asks which running runs lost their process (a run that died, or
// was resumed, since). It is opened again when it is older than `max_age`, and when its view of the file is outdated
// (RunStore::snapshot_outdated: a writer started, or changed the file and closed it, since
// it was opened as immutable).

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "consistent_read.h"
#include "run_store.h"

namespace mantissa {

class StorePool {
public:
    using Clock = std::chrono::steady_clock;
    explicit StorePool(std::string path, Clock::duration max_age = std::chrono::seconds(30))
        : path_(std::move(path)), max_age_(max_age)
    {
    }

    struct Entry {
        std::unique_ptr<RunStore> store;
        Clock::time_point opened;
    };

    // A connection for one request, back to the pool when the lease ends. Throws StoreError.
    class Lease {
    public:
        Lease(StorePool& pool, Entry entry) : pool_(pool), entry_(std::move(entry)) {}
        ~Lease() { pool_.give_back(std::move(entry_)); }
        Lease(const Lease&) = delete;
        Lease& operator=(const Lease&) = delete;
        RunStore& operator*() { return *entry_.store; }
        RunStore* operator->() { return entry_.store.get(); }

    private:
        StorePool& pool_;
        Entry entry_;
    };

    Lease acquire();

    // `read(RunStore&)` on a lent connection, and again on a fresh one while a writer that
    // started or ended meanwhile outdated the view it read (consistent_read.h). `read` may run
    // more than once. Throws StoreError.
    template <class Read>
    auto read(Read&& read) -> decltype(read(std::declval<RunStore&>()))
    {
        for (int attempt = 1;; ++attempt) {
            Lease lease = acquire(); // an outdated connection given back is not lent again
            if (auto result = read_once_consistently(*lease, read)) return std::move(*result);
            if (attempt == kConsistentReadTries) throw store_kept_changing(path_);
        }
    }

private:
    void give_back(Entry entry);

    std::string path_;
    Clock::duration max_age_;
    std::mutex mutex_;
    std::vector<Entry> idle_;
};

} // namespace mantissa
