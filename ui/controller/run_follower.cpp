// SPDX-License-Identifier: GPL-3.0-or-later
#include "controller/run_follower.h"

#include <QDateTime>
#include <QElapsedTimer>
#include <QTimer>

#include <algorithm>
#include <climits>
#include <map>

#include "models/live_layers.h"
#include "precision_policy.h"
#include "project_config.h"
#include "run_store.h"

namespace mantissa {

namespace {

constexpr int64_t kStepsPerPage = 5000;      // per tag
constexpr int64_t kLayerRowsPerPage = 8000;
constexpr int64_t kEventsPerPage = 1000;
constexpr qint64 kPollBudgetMs = 60;         // a catching-up poll hands the GUI back after this
constexpr qint64 kReopenAfterQuietMs = 30000; // a connection sees a dead writer's run as interrupted only when new

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

bool frame_tag(const std::string& tag)
{
    return starts_with(tag, "attn_max_logit/") || starts_with(tag, "log_z/") || starts_with(tag, "memory/");
}

qint64 now_ms() { return QDateTime::currentMSecsSinceEpoch(); }

// One step's scalar rows in tag order (the store's order): a handful to a few hundred, so a
// flat list is searched faster than a map is built.
using StepRows = std::vector<std::pair<const std::string*, double>>;

const double* find_tag(const StepRows& rows, const char* tag)
{
    for (const auto& [t, value] : rows)
        if (*t == tag) return &value;
    return nullptr;
}

StepMetrics step_metrics(int64_t step, const StepRows& rows)
{
    StepMetrics m;
    m.step = step;
    for (const auto& [t, value] : rows) {
        const std::string& tag = *t;
        if (tag == "train/loss") m.train_loss = value;
        else if (tag == "lr") m.learning_rate = value;
        else if (tag == "grad_norm") m.grad_norm = value;
        else if (tag == "step_time_ms") m.step_time_ms = value;
        else if (tag == "tokens_per_s") m.tokens_per_s = value;
        else if (tag == "loss_scale") m.loss_scale = value;
        else if (tag == "skipped") m.skipped = value != 0.0;
        else if (starts_with(tag, "grad_norm/")) m.layer_grad_norms.emplace_back(tag.substr(10), value);
        else if (tag != "val/loss" && tag != "eval/train_loss" && !frame_tag(tag)) m.extra_scalars.emplace_back(tag, value);
    }
    return m;
}

size_t grad_norm_count(const StepRows& rows)
{
    return static_cast<size_t>(std::count_if(rows.begin(), rows.end(),
                                             [](const auto& r) { return starts_with(*r.first, "grad_norm/"); }));
}

bool has_fixed_metrics(const StepRows& rows)
{
    for (const char* tag : {"train/loss", "lr", "grad_norm", "step_time_ms", "tokens_per_s", "loss_scale"})
        if (!find_tag(rows, tag)) return false;
    return true;
}

// The rows' indices by step, each step's rows keeping their (tag) order. A page holds its
// rows by tag, then step: one tag's page is in step order already.
std::vector<uint32_t> by_step(const std::vector<ScalarRow>& rows)
{
    std::vector<uint32_t> order(rows.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto earlier = [&](uint32_t a, uint32_t b) { return rows[a].step < rows[b].step; };
    if (!std::is_sorted(order.begin(), order.end(), earlier)) std::stable_sort(order.begin(), order.end(), earlier);
    return order;
}

void add_frame_scalar(LayerStatsFrame& f, const std::string& tag, double value)
{
    if (starts_with(tag, "attn_max_logit/")) f.attention_max_logit.emplace_back(tag.substr(15), value);
    else if (tag == "log_z/mean") f.log_z_mean = value;
    else if (tag == "log_z/max") f.log_z_max = value;
    else if (tag == "memory/resident_bytes") f.memory.resident_bytes = static_cast<int64_t>(value);
    else if (tag == "memory/cuda_allocated_bytes") f.memory.cuda_allocated_bytes = static_cast<int64_t>(value);
    else if (tag == "memory/cuda_reserved_bytes") f.memory.cuda_reserved_bytes = static_cast<int64_t>(value);
    else if (tag == "memory/cuda_peak_bytes") f.memory.cuda_peak_bytes = static_cast<int64_t>(value);
    else if (tag == "memory/nvml_used_bytes") f.memory.nvml_used_bytes = static_cast<int64_t>(value);
}

} // namespace

RunFollower::RunFollower(QObject* parent) : QObject(parent)
{
    timer_ = new QTimer(this);
    timer_->setSingleShot(true);
    connect(timer_, &QTimer::timeout, this, [this] { poll(); });
}

RunFollower::~RunFollower() = default;

void RunFollower::pollSoon()
{
    if (runId_ > 0 && live_) timer_->start(0);
}

void RunFollower::reopenSoon()
{
    if (!isLive()) return;
    store_.reset();
    timer_->start(0);
}

void RunFollower::setIntervalMs(int ms) { intervalMs_ = std::max(10, ms); }

bool RunFollower::isLive() const { return runId_ > 0 && live_; }

bool RunFollower::follow(const QString& storePath, int64_t runId, QString* error)
{
    stop();
    storePath_ = storePath;
    storeChecked_ = false;
    runId_ = runId;
    QString why;
    RunStore* store = connection(&why);
    std::optional<RunInfo> info;
    try {
        if (store) info = store->find_run(std::to_string(runId));
        if (store && !info) why = tr("run %1 is not in %2").arg(runId).arg(storePath);
    } catch (const std::exception& e) {
        why = QString::fromUtf8(e.what());
    }
    if (!info) {
        if (error) *error = why;
        stop();
        return false;
    }
    openRun(*info);
    timer_->start(0);
    return true;
}

void RunFollower::stop()
{
    timer_->stop();
    store_.reset();
    runId_ = 0;
    live_ = false;
    marks_ = {};
    offered_.clear();
    offeredRows_ = 0;
}

std::string followed_identity(const RunInfo& info) { return info.uuid.empty() ? info.created_at : info.uuid; }

void RunFollower::openRun(const RunInfo& info)
{
    marks_ = {};
    offered_.clear(); // a restart reads the run again from the store
    offeredRows_ = 0;
    offeredPagesTaken_ = 0;
    stepsEmitted_ = framesEmitted_ = 0;
    live_ = true; // until it has been read to its end
    run_ = {};
    run_.id = info.id;
    run_.identity = followed_identity(info);
    run_.name = QString::fromStdString(info.name);
    run_.status = info.status;
    try {
        // The config as the run stored it, read as Compare reads it.
        const ProjectConfig config = load_run_config(info.config_json);
        run_.tokensPerStep = config.training.batch_size * config.model.context_length * config.training.grad_accum;
        run_.totalSteps = config.training.steps;
        run_.layers = gemm_layer_names(config.model.n_layer);
        run_.initialLayerStates = LiveLayers::from_project(config);
        run_.precision = config.precision;
    } catch (const std::exception&) {
        // An unreadable config: no tokens axis, layers listed as the telemetry names them.
    }
    lastNewsMs_ = now_ms();
    emit opened(run_);
}

RunStore* RunFollower::connection(QString* error)
{
    // A connection opened as immutable would never see a writer that started later, nor a
    // file changed and closed meanwhile; one kept open forever would never see a writer die.
    const bool stale = store_ && (store_->snapshot_outdated() ||
                                  (live_ && now_ms() - lastNewsMs_ > kReopenAfterQuietMs &&
                                   now_ms() - openedAtMs_ > kReopenAfterQuietMs));
    if (stale) store_.reset();
    if (store_) return store_.get();
    try {
        // Checked whole once: a reopen every 30 s of quiet (a paused run) read a large file each time.
        store_ = RunStore::open_read_only(storePath_.toStdString(), /*quick_check=*/!storeChecked_);
        storeChecked_ = true;
        openedAtMs_ = now_ms();
    } catch (const std::exception& e) {
        if (error) *error = QString::fromUtf8(e.what());
        return nullptr;
    }
    return store_.get();
}

void RunFollower::fail(const QString& message)
{
    stop();
    emit failed(message);
}

bool RunFollower::poll()
{
    if (runId_ <= 0) return false;
    QString why;
    RunStore* store = connection(&why);
    if (!store) {
        fail(why);
        return false;
    }
    QElapsedTimer budget;
    budget.start();
    TelemetryBatch batch;
    bool more = false, runEnded = false, restart = false, gone = false;
    const Marks before = marks_;
    try {
        RunStore::ReadSnapshot snapshot(*store);
        const auto info = store->find_run(std::to_string(runId_));
        gone = !info;
        // An ended run the store does not hold whole yet is read as a running one.
        runEnded = info && info->status != RunStatus::Running && (!complete_ || complete_(runId_));
        if (info) run_.status = info->status;
        // Another run under this id (the one followed was deleted, and its id given again):
        // read from its start, as a restart, not as more steps of the old one.
        if (info && followed_identity(*info) != run_.identity) restart = true;
        // Events first, and until they are all read no steps: a resume's event must come before the
        // steps it rewrote (readEvents). A run of 500,000 events is read over many polls.
        bool moreEvents = false;
        if (info && !restart) readEvents(*store, batch, restart, moreEvents, budget);
        more = moreEvents;
        while (info && !restart && !moreEvents) {
            bool moreScalars = false, moreFrames = false;
            if (!takeOffered(batch, moreScalars)) readScalars(*store, runEnded, batch, moreScalars);
            readFrames(*store, runEnded, batch, moreFrames);
            more = moreScalars || moreFrames;
            if (!more || budget.elapsed() >= kPollBudgetMs) break;
        }
    } catch (const std::exception& e) {
        // A writer that started meanwhile tore the view ("malformed"): read again, afresh, from
        // where this poll began. Only the store's own failure ends the following.
        if (store->snapshot_outdated()) {
            marks_ = before;
            store_.reset();
            timer_->start(0);
            return false;
        }
        fail(tr("cannot read run %1 of %2: %3").arg(runId_).arg(storePath_, QString::fromUtf8(e.what())));
        return false;
    }
    if (gone) {
        fail(tr("run %1 is no longer in %2").arg(runId_).arg(storePath_));
        return false;
    }
    if (restart) {
        // The steps after the resume's checkpoint are being written again: start over.
        const int64_t id = runId_;
        emit restarted();
        if (runId_ != id) return false; // a listener chose another run
        QString error;
        RunStore* again = connection(&error);
        std::optional<RunInfo> info;
        try {
            if (again) info = again->find_run(std::to_string(id));
        } catch (const std::exception& e) { // not out of a timer's slot: that would end the GUI
            error = QString::fromUtf8(e.what());
        }
        if (!again || (!info && !error.isEmpty())) {
            fail(tr("cannot read run %1 of %2: %3").arg(id).arg(storePath_, error));
            return false;
        }
        if (info) openRun(*info);
        timer_->start(0);
        return true;
    }
    const bool news = !batch.empty();
    if (news) {
        lastNewsMs_ = now_ms();
        stepsEmitted_ += static_cast<int64_t>(batch.steps.size());
        framesEmitted_ += static_cast<int64_t>(batch.layer_frames.size());
        const int64_t id = runId_;
        emit batchReady(batch);
        if (runId_ != id) return news; // a listener followed another run meanwhile
    }
    if (more) {
        timer_->start(0); // catching up: the rest right after the GUI had its turn
    } else if (runEnded) {
        live_ = false;
        store_.reset(); // read to its end: nothing more will come
        emit ended();
    } else {
        timer_->start(intervalMs_);
    }
    return news;
}

void RunFollower::readEvents(RunStore& store, TelemetryBatch& batch, bool& rewound, bool& more,
                             const QElapsedTimer& budget)
{
    for (;;) {
        const auto rows = store.event_rows_after(runId_, marks_.afterEvent, kEventsPerPage);
        for (const auto& [id, row] : rows) {
            // A resume rewrites the steps after its checkpoint, which this follower handed on.
            if (row.event.kind == EventKind::ResumedFromCheckpoint && marks_.lastStep > row.step) {
                rewound = true;
                return;
            }
            batch.events.push_back(row.event);
            marks_.afterEvent = id;
        }
        if (static_cast<int64_t>(rows.size()) < kEventsPerPage) return;
        if (budget.elapsed() >= kPollBudgetMs) {
            more = true;
            return;
        }
    }
}

void RunFollower::offerScalars(int64_t runId, int64_t fromStep, const ScalarPage& page)
{
    if (runId != runId_ || page.rows.empty()) return;
    if (offeredRows_ + page.rows.size() > kMaxOfferedRows) return; // read from the store when it holds them
    offered_.push_back({fromStep, page});
    offeredRows_ += page.rows.size();
    pollSoon();
}

bool RunFollower::takeOffered(TelemetryBatch& batch, bool& more)
{
    const auto dropFront = [this] {
        offeredRows_ -= offered_.front().page.rows.size();
        offered_.pop_front();
    };
    // Pages the marks have passed (the store was read past them first) go.
    while (!offered_.empty()) {
        const ScalarPage& p = offered_.front().page;
        const int64_t last = p.cut ? p.next - 1 : p.next; // the page's newest step
        if (last >= marks_.scalarFrom) break;
        dropFront();
    }
    if (offered_.empty() || offered_.front().fromStep > marks_.scalarFrom) return false;
    handOnScalars(offered_.front().page, false, batch);
    dropFront();
    ++offeredPagesTaken_;
    more = !offered_.empty() && offered_.front().fromStep <= marks_.scalarFrom;
    return true;
}

bool RunFollower::readScalars(RunStore& store, bool runEnded, TelemetryBatch& batch, bool& more)
{
    const ScalarPage page = store.scalars_page(runId_, marks_.scalarFrom, kStepsPerPage);
    more = page.cut;
    if (page.rows.empty()) return false;
    handOnScalars(page, runEnded, batch);
    return true;
}

void RunFollower::handOnScalars(const ScalarPage& page, bool runEnded, TelemetryBatch& batch)
{
    if (page.rows.empty()) return;
    const std::vector<uint32_t> order = by_step(page.rows);
    const int64_t newest = page.rows[order.back()].step;
    int64_t pending = INT64_MAX; // the first step with a row still to hand on
    StepRows rows;
    for (size_t i = 0; i < order.size();) {
        const int64_t step = page.rows[order[i]].step;
        rows.clear();
        for (; i < order.size() && page.rows[order[i]].step == step; ++i)
            rows.emplace_back(&page.rows[order[i]].tag, page.rows[order[i]].value);
        // Rows of a later step mean this one's are all in (they were written first).
        const bool later = runEnded || page.cut || step < newest;
        if (step > marks_.lastStep && find_tag(rows, "train/loss")) {
            const size_t norms = grad_norm_count(rows);
            if (later || (has_fixed_metrics(rows) && norms >= marks_.gradNorms)) {
                batch.steps.push_back(step_metrics(step, rows));
                marks_.lastStep = step;
                marks_.gradNorms = norms;
            } else {
                pending = std::min(pending, step);
            }
        }
        const double* val = find_tag(rows, "val/loss");
        if (step > marks_.lastEval && val) {
            const double* train = find_tag(rows, "eval/train_loss");
            if (later || train) {
                batch.evals.push_back({step, *val, train ? *train : 0.0});
                marks_.lastEval = step;
            } else {
                pending = std::min(pending, step);
            }
        }
    }
    marks_.scalarFrom = pending != INT64_MAX ? pending : page.next;
}

bool RunFollower::readFrames(RunStore& store, bool runEnded, TelemetryBatch& batch, bool& more)
{
    const LayerStatsPage page = store.layer_stats_page(runId_, marks_.layerFrom, kLayerRowsPerPage);
    more = page.cut;
    if (page.rows.empty()) return false;
    const int64_t first = page.rows.front().first, newest = page.rows.back().first;
    // The frames' own scalars (attention logits, log Z, memory), for every frame of the page.
    std::vector<std::string> tags;
    for (const auto& tag : store.scalar_tags(runId_))
        if (frame_tag(tag)) tags.push_back(tag);
    std::map<int64_t, std::map<std::string, double>> scalars;
    for (const auto& r : store.scalars_in_steps(runId_, tags, first, newest)) scalars[r.step][r.tag] = r.value;
    size_t i = 0;
    while (i < page.rows.size()) {
        const int64_t step = page.rows[i].first;
        size_t end = i;
        while (end < page.rows.size() && page.rows[end].first == step) ++end;
        const auto own = scalars.find(step);
        // StoreSink writes memory/resident_bytes after the frame's statistics: once it is
        // there, or a later frame is, the frame is whole.
        const bool whole = runEnded || page.cut || step < newest ||
                           (own != scalars.end() && own->second.count("memory/resident_bytes"));
        if (!whole) {
            marks_.layerFrom = step;
            more = false;
            return true;
        }
        LayerStatsFrame frame;
        frame.step = step;
        frame.tensors.reserve(end - i);
        for (size_t k = i; k < end; ++k) frame.tensors.push_back(page.rows[k].second);
        if (own != scalars.end())
            for (const auto& [tag, value] : own->second) add_frame_scalar(frame, tag, value);
        batch.layer_frames.push_back(std::move(frame));
        marks_.layerFrom = step + 1;
        i = end;
    }
    if (page.cut) marks_.layerFrom = page.next;
    return true;
}

} // namespace mantissa
