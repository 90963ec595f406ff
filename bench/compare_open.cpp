// SPDX-License-Identifier: GPL-3.0-or-later
// How long the workbench takes to open saved runs: the Runs page listing ~300 runs, and the
// Compare page opening a run of 1,000,000 train/loss rows and drawing it (then a second one
// beside it, then re-smoothing both). Offscreen, 1600x1000, forced immediate redraws; the
// median of several repetitions.
//
//   compare_open [--runs N] [--rows M] [--reps R]          (QT_QPA_PLATFORM=offscreen)

#include <QApplication>
#include <QElapsedTimer>
#include <QTemporaryDir>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pages/compare_page.h"
#include "plots/compare_plot.h"
#include "project_config.h"
#include "run_store.h"
#include "pages/runs_page.h"
#include "controller/store_connection.h"

using namespace mantissa;

namespace {

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

double ms_since(const QElapsedTimer& t) { return static_cast<double>(t.nsecsElapsed()) / 1e6; }

} // namespace

int main(int argc, char* argv[])
{
    QApplication app(argc, argv);
    int64_t small_runs = 300, rows = 1000000, reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string key = argv[i];
        const int64_t value = std::atoll(argv[i + 1]);
        if (key == "--runs") small_runs = value;
        else if (key == "--rows") rows = value;
        else if (key == "--reps") reps = value;
    }
    QTemporaryDir dir;
    const QString path = dir.filePath(QStringLiteral("compare.sqlite"));
    int64_t big[2] = {0, 0};
    {
        RunStore store(path.toStdString());
        for (int r = 0; r < 2; ++r) {
            ProjectConfig c;
            c.name = r ? "long-b" : "long-a";
            c.precision.preset = r ? "bf16" : "fp32";
            big[r] = store.create_run(c.name, "", to_json_text(c));
            for (int64_t s = 1; s <= rows; ++s) {
                store.append_scalar(big[r], s, "train/loss", 3.0 / std::sqrt(double(s)) + 0.001 * r);
                if (s % 10000 == 0) store.append_scalar(big[r], s, "val/loss", 3.0 / std::sqrt(double(s)));
            }
            store.finish_run(big[r], RunStatus::Finished);
        }
        for (int64_t r = 0; r < small_runs; ++r) {
            ProjectConfig c;
            c.name = "small-" + std::to_string(r);
            const int64_t id = store.create_run(c.name, "", to_json_text(c));
            for (int64_t s = 1; s <= 100; ++s) store.append_scalar(id, s, "train/loss", 3.0 / std::sqrt(double(s)));
            store.finish_run(id, RunStatus::Finished);
        }
    }
    std::printf("store: %lld runs, two of them with %lld train/loss rows each\n",
                static_cast<long long>(small_runs + 2), static_cast<long long>(rows));

    StoreConnection connection(path);
    std::vector<double> list_ms, open_ms, second_ms, smooth_ms;
    int points = 0;
    for (int64_t rep = 0; rep < reps; ++rep) {
        RunsPage runs(&connection);
        QElapsedTimer t;
        t.start();
        runs.refresh();
        list_ms.push_back(ms_since(t));

        ComparePage page(&connection);
        page.resize(1600, 1000);
        page.show();
        QApplication::processEvents();
        t.restart();
        page.setRuns({big[0]});
        page.curvePlot()->replot(QCustomPlot::rpImmediateRefresh);
        open_ms.push_back(ms_since(t));
        t.restart();
        page.setRuns({big[0], big[1]});
        page.curvePlot()->replot(QCustomPlot::rpImmediateRefresh);
        second_ms.push_back(ms_since(t));
        t.restart();
        page.setSmoothing(0.9);
        page.curvePlot()->replot(QCustomPlot::rpImmediateRefresh);
        smooth_ms.push_back(ms_since(t));
        points = page.curvePlot()->rawGraph(0)->dataCount();
    }
    std::printf("Runs page: list %lld runs            %8.1f ms (median of %lld)\n", static_cast<long long>(small_runs + 2),
                median(list_ms), static_cast<long long>(reps));
    std::printf("Compare: open a %lld-row run, draw  %8.1f ms\n", static_cast<long long>(rows), median(open_ms));
    std::printf("Compare: add a second one, draw     %8.1f ms (includes the divergence search)\n", median(second_ms));
    std::printf("Compare: re-smooth both, draw       %8.1f ms\n", median(smooth_ms));
    std::printf("points handed to QCustomPlot per curve: %d\n", points);
    return 0;
}
