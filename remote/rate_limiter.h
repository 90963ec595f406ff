// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Requests per second per client address, as a token bucket: a client may send `burst`
// requests at once, then `per_second` on average. Thread-safe.

#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace mantissa {

class RateLimiter {
public:
    using Clock = std::chrono::steady_clock;
    RateLimiter(double per_second, double burst) : per_second_(per_second), burst_(burst) {}
    // True when `client` may make one more request now (and counts it).
    bool allow(const std::string& client, Clock::time_point now = Clock::now());

private:
    struct Bucket {
        double tokens = 0;
        Clock::time_point last;
    };
    double per_second_, burst_;
    std::mutex mutex_;
    std::map<std::string, Bucket> buckets_; // at most 1024 addresses, the least recent dropped
};

} // namespace mantissa
