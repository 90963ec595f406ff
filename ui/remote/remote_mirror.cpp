// SPDX-License-Identifier: GPL-3.0-or-later
#include "remote/remote_mirror.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QRegularExpression>
#include <QSslCertificate>
#include <QSslConfiguration>
#include <QSslError>
#include <QTimer>
#include <QUrlQuery>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "run_event.h"
#include "run_lock_file.h"
#include "run_store.h"
#include "scalar_columns.h"

namespace mantissa {

namespace {

constexpr int kRowsPerPage = 10000; // steps per tag; the server bounds the page's rows in all
constexpr int kLongPollMs = 1000;
constexpr int kMaxBackoffMs = 5000;
constexpr qint64 kRateWindowMs = 3000;
constexpr int kMaxResyncs = 3;

double decode_value(const QJsonValue& v)
{
    if (v.isDouble()) return v.toDouble();
    const QString s = v.toString();
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    return std::nan("");
}

std::string text(const QJsonObject& o, const char* key) { return o.value(key).toString().toStdString(); }
qint64 integer(const QJsonValue& v) { return static_cast<qint64>(v.toDouble()); }

bool running(const QString& status) { return status == "running"; }

// A page's scalar_columns (encoding=columnar, docs/REMOTE.md) as rows; throws ColumnError when
// one cannot be decoded, before anything of the page is written.
std::vector<ScalarRow> decode_columns(const QJsonValue& columns)
{
    if (!columns.isArray()) throw ColumnError("'scalar_columns' is not an array");
    std::vector<ScalarRow> rows;
    for (const auto& v : columns.toArray()) {
        const QJsonObject o = v.toObject();
        for (const char* key : {"tag", "step_deltas", "values"})
            if (!o.value(key).isString()) throw ColumnError(std::string("a scalar column without a string '") + key + "'");
        for (const char* key : {"first_step", "count"})
            if (!o.value(key).isDouble()) throw ColumnError(std::string("a scalar column without a number '") + key + "'");
        EncodedScalarColumn e;
        e.tag = text(o, "tag");
        e.first_step = o.value("first_step").toInteger();
        e.count = o.value("count").toInteger();
        e.step_deltas = o.value("step_deltas").toString().toStdString();
        e.values = o.value("values").toString().toStdString();
        const ScalarColumn c = decode_scalar_column(e);
        rows.reserve(rows.size() + c.steps.size());
        for (size_t i = 0; i < c.steps.size(); ++i) rows.push_back({c.steps[i], c.tag, c.values[i]});
    }
    return rows;
}

} // namespace

RemoteMirror::RemoteMirror(const QUrl& server, const QString& token, const QString& replicaPath, QObject* parent)
    : QObject(parent), server_(server), token_(token), replicaPath_(replicaPath), writer_(this)
{
    net_ = new QNetworkAccessManager(this);
    retry_ = new QTimer(this);
    retry_->setSingleShot(true);
    connect(retry_, &QTimer::timeout, this, &RemoteMirror::requestRuns);
    clock_.start();
}

RemoteMirror::~RemoteMirror()
{
    blockSignals(true); // no "stopped" to listeners that may be gone already
    stop();
}

namespace {
std::string mirror_lock_path(const QString& replica) { return replica.toStdString() + ".mirror-lock"; }
} // namespace

void RemoteMirror::start()
{
    const std::string lockPath = mirror_lock_path(replicaPath_);
    const RunLockFile lock = lock_run_file(lockPath, RunLockKind::Exclusive, /*create=*/true);
    if (lock.state == RunLockFile::State::Held)
        throw ReplicaInUse(replicaPath_.toStdString() + " is kept by another window or process");
    if (lock.state != RunLockFile::State::Locked)
        throw StoreError("cannot create " + lockPath + ": " + std::strerror(lock.error));
    replicaLockFd_ = lock.fd;
    try {
        replica_ = std::make_unique<RunStore>(replicaPath_.toStdString(), OpenMode::Create);
    } catch (...) {
        release_run_file(lockPath, replicaLockFd_);
        replicaLockFd_ = -1;
        throw;
    }
    // The replica's own marks: what it holds already need not come again.
    for (const auto& run : replica_->list_runs()) {
        const RunRowCounts c = replica_->row_counts(run.id);
        Cursor& cur = cursors_[run.id];
        cur.fromStep = std::max<qint64>(0, c.max_scalar_step);
        cur.afterEvent = c.max_event_id;
        // Read again inclusively: the last frame held may be only part of one.
        cur.fromLayerStep = std::max<qint64>(0, c.max_layer_step);
        cur.uuid = run.uuid;
    }
    setState(State::Connecting, tr("connecting to %1").arg(server_.authority()));
    requestRuns();
}

void RemoteMirror::dropInFlight()
{
    if (!inFlight_) return;
    QNetworkReply* r = inFlight_;
    inFlight_ = nullptr;
    r->disconnect(this);
    r->abort();
    r->deleteLater();
}

void RemoteMirror::stop()
{
    retry_->stop();
    dropInFlight();
    writer_.stop(); // the page under way is written; those queued are dropped
    ++generation_;  // and what their writes would still report, ignored
    nextPageHeld_ = false;
    replica_.reset(); // releases the claims of remote running runs: they read as interrupted
    if (replicaLockFd_ >= 0) release_run_file(mirror_lock_path(replicaPath_), replicaLockFd_);
    replicaLockFd_ = -1;
    if (state_ != State::Stopped) setState(State::Stopped, tr("disconnected"));
}

void RemoteMirror::halt(const QString& why)
{
    // No retry follows: the replica's remote runs must not go on reading "running", and the
    // lag "0.0 s", forever. Released as stop() releases them, they read as interrupted.
    stop();
    caughtUp_ = false;
    setState(State::Refused, why);
    // The window's connections to the replica reopen and read them so: one opened while the
    // claims were held would go on reading them running, and the Monitor follow one live.
    emit runsChanged();
}

QString RemoteMirror::stateText() const { return stateText_; }

double RemoteMirror::lagSeconds() const
{
    if (caughtUp_) return 0.0;
    if (caughtUpAtMs_ < 0) return -1.0; // never caught up yet
    return static_cast<double>(clock_.elapsed() - caughtUpAtMs_) / 1000.0;
}

double RemoteMirror::bytesPerSecond() const
{
    const qint64 now = clock_.elapsed();
    qint64 sum = 0;
    for (const auto& [at, bytes] : recentBytes_)
        if (now - at <= kRateWindowMs) sum += bytes;
    return static_cast<double>(sum) * 1000.0 / static_cast<double>(kRateWindowMs);
}

bool RemoteMirror::caughtUp() const
{
    if (!caughtUp_) return false;
    for (const auto& [id, c] : cursors_)
        if (!c.complete && !c.running) return false;
    return true;
}

bool RemoteMirror::runComplete(qint64 runId) const
{
    if (state_ == State::Refused) return true; // no retry follows: the replica holds all it will
    const auto it = cursors_.find(runId);
    return it != cursors_.end() && it->second.complete;
}

void RemoteMirror::countBytes(qint64 bytes)
{
    bytesReceived_ += bytes;
    const qint64 now = clock_.elapsed();
    recentBytes_.emplace_back(now, bytes);
    while (!recentBytes_.empty() && now - recentBytes_.front().first > kRateWindowMs) recentBytes_.pop_front();
    emit statsChanged();
}

void RemoteMirror::setState(State state, const QString& text)
{
    const bool changed = state != state_ || text != stateText_;
    state_ = state;
    stateText_ = text;
    if (changed) emit stateChanged(state, text);
}

QNetworkReply* RemoteMirror::get(const QString& pathAndQuery, int waitMs)
{
    QUrl url = server_;
    const auto q = pathAndQuery.indexOf('?');
    url.setPath(q < 0 ? pathAndQuery : pathAndQuery.left(q));
    if (q >= 0) url.setQuery(pathAndQuery.mid(q + 1));
    QNetworkRequest request(url);
    request.setRawHeader("Authorization", "Bearer " + token_.toUtf8());
    // Uncompressed: Qt offers brotli, which cpp-httplib then spends ~0.5 s on per 200 kB page
    // (50 times the page's own cost) — a 1-M-row run took 100 s to copy instead of 2. Through
    // ssh, `ssh -C` compresses the tunnel where the link is slow.
    request.setRawHeader("Accept-Encoding", "identity");
    // A server that stops answering (killed host, cut cable) is noticed without a TCP reset.
    request.setTransferTimeout(waitMs + 10000);
    untrustedSha256_.clear(); // of this request's handshake only
    inFlight_ = net_->get(request);
    checkCertificate(inFlight_);
    return inFlight_;
}

QByteArray RemoteMirror::parseFingerprint(const QString& text)
{
    QString hex = text;
    hex.remove(QRegularExpression(QStringLiteral("[:\\s]")));
    static const QRegularExpression sha256(QStringLiteral("^[0-9A-Fa-f]{64}$"));
    return sha256.match(hex).hasMatch() ? QByteArray::fromHex(hex.toLatin1()) : QByteArray();
}

QString RemoteMirror::fingerprintText(const QByteArray& sha256)
{
    return QString::fromLatin1(sha256.toHex(':').toUpper());
}

void RemoteMirror::checkCertificate(QNetworkReply* reply)
{
    connect(reply, &QNetworkReply::sslErrors, this, [this, reply](const QList<QSslError>& errors) {
        const QByteArray seen = reply->sslConfiguration().peerCertificate().digest(QCryptographicHash::Sha256);
        // Pinned: this very certificate is trusted, whatever its chain, name or dates say.
        if (!pinnedSha256_.isEmpty() && seen == pinnedSha256_) {
            reply->ignoreSslErrors(errors);
            return;
        }
        untrustedSha256_ = seen;
    });
}

void RemoteMirror::markConnected()
{
    if (backoffMs_ == 0 && state_ == State::Connected) return;
    if (everConnected_ && state_ != State::Connected) ++reconnects_;
    everConnected_ = true;
    backoffMs_ = 0;
    setState(State::Connected, tr("connected to %1").arg(server_.authority()));
}

bool RemoteMirror::take(QNetworkReply* reply, QByteArray& body, bool confirms)
{
    inFlight_ = nullptr;
    reply->deleteLater();
    body = reply->readAll();
    countBytes(body.size());
    const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
    if (reply->error() == QNetworkReply::NoError && status == 200) {
        if (confirms) markConnected();
        return true;
    }
    const QString message = QJsonDocument::fromJson(body).object().value("error").toString();
    if (reply->error() == QNetworkReply::SslHandshakeFailedError && !untrustedSha256_.isEmpty()) {
        // Not a passing fault: retrying would meet the same certificate. Pinning it is the
        // user's decision, made against the fingerprint the server printed.
        halt(tr("%1's certificate is not trusted (%2). If it is your server's own (self-signed) certificate, "
                "compare its fingerprint with the one mantissa-train printed and enter it in Connect: SHA-256 %3")
                 .arg(server_.authority(), reply->errorString(), fingerprintText(untrustedSha256_)));
        return false;
    }
    // A Mantissa server's refusal says why; one without its error is another service's (a
    // forge's API on the port a tunnel used to lead to), retried as a 404 is, not a wrong token.
    if ((status == 401 || status == 403) && !message.isEmpty()) {
        halt(tr("refused by %1: %2").arg(server_.authority(), message));
        return false;
    }
    if (status == 429) { // still connected: the server asks for a pause, not a reconnect
        retry_->start(1000);
        return false;
    }
    retryLater(message.isEmpty() ? failureText(reply, status) : message);
    return false;
}

QString RemoteMirror::failureText(QNetworkReply* reply, int status)
{
    // Qt's own texts name the transfer, not the problem: "Operation canceled" for a server that
    // never answers, "server replied: File not found" for another service on the port.
    if (reply->error() == QNetworkReply::OperationCanceledError)
        return tr("no answer within %1 s").arg(reply->request().transferTimeout() / 1000);
    if (status != 0)
        return tr("it answers HTTP %1 without a Mantissa run store server's error (another service on that port, or "
                  "a proxy?)")
            .arg(status);
    return reply->errorString();
}

void RemoteMirror::retryLater(const QString& why)
{
    caughtUp_ = false;
    backoffMs_ = backoffMs_ == 0 ? 250 : std::min(kMaxBackoffMs, backoffMs_ * 2);
    // "Lost" only what was had: a first connection that fails was never made.
    const QString what = everConnected_ ? tr("%1 lost: %2") : tr("cannot connect to %1: %2");
    setState(State::Reconnecting,
             tr("%1; retrying in %2 s") // one pass: a '%2' in the server's message stays as it is
                 .arg(what.arg(server_.authority(), why), QString::number(backoffMs_ / 1000.0, 'f', 1)));
    retry_->start(backoffMs_);
}

void RemoteMirror::sendCommand(qint64 runId, const QString& command, const QVariantMap& fields)
{
    QUrl url = server_;
    url.setPath(QString("/v1/runs/%1/control").arg(runId));
    QNetworkRequest request(url);
    request.setRawHeader("Authorization", "Bearer " + token_.toUtf8());
    request.setHeader(QNetworkRequest::ContentTypeHeader, "application/json");
    request.setTransferTimeout(10000);
    QJsonObject body = QJsonObject::fromVariantMap(fields);
    body["command"] = command;
    // Its own reply, beside the mirroring loop's one request in flight.
    QNetworkReply* reply = net_->post(request, QJsonDocument(body).toJson(QJsonDocument::Compact));
    checkCertificate(reply);
    connect(reply, &QNetworkReply::finished, this, [this, reply, runId, command] {
        reply->deleteLater();
        const QByteArray answer = reply->readAll();
        countBytes(answer.size());
        const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
        const QString error = QJsonDocument::fromJson(answer).object().value("error").toString();
        const bool accepted = reply->error() == QNetworkReply::NoError && status == 200;
        // Refused by the server, or never heard by it: a dead server refused nothing.
        const QString failure = failureText(reply, status);
        const QString why = !error.isEmpty() ? tr("The server refused: %1").arg(error)
                            : status != 0    ? tr("%1 did not take the command: %2").arg(server_.authority(), failure)
                                             : tr("Cannot reach %1: %2").arg(server_.authority(), failure);
        const QString sent = tr("%1 sent to run %2").arg(command).arg(runId);
        emit commandAnswered(runId, command, accepted, accepted ? sent : why);
    });
}

void RemoteMirror::requestRuns()
{
    if (!replica_) return;
    ++runListsRequested_;
    runsListedAtMs_ = clock_.elapsed();
    QNetworkReply* reply = get("/v1/runs", 0);
    connect(reply, &QNetworkReply::finished, this, [this, reply] { onRuns(reply); });
}

void RemoteMirror::onRuns(QNetworkReply* reply)
{
    QByteArray body;
    if (!take(reply, body, /*confirms=*/false) || !replica_) return;
    const QJsonDocument document = QJsonDocument::fromJson(body);
    const QJsonObject answer = document.object();
    // A 200 that is no run store's (a captive portal, another service where a tunnel used to
    // lead) would read as a store with no runs, and every run would be deleted from the replica.
    // Not a connection either: the retries back off as for any failure (they came 4 times a
    // second, each one "connected" for a moment, before 2026-12-07).
    const QJsonValue protocol = answer.value("protocol");
    if (document.isObject() && protocol.isDouble() && protocol.toInt() != 1 && answer.value("runs").isArray()) {
        retryLater(tr("it speaks protocol %1 of Mantissa's run store server, and this window speaks 1: run the "
                      "same Mantissa version at both ends; the replica is left as it is")
                       .arg(protocol.toInt()));
        return;
    }
    if (!document.isObject() || protocol.toInt() != 1 || !answer.value("runs").isArray()) {
        retryLater(tr("it does not answer as a Mantissa run store server (another service on that port, or a "
                      "proxy?); the replica is left as it is"));
        return;
    }
    markConnected();
    const QJsonArray runs = answer.value("runs").toArray();
    // A server from before the columnar encoding lists none and gets JSON rows.
    columnar_ = answer.value("row_encodings").toArray().contains(QJsonValue("columnar"));
    trainingRun_ = answer.contains("training_run") ? integer(answer.value("training_run")) : -1;
    std::set<qint64> seen;
    bool changed = false;
    queue_.clear();
    try {
        for (const auto& v : runs) {
            const QJsonObject o = v.toObject();
            RunInfo info;
            info.id = integer(o.value("id"));
            info.name = text(o, "name");
            info.project_path = text(o, "project_path");
            info.config_json = text(o, "config_json");
            info.status = parse_run_status(text(o, "status")).value_or(RunStatus::Interrupted);
            info.created_at = text(o, "created_at");
            info.finished_at = text(o, "finished_at");
            info.uuid = text(o, "uuid");
            std::vector<std::string> tags;
            for (const auto& t : o.value("tags").toArray()) tags.push_back(t.toString().toStdString());
            if (info.id <= 0) continue;
            seen.insert(info.id);
            Cursor& cur = cursors_[info.id];
            // Another run under this id: another server reached at the same address (every
            // `ssh -L 7878` tunnel is 127.0.0.1:7878), a store replaced, or a deleted run's id
            // taken again. The replica's rows and marks are another run's: start it over.
            if (!cur.uuid.empty() && !info.uuid.empty() && cur.uuid != info.uuid) {
                // Not while pages of the old run are still being written: they would land after
                // the clear, among the new run's rows. The next run list takes it then.
                if (cur.writesPending > 0) continue;
                replica_->clear_run_records(info.id);
                const bool claimed = cur.claimed;
                const int writesPending = cur.writesPending;
                cur = Cursor{};
                cur.claimed = claimed; // the replica's lock on it is still this mirror's
                cur.writesPending = writesPending;
                changed = true;
            }
            cur.uuid = info.uuid;
            const bool isRunning = info.status == RunStatus::Running;
            if (cur.running != isRunning) { // started again (resume): look again
                cur.complete = false;
                cur.gaveUp = false;
                cur.resyncs = 0;
            }
            cur.running = isRunning;
            // The replica's record of a live remote run stays "running" while this mirror holds
            // its lock; when the mirror stops, the run reads as interrupted until it reconnects.
            if (isRunning && !cur.claimed) {
                replica_->put_mirrored_run(info, tags);
                replica_->claim_run(info.id);
                cur.claimed = true;
            } else if (!isRunning && cur.claimed) {
                replica_->finish_run(info.id, info.status);
                cur.claimed = false;
            }
            // last_step moves with every step of a live run: that alone is not a change of
            // the record (the rows carry it), so a live run does not rewrite it every poll.
            QJsonObject stable = o;
            stable.remove("last_step");
            const QByteArray stableRecord = QJsonDocument(stable).toJson(QJsonDocument::Compact);
            if (stableRecord != cur.stableRecord) {
                replica_->put_mirrored_run(info, tags);
                cur.stableRecord = stableRecord;
                changed = true;
            }
            if (!cur.complete && !cur.gaveUp) queue_.push_back(info.id);
        }
        for (auto it = cursors_.begin(); it != cursors_.end();) {
            if (seen.count(it->first)) {
                ++it;
                continue;
            }
            // Deleted on the server. Not while a page of it is still being written: that write
            // would fail its foreign key and stop the mirror. The next run list takes it then.
            if (it->second.writesPending > 0) {
                ++it;
                continue;
            }
            replica_->delete_run(it->first);
            it = cursors_.erase(it);
            changed = true;
        }
    } catch (const StoreError& e) {
        halt(tr("the replica %1 cannot be written: %2").arg(replicaPath_, e.what()));
        return;
    }
    if (changed) emit runsChanged();
    requestNextRows();
}

void RemoteMirror::requestNextRows()
{
    nextPageHeld_ = false;
    if (!replica_) return; // stopped, e.g. by a listener of rowsArrived
    if (queue_.empty()) {
        caughtUp_ = true;
        caughtUpAtMs_ = clock_.elapsed();
        emit statsChanged();
        // Nothing running: the run list is looked at again now and then; a live run's
        // long poll paces the loop by itself, and between run lists (a new run, a changed
        // name or tag) its rows are polled on.
        bool anyRunning = false;
        for (const auto& [id, c] : cursors_) anyRunning = anyRunning || c.running;
        if (anyRunning && runsListedAtMs_ >= 0 && clock_.elapsed() - runsListedAtMs_ < kRunListEveryMs) {
            for (const auto& [id, c] : cursors_)
                if (c.running && !c.complete && !c.gaveUp) queue_.push_back(id);
            if (!queue_.empty()) return requestNextRows();
        }
        retry_->start(anyRunning ? 0 : kLongPollMs);
        return;
    }
    const qint64 runId = queue_.front();
    queue_.pop_front();
    const Cursor& cur = cursors_[runId];
    const int waitMs = cur.running ? kLongPollMs : 0;
    QNetworkReply* reply =
        get(QString("/v1/runs/%1/rows?from_step=%2&after_event=%3&from_layer_step=%4&limit=%5&wait_ms=%6%7")
                .arg(runId)
                .arg(cur.fromStep)
                .arg(cur.afterEvent)
                .arg(cur.fromLayerStep)
                .arg(kRowsPerPage)
                .arg(waitMs)
                .arg(columnar_ ? "&encoding=columnar" : ""),
            waitMs);
    connect(reply, &QNetworkReply::finished, this, [this, reply, runId] { onRows(reply, runId); });
}

void RemoteMirror::onRows(QNetworkReply* reply, qint64 runId)
{
    QByteArray body;
    if (reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt() == 404 && replica_) {
        // The run was deleted on the server since it was listed: not a lost connection. The
        // run list, read again shortly, takes it out of the replica.
        inFlight_ = nullptr;
        reply->deleteLater();
        countBytes(reply->readAll().size());
        queue_.erase(std::remove(queue_.begin(), queue_.end(), runId), queue_.end());
        retry_->start(250); // not at once: a list that still holds the run would loop
        return;
    }
    if (!take(reply, body) || !replica_) return;
    QJsonParseError parseError;
    const QJsonObject page = QJsonDocument::fromJson(body, &parseError).object();
    Cursor& cur = cursors_[runId];
    std::vector<ScalarRow> scalars;
    try {
        // A page that is not whole would move the marks back to 0, or write half of it.
        if (parseError.error != QJsonParseError::NoError)
            throw ColumnError("not JSON (" + parseError.errorString().toStdString() + " at byte " +
                              std::to_string(parseError.offset) + ")");
        if (!page.value("next_from_step").isDouble() || !page.value("next_after_event").isDouble())
            throw ColumnError("no 'next_from_step' or 'next_after_event'");
        if (page.contains("scalar_columns")) {
            scalars = decode_columns(page.value("scalar_columns"));
        } else {
            for (const auto& v : page.value("scalars").toArray()) {
                const QJsonArray a = v.toArray();
                scalars.push_back({integer(a.at(0)), a.at(1).toString().toStdString(), decode_value(a.at(2))});
            }
        }
    } catch (const ColumnError& e) {
        retryLater(tr("run %1: a malformed page: %2").arg(runId).arg(QString::fromStdString(e.what())));
        return;
    }
    std::vector<std::pair<int64_t, TensorStats>> layerStats;
    for (const auto& v : page.value("layer_stats").toArray()) {
        const QJsonArray a = v.toArray();
        if (a.size() != 18) continue;
        TensorStats t;
        t.layer = a.at(1).toString().toStdString();
        t.role = a.at(2).toString().toStdString();
        t.format = a.at(3).toString().toStdString();
        t.count = integer(a.at(4));
        t.zeros = integer(a.at(5));
        t.infs = integer(a.at(6));
        t.nans = integer(a.at(7));
        t.underflow = decode_value(a.at(8));
        t.subnormal = decode_value(a.at(9));
        t.overflow = decode_value(a.at(10));
        t.amax = decode_value(a.at(11));
        t.scale = decode_value(a.at(12));
        t.quant_mse = decode_value(a.at(13));
        t.quant_snr_db = decode_value(a.at(14));
        t.update_ratio = decode_value(a.at(15));
        t.first_exponent = static_cast<int>(integer(a.at(16)));
        const QJsonArray counts = a.at(17).toArray();
        t.exponent_counts.reserve(size_t(counts.size()));
        for (const auto& c : counts) t.exponent_counts.push_back(integer(c));
        layerStats.emplace_back(integer(a.at(0)), std::move(t));
    }
    std::vector<StoredEventRow> events;
    qint64 rewindTo = -1;
    for (const auto& v : page.value("events").toArray()) {
        const QJsonObject o = v.toObject();
        events.push_back({integer(o.value("id")), integer(o.value("step")), text(o, "kind"), text(o, "message"),
                          text(o, "created_at"), text(o, "fields")});
        // A resume rewrote the steps after its checkpoint: read them again from there (rows
        // come back by key, so reading them again is harmless where an older source kept them).
        if (events.back().kind == event_kind_name(EventKind::ResumedFromCheckpoint))
            rewindTo = rewindTo < 0 ? events.back().step : std::min<qint64>(rewindTo, events.back().step);
    }
    const qint64 pageFrom = cur.fromStep;
    cur.fromStep = integer(page.value("next_from_step"));
    cur.afterEvent = integer(page.value("next_after_event"));
    // A server before layer statistics were mirrored leaves the mark where it is.
    if (page.contains("next_from_layer_step")) cur.fromLayerStep = integer(page.value("next_from_layer_step"));
    if (rewindTo >= 0 && rewindTo < cur.fromStep) cur.fromStep = rewindTo;
    if (rewindTo >= 0 && rewindTo < cur.fromLayerStep) cur.fromLayerStep = rewindTo;
    if (rewindTo >= 0) {
        // The rows after the rewound marks come again from them. Written now, this page's (from
        // the old marks on) would leave a gap below them that a mirror stopped before the next
        // page never fills: a new start takes its marks from the highest step the replica
        // holds. (Past the marks only: a mirror that was behind the checkpoint rewinds nothing.)
        const qint64 fromStep = cur.fromStep, fromLayerStep = cur.fromLayerStep;
        std::erase_if(scalars, [fromStep](const ScalarRow& r) { return r.step > fromStep; });
        std::erase_if(layerStats, [fromLayerStep](const auto& row) { return row.first > fromLayerStep; });
    }
    const bool more = page.value("more").toBool();
    const bool hasRows = !scalars.empty() || !events.empty() || !layerStats.empty();
    const bool ended = !running(page.value("status").toString());
    if (ended && cur.running) runsListedAtMs_ = -1; // the list says so, and what comes next (a sweep's next run)
    if (!scalars.empty() && rewindTo < 0) {
        // A follower may show these before the replica holds them (RunFollower::offerScalars).
        ScalarPage fetched;
        int64_t newest = scalars.front().step;
        for (const auto& r : scalars) newest = std::max(newest, r.step);
        const qint64 next = integer(page.value("next_from_step"));
        // Every step is whole when the server cut the page at a step, or the run has ended.
        fetched.cut = next > newest || (ended && !more);
        fetched.next = fetched.cut ? std::max<int64_t>(next, newest + 1) : next; // uncut: next is the newest step
        fetched.rows = std::move(scalars); // lent to the listeners, then written
        emit scalarsFetched(runId, pageFrom, fetched);
        scalars = std::move(fetched.rows);
        if (!replica_) return; // a listener stopped the mirror
    }
    const QJsonValue counts = page.value("counts");
    const int generation = generation_;
    ++cur.writesPending;
    writer_.write(*replica_, {runId, std::move(scalars), std::move(events), std::move(layerStats)}, size_t(body.size()),
                  [this, generation, runId, hasRows, more, ended, counts](const std::string& error) {
                      if (generation != generation_ || !replica_) return; // stopped meanwhile
                      if (const auto it = cursors_.find(runId); it != cursors_.end() && it->second.writesPending > 0)
                          --it->second.writesPending;
                      if (!error.empty()) {
                          dropInFlight();
                          // Not from inside the writer's own callback: halt() stops the writer.
                          const QString why = tr("the replica %1 cannot be written: %2")
                                                  .arg(replicaPath_, QString::fromStdString(error));
                          QTimer::singleShot(0, this, [this, why] { halt(why); });
                          return;
                      }
                      if (hasRows) emit rowsArrived(runId);
                      if (generation != generation_ || !replica_) return; // a listener stopped it
                      if (more) { // the next page is on its way already, unless the writer was behind
                          if (nextPageHeld_ && !inFlight_ && writer_.pendingBytes() < bytesAhead_) requestNextRows();
                          return;
                      }
                      if (ended && counts.isObject()) checkCounts(runId, counts.toObject());
                      if (generation != generation_ || !replica_) return; // the check halted it
                      if (!inFlight_) requestNextRows();
                  });
    if (more) {
        // The next page is asked for before this one is written: the server reads it while
        // the replica writes (Qt's HTTP has its own thread, the writes too). The marks move
        // on now; if a write fails, the mirror stops, and a new start takes its marks from
        // what the replica holds.
        queue_.push_front(runId);
        if (writer_.pendingBytes() < bytesAhead_) {
            requestNextRows();
        } else {
            nextPageHeld_ = true; // asked for when the writes are done
            ++pagesHeld_;
        }
    }
}

void RemoteMirror::checkCounts(qint64 runId, const QJsonObject& counts)
{
    // Every earlier page of the run is written (the writer keeps their order).
    Cursor& cur = cursors_[runId];
    try {
        const RunRowCounts mine = replica_->row_counts(runId);
        const bool layersMatch =
            !counts.contains("layer_stats") || mine.layer_stats == integer(counts.value("layer_stats"));
        if (mine.scalars == integer(counts.value("scalars")) && mine.events == integer(counts.value("events")) &&
            layersMatch) {
            cur.complete = true;
        } else if (++cur.resyncs <= kMaxResyncs) {
            // The source was rewritten under the replica (a run started over): copy it again.
            replica_->clear_run_records(runId);
            cur.fromStep = 0;
            cur.afterEvent = 0;
            cur.fromLayerStep = 0;
            queue_.push_front(runId);
        } else {
            // Given up: not fetched again every second for good, and said once. Not complete:
            // a new start of the mirror (or a change of the run) tries again.
            cur.gaveUp = true;
            emit replicaDiffers(runId, tr("run %1: the replica still differs from the server after %2 copies "
                                          "(%3 scalars, %4 events here; %5, %6 there)")
                                           .arg(runId)
                                           .arg(kMaxResyncs)
                                           .arg(mine.scalars)
                                           .arg(mine.events)
                                           .arg(integer(counts.value("scalars")))
                                           .arg(integer(counts.value("events"))));
        }
    } catch (const StoreError& e) {
        halt(tr("the replica %1 cannot be written: %2").arg(replicaPath_, e.what()));
    }
}

} // namespace mantissa
