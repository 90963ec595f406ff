// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A run as TensorBoard event files: scalars for every metric, histograms for the per-layer
// exponent histograms. TFRecord framing (length, masked CRC32C, payload, masked CRC32C)
// around hand-encoded Event protobufs, so no protobuf library is needed.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "run_store.h"

namespace mantissa {

// The export file could not be written (a folder that cannot be made, a full disk): the
// output is the problem, not the store (`export` exits 2 for it, as for CSV).
struct ExportWriteError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// What an export writes, read from the store first: a reading command reads again where a
// writer outdated its view (consistent_read.h), and writes once, from the read that stood.
struct TensorBoardRun {
    int64_t run_id = 0;
    std::string name, created_at;
    std::vector<ScalarRow> scalars;
    std::vector<std::pair<int64_t, TensorStats>> layer_stats;
};
TensorBoardRun read_tensorboard_run(RunStore& store, int64_t run_id); // throws StoreError

// Writes DIR/run<id>-<name>/events.out.tfevents.<run start, unix time>.mantissa (a folder per
// run: TensorBoard's unit of a run), replacing an earlier export of the run whole; returns its
// path. Event wall times are the run's own: its start plus the step times up to each step's end.
// Per layer and tensor, the exponent histogram and, as scalars, its NaN + Inf count and its
// underflow and overflow fractions: a layer that went all NaN has no histogram to show it.
// Throws ExportWriteError.
std::string write_tensorboard_run(const TensorBoardRun& run, const std::string& dir);
std::string export_tensorboard(RunStore& store, int64_t run_id, const std::string& dir); // read, then write

// CRC-32C (Castagnoli), and TFRecord's masked form of it. Exposed for tests.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

} // namespace mantissa
