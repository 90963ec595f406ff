// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Writes the mirror's pages of rows into its replica on a thread of its own, one after the
// other in the order given, so that the GUI thread — where the Monitor reads the same replica
// and draws — is not held by SQLite's inserts (~1 µs a row: a second for a 1-M-row run).
// Each write's outcome comes back to the owner's thread as a queued call.

#include <QObject>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "run_store.h"

namespace mantissa {

struct MirroredPage {
    int64_t runId = 0;
    std::vector<ScalarRow> scalars;
    std::vector<StoredEventRow> events;
    std::vector<std::pair<int64_t, TensorStats>> layerStats;
};

class ReplicaWriter {
public:
    // `error`: "" when the page is in the replica, else the StoreError's message.
    using Done = std::function<void(const std::string& error)>;

    explicit ReplicaWriter(QObject* owner) : owner_(owner) {}
    ~ReplicaWriter() { stop(); }
    ReplicaWriter(const ReplicaWriter&) = delete;
    ReplicaWriter& operator=(const ReplicaWriter&) = delete;

    // Queues `page` for `replica` (RunStore serialises it with the owner's own calls); `done`
    // runs in the owner's thread once it is written, in order (an empty page too: its done
    // comes after every earlier page's). After a failed write the pages queued
    // behind it are dropped (their done never runs): the owner stops there.
    // `bytes`: what the page weighs (its size on the wire), summed by pendingBytes().
    void write(RunStore& replica, MirroredPage page, size_t bytes, Done done);
    // Waits for the write under way, drops the ones queued, ends the thread. write() starts it again.
    void stop();
    // The bytes of the pages queued or being written.
    size_t pendingBytes();

private:
    struct Job {
        RunStore* replica = nullptr;
        MirroredPage page;
        size_t bytes = 0;
        Done done;
    };
    void run();

    QObject* owner_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<Job> jobs_;
    bool stopping_ = false;
    size_t pendingBytes_ = 0;
    std::thread thread_;
};

} // namespace mantissa
