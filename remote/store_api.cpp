// SPDX-License-Identifier: GPL-3.0-or-later
#include "store_api.h"

#include <charconv>
#include <climits>
#include <optional>
#include <chrono>
#include <cmath>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "run_store.h"
#include "scalar_columns.h"
#include "store_pool.h"

namespace mantissa {

namespace {

using nlohmann::json;

constexpr int64_t kMaxRowsPerPage = 10000; // per tag, and events
constexpr int64_t kDefaultRowsPerPage = 2000;
// Events are cut by their text too: a 48-layer run's loss-scale backoff names every tensor
// twice (11 KB), and 10,000 of them made a 55 MB page, held whole by the server while it was
// written and parsed on the window's GUI thread (230 ms).
constexpr size_t kMaxEventBytesPerPage = size_t(4) << 20;
// Layer statistics per page: ~700 bytes of JSON each, so a page stays within ~6 MB.
constexpr int64_t kMaxLayerRowsPerPage = 8000;
// Scalar rows per page in all: `limit` steps per tag, fewer where many tags would pass this.
constexpr int64_t kMaxScalarRowsPerPage = 40000;
constexpr int64_t kMaxWaitMs = 5000;
constexpr auto kPollInterval = std::chrono::milliseconds(100);

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ApiAnswer ok(const json& j) { return {200, dump(j)}; }

// A strict decimal integer in [lo, hi]; anything else is a 400 naming the parameter.
struct BadParam {
    std::string message;
};

int64_t parse_int(const std::string& name, const std::string& text, int64_t lo, int64_t hi)
{
    int64_t v = 0;
    const char* end = text.data() + text.size();
    const auto [p, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc() || p != end || v < lo || v > hi)
        throw BadParam{"parameter '" + name + "' must be an integer from " + std::to_string(lo) + " to " +
                       std::to_string(hi)};
    return v;
}

// The query parameters, each at most once and none unknown.
std::map<std::string, std::string> single_params(const std::multimap<std::string, std::string>& params,
                                                 const std::set<std::string>& known)
{
    std::map<std::string, std::string> out;
    for (const auto& [k, v] : params) {
        if (!known.count(k)) throw BadParam{"unknown parameter '" + k + "'"};
        if (!out.emplace(k, v).second) throw BadParam{"parameter '" + k + "' given twice"};
    }
    return out;
}

json encode_value(double v)
{
    if (std::isnan(v)) return "nan"; // JSON has no NaN or infinities: they travel as strings
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return v;
}

json run_json(const RunInfo& r, const std::vector<std::string>& tags)
{
    return {{"id", r.id},           {"name", r.name},
            {"project_path", r.project_path}, {"config_json", r.config_json},
            {"status", std::string(run_status_name(r.status))}, {"created_at", r.created_at},
            {"finished_at", r.finished_at}, {"last_step", r.last_step},
            {"uuid", r.uuid},       {"tags", tags}};
}

ApiAnswer list_runs(const ApiContext& context)
{
    const json runs = context.stores->read([](RunStore& store) {
        json runs = json::array();
        for (const auto& r : store.list_runs()) runs.push_back(run_json(r, store.tags(r.id)));
        return runs;
    });
    // row_encodings: what `rows?encoding=` takes; a client of an older server sees none and
    // asks in JSON.
    json answer = {{"protocol", 1},
                   {"control", context.allow_control && context.control != nullptr},
                   {"row_encodings", {"json", "columnar"}},
                   {"runs", runs}};
    // Which run takes commands: the store may hold others "running" (another process's).
    if (context.training_run)
        if (const int64_t id = context.training_run(); id > 0) answer["training_run"] = id;
    return ok(answer);
}

json encode_tensor(int64_t step, const TensorStats& t)
{
    // Compact: one array per tensor, the histogram as first_exponent + counts (docs/REMOTE.md).
    return json::array({step, t.layer, t.role, t.format, t.count, t.zeros, t.infs, t.nans, encode_value(t.underflow),
                        encode_value(t.subnormal), encode_value(t.overflow), encode_value(t.amax),
                        encode_value(t.scale), encode_value(t.quant_mse), encode_value(t.quant_snr_db),
                        encode_value(t.update_ratio), t.first_exponent, t.exponent_counts});
}

// The scalar StoreSink writes after every layer statistic of a telemetry frame: once it is
// there, the frame at that step is whole.
constexpr const char* kFrameCompleteTag = "memory/resident_bytes";

struct Marks {
    int64_t from_step = 0, after_event = 0, limit = kDefaultRowsPerPage;
    std::optional<int64_t> from_layer_step; // absent: a client that does not mirror layer statistics
    bool columnar = false; // encoding=columnar: scalars as scalar_columns, not [step, tag, value] rows
};

// The page's scalar rows (by tag, then step) as one column per tag (docs/REMOTE.md). Why
// base64 inside the JSON rather than a binary body: the page stays one document with its
// events, layer statistics and marks, every answer (refusals too) stays JSON, and the
// columns cost 4/3 of their bytes — ~9 bytes per row of 11 MB for a 1-M-row run, against
// ~40 bytes per row of `[step, "train/loss", 0.12345678901234567]`; decoding is a table
// lookup per character where JSON numbers cost a parse each.
json scalar_columns(const std::vector<ScalarRow>& rows, int64_t cut)
{
    json columns = json::array();
    ScalarColumn column;
    const auto close = [&] {
        if (column.steps.empty()) return;
        const EncodedScalarColumn e = encode_scalar_column(column);
        columns.push_back({{"tag", e.tag}, {"first_step", e.first_step}, {"count", e.count},
                           {"step_deltas", e.step_deltas}, {"values", e.values}});
        column.steps.clear();
        column.values.clear();
    };
    for (const auto& r : rows) {
        if (r.step >= cut) continue;
        if (r.tag != column.tag) {
            close();
            column.tag = r.tag;
        }
        column.steps.push_back(r.step);
        column.values.push_back(r.value);
    }
    close();
    return columns;
}

// One page of a run's rows after the client's marks, read in one snapshot of the store.
// Scalars come from the step before `from_step` on (the client re-reads its last step, whose
// rows may have been committed in two batches, and the one before it, whose frame may come a
// step late), at most `limit` per tag after `from_step`, cut at a whole step;
// events after id `after_event`. With `from_layer_step`, layer statistics from that step on,
// at most kMaxLayerRowsPerPage rows; both tables are then cut at the same step, so that a
// replica always holds, below its marks, every scalar and layer row of one state of the
// source. The layer mark is exclusive once a frame is whole, so a frame is sent once.
json rows_page(RunStore& store, const RunInfo& run, const Marks& m, bool& has_news)
{
    // `limit` is per tag: a run with many tags (per-layer gradient norms) gets fewer steps.
    const auto tags = static_cast<int64_t>(std::max<size_t>(1, store.scalar_tags(run.id).size()));
    const int64_t per_tag = std::min(m.limit, std::max<int64_t>(2, kMaxScalarRowsPerPage / tags));
    // A telemetry frame reaches the store a step late where frames are deferred (CUDA runs:
    // core/trainer.cpp hands step S's frame on after step S+1's metrics), so its scalars
    // (memory/*, attn_max_logit/*, log_z/*) at step S may be committed after the rows of S+1
    // that moved the client's mark past S. Every page therefore starts a step before the mark
    // (one more row per tag, so that a cut page still ends past the mark): the step before
    // is sent again and replaces itself, and what came late comes with it.
    const int64_t read_from = std::max<int64_t>(0, m.from_step - 1);
    ScalarPage scalars = store.scalars_page(run.id, read_from, per_tag + (m.from_step - read_from));
    LayerStatsPage layers;
    int64_t cut = scalars.cut ? scalars.next : INT64_MAX;
    if (m.from_layer_step) {
        layers = store.layer_stats_page(run.id, *m.from_layer_step, kMaxLayerRowsPerPage);
        if (layers.cut) cut = std::min(cut, layers.next);
    }
    const bool cut_here = cut != INT64_MAX;
    json rows = json::array();
    int64_t next_step = m.from_step;
    has_news = false;
    for (const auto& s : scalars.rows) {
        if (s.step >= cut) continue;
        if (!m.columnar) rows.push_back(json::array({s.step, s.tag, encode_value(s.value)}));
        next_step = std::max(next_step, s.step);
        has_news = has_news || s.step > m.from_step;
    }
    if (cut_here) next_step = std::max(m.from_step, cut);
    const auto events = store.events_after(run.id, m.after_event, m.limit);
    json ev = json::array();
    int64_t next_event = m.after_event;
    size_t event_bytes = 0;
    bool events_cut = false;
    for (const auto& e : events) {
        if (event_bytes >= kMaxEventBytesPerPage) { // at least one event a page, however long
            events_cut = true;
            break;
        }
        event_bytes += e.kind.size() + e.message.size() + e.created_at.size() + e.fields.size() + 64;
        ev.push_back({{"id", e.id}, {"step", e.step}, {"kind", e.kind}, {"message", e.message},
                      {"created_at", e.created_at}, {"fields", e.fields}});
        next_event = e.id;
    }
    has_news = has_news || !events.empty() || run.status != RunStatus::Running;
    json page = {{"run", run.id},        {"status", std::string(run_status_name(run.status))},
                 {"events", ev},
                 {"next_from_step", next_step}, {"next_after_event", next_event}};
    if (m.columnar) page["scalar_columns"] = scalar_columns(scalars.rows, cut);
    else page["scalars"] = std::move(rows);
    if (m.from_layer_step) {
        const int64_t from = *m.from_layer_step;
        json tensors = json::array();
        int64_t last = -1;
        for (const auto& [step, t] : layers.rows) {
            if (step >= cut) continue;
            tensors.push_back(encode_tensor(step, t));
            last = step;
        }
        const bool running = run.status == RunStatus::Running;
        const auto whole = [&](int64_t step) { return !running || store.has_scalar(run.id, kFrameCompleteTag, step); };
        int64_t next_layer = from;
        if (cut_here) {
            next_layer = std::max(from, cut);
            // Below the cut, a running run's newest frame may still be coming: half committed,
            // or a deferred frame (CUDA: step S's frame after step S+1's rows) not begun when
            // the page was cut at S+1. The mark stays on it until it is whole. (At a step
            // that has no frame this re-reads one empty step.)
            if (last >= 0 && !whole(last)) next_layer = std::max(from, last);
            else if (cut - 1 > last && !whole(cut - 1)) next_layer = std::max(from, cut - 1);
        } else if (last >= 0) { // the newest frame may be half committed: read it again until whole
            next_layer = whole(last) ? last + 1 : last;
        }
        has_news = has_news || next_layer != from;
        page["layer_stats"] = tensors;
        page["next_from_layer_step"] = next_layer;
    }
    const bool more = cut_here || events_cut || static_cast<int64_t>(events.size()) >= m.limit;
    page["more"] = more;
    // Once a run has ended and the client has it all, the counts let it check its replica
    // (and start the run over if the source was rewritten, e.g. by a resume).
    if (!more && run.status != RunStatus::Running) {
        const RunRowCounts c = store.row_counts(run.id);
        page["counts"] = {{"scalars", c.scalars}, {"events", c.events}, {"layer_stats", c.layer_stats}};
    }
    return page;
}

ApiAnswer run_rows(const ApiContext& context, int64_t run_id, const std::multimap<std::string, std::string>& params)
{
    const auto p =
        single_params(params, {"from_step", "after_event", "from_layer_step", "limit", "wait_ms", "encoding"});
    const auto get = [&](const char* name, int64_t lo, int64_t hi, int64_t fallback) {
        const auto it = p.find(name);
        return it == p.end() ? fallback : parse_int(name, it->second, lo, hi);
    };
    Marks marks;
    marks.from_step = get("from_step", 0, INT64_MAX / 2, 0);
    marks.after_event = get("after_event", 0, INT64_MAX / 2, 0);
    if (p.count("from_layer_step")) marks.from_layer_step = get("from_layer_step", 0, INT64_MAX / 2, 0);
    marks.limit = get("limit", 2, kMaxRowsPerPage, kDefaultRowsPerPage);
    if (const auto it = p.find("encoding"); it != p.end()) {
        if (it->second != "json" && it->second != "columnar")
            throw BadParam{"parameter 'encoding' must be 'json' or 'columnar'"};
        marks.columnar = it->second == "columnar";
    }
    const int64_t wait_ms = get("wait_ms", 0, kMaxWaitMs, 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    struct Read {
        std::optional<json> page; // none: no such run
        bool has_news = false;
    };
    for (;;) {
        // Leased anew each time round: a connection that cannot see the writer is replaced.
        const Read read = context.stores->read([&](RunStore& store) {
            RunStore::ReadSnapshot snapshot(store);
            Read r;
            if (const auto run = store.run_info(run_id)) r.page = rows_page(store, *run, marks, r.has_news);
            return r;
        });
        if (!read.page) return api_error(404, "no run " + std::to_string(run_id) + " in this store");
        const bool stopping = context.stopping && context.stopping->load();
        if (read.has_news || stopping || std::chrono::steady_clock::now() + kPollInterval > deadline)
            return ok(*read.page);
        std::this_thread::sleep_for(kPollInterval);
    }
}

ControlCommand parse_control(const std::string& body)
{
    const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) throw BadParam{"the body must be a JSON object like {\"command\": \"pause\"}"};
    for (const auto& [k, v] : j.items()) {
        static const std::set<std::string> known = {"command", "pattern", "forward", "dgrad", "wgrad", "scaling"};
        if (!known.count(k)) throw BadParam{"unknown key '" + k + "' in the command"};
        if (!v.is_string()) throw BadParam{"key '" + k + "' must be a string"};
    }
    ControlCommand c;
    const auto text = [&](const char* key) { return j.contains(key) ? j[key].get<std::string>() : std::string(); };
    c.command = text("command");
    c.pattern = text("pattern");
    c.forward = text("forward");
    c.dgrad = text("dgrad");
    c.wgrad = text("wgrad");
    c.scaling = text("scaling");
    static const std::set<std::string> commands = {"pause", "resume", "stop", "checkpoint", "layer_formats"};
    if (!commands.count(c.command))
        throw BadParam{"'command' must be one of pause, resume, stop, checkpoint, layer_formats"};
    if (c.command == "layer_formats" && (c.pattern.empty() || c.forward.empty()))
        throw BadParam{"layer_formats needs 'pattern' and 'forward' (and optionally 'dgrad', 'wgrad', 'scaling')"};
    // A layer key on another command was accepted and dropped: a client that meant
    // layer_formats learned nothing of its mistake.
    if (c.command != "layer_formats")
        for (const char* key : {"pattern", "forward", "dgrad", "wgrad", "scaling"})
            if (j.contains(key)) throw BadParam{std::string("'") + key + "' goes with layer_formats only"};
    return c;
}

ApiAnswer control(const ApiContext& context, int64_t run_id, const std::multimap<std::string, std::string>& params,
                  const std::string& body, const std::string& origin)
{
    // curl -d '{...}' sends form data, which the HTTP library reads as a parameter named by
    // the whole JSON text: say what to send instead of "unknown parameter '{...}'".
    for (const auto& [key, value] : params)
        if (!key.empty() && key.front() == '{')
            throw BadParam{"send the command as a JSON body with the header Content-Type: application/json "
                           "(curl: -H 'Content-Type: application/json' -d '{\"command\": \"pause\"}')"};
    single_params(params, {});
    if (!context.allow_control)
        return api_error(403, "this server does not take commands: start it with --allow-control to steer runs");
    const ControlCommand command = parse_control(body);
    if (!context.control)
        return api_error(409, "no run trains in this server's process: only 'mantissa-train run --serve' takes "
                              "commands");
    return context.control(run_id, command, origin);
}

// "/v1/runs/17/rows" -> (17, "rows"); nullopt when the path has another shape.
std::optional<std::pair<int64_t, std::string>> run_path(const std::string& path)
{
    static const std::string prefix = "/v1/runs/";
    if (path.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
    const auto slash = path.find('/', prefix.size());
    if (slash == std::string::npos) return std::nullopt;
    const std::string id = path.substr(prefix.size(), slash - prefix.size());
    const std::string tail = path.substr(slash + 1);
    if (tail != "rows" && tail != "control") return std::nullopt;
    return std::make_pair(parse_int("run id", id, 1, INT64_MAX / 2), tail);
}

} // namespace

ApiAnswer api_error(int status, const std::string& message) { return {status, dump({{"error", message}})}; }

ApiAnswer handle_api(const ApiContext& context, const std::string& method, const std::string& path,
                     const std::multimap<std::string, std::string>& params, const std::string& body,
                     const std::string& origin)
{
    try {
        if (path == "/v1/runs") {
            if (method != "GET") return api_error(405, "use GET for " + path);
            single_params(params, {});
            return list_runs(context);
        }
        const auto target = run_path(path);
        if (!target) return api_error(404, "no such resource; the API is GET /v1/runs, GET /v1/runs/{id}/rows, "
                                           "POST /v1/runs/{id}/control");
        const auto& [run_id, what] = *target;
        if (what == "rows") {
            if (method != "GET") return api_error(405, "use GET for " + path);
            return run_rows(context, run_id, params);
        }
        if (method != "POST") return api_error(405, "use POST for " + path);
        return control(context, run_id, params, body, origin);
    } catch (const BadParam& e) {
        return api_error(400, e.message);
    } catch (const StoreError& e) {
        return api_error(503, std::string("the run store cannot be read: ") + e.what());
    } catch (const std::exception& e) {
        return api_error(500, e.what());
    }
}

} // namespace mantissa
