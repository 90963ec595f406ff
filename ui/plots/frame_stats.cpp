// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/frame_stats.h"

#include <algorithm>
#include <cmath>

namespace mantissa {

FrameStats::FrameStats(size_t capacity) : capacity_(std::max<size_t>(1, capacity)) {}

void FrameStats::record(double ms)
{
    last_ = ms;
    ++total_;
    if (samples_.size() < capacity_) {
        samples_.push_back(ms);
        return;
    }
    samples_[next_] = ms;
    next_ = (next_ + 1) % capacity_;
}

void FrameStats::reset()
{
    samples_.clear();
    next_ = 0;
    total_ = 0;
    last_ = 0.0;
}

double FrameStats::percentile(double p) const
{
    if (samples_.empty()) return 0.0;
    const size_t n = samples_.size();
    // Nearest rank: the smallest value with at least p% of the samples at or below it.
    const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(n));
    const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(n))) - 1;
    std::vector<double> sorted(samples_);
    std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(index), sorted.end());
    return sorted[index];
}

} // namespace mantissa
