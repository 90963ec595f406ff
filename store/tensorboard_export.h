// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A run as TensorBoard event files: scalars for every metric, histograms for the per-layer
// exponent histograms. TFRecord framing (length, masked CRC32C, payload, masked CRC32C)
// around hand-encoded Event protobufs, so no protobuf library is needed.

#include <cstdint>
#include <string>

#include "run_store.h"

namespace mantissa {

// Writes DIR/events.out.tfevents.<unix time>.mantissa; returns its path. Throws StoreError.
std::string export_tensorboard(RunStore& store, int64_t run_id, const std::string& dir);

// CRC-32C (Castagnoli), and TFRecord's masked form of it. Exposed for tests.
uint32_t crc32c(const void* data, size_t size);
uint32_t masked_crc32c(const void* data, size_t size);

} // namespace mantissa
