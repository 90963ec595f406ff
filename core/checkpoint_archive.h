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

// The opened archive's format version, checked (ConfigError for one this version does not
// know), and the identity it records: empty fields for a checkpoint written before identities.
CheckpointIdentity read_checkpoint_header(const std::string& path, torch::serialize::InputArchive& archive);

} // namespace mantissa
