// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Weights in the safetensors format (huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}
// padded with spaces to 8 bytes, then the raw little-endian tensor bytes.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace mantissa {

// Writes whole or not at all (DurableFile: a temporary file flushed to the device, then
// renamed): a failure throws std::runtime_error naming the file and leaves an earlier one as
// it was. Tensors are written in the order given, as F32/F16/BF16/I64 by their dtype.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

} // namespace mantissa
