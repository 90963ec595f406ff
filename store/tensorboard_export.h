// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A run as TensorBoard event files: scalars for every metric, histograms for the per-layer
// exponent histograms. TFRecord framing (length, masked CRC32C, payload, masked CRC32C)
// around hand-encoded Event protobufs, so no protobuf library is needed.

#include <cstdint>
#include <stdexcept>
#include <string>

#include "run_store.h"

namespace mantissa {

// The export file could not be written (a folder that cannot be made, a full disk): the
// output is the problem, not the store (`export` exits 2 for it, as for CSV).
struct ExportWriteError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A run's export, written while the store is read: a long run's histograms are never held
// whole (900,000 layer rows took 551 MB when they were read first). The event file is
// DIR/run<id>-<name>/events.out.tfevents.<run start, unix time>.mantissa (a folder per run:
// TensorBoard's unit of a run). It is written beside that name and takes it at commit(), once a
// reading command knows its read stood (consistent_read.h): destroyed uncommitted, the export
// leaves nothing, not even the folders it made. Event wall times are the run's own: its start
// plus the step times up to each step's end. Per layer and tensor, the exponent histogram and,
// as scalars, its NaN + Inf count and its underflow and overflow fractions: a layer that went
// all NaN has no histogram to show it.
class TensorBoardExport {
public:
    // Reads the run and writes the file; throws StoreError (the store) or ExportWriteError (the
    // output: a folder that cannot be made, a full disk).
    TensorBoardExport(RunStore& store, int64_t run_id, const std::string& dir);
    ~TensorBoardExport();
    TensorBoardExport(const TensorBoardExport&) = delete;
    TensorBoardExport& operator=(const TensorBoardExport&) = delete;

    bool empty() const { return events_ == 0; } // the run has recorded no metrics yet
    // Puts the file in place, replacing an earlier export of the run whole, and removes the
    // run's exports under other names; returns its path. Throws ExportWriteError.
    std::string commit();

private:
    void undo() noexcept;
    std::string dir_, folder_, path_, partial_, name_;
    std::string made_from_; // the highest folder the export made ("" where the run's was there)
    int64_t run_id_ = 0;
    bool committed_ = false;
    int64_t events_ = 0;
};

// Both, at once; returns the path.
std::string export_tensorboard(RunStore& store, int64_t run_id, const std::string& dir);

// CRC-32C (Castagnoli), and TFRecord's masked form of it. Exposed for tests.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

} // namespace mantissa
