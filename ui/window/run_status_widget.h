// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The status bar's run readout: step / total with a progress bar, loss, val loss, tokens/s
// and an ETA. The ETA comes from wall-clock progress over the last half minute, not from
// step times, so evaluations, sampling and pauses are priced in the way a user waits for them.

#include <QElapsedTimer>
#include <QTimer>
#include <QWidget>

#include <deque>
#include <optional>
#include <utility>

#include "controller/snapshot_buffer.h"

class QLabel;
class QProgressBar;

namespace mantissa {

class RunStatusWidget : public QWidget {
    Q_OBJECT

public:
    explicit RunStatusWidget(QWidget* parent = nullptr);

    void reset(qint64 totalSteps);
    void setTotalSteps(qint64 totalSteps);
    void update(const TelemetryBatch& batch);
    void setPaused(bool paused);
    // The run ended: the ETA reads `outcome` ("finished", "stopped", "failed"), "done" when unknown.
    void finish(const QString& outcome = QString());

    qint64 step() const { return step_; }
    // Seconds left, or -1 while the rate is unknown.
    double etaSeconds() const;
    QString etaText() const;
    double tokensPerS() const { return tokensPerS_; }

    // Tests feed wall-clock samples directly instead of waiting. `trainedSeconds`: the
    // training time of the steps since the last sample (their step_time_ms), where known. Far
    // more of it than wall time passed means they are history read back in a burst (Show in
    // Monitor on a live run): the rate starts again from here instead of counting the burst.
    void addProgressSample(double wallSeconds, qint64 step, double trainedSeconds = 0.0);

    // Labels repaint at most this often: text changing 25 times a second is unreadable and
    // costs GUI time that training shares.
    static constexpr int kLabelIntervalMs = 250;
    // Now, not at the label timer's next turn: a screenshot grabbed before it read "step 0".
    void refreshLabels();

private:
    void refreshLabelsSoon();

    QProgressBar* progress_ = nullptr;
    QLabel* lossLabel_ = nullptr;
    QLabel* valLabel_ = nullptr;
    QLabel* speedLabel_ = nullptr;
    QLabel* etaLabel_ = nullptr;

    QElapsedTimer clock_;
    QElapsedTimer sinceLabels_;
    QTimer labelTimer_;
    std::deque<std::pair<double, qint64>> samples_; // (wall s, step), the last ~30 s
    qint64 totalSteps_ = 0;
    qint64 step_ = 0;
    std::optional<double> trainLoss_; // NaN and inf are shown: they are what a user watches for
    std::optional<double> valLoss_;
    double tokensPerS_ = 0.0;
    double stepTimeMs_ = 0.0;
    bool paused_ = false;
    bool finished_ = false;
    QString outcome_;
};

QString format_duration(double seconds); // "42 s", "3 min 05 s", "2 h 07 min"

} // namespace mantissa
