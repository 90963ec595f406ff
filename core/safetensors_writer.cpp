// SPDX-License-Identifier: GPL-3.0-or-later
#include "safetensors_writer.h"

#include <nlohmann/json.hpp>

#include "durable_file.h"
#include "project_config.h"

namespace mantissa {
namespace {

const char* dtype_name(c10::ScalarType t)
{
    switch (t) {
    case torch::kFloat32: return "F32";
    case torch::kFloat16: return "F16";
    case torch::kBFloat16: return "BF16";
    case torch::kInt64: return "I64";
    default: throw ConfigError(std::string("safetensors: unsupported dtype ") + c10::toString(t));
    }
}

} // namespace

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata)
{
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::vector<torch::Tensor> data;
    int64_t offset = 0;
    for (const auto& [name, tensor] : tensors) {
        auto t = tensor.detach().cpu().contiguous();
        const int64_t bytes = static_cast<int64_t>(t.numel() * t.element_size());
        header[name] = {{"dtype", dtype_name(t.scalar_type())}, {"shape", t.sizes().vec()},
                        {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
        data.push_back(t);
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' '); // the data must start 8-byte aligned
    const auto length = static_cast<uint64_t>(text.size());

    // Over an earlier export whole or not at all (a full disk leaves the old file as it was).
    DurableFile out(path);
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(length >> (8 * i)); // little-endian
    out.write(std::string_view(reinterpret_cast<const char*>(le), 8));
    out.write(text);
    for (const auto& t : data)
        out.write(std::string_view(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel() * t.element_size())));
    out.commit();
}

} // namespace mantissa
