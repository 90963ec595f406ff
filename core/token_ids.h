// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// One split's token ids, read-only: held in memory (text, synthetic data) or mapped from a
// nanoGPT .bin file. Mapped, a 9-billion-token train.bin costs page cache that every rank of a
// data-parallel run shares, instead of 18 GB of heap in each process.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mantissa {

class TokenIds {
public:
    TokenIds() = default;
    explicit TokenIds(std::vector<uint16_t> owned);
    // Maps a file of native little-endian uint16 ids read-only. The file must not be rewritten
    // in place while a run reads it (write a new file and rename it over the old one): the
    // kernel would end the process with SIGBUS on a truncated page, as it does nanoGPT's
    // np.memmap. Throws std::runtime_error with the system's reason when it cannot map.
    static TokenIds map_file(const std::string& path, std::size_t bytes);

    const uint16_t* data() const { return data_; }
    std::size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    uint16_t operator[](std::size_t i) const { return data_[i]; }
    uint16_t front() const { return data_[0]; }
    const uint16_t* begin() const { return data_; }
    const uint16_t* end() const { return data_ + size_; }
    bool mapped() const { return mapped_; }

    friend bool operator==(const TokenIds& a, const std::vector<uint16_t>& b);

private:
    std::shared_ptr<const void> keep_; // the vector or the mapping, alive while any copy is
    const uint16_t* data_ = nullptr;
    std::size_t size_ = 0;
    bool mapped_ = false;
};

} // namespace mantissa
