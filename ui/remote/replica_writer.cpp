// SPDX-License-Identifier: GPL-3.0-or-later
#include "remote/replica_writer.h"

namespace mantissa {

void ReplicaWriter::write(RunStore& replica, MirroredPage page, size_t bytes, Done done)
{
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) {
        stopping_ = false;
        thread_ = std::thread([this] { run(); });
    }
    jobs_.push_back({&replica, std::move(page), bytes, std::move(done)});
    pendingBytes_ += bytes;
    wake_.notify_one();
}

void ReplicaWriter::stop()
{
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
        jobs_.clear();
        pendingBytes_ = 0;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
}

size_t ReplicaWriter::pendingBytes()
{
    std::lock_guard lock(mutex_);
    return pendingBytes_;
}

void ReplicaWriter::run()
{
    for (;;) {
        Job job;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
            if (stopping_) return;
            job = std::move(jobs_.front());
            jobs_.pop_front();
        }
        std::string error;
        try {
            const MirroredPage& p = job.page;
            if (!p.scalars.empty() || !p.events.empty() || !p.layerStats.empty())
                job.replica->put_mirrored_rows(p.runId, p.scalars, p.events, p.layerStats);
        } catch (const std::exception& e) {
            error = e.what();
        }
        {
            std::lock_guard lock(mutex_);
            if (!error.empty()) jobs_.clear();
            // From the queue, not by subtraction: stop() may have cleared it meanwhile.
            pendingBytes_ = 0;
            for (const Job& queued : jobs_) pendingBytes_ += queued.bytes;
        }
        // Queued to the owner's thread; dropped by Qt if the owner is gone by then.
        QMetaObject::invokeMethod(owner_, [done = std::move(job.done), error] { done(error); }, Qt::QueuedConnection);
    }
}

} // namespace mantissa
