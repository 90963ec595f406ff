// SPDX-License-Identifier: GPL-3.0-or-later
// Project files: every bad case is rejected before training with its own message, and
// docs/PROJECT_FORMAT.md says what the loader does (every key, type and default; examples load).

#include <QtTest>

#include <QDir>
#include <QTemporaryDir>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include "dataset.h"
#include "memory_model.h"
#include "project_config.h"
#include "trainer.h"

using namespace mantissa;

namespace {

using nlohmann::json;

std::string read_format_doc()
{
    std::ifstream in(MANTISSA_SOURCE_DIR "/docs/PROJECT_FORMAT.md", std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

std::string trimmed(const std::string& s)
{
    const auto first = s.find_first_not_of(" \t");
    if (first == std::string::npos) return {};
    return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

std::string without_backticks(const std::string& s)
{
    return s.size() >= 2 && s.front() == '`' && s.back() == '`' ? s.substr(1, s.size() - 2) : s;
}

// A Markdown table row split at its unescaped '|'; "\|" is a literal bar inside a cell.
std::vector<std::string> table_cells(const std::string& line)
{
    std::vector<std::string> cells;
    std::string cell;
    for (size_t i = 1; i < line.size(); ++i) {
        if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
            cell += '|';
            ++i;
        } else if (line[i] == '|') {
            cells.push_back(trimmed(cell));
            cell.clear();
        } else {
            cell += line[i];
        }
    }
    return cells;
}

struct DocumentedKey {
    std::string type;
    std::string default_text;
    std::string allowed;
};

// The key tables: rows "| `dotted.key` | type | `default` | allowed | meaning |".
std::map<std::string, DocumentedKey> documented_keys(const std::string& doc, std::vector<std::string>* duplicates)
{
    std::map<std::string, DocumentedKey> keys;
    std::istringstream lines(doc);
    std::string line;
    while (std::getline(lines, line)) {
        if (line.rfind("| `", 0) != 0) continue;
        const auto cells = table_cells(line);
        if (cells.size() != 5) continue; // the presets table has two columns
        const std::string key = without_backticks(cells[0]);
        if (keys.count(key)) duplicates->push_back(key);
        keys[key] = {cells[1], without_backticks(cells[2]), cells[3]};
    }
    return keys;
}

void flatten(const json& node, const std::string& prefix, std::map<std::string, json>& out)
{
    for (const auto& [key, value] : node.items()) {
        const std::string path = prefix.empty() ? key : prefix + "." + key;
        if (value.is_object()) flatten(value, path, out);
        else out[path] = value;
    }
}

std::string doc_type_word(const json& j)
{
    if (j.is_boolean()) return "boolean";
    if (j.is_number_integer()) return "integer";
    if (j.is_number()) return "number";
    if (j.is_string()) return "string";
    if (j.is_array()) return "list";
    return "?";
}

std::vector<std::string> json_blocks(const std::string& doc)
{
    std::vector<std::string> blocks;
    const std::string open = "```json\n", close = "\n```";
    for (size_t at = doc.find(open); at != std::string::npos; at = doc.find(open, at)) {
        const size_t begin = at + open.size();
        const size_t end = doc.find(close, begin);
        if (end == std::string::npos) break;
        blocks.push_back(doc.substr(begin, end - begin));
        at = end + close.size();
    }
    return blocks;
}

std::string joined(const std::vector<std::string>& words)
{
    std::string out;
    for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
    return out;
}

void write_bytes(const std::string& path, const std::string& bytes)
{
    QDir().mkpath(QFileInfo(QString::fromStdString(path)).absolutePath());
    std::ofstream(path, std::ios::binary) << bytes;
}

MachineLimits desktop_limits() { return {int64_t(24) << 30, 2}; }

// check_fits_machine's refusal of a project against `machine`; empty when it fits.
std::string fit_refusal(const std::string& json_text, const MachineLimits& machine)
{
    try {
        check_fits_machine(load_run_config(json_text), machine);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "";
}

// What loading gives: the ConfigError's message, or "accepted".
template <typename Load>
QString refusal(Load load)
{
    try {
        load();
    } catch (const ConfigError& e) {
        return QString(e.what());
    }
    return QStringLiteral("accepted");
}

} // namespace

class TestConfig : public QObject {
    Q_OBJECT
private slots:
    void defaultsFillMissingSections()
    {
        const auto c = load_project_json(R"({"model": {"n_layer": 3}})", "/tmp");
        QCOMPARE(c.model.n_layer, int64_t(3));
        QCOMPARE(c.model.n_head, int64_t(4));
        QCOMPARE(c.optimizer.beta2, 0.99);
        QCOMPARE(c.data.kind, DataKind::SyntheticAddition);
        QCOMPARE(c.base_dir, std::string("/tmp"));
    }

    void integersAreAcceptedForFloats()
    {
        const auto c = load_project_json(R"({"optimizer": {"learning_rate": 1, "min_learning_rate": 0}})", "");
        QCOMPARE(c.optimizer.learning_rate, 1.0);
    }

    void overridesApplyByDottedKey()
    {
        const auto c = load_project_json(R"({"training": {"steps": 10}})", "",
                                         {parse_override("training.steps=25"), parse_override("model.bias=false"),
                                          parse_override("name=my run")});
        QCOMPARE(c.training.steps, int64_t(25));
        QCOMPARE(c.model.bias, false);
        QCOMPARE(c.name, std::string("my run"));
    }

    void overridePathIsRelativeToWorkingDirectory()
    {
        const auto c = load_project_json(R"({"data": {"kind": "text", "path": "x.txt"}})", "/projects",
                                         {parse_override("data.path=rel/y.txt")});
        QVERIFY(c.data.path.front() == '/'); // made absolute against the cwd, not /projects
        QVERIFY(c.data.path.size() > 9 && c.data.path.compare(c.data.path.size() - 9, 9, "rel/y.txt") == 0);
        QCOMPARE(resolve_data_path(c, "x.txt"), std::string("/projects/x.txt"));
        // Inside an object given whole, as well (it was taken from the project's folder).
        const std::string cwd = std::filesystem::current_path().string();
        const auto whole = load_project_json(R"({"data": {"kind": "text", "path": "x.txt"}})", "/projects",
                                             {parse_override(R"(data={"kind": "text", "path": "sub/x.txt"})"),
                                              parse_override(R"(training={"checkpoint_dir": "ck"})")});
        QCOMPARE(whole.data.path, cwd + "/sub/x.txt");
        QCOMPARE(whole.training.checkpoint_dir, cwd + "/ck");
        const auto top = load_project_json("{}", "/projects", {parse_override(R"(data={"kind": "bin", "dir": "d", "vocab_size": 100})")});
        QCOMPARE(top.data.dir, cwd + "/d");
    }

    // A run stored before dead layer patterns were refused keeps its settings: show, compare
    // (load_run_config) and resume (load_stored_run_json) read them; a new project, or a resume
    // that sets precision.layers anew, is still refused.
    void aStoredRunKeepsALayerPatternThatNamesNoLayer()
    {
        const std::string json =
            R"({"model": {"n_layer": 2}, "precision": {"layers": [{"match": "block.*", "format": "bf16"}]}})";
        QVERIFY_THROWS_EXCEPTION(ConfigError, load_project_json(json, "/p"));
        QCOMPARE(load_run_config(json).precision.layers.size(), size_t(1));
        const auto resumed = load_stored_run_json(json, "/p", {parse_override("training.steps=7")});
        QCOMPARE(resumed.precision.layers.at(0).match, std::string("block.*"));
        QCOMPARE(resumed.training.steps, int64_t(7));
        try {
            load_stored_run_json(json, "/p", {parse_override(R"(precision.layers=[{"match": "blocks.9.*", "format": "bf16"}])")});
            QFAIL("an override's dead pattern was taken");
        } catch (const ConfigError& e) {
            QVERIFY2(std::string(e.what()).find("'blocks.9.*' matches no layer") != std::string::npos, e.what());
        }
    }

    // In one precision.layers entry a GEMM's own key wins over "format", for each GEMM: read in
    // the object's alphabetical order, "format" overwrote dgrad (it sorts before it) and not
    // forward or wgrad, and fp32 asked for dgrad trained in bf16 without a word.
    void aGemmsOwnKeyWinsOverFormat()
    {
        const auto config = load_project_json(R"({"precision": {"layers": [{"match": "lm_head", "format": "bf16",)"
                                              R"( "dgrad": "fp32", "forward": "fp16"}]}})",
                                              "/p");
        const LayerOverride& o = config.precision.layers.at(0);
        QCOMPARE(o.forward, std::optional(NumberFormat::FP16));
        QCOMPARE(o.dgrad, std::optional(NumberFormat::FP32));
        QCOMPARE(o.wgrad, std::optional(NumberFormat::BF16));
    }

    void rejectsBadProjects_data()
    {
        QTest::addColumn<QString>("json");
        QTest::addColumn<QString>("override");
        QTest::addColumn<QString>("message");
        // The parser's words and where, without nlohmann's "[json.exception.parse_error.101]" tag.
        QTest::newRow("malformed JSON") << R"({"model": {)" << ""
                                        << "not valid JSON (in model): parse error at line 1, column 12: syntax error";
        QTest::newRow("top level array") << "[1, 2]" << "" << "expected a JSON object at the top level";
        // JSON keeps one of two (nlohmann the last): a setting would go without a word.
        QTest::newRow("a key twice") << R"({"training": {"steps": 5}, "training": {"batch_size": 2}})" << ""
                                     << "training: the key is given twice in one object; give it once";
        QTest::newRow("a nested key twice") << R"({"model": {"n_layer": 2, "n_head": 2, "n_layer": 3}})" << ""
                                            << "model.n_layer: the key is given twice in one object";
        QTest::newRow("a key twice in a --set value") << "{}" << R"(data={"kind": "text", "kind": "bin"})"
                                                      << "data.kind: the key is given twice in one object";
        // A key an edit or two from one the section has is named (two letters swapped: one edit).
        QTest::newRow("unknown section") << R"({"modle": {}})" << "" << "modle: unknown key (did you mean model?)";
        QTest::newRow("unknown nested key") << R"({"model": {"n_layers": 2}})" << ""
                                            << "model.n_layers: unknown key (did you mean model.n_layer?)";
        QTest::newRow("unknown key, nothing near") << R"({"model": {"depth": 2}})" << "" << "model.depth: unknown key";
        QTest::newRow("layer pattern naming no layer")
            << R"({"model": {"n_layer": 2}, "precision": {"layers": [{"match": "blocks.0.*", "format": "bf16"}, {"match": "block.*", "format": "bf16"}]}})"
            << "" << "precision.layers[1].match: 'block.*' matches no layer of this model (blocks.0.attn.qkv ... blocks.1.mlp.fc2, lm_head)";
        QTest::newRow("layer pattern past the last block")
            << R"({"model": {"n_layer": 2}, "precision": {"layers": [{"match": "blocks.2.*", "format": "bf16"}]}})" << ""
            << "precision.layers[0].match: 'blocks.2.*' matches no layer";
        QTest::newRow("--set key ending in a dot") << "{}" << "training.steps.=2" << "--set training.steps.: a key cannot end with '.'";
        QTest::newRow("wrong type") << R"({"model": {"n_layer": "two"}})" << ""
                                    << "model.n_layer: expected an integer, got a string";
        QTest::newRow("float for integer") << R"({"training": {"steps": 2.5}})" << ""
                                           << "training.steps: expected an integer, got a number";
        QTest::newRow("section not object") << R"({"optimizer": 3})" << "" << "optimizer: expected an object";
        QTest::newRow("heads do not divide") << R"({"model": {"n_embd": 100, "n_head": 3}})" << ""
                                             << "model.n_embd: 100 is not divisible by model.n_head (3)";
        QTest::newRow("zero layers") << R"({"model": {"n_layer": 0}})" << "" << "model.n_layer: must be at least 1";
        QTest::newRow("bad data kind") << R"({"data": {"kind": "csv"}})" << ""
                                       << "data.kind: 'csv' is not one of synthetic-addition, text, bin";
        QTest::newRow("text needs path") << R"({"data": {"kind": "text"}})" << ""
                                         << "data.path: is required when data.kind is 'text'";
        QTest::newRow("bad tokenizer") << R"({"data": {"kind": "text", "path": "a", "tokenizer": "bpe"}})" << ""
                                       << "data.tokenizer: 'bpe' is not one of char, byte";
        QTest::newRow("bin needs vocab") << R"({"data": {"kind": "bin", "dir": "d"}})" << ""
                                         << "data.vocab_size: must be in [2, 65536]";
        QTest::newRow("val fraction") << R"({"data": {"val_fraction": 1.5}})" << ""
                                      << "data.val_fraction: must be in (0, 1)";
        QTest::newRow("negative lr") << R"({"optimizer": {"learning_rate": -1}})" << ""
                                     << "optimizer.learning_rate: must be positive";
        QTest::newRow("min lr above lr") << R"({"optimizer": {"min_learning_rate": 1.0}})" << ""
                                         << "optimizer.min_learning_rate: must be in [0, optimizer.learning_rate]";
        QTest::newRow("decay before warmup") << R"({"optimizer": {"warmup_steps": 10, "decay_steps": 5}})" << ""
                                             << "optimizer.decay_steps: must be >= optimizer.warmup_steps";
        QTest::newRow("beta2 one") << R"({"optimizer": {"beta2": 1.0}})" << "" << "optimizer.beta2: must be in [0, 1)";
        QTest::newRow("zero batch") << R"({"training": {"batch_size": 0}})" << ""
                                    << "training.batch_size: must be at least 1";
        QTest::newRow("negative seed") << R"({"training": {"seed": -1}})" << "" << "training.seed: must be >= 0";
        QTest::newRow("unknown preset") << R"({"precision": {"preset": "fp4"}})" << ""
                                        << "precision.preset: 'fp4' is not one of fp32, bf16, fp16, fp8-hybrid";
        QTest::newRow("bad loss scaling mode") << R"({"precision": {"loss_scaling": {"mode": "auto-ish"}}})" << ""
                                               << "precision.loss_scaling.mode: 'auto-ish' is not one of";
        QTest::newRow("bad device") << R"({"training": {"device": "tpu"}})" << ""
                                    << "training.device: 'tpu' is not one of auto, cpu, cuda";
        QTest::newRow("override unknown key") << "{}" << "model.depth=3" << "model.depth: unknown key";
        QTest::newRow("override wrong type") << "{}" << "training.steps=many"
                                             << "training.steps: expected an integer, got a string";
        QTest::newRow("override without =") << "{}" << "training.steps" << "expected dotted.key=value";
        // Issue #15: each of these aborted mantissa-train (an uncaught nlohmann::json exception).
        QTest::newRow("1e999 in an integer key") << R"({"training": {"steps": 1e999}})" << ""
                                                 << "training.steps: a number is too large for a double";
        QTest::newRow("-1e999 in a list") << R"({"precision": {"layers": [{"match": "x"}, {"match": -1e999}]}})" << ""
                                          << "precision.layers[1].match: a number is too large for a double";
        QTest::newRow("1e999 under an empty key") << R"({"telemetry": {"": 1e999}})" << ""
                                                  << "telemetry.: a number is too large for a double";
        QTest::newRow("1e999 override") << "{}" << "telemetry.interval=1e999"
                                        << "telemetry.interval: 1e999 is too large for a number";
        QTest::newRow("section a number, then --set") << R"({"training": 5})" << "training.steps=2"
                                                      << "training: expected an object, got an integer";
        QTest::newRow("section a string, then --set") << R"({"training": "x"})" << "training.steps=2"
                                                      << "training: expected an object, got a string";
        QTest::newRow("section a list, then --set") << R"({"training": []})" << "training.steps=2"
                                                    << "training: expected an object, got an array";
        QTest::newRow("section a boolean, then --set") << R"({"training": true})" << "training.steps=2"
                                                       << "training: expected an object, got a boolean";
        QTest::newRow("--set through a value") << R"({"training": {"steps": 5}})" << "training.steps.x=2"
                                               << "training.steps: expected an object, got an integer";
        // `compare` prints precision.layers[0].dgrad: a list's entry is no key of its own.
        QTest::newRow("--set a list's entry") << "{}" << "precision.layers[0].dgrad=bf16"
                                              << "precision.layers: is a list, which --set replaces whole: --set "
                                                 "'precision.layers=[...]' with a JSON array";
        QTest::newRow("--set through a list") << "{}" << "precision.layers.0.dgrad=bf16"
                                              << "precision.layers: is a list, which --set replaces whole: --set "
                                                 "'precision.layers=[...]' with a JSON array";
        QTest::newRow("--set not UTF-8") << "{}" << "name=\\xff" << "name: the value is not valid UTF-8 text";
        QTest::newRow("integer beyond int64") << R"({"model": {"n_layer": 9223372036854775808}})" << ""
                                              << "model.n_layer: 9223372036854775808 is out of range";
        QTest::newRow("seed beyond int64") << R"({"training": {"seed": 18446744073709551615}})" << ""
                                           << "training.seed: 18446744073709551615 is out of range";
        QTest::newRow("too many layers") << R"({"model": {"n_layer": 1000000000}})" << ""
                                         << "model.n_layer: must be at most 512";
        QTest::newRow("name with a NUL") << R"({"name": "a\u0000b"})" << ""
                                         << "name: has a control character (a NUL, a tab, a newline): a run's name is "
                                            "one line of text";
        // Runs are found by id before name: a run named "1" was out of reach of `show 1`.
        QTest::newRow("name of digits") << R"({"name": "1"})" << ""
                                        << "name: '1' reads as a run id: name the run with a letter in it";
        QTest::newRow("name emptied by --set") << "{}" << "name=" << "name: is empty: a run needs a name";
        QTest::newRow("blank name") << R"({"name": "  "})" << "" << "name: is empty: a run needs a name";
        QTest::newRow("integer beyond uint64") << R"({"training": {"batch_size": 99999999999999999999999}})" << ""
                                               << "training.batch_size: 9.999999999999999e+22 is out of range";
        QTest::newRow("absurd grad_accum") << R"({"training": {"grad_accum": 9223372036854775807}})" << ""
                                           << "training.grad_accum: must be at most 1024";
        QTest::newRow("absurd amax history") << R"({"precision": {"fp8": {"amax_history_length": 9223372036854775807}}})"
                                             << "" << "precision.fp8.amax_history_length: must be at most 16777216";
        QTest::newRow("absurd eval batches") << R"({"eval": {"batches": 9223372036854775807}})" << ""
                                             << "eval.batches: must be at most 10000";
        const char* kNormalScale = "precision.loss_scaling.init_scale: must be a finite, normal float32: from "
                                   "1.1754944e-38 to 3.4028235e38";
        QTest::newRow("loss scale beyond float32") << R"({"precision": {"loss_scaling": {"init_scale": 1e39}}})" << ""
                                                   << kNormalScale;
        // Rounded to 0 in float32, or its reciprocal infinite: every step skipped as non-finite.
        QTest::newRow("loss scale below float32") << R"({"precision": {"loss_scaling": {"init_scale": 1e-50}}})"
                                                  << "" << kNormalScale;
        QTest::newRow("subnormal loss scale") << R"({"precision": {"loss_scaling": {"init_scale": 1e-39}}})" << ""
                                              << kNormalScale;
        // The device's FP64 counters are exact up to 2^53: beyond, "a bug in Mantissa" at step 1.
        QTest::newRow("hysteresis beyond 2^53")
            << R"({"precision": {"loss_scaling": {"hysteresis": 9007199254740993}}})" << ""
            << "precision.loss_scaling.hysteresis: must be from 1 to 2^53 (9007199254740992)";
    }
    void rejectsBadProjects()
    {
        QFETCH(QString, json);
        QFETCH(QString, override);
        QFETCH(QString, message);
        try {
            std::vector<Override> overrides;
            std::string text = override.toStdString();
            if (const auto at = text.find("\\xff"); at != std::string::npos) text.replace(at, 4, "\xff");
            if (!override.isEmpty()) overrides.push_back(parse_override(text));
            load_project_json(json.toStdString(), "", overrides);
            QFAIL("accepted a bad project");
        } catch (const ConfigError& e) {
            QVERIFY2(QString(e.what()).contains(message), e.what());
        }
    }

    // A project saved as UTF-16 (an editor's "Unicode") is named as such, not as garbage.
    void aUtf16ProjectIsNamed()
    {
        for (const std::string& bom : {std::string("\xFF\xFE"), std::string("\xFE\xFF")}) {
            try {
                load_project_json(bom + std::string("{\0}\0", 4), "");
                QFAIL("accepted a UTF-16 project");
            } catch (const ConfigError& e) {
                QCOMPARE(std::string(e.what()), std::string("not valid JSON: the file is UTF-16; save it as UTF-8"));
            }
        }
    }

    // What this machine cannot run is refused before anything is allocated, with the estimate.
    void refusesWhatTheMachineCannotHold()
    {
        const MachineLimits small{int64_t(1) << 30, 2}; // 1 GiB, 2 hardware threads
        const auto refusal = [&](const std::string& json_text) { return fit_refusal(json_text, small); };
        QCOMPARE(refusal("{}"), std::string());
        QCOMPARE(refusal(R"({"training": {"threads": 8}})"), std::string());
        QCOMPARE(refusal(R"({"training": {"threads": 9}})"),
                 std::string("training.threads: 9 is more than 4 per hardware thread of this machine (2): at most 8; "
                             "0 = all hardware threads"));
        QVERIFY(refusal(R"({"training": {"threads": 1000000000}})").starts_with("training.threads: 1000000000"));
        const std::string wide = refusal(R"({"model": {"n_embd": 1000000000}})");
        QVERIFY2(wide.starts_with("model: the project needs an estimated 416.3 EiB of memory (weights, gradients "
                                  "and Adam state for model.n_layer 2, model.n_embd 1000000000"),
                 wide.c_str());
        QVERIFY2(wide.ends_with("more than this machine's 1.0 GiB"), wide.c_str());
        const std::string batch = refusal(R"({"training": {"batch_size": 100000}})");
        QVERIFY2(batch.starts_with("training.batch_size: the project needs an estimated"), batch.c_str());
        const std::string data = refusal(R"({"data": {"examples": 1000000000}})");
        QVERIFY2(data.starts_with("data.examples: the project needs an estimated 65.2 GiB"), data.c_str());
        const std::string history = refusal(R"({"precision": {"fp8": {"amax_history_length": 16777216}}})");
        // Six histories a GEMM layer (three roles, E4M3 and E5M2 each), six more for each
        // attention layer's second product: (6 x 11 + 6 x 2) x 4 B x 2^24.
        QVERIFY2(history.starts_with("precision.fp8.amax_history_length: the project needs an estimated 4.9 GiB"),
                 history.c_str());
        // A CPU run resumed holds its checkpoint beside the weights, gradients and Adam state it
        // loads it into: 40.6 M parameters train in 0.6 GiB, and their checkpoint read back
        // (12 B each) does not fit beside them. (Its write needed 24 B a parameter until
        // checkpoints were streamed; it trained until its first checkpoint, then ran out.)
        const std::string checkpoint = refusal(R"({"model": {"n_embd": 1300}})");
        QVERIFY2(checkpoint.starts_with("model: the project needs an estimated 1.1 GiB of memory (weights, gradients "
                                        "and Adam state") &&
                     checkpoint.find("checkpoint of the FP32 weights, Adam state and amax histories, read back at a "
                                     "resume, for model.n_layer 2, model.n_embd 1300: 465.1 MiB") !=
                         std::string::npos &&
                     checkpoint.find("activations") == std::string::npos,
                 checkpoint.c_str());
        // Text is read whole and decoded: 7 B a byte of the file (the text, its code points, the
        // ids), 4 B with the byte tokenizer, before the model exists. 100 MiB of text on a
        // 512 MiB machine does not fit.
        QTemporaryDir dir;
        write_bytes(dir.filePath("big.txt").toStdString(), "");
        std::filesystem::resize_file(dir.filePath("big.txt").toStdString(), 100 << 20);
        const auto text_project = [&](const char* tokenizer) {
            ProjectConfig c = load_run_config(R"({"data": {"kind": "text", "path": "big.txt", "tokenizer": ")" +
                                              std::string(tokenizer) + R"("}})");
            c.base_dir = dir.path().toStdString();
            return c;
        };
        const MachineLimits half{int64_t(512) << 20, 2};
        try {
            check_fits_machine(text_project("char"), half);
            QFAIL("100 MiB of text fit 512 MiB");
        } catch (const ConfigError& e) {
            QCOMPARE(std::string(e.what()), "data.path: reading '" + dir.filePath("big.txt").toStdString() +
                                                "' (104857600 bytes) needs an estimated 700.0 MiB of memory (the text, "
                                                "its code points and token ids), more than this machine's 512.0 MiB");
        }
        check_fits_machine(text_project("byte"), half); // 400 MiB and the model
        // The vocabulary once the data is read: a character text of 65536 distinct characters
        // gives logits of batch x context x 65536 (4 x 1024 x 4096 of them: 1 TiB), where the
        // check before the data was read took a vocabulary of 1.
        const auto wide_vocab = load_run_config(R"({"model": {"n_layer": 1, "n_head": 1, "n_embd": 4,
            "context_length": 1024}, "training": {"batch_size": 4096, "device": "cpu"}})");
        check_fits_machine(wide_vocab, desktop_limits(), 1);
        try {
            check_fits_machine(wide_vocab, desktop_limits(), 65536);
            QFAIL("1 TiB of logits fit");
        } catch (const ConfigError& e) {
            QVERIFY2(std::string(e.what()).starts_with("training.batch_size: the project needs an estimated 1.0"), e.what());
        }

        // A stored run is read back on any machine; running it is checked (load_project_json).
        QCOMPARE(load_run_config(R"({"training": {"threads": 100000}})").training.threads, int64_t(100000));

        // GPT-2 small at context 4096, batch 4, FP32 on a CPU: the fused attention keeps no
        // (T, T) scores, so the ~10 GiB it saves fits 24 GiB (a T^2 term of 9 GiB a block was
        // counted, and the project refused as needing 46.7 GiB). In BF16 the emulator writes
        // the scores out (4 x 12 x 4096^2 x 4 B = 3 GiB a block): that does not fit.
        const MachineLimits desktop{int64_t(24) << 30, 2};
        const std::string long_context = R"({"model": {"n_layer": 12, "n_head": 12, "n_embd": 768, "context_length":
            4096}, "training": {"batch_size": 4, "device": "cpu"}, "precision": {"preset": "%1"}})";
        QCOMPARE(fit_refusal(QString::fromStdString(long_context).arg("fp32").toStdString(), desktop), std::string());
        const std::string bf16 = fit_refusal(QString::fromStdString(long_context).arg("bf16").toStdString(), desktop);
        QVERIFY2(bf16.starts_with("training.batch_size: the project needs an estimated"), bf16.c_str());
    }

    // With training.device cuda, what lives on the GPU (everything but the data set) is held to
    // the GPU's memory as well; unknown GPU memory (no NVML) checks nothing more.
    void refusesWhatTheGpuCannotHold()
    {
        const MachineLimits gpu{int64_t(64) << 30, 16, int64_t(1) << 30}; // 64 GiB host, 16 threads, 1 GiB GPU
        const std::string wide = fit_refusal(R"({"training": {"device": "cuda"}, "model": {"n_embd": 4096}})", gpu);
        QVERIFY2(wide.starts_with("model: the project needs an estimated ") && wide.find(" of GPU memory (weights") != std::string::npos,
                 wide.c_str());
        QVERIFY2(wide.ends_with("more than the GPU's 1.0 GiB"), wide.c_str());
        QCOMPARE(fit_refusal(R"({"training": {"device": "cpu"}, "model": {"n_embd": 4096}})", gpu), std::string());
        MachineLimits unknown = gpu;
        unknown.device_memory_bytes = 0;
        QCOMPARE(fit_refusal(R"({"training": {"device": "cuda"}, "model": {"n_embd": 4096}})", unknown), std::string());
        // Activations, gradients and Adam state live on the GPU, not in the host's memory: a
        // batch whose activations are ~15 GiB fits an 8 GiB host with a 141 GiB GPU, and on the
        // CPU it does not.
        const MachineLimits h200{int64_t(8) << 30, 16, int64_t(141) << 30};
        const std::string big_batch = R"({"model": {"n_embd": 768, "n_layer": 12, "n_head": 12, "context_length": 1024},
                                          "training": {"device": "%1", "batch_size": 32}})";
        QCOMPARE(fit_refusal(QString::fromStdString(big_batch).arg("cuda").toStdString(), h200), std::string());
        QVERIFY(fit_refusal(QString::fromStdString(big_batch).arg("cpu").toStdString(), h200)
                    .starts_with("training.batch_size: the project needs an estimated"));
        // training.device auto (the default) trains on the GPU where this build can: held to the
        // GPU's memory then, and to the host's where it cannot.
        MachineLimits h200_cuda = h200;
        h200_cuda.gpu_available = true;
        QCOMPARE(fit_refusal(QString::fromStdString(big_batch).arg("auto").toStdString(), h200_cuda), std::string());
        QVERIFY(fit_refusal(QString::fromStdString(big_batch).arg("auto").toStdString(), h200)
                    .starts_with("training.batch_size: the project needs an estimated"));
        // A CUDA run where NVML cannot tell the GPU's size: the host still holds only its share.
        MachineLimits no_nvml = h200;
        no_nvml.device_memory_bytes = 0;
        QCOMPARE(fit_refusal(QString::fromStdString(big_batch).arg("cuda").toStdString(), no_nvml), std::string());
        // A resume reads the weights and Adam state back on the host (12 B a parameter): a model
        // whose checkpoint outgrows it is refused. Its write needs none of it (a tensor at a
        // time): 24 B a parameter were billed, and 4 layers of 8192 were refused on 64 GiB.
        QCOMPARE(fit_refusal(R"({"training": {"device": "cuda"}, "model": {"n_embd": 8192, "n_layer": 4}})",
                             MachineLimits{int64_t(64) << 30, 16, int64_t(1) << 40}),
                 std::string());
        const std::string huge =
            fit_refusal(R"({"training": {"device": "cuda"}, "model": {"n_embd": 8192, "n_layer": 8}})",
                        MachineLimits{int64_t(64) << 30, 16, int64_t(1) << 40});
        QVERIFY2(huge.starts_with("model: the project needs an estimated 72.0 GiB of memory (") &&
                     huge.find("checkpoint of the FP32 weights, Adam state and amax histories, read on the host at a "
                               "resume, for model.n_layer 8, model.n_embd 8192: 72.0 GiB") != std::string::npos &&
                     huge.ends_with("more than this machine's 64.0 GiB"),
                 huge.c_str());
        // A telemetry step keeps an FP32 copy of every GEMM weight on the GPU (the update/weight
        // ratio): 4 B x (2 layers x 12 x 256^2 + the tied head's 13 x 256) = 6,304,768 B. A GPU
        // one byte short of the whole bill refuses the run with telemetry and takes it without.
        const auto telemetry_project = [](int64_t interval) {
            return R"({"training": {"device": "cuda"}, "model": {"n_embd": 256}, "telemetry": {"interval": )" +
                   std::to_string(interval) + "}}";
        };
        const auto without = load_run_config(telemetry_project(0));
        const int64_t histories = (6 * (5 * 2 + 1) + 6 * 2) * 4 * 1024, copies = 4 * (2 * 12 * 256 * 256 + 13 * 256);
        QCOMPARE(copies, int64_t(6304768));
        const MachineLimits just_short{int64_t(64) << 30, 16,
                                       estimate_memory(without, 13).total_bytes() + histories + copies - 1};
        QCOMPARE(fit_refusal(telemetry_project(0), just_short), std::string());
        const std::string watched = fit_refusal(telemetry_project(50), just_short);
        QVERIFY2(watched.find("; GEMM weights kept on telemetry steps (telemetry.interval 50) for the update/weight "
                              "ratio: 6.0 MiB") != std::string::npos &&
                     watched.ends_with("more than the GPU's 44.1 MiB"),
                 watched.c_str());
        // A GPU's BF16 loss keeps its 16-bit logits (2 B a logit): the quick bound must not bill
        // them at 4 B, or a project that fits is refused. Vocabulary 50304, 4096 tokens a step: the
        // logits alone are 412 MB at 2 B, 824 MB at 4 B; a GPU (and host) of the exact bill takes the run.
        ProjectConfig wide_vocab = load_run_config(
            R"({"training": {"device": "cuda", "batch_size": 16}, "precision": {"preset": "bf16"},
                "telemetry": {"interval": 0},
                "model": {"n_layer": 1, "n_embd": 64, "n_head": 2, "context_length": 256}})");
        const int64_t vocab = 50304, wide_histories = (6 * (5 * 1 + 1) + 6 * 1) * 4 * 1024;
        const int64_t exact_bill = estimate_memory(wide_vocab, vocab).total_bytes() + wide_histories;
        const MachineLimits exact_gpu{exact_bill, 16, exact_bill}; // a host as small: the quick bound decides
        QVERIFY_THROWS_NO_EXCEPTION(check_fits_machine(wide_vocab, exact_gpu, vocab));
        MachineLimits one_short = exact_gpu;
        --one_short.device_memory_bytes;
        QVERIFY_THROWS_EXCEPTION(ConfigError, check_fits_machine(wide_vocab, one_short, vocab));
        // The data set stays on the host: 6.5 GiB of examples fit 64 GiB and never meet the GPU's limit.
        QCOMPARE(fit_refusal(R"({"training": {"device": "cuda"}, "data": {"examples": 100000000}})", gpu), std::string());
        QVERIFY(fit_refusal(R"({"training": {"device": "cpu"}, "data": {"examples": 100000000}})",
                        MachineLimits{int64_t(1) << 30, 16, 0})
                    .starts_with("data.examples: the project needs an estimated"));
    }

    // Problems only visible once the data is read are still caught before training starts.
    void rejectsBadData_data()
    {
        QTest::addColumn<QString>("dataJson");
        QTest::addColumn<QByteArray>("fileContent");
        QTest::addColumn<QString>("message");
        QTest::newRow("missing text file") << R"({"kind": "text", "path": "nope.txt"})" << QByteArray()
                                           << "data.path: file '";
        QTest::newRow("context longer than data") << R"({"kind": "text", "path": "small.txt"})" << QByteArray(40, 'a')
                                                  << "model.context_length: 32 needs 33 tokens in each split, but the "
                                                     "validation split of '%1/small.txt' has 4 (data.val_fraction sets its share)";
        QTest::newRow("empty text file") << R"({"kind": "text", "path": "small.txt"})" << QByteArray("\n")
                                         << "data: the train split of '%1/small.txt' is empty";
        QTest::newRow("invalid UTF-8") << R"({"kind": "text", "path": "small.txt"})"
                                       << QByteArray("abc\xff\xfe", 5).repeated(100) << "is not valid UTF-8 (byte offset 3)";
        QTest::newRow("missing bin dir") << R"({"kind": "bin", "dir": "nobin", "vocab_size": 100})" << QByteArray()
                                         << "train.bin' does not exist";
        // Opening a FIFO waits for a writer: a .bin one is refused before (it used to hang).
        QTest::newRow("bin split that is a pipe") << R"({"kind": "bin", "dir": "fifo", "vocab_size": 100})"
                                                  << QByteArray() << "data.dir: '%1/fifo/train.bin' is not a regular file "
                                                                     "(a device, a socket, a pipe)";
        // A device would be read for good (/dev/zero); a pipe is text's on purpose.
        QTest::newRow("text from a device") << R"({"kind": "text", "path": "/dev/zero"})" << QByteArray()
                                            << "data.path: '/dev/zero' is not a regular file or a pipe (a device, a socket)";
    }
    void rejectsBadData()
    {
        QFETCH(QString, dataJson);
        QFETCH(QByteArray, fileContent);
        QFETCH(QString, message);
        QTemporaryDir dir;
        if (!fileContent.isEmpty()) {
            QFile f(dir.filePath("small.txt"));
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(fileContent);
        }
        QVERIFY(QDir(dir.path()).mkpath("fifo"));
        QCOMPARE(::mkfifo(dir.filePath("fifo/train.bin").toLocal8Bit().constData(), 0600), 0);
        const std::string json = R"({"model": {"context_length": 32}, "data": )" + dataJson.toStdString() + "}";
        try {
            Trainer trainer(load_project_json(json, dir.path().toStdString()));
            QFAIL("accepted bad data");
        } catch (const ConfigError& e) {
            QVERIFY2(QString(e.what()).contains(QString(message).replace("%1", dir.path())), e.what());
        }
    }

    // A character text of 60,000 distinct characters: its logits at batch 4096 x context 1024
    // need ~1 TiB. The check before the data was read took a vocabulary of 1 and passed; the
    // trainer checks again once it knows (the run used to die in LibTorch's allocator).
    void theDataVocabularyIsCheckedOnceKnown()
    {
        QTemporaryDir dir;
        std::u32string chars;
        for (char32_t c = 0x4E00; chars.size() < 60000; ++c)
            if (c < 0xD800 || c > 0xDFFF) chars += c;
        std::string utf8;
        for (const char32_t c : chars) {
            if (c < 0x10000) {
                utf8 += char(0xE0 | (c >> 12));
            } else {
                utf8 += char(0xF0 | (c >> 18));
                utf8 += char(0x80 | ((c >> 12) & 0x3F));
            }
            utf8 += char(0x80 | ((c >> 6) & 0x3F));
            utf8 += char(0x80 | (c & 0x3F));
        }
        write_bytes(dir.filePath("wide.txt").toStdString(), utf8 + utf8);
        const auto config = load_project_json(R"({"model": {"n_layer": 1, "n_head": 1, "n_embd": 4, "context_length":
            1024}, "training": {"batch_size": 4096, "device": "cpu"}, "data": {"kind": "text", "path": "wide.txt"}})",
                                              dir.path().toStdString());
        try {
            Trainer trainer(config);
            QFAIL("a 1 TiB bill was taken");
        } catch (const ConfigError& e) {
            QVERIFY2(std::string(e.what()).starts_with("training.batch_size: the project needs an estimated"), e.what());
        }
    }

    void aFolderAsTheProjectIsNamed()
    {
        QTemporaryDir dir;
        try {
            load_project_file(dir.path().toStdString());
            QFAIL("read a folder as a project");
        } catch (const ConfigError& e) {
            QCOMPARE(QString(e.what()), "project file '" + dir.path() + "' is a directory, expected a file");
        }
    }

    // A device would be read without end (/dev/zero grew to gigabytes), a pipe would wait for
    // a writer, a huge file is no project: each refused before it is read.
    void aProjectThatIsNoSmallFileIsRefused()
    {
        for (const char* device : {"/dev/zero", "/dev/null"}) {
            try {
                load_project_file(device);
                QFAIL("read a device as a project");
            } catch (const ConfigError& e) {
                QCOMPARE(QString(e.what()), QString("project file '%1' is not a regular file (a device, a pipe or a socket)").arg(device));
            }
        }
        QTemporaryDir dir;
        const QString fifo = dir.filePath("fifo.json");
        QVERIFY(::mkfifo(fifo.toLocal8Bit().constData(), 0600) == 0);
        QVERIFY_THROWS_EXCEPTION(ConfigError, load_project_file(fifo.toStdString()));
        const QString huge = dir.filePath("huge.json");
        QFile f(huge);
        QVERIFY(f.open(QIODevice::WriteOnly));
        QVERIFY(f.resize((qint64(1) << 20) + 1)); // sparse: no disk used
        f.close();
        try {
            load_project_file(huge.toStdString());
            QFAIL("read a file over 1 MiB as a project");
        } catch (const ConfigError& e) {
            QCOMPARE(QString(e.what()),
                     "project file '" + huge + "' is 1048577 bytes: too large for a project (at most 1 MiB)");
        }
    }

    void missingProjectFileIsNamed()
    {
        try {
            load_project_file("/nonexistent/project.json");
            QFAIL("opened a missing file");
        } catch (const ConfigError& e) {
            QCOMPARE(QString(e.what()),
                     QString("project file '/nonexistent/project.json' cannot be opened: No such file or directory"));
        }
    }

    void errorsFromFilesNameTheFile()
    {
        QTemporaryDir dir;
        const QString path = dir.filePath("p.json");
        std::ofstream(path.toStdString()) << R"({"model": {"n_head": 0}})";
        try {
            load_project_file(path.toStdString());
            QFAIL("accepted n_head 0");
        } catch (const ConfigError& e) {
            QCOMPARE(QString(e.what()), path + ": model.n_head: must be at least 1");
        }
    }

    // A --set key the project format does not have is the command line's mistake: the error
    // names the --set, not the (blameless) file.
    void unknownOverrideKeysBlameTheCommandLine_data()
    {
        QTest::addColumn<QString>("set");
        QTest::addColumn<QString>("message");
        QTest::newRow("unknown key") << "training.bogus=3" << "--set training.bogus=3: training.bogus: unknown key";
        QTest::newRow("a letter short") << "training.step=3"
                                        << "--set training.step=3: training.step: unknown key (did you mean "
                                           "training.steps?)";
        QTest::newRow("two letters swapped") << "data.dri=x"
                                             << "--set data.dri=x: data.dri: unknown key (did you mean data.dir?)";
        QTest::newRow("two letters are not guessed at") << "model.bi=1" << "--set model.bi=1: model.bi: unknown key";
        QTest::newRow("unknown section") << "bogus.steps=3" << "--set bogus.steps=3: bogus: unknown key";
        QTest::newRow("through a value") << "training.steps.x=3"
                                         << "--set training.steps.x=3: training.steps: expected an object, got an integer";
    }
    void unknownOverrideKeysBlameTheCommandLine()
    {
        QFETCH(QString, set);
        QFETCH(QString, message);
        QTemporaryDir dir;
        const std::string path = dir.filePath("p.json").toStdString();
        std::ofstream(path) << R"({"training": {"steps": 5}})";
        QCOMPARE(refusal([&] { load_project_file(path, {parse_override(set.toStdString())}); }), message);
        // An override made otherwise (a sweep's --vary) is refused by the loader, key first as
        // every ConfigError, without the file's name.
        const auto eq = set.indexOf('=');
        const Override made{set.left(eq).toStdString(), set.mid(eq + 1).toStdString()};
        QCOMPARE(refusal([&] { load_project_file(path, {made}); }), message.section(": ", 1));
        // A known key still loads.
        QCOMPARE(load_project_file(path, {parse_override("training.steps=7")}).training.steps, int64_t(7));
    }

    // A value a --set gives is the command line's mistake too: the file does not hold it (it was
    // blamed on the file, whose own value is fine). A problem between a --set and the file's
    // other keys still names the file.
    void badOverrideValuesBlameTheCommandLine_data()
    {
        QTest::addColumn<QStringList>("sets");
        QTest::addColumn<QString>("message"); // FILE: the project file's path
        QTest::newRow("type") << QStringList{"training.steps=abc"}
                              << "--set training.steps=abc: training.steps: expected an integer, got a string";
        QTest::newRow("bound") << QStringList{"training.steps=0"}
                               << "--set training.steps=0: training.steps: must be at least 1";
        QTest::newRow("in an object") << QStringList{R"(training={"steps":-1})"}
                                      << R"(--set training={"steps":-1}: training.steps: must be at least 1)";
        QTest::newRow("the later wins") << QStringList{"training.steps=abc", "training.steps=0"}
                                        << "--set training.steps=0: training.steps: must be at least 1";
        QTest::newRow("another's key first") << QStringList{"training.seed=3", "model.n_head=3"}
                                             << "FILE: model.n_embd: 64 is not divisible by model.n_head (3)";
    }
    void badOverrideValuesBlameTheCommandLine()
    {
        QFETCH(QStringList, sets);
        QFETCH(QString, message);
        QTemporaryDir dir;
        const QString path = dir.filePath("p.json");
        std::ofstream(path.toStdString()) << R"({"training": {"steps": 5}})";
        std::vector<Override> overrides;
        for (const QString& s : sets) overrides.push_back(parse_override(s.toStdString()));
        QCOMPARE(refusal([&] { load_project_file(path.toStdString(), overrides); }),
                 QString(message).replace("FILE", path));
        // A resume's --set on a stored run: the same, and a stored run has no file to name.
        const std::string stored = R"({"training": {"steps": 5}})";
        QCOMPARE(refusal([&] { load_stored_run_json(stored, dir.path().toStdString(), overrides); }),
                 QString(message).remove("FILE: "));
    }

    void shippedProjectsAreValid_data()
    {
        QTest::addColumn<QString>("file");
        QTest::newRow("default") << "default.json";
        QTest::newRow("shakespeare-char") << "shakespeare-char.json";
        QTest::newRow("shakespeare-char-fp8-attention") << "shakespeare-char-fp8-attention.json";
    }
    void shippedProjectsAreValid()
    {
        QFETCH(QString, file);
        const auto c = load_project_file(MANTISSA_SOURCE_DIR "/projects/" + file.toStdString());
        QVERIFY(c.model.n_embd % c.model.n_head == 0);
    }

    void shakespeareMatchesNanoGptBabySettings()
    {
        const auto c = load_project_file(MANTISSA_SOURCE_DIR "/projects/shakespeare-char.json");
        QCOMPARE(c.model.n_layer, int64_t(4));
        QCOMPARE(c.model.n_head, int64_t(4));
        QCOMPARE(c.model.n_embd, int64_t(128));
        QCOMPARE(c.model.context_length, int64_t(64));
        QCOMPARE(c.training.batch_size, int64_t(12));
        QCOMPARE(c.training.steps, int64_t(2000));
        QCOMPARE(c.optimizer.learning_rate, 1e-3);
        QCOMPARE(c.optimizer.min_learning_rate, 1e-4);
        QCOMPARE(c.optimizer.warmup_steps, int64_t(100));
        QCOMPARE(c.optimizer.beta2, 0.99);
        QCOMPARE(c.optimizer.weight_decay, 0.1);
        QCOMPARE(c.optimizer.grad_clip, 1.0);
    }

    void resolvedJsonRoundTrips()
    {
        auto c = load_project_json(R"({"model": {"n_layer": 5}, "data": {"digits": 3}})", "");
        const auto again = load_project_json(to_json_text(c), "");
        QCOMPARE(again.model.n_layer, int64_t(5));
        QCOMPARE(again.data.digits, int64_t(3));
        QCOMPARE(to_json_text(again), to_json_text(c));
    }

    void perLayerScalingRecipe()
    {
        auto c = load_project_json(R"({"precision": {"preset": "fp8-hybrid", "fp8": {"scaling": "delayed"},
            "layers": [{"match": "blocks.*.mlp.*", "scaling": "current"}, {"match": "blocks.0.mlp.fc2", "scaling": "mxfp8"}]}})",
                                   "");
        QCOMPARE(resolve_layer_recipe(c.precision, "blocks.0.attn.qkv").scaling, Fp8Scaling::Delayed);
        QCOMPARE(resolve_layer_recipe(c.precision, "blocks.1.mlp.fc1").scaling, Fp8Scaling::Current);
        QCOMPARE(resolve_layer_recipe(c.precision, "blocks.0.mlp.fc2").scaling, Fp8Scaling::Block32); // last match wins
        const auto again = load_project_json(to_json_text(c), "");
        QCOMPARE(to_json_text(again), to_json_text(c));
        QVERIFY(to_json_text(c).find("\"scaling\": \"mxfp8\"") != std::string::npos);
        try {
            load_project_json(R"({"precision": {"layers": [{"match": "lm_head", "scaling": "fast"}]}})", "");
            QFAIL("an unknown recipe was accepted");
        } catch (const ConfigError& e) {
            QVERIFY2(std::string(e.what()).find("precision.layers[0].scaling") != std::string::npos, e.what());
        }
    }

    // Every key the loader accepts is in the document with its type and default, and the
    // document names no key the loader would refuse.
    void documentMatchesLoader()
    {
        std::vector<std::string> duplicates;
        const auto documented = documented_keys(read_format_doc(), &duplicates);
        QVERIFY2(duplicates.empty(), ("documented twice: " + joined(duplicates)).c_str());
        std::map<std::string, json> defaults;
        flatten(json::parse(to_json_text(ProjectConfig{})), "", defaults);
        QCOMPARE(defaults.count("telemetry.watchers.actions.fp8_underflow"), size_t(1)); // reached the leaves

        std::vector<std::string> missing, unknown, wrong;
        for (const auto& [key, value] : defaults) {
            const auto it = documented.find(key);
            if (it == documented.end()) {
                missing.push_back(key);
                continue;
            }
            const json doc_default = json::parse(it->second.default_text, nullptr, /*allow_exceptions=*/false);
            if (doc_default.is_discarded() || doc_default != value || it->second.type != doc_type_word(value))
                wrong.push_back(key + " (doc: " + it->second.type + " " + it->second.default_text +
                                ", loader: " + doc_type_word(value) + " " + value.dump() + ")");
        }
        for (const auto& [key, entry] : documented)
            if (key.find("[]") == std::string::npos && !defaults.count(key)) unknown.push_back(key);
        QVERIFY2(missing.empty(), ("not in docs/PROJECT_FORMAT.md: " + joined(missing)).c_str());
        QVERIFY2(unknown.empty(), ("documented but unknown to the loader: " + joined(unknown)).c_str());
        QVERIFY2(wrong.empty(), ("type or default differs: " + joined(wrong)).c_str());
    }

    // precision.layers entries are checked by hand in the loader; its error lists their keys.
    void documentListsLayerEntryKeysAndChoices()
    {
        std::vector<std::string> duplicates;
        const auto documented = documented_keys(read_format_doc(), &duplicates);
        std::set<std::string> doc_entry_keys;
        const std::string prefix = "precision.layers[].";
        for (const auto& [key, entry] : documented)
            if (key.rfind(prefix, 0) == 0) doc_entry_keys.insert(key.substr(prefix.size()));
        std::string message;
        try {
            load_project_json(R"({"precision": {"layers": [{"match": "lm_head", "colour": "red"}]}})", "");
        } catch (const ConfigError& e) {
            message = e.what();
        }
        const std::string lead = "precision.layers[0].colour: unknown key (expected ";
        QVERIFY2(message.rfind(lead, 0) == 0 && message.back() == ')', message.c_str());
        std::set<std::string> loader_entry_keys;
        std::istringstream list(message.substr(lead.size(), message.size() - lead.size() - 1));
        for (std::string word; std::getline(list, word, ',');) loader_entry_keys.insert(trimmed(word));
        QCOMPARE(doc_entry_keys, loader_entry_keys);

        // The closed sets of values are spelled as the code spells them.
        auto lists_all = [&](const std::string& key, const std::vector<std::string>& names) {
            const auto it = documented.find(key);
            if (it == documented.end()) return false;
            for (const auto& n : names)
                if (it->second.allowed.find("`" + n + "`") == std::string::npos) return false;
            return true;
        };
        QVERIFY(lists_all("precision.preset", precision_preset_names()));
        QVERIFY(lists_all("precision.layers[].forward", number_format_names()));
        std::vector<std::string> scalings;
        for (auto s : fp8_scalings()) scalings.push_back(fp8_scaling_name(s));
        QVERIFY(lists_all("precision.fp8.scaling", scalings));
        QVERIFY(lists_all("precision.layers[].scaling", scalings));
        for (const auto& watcher : watcher_names())
            QVERIFY2(lists_all("telemetry.watchers.actions." + watcher, {"none", "pause", "bf16"}), watcher.c_str());
    }

    // Every example in the document is a whole project the loader takes, and its data
    // (generated here where the example names files) loads too.
    void documentExamplesLoad()
    {
        const auto blocks = json_blocks(read_format_doc());
        QCOMPARE(blocks.size(), size_t(6));
        std::set<DataKind> kinds;
        std::set<std::string> tokenizers;
        for (size_t i = 0; i < blocks.size(); ++i) {
            QTemporaryDir dir;
            QVERIFY(dir.isValid());
            ProjectConfig c;
            try {
                c = load_project_json(blocks[i], dir.path().toStdString());
            } catch (const ConfigError& e) {
                QFAIL(("example " + std::to_string(i + 1) + " is refused: " + e.what()).c_str());
            }
            kinds.insert(c.data.kind);
            if (c.data.kind == DataKind::Text) {
                tokenizers.insert(c.data.tokenizer);
                std::string text;
                for (int k = 0; text.size() < 20000; ++k) text += "line " + std::to_string(k) + " of the corpus\n";
                write_bytes(resolve_data_path(c, c.data.path), text);
            } else if (c.data.kind == DataKind::TokenBin) {
                std::string ids;
                for (int64_t k = 0; k < 4096; ++k) {
                    const auto id = static_cast<uint16_t>((k * 7919) % c.data.vocab_size);
                    ids.append(reinterpret_cast<const char*>(&id), sizeof id);
                }
                for (const char* file : {"train.bin", "val.bin"})
                    write_bytes(resolve_data_path(c, c.data.dir) + "/" + file, ids);
            }
            try {
                const TokenSplits splits = load_token_splits(c);
                if (c.data.kind == DataKind::TokenBin) QCOMPARE(splits.vocabulary.size(), c.data.vocab_size);
                if (c.data.kind == DataKind::Text && c.data.tokenizer == "byte") QCOMPARE(splits.vocabulary.size(), int64_t(256));
            } catch (const ConfigError& e) {
                QFAIL(("example " + std::to_string(i + 1) + ": its data does not load: " + e.what()).c_str());
            }
        }
        QCOMPARE(kinds, (std::set<DataKind>{DataKind::Text, DataKind::TokenBin, DataKind::SyntheticAddition}));
        QCOMPARE(tokenizers, (std::set<std::string>{"char", "byte"}));
    }

    void gemmLayerNamesInForwardOrder()
    {
        const auto names = gemm_layer_names(2);
        QCOMPARE(names.size(), size_t(11));
        QCOMPARE(names[0], std::string("blocks.0.attn.qkv"));
        QCOMPARE(names[1], std::string("blocks.0.attn.sdpa"));
        QCOMPARE(names[9], std::string("blocks.1.mlp.fc2"));
        QCOMPARE(names[10], std::string("lm_head"));
    }
};

QTEST_GUILESS_MAIN(TestConfig)
#include "test_config.moc"
