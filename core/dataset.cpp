// SPDX-License-Identifier: GPL-3.0-or-later
#include "dataset.h"
#include "fnv1a.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace mantissa {
namespace fs = std::filesystem;

namespace {

// The character whose UTF-8 starts at s[i]: its length in bytes, or 0 where the bytes there
// are no valid UTF-8 (a stray continuation byte, a cut sequence, an overlong form, a surrogate).
size_t utf8_character_at(const unsigned char* s, size_t n, size_t i, char32_t& cp)
{
    const unsigned char c = s[i];
    int extra = 0;
    if (c < 0x80) { cp = c; }
    else if ((c >> 5) == 0x6) { extra = 1; cp = c & 0x1F; }
    else if ((c >> 4) == 0xE) { extra = 2; cp = c & 0x0F; }
    else if ((c >> 3) == 0x1E) { extra = 3; cp = c & 0x07; }
    else return 0;
    if (extra > 0 && i + static_cast<size_t>(extra) >= n) return 0; // truncated sequence
    for (int k = 1; k <= extra; ++k) {
        const unsigned char cc = s[i + static_cast<size_t>(k)];
        if ((cc >> 6) != 0x2) return 0;
        cp = (cp << 6) | (cc & 0x3F);
    }
    // Reject overlong forms and surrogates, as Python's decoder does.
    const bool overlong = (extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return static_cast<size_t>(extra) + 1;
}

} // namespace

std::vector<char32_t> decode_utf8(const std::string& text, const std::string& what)
{
    std::vector<char32_t> out;
    out.reserve(text.size());
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    for (size_t i = 0; i < text.size();) {
        char32_t cp = 0;
        const size_t length = utf8_character_at(s, text.size(), i, cp);
        if (length == 0) throw ConfigError(what + " is not valid UTF-8 (byte offset " + std::to_string(i) + ")");
        out.push_back(cp);
        i += length;
    }
    return out;
}

std::string replace_invalid_utf8(const std::string& bytes)
{
    std::string out;
    out.reserve(bytes.size());
    const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
    for (size_t i = 0; i < bytes.size();) {
        char32_t cp = 0;
        const size_t length = utf8_character_at(s, bytes.size(), i, cp);
        if (length == 0) {
            out += "\xEF\xBF\xBD"; // U+FFFD, one per byte
            ++i;
            continue;
        }
        out.append(bytes, i, length);
        i += length;
    }
    return out;
}

std::string encode_utf8(const std::vector<char32_t>& code_points)
{
    std::string out;
    out.reserve(code_points.size());
    for (char32_t cp : code_points) {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }
    return out;
}

Vocabulary Vocabulary::characters(std::vector<char32_t> sorted_code_points)
{
    Vocabulary v;
    v.kind_ = Kind::Characters;
    v.size_ = static_cast<int64_t>(sorted_code_points.size());
    v.code_points_ = std::move(sorted_code_points);
    return v;
}

Vocabulary Vocabulary::bytes()
{
    Vocabulary v;
    v.kind_ = Kind::Bytes;
    v.size_ = 256;
    return v;
}

Vocabulary Vocabulary::opaque(int64_t size)
{
    Vocabulary v;
    v.kind_ = Kind::Opaque;
    v.size_ = size;
    return v;
}

std::string Vocabulary::decode(const std::vector<int64_t>& ids) const
{
    switch (kind_) {
    case Kind::Characters: {
        std::vector<char32_t> cps;
        cps.reserve(ids.size());
        for (int64_t id : ids) cps.push_back(code_points_.at(static_cast<size_t>(id)));
        return encode_utf8(cps);
    }
    case Kind::Bytes: {
        // Byte-level samples can cut a multi-byte character, or be any bytes at all: that is
        // what the model produced. Text is UTF-8 from here on (events, the store's JSON, the
        // GUI), and a raw byte failed the run at its first sample ("invalid UTF-8 byte"):
        // each byte no character holds reads U+FFFD.
        std::string out;
        for (int64_t id : ids) out += static_cast<char>(id);
        return replace_invalid_utf8(out);
    }
    case Kind::Opaque: break;
    }
    std::ostringstream out;
    for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
    return out.str();
}

std::vector<int64_t> Vocabulary::encode(const std::string& utf8) const
{
    std::vector<int64_t> ids;
    if (kind_ == Kind::Bytes) {
        for (unsigned char c : utf8) ids.push_back(c);
        return ids;
    }
    if (kind_ != Kind::Characters) throw ConfigError("this vocabulary has no tokenizer for text prompts");
    for (char32_t cp : decode_utf8(utf8, "prompt")) {
        auto it = std::lower_bound(code_points_.begin(), code_points_.end(), cp);
        if (it == code_points_.end() || *it != cp) {
            char code[16];
            std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(cp));
            throw ConfigError("prompt has a character that is not in the vocabulary (" + std::string(code) + ")");
        }
        ids.push_back(it - code_points_.begin());
    }
    return ids;
}

int64_t addition_val_lines(int64_t examples, double val_fraction)
{
    return val_fraction > 0.0 ? std::llround(static_cast<double>(examples) * val_fraction) : 0;
}

std::string make_addition_text(int64_t digits, int64_t examples, uint64_t seed, double val_fraction)
{
    // Operands are uniform in [0, 10^digits); the sum is written out in full, so a model
    // that learns to add drives the loss on the answer characters towards zero.
    std::mt19937_64 rng(seed);
    int64_t limit = 1;
    for (int64_t i = 0; i < digits; ++i) limit *= 10;
    std::uniform_int_distribution<int64_t> operand(0, limit - 1);
    // Which split a pair belongs to: a hash of it (splitmix64), so the two never share one. At
    // 2 digits (10^4 pairs, 2*10^4 examples) drawing both splits from all pairs put 84% of the
    // validation lines in the training text too.
    const auto in_val = [&](int64_t a, int64_t b) {
        uint64_t z = static_cast<uint64_t>(a) * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(b) + seed;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        z ^= z >> 31;
        return static_cast<double>(z >> 11) * 0x1.0p-53 < val_fraction;
    };
    // Few enough pairs to list: sample each split from its own list (one may be empty: then
    // that split takes from all pairs, as the only choice). Else reject pairs of the other split.
    const bool listed = limit <= 1000;
    std::vector<std::pair<int64_t, int64_t>> pools[2];
    if (listed && val_fraction > 0.0)
        for (int64_t a = 0; a < limit; ++a)
            for (int64_t b = 0; b < limit; ++b) pools[in_val(a, b) ? 1 : 0].emplace_back(a, b);
    const int64_t n_val = addition_val_lines(examples, val_fraction);
    // Too many pairs to list, a split's pairs are drawn by rejection, about 1/share draws each:
    // a split of almost none of them (val_fraction 0.99999999) drew for ever, and is refused.
    const auto too_few = [&](bool val_split) {
        std::ostringstream fraction;
        fraction << std::setprecision(12) << val_fraction;
        return "data.val_fraction: " + fraction.str() + " leaves the " + (val_split ? "validation" : "training") +
               " split too few of the " + std::to_string(limit) + "x" + std::to_string(limit) + " pairs of " +
               std::to_string(digits) + "-digit operands to draw from; take a fraction within [0.0001, 0.9999]";
    };
    constexpr double kLeastShare = 1e-4;
    if (!listed && val_fraction > 0.0) {
        if (n_val < examples && 1.0 - val_fraction < kLeastShare) throw ConfigError(too_few(false));
        if (n_val > 0 && val_fraction < kLeastShare) throw ConfigError(too_few(true));
    }
    std::string text;
    text.reserve(static_cast<size_t>(examples) * static_cast<size_t>(3 * digits + 4));
    for (int64_t i = 0; i < examples; ++i) {
        const bool val = i >= examples - n_val;
        int64_t a = operand(rng), b = operand(rng);
        if (val_fraction > 0.0) {
            const auto& pool = pools[val ? 1 : 0];
            if (listed && !pool.empty()) {
                std::tie(a, b) = pool[static_cast<size_t>(std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng))];
            } else if (!listed) {
                int64_t tries = 0; // a backstop: the check above leaves each split 1 in 10^4 of the pairs
                while (in_val(a, b) != val) {
                    if (++tries == (int64_t{1} << 20)) throw ConfigError(too_few(val));
                    a = operand(rng);
                    b = operand(rng);
                }
            }
        }
        text += std::to_string(a) + "+" + std::to_string(b) + "=" + std::to_string(a + b) + "\n";
    }
    return text;
}

namespace {

// A data file opened for reading, with its size where it is a plain file. The files are read
// straight into their final buffer, of that size: through a stream they would be held twice.
struct DataFile {
    std::ifstream in;
    bool plain = false;
    std::uintmax_t size = 0;
};

// `pipes`: a FIFO may be read (text data: `<(zcat corpus.gz)`); elsewhere opening one would
// wait for a writer for good. Checked before the open for that reason.
DataFile open_data_file(const std::string& path, const std::string& key, bool pipes = false)
{
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (status.type() == fs::file_type::not_found)
        throw ConfigError(key + ": file '" + path + "' does not exist");
    if (ec) throw ConfigError(key + ": file '" + path + "' cannot be reached: " + ec.message()); // EACCES on a folder
    if (fs::is_directory(status)) throw ConfigError(key + ": '" + path + "' is a directory, expected a file");
    const bool pipe = status.type() == fs::file_type::fifo;
    if (!fs::is_regular_file(status) && !(pipes && pipe))
        throw ConfigError(key + ": '" + path + "' " +
                          (pipes ? "is not a regular file or a pipe (a device, a socket)"
                                 : "is not a regular file (a device, a socket, a pipe)"));
    DataFile f;
    f.in.open(path, std::ios::binary);
    if (!f.in) throw ConfigError(key + ": file '" + path + "' cannot be read");
    f.plain = fs::is_regular_file(path, ec);
    if (f.plain) f.size = fs::file_size(path, ec);
    if (ec) throw ConfigError(key + ": file '" + path + "' cannot be read: " + ec.message());
    return f;
}

// Reads all f.size bytes into `to`, or says where the file ended.
void read_whole(DataFile& f, char* to, const std::string& path, const std::string& key)
{
    f.in.read(to, static_cast<std::streamsize>(f.size));
    if (static_cast<std::uintmax_t>(f.in.gcount()) != f.size)
        throw ConfigError(key + ": file '" + path + "' cannot be read (it ended after " +
                          std::to_string(f.in.gcount()) + " of " + std::to_string(f.size) + " bytes)");
}

std::string read_file(const std::string& path, const std::string& key)
{
    DataFile f = open_data_file(path, key, /*pipes=*/true);
    if (!f.plain || f.size == 0) { // not a plain file (a pipe), or empty: read what comes
        std::ostringstream buffer;
        buffer << f.in.rdbuf();
        return buffer.str();
    }
    std::string bytes(static_cast<size_t>(f.size), '\0');
    read_whole(f, bytes.data(), path, key);
    return bytes;
}

// The first n_train symbols train, the rest validate.
template <typename Symbol>
void split_into(const std::vector<Symbol>& all, size_t n_train, const std::unordered_map<Symbol, uint16_t>* index,
                TokenSplits& out)
{
    const size_t n = all.size();
    std::vector<uint16_t> train(n_train), val(n - n_train);
    for (size_t i = 0; i < n; ++i) {
        const uint16_t id = index ? index->at(all[i]) : static_cast<uint16_t>(all[i]);
        (i < n_train ? train[i] : val[i - n_train]) = id;
    }
    out.train = TokenIds(std::move(train));
    out.val = TokenIds(std::move(val));
}

// How many of n symbols train when val_fraction of them validate.
size_t train_share(size_t n, double val_fraction)
{
    return static_cast<size_t>(static_cast<double>(n) * (1.0 - val_fraction));
}

// `n_train` symbols train; without it, train_share of them.
TokenSplits split_text(const std::string& text, const std::string& tokenizer, double val_fraction,
                       const std::string& what, std::optional<size_t> n_train = std::nullopt)
{
    TokenSplits splits;
    if (tokenizer == "byte") {
        std::vector<unsigned char> bytes(text.begin(), text.end());
        split_into<unsigned char>(bytes, n_train.value_or(train_share(bytes.size(), val_fraction)), nullptr, splits);
        splits.vocabulary = Vocabulary::bytes();
        return splits;
    }
    const std::vector<char32_t> cps = decode_utf8(text, what);
    std::set<char32_t> unique(cps.begin(), cps.end());
    if (unique.size() > 65536) throw ConfigError(what + " has more than 65536 distinct characters");
    std::vector<char32_t> sorted(unique.begin(), unique.end());
    std::unordered_map<char32_t, uint16_t> index;
    for (size_t i = 0; i < sorted.size(); ++i) index[sorted[i]] = static_cast<uint16_t>(i);
    split_into<char32_t>(cps, n_train.value_or(train_share(cps.size(), val_fraction)), &index, splits);
    splits.vocabulary = Vocabulary::characters(std::move(sorted));
    return splits;
}

TokenIds read_token_bin(const std::string& path, int64_t vocab_size)
{
    DataFile f = open_data_file(path, "data.dir");
    if (!f.plain) throw ConfigError("data.dir: '" + path + "' is not a file");
    if (f.size % 2 != 0)
        throw ConfigError("data.dir: '" + path + "' has an odd number of bytes; expected uint16 token ids");
    // Mapped, not read: nanoGPT writes native little-endian, as the ids lie in memory here.
    TokenIds tokens;
    try {
        tokens = TokenIds::map_file(path, static_cast<size_t>(f.size));
    } catch (const std::runtime_error& e) {
        throw ConfigError("data.dir: file '" + path + "' cannot be mapped: " + e.what());
    }
    const auto max_it = std::max_element(tokens.begin(), tokens.end());
    if (max_it != tokens.end() && *max_it >= vocab_size)
        throw ConfigError("data.vocab_size: " + std::to_string(vocab_size) + " is too small for '" + path +
                          "', which holds token id " + std::to_string(*max_it));
    return tokens;
}

} // namespace

TokenSplits load_token_splits(const ProjectConfig& config)
{
    const DataConfig& d = config.data;
    TokenSplits splits;
    switch (d.kind) {
    case DataKind::SyntheticAddition: {
        // Split where the validation lines begin, not at a share of the characters: lines differ
        // in length, and a cut by characters put the first validation lines (7 of 2,000 in the
        // default project) in the training text, so that validation measured some memory.
        const std::string text = make_addition_text(d.digits, d.examples, config.training.seed, d.val_fraction);
        const int64_t train_lines = d.examples - addition_val_lines(d.examples, d.val_fraction);
        size_t n_train = 0; // the text is ASCII: a character is a byte
        for (int64_t line = 0; line < train_lines; ++line) n_train = text.find('\n', n_train) + 1;
        splits = split_text(text, "char", d.val_fraction, "synthetic data", n_train);
        break;
    }
    case DataKind::Text: {
        const std::string path = resolve_data_path(config, d.path);
        splits = split_text(read_file(path, "data.path"), d.tokenizer, d.val_fraction, "data.path '" + path + "'");
        break;
    }
    case DataKind::TokenBin: {
        const std::string dir = resolve_data_path(config, d.dir);
        splits.train = read_token_bin((fs::path(dir) / "train.bin").string(), d.vocab_size);
        splits.val = read_token_bin((fs::path(dir) / "val.bin").string(), d.vocab_size);
        splits.vocabulary = Vocabulary::opaque(d.vocab_size);
        break;
    }
    }
    // A batch row needs context_length inputs plus one target.
    const auto needed = static_cast<size_t>(config.model.context_length + 1);
    std::ostringstream source;
    if (d.kind == DataKind::Text) source << "'" << resolve_data_path(config, d.path) << "'";
    else if (d.kind == DataKind::TokenBin) source << "'" << resolve_data_path(config, d.dir) << "'";
    else source << "the generated data";
    auto check = [&](const TokenIds& split, const char* name, const char* hint) {
        if (split.size() >= needed) return;
        std::ostringstream why;
        if (split.empty())
            why << "data: the " << name << " split of " << source.str() << " is empty" << hint;
        else
            why << "model.context_length: " << config.model.context_length << " needs " << needed
                << " tokens in each split, but the " << name << " split of " << source.str() << " has "
                << split.size() << hint;
        throw ConfigError(why.str());
    };
    check(splits.train, "train", "");
    check(splits.val, "validation", d.kind == DataKind::TokenBin ? " (val.bin)" : " (data.val_fraction sets its share)");
    return splits;
}

std::string data_fingerprint(const TokenSplits& data)
{
    // The tokens' bytes as they lie in memory: little-endian, as the .bin files hold them.
    Fnv1a64 hash;
    const unsigned char split_end = 0xFF; // moving a token from one split to the other changes it
    for (const auto* split : {&data.train, &data.val}) {
        hash.add(split->data(), split->size() * sizeof(uint16_t));
        hash.add(&split_end, 1);
    }
    return "train " + std::to_string(data.train.size()) + " tokens, validation " + std::to_string(data.val.size()) +
           " tokens, " + hash.text();
}

int64_t project_vocab_size(const ProjectConfig& config)
{
    if (config.data.kind == DataKind::TokenBin) return config.data.vocab_size;
    return load_token_splits(config).vocabulary.size();
}

} // namespace mantissa
