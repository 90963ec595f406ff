// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// A project file, resolved and validated. Every field here has a default; project files
// override them section by section (see docs/PROJECT_FORMAT.md).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "precision_policy.h"
#include "watchers.h"

namespace mantissa {

// Raised for any problem with a project: the message names the offending key.
class ConfigError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct ModelConfig {
    int64_t n_layer = 2;
    int64_t n_head = 4;
    int64_t n_embd = 64;
    int64_t context_length = 32; // tokens per sequence (nanoGPT's block_size)
    bool bias = true;            // biases in Linear and LayerNorm
    double dropout = 0.0;
};

enum class DataKind { SyntheticAddition, Text, TokenBin };

struct DataConfig {
    DataKind kind = DataKind::SyntheticAddition;
    // kind = "text": any UTF-8 file, tokenised per character or per byte.
    std::string path;
    std::string tokenizer = "char"; // "char" | "byte"
    double val_fraction = 0.1;      // the last fraction of the text is the validation split
    // kind = "bin": nanoGPT's train.bin / val.bin (uint16 token ids) in `dir`.
    std::string dir;
    int64_t vocab_size = 0; // required for "bin"
    // kind = "synthetic-addition": "a+b=c" lines generated in memory.
    int64_t digits = 2;
    int64_t examples = 20000;
};

struct OptimizerConfig {
    double learning_rate = 1e-3;
    double min_learning_rate = 1e-4;
    int64_t warmup_steps = 100;
    int64_t decay_steps = 2000; // cosine reaches min_learning_rate here, then stays
    double beta1 = 0.9;
    double beta2 = 0.99;
    double eps = 1e-8;
    double weight_decay = 0.1; // applied to 2-D weights only
    double grad_clip = 1.0;    // global L2 norm; 0 disables
};

struct TrainingConfig {
    int64_t steps = 2000;
    int64_t batch_size = 12;
    int64_t grad_accum = 1;
    uint64_t seed = 1337;
    int64_t threads = 0;         // 0 = all hardware threads
    std::string device = "auto"; // auto (CUDA when LibTorch has it and a GPU is there) | cpu | cuda
    // GPU kernels that add in a fixed order (determinism.h): two runs, and a run and its resume,
    // are bit-identical. false: LibTorch's fastest kernels, whose order varies run to run.
    bool deterministic = true;
    int64_t checkpoint_interval = 0; // steps between checkpoints; 0 = only when stopped or finished
    std::string checkpoint_dir;      // "" = no checkpoints (mantissa-train sets one beside the run store)
    int64_t checkpoint_keep = 3;     // newest checkpoints kept
    // Data parallel: a collective that takes longer fails the run on every rank (a stopped
    // peer is noticed only this way; c10d's own default is 30 minutes).
    int64_t collective_timeout_s = 300;
    // Data parallel: gradients are summed in flat buckets of at most this many MiB, each
    // started while the backward still runs (DDP's bucket_cap_mb and its default).
    double dp_bucket_mb = 25.0;
};

struct EvalConfig {
    int64_t interval = 250; // steps between validation runs; 0 = only at the end
    int64_t batches = 20;   // batches averaged per estimate
    int64_t sample_tokens = 0; // >0: generate this many tokens at each eval
    double sample_temperature = 0.8;
    int64_t sample_top_k = 40;
};

struct TelemetryConfig {
    int64_t log_interval = 10; // CLI log cadence in steps, when not on a terminal
    int64_t interval = 50;     // per-layer tensor statistics every N steps (and at step 1); 0 = off
    // Data parallel: the statistics describe every rank's micro-batches (counts summed, maxima
    // taken across the ranks) instead of rank 0's alone; every rank then measures.
    bool reduce_ranks = false;
    WatcherConfig watchers;
};

struct ProjectConfig {
    std::string name = "untitled";
    std::string base_dir; // relative data paths resolve against this (the project file's folder)
    ModelConfig model;
    DataConfig data;
    OptimizerConfig optimizer;
    TrainingConfig training;
    EvalConfig eval;
    PrecisionConfig precision;
    TelemetryConfig telemetry;
};

// `--set model.n_layer=4`: the dotted key and the raw value text.
using Override = std::pair<std::string, std::string>;

// Parses "key=value"; throws ConfigError if there is no '='.
Override parse_override(const std::string& text);
// The keys whose values are file or folder paths (data.path, data.dir, training.checkpoint_dir):
// an override of one is made absolute, relative to the working folder.
bool is_path_key(const std::string& dotted_key);

// A ConfigError's message, "--set key=value: "-prefixed when an override set the key it names
// first (the file's own value was fine); "" when none did. For refusals after the load (the
// data, the device), which the loaders' own blaming does not see.
std::string blame_override(const std::string& message, const std::vector<Override>& overrides);

// Why `name` cannot name a run, or "": it is blank, it is digits only (runs are found by id
// before name: a run named "5" was out of reach of show, compare and delete), or it holds a
// control character (a name is one line of text: a newline split its row in `list`). The
// project's name, `--name`, and a rename in the CLI or the window all pass this one rule.
std::string run_name_problem(std::string_view name);
// A NUL, a tab, a line break or another control character: what breaks a one-line name or tag.
bool has_control_character(std::string_view text);
// A JSON parser's message as a user reads it: "parse error at line 1, column 38: ...", without
// nlohmann's "[json.exception.parse_error.101] " tag.
std::string json_error_words(const char* what);

// Reads, overrides and validates a project. Throws ConfigError naming the key or file.
ProjectConfig load_project_file(const std::string& path, const std::vector<Override>& overrides = {});
ProjectConfig load_project_json(const std::string& json_text, const std::string& base_dir,
                                const std::vector<Override>& overrides = {});

// A stored run's settings to train again (resume): as load_project_json, but checked as they
// were when the run was made (a precision.layers pattern that names no layer is kept, unless
// an override sets precision.layers).
ProjectConfig load_stored_run_json(const std::string& json_text, const std::string& base_dir,
                                   const std::vector<Override>& overrides = {});

// A run's stored config_json (to_json_text's output) read back. Every reader of a stored config
// (the run store's recipe column, tokens per step, the Compare page) goes through this one
// loader, so they agree on defaults and names. Throws ConfigError for text it cannot read.
ProjectConfig load_run_config(const std::string& config_json);

// The fully resolved project (defaults filled in) as pretty JSON, for the run store.
std::string to_json_text(const ProjectConfig& config);

// Path of the data file/dir with base_dir applied.
std::string resolve_data_path(const ProjectConfig& config, const std::string& path);

} // namespace mantissa
