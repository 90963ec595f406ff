// SPDX-License-Identifier: GPL-3.0-or-later
// The remote run store (docs/REMOTE.md): a real mantissa-train serving on 127.0.0.1 and the
// real client mirroring it; kill and reconnect; the token, limits and refusals; steering;
// a fuzz of the request parser. Only 127.0.0.1 is ever contacted.

#include <QtTest>

#include <QFile>
#include <QLabel>
#include <QMenu>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QDialogButtonBox>
#include <QSettings>
#include <QSslSocket>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QTcpSocket>
#include <QTemporaryDir>

#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cfloat>
#include <fstream>
#include <map>
#include <thread>

#include "controller/run_follower.h"
#include "pages/monitor_page.h"
#include "pages/runs_page.h"
#include "window/monitor_feed.h"
#include "models/project_document.h"
#include "models/run_list_model.h"
#include "controller/store_connection.h"
#include "remote/connect_dialog.h"
#include "remote/remote_connector.h"
#include "remote/remote_mirror.h"
#include "window/main_window.h"
#include "window/run_status_widget.h"
#include "cli_process.h"
#include "monitor_checks.h"
#include "remote_control_gate.h"
#include "remote_fixtures.h"
#include "remote_token.h"
#include "run_event.h"
#include "run_store.h"
#include "scalar_columns.h"
#include "store_pool.h"
#include "store_server.h"

using namespace mantissa;

namespace {

const char* kTinyProject = R"({
  "name": "tiny",
  "model": {"n_layer": 1, "n_head": 2, "n_embd": 16, "context_length": 16},
  "data": {"kind": "synthetic-addition", "digits": 2, "examples": 600},
  "training": {"steps": 20, "batch_size": 4, "seed": 7, "threads": 1},
  "eval": {"interval": 10, "batches": 2},
  "telemetry": {"log_interval": 1}
})";

const std::string kToken = "0123456789abcdef0123456789abcdef";

// A small finished run, written directly: what the in-process server serves.
void write_store(const std::string& path)
{
    RunStore store(path);
    const auto id = store.create_run("seeded", "p.json", R"({"training": {"steps": 3}})");
    for (int64_t step = 1; step <= 3; ++step) {
        store.append_scalar(id, step, "train/loss", 2.0 / static_cast<double>(step));
        store.append_scalar(id, step, "lr", 1e-3);
    }
    store.append_scalar(id, 3, "val/loss", std::nan(""));
    store.finish_run(id, RunStatus::Finished);
}

// A telemetry frame as StoreSink writes it: the tensors' statistics, then
// memory/resident_bytes, which says that the frame is whole.
void write_frame(RunStore& store, int64_t id, int64_t step, bool whole = true)
{
    for (const char* layer : {"blocks.0.attn.qkv", "lm_head"})
        for (const char* role : {"input", "weight"}) {
            TensorStats t;
            t.layer = layer;
            t.role = role;
            t.format = "e5m2";
            t.first_exponent = -10 + int(step % 5);
            t.exponent_counts = {1, step, 3 * step, 7};
            t.count = 8 + 4 * step;
            t.nans = step % 2;
            t.underflow = std::nan(""); // travels as "nan", stored as NULL on both sides
            t.quant_snr_db = INFINITY;
            t.amax = 0.1 * double(step);
            store.append_layer_stats(id, step, t);
        }
    if (whole) store.append_scalar(id, step, "memory/resident_bytes", 4096.0);
}

unsigned file_mode(const std::string& path)
{
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<unsigned>(st.st_mode & 07777) : 0u;
}

httplib::Headers auth(const std::string& token = kToken) { return {{"Authorization", "Bearer " + token}}; }

QJsonObject json_of(const std::string& body) { return QJsonDocument::fromJson(QByteArray::fromStdString(body)).object(); }

uint64_t bits_of(double v) { return std::bit_cast<uint64_t>(v); }

// The values the columnar encoding must carry bit for bit (a NaN becomes the store's NULL).
const std::vector<double> kSpecialValues = {
    std::nan(""), INFINITY, -INFINITY, std::numeric_limits<double>::denorm_min(), -2.2250738585072009e-308 /* subnormal */,
    DBL_MAX,      -DBL_MAX, DBL_MIN,   -0.0,                                      0.1,
    double(0.1f), 1.0 / 3.0};

// Run 1, finished: train/loss on 25,000 steps with gaps (every 7th step missing) and the
// special values on every step 100k + 1; lr every 3rd step; val/loss on a few steps written
// out of order; more than one page per tag (10,000 steps) and tags on different steps in one page.
void write_columnar_store(const std::string& path)
{
    RunStore store(path);
    const auto id = store.create_run("columns", "p.json", "{}");
    for (int64_t step = 1; step <= 25000; ++step) {
        if (step % 7 == 0) continue;
        const double v = step % 100 == 1 ? kSpecialValues[size_t(step / 100) % kSpecialValues.size()]
                                         : 4.0 * std::exp(-double(step) / 9000.0) + 1e-9 * double(step % 13);
        store.append_scalar(id, step, "train/loss", v);
        if (step % 3 == 0) store.append_scalar(id, step, "lr", 1e-3 * double(step % 11));
    }
    for (int64_t step : {24990, 5, 1000000, 12000, 77})
        store.append_scalar(id, step, "val/loss", step == 77 ? std::nan("") : -double(step));
    store.finish_run(id, RunStatus::Finished);
}

// Every scalar row of run `id`, by tag then step, NULL read as NaN.
std::vector<ScalarRow> all_scalars(const QString& path, int64_t id)
{
    return RunStore::open_read_only(path.toStdString())->scalars_page(id, 0, INT64_MAX / 4).rows;
}


// A run list and a rows page as a server of this protocol sends them, for a fake server.
std::string fake_runs_json()
{
    return R"({"protocol": 1, "control": false, "row_encodings": ["json", "columnar"], "runs": [{"id": 1,
        "name": "fake", "project_path": "p.json", "config_json": "{}", "status": "finished",
        "created_at": "2026-12-01T00:00:00Z", "finished_at": "2026-12-01T00:01:00Z", "last_step": 3,
        "uuid": "00000000000000000000000000000001", "tags": []}]})";
}
std::string fake_page_json(const std::string& columns)
{
    return R"({"run": 1, "status": "finished", "scalar_columns": )" + columns +
           R"(, "events": [{"id": 1, "step": 1, "kind": "note", "message": "m", "created_at": "2026-12-01T00:00:00Z",
           "fields": "{}"}], "next_from_step": 3, "next_after_event": 1, "next_from_layer_step": 0, "more": false,
           "counts": {"scalars": 4, "events": 1, "layer_stats": 0}})";
}
std::string column_json(const EncodedScalarColumn& e)
{
    return R"({"tag": ")" + e.tag + R"(", "first_step": )" + std::to_string(e.first_step) + R"(, "count": )" +
           std::to_string(e.count) + R"(, "step_deltas": ")" + e.step_deltas + R"(", "values": ")" + e.values + R"("})";
}

} // namespace

class TestRemote : public QObject {
    Q_OBJECT
private:
    QTemporaryDir dir_;
    QString project_;

    QString path(const QString& name) const { return dir_.filePath(name); }

    // A self-signed certificate and its key in the test folder, as a lab server would make
    // them; false where there is no openssl command.
    bool make_certificate(const QString& key, const QString& cert, const QString& common_name)
    {
        QProcess openssl;
        openssl.start("openssl", {"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", path(key), "-out", path(cert),
                                  "-days", "1", "-subj", "/CN=" + common_name});
        return openssl.waitForFinished(60000) && openssl.exitCode() == 0;
    }

    ServerOptions in_process(const std::string& db)
    {
        ServerOptions o;
        o.store_path = db;
        o.token = kToken;
        o.requests_per_s = 1e6;
        o.request_burst = 1e6;
        return o;
    }

    // Waits until the mirror holds every run of the server with its rows, all ended.
    static bool wait_complete(RemoteMirror& mirror, const QString& db, int timeout_ms = 60000)
    {
        return QTest::qWaitFor(
            [&] {
                if (!mirror.caughtUp()) return false;
                const auto store = RunStore::open_read_only(db.toStdString());
                for (const auto& r : store->list_runs())
                    if (r.status == RunStatus::Running) return false;
                return compare_stores(db, mirror.replicaPath()).isEmpty();
            },
            timeout_ms);
    }

private slots:
    void initTestCase()
    {
        project_ = path("tiny.json");
        QFile f(project_);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(kTinyProject);
    }

    void tokenFileIsPrivateAndReused()
    {
        const std::string file = path("t.token").toStdString();
        const std::string token = load_or_create_token(file);
        QCOMPARE(token.size(), size_t(32));
        QCOMPARE(file_mode(file), 0600u);
        QCOMPARE(load_or_create_token(file), token); // a restarted server keeps its clients' token
        QVERIFY(random_token_hex() != random_token_hex());
        QVERIFY(tokens_equal(token, token));
        QVERIFY(!tokens_equal(token, token.substr(0, 31) + (token[31] == '0' ? "1" : "0")));
        QVERIFY(!tokens_equal(token, token.substr(0, 31)));
        QFile::setPermissions(QString::fromStdString(file), QFile::ReadOwner | QFile::WriteOwner | QFile::ReadOther);
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, load_or_create_token(file));
        // A private file that holds no token (a key named by mistake) is refused and left alone.
        const std::string key = path("id_key").toStdString();
        std::ofstream(key) << "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n";
        ::chmod(key.c_str(), 0600);
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, load_or_create_token(key));
        std::ifstream kept(key);
        std::string first;
        std::getline(kept, first);
        QCOMPARE(first, std::string("-----BEGIN OPENSSH PRIVATE KEY-----"));
        // A token saved with a Windows line end is still the token; a link is refused.
        const std::string crlf = path("crlf.token").toStdString();
        std::ofstream(crlf) << token << "\r\n";
        ::chmod(crlf.c_str(), 0600);
        QCOMPARE(load_or_create_token(crlf), token);
        // Written in upper case by hand: the same token, not "holds no token".
        const std::string upper = path("upper.token").toStdString();
        std::ofstream(upper) << QString::fromStdString(token).toUpper().toStdString() << "\n";
        ::chmod(upper.c_str(), 0600);
        QCOMPARE(load_or_create_token(upper), token);
        // ... and a client that sends it as the file says it (curl) is let in.
        QVERIFY(tokens_equal(QString::fromStdString(token).toUpper().toStdString(), token));
        const std::string link = path("link.token").toStdString();
        QVERIFY(::symlink(crlf.c_str(), link.c_str()) == 0);
        QVERIFY_THROWS_EXCEPTION(std::runtime_error, load_or_create_token(link));
    }

    void listenAddresses()
    {
        QCOMPARE(parse_listen_address("0"), std::make_pair(std::string("127.0.0.1"), 0));
        QCOMPARE(parse_listen_address("10.0.0.2:8080"), std::make_pair(std::string("10.0.0.2"), 8080));
        QCOMPARE(parse_listen_address("[::1]:7"), std::make_pair(std::string("::1"), 7));
        for (const char* bad : {"", "x", "1:", ":80", "65536", "80a", "-1"})
            QVERIFY_THROWS_EXCEPTION(RemoteError, parse_listen_address(bad));
        try {
            (void)parse_listen_address("http://127.0.0.1:0");
            QFAIL("a URL was taken for an address");
        } catch (const RemoteError& e) {
            QVERIFY2(std::string(e.what()).find("is a URL; give [ADDR:]PORT, such as '127.0.0.1:0'") !=
                         std::string::npos,
                     e.what());
        }
        QVERIFY(is_loopback_host("127.0.0.1"));
        QVERIFY(!is_loopback_host("0.0.0.0"));
    }

    // A wrong or missing token is a 401 with a message; garbage is a 400; bad parameters too.
    void refusals()
    {
        const std::string db = path("refusals.sqlite").toStdString();
        write_store(db);
        StoreServer server(in_process(db));
        httplib::Client client("127.0.0.1", server.port());

        auto r = client.Get("/v1/runs");
        QVERIFY(r);
        QCOMPARE(r->status, 401);
        QVERIFY(json_of(r->body)["error"].toString().startsWith("a token is required"));
        r = client.Get("/v1/runs", auth("ffffffffffffffffffffffffffffffff"));
        QCOMPARE(r->status, 401);
        QCOMPARE(json_of(r->body)["error"].toString(), QString("wrong token"));

        // The scheme's name in any case (RFC 7235), as curl users write it.
        r = client.Get("/v1/runs", {{"Authorization", "bearer " + kToken}});
        QCOMPARE(r->status, 200);
        r = client.Get("/v1/runs", auth());
        QCOMPARE(r->status, 200);
        const auto runs = json_of(r->body)["runs"].toArray();
        QVERIFY(!json_of(r->body).contains("training_run")); // `serve`: no run trains here
        QCOMPARE(runs.size(), 1);
        QCOMPARE(runs[0].toObject()["name"].toString(), QString("seeded"));
        QCOMPARE(runs[0].toObject()["status"].toString(), QString("finished"));

        r = client.Get("/v1/runs/1/rows?limit=abc", auth());
        QCOMPARE(r->status, 400);
        QCOMPARE(json_of(r->body)["error"].toString(), QString("parameter 'limit' must be an integer from 2 to 10000"));
        r = client.Get("/v1/runs/1/rows?file=/etc/passwd", auth());
        QCOMPARE(r->status, 400);
        QCOMPARE(json_of(r->body)["error"].toString(), QString("unknown parameter 'file'"));
        r = client.Get("/v1/runs/99/rows", auth());
        QCOMPARE(r->status, 404);
        r = client.Get("/v1/runs/../../etc/passwd", auth());
        QVERIFY(r->status == 400 || r->status == 404);
        r = client.Post("/v1/runs/1/control", auth(), std::string(64 * 1024, 'x'), "application/json");
        QCOMPARE(r->status, 413);
        QVERIFY(json_of(r->body).contains("error"));

        // The rows, NaN included, as JSON.
        r = client.Get("/v1/runs/1/rows", auth());
        QCOMPARE(r->status, 200);
        const auto page = json_of(r->body);
        QCOMPARE(page["scalars"].toArray().size(), 7);
        QCOMPARE(page["more"].toBool(), false);
        QCOMPARE(page["counts"].toObject()["scalars"].toInt(), 7);
        QCOMPARE(page["next_from_step"].toInt(), 3);

        // Not HTTP at all.
        QTcpSocket raw;
        raw.connectToHost("127.0.0.1", static_cast<quint16>(server.port()));
        QVERIFY(raw.waitForConnected(5000));
        raw.write("\x01\x02 garbage \xff\r\n\r\n");
        QVERIFY(raw.waitForReadyRead(5000));
        const QByteArray answer = raw.readAll();
        QVERIFY2(answer.startsWith("HTTP/1.1 400"), answer.constData());
    }

    // What a token holder sends is bounded before it is read, and a mistake is named (read-only
    // audit 'remote-scale'): a chunked body was read whole into the training process, a 413
    // said only "bad request", and a layer key on a pause was dropped without a word.
    void bodiesAreBoundedAndCommandsCheckedWhole()
    {
        const std::string db = path("bodies.sqlite").toStdString();
        write_store(db);
        ServerOptions o = in_process(db);
        o.allow_control = true;
        StoreServer server(o);
        httplib::Client client("127.0.0.1", server.port());
        // The answer comes before the body is read: the chunks that follow would never end.
        QTcpSocket raw;
        raw.connectToHost("127.0.0.1", static_cast<quint16>(server.port()));
        QVERIFY(raw.waitForConnected(5000));
        raw.write(QByteArray("POST /v1/runs/1/control HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ") +
                  QByteArray::fromStdString(kToken) +
                  "\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4000\r\n" +
                  QByteArray(0x4000, ' ') + "\r\n");
        QByteArray answer;
        while (!answer.contains("}") && raw.waitForReadyRead(5000)) answer += raw.readAll();
        QVERIFY2(answer.startsWith("HTTP/1.1 411"), answer.constData());
        QVERIFY2(answer.endsWith("{\"error\":\"send the body with a Content-Length (at most 16384 bytes): chunked "
                                 "bodies are refused\"}"),
                 answer.constData());
        auto r = client.Post("/v1/runs/1/control", auth(), std::string(20000, ' '), "application/json");
        QCOMPARE(r->status, 413);
        QCOMPARE(json_of(r->body)["error"].toString(), QString("a request body holds at most 16384 bytes"));
        r = client.Post("/v1/runs/1/control", auth(), R"({"command": "pause", "pattern": "blocks.*"})",
                        "application/json");
        QCOMPARE(r->status, 400);
        QCOMPARE(json_of(r->body)["error"].toString(), QString("'pattern' goes with layer_formats only"));
        r = client.Post("/v1/runs/1/control", auth(), R"({"command": "pause"})", "application/json");
        QCOMPARE(r->status, 409); // well formed: no run trains in `serve`
    }

    // Events are cut by bytes as well as by count: a 48-layer run's loss-scale backoff is 11 KB,
    // and 10,000 of them made a 55 MB page (read-only audit 'remote-scale').
    void eventPagesAreBoundedInBytes()
    {
        const std::string db = path("long-events.sqlite").toStdString();
        {
            RunStore store(db);
            const auto id = store.create_run("backoffs", "p.json", "{}");
            for (int64_t step = 1; step <= 600; ++step) {
                RunEvent e;
                e.step = step;
                e.kind = EventKind::LossScaleBackoff;
                e.text = std::string(10000, 'x');
                store.append_event(id, e);
            }
            store.finish_run(id, RunStatus::Finished);
        }
        StoreServer server(in_process(db));
        httplib::Client client("127.0.0.1", server.port());
        int64_t after = 0, pages = 0, events = 0, largest = 0;
        for (bool more = true; more; ++pages) {
            const auto r = client.Get("/v1/runs/1/rows?limit=10000&after_event=" + std::to_string(after), auth());
            QCOMPARE(r->status, 200);
            const auto page = json_of(r->body);
            const auto ev = page["events"].toArray();
            events += ev.size();
            largest = std::max<int64_t>(largest, ev.size());
            QCOMPARE(page["next_after_event"].toInteger(), ev.isEmpty() ? after : ev.last()["id"].toInteger());
            after = page["next_after_event"].toInteger();
            more = page["more"].toBool();
            QCOMPARE(page.contains("counts"), !more);
            QVERIFY(pages < 10);
        }
        QCOMPARE(events, int64_t(600));
        QCOMPARE(pages, int64_t(2));
        QVERIFY2(largest > 300 && largest < 450, qPrintable(QString::number(largest))); // about 4 MiB of them
    }

    void pagesCutAtWholeSteps()
    {
        const std::string db = path("pages.sqlite").toStdString();
        write_store(db);
        StoreServer server(in_process(db));
        httplib::Client client("127.0.0.1", server.port());
        // limit 2 per tag: train/loss and lr have 3 rows, so the page ends before step 2's last.
        // A tag that fills its page may have more: the page ends before that tag's last step.
        auto r = client.Get("/v1/runs/1/rows?limit=2", auth());
        QCOMPARE(r->status, 200);
        auto page = json_of(r->body);
        QCOMPARE(page["more"].toBool(), true);
        QCOMPARE(page["next_from_step"].toInt(), 2);
        QCOMPARE(page["scalars"].toArray().size(), 2); // step 1 of train/loss and lr
        // Each page starts a step before the mark (a frame's scalars may come a step late).
        r = client.Get("/v1/runs/1/rows?limit=2&from_step=2", auth());
        page = json_of(r->body);
        QCOMPARE(page["more"].toBool(), true);
        QCOMPARE(page["next_from_step"].toInt(), 3);
        QCOMPARE(page["scalars"].toArray().size(), 4); // steps 1 (again) and 2 of both
        QVERIFY(!page.contains("counts"));
        r = client.Get("/v1/runs/1/rows?limit=2&from_step=3", auth());
        page = json_of(r->body);
        QCOMPARE(page["more"].toBool(), false);
        QCOMPARE(page["next_from_step"].toInt(), 3);
        // Step 2 again (lr, train/loss), then step 3: lr, train/loss, val/loss (NaN).
        QCOMPARE(page["scalars"].toArray().size(), 5);
        QCOMPARE(page["counts"].toObject()["scalars"].toInt(), 7);
        std::map<std::pair<int, QString>, QJsonValue> at;
        for (const auto& row : page["scalars"].toArray())
            at[{row.toArray()[0].toInt(), row.toArray()[1].toString()}] = row.toArray()[2];
        QCOMPARE(at.size(), size_t(5));
        const std::pair<int, QString> val{3, "val/loss"}, train{3, "train/loss"};
        QCOMPARE(at[val].toString(), QString("nan"));
        QCOMPARE(at[train].toDouble(), 2.0 / 3.0); // exact through JSON
    }

    // A CUDA run hands each telemetry frame to the store a step late: step 10's memory scalar
    // is committed after step 11's loss, which a client has already read past. The next page
    // (from 11) still brings it, and says nothing new has come (the long poll waits on).
    void aFrameWrittenAStepLateStillReachesTheClient()
    {
        const std::string db = path("late-frame.sqlite").toStdString();
        RunStore store(db);
        const auto id = store.create_run("late", "p.json", "{}");
        for (int64_t step = 1; step <= 11; ++step) store.append_scalar(id, step, "train/loss", 1.0 / double(step));
        store.flush();
        StoreServer server(in_process(db));
        httplib::Client client("127.0.0.1", server.port());
        auto r = client.Get("/v1/runs/1/rows?wait_ms=0", auth());
        auto page = json_of(r->body);
        QCOMPARE(page["next_from_step"].toInt(), 11);
        store.append_scalar(id, 10, "memory/resident_bytes", 4096.0); // step 10's frame, late
        store.flush();
        r = client.Get("/v1/runs/1/rows?from_step=11&wait_ms=0", auth());
        page = json_of(r->body);
        bool found = false;
        for (const auto& row : page["scalars"].toArray())
            found |= row.toArray()[0].toInt() == 10 && row.toArray()[1].toString() == "memory/resident_bytes" &&
                     row.toArray()[2].toDouble() == 4096.0;
        QVERIFY2(found, r->body.c_str());
        QCOMPARE(page["next_from_step"].toInt(), 11);
        store.finish_run(id, RunStatus::Finished);
    }

    // A live run committing rows every 50 ms for 3 s: its rows are polled on, and the run list
    // (every run's settings: megabytes on a big store) is read every 2 s, not after each page
    // (it was read about 60 times here). Its end is seen at once, and its rows are complete.
    void aLiveRunIsPolledWithoutReadingTheRunListEachTime()
    {
        const std::string db = path("live-list.sqlite").toStdString();
        RunStore store(db);
        const auto id = store.create_run("live", "p.json", "{}");
        store.append_scalar(id, 1, "train/loss", 1.0);
        store.flush();
        StoreServer server(in_process(db));
        RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(server.port())), QString::fromStdString(kToken),
                            path("live-list-replica.sqlite"));
        int pages = 0;
        connect(&mirror, &RemoteMirror::rowsArrived, [&] { ++pages; });
        mirror.start();
        QVERIFY(QTest::qWaitFor([&] { return pages > 0; }, 30000));
        for (int64_t step = 2; step <= 60; ++step) {
            store.append_scalar(id, step, "train/loss", 1.0 / double(step));
            store.flush();
            QTest::qWait(50);
        }
        QVERIFY2(pages >= 20, qPrintable(QString::number(pages))); // the pages came as the rows did
        QVERIFY2(mirror.runListsRequested() <= 4, qPrintable(QString::number(mirror.runListsRequested())));
        store.finish_run(id, RunStatus::Finished);
        QVERIFY(QTest::qWaitFor([&] { return mirror.runComplete(id); }, 10000));
        QCOMPARE(all_scalars(path("live-list-replica.sqlite"), id).size(), size_t(60));
    }

    // Layer statistics travel with the scalars when asked for (from_layer_step), cut at the
    // same whole step; the newest frame is sent again until it is whole, then once.
    void layerStatsPages()
    {
        const std::string db = path("layers.sqlite").toStdString();
        RunStore store(db);
        const auto id = store.create_run("layers", "p.json", "{}");
        for (int64_t step = 1; step <= 2100; ++step) {
            store.append_scalar(id, step, "train/loss", 1.0 / double(step));
            write_frame(store, id, step);
        }
        write_frame(store, id, 2101, /*whole=*/false); // half a frame: no memory/resident_bytes yet
        store.flush();
        StoreServer server(in_process(db));
        httplib::Client client("127.0.0.1", server.port());
        // A client of the first protocol (no from_layer_step) gets what it got before.
        auto r = client.Get("/v1/runs/1/rows?limit=5000", auth());
        QCOMPARE(r->status, 200);
        auto page = json_of(r->body);
        QVERIFY(!page.contains("layer_stats"));
        QVERIFY(!page.contains("next_from_layer_step"));
        QCOMPARE(page["more"].toBool(), false);
        // 4 tensors, at most 8000 rows: 2000 steps per tensor; the scalars (limit 5000) are cut
        // at the same step.
        r = client.Get("/v1/runs/1/rows?limit=5000&from_layer_step=0", auth());
        page = json_of(r->body);
        QCOMPARE(page["more"].toBool(), true);
        QCOMPARE(page["next_from_layer_step"].toInt(), 2000);
        QCOMPARE(page["next_from_step"].toInt(), 2000);
        QCOMPARE(page["layer_stats"].toArray().size(), 4 * 1999);
        const auto scalars = page["scalars"].toArray();
        QCOMPARE(scalars.last().toArray()[0].toInt(), 1999);
        const auto first = page["layer_stats"].toArray()[0].toArray();
        QCOMPARE(first.size(), 18);
        QCOMPARE(first[0].toInt(), 1);
        QCOMPARE(first[1].toString(), QString("blocks.0.attn.qkv"));
        QCOMPARE(first[2].toString(), QString("input"));
        QCOMPARE(first[8].toString(), QString("nan"));
        QCOMPARE(first[14].toString(), QString("inf"));
        QCOMPARE(first[16].toInt(), -9);
        QCOMPARE(first[17].toArray(), QJsonArray({1, 1, 3, 7}));
        // The rest: the half frame at 2101 comes, and is asked for again.
        r = client.Get("/v1/runs/1/rows?limit=5000&from_step=2000&from_layer_step=2000", auth());
        page = json_of(r->body);
        QCOMPARE(page["more"].toBool(), false);
        QCOMPARE(page["layer_stats"].toArray().size(), 4 * 102);
        QCOMPARE(page["next_from_layer_step"].toInt(), 2101);
        r = client.Get("/v1/runs/1/rows?limit=5000&from_step=2100&from_layer_step=2101&wait_ms=0", auth());
        page = json_of(r->body);
        QCOMPARE(page["layer_stats"].toArray().size(), 4);
        QCOMPARE(page["next_from_layer_step"].toInt(), 2101);
        store.append_scalar(id, 2101, "memory/resident_bytes", 4096.0); // now it is whole
        store.flush();
        r = client.Get("/v1/runs/1/rows?limit=5000&from_step=2100&from_layer_step=2101", auth());
        page = json_of(r->body);
        QCOMPARE(page["next_from_layer_step"].toInt(), 2102);
        r = client.Get("/v1/runs/1/rows?limit=5000&from_step=2101&from_layer_step=2102&wait_ms=0", auth());
        page = json_of(r->body);
        QCOMPARE(page["layer_stats"].toArray().size(), 0);
        store.finish_run(id, RunStatus::Finished);
        r = client.Get("/v1/runs/1/rows?limit=5000&from_step=2101&from_layer_step=2102", auth());
        page = json_of(r->body);
        QCOMPARE(page["counts"].toObject()["layer_stats"].toInt(), 4 * 2101);
        r = client.Get("/v1/runs/1/rows?from_layer_step=x", auth());
        QCOMPARE(r->status, 400);
        QCOMPARE(json_of(r->body)["error"].toString(),
                 QString("parameter 'from_layer_step' must be an integer from 0 to 4611686018427387903"));
    }

    // A deferred frame (CUDA: step S's frame reaches the store after step S+1's rows) that is
    // not whole yet when a page is cut at S+1 is sent again from S, not skipped: the layer
    // mark never passes a frame of a running run that is not whole.
    void aCutPageDoesNotSkipAFrameStillComing()
    {
        const std::string db = path("deferred.sqlite").toStdString();
        RunStore store(db);
        const auto id = store.create_run("deferred", "p.json", "{}");
        for (int64_t step = 1; step <= 251; ++step) {
            store.append_scalar(id, step, "train/loss", 1.0 / double(step));
            if (step < 250) write_frame(store, id, step);
        }
        write_frame(store, id, 250, /*whole=*/false);
        store.flush();
        StoreServer server(in_process(db));
        httplib::Client client("127.0.0.1", server.port());
        auto r = client.Get("/v1/runs/1/rows?from_step=242&from_layer_step=242&limit=10&wait_ms=0", auth());
        QCOMPARE(r->status, 200);
        auto page = json_of(r->body);
        QCOMPARE(page["more"].toBool(), true);
        QCOMPARE(page["next_from_step"].toInt(), 251);
        QCOMPARE(page["next_from_layer_step"].toInt(), 250); // frame 250 again, until whole
        QCOMPARE(page["layer_stats"].toArray().last().toArray()[0].toInt(), 250);
        // A frame not begun yet is waited for too: 251's, with the page cut at 252.
        store.append_scalar(id, 252, "train/loss", 1.0 / 252.0);
        store.append_scalar(id, 250, "memory/resident_bytes", 4096.0); // 250 is whole now
        store.flush();
        r = client.Get("/v1/runs/1/rows?from_step=251&from_layer_step=250&limit=2&wait_ms=0", auth());
        page = json_of(r->body);
        QCOMPARE(page["more"].toBool(), true);
        QCOMPARE(page["next_from_step"].toInt(), 252);
        QCOMPARE(page["next_from_layer_step"].toInt(), 251);
        // Once the run has ended every frame is as whole as it will be: the mark moves to the cut.
        store.finish_run(id, RunStatus::Finished);
        r = client.Get("/v1/runs/1/rows?from_step=242&from_layer_step=242&limit=10&wait_ms=0", auth());
        page = json_of(r->body);
        QCOMPARE(page["next_from_layer_step"].toInt(), page["next_from_step"].toInt());
    }

    void rateLimit()
    {
        const std::string db = path("rate.sqlite").toStdString();
        write_store(db);
        ServerOptions o = in_process(db);
        o.requests_per_s = 0.01;
        o.request_burst = 3;
        StoreServer server(o);
        httplib::Client client("127.0.0.1", server.port());
        // Requests without the token (or with a wrong one) spend a budget of their own: through
        // `ssh -L` every client is 127.0.0.1, and they must not lock the window out.
        for (int i = 0; i < 3; ++i) QCOMPARE(client.Get("/v1/runs", auth("0000"))->status, 401);
        QCOMPARE(client.Get("/v1/runs")->status, 429); // a guesser is slowed down
        for (int i = 0; i < 3; ++i) QCOMPARE(client.Get("/v1/runs", auth())->status, 200);
        const auto r = client.Get("/v1/runs", auth());
        QCOMPARE(r->status, 429);
        QVERIFY(json_of(r->body)["error"].toString().startsWith("too many requests"));
        // A command spends a budget of its own: the polls above have not used it up (this
        // server takes none: 403, not 429).
        const auto command = client.Post("/v1/runs/1/control", auth(), R"({"command": "stop"})", "application/json");
        QCOMPARE(command->status, 403);
    }

    void controlIsRefusedWithoutAllowControl()
    {
        const std::string db = path("control.sqlite").toStdString();
        write_store(db);
        StoreServer server(in_process(db));
        httplib::Client client("127.0.0.1", server.port());
        const auto r = client.Post("/v1/runs/1/control", auth(), R"({"command": "stop"})", "application/json");
        QCOMPARE(r->status, 403);
        QCOMPARE(json_of(r->body)["error"].toString(),
                 QString("this server does not take commands: start it with --allow-control to steer runs"));
        QCOMPARE(RunStore::open_read_only(db)->events(1).size(), size_t(0)); // nothing recorded
    }

    // Thousands of random and mutated requests: always an answer, always JSON, never a crash.
    void fuzzRequests()
    {
        const std::string db = path("fuzz.sqlite").toStdString();
        write_store(db);
        ServerOptions o = in_process(db);
        o.allow_control = true; // reaches the command parser; no run trains here (409)
        StoreServer server(o);
        httplib::Client client("127.0.0.1", server.port());
        QRandomGenerator rng(19);
        const std::vector<std::string> seeds = {"/v1/runs", "/v1/runs/1/rows", "/v1/runs/1/control",
                                                "/v1/runs/1/rows?from_step=2&after_event=0&limit=100&wait_ms=0"};
        const std::vector<std::string> bodies = {R"({"command": "pause"})",
                                                 R"({"command": "layer_formats", "pattern": "blocks.*", "forward": "e4m3"})",
                                                 "[]", "null", "{", R"({"command": 7})"};
        const auto mutate = [&](std::string s) {
            const int edits = 1 + static_cast<int>(rng.bounded(4));
            for (int e = 0; e < edits && !s.empty(); ++e) {
                const auto at = rng.bounded(static_cast<quint32>(s.size()));
                const char c = static_cast<char>(rng.bounded(32, 127));
                switch (rng.bounded(3)) {
                case 0: s[at] = c; break;
                case 1: s.insert(s.begin() + at, c); break;
                default: s.erase(at, 1);
                }
            }
            return s;
        };
        std::map<int, int> statuses;
        for (int i = 0; i < 3000; ++i) {
            std::string target = mutate(seeds[rng.bounded(static_cast<quint32>(seeds.size()))]);
            if (target.empty() || target[0] != '/') target = "/" + target;
            for (char& c : target)
                if (c == ' ' || c == '#') c = '_'; // httplib would refuse to send these
            std::string body = rng.bounded(2) ? mutate(bodies[rng.bounded(static_cast<quint32>(bodies.size()))])
                                              : bodies[rng.bounded(static_cast<quint32>(bodies.size()))];
            const auto headers = rng.bounded(10) == 0 ? httplib::Headers{} : auth();
            const auto r = rng.bounded(2) ? client.Get(target.c_str(), headers)
                                          : client.Post(target.c_str(), headers, body, "application/json");
            QVERIFY2(r, target.c_str());
            ++statuses[r->status];
            static const std::set<int> allowed = {200, 400, 401, 403, 404, 405, 409};
            QVERIFY2(allowed.count(r->status), (std::to_string(r->status) + " for " + target).c_str());
            const auto doc = QJsonDocument::fromJson(QByteArray::fromStdString(r->body));
            QVERIFY2(doc.isObject(), (target + " -> " + r->body).c_str());
            if (r->status != 200) QVERIFY2(doc.object()["error"].isString(), r->body.c_str());
        }
        QVERIFY(statuses[400] > 100); // the mutations reach the parser, not only the router
        QVERIFY(statuses[404] > 100);
        QVERIFY(statuses[401] > 100);
        QCOMPARE(client.Get("/v1/runs", auth())->status, 200);
    }

    // HTTPS with a certificate: the token is still required, and plain HTTP gets no answer.
    void tls()
    {
        if (!make_certificate("key.pem", "cert.pem", "127.0.0.1")) QSKIP("no openssl command to make a certificate");
        const std::string db = path("tls.sqlite").toStdString();
        write_store(db);
        ServerOptions o = in_process(db);
        o.tls_cert = path("cert.pem").toStdString();
        o.tls_key = path("key.pem").toStdString();
        StoreServer server(o);
        QVERIFY(server.url().starts_with("https://127.0.0.1:"));
        httplib::SSLClient tls_client("127.0.0.1", server.port());
        tls_client.enable_server_certificate_verification(false); // self-signed, made just now
        auto r = tls_client.Get("/v1/runs", auth());
        QVERIFY(r);
        QCOMPARE(r->status, 200);
        r = tls_client.Get("/v1/runs");
        QCOMPARE(r->status, 401);
        httplib::Client plain("127.0.0.1", server.port());
        plain.set_read_timeout(5);
        r = plain.Get("/v1/runs", auth());
        QVERIFY(!r || r->status == 400);
    }

    // A self-signed server (the usual lab set-up with --tls-cert): the system does not trust
    // it, so the window pins it by the SHA-256 fingerprint the server prints. Without the pin
    // the mirror stops (no retry meets another certificate) and names the fingerprint; with
    // the right pin it mirrors; with another certificate's it stops.
    void aSelfSignedServerIsTrustedByItsPinnedFingerprint()
    {
        if (!QSslSocket::supportsSsl()) QSKIP("this Qt has no TLS backend");
        if (!make_certificate("pin-key.pem", "pin-cert.pem", "lab-server")) QSKIP("no openssl command to make a certificate");
        QProcess openssl;
        openssl.start("openssl", {"x509", "-in", path("pin-cert.pem"), "-noout", "-fingerprint", "-sha256"});
        QVERIFY(openssl.waitForFinished(60000) && openssl.exitCode() == 0);
        const QString printed = QString::fromLatin1(openssl.readAllStandardOutput()).trimmed(); // "sha256 Fingerprint=AB:.."
        const QString fingerprint = printed.mid(printed.indexOf('=') + 1).toUpper();
        QCOMPARE(fingerprint.size(), 95); // 32 bytes, colon-separated
        const std::string db = path("pin.sqlite").toStdString();
        write_store(db);
        ServerOptions o = in_process(db);
        o.tls_cert = path("pin-cert.pem").toStdString();
        o.tls_key = path("pin-key.pem").toStdString();
        StoreServer server(o);
        QCOMPARE(QString::fromStdString(server.certificate_sha256()), fingerprint);
        const QUrl url(QString::fromStdString(server.url()));
        {
            RemoteMirror unpinned(url, QString::fromStdString(kToken), path("pin-none.sqlite"));
            unpinned.start();
            QVERIFY(QTest::qWaitFor([&] { return unpinned.state() == RemoteMirror::State::Refused; }, 30000));
            QVERIFY2(unpinned.stateText().contains("not trusted") && unpinned.stateText().contains(fingerprint),
                     qPrintable(unpinned.stateText()));
        }
        {
            RemoteMirror pinned(url, QString::fromStdString(kToken), path("pin-right.sqlite"));
            pinned.setPinnedCertificate(RemoteMirror::parseFingerprint(fingerprint.toLower().remove(':')));
            pinned.start();
            QVERIFY2(wait_complete(pinned, QString::fromStdString(db)),
                     qPrintable(compare_stores(QString::fromStdString(db), pinned.replicaPath()) + pinned.stateText()));
            QCOMPARE(pinned.state(), RemoteMirror::State::Connected);
        }
        {
            RemoteMirror other(url, QString::fromStdString(kToken), path("pin-wrong.sqlite"));
            other.setPinnedCertificate(QByteArray(32, '\x5a'));
            other.start();
            QVERIFY(QTest::qWaitFor([&] { return other.state() == RemoteMirror::State::Refused; }, 30000));
            QVERIFY2(other.stateText().contains(fingerprint), qPrintable(other.stateText()));
        }
        // mantissa-train serve prints it as it starts.
        QProcess serve;
        serve.start(MANTISSA_TRAIN_EXE, {"serve", "--db", QString::fromStdString(db), "--listen", "0", "--tls-cert",
                                         path("pin-cert.pem"), "--tls-key", path("pin-key.pem")});
        QString out;
        QVERIFY(QTest::qWaitFor([&] {
            serve.waitForReadyRead(100);
            out += QString::fromUtf8(serve.readAllStandardOutput());
            return out.contains("certificate:") || serve.state() == QProcess::NotRunning;
        }, 60000));
        serve.kill();
        serve.waitForFinished(10000);
        QVERIFY2(out.contains("certificate: SHA-256 " + fingerprint + "\n"), qPrintable(out));
    }

    // The Connect dialog's certificate field: a fingerprint (any case, colons or none) for an
    // https server, remembered for that server only.
    void connectDialogTakesACertificateFingerprint()
    {
        QSettings settings(path("pin.ini"), QSettings::IniFormat);
        const QString fingerprint = QString(64, 'a').replace(0, 2, "0F");
        {
            ConnectDialog dialog(settings);
            auto* ok = dialog.findChild<QDialogButtonBox*>()->button(QDialogButtonBox::Ok);
            dialog.urlEdit()->setText("https://lab:7878");
            dialog.tokenEdit()->setText(QString::fromStdString(kToken));
            QVERIFY(ok->isEnabled());
            QVERIFY(dialog.certificateSha256().isEmpty());
            dialog.certificateEdit()->setText("0f:aa");
            QVERIFY(!ok->isEnabled());
            QVERIFY2(dialog.error().contains("64 hex digits"), qPrintable(dialog.error()));
            dialog.certificateEdit()->setText(fingerprint);
            QVERIFY(ok->isEnabled());
            QCOMPARE(dialog.certificateSha256(), QByteArray::fromHex(fingerprint.toLatin1()));
            dialog.urlEdit()->setText("http://127.0.0.1:7878"); // another server: its own pin, none
            QVERIFY(dialog.certificateEdit()->text().isEmpty());
            dialog.certificateEdit()->setText(fingerprint);
            QVERIFY(!ok->isEnabled());
            QVERIFY2(dialog.error().contains("only for https"), qPrintable(dialog.error()));
            dialog.urlEdit()->setText("https://lab:7878");
            dialog.certificateEdit()->setText(fingerprint);
            dialog.remember();
        }
        ConnectDialog again(settings);
        QCOMPARE(again.url(), QUrl("https://lab:7878"));
        QCOMPARE(again.certificateEdit()->text(), RemoteMirror::fingerprintText(QByteArray::fromHex(fingerprint.toLatin1())));
        QVERIFY(again.certificateEdit()->text().startsWith("0F:AA:AA"));
    }

    // File > Connect: the Runs page shows the remote store's runs from the replica, the status
    // bar says so; Disconnect shows the local store again.
    void windowShowsARemoteStore()
    {
        const std::string db = path("window.sqlite").toStdString();
        write_store(db);
        StoreServer server(in_process(db));
        MainWindow window(path("local-absent.sqlite"));
        window.remoteConnector()->setReplicaDir(path("replicas"));
        QVERIFY(window.connectRemote(QUrl(QString::fromStdString(server.url())), QString::fromStdString(kToken)));
        QTRY_COMPARE_WITH_TIMEOUT(window.runsPage()->model()->rowCount(), 1, 30000);
        QCOMPARE(window.runsPage()->model()->run(0).name, std::string("seeded"));
        auto* label = window.findChild<QLabel*>("remoteStatus");
        QVERIFY(label);
        QTRY_VERIFY_WITH_TIMEOUT(label->text().startsWith(QString("connected to 127.0.0.1:%1").arg(server.port())), 30000);
        QVERIFY(label->text().contains("B/s"));
        QVERIFY(!label->isHidden());
        QVERIFY(window.storeConnection()->store());
        QVERIFY(window.storeConnection()->readOnly()); // edits would be overwritten by the mirror
        QTRY_VERIFY_WITH_TIMEOUT(compare_stores(QString::fromStdString(db), window.remoteConnector()->mirror()->replicaPath()).isEmpty(), 30000);
        // Nothing trains in the window: the Monitor shows the newest remote run, all of it.
        QTRY_COMPARE_WITH_TIMEOUT(window.monitorFeed()->followedRun(), int64_t(1), 30000);
        QTRY_COMPARE_WITH_TIMEOUT(window.monitorPage()->history().steps().size(), size_t(3), 30000);
        QCOMPARE(window.monitorPage()->history().steps().back().train_loss, 2.0 / 3.0);
        QCOMPARE(window.monitorPage()->history().evals().size(), size_t(1));
        // The status bar's run readout shows the followed run, as it shows one that trains here.
        QTRY_COMPARE_WITH_TIMEOUT(window.statusWidget()->etaText(), QString("done"), 30000);
        QCOMPARE(window.statusWidget()->step(), qint64(3));
        QCOMPARE(window.statusWidget()->findChild<QProgressBar*>("runProgress")->format(), QString("step 3 / 3"));
        QVERIFY(!window.sendRemoteCommand("pause")); // the seeded run has finished
        QCOMPARE(window.lastError(), QString("No remote run is training"));
        {
            // Resumed on the server (claimed again, a step more): the Monitor follows it again,
            // live (it stayed at "done", a read-only audit found).
            RunStore resumed(db);
            resumed.claim_run(1);
            resumed.append_scalar(1, 4, "train/loss", 0.25);
            resumed.append_scalar(1, 5, "train/loss", 0.125); // a live run's newest step may be partly written
            resumed.flush();
            QTRY_VERIFY_WITH_TIMEOUT(window.monitorPage()->history().steps().size() >= 4, 30000);
            QCOMPARE(window.monitorPage()->history().steps().at(3).train_loss, 0.25);
            QVERIFY(window.statusWidget()->etaText() != QString("done"));
            // Paused and stopped on the server: the readout says so, as for a run trained here
            // (it gave an ETA while paused, and "done" for a stopped run).
            RunEvent paused;
            paused.step = 5;
            paused.kind = EventKind::Paused;
            resumed.append_event(1, paused);
            resumed.append_scalar(1, 6, "train/loss", 0.0625);
            resumed.flush();
            QTRY_COMPARE_WITH_TIMEOUT(window.statusWidget()->etaText(), QString("paused"), 30000);
            resumed.finish_run(1, RunStatus::Stopped);
            QTRY_COMPARE_WITH_TIMEOUT(window.statusWidget()->etaText(), QString("stopped"), 30000);
        }
        // A sweep would train into the local store but tag and compare through the replica.
        window.setProject(ProjectConfig{}, QStringLiteral("in-memory"));
        QVERIFY(!window.startSweep(QStringLiteral("training.seed"), QStringLiteral("1,2")));
        QVERIFY2(window.lastError().startsWith(QString("Disconnect from the remote store before starting a sweep")),
                 qPrintable(window.lastError()));
        window.disconnectRemote();
        QTRY_COMPARE_WITH_TIMEOUT(window.runsPage()->model()->rowCount(), 0, 30000);
        QVERIFY(label->isHidden());
    }

    // The Monitor's layer menu on a server's run: the window sends layer_formats (with the
    // recipe) to the server, whose trainer switches the layer at a step boundary.
    void windowSwitchesARemoteRunsLayer()
    {
        const QString db = path("switched-remotely.sqlite");
        ServingProcess run;
        QVERIFY2(run.start({"run", project_, "--db", db, "--set", "training.steps=1000000", "--set",
                            "precision.fp8.scaling=current", "--serve", "127.0.0.1:0", "--allow-control"}),
                 qPrintable(run.output));
        MainWindow window(path("local-absent-switch.sqlite"));
        window.remoteConnector()->setReplicaDir(path("replicas-switch"));
        QVERIFY(window.connectRemote(QUrl(QString("http://127.0.0.1:%1").arg(run.port)), run.token));
        QTRY_COMPARE_WITH_TIMEOUT(window.monitorFeed()->followedRun(), int64_t(1), 30000);
        QTRY_VERIFY_WITH_TIMEOUT(window.remoteConnector()->runningRun() == 1, 30000);
        const auto pick = [&](const QString& choice) {
            for (QAction* a : window.monitorPage()->layerMenu(QStringLiteral("lm_head"))->actions())
                if (a->text().startsWith(choice)) a->trigger();
            QVERIFY2(window.lastError().isEmpty(), qPrintable(window.lastError()));
        };
        const auto switched = [&](NumberFormat forward, Fp8Scaling scaling) {
            const auto store = RunStore::open_read_only(db.toStdString());
            for (const auto& e : store->events(1))
                if (e.event.kind == EventKind::PrecisionChanged && e.event.pattern == "lm_head" &&
                    e.event.new_formats && e.event.new_formats->forward == forward &&
                    e.event.new_scaling == scaling)
                    return true;
            return false;
        };
        pick(QStringLiteral("NVFP4"));
        QTRY_VERIFY_WITH_TIMEOUT(switched(NumberFormat::E4M3, Fp8Scaling::NvFp4), 60000);
        // BF16 takes the recipe of the run's project (current scaling, as the server stored it)
        // back with it: nvfp4 must not stay hidden behind the 16-bit formats.
        pick(QStringLiteral("BF16"));
        QTRY_VERIFY_WITH_TIMEOUT(switched(NumberFormat::BF16, Fp8Scaling::Current), 60000);
        QVERIFY(window.sendRemoteCommand(QStringLiteral("stop")));
        QVERIFY(QTest::qWaitFor([&] { return run.process->state() == QProcess::NotRunning; }, 120000));
        QCOMPARE(run.process->exitCode(), 0);
    }

    // Runs ▸ Show in Monitor on a local store: the status bar's readout follows that run too.
    void showInMonitorDrivesTheStatusBar()
    {
        const QString db = path("shown.sqlite");
        write_store(db.toStdString());
        MainWindow window(db);
        QTRY_VERIFY_WITH_TIMEOUT(window.runsPage()->refresh() && window.runsPage()->model()->rowCount() == 1, 30000);
        QCOMPARE(window.statusWidget()->step(), qint64(0));
        window.runsPage()->selectRuns({1});
        QVERIFY(window.runsPage()->showSelectedInMonitor());
        QCOMPARE(window.monitorFeed()->followedRun(), int64_t(1));
        QTRY_COMPARE_WITH_TIMEOUT(window.statusWidget()->etaText(), QString("done"), 30000);
        QCOMPARE(window.statusWidget()->step(), qint64(3));
        auto* progress = window.statusWidget()->findChild<QProgressBar*>("runProgress");
        QCOMPARE(progress->format(), QString("step 3 / 3"));
        QCOMPARE(progress->value(), 3);
        QStringList labels;
        for (const QLabel* l : window.statusWidget()->findChildren<QLabel*>()) labels << l->text();
        QVERIFY2(labels.contains(QString("loss %1").arg(2.0 / 3.0, 0, 'f', 4)), qPrintable(labels.join(" | ")));
        // Opening or editing a project does not rewrite the followed run's total.
        ProjectConfig project;
        project.training.steps = 500;
        window.document()->setConfig(project);
        QString error;
        QVERIFY2(window.document()->setValue("training.steps", 700, &error), qPrintable(error));
        QCOMPARE(progress->format(), QString("step 3 / 3"));
        // Nor does File > Open Project (it read "step 0 / 1,500" beside the followed run's plots).
        window.setProject(project, QStringLiteral("in-memory"));
        QCOMPARE(progress->format(), QString("step 3 / 3"));
        QCOMPARE(window.statusWidget()->etaText(), QString("done"));
    }

    void connectDialogRemembersTokensPerHost()
    {
        QSettings settings(path("settings.ini"), QSettings::IniFormat);
        {
            ConnectDialog dialog(settings);
            auto* ok = dialog.findChild<QDialogButtonBox*>()->button(QDialogButtonBox::Ok);
            dialog.urlEdit()->setText("http://127.0.0.1:9001");
            dialog.tokenEdit()->setText("not a token");
            QVERIFY(!ok->isEnabled());
            QCOMPARE(dialog.error(), QString("The token is the 32 hex digits the server printed when it started."));
            dialog.tokenEdit()->setText(QString::fromStdString(kToken).toUpper()); // as typed off a screen
            QVERIFY(ok->isEnabled());
            QCOMPARE(dialog.token(), QString::fromStdString(kToken)); // as the server compares it
            dialog.remember();
            dialog.urlEdit()->setText("ftp://x");
            QVERIFY(!ok->isEnabled());
            // Port 80 is no Mantissa server's: it connected there, to whatever listened.
            dialog.urlEdit()->setText("http://127.0.0.1");
            QVERIFY(!ok->isEnabled());
            QCOMPARE(dialog.error(), QString("The server address needs the port the server printed: "
                                             "http(s)://HOST:PORT (7878 by default)."));
        }
        ConnectDialog again(settings);
        QCOMPARE(again.url(), QUrl("http://127.0.0.1:9001"));
        QCOMPARE(again.token(), QString::fromStdString(kToken));
        again.urlEdit()->setText("http://127.0.0.1:9002");
        again.tokenEdit()->clear();
        again.urlEdit()->setText("http://127.0.0.1:9001"); // back to the known host: its token again
        QCOMPARE(again.token(), QString::fromStdString(kToken));
    }

    // Plain http off this machine is allowed but named: the token crosses the network readable.
    void connectDialogWarnsOfPlainHttpOffThisMachine_data()
    {
        QTest::addColumn<QString>("url");
        QTest::addColumn<bool>("warns");
        QTest::newRow("loopback v4") << "http://127.0.0.1:7878" << false;
        QTest::newRow("loopback v4 net") << "http://127.3.4.5:7878" << false;
        QTest::newRow("loopback v6") << "http://[::1]:7878" << false;
        QTest::newRow("localhost") << "http://LocalHost:7878" << false;
        QTest::newRow("https remote") << "https://gpu-box.lab:7878" << false;
        QTest::newRow("http remote name") << "http://gpu-box.lab:7878" << true;
        QTest::newRow("http remote v4") << "http://10.0.0.5:7878" << true;
        QTest::newRow("http localhost lookalike") << "http://localhost.evil.example:7878" << true;
    }
    void connectDialogWarnsOfPlainHttpOffThisMachine()
    {
        QFETCH(QString, url);
        QFETCH(bool, warns);
        QSettings settings(path("warn.ini"), QSettings::IniFormat);
        ConnectDialog dialog(settings);
        auto* ok = dialog.findChild<QDialogButtonBox*>()->button(QDialogButtonBox::Ok);
        dialog.urlEdit()->setText(url);
        dialog.tokenEdit()->setText(QString::fromStdString(kToken));
        QVERIFY(ok->isEnabled()); // a warning, not a refusal
        QCOMPARE(!dialog.warning().isEmpty(), warns);
        QCOMPARE(ok->text(), warns ? QString("Connect Unencrypted") : QString("Connect"));
        auto* label = dialog.findChild<QLabel*>("remoteWarning");
        QVERIFY(label);
        QCOMPARE(label->isVisibleTo(&dialog), warns);
        if (warns) QVERIFY2(dialog.warning().contains(QUrl(url).host()), qPrintable(dialog.warning()));
        // Shown, the dialog is wide enough for a cluster host and a pasted fingerprint, and tall
        // enough for the warning's advice (it opened at about 224 px and cut both; audit 'gui-deep').
        dialog.show();
        QVERIFY(QTest::qWaitForWindowExposed(&dialog));
        QVERIFY2(dialog.width() >= 400, qPrintable(QString::number(dialog.width())));
        const QFontMetrics metrics(dialog.urlEdit()->font());
        QVERIFY(dialog.urlEdit()->width() > metrics.horizontalAdvance("http://gpu-node-17.cluster.example.org:7878"));
        if (warns) QVERIFY(dialog.height() >= dialog.sizeHint().height());
        dialog.tokenEdit()->setText("short"); // an error hides the warning: one reason at a time
        QVERIFY(dialog.warning().isEmpty());
    }

    // The settings file keeps tokens that steer runs: only its owner reads it.
    void connectDialogKeepsTokensFromOtherUsers()
    {
        const QString file = path("private.ini");
        {
            QSettings seed(file, QSettings::IniFormat);
            seed.setValue("window/geometry", 1);
        }
        QFile::setPermissions(file, QFile::ReadOwner | QFile::WriteOwner | QFile::ReadGroup | QFile::ReadOther);
        QSettings settings(file, QSettings::IniFormat);
        ConnectDialog dialog(settings);
        dialog.urlEdit()->setText("http://127.0.0.1:9003");
        dialog.tokenEdit()->setText(QString::fromStdString(kToken));
        dialog.remember();
        QCOMPARE(QFile::permissions(file) & (QFile::ReadGroup | QFile::ReadOther | QFile::WriteGroup | QFile::WriteOther),
                 QFile::Permissions{});
        settings.setValue("window/geometry", 2); // a later write keeps the mode
        settings.sync();
        QCOMPARE(QFile::permissions(file) & (QFile::ReadGroup | QFile::ReadOther), QFile::Permissions{});
        QCOMPARE(QSettings(file, QSettings::IniFormat).value(ConnectDialog::settingsKey(QUrl("http://127.0.0.1:9003"))).toString(),
                 QString::fromStdString(kToken));
    }

    // What the command line refuses before it listens: each with its message and exit code.
    void cliRefusals()
    {
        const QString db = path("cli.sqlite");
        write_store(db.toStdString());
        auto r = run_cli({"serve", "--db", path("absent.sqlite"), "--listen", "0"});
        QCOMPARE(r.exit_code, 3);
        QCOMPARE(r.err, "error: run store '" + path("absent.sqlite") + "' does not exist (no runs stored yet)\n");
        QVERIFY(!QFile::exists(path("absent.sqlite.token"))); // nothing is left behind a mistyped --db
        r = run_cli({"serve", "--db", db, "--listen", "127.0.0.1:99999"});
        QCOMPARE(r.exit_code, 2);
        QCOMPARE(r.err, QString("error: '127.0.0.1:99999' is not [ADDR:]PORT with PORT from 0 to 65535 (0: any free "
                                "port)\n"));
        // `run --serve` with such an address stops before it loads data or records a run.
        r = run_cli({"run", project_, "--db", path("refused-serve.sqlite"), "--serve", "99999"});
        QCOMPARE(r.exit_code, 2);
        QCOMPARE(r.err, QString("error: '99999' is not [ADDR:]PORT with PORT from 0 to 65535 (0: any free port)\n"));
        QVERIFY(!QFile::exists(path("refused-serve.sqlite")));
        r = run_cli({"serve", "--db", db, "--listen", "0", "--tls-cert", path("absent-cert.pem")});
        QCOMPARE(r.exit_code, 2);
        QCOMPARE(r.err, QString("error: TLS needs both --tls-cert and --tls-key\n"));
        r = run_cli({"serve", "--db", db, "--listen", "0", "--tls-cert", path("absent-cert.pem"), "--tls-key",
                     path("absent-key.pem")});
        QCOMPARE(r.exit_code, 2);
        QVERIFY2(r.err.contains("does not exist"), qPrintable(r.err));
        QFile garbage(path("garbage.pem"));
        QVERIFY(garbage.open(QIODevice::WriteOnly));
        garbage.write("not a certificate\n");
        garbage.close();
        r = run_cli({"serve", "--db", db, "--listen", "0", "--tls-cert", garbage.fileName(), "--tls-key",
                     garbage.fileName()});
        QCOMPARE(r.exit_code, 2);
        QVERIFY2(r.err.contains("cannot use the TLS certificate"), qPrintable(r.err));
        r = run_cli({"run", project_, "--db", db, "--no-store", "--serve", "0"});
        QCOMPARE(r.exit_code, 2);
        QCOMPARE(r.err, QString("error: --serve serves the run store: it cannot go with --no-store\n"));
    }

    // A run trains with --serve; the client mirrors it while it trains; at the end every row
    // of the server's store is in the replica, exactly, and the Monitor, fed from the replica
    // and from the pages before the replica holds them, has drawn every step once.
    void mirrorsALiveRun()
    {
        const QString db = path("live.sqlite");
        ServingProcess run;
        QVERIFY2(run.start({"run", project_, "--db", db, "--set", "training.steps=400", "--set", "telemetry.interval=7",
                            "--serve", "127.0.0.1:0"}),
                 qPrintable(run.output));
        QCOMPARE(file_mode((db + ".token").toStdString()), 0600u);
        int arrivalsWhileTraining = 0, framesWhileTraining = 0;
        RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(run.port)), run.token, path("live-replica.sqlite"));
        connect(&mirror, &RemoteMirror::rowsArrived, this, [&] {
            if (run.process->state() == QProcess::Running) ++arrivalsWhileTraining;
        });
        mirror.start();
        // The Monitor follows the run in the replica while it trains, as the window does.
        MonitorPage monitor;
        RunFollower follower;
        follower.setCompleteness([&](int64_t id) { return mirror.runComplete(id); });
        connect(&follower, &RunFollower::opened, &monitor,
                [&](const FollowedRun& r) { monitor.reset(r.tokensPerStep, r.layers); });
        connect(&follower, &RunFollower::batchReady, &monitor, [&](const TelemetryBatch& b) {
            monitor.ingest(b);
            if (run.process->state() == QProcess::Running) framesWhileTraining += int(b.layer_frames.size());
        });
        // The pages as they arrive, before the replica holds them (MonitorFeed does the same).
        connect(&mirror, &RemoteMirror::scalarsFetched, &follower,
                [&](qint64 id, qint64 from, const ScalarPage& page) { follower.offerScalars(id, from, page); });
        // Followed as soon as the replica lists the run, before its first page of rows comes.
        connect(&mirror, &RemoteMirror::runsChanged, &follower, [&] {
            if (!follower.isFollowing()) follower.follow(mirror.replicaPath(), 1);
        });
        QVERIFY(QTest::qWaitFor([&] { return follower.isFollowing(); }, 120000));
        QVERIFY(QTest::qWaitFor([&] { return run.process->state() == QProcess::NotRunning; }, 300000));
        QCOMPARE(run.process->exitCode(), 0);
        QVERIFY2(arrivalsWhileTraining >= 2, qPrintable(QString::number(arrivalsWhileTraining)));
        // The process is gone: a server on the same store and port serves the rest.
        ServingProcess serve;
        QVERIFY2(serve.start({"serve", "--db", db, "--listen", QString("127.0.0.1:%1").arg(run.port)}),
                 qPrintable(serve.output));
        QCOMPARE(serve.token, run.token); // kept in the token file
        QVERIFY2(wait_complete(mirror, db), qPrintable(compare_stores(db, mirror.replicaPath())));
        const auto replica = RunStore::open_read_only(mirror.replicaPath().toStdString());
        QCOMPARE(replica->list_runs().at(0).status, RunStatus::Finished);
        QCOMPARE(replica->series(1, "train/loss").size(), size_t(400));
        QVERIFY(mirror.bytesReceived() > 0);
        // Steps 1, 7, 14, ..., 399: 58 frames, mirrored row for row (compare_stores) and each
        // drawn once by the Monitor.
        const auto source = RunStore::open_read_only(db.toStdString());
        QCOMPARE(source->row_counts(1).layer_stats, replica->row_counts(1).layer_stats);
        QVERIFY(replica->row_counts(1).layer_stats > 0);
        QTRY_VERIFY_WITH_TIMEOUT(!follower.isLive(), 30000);
        QVERIFY2(framesWhileTraining >= 2, qPrintable(QString::number(framesWhileTraining)));
        QCOMPARE(monitor.history().memory().size(), size_t(58));
        QVERIFY2(follower.offeredPagesTaken() >= 1, qPrintable(QString::number(follower.offeredPagesTaken())));
        QVERIFY2(compare_history(monitor.history(), *source, 1).isEmpty(),
                 qPrintable(compare_history(monitor.history(), *source, 1)));
    }

    // `serve` started on a quiet store (no WAL: read as immutable) must still see a run that
    // another process starts in it later, live, and mirror it exactly.
    void serveSeesARunStartedLater()
    {
        const QString db = path("later.sqlite");
        write_store(db.toStdString());
        ServingProcess serve;
        QVERIFY2(serve.start({"serve", "--db", db, "--listen", "0"}), qPrintable(serve.output));
        RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(serve.port)), serve.token, path("later-replica.sqlite"));
        mirror.start();
        QVERIFY2(wait_complete(mirror, db), qPrintable(compare_stores(db, mirror.replicaPath())));
        int arrivalsWhileTraining = 0;
        QProcess training;
        connect(&mirror, &RemoteMirror::rowsArrived, this, [&](qint64 run) {
            if (run == 2 && training.state() == QProcess::Running) ++arrivalsWhileTraining;
        });
        training.start(MANTISSA_TRAIN_EXE, {"run", project_, "--db", db, "--set", "training.steps=3000"});
        QVERIFY(QTest::qWaitFor([&] { return training.state() == QProcess::NotRunning; }, 300000));
        QCOMPARE(training.exitCode(), 0);
        QVERIFY2(wait_complete(mirror, db), qPrintable(compare_stores(db, mirror.replicaPath())));
        QVERIFY2(arrivalsWhileTraining >= 1, qPrintable(QString::number(arrivalsWhileTraining)));
        QCOMPARE(RunStore::open_read_only(mirror.replicaPath().toStdString())->series(2, "train/loss").size(), size_t(3000));
    }

    // Two servers reached at one address (every `ssh -L 7878` tunnel is 127.0.0.1:7878) share a
    // replica. The second one's run 1 is another run (another uuid): the replica drops the
    // first one's rows and marks and holds the new run's, while it still runs.
    void anotherRunUnderTheSameIdStartsTheReplicaOver()
    {
        const std::string a_db = path("uuid-a.sqlite").toStdString(), b_db = path("uuid-b.sqlite").toStdString();
        {
            RunStore a(a_db);
            const auto id = a.create_run("a", "p.json", "{}");
            for (int64_t step = 1; step <= 50; ++step) a.append_scalar(id, step, "train/loss", 10.0 + double(step));
            a.finish_run(id, RunStatus::Finished);
        }
        const QString replica = path("uuid-replica.sqlite");
        {
            StoreServer server(in_process(a_db));
            RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(server.port())), QString::fromStdString(kToken), replica);
            mirror.start();
            QVERIFY2(wait_complete(mirror, QString::fromStdString(a_db)),
                     qPrintable(compare_stores(QString::fromStdString(a_db), replica)));
        }
        RunStore b(b_db); // run 1 of another store, still running (this process holds its lock)
        const auto id = b.create_run("b", "p.json", "{}");
        for (int64_t step = 1; step <= 5; ++step) b.append_scalar(id, step, "train/loss", 1.0 / double(step));
        b.flush();
        StoreServer server(in_process(b_db));
        RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(server.port())), QString::fromStdString(kToken), replica);
        mirror.start();
        const Series want = b.series(id, "train/loss");
        Series got;
        const bool same = QTest::qWaitFor(
            [&] {
                got = RunStore::open_read_only(replica.toStdString())->series(id, "train/loss");
                return got == want;
            },
            20000);
        QVERIFY2(same, qPrintable(QString("the replica holds %1 steps of train/loss, the server %2").arg(got.size()).arg(want.size())));
        QCOMPARE(QString::fromStdString(RunStore::open_read_only(replica.toStdString())->list_runs().at(0).uuid),
                 QString::fromStdString(b.list_runs().at(0).uuid));
        b.finish_run(id, RunStatus::Finished);
    }

    // A store written by a version that kept the steps after a resume (its resume event does
    // not say it dropped them): a replica that held those steps before the resume's page came
    // keeps them too, equal to its source, instead of dropping rows the source still has.
    void aReplicaOfAStoreThatKeptAResumesStepsKeepsThem()
    {
        const std::string db = path("kept-steps.sqlite").toStdString();
        const QString replica = path("kept-steps-replica.sqlite");
        RunStore source(db); // the run stays "running" while this process holds it
        const auto id = source.create_run("older", "p.json", "{}");
        for (int64_t step = 1; step <= 20; ++step) source.append_scalar(id, step, "train/loss", double(step));
        RunEvent sample;
        sample.kind = EventKind::Sample;
        sample.step = 15;
        sample.text = "the first attempt's";
        source.append_event(id, sample);
        source.flush();
        StoreServer server(in_process(db));
        RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(server.port())), QString::fromStdString(kToken), replica);
        mirror.start();
        const auto replica_events = [&] { return RunStore::open_read_only(replica.toStdString())->events(id).size(); };
        QVERIFY(QTest::qWaitFor([&] { return QFile::exists(replica) && replica_events() == 1; }, 30000));

        RunEvent resumed;
        resumed.kind = EventKind::ResumedFromCheckpoint;
        resumed.step = 10;
        resumed.path = "step-00000010.pt"; // later_steps_dropped unset, as older versions wrote it
        source.append_event(id, resumed);
        for (int64_t step = 11; step <= 20; ++step) source.append_scalar(id, step, "train/loss", double(step) + 0.5);
        sample.text = "the resumed run's";
        source.append_event(id, sample);
        source.flush();
        QVERIFY2(QTest::qWaitFor([&] { return compare_stores(QString::fromStdString(db), replica).isEmpty(); }, 30000),
                 qPrintable(compare_stores(QString::fromStdString(db), replica)));
        QCOMPARE(replica_events(), size_t(3));
        source.finish_run(id, RunStatus::Finished);
        QVERIFY2(wait_complete(mirror, QString::fromStdString(db), 30000),
                 qPrintable(compare_stores(QString::fromStdString(db), replica)));
    }

    // A page that carries a resume event (checkpoint at step 5, later steps dropped) holds rows
    // from the client's old mark on. The mirror writes none of them past the checkpoint: the
    // rewound marks fetch them again, and a mirror stopped before that page leaves no gap
    // (6-8 here) under the rows it holds, which a new start would take its marks from.
    void aResumePageLeavesNoGapWhenTheMirrorStops()
    {
        std::atomic<int> pages{0};
        const auto runs = std::string(fake_runs_json()).replace(fake_runs_json().find("\"finished\""), 10, "\"running\"");
        httplib::Server fake;
        fake.Get("/v1/runs", [&](const httplib::Request&, httplib::Response& res) { res.set_content(runs, "application/json"); });
        fake.Get("/v1/runs/1/rows", [&](const httplib::Request&, httplib::Response& res) {
            const int n = ++pages;
            std::string scalars, events = "[]";
            int64_t next = 0;
            if (n == 1) { // the first attempt's steps 1-8
                for (int step = 1; step <= 8; ++step)
                    scalars += (step > 1 ? ", " : "") + QString("[%1, \"train/loss\", %2]").arg(step).arg(step).toStdString();
                next = 8;
            } else if (n == 2) { // resumed from step 5: the resume event and the new steps 9-10
                events = "[{\"id\": 2, \"step\": 5, \"kind\": \"resumed_from_checkpoint\", \"message\": \"m\", "
                         "\"created_at\": \"2026-12-01T00:00:00Z\", \"fields\": \"{\\\"later_steps_dropped\\\": true}\"}]";
                scalars = "[9, \"train/loss\", 9.5], [10, \"train/loss\", 10.5]";
                next = 10;
            } else { // the rewound page is slow to come: the mirror is stopped before it does
                std::this_thread::sleep_for(std::chrono::milliseconds(1500));
            }
            res.set_content("{\"run\": 1, \"status\": \"running\", \"scalars\": [" + scalars + "], \"events\": " + events +
                                ", \"next_from_step\": " + std::to_string(next) + ", \"next_after_event\": " +
                                std::to_string(n == 2 ? 2 : 0) + ", \"more\": " + (n <= 2 ? "true" : "false") + "}",
                            "application/json");
        });
        const int port = fake.bind_to_any_port("127.0.0.1");
        std::thread serving([&] { fake.listen_after_bind(); });
        const QString replica = path("resume-gap-replica.sqlite");
        {
            RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(port)), QString::fromStdString(kToken), replica);
            QSignalSpy arrived(&mirror, &RemoteMirror::rowsArrived);
            mirror.start();
            QVERIFY(QTest::qWaitFor([&] { return pages >= 3 && arrived.count() >= 2; }, 30000));
            mirror.stop();
        }
        const auto held = RunStore::open_read_only(replica.toStdString())->series(1, "train/loss");
        QCOMPARE(held, (Series{{1, 1.0}, {2, 2.0}, {3, 3.0}, {4, 4.0}, {5, 5.0}}));
        QCOMPARE(RunStore::open_read_only(replica.toStdString())->events(1).size(), size_t(1));
        fake.stop();
        serving.join();
    }

    // A pooled connection that read the file as immutable is not lent again once a writer has
    // changed the file and closed it (no WAL left to tell): it would read the new file as
    // "malformed", or the old one.
    void aPooledConnectionIsNotReusedAfterTheFileChanged()
    {
        const std::string db = path("pool.sqlite").toStdString();
        {
            RunStore store(db);
            store.finish_run(store.create_run("a", "p.json", "{}"), RunStatus::Finished);
        }
        StorePool pool(db);
        QCOMPARE(pool.acquire()->list_runs().size(), size_t(1));
        {
            RunStore store(db);
            store.finish_run(store.create_run("b", "p.json", "{}"), RunStatus::Finished);
        }
        QVERIFY(!QFile::exists(QString::fromStdString(db + "-wal")));
        QCOMPARE(pool.acquire()->list_runs().size(), size_t(2));
    }

    // A request's read that a writer overlapped (it started, wrote and closed while the read
    // ran on an immutable connection) is made again on a fresh connection.
    void aPooledReadThatAWriterOverlappedIsReadAgain()
    {
        const std::string db = path("pool-overlapped.sqlite").toStdString();
        const auto add_run = [&](const char* name) {
            RunStore store(db);
            store.finish_run(store.create_run(name, "p.json", "{}"), RunStatus::Finished);
        };
        add_run("a");
        StorePool pool(db);
        int reads = 0;
        const size_t runs = pool.read([&](RunStore& store) {
            if (++reads == 1) add_run("b");
            return store.list_runs().size();
        });
        QCOMPARE(reads, 2);
        QCOMPARE(runs, size_t(2));
        reads = 0;
        QCOMPARE(pool.read([&](RunStore& store) { return ++reads, store.list_runs().size(); }), size_t(2));
        QCOMPARE(reads, 1);
    }

    // A run whose process died reads "interrupted"; resumed, it reads "running" at the next
    // request, not after the pool's 30 s (the desktop took the stale status for an ended run
    // and compared its growing rows with an end count, wiping its replica).
    void aPooledConnectionSeesARunResumed()
    {
        const std::string db = path("pool-resumed.sqlite").toStdString();
        RunStore keeps_the_wal(db); // the served store in WAL mode, as while a writer is open
        int64_t id = 0;
        {
            RunStore died(db);
            id = died.create_run("a", "p.json", "{}"); // "running"; its lock goes with the store
        }
        StorePool pool(db);
        QCOMPARE(pool.acquire()->find_run(std::to_string(id))->status, RunStatus::Interrupted);
        keeps_the_wal.claim_run(id);
        QCOMPARE(pool.acquire()->find_run(std::to_string(id))->status, RunStatus::Running);
    }

    // A run deleted on the server while its pages are being copied: the replica drops it and
    // copies the rest, without calling the connection lost or refusing the replica.
    void aRunDeletedWhileItIsCopiedLeavesTheReplica()
    {
        const QString db = path("deleted-midway.sqlite");
        write_columnar_store(db.toStdString()); // run 1: many pages
        {
            RunStore store(db.toStdString());
            const auto id = store.create_run("kept", "p.json", "{}");
            for (int64_t step = 1; step <= 30; ++step) store.append_scalar(id, step, "train/loss", 1.0 / double(step));
            store.finish_run(id, RunStatus::Finished);
        }
        StoreServer server(in_process(db.toStdString()));
        QList<RemoteMirror::State> states;
        RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(server.port())), QString::fromStdString(kToken),
                            path("deleted-midway-replica.sqlite"));
        connect(&mirror, &RemoteMirror::stateChanged, this, [&](RemoteMirror::State s) { states << s; });
        bool deleted = false;
        // Deleted as the first page arrives, before the next one is asked for.
        connect(&mirror, &RemoteMirror::scalarsFetched, this, [&](qint64 runId, qint64, const ScalarPage&) {
            if (runId != 1 || deleted) return;
            RunStore(db.toStdString()).delete_run(1);
            deleted = true;
        });
        mirror.start();
        QVERIFY2(wait_complete(mirror, db), qPrintable(compare_stores(db, mirror.replicaPath())));
        QVERIFY(deleted);
        const auto runs = RunStore::open_read_only(mirror.replicaPath().toStdString())->list_runs();
        QCOMPARE(runs.size(), size_t(1));
        QCOMPARE(QString::fromStdString(runs[0].name), QString("kept"));
        QVERIFY2(!states.contains(RemoteMirror::State::Reconnecting) && !states.contains(RemoteMirror::State::Refused),
                 qPrintable(mirror.stateText()));
        QCOMPARE(mirror.state(), RemoteMirror::State::Connected);
    }

    // The server dies mid-stream (SIGKILL); a new one on the same store and port: the client
    // says so, reconnects and ends with exactly the server's rows.
    void killAndReconnect()
    {
        const QString db = path("kill.sqlite");
        ServingProcess run;
        QVERIFY2(run.start({"run", project_, "--db", db, "--set", "training.steps=1000000", "--set",
                            "telemetry.interval=3", "--serve", "127.0.0.1:0"}),
                 qPrintable(run.output));
        QList<RemoteMirror::State> states; // outlives the mirror, which says "stopped" as it goes
        RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(run.port)), run.token, path("kill-replica.sqlite"));
        connect(&mirror, &RemoteMirror::stateChanged, this, [&](RemoteMirror::State s) { states << s; });
        mirror.start();
        QVERIFY(QTest::qWaitFor(
            [&] { return RunStore::open_read_only(mirror.replicaPath().toStdString())->series(1, "train/loss").size() >= 20; },
            120000));
        run.kill();
        QVERIFY(QTest::qWaitFor([&] { return mirror.state() == RemoteMirror::State::Reconnecting; }, 30000));
        ServingProcess serve;
        QVERIFY2(serve.start({"serve", "--db", db, "--listen", QString("127.0.0.1:%1").arg(run.port)}),
                 qPrintable(serve.output));
        QVERIFY2(wait_complete(mirror, db), qPrintable(compare_stores(db, mirror.replicaPath())));
        QCOMPARE(mirror.state(), RemoteMirror::State::Connected);
        QVERIFY(mirror.reconnects() >= 1);
        QVERIFY(states.contains(RemoteMirror::State::Reconnecting));
        const auto replica = RunStore::open_read_only(mirror.replicaPath().toStdString());
        QCOMPARE(replica->list_runs().at(0).status, RunStatus::Interrupted);
        QVERIFY(replica->series(1, "train/loss").size() >= 20);
        // Layer statistics across the reconnect: every frame once (compare_stores compared the
        // rows; the keys make a duplicate impossible, the counts show none was lost).
        const auto source = RunStore::open_read_only(db.toStdString());
        QVERIFY(replica->row_counts(1).layer_stats >= 7 * 4);
        QCOMPARE(replica->row_counts(1).layer_stats, source->row_counts(1).layer_stats);
        QCOMPARE(replica->row_counts(1).max_layer_step, source->row_counts(1).max_layer_step);
    }

    // The codec alone: every double bit for bit (NaN payloads, infinities, subnormals, -0),
    // steps with gaps, going down and at the ends of int64; base64 as RFC 4648 writes it.
    void columnarCodecRoundTrips()
    {
        QCOMPARE(base64_encode(""), std::string(""));
        QCOMPARE(base64_encode("f"), std::string("Zg=="));
        QCOMPARE(base64_encode("fo"), std::string("Zm8="));
        QCOMPARE(base64_encode("foo"), std::string("Zm9v"));
        QCOMPARE(base64_encode("foob"), std::string("Zm9vYg=="));
        QCOMPARE(base64_decode("Zm9vYmE=", "x"), std::string("fooba"));
        ScalarColumn c;
        c.tag = "train/loss";
        std::vector<double> values = kSpecialValues;
        values.push_back(std::bit_cast<double>(uint64_t(0xfff8000000000123))); // a negative NaN with a payload
        values.push_back(std::bit_cast<double>(uint64_t(0x7ff0000000000001))); // a signalling NaN
        const std::vector<int64_t> steps = {5, 6, 7, 1000, 1000000000000, 3, -4, INT64_MAX, INT64_MIN, 0, 64, 1, 65, 2};
        QCOMPARE(steps.size(), values.size());
        c.steps = steps;
        c.values = values;
        const EncodedScalarColumn e = encode_scalar_column(c);
        QCOMPARE(e.first_step, int64_t(5));
        QCOMPARE(e.count, int64_t(14));
        QCOMPARE(e.values.size(), size_t((14 * 8 + 2) / 3 * 4));
        const ScalarColumn d = decode_scalar_column(e);
        QCOMPARE(d.tag, c.tag);
        QCOMPARE(d.steps, steps);
        for (size_t i = 0; i < values.size(); ++i) QCOMPARE(bits_of(d.values[i]), bits_of(values[i]));
        // Consecutive steps cost one byte each; the values 8, little-endian.
        ScalarColumn run{"lr", {10, 11, 12, 13}, {1.0, 2.0, 3.0, 4.0}};
        const EncodedScalarColumn r = encode_scalar_column(run);
        QCOMPARE(base64_decode(r.step_deltas, "x"), std::string("\x02\x02\x02"));
        QCOMPARE(base64_decode(r.values, "x").substr(0, 8), std::string("\0\0\0\0\0\0\xf0\x3f", 8));
        QCOMPARE(decode_scalar_column(r).steps, run.steps);
    }

    // A truncated or malformed column is a ColumnError naming the tag and the problem, never a
    // crash or a column of another length; then random damage to good columns.
    void columnarDecoderRejectsGarbage()
    {
        ScalarColumn c{"train/loss", {}, {}};
        for (int64_t i = 0; i < 200; ++i) {
            c.steps.push_back(1 + 3 * i + (i % 5 == 0 ? 1000 : 0) * i);
            c.values.push_back(1.0 / double(1 + i));
        }
        const EncodedScalarColumn good = encode_scalar_column(c);
        const auto message = [](EncodedScalarColumn e) -> QString {
            try {
                decode_scalar_column(e);
            } catch (const ColumnError& x) {
                return QString::fromStdString(x.what());
            }
            return "decoded";
        };
        EncodedScalarColumn e = good;
        e.values = good.values.substr(0, good.values.size() - 4);
        QCOMPARE(message(e), QString("scalar column 'train/loss': values hold 1599 bytes, not 8 for each of 200 rows"));
        e = good;
        e.values.pop_back();
        QCOMPARE(message(e), QString("scalar column 'train/loss' values: base64 of 2135 characters, not a multiple of 4"));
        e = good;
        e.values[10] = '*';
        QCOMPARE(message(e), QString("scalar column 'train/loss' values: '*' at character 10 is not base64"));
        e = good;
        e.count = 201;
        QCOMPARE(message(e), QString("scalar column 'train/loss': values hold 1600 bytes, not 8 for each of 201 rows"));
        e = good;
        e.count = 0;
        QCOMPARE(message(e), QString("scalar column 'train/loss': count 0 (a column has at least one row)"));
        e = good;
        e.count = -3;
        QCOMPARE(message(e), QString("scalar column 'train/loss': count -3 (a column has at least one row)"));
        e = good;
        e.step_deltas = base64_encode(base64_decode(good.step_deltas, "x").substr(0, 150));
        QVERIFY2(message(e).startsWith("scalar column 'train/loss': step deltas end after "), qPrintable(message(e)));
        e = good;
        e.step_deltas = base64_encode(base64_decode(good.step_deltas, "x") + "\x01");
        QCOMPARE(message(e), QString("scalar column 'train/loss': 1 bytes after the last of 199 step deltas"));
        e = good;
        e.step_deltas = base64_encode(std::string(11, '\xff'));
        QCOMPARE(message(e), QString("scalar column 'train/loss': step delta 1 has more than 64 bits"));
        // Random damage: each result is an error or exactly `count` rows.
        QRandomGenerator rng(1919);
        int errors = 0;
        for (int i = 0; i < 20000; ++i) {
            e = good;
            std::string& field = rng.bounded(2) ? e.values : e.step_deltas;
            const int edits = 1 + int(rng.bounded(3));
            for (int k = 0; k < edits && !field.empty(); ++k) {
                const auto at = rng.bounded(quint32(field.size()));
                switch (rng.bounded(3)) {
                case 0: field[at] = char(rng.bounded(256)); break;
                case 1: field.erase(at, 1 + rng.bounded(8)); break;
                default: field.resize(at);
                }
            }
            if (rng.bounded(8) == 0) e.count = int64_t(rng.bounded(400)) - 100;
            try {
                const ScalarColumn d = decode_scalar_column(e);
                QCOMPARE(int64_t(d.steps.size()), e.count);
                QCOMPARE(d.values.size(), d.steps.size());
            } catch (const ColumnError&) {
                ++errors;
            }
        }
        QVERIFY2(errors > 15000, qPrintable(QString::number(errors)));
    }

    // The window's mirror asks for columnar pages and copies every row bit for bit, over
    // several pages; stopped half-way and started again on the same replica it resumes from
    // its marks, and ends with exactly the server's rows, none twice, none lost.
    void columnarPagesMirrorEveryRow()
    {
        const QString db = path("columns.sqlite");
        write_columnar_store(db.toStdString());
        StoreServer server(in_process(db.toStdString()));
        httplib::Client client("127.0.0.1", server.port());
        // The server says it offers the encoding; an unknown one is a 400.
        auto r = client.Get("/v1/runs", auth());
        QCOMPARE(json_of(r->body)["row_encodings"].toArray(), QJsonArray({"json", "columnar"}));
        r = client.Get("/v1/runs/1/rows?encoding=binary", auth());
        QCOMPARE(r->status, 400);
        QCOMPARE(json_of(r->body)["error"].toString(), QString("parameter 'encoding' must be 'json' or 'columnar'"));
        // One page by hand: the columns hold what the JSON rows hold, the same cut and marks.
        const auto json_page = json_of(client.Get("/v1/runs/1/rows?limit=10000&from_step=20000", auth())->body);
        const auto page =
            json_of(client.Get("/v1/runs/1/rows?limit=10000&from_step=20000&encoding=columnar", auth())->body);
        QVERIFY(!page.contains("scalars"));
        QCOMPARE(page["next_from_step"], json_page["next_from_step"]);
        QCOMPARE(page["more"], json_page["more"]);
        QCOMPARE(page["counts"], json_page["counts"]);
        const QJsonArray columns = page["scalar_columns"].toArray();
        QStringList tags;
        qsizetype rows = 0;
        for (const auto& v : columns) {
            const QJsonObject o = v.toObject();
            tags << o["tag"].toString();
            rows += o["count"].toInteger();
        }
        QCOMPARE(tags, QStringList({"lr", "train/loss", "val/loss"}));
        QCOMPARE(rows, json_page["scalars"].toArray().size());
        const QJsonObject loss = columns[1].toObject();
        const ScalarColumn decoded =
            decode_scalar_column({"train/loss", loss["first_step"].toInteger(), loss["count"].toInteger(),
                                  loss["step_deltas"].toString().toStdString(), loss["values"].toString().toStdString()});
        QCOMPARE(decoded.steps.front(), int64_t(20000));
        QCOMPARE(decoded.steps.back(), int64_t(25000));
        QCOMPARE(decoded.steps.size(), size_t(5001 - 5001 / 7));
        // Bit for bit the source's rows, NaN (the store's NULL), infinities and subnormals among them.
        Series expected;
        for (const auto& point : RunStore::open_read_only(db.toStdString())->series(1, "train/loss"))
            if (point.first >= 20000) expected.push_back(point);
        QCOMPARE(decoded.steps.size(), expected.size());
        std::set<int> classes;
        for (size_t i = 0; i < expected.size(); ++i) {
            QCOMPARE(decoded.steps[i], expected[i].first);
            if (std::isnan(expected[i].second)) QVERIFY(std::isnan(decoded.values[i]));
            else QCOMPARE(bits_of(decoded.values[i]), bits_of(expected[i].second));
            classes.insert(std::fpclassify(decoded.values[i]) * (std::signbit(decoded.values[i]) ? -1 : 1));
        }
        for (int c : {FP_NAN, FP_INFINITE, -FP_INFINITE, FP_SUBNORMAL, -FP_SUBNORMAL, FP_ZERO})
            QVERIFY2(classes.count(c), qPrintable(QString::number(c)));

        // The mirror: stopped after its first page, then again from its replica.
        const QString replica = path("columns-replica.sqlite");
        const QUrl url(QString("http://127.0.0.1:%1").arg(server.port()));
        {
            RemoteMirror first(url, QString::fromStdString(kToken), replica);
            first.setBytesAhead(1); // the second page is not fetched before the first is written
            bool stopped = false;
            connect(&first, &RemoteMirror::rowsArrived, this, [&] {
                if (!stopped) first.stop();
                stopped = true;
            });
            first.start();
            QVERIFY(QTest::qWaitFor([&] { return stopped; }, 30000));
            QVERIFY(first.usesColumnarPages());
        }
        const auto half = RunStore::open_read_only(replica.toStdString())->row_counts(1);
        const int64_t all = RunStore::open_read_only(db.toStdString())->row_counts(1).scalars;
        QVERIFY2(half.scalars >= 10000 && half.scalars < all, qPrintable(QString::number(half.scalars)));
        RemoteMirror mirror(url, QString::fromStdString(kToken), replica);
        // No page fetched ahead of the writes: each next page waits for the writer.
        mirror.setBytesAhead(1);
        mirror.start();
        QVERIFY2(wait_complete(mirror, db), qPrintable(compare_stores(db, replica)));
        QVERIFY2(mirror.pagesHeld() >= 1, qPrintable(QString::number(mirror.pagesHeld())));
        QVERIFY(mirror.usesColumnarPages());
        QVERIFY(mirror.runComplete(1));
        const auto source = RunStore::open_read_only(db.toStdString());
        const auto copy = RunStore::open_read_only(replica.toStdString());
        QCOMPARE(copy->row_counts(1).scalars, source->row_counts(1).scalars);
        QCOMPARE(copy->series(1, "train/loss").size(), size_t(25000 - 25000 / 7));
        QCOMPARE(copy->series(1, "val/loss").size(), size_t(5));
        const auto nulls = [](const QString& store) {
            int n = 0;
            for (const auto& row : all_scalars(store, 1)) n += std::isnan(row.value);
            return n;
        };
        QCOMPARE(nulls(replica), nulls(db));
        // train/loss at steps 1, 1201, ..., 24001 less 2401, 10801, 19201 (7 divides them); val/loss at 77.
        QCOMPARE(nulls(replica), 19);
    }

    // A server whose page holds a column that cannot be decoded: the mirror says so in its
    // state and writes nothing of that page (not even its good column or its event); when the
    // server sends a good page, the copy completes.
    void malformedColumnarPageWritesNothing()
    {
        const ScalarColumn lr{"lr", {1, 2, 3}, {0.1, 0.2, 0.3}};
        const ScalarColumn loss{"train/loss", {3}, {INFINITY}};
        EncodedScalarColumn broken = encode_scalar_column(loss);
        broken.values = broken.values.substr(0, 8); // cut short: 6 of the 8 bytes
        std::atomic<bool> repaired{false};
        std::atomic<int> pages{0};
        httplib::Server fake;
        fake.Get("/v1/runs", [](const httplib::Request&, httplib::Response& res) {
            res.set_content(fake_runs_json(), "application/json");
        });
        fake.Get("/v1/runs/1/rows", [&](const httplib::Request& req, httplib::Response& res) {
            ++pages;
            const auto good = column_json(encode_scalar_column(lr));
            const auto second = column_json(repaired ? encode_scalar_column(loss) : broken);
            res.set_content(req.get_param_value("encoding") == "columnar" ? fake_page_json("[" + good + ", " + second + "]")
                                                                          : std::string("{}"),
                            "application/json");
        });
        const int port = fake.bind_to_any_port("127.0.0.1");
        std::thread serving([&] { fake.listen_after_bind(); });
        const QString replica = path("malformed-replica.sqlite");
        {
            RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(port)), QString::fromStdString(kToken), replica);
            mirror.start();
            QVERIFY(QTest::qWaitFor([&] { return mirror.state() == RemoteMirror::State::Reconnecting; }, 30000));
            QCOMPARE(mirror.stateText().left(mirror.stateText().indexOf("; retrying")),
                     QString("127.0.0.1:%1 lost: run 1: a malformed page: scalar column 'train/loss': values hold 6 "
                             "bytes, not 8 for each of 1 rows")
                         .arg(port));
            {
                const auto held = RunStore::open_read_only(replica.toStdString());
                QCOMPARE(held->list_runs().size(), size_t(1)); // the run's record, from the run list
                QCOMPARE(held->row_counts(1).scalars, int64_t(0));
                QCOMPARE(held->row_counts(1).events, int64_t(0));
            }
            QVERIFY(!mirror.runComplete(1));
            const int asked = pages;
            repaired = true;
            QVERIFY(QTest::qWaitFor([&] { return mirror.runComplete(1); }, 30000));
            QVERIFY(pages > asked);
            QCOMPARE(mirror.state(), RemoteMirror::State::Connected);
            const auto held = RunStore::open_read_only(replica.toStdString());
            QCOMPARE(held->row_counts(1).scalars, int64_t(4));
            QCOMPARE(held->row_counts(1).events, int64_t(1));
            QCOMPARE(held->series(1, "train/loss").size(), size_t(1));
            QCOMPARE(held->series(1, "train/loss")[0].second, double(INFINITY));
        }
        fake.stop();
        serving.join();
    }

    // An ended run whose replica never matches the server's counts (here the server counts 5
    // scalars and sends 4) is copied again kMaxResyncs (3) times, then given up with one
    // message naming both sides' counts, and not fetched every second for good.
    void aReplicaThatNeverMatchesIsGivenUpWithAMessage()
    {
        const ScalarColumn lr{"lr", {1, 2, 3}, {0.1, 0.2, 0.3}};
        const ScalarColumn loss{"train/loss", {3}, {2.5}};
        std::atomic<int> pages{0};
        httplib::Server fake;
        fake.Get("/v1/runs", [](const httplib::Request&, httplib::Response& res) {
            res.set_content(fake_runs_json(), "application/json");
        });
        fake.Get("/v1/runs/1/rows", [&](const httplib::Request&, httplib::Response& res) {
            ++pages;
            std::string page = fake_page_json("[" + column_json(encode_scalar_column(lr)) + ", " +
                                              column_json(encode_scalar_column(loss)) + "]");
            page.replace(page.find("\"scalars\": 4"), 12, "\"scalars\": 5");
            res.set_content(page, "application/json");
        });
        const int port = fake.bind_to_any_port("127.0.0.1");
        std::thread serving([&] { fake.listen_after_bind(); });
        {
            RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(port)), QString::fromStdString(kToken),
                                path("differs-replica.sqlite"));
            QSignalSpy differs(&mirror, &RemoteMirror::replicaDiffers);
            mirror.start();
            QVERIFY2(differs.wait(30000), qPrintable(QString("pages %1, state %2").arg(pages.load()).arg(mirror.stateText())));
            QCOMPARE(pages.load(), 4); // the first copy and 3 more
            QCOMPARE(differs.at(0).at(1).toString(), QString("run 1: the replica still differs from the server after 3 "
                                                             "copies (4 scalars, 1 events here; 5, 1 there)"));
            QTest::qWait(2500); // the run list is read again meanwhile
            QCOMPARE(pages.load(), 4);
            QCOMPARE(differs.count(), 1);
            QVERIFY(!mirror.runComplete(1));
        }
        fake.stop();
        serving.join();
    }

    // A server from before the columnar encoding: its run list names no row_encodings, and its
    // rows refuse the parameter (400, as any unknown one). The mirror asks in JSON and copies
    // the rows, NaN and infinity included.
    void mirrorOfAnOlderServerAsksForJsonRows()
    {
        std::string runs = fake_runs_json();
        const std::string offer = R"("row_encodings": ["json", "columnar"], )";
        runs.erase(runs.find(offer), offer.size());
        QVERIFY(!QString::fromStdString(runs).contains("row_encodings"));
        std::atomic<int> refused{0};
        httplib::Server old;
        old.Get("/v1/runs",
                [&](const httplib::Request&, httplib::Response& res) { res.set_content(runs, "application/json"); });
        old.Get("/v1/runs/1/rows", [&](const httplib::Request& req, httplib::Response& res) {
            if (req.has_param("encoding")) {
                ++refused;
                res.status = 400;
                res.set_content(R"({"error": "unknown parameter 'encoding'"})", "application/json");
                return;
            }
            res.set_content(R"({"run": 1, "status": "finished", "scalars": [[1, "lr", 0.1], [2, "lr", 0.2], [3, "lr", 0.3],
                [3, "train/loss", "inf"], [3, "val/loss", "nan"]], "events": [], "next_from_step": 3, "next_after_event": 0,
                "more": false, "counts": {"scalars": 5, "events": 0}})",
                            "application/json");
        });
        const int port = old.bind_to_any_port("127.0.0.1");
        std::thread serving([&] { old.listen_after_bind(); });
        const QString replica = path("older-replica.sqlite");
        {
            RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(port)), QString::fromStdString(kToken), replica);
            mirror.start();
            QVERIFY(QTest::qWaitFor([&] { return mirror.runComplete(1); }, 30000));
            QVERIFY(!mirror.usesColumnarPages());
        }
        old.stop();
        serving.join();
        QCOMPARE(refused.load(), 0);
        const auto rows = all_scalars(replica, 1);
        QCOMPARE(rows.size(), size_t(5));
        QCOMPARE(rows[2].value, 0.3);
        QCOMPARE(rows[3].tag, std::string("train/loss"));
        QCOMPARE(rows[3].value, double(INFINITY));
        QVERIFY(std::isnan(rows[4].value));
    }

    // A 200 that is not a run store's answer (a captive portal, another service on the port a
    // tunnel led to) changes nothing in the replica: read as "no runs", it deleted every one.
    void anAnswerThatIsNoStoresLeavesTheReplica()
    {
        std::string runs = fake_runs_json(); // JSON rows, as an older server's: the simplest page
        const std::string offer = R"("row_encodings": ["json", "columnar"], )";
        runs.erase(runs.find(offer), offer.size());
        std::atomic<int> lists{0};
        httplib::Server fake;
        fake.Get("/v1/runs", [&](const httplib::Request&, httplib::Response& res) {
            if (++lists == 1) res.set_content(runs, "application/json");
            else res.set_content("<html><body>Sign in to the network</body></html>", "text/html");
        });
        fake.Get("/v1/runs/1/rows", [&](const httplib::Request&, httplib::Response& res) {
            res.set_content(R"({"run": 1, "status": "finished", "scalars": [[1, "lr", 0.1], [2, "lr", 0.2], [3, "lr", 0.3]],
                "events": [], "next_from_step": 3, "next_after_event": 0, "more": false,
                "counts": {"scalars": 3, "events": 0}})",
                            "application/json");
        });
        const int port = fake.bind_to_any_port("127.0.0.1");
        std::thread serving([&] { fake.listen_after_bind(); });
        const QString replica = path("portal-replica.sqlite");
        QString state;
        {
            RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(port)), QString::fromStdString(kToken), replica);
            mirror.start();
            QVERIFY(QTest::qWaitFor([&] { return mirror.runComplete(1); }, 30000));
            // The next run list (it looks for runs started later) is the portal's page.
            QVERIFY(QTest::qWaitFor([&] { return lists.load() >= 2; }, 30000));
            (void)QTest::qWaitFor([&] { return mirror.state() == RemoteMirror::State::Reconnecting; }, 3000); // asserted below
            state = mirror.stateText();
        }
        fake.stop();
        serving.join();
        {
            RunStore store(replica.toStdString(), OpenMode::ReadOnly);
            QCOMPARE(store.list_runs().size(), size_t(1));
        }
        QCOMPARE(all_scalars(replica, 1).size(), size_t(3));
        QVERIFY2(state.contains("does not answer as a Mantissa run store server"), qPrintable(state));
    }

    // Refused for good (a 401: the server restarted with another token) while a remote run was
    // live: the replica's run reads interrupted, not "running" forever, and the lag is not 0.
    void aRefusedMirrorLeavesNoRunLookingLive()
    {
        std::string runs = std::string(fake_runs_json()).replace(fake_runs_json().find("\"finished\""), 10, "\"running\"");
        const std::string offer = R"("row_encodings": ["json", "columnar"], )";
        runs.erase(runs.find(offer), offer.size());
        std::atomic<int> answered{0};
        httplib::Server fake;
        const auto refuse = [](httplib::Response& res) {
            res.status = 401;
            res.set_content(R"({"error": "a wrong token"})", "application/json");
        };
        fake.Get("/v1/runs", [&](const httplib::Request&, httplib::Response& res) {
            if (++answered > 2) return refuse(res);
            res.set_content(runs, "application/json");
        });
        fake.Get("/v1/runs/1/rows", [&](const httplib::Request&, httplib::Response& res) {
            if (++answered > 2) return refuse(res);
            res.set_content(R"({"run": 1, "status": "running", "scalars": [[1, "lr", 0.1]], "events": [],
                "next_from_step": 1, "next_after_event": 0, "more": false, "counts": {"scalars": 1, "events": 0}})",
                            "application/json");
        });
        const int port = fake.bind_to_any_port("127.0.0.1");
        std::thread serving([&] { fake.listen_after_bind(); });
        const QString replica = path("refused-replica.sqlite");
        {
            RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(port)), QString::fromStdString(kToken), replica);
            mirror.start();
            QVERIFY(QTest::qWaitFor([&] { return mirror.state() == RemoteMirror::State::Refused; }, 30000));
            QVERIFY2(mirror.stateText().contains("a wrong token"), qPrintable(mirror.stateText()));
            QVERIFY(mirror.lagSeconds() != 0.0);
            RunStore store(replica.toStdString(), OpenMode::ReadOnly);
            const auto run = store.find_run("1");
            QVERIFY(run);
            QVERIFY(run->status == RunStatus::Interrupted);
        }
        fake.stop();
        serving.join();
    }

    // Another service on the port (python3 -m http.server: a 404 with no Mantissa error) is
    // named as such, not with Qt's "server replied: File not found" after "lost", for a
    // connection that was never made.
    void anotherServiceOnThePortIsNamed()
    {
        httplib::Server other; // no routes: a 404 with an empty body for every request
        const int port = other.bind_to_any_port("127.0.0.1");
        std::thread serving([&] { other.listen_after_bind(); });
        const auto joined = qScopeGuard([&] { // also when a check fails and returns
            other.stop();
            serving.join();
        });
        {
            RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(port)), QString::fromStdString(kToken),
                                path("other-service-replica.sqlite"));
            mirror.start();
            QVERIFY(QTest::qWaitFor([&] { return mirror.state() == RemoteMirror::State::Reconnecting; }, 30000));
            QCOMPARE(mirror.stateText().left(mirror.stateText().indexOf("; retrying")),
                     QString("cannot connect to 127.0.0.1:%1: it answers HTTP 404 without a Mantissa run store "
                             "server's error (another service on that port, or a proxy?)")
                         .arg(port));
            // A command meets the same service: "refused" is for the server's own refusals.
            QSignalSpy answered(&mirror, &RemoteMirror::commandAnswered);
            mirror.sendCommand(1, "pause");
            QVERIFY(answered.wait(30000));
            QCOMPARE(answered.at(0).at(2).toBool(), false);
            QVERIFY2(answered.at(0).at(3).toString().startsWith(
                         QString("127.0.0.1:%1 did not take the command: it answers HTTP 404").arg(port)),
                     qPrintable(answered.at(0).at(3).toString()));
        }
    }

    // A 200 that is no run store's is no connection: the state never reads "connected", and the
    // retries back off as after any failure (0.3 s, 0.5 s, 1.0 s, ...; they came 4 times a second
    // for ever before 2026-12-07). A server of another protocol version is named as one, and a
    // 401 without a Mantissa server's error is another service's, retried, not a wrong token.
    void aServerThatIsNoStoreIsRetriedWithBackOff_data()
    {
        QTest::addColumn<int>("status");
        QTest::addColumn<QString>("body");
        QTest::addColumn<QString>("why");
        QTest::newRow("captive portal") << 200 << "<html><body>Sign in to the network</body></html>"
                                        << "it does not answer as a Mantissa run store server";
        QTest::newRow("protocol 2") << 200 << R"({"protocol": 2, "control": false, "runs": []})"
                                    << "it speaks protocol 2 of Mantissa's run store server, and this window speaks 1";
        QTest::newRow("another service's 401") << 401 << R"({"message": "Bad credentials"})"
                                               << "it answers HTTP 401 without a Mantissa run store server's error";
    }
    void aServerThatIsNoStoreIsRetriedWithBackOff()
    {
        QFETCH(int, status);
        QFETCH(QString, body);
        QFETCH(QString, why);
        httplib::Server fake;
        fake.Get("/v1/runs", [&](const httplib::Request&, httplib::Response& res) {
            res.status = status;
            res.set_content(body.toStdString(), body.startsWith('<') ? "text/html" : "application/json");
        });
        const int port = fake.bind_to_any_port("127.0.0.1");
        std::thread serving([&] { fake.listen_after_bind(); });
        const auto joined = qScopeGuard([&] {
            fake.stop();
            serving.join();
        });
        RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(port)), QString::fromStdString(kToken),
                            path(QString("no-store-%1.sqlite").arg(QTest::currentDataTag()).replace(' ', '-')));
        QStringList states;
        connect(&mirror, &RemoteMirror::stateChanged, this,
                [&](RemoteMirror::State, const QString& text) { states << text; });
        mirror.start();
        QVERIFY2(QTest::qWaitFor([&] { return mirror.stateText().contains("retrying in 1.0 s"); }, 30000),
                 qPrintable(states.join('\n')));
        QVERIFY(mirror.state() == RemoteMirror::State::Reconnecting);
        QVERIFY2(states.filter("connected to").isEmpty(), qPrintable(states.join('\n')));
        QVERIFY2(mirror.stateText().startsWith(QString("cannot connect to 127.0.0.1:%1: %2").arg(port).arg(why)),
                 qPrintable(mirror.stateText()));
    }

    // The same refusal with a window on the run: the Monitor stops following it live and the
    // readout says "interrupted" at once. The follower's connection, opened while the mirror's
    // claim was held, read it running until 30 s of quiet had passed; a read-only audit saw
    // the Monitor live 35 s after the refusal.
    void aRefusedMirrorEndsTheWindowsLiveRun()
    {
        std::string runs = fake_runs_json();
        runs.replace(runs.find("\"finished\""), 10, "\"running\"");
        const std::string offer = R"("row_encodings": ["json", "columnar"], )";
        runs.erase(runs.find(offer), offer.size());
        std::atomic<bool> refusing{false}, quiet{false};
        httplib::Server fake;
        const auto answer = [&](httplib::Response& res, const std::string& body) {
            if (!refusing) return res.set_content(body, "application/json");
            res.status = 401;
            res.set_content(R"({"error": "a wrong token"})", "application/json");
        };
        fake.Get("/v1/runs", [&](const httplib::Request&, httplib::Response& res) { answer(res, runs); });
        fake.Get("/v1/runs/1/rows", [&](const httplib::Request&, httplib::Response& res) {
            std::this_thread::sleep_for(std::chrono::milliseconds(20)); // a long poll's pace, roughly
            // Two steps: a live run's newest step may be partly written, and is not shown yet.
            // Then none: no rows arrive to reopen the window's connection before the refusal.
            answer(res, std::string(R"({"run": 1, "status": "running", "scalars": )") +
                            (quiet ? "[]" : R"([[1, "train/loss", 0.5], [2, "train/loss", 0.25]])") + R"(,
                "events": [], "next_from_step": 2, "next_after_event": 0, "more": false,
                "counts": {"scalars": 2, "events": 0}})");
        });
        const int port = fake.bind_to_any_port("127.0.0.1");
        std::thread serving([&] { fake.listen_after_bind(); });
        const auto joined = qScopeGuard([&] { // also when a check fails and returns
            fake.stop();
            serving.join();
        });
        {
            MainWindow window(path("local-absent-refused.sqlite"));
            window.remoteConnector()->setReplicaDir(path("replicas-refused"));
            const QUrl url(QString("http://127.0.0.1:%1").arg(port));
            QVERIFY(window.connectRemote(url, QString::fromStdString(kToken)));
            QTRY_COMPARE_WITH_TIMEOUT(window.monitorFeed()->followedRun(), int64_t(1), 30000);
            QTRY_COMPARE_WITH_TIMEOUT(window.statusWidget()->step(), qint64(1), 30000);
            QVERIFY(window.monitorFeed()->follower()->isLive());
            quiet = true;
            QTest::qWait(2 * 1000); // past the connector's one-second tick after the last rows
            refusing = true;
            RemoteMirror* mirror = window.remoteConnector()->mirror();
            QTRY_VERIFY_WITH_TIMEOUT(mirror->state() == RemoteMirror::State::Refused, 30000);
            QTRY_VERIFY_WITH_TIMEOUT(!window.monitorFeed()->follower()->isLive(), 10000);
            QCOMPARE(window.statusWidget()->etaText(), QString("interrupted"));
            // Disconnected: the readout no longer shows the remote run.
            window.disconnectRemote();
            QCOMPARE(window.statusWidget()->step(), qint64(0));
            QCOMPARE(window.statusWidget()->etaText(), QString("ETA –"));
        }
    }

    // Two windows on one server: each keeps a replica of its own (one replica written by two
    // mirrors would have both claim its live runs, and the second would be refused); the first
    // replica is taken again once its window disconnects.
    void twoWindowsOnOneServerKeepAReplicaEach()
    {
        const std::string runs = std::string(fake_runs_json()).replace(fake_runs_json().find("\"finished\""), 10, "\"running\"");
        httplib::Server fake;
        fake.Get("/v1/runs", [&](const httplib::Request&, httplib::Response& res) { res.set_content(runs, "application/json"); });
        fake.Get("/v1/runs/1/rows", [&](const httplib::Request&, httplib::Response& res) {
            res.set_content(R"({"run": 1, "status": "running", "scalars": [[1, "lr", 0.1]], "events": [],
                "next_from_step": 1, "next_after_event": 0, "more": false, "counts": {"scalars": 1, "events": 0}})",
                            "application/json");
        });
        const int port = fake.bind_to_any_port("127.0.0.1");
        std::thread serving([&] { fake.listen_after_bind(); });
        const QUrl url(QString("http://127.0.0.1:%1").arg(port));
        const QString dir = path("two-windows");
        {
            StoreConnection localA(path("a.sqlite")), localB(path("b.sqlite")), localC(path("c.sqlite"));
            RemoteConnector a(&localA, dir), b(&localB, dir), c(&localC, dir);
            QString error;
            QVERIFY2(a.connectTo(url, QString::fromStdString(kToken), &error), qPrintable(error));
            QVERIFY2(b.connectTo(url, QString::fromStdString(kToken), &error), qPrintable(error));
            QCOMPARE(a.mirror()->replicaPath(), QDir(dir).filePath(QString("127.0.0.1_%1.sqlite").arg(port)));
            QCOMPARE(b.mirror()->replicaPath(), QDir(dir).filePath(QString("127.0.0.1_%1-2.sqlite").arg(port)));
            for (RemoteConnector* window : {&a, &b}) {
                RemoteMirror* m = window->mirror();
                QVERIFY(QTest::qWaitFor([&] { return window->runningRun() == 1; }, 30000));
                QVERIFY2(m->state() == RemoteMirror::State::Connected, qPrintable(m->stateText()));
            }
            a.disconnectFromServer();
            QVERIFY2(c.connectTo(url, QString::fromStdString(kToken), &error), qPrintable(error));
            QCOMPARE(c.mirror()->replicaPath(), QDir(dir).filePath(QString("127.0.0.1_%1.sqlite").arg(port)));
            QVERIFY(QTest::qWaitFor([&] { return c.runningRun() == 1; }, 30000));
            QVERIFY2(c.mirror()->state() == RemoteMirror::State::Connected, qPrintable(c.mirror()->stateText()));
            QVERIFY2(b.mirror()->state() == RemoteMirror::State::Connected, qPrintable(b.mirror()->stateText()));
        }
        fake.stop();
        serving.join();
    }

    // The gate answers from the state that every command queued so far leaves, not from the
    // engine's last event, which trails the queue (a read-only audit's 8 clients spamming pause
    // and resume got 15 commands of 13,600 accepted and recorded that did nothing).
    void theControlGateAnswersFromTheQueue()
    {
        RemoteControlGate gate;
        QCOMPARE(gate.refusal("resume"), std::string("is not paused"));
        QCOMPARE(gate.refusal("pause"), std::string());
        gate.queued("pause");
        QCOMPARE(gate.refusal("pause"), std::string("is paused already"));
        gate.queued("resume"); // [pause, resume] queued
        gate.applied(true);    // the pause's event: the resume is still queued
        QCOMPARE(gate.refusal("resume"), std::string("is not paused"));
        QCOMPARE(gate.refusal("pause"), std::string());
        gate.applied(false);
        QCOMPARE(gate.refusal("resume"), std::string("is not paused"));
        // A watcher's pause (no command of ours pending) is the engine's own: a resume may follow.
        gate.applied(true);
        QCOMPARE(gate.refusal("resume"), std::string());
        QCOMPARE(gate.refusal("pause"), std::string("is paused already"));
        gate.queued("resume");
        gate.applied(false);
        // A stopping run drops a pause and a checkpoint; a precision switch before the end applies.
        QCOMPARE(gate.refusal("checkpoint"), std::string());
        gate.queued("stop");
        QCOMPARE(gate.refusal("pause"), std::string("is stopping"));
        QCOMPARE(gate.refusal("checkpoint"), std::string("is stopping"));
        QCOMPARE(gate.refusal("stop"), std::string("is stopping"));
        QCOMPARE(gate.refusal("layer_formats"), std::string());
        // A precision switch that came after the stop closed the queue: the run is stopping, not
        // at a last step that began (which is what it was told).
        QCOMPARE(gate.closed_reason(), std::string("is stopping"));
        QCOMPARE(RemoteControlGate().closed_reason(), std::string("is finishing (its last step has begun)"));
        // A stop from the terminal (Ctrl-C) refuses the same.
        RemoteControlGate terminal;
        QCOMPARE(terminal.refusal("checkpoint"), std::string());
        terminal.stopping();
        QCOMPARE(terminal.refusal("checkpoint"), std::string("is stopping"));
    }

    // With --allow-control a stop ends the run early and the store says who asked.
    void controlStopsTheRun()
    {
        const QString db = path("steer.sqlite");
        ServingProcess run;
        QVERIFY2(run.start({"run", project_, "--db", db, "--set", "training.steps=1000000", "--serve", "127.0.0.1:0",
                            "--allow-control"}),
                 qPrintable(run.output));
        httplib::Client client("127.0.0.1", run.port);
        const auto token = run.token.toStdString();
        auto r = client.Post("/v1/runs/2/control", auth(token), R"({"command": "stop"})", "application/json");
        QCOMPARE(r->status, 404);
        r = client.Post("/v1/runs/1/control", auth(token),
                        R"({"command": "layer_formats", "pattern": "lm_head", "forward": "fp7"})", "application/json");
        QCOMPARE(r->status, 400);
        QCOMPARE(json_of(r->body)["error"].toString(), QString("unknown number format 'fp7'"));
        r = client.Post("/v1/runs/1/control", auth(token),
                        R"({"command": "layer_formats", "pattern": "*", "forward": "e8m0"})", "application/json");
        QCOMPARE(r->status, 400); // a scale format, which the run used to take and train in
        QVERIFY2(json_of(r->body)["error"].toString().startsWith("'e8m0' is no GEMM operand's format"),
                 qPrintable(r->body.c_str()));
        // curl -d without a content type sends a form: the answer says how to send JSON.
        r = client.Post("/v1/runs/1/control", auth(token), R"({"command": "pause"})",
                        "application/x-www-form-urlencoded");
        QCOMPARE(r->status, 400);
        QVERIFY2(json_of(r->body)["error"].toString().startsWith(
                     "send the command as a JSON body with the header Content-Type: application/json"),
                 qPrintable(r->body.c_str()));
        r = client.Post("/v1/runs/1/control", auth(token),
                        R"({"command": "layer_formats", "pattern": "lm_head", "forward": "e4m3", "scaling": "fp4"})",
                        "application/json");
        QCOMPARE(r->status, 400);
        QVERIFY2(json_of(r->body)["error"].toString().startsWith("unknown scaling recipe 'fp4' (one of delayed, "),
                 qPrintable(r->body.c_str()));
        r = client.Post("/v1/runs/1/control", auth(token), R"({"command": "pause", "scaling": "nvfp4"})",
                        "application/json");
        QCOMPARE(r->status, 400);
        // A pause of a paused run, or a resume of a running one, changes nothing: refused, and
        // not recorded as steering (both were accepted and recorded, a read-only audit found).
        const auto control = [&](const char* command) {
            return client.Post("/v1/runs/1/control", auth(token), std::string(R"({"command": ")") + command + "\"}",
                               "application/json");
        };
        r = control("resume");
        QCOMPARE(r->status, 409);
        QCOMPARE(json_of(r->body)["error"].toString(), QString("run 1 is not paused: nothing to resume"));
        QCOMPARE(control("pause")->status, 200);
        r = control("pause");
        QCOMPARE(r->status, 409);
        QCOMPARE(json_of(r->body)["error"].toString(), QString("run 1 is paused already: nothing to pause"));
        QCOMPARE(control("resume")->status, 200);
        r = client.Post("/v1/runs/1/control", auth(token),
                        R"({"command": "layer_formats", "pattern": "lm_head", "forward": "bf16"})", "application/json");
        QCOMPARE(r->status, 200);
        QCOMPARE(json_of(r->body)["accepted"].toString(), QString("layer_formats"));
        r = client.Post("/v1/runs/1/control", auth(token),
                        R"({"command": "layer_formats", "pattern": "blocks.0.mlp.*", "forward": "e4m3", "scaling": "nvfp4"})",
                        "application/json");
        QCOMPARE(r->status, 200);
        // The run list names the run this process trains: the window steers that one, not
        // the newest "running" run of the store (another process's would answer 404).
        r = client.Get("/v1/runs", auth(token));
        QCOMPARE(json_of(r->body)["training_run"].toInt(), 1);
        // The window's client sends it, as Run > Remote Run > Stop does.
        RemoteMirror mirror(QUrl(QString("http://127.0.0.1:%1").arg(run.port)), run.token, path("steer-replica.sqlite"));
        QCOMPARE(mirror.trainingRun(), qint64(-1));
        mirror.start();
        QVERIFY(QTest::qWaitFor([&] { return mirror.trainingRun() == 1; }, 30000));
        QSignalSpy answered(&mirror, &RemoteMirror::commandAnswered);
        mirror.sendCommand(1, "stop");
        QVERIFY(answered.wait(30000));
        QCOMPARE(answered.at(0).at(2).toBool(), true);
        QCOMPARE(answered.at(0).at(3).toString(), QString("stop sent to run 1"));
        // The server stays up ~2 s after the end, for the last rows: a command is refused then.
        QVERIFY(QTest::qWaitFor(
            [&] { return RunStore::open_read_only(db.toStdString())->list_runs().at(0).status == RunStatus::Stopped; },
            120000));
        r = client.Post("/v1/runs/1/control", auth(token), R"({"command": "pause"})", "application/json");
        QVERIFY(r);
        QCOMPARE(r->status, 409);
        QCOMPARE(json_of(r->body)["error"].toString(), QString("run 1 has ended: nothing to pause"));
        QVERIFY(QTest::qWaitFor([&] { return run.process->state() == QProcess::NotRunning; }, 120000));
        QCOMPARE(run.process->exitCode(), 0);
        const auto store = RunStore::open_read_only(db.toStdString());
        const auto info = store->list_runs().at(0);
        QCOMPARE(info.status, RunStatus::Stopped);
        QVERIFY(info.last_step < 1000000);
        QStringList remote;
        int precisionChanges = 0;
        for (const auto& e : store->events(1)) {
            if (e.kind == "remote_control") remote << QString::fromStdString(e.message);
            if (e.event.kind != EventKind::PrecisionChanged) continue;
            ++precisionChanges;
            QVERIFY(e.event.new_scaling == (e.event.pattern == "lm_head" ? std::nullopt : std::optional(Fp8Scaling::NvFp4)));
        }
        QCOMPARE(remote, QStringList({"pause requested by remote 127.0.0.1", "resume requested by remote 127.0.0.1",
                                      "layer_formats lm_head -> bf16/bf16/bf16 requested by remote 127.0.0.1",
                                      "layer_formats blocks.0.mlp.* -> e4m3/e4m3/e4m3 nvfp4 requested by remote 127.0.0.1",
                                      "stop requested by remote 127.0.0.1"}));
        QCOMPARE(precisionChanges, 2); // applied by the trainer at a step boundary
    }

    // `resume --serve` serves and takes commands as `run --serve` does (a torchrun restart
    // resumes with the first attempt's serving too): the resumed run is stopped from here.
    void aResumedRunIsServedAndSteered()
    {
        const QString db = path("resume-served.sqlite");
        QProcess first;
        first.start(MANTISSA_TRAIN_EXE, {"run", project_, "--db", db, "--set", "training.steps=4", "--set",
                                         "training.checkpoint_interval=2"});
        QVERIFY(first.waitForFinished(120000));
        QCOMPARE(first.exitCode(), 0);
        ServingProcess resumed;
        QVERIFY2(resumed.start({"resume", "1", "--db", db, "--set", "training.steps=1000000", "--serve", "127.0.0.1:0",
                                "--allow-control"}),
                 qPrintable(resumed.output));
        httplib::Client client("127.0.0.1", resumed.port);
        const auto r = client.Post("/v1/runs/1/control", auth(resumed.token.toStdString()), R"({"command": "stop"})",
                                   "application/json");
        QVERIFY(r);
        QCOMPARE(r->status, 200);
        QVERIFY(QTest::qWaitFor([&] { return resumed.process->state() == QProcess::NotRunning; }, 120000));
        QCOMPARE(resumed.process->exitCode(), 0);
        const auto info = RunStore::open_read_only(db.toStdString())->list_runs().at(0);
        QCOMPARE(info.status, RunStatus::Stopped);
        QVERIFY(info.last_step >= 4 && info.last_step < 1000000);
        // Recorded at the step the run was at: from 4 on, never at 0 (before the checkpoint).
        for (const auto& e : RunStore::open_read_only(db.toStdString())->events(1))
            if (e.kind == "remote_control") QVERIFY2(e.step >= 4, qPrintable(QString::number(e.step)));
    }

    // `run --serve PORT` on a port that something already holds: refused, and no run is left
    // behind (it used to leave a failed one, made before the bind).
    void aBusyPortLeavesNoRun()
    {
        httplib::Server holder;
        const int port = holder.bind_to_any_port("127.0.0.1");
        QVERIFY(port > 0);
        std::thread listening([&] { holder.listen_after_bind(); }); // bound alone, a port may be bound again
        QVERIFY(QTest::qWaitFor([&] { return holder.is_running(); }, 10000));
        const QString db = path("busy-port.sqlite");
        QProcess p;
        p.start(MANTISSA_TRAIN_EXE, {"run", project_, "--db", db, "--serve", QString("127.0.0.1:%1").arg(port)});
        QVERIFY(p.waitForFinished(120000));
        holder.stop();
        listening.join();
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QCOMPARE(p.exitCode(), 2);
        QVERIFY2(err.contains(QString("cannot listen on 127.0.0.1:%1 (in use: another server on it?)").arg(port)),
                 qPrintable(err));
        // Refused before the store and the token file are made: neither was left behind.
        QVERIFY(!QFile::exists(db));
        QVERIFY(!QFile::exists(db + ".token"));
    }

    // The last step trained, the final evaluation running: no boundary is left to apply a
    // command. It is refused (it used to be "accepted" and recorded, and never made).
    void aCommandDuringTheFinalEvaluationIsRefused()
    {
        const QString db = path("finishing.sqlite");
        ServingProcess run;
        QVERIFY2(run.start({"run", project_, "--db", db, "--set", "training.steps=3", "--set", "eval.batches=10000",
                            "--serve", "127.0.0.1:0", "--allow-control"}),
                 qPrintable(run.output));
        QVERIFY(QTest::qWaitFor( // the server listens before the run is made: there may be none yet
            [&] {
                const auto runs = RunStore::open_read_only(db.toStdString())->list_runs();
                return !runs.empty() && runs[0].last_step == 3;
            },
            120000));
        httplib::Client client("127.0.0.1", run.port);
        const auto r = client.Post("/v1/runs/1/control", auth(run.token.toStdString()),
                                   R"({"command": "layer_formats", "pattern": "lm_head", "forward": "bf16"})",
                                   "application/json");
        QVERIFY(r);
        QCOMPARE(r->status, 409);
        QCOMPARE(json_of(r->body)["error"].toString(),
                 QString("run 1 is finishing (its last step has begun): nothing to layer_formats"));
        QVERIFY(RunStore::open_read_only(db.toStdString())->list_runs().at(0).status == RunStatus::Running);
        QVERIFY(QTest::qWaitFor([&] { return run.process->state() == QProcess::NotRunning; }, 300000));
        QCOMPARE(run.process->exitCode(), 0);
        for (const auto& e : RunStore::open_read_only(db.toStdString())->events(1))
            QVERIFY2(e.kind != "remote_control", e.message.c_str());
    }
};

QTEST_MAIN(TestRemote)
#include "test_remote.moc"
