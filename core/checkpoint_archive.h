// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Opening a checkpoint file for reading, the one way every reader does it (the trainer's
// resume, the weights export). Internal to core: includes LibTorch.

#include <string>

#include <torch/torch.h>

#include "checkpoint_file.h"

namespace mantissa {

// Reads `path` once, checks every record of its zip container against its CRC-32 (LibTorch
// would load flipped bits in a tensor's bytes without a word), then parses it from memory
// onto the CPU: a checkpoint written on a GPU opens on a CPU and back. Throws ConfigError
// ("checkpoint '…' cannot be read: …") for a damaged file, std::runtime_error when it cannot
// be opened or read.
void open_checkpoint_archive(const std::string& path, torch::serialize::InputArchive& archive);

// Called inside a catch while a checkpoint loads: says what the exception means. Running out
// of memory (c10::OutOfMemoryError, std::bad_alloc, LibTorch's CPU allocator's plain c10::Error)
// is no damage, and comes back as std::runtime_error: a resume or an export that took it for
// damage would fall back to an older checkpoint (and a user might delete the "damaged" one).
// A ConfigError stays one; anything else is the file's: ConfigError "cannot be read".
[[noreturn]] void rethrow_checkpoint_load_failure(const std::string& path);

// The opened archive's format version, checked (ConfigError for one this version does not
// know), and the identity it records: empty fields for a checkpoint written before identities.
CheckpointIdentity read_checkpoint_header(const std::string& path, torch::serialize::InputArchive& archive);

} // namespace mantissa
