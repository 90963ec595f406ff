// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What a checkpoint file is, apart from its tensors: its name (step-00000100.pt), the run it
// belongs to (identity), and a checksum that the run store records when it is written and
// checks before it is loaded. No LibTorch here.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "project_config.h"

namespace mantissa {

// A checkpoint that belongs to another run or another model: loading it would silently
// continue someone else's training, so it is refused, never skipped.
class CheckpointMismatch : public ConfigError {
public:
    using ConfigError::ConfigError;
};
// The checkpoint's data fingerprint is not the project's data's.
class CheckpointOfOtherData : public CheckpointMismatch {
public:
    using CheckpointMismatch::CheckpointMismatch;
};

// The layout a checkpoint is written in (docs/CHECKPOINTS.md). A file of another version is
// refused (CheckpointMismatch), never taken for a damaged one.
constexpr int64_t kCheckpointFormatVersion = 1;

// "step-00000100.pt": zero-padded so that names sort by step.
std::string checkpoint_file_name(int64_t step);
// The step of a file named exactly as checkpoint_file_name names it, else nullopt (step-abc.pt,
// step-5.pt, notes.txt).
std::optional<int64_t> checkpoint_step(const std::string& path);
// The checkpoints in `dir` (only names checkpoint_step accepts), oldest first; empty if the
// folder does not exist.
std::vector<std::string> list_checkpoints(const std::string& dir);

// Which run wrote a checkpoint. run_uuid is empty in checkpoints of Mantissa before store
// schema 4: those cannot say whose they are.
struct CheckpointIdentity {
    std::string run_uuid;    // RunInfo::uuid, 32 hex digits
    int64_t run_id = 0;      // the id in the store that wrote it (ids repeat across stores)
    std::string model_shape; // model_shape_text of the model it holds
};

// "n_layer=2 n_head=4 n_embd=64 context_length=32 vocab_size=13 bias=1": everything that fixes
// the tensor shapes.
std::string model_shape_text(const ModelConfig& model, int64_t vocab_size);
// One line, stored inside the checkpoint; parse_identity_text reads it back (empty fields
// for text it does not understand).
std::string identity_text(const CheckpointIdentity& identity);
CheckpointIdentity parse_identity_text(const std::string& text);
// "run 3 (uuid 0123...)" for messages.
std::string describe_identity(const CheckpointIdentity& identity);
// Throws CheckpointMismatch ("checkpoint '…' belongs to run 3 (uuid …), not to …") when the
// checkpoint at `path` names a run other than `expected`; not where either uuid is unknown.
void refuse_another_runs_checkpoint(const std::string& path, const CheckpointIdentity& theirs,
                                    const CheckpointIdentity& expected);
// Reads only the identity out of a checkpoint file; nullopt when the file cannot be read or
// predates identities.
std::optional<CheckpointIdentity> read_checkpoint_identity(const std::string& path);
// The same, telling apart a readable checkpoint without an identity (written before
// identities) from a file that cannot be read as a checkpoint (damaged, cut, something else).
struct CheckpointOwnership {
    bool readable = false;
    std::optional<CheckpointIdentity> identity;
};
CheckpointOwnership read_checkpoint_ownership(const std::string& path);

// 64-bit FNV-1a over the file's bytes, "fnv1a64:" + 16 hex digits. Any damage worth the name
// (a flipped run of bytes, a truncated tail) changes it. Throws std::runtime_error naming the
// file when it cannot be read.
struct FileChecksum {
    std::string checksum;
    int64_t bytes = 0;
};
FileChecksum checksum_file(const std::string& path);

} // namespace mantissa
