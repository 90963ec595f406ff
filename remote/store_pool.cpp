// SPDX-License-Identifier: GPL-3.0-or-later
#include "store_pool.h"

#include <filesystem>

#include <sys/stat.h>

namespace mantissa {

bool StorePool::wal_present() const
{
    std::error_code ec;
    return std::filesystem::exists(path_ + "-wal", ec);
}

StorePool::FileStamp StorePool::stamp() const
{
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) return {};
    return {uint64_t(st.st_ino), uint64_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
            int64_t(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

StorePool::Lease StorePool::acquire()
{
    const bool wal = wal_present();
    const FileStamp now_stamp = stamp();
    {
        std::lock_guard lock(mutex_);
        while (!idle_.empty()) {
            Entry e = std::move(idle_.back());
            idle_.pop_back();
            const bool stale = Clock::now() - e.opened > max_age_ ||
                               (!e.wal_at_open && (wal || e.stamp != now_stamp));
            if (!stale) return Lease(*this, std::move(e));
        }
    }
    // StoreServer checked the whole file once before it listened; a quick_check per (re)opened
    // connection cost the first request after each ~150 ms on a 1-M-row store.
    Entry e{RunStore::open_read_only(path_, /*quick_check=*/false), Clock::now(), wal, now_stamp};
    return Lease(*this, std::move(e));
}

void StorePool::give_back(Entry entry)
{
    if (!entry.store) return;
    std::lock_guard lock(mutex_);
    idle_.push_back(std::move(entry));
}

} // namespace mantissa
