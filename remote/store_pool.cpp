// SPDX-License-Identifier: GPL-3.0-or-later
#include "store_pool.h"

namespace mantissa {

StorePool::Lease StorePool::acquire()
{
    {
        std::lock_guard lock(mutex_);
        while (!idle_.empty()) {
            Entry e = std::move(idle_.back());
            idle_.pop_back();
            const bool stale = Clock::now() - e.opened > max_age_ || e.store->snapshot_outdated();
            if (stale) continue;
            e.store->refresh_dead_runs(); // a run resumed since is "running" again
            return Lease(*this, std::move(e));
        }
    }
    // StoreServer checked the whole file once before it listened; a quick_check per (re)opened
    // connection cost the first request after each ~150 ms on a 1-M-row store.
    Entry e{RunStore::open_read_only(path_, /*quick_check=*/false), Clock::now()};
    return Lease(*this, std::move(e));
}

void StorePool::give_back(Entry entry)
{
    if (!entry.store) return;
    std::lock_guard lock(mutex_);
    idle_.push_back(std::move(entry));
}

} // namespace mantissa
