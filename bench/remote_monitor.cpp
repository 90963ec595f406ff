// SPDX-License-Identifier: GPL-3.0-or-later
// The window's side of a remote run (docs/REMOTE.md, bench/remote.py drives it): a
// RemoteMirror into a replica, a RunFollower on it and a MonitorPage, offscreen at 1600x1000.
//
//   remote_monitor follow URL TOKEN REPLICA   prints "drawn STEP T" for every Monitor frame
//                                             (T: CLOCK_MONOTONIC seconds, as Python's
//                                             time.perf_counter) until run 1 has ended
//   remote_monitor open URL TOKEN REPLICA     connects to a server whose run 1 has ended and
//                                             prints the time until its whole loss curve is drawn
//   remote_monitor generate DB ROWS           writes a finished run of ROWS train/loss rows
//
// With $REMOTE_MONITOR_NO_OFFER set, the Monitor reads the run from the replica alone (the
// mirror's fetched pages are not offered to the follower), as before 2026-12-01.
// With $REMOTE_MONITOR_SCREENSHOT set, the page is saved there (PNG) at most once a second
// while it draws, and at the end.

#include <QApplication>
#include <QElapsedTimer>
#include <QTimer>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>

#include "controller/run_follower.h"
#include "pages/monitor_page.h"
#include "remote/remote_mirror.h"
#include "run_store.h"

using namespace mantissa;

namespace {

double monotonic_s()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

int generate(const std::string& db, int64_t rows)
{
    RunStore store(db);
    const int64_t id = store.create_run("one-million", "synthetic.json", "{}");
    for (int64_t step = 1; step <= rows; ++step)
        store.append_scalar(id, step, "train/loss", 4.0 * std::exp(-double(step) / double(rows)) + 0.001 * double(step % 17));
    store.finish_run(id, RunStatus::Finished);
    std::printf("wrote %lld rows\n", static_cast<long long>(rows));
    return 0;
}

} // namespace

int main(int argc, char** argv)
{
    QApplication app(argc, argv);
    const QStringList args = app.arguments();
    if (args.size() == 4 && args[1] == "generate") return generate(args[2].toStdString(), args[3].toLongLong());
    if (args.size() != 5 || (args[1] != "follow" && args[1] != "open")) {
        std::fprintf(stderr, "usage: remote_monitor follow|open URL TOKEN REPLICA | generate DB ROWS\n");
        return 2;
    }
    const bool open = args[1] == "open";
    QElapsedTimer clock;
    clock.start();
    RemoteMirror mirror(QUrl(args[2]), args[3], args[4]);
    MonitorPage page;
    page.resize(1600, 1000);
    page.show();
    page.setFrameBudget(MonitorPage::kSpareCoreFrameBudget);
    RunFollower follower;
    follower.setCompleteness([&](int64_t id) { return mirror.runComplete(id); });
    QObject::connect(&follower, &RunFollower::opened, &page, [&](const FollowedRun& r) { page.reset(r.tokensPerStep, r.layers); });
    QObject::connect(&follower, &RunFollower::batchReady, &page, &MonitorPage::ingest);
    QObject::connect(&mirror, &RemoteMirror::rowsArrived, &follower, [&](qint64 id) {
        if (id == 1) follower.pollSoon();
    });
    // As MonitorFeed does; $REMOTE_MONITOR_NO_OFFER: the Monitor reads the replica alone.
    if (!qEnvironmentVariableIsSet("REMOTE_MONITOR_NO_OFFER"))
        QObject::connect(&mirror, &RemoteMirror::scalarsFetched, &follower,
                         [&](qint64 id, qint64 from, const ScalarPage& p) { follower.offerScalars(id, from, p); });
    // When the replica last received rows: after that, an open is the Monitor reading and drawing.
    double mirroredMs = -1;
    QObject::connect(&mirror, &RemoteMirror::rowsArrived, &page,
                     [&] { mirroredMs = double(clock.nsecsElapsed()) / 1e6; });
    const QString screenshot = qEnvironmentVariable("REMOTE_MONITOR_SCREENSHOT");
    QElapsedTimer lastShot;
    double firstDrawMs = -1;
    // When a frame first showed each newest step: at the end, the one of the run's last step
    // is when the whole curve was drawn (steps are ingested in order).
    qint64 newestDrawn = 0;
    double newestDrawnMs = -1;
    QObject::connect(&page, &MonitorPage::frameRendered, &page, [&](qint64 step) {
        if (step <= 0) return;
        if (firstDrawMs < 0) firstDrawMs = double(clock.nsecsElapsed()) / 1e6;
        if (step > newestDrawn) {
            newestDrawn = step;
            newestDrawnMs = double(clock.nsecsElapsed()) / 1e6;
        }
        if (!open) std::printf("drawn %lld %.6f\n", static_cast<long long>(step), monotonic_s());
        std::fflush(stdout);
        if (!screenshot.isEmpty() && (!lastShot.isValid() || lastShot.elapsed() > 1000)) {
            page.grab().save(screenshot);
            lastShot.start();
        }
    });
    QObject::connect(&follower, &RunFollower::ended, &page, [&] {
        page.renderNow(); // the last state, whatever the frame rate skipped
        if (open)
            std::printf("first frame %.0f ms, whole loss curve (%zu points) drawn %.0f ms after connecting "
                        "(the replica's last rows written after %.0f ms, the run read to its end after %.0f ms)\n",
                        firstDrawMs, page.history().steps().size(), newestDrawnMs, mirroredMs,
                        double(clock.nsecsElapsed()) / 1e6);
        if (!screenshot.isEmpty()) page.grab().save(screenshot);
        std::printf("done\n");
        std::fflush(stdout);
        app.quit();
    });
    // The follower starts once the replica holds run 1 ($REMOTE_MONITOR_MIRROR_ONLY: never;
    // the mirror's copy alone is timed).
    const bool mirrorOnly = qEnvironmentVariableIsSet("REMOTE_MONITOR_MIRROR_ONLY");
    QTimer start;
    QObject::connect(&start, &QTimer::timeout, &start, [&] {
        if (mirrorOnly) {
            if (!mirror.runComplete(1)) return;
            std::printf("mirror holds run 1 whole %.0f ms after connecting (%lld bytes)\n",
                        double(clock.nsecsElapsed()) / 1e6, static_cast<long long>(mirror.bytesReceived()));
            app.quit();
        } else if (follower.follow(mirror.replicaPath(), 1)) {
            start.stop();
        }
    });
    mirror.start();
    start.start(20);
    return app.exec();
}
