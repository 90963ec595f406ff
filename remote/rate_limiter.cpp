// SPDX-License-Identifier: GPL-3.0-or-later
#include "rate_limiter.h"

#include <algorithm>

namespace mantissa {

namespace {
constexpr size_t kMaxTrackedClients = 1024; // a flood of addresses cannot grow the map without bound
}

bool RateLimiter::allow(const std::string& client, Clock::time_point now)
{
    std::lock_guard lock(mutex_);
    auto it = buckets_.find(client);
    if (it == buckets_.end()) {
        if (buckets_.size() >= kMaxTrackedClients) {
            auto oldest = std::min_element(buckets_.begin(), buckets_.end(),
                                           [](const auto& a, const auto& b) { return a.second.last < b.second.last; });
            buckets_.erase(oldest);
        }
        it = buckets_.emplace(client, Bucket{burst_, now}).first;
    }
    Bucket& b = it->second;
    const double elapsed_s = std::chrono::duration<double>(now - b.last).count();
    b.tokens = std::min(burst_, b.tokens + std::max(0.0, elapsed_s) * per_second_);
    b.last = now;
    if (b.tokens < 1.0) return false;
    b.tokens -= 1.0;
    return true;
}

} // namespace mantissa
