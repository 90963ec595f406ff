// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Token streams for training: UTF-8 text (per character or per byte), nanoGPT .bin files,
// and a synthetic addition task generated in memory. No LibTorch here: a split is a flat
// vector of token ids, and batching lives in the trainer.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "project_config.h"
#include "token_ids.h"

namespace mantissa {

// Maps token ids back to text, for samples. Token-file data has no tokenizer here, so its
// vocabulary prints ids.
class Vocabulary {
public:
    static Vocabulary characters(std::vector<char32_t> sorted_code_points);
    static Vocabulary bytes();
    static Vocabulary opaque(int64_t size);

    int64_t size() const { return size_; }
    std::string decode(const std::vector<int64_t>& ids) const;
    // Encodes text with this vocabulary; throws ConfigError on a character it lacks.
    std::vector<int64_t> encode(const std::string& utf8) const;

private:
    enum class Kind { Characters, Bytes, Opaque } kind_ = Kind::Opaque;
    int64_t size_ = 0;
    std::vector<char32_t> code_points_; // id -> code point (Characters)
};

struct TokenSplits {
    TokenIds train; // uint16: 2 bytes a token; .bin files mapped, not read
    TokenIds val;
    Vocabulary vocabulary;
};

// "train 1003854 tokens, validation 111540 tokens, fnv1a64:0123456789abcdef": the token
// ids of both splits, hashed (FNV-1a over their little-endian bytes). A checkpoint keeps it,
// so that a resume on data that changed since (an edited text, a re-made train.bin) is
// refused instead of silently training on other tokens.
std::string data_fingerprint(const TokenSplits& data);

// Loads or generates the data a project describes. Throws ConfigError naming the key and
// file when the data is missing, unreadable, or too short for model.context_length.
TokenSplits load_token_splits(const ProjectConfig& config);

// The vocabulary size a project's data gives the model, without keeping the data: the
// editor needs it for parameter counts and memory estimates. Throws like load_token_splits.
int64_t project_vocab_size(const ProjectConfig& config);

// Exposed for tests.
std::vector<char32_t> decode_utf8(const std::string& text, const std::string& what);
// `bytes` with each byte that starts no valid UTF-8 character replaced by U+FFFD.
std::string replace_invalid_utf8(const std::string& bytes);
std::string encode_utf8(const std::vector<char32_t>& code_points);
// `examples` lines "a+b=c". With `val_fraction` > 0 the last round(examples * val_fraction)
// lines (the validation split's) use only operand pairs that no earlier line uses, so that
// validation measures addition, not memory: each pair belongs to one split by a hash of it.
// A project's synthetic data splits at the line boundary: these last lines validate.
std::string make_addition_text(int64_t digits, int64_t examples, uint64_t seed, double val_fraction = 0.0);
int64_t addition_val_lines(int64_t examples, double val_fraction);

} // namespace mantissa
