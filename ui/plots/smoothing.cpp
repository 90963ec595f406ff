// SPDX-License-Identifier: GPL-3.0-or-later
#include "plots/smoothing.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace mantissa {

DecimatedSeries decimate_min_max(const std::vector<double>& xs, const std::vector<double>& ys, size_t buckets)
{
    const size_t n = std::min(xs.size(), ys.size());
    if (buckets == 0 || n <= 4 * buckets) return {std::vector<double>(xs.begin(), xs.begin() + std::ptrdiff_t(n)),
                                                  std::vector<double>(ys.begin(), ys.begin() + std::ptrdiff_t(n))};
    DecimatedSeries out;
    out.xs.reserve(4 * buckets + 8);
    out.ys.reserve(4 * buckets + 8);
    const double x0 = xs.front();
    const double span = xs[n - 1] - x0;
    const double perX = span > 0.0 ? static_cast<double>(buckets) / span : 0.0;
    auto bucketOf = [&](size_t i) {
        const double b = std::floor((xs[i] - x0) * perX);
        return std::min(static_cast<size_t>(std::max(0.0, b)), buckets - 1);
    };

    constexpr size_t kNone = static_cast<size_t>(-1);
    size_t first = 0, last = 0, lo = kNone, hi = kNone, nan = kNone;
    size_t current = bucketOf(0);
    auto flush = [&] {
        std::array<size_t, 5> keep{first, lo, hi, nan, last};
        std::sort(keep.begin(), keep.end());
        size_t previous = kNone;
        for (size_t i : keep) {
            if (i == kNone || i == previous) continue;
            out.xs.push_back(xs[i]);
            out.ys.push_back(ys[i]);
            previous = i;
        }
    };
    for (size_t i = 0; i < n; ++i) {
        const size_t b = bucketOf(i);
        if (b != current) {
            flush();
            current = b;
            first = i;
            lo = hi = nan = kNone;
        }
        last = i;
        const double y = ys[i];
        if (std::isnan(y)) {
            if (nan == kNone) nan = i;
            continue;
        }
        if (lo == kNone || y < ys[lo]) lo = i;
        if (hi == kNone || y > ys[hi]) hi = i;
    }
    flush();
    return out;
}

} // namespace mantissa
