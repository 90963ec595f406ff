// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A checkpoint's model weights as safetensors, read straight out of the file: no Trainer, so
// no training data and no GPU are needed. A run trained on a server exports on a laptop, and
// a run whose data was moved or deleted still gives its weights.

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include "checkpoint_file.h"

namespace mantissa {

// The output could not be written (a missing folder, a full disk); the checkpoint is fine.
class WeightsWriteError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Writes the checkpoint's "model/<name>" tensors, in the order the trainer saved them (its
// named_parameters), to `out` as safetensors named <name>, with `metadata` plus "step", and
// returns that step.
// Throws CheckpointMismatch when the file says it belongs to a run other than `expected`'s
// (checked where both uuids are known), ConfigError when it cannot be read as a checkpoint (damaged,
// cut, another format version), and WeightsWriteError when `out` cannot be written, which
// leaves an earlier file there as it was.
int64_t export_checkpoint_weights(const std::string& checkpoint, const std::string& out,
                                  const CheckpointIdentity& expected, std::map<std::string, std::string> metadata = {});

} // namespace mantissa
