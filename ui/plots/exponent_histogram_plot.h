// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The exponent histogram of one tensor at one telemetry frame: how many values fall in each
// binade [2^e, 2^(e+1)), against the bands of the format the tensor was cast to, as the cast
// sees them (in the tensor's own units, i.e. shifted by the FP8 per-tensor scale).

#include <qcustomplot.h>

#include <cstdint>
#include <vector>

#include "models/run_history.h"

namespace mantissa {

class ExponentHistogramPlot : public QCustomPlot {
    Q_OBJECT

public:
    explicit ExponentHistogramPlot(QWidget* parent = nullptr);

    void setHistory(const RunHistory* history); // not owned
    void setTensor(const QString& layer, const QString& role);
    void setStep(int64_t step); // shows the histogram frame nearest to step
    int64_t shownStep() const { return shownStep_; } // the frame actually shown, -1 if none

    // Rebuilds if the history or a setting changed; true when a replot is needed. Never
    // replots itself.
    bool refresh();

    // For tests.
    QCPBars* bars() const { return bars_; }
    struct Band {
        QString name;
        double lowExponent;  // log2|x| in the tensor's own units (the cast's edges shifted by -log2(scale))
        double highExponent;
    };
    QVector<Band> bands() const { return bands_; } // what is drawn for the current tensor's format
    QString title() const;                          // the title line as drawn
    QString specialsText() const;                   // "zeros 12.3% · inf 0 · NaN 0"

private:
    // What a rebuild showed: nothing to redraw while it stays the same.
    struct Shown {
        const RunHistory* history = nullptr;
        int64_t frameStep = -1;
        QString layer, role;
        // The histogram's content (frames are immutable, but a reset history can refill).
        int firstExponent = 0;
        std::vector<int64_t> counts;
        int64_t count = 0, zeros = 0, infs = 0, nans = 0;
        NumberFormat format = NumberFormat::FP32;
        double scale = 1.0, underflow = 0.0, subnormal = 0.0, overflow = 0.0;
        double lossScale = 1.0; // a gradient's step's, which may arrive after its frame
        bool operator==(const Shown&) const = default;
    };

    bool rebuild(); // true when something drawn changed
    void clearBands();

    const RunHistory* history_ = nullptr;
    QString layer_;
    QString role_ = QStringLiteral("grad_output");
    int64_t step_ = -1; // -1: the newest frame
    int64_t shownStep_ = -1;
    uint64_t builtRevision_ = 0;
    bool dirty_ = true;
    bool built_ = false;
    Shown shown_;

    QCPBars* bars_ = nullptr;
    QCPTextElement* title_ = nullptr;
    QCPTextElement* subtitle_ = nullptr;
    QCPItemText* specials_ = nullptr;
    QCPItemText* emptyText_ = nullptr;
    QVector<Band> bands_;
    QList<QCPAbstractItem*> bandItems_;
};

} // namespace mantissa
