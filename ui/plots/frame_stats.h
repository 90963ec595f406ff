// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// How long the monitor's frames took (refresh + replot), for the frame scheduler's budget
// and for the status readout. Keeps the most recent `capacity` frames.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mantissa {

class FrameStats {
public:
    static constexpr size_t kDefaultCapacity = 10000;

    explicit FrameStats(size_t capacity = kDefaultCapacity);

    void record(double ms);
    void reset();

    // Frames kept (at most the capacity) and frames recorded since the last reset.
    size_t count() const { return samples_.size(); }
    uint64_t total() const { return total_; }
    double last() const { return last_; } // 0 before the first frame

    // Nearest-rank percentile of the kept frames, `p` in percent (0 = fastest, 100 = slowest);
    // 0 when empty.
    double percentile(double p) const;

private:
    size_t capacity_;
    std::vector<double> samples_; // a ring once full
    size_t next_ = 0;
    uint64_t total_ = 0;
    double last_ = 0.0;
};

} // namespace mantissa
