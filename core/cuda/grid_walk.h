// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A grid-stride walk over the (row, column) cells of a matrix of blocks or tiles: cell b of the
// walk is row b / per_row, column b % per_row. The 64-bit division and remainder, about a
// hundred instructions where a cell's own work is a few hundred (cuobjdump, sm_90), are made
// once; each step then adds the stride's quotient and remainder, with a carry.

#include <cstdint>

#include "launch.h"

namespace mantissa::cuda_kernels {

struct BlockWalk {
    int64_t b, r, cb, step, step_r, step_c, per_row;
    __device__ BlockWalk(int64_t first, int64_t stride, int64_t cells_per_row)
        : b(first), r(first / cells_per_row), cb(first % cells_per_row), step(stride),
          step_r(stride / cells_per_row), step_c(stride % cells_per_row), per_row(cells_per_row)
    {
    }
    __device__ void next()
    {
        b += step, r += step_r, cb += step_c;
        if (cb >= per_row) cb -= per_row, ++r;
    }
};

} // namespace mantissa::cuda_kernels
