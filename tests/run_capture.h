// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// What a bit-exactness test compares between two runs: every step's loss and loss scale,
// every telemetry frame, and the final master weights as the bytes of a safetensors export.

#include <QFile>
#include <QString>
#include <QTemporaryDir>

#include <cstring>
#include <optional>
#include <vector>

#include "trainer.h"

struct RunCapture : mantissa::TelemetrySink {
    std::vector<mantissa::StepMetrics> steps;
    std::vector<mantissa::LayerStatsFrame> frames;
    void on_step(const mantissa::StepMetrics& m) override { steps.push_back(m); }
    void on_eval(const mantissa::EvalMetrics&) override {}
    void on_event(const mantissa::RunEvent&) override {}
    void on_layer_stats(const mantissa::LayerStatsFrame& f) override { frames.push_back(f); }

    std::vector<int64_t> frame_steps() const
    {
        std::vector<int64_t> out;
        for (const auto& f : frames) out.push_back(f.step);
        return out;
    }
};

// The tensor bytes of a safetensors file (what follows the header; the header's metadata
// holds the project, which differs between the runs compared). Empty if unreadable.
inline QByteArray safetensors_data(const QString& path)
{
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    const QByteArray bytes = f.readAll();
    if (bytes.size() < 8) return {};
    quint64 header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(bytes[i]);
    return bytes.mid(static_cast<qsizetype>(8 + header_length));
}

// The trainer's master weights, exported as safetensors: the tensor bytes.
inline QByteArray exported_weights(const mantissa::Trainer& trainer)
{
    QTemporaryDir dir;
    const QString path = dir.filePath("weights.safetensors");
    trainer.export_safetensors(path.toStdString());
    return safetensors_data(path);
}

// Trains `config` from its start into `sink`, frames handed on at once or a step later (as on
// CUDA) when `deferred_frames` says so; the final master weights as exported_weights.
inline QByteArray train_and_export(const mantissa::ProjectConfig& config, mantissa::TelemetrySink& sink,
                                   std::optional<bool> deferred_frames = std::nullopt)
{
    mantissa::Trainer trainer(config);
    if (deferred_frames) trainer.set_deferred_frames(*deferred_frames);
    trainer.run(sink);
    return exported_weights(trainer);
}

// Bit equality of two doubles (== would call two NaNs different and -0 equal to 0).
inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Empty when the two steps are bit-identical in what training computes; otherwise what differs.
inline QString step_difference(const mantissa::StepMetrics& a, const mantissa::StepMetrics& b)
{
    if (a.step != b.step) return QString("step %1 vs %2").arg(a.step).arg(b.step);
    if (!same_bits(a.train_loss, b.train_loss))
        return QString("step %1: loss %2 vs %3").arg(a.step).arg(a.train_loss, 0, 'g', 17).arg(b.train_loss, 0, 'g', 17);
    if (!same_bits(a.grad_norm, b.grad_norm))
        return QString("step %1: grad norm %2 vs %3").arg(a.step).arg(a.grad_norm, 0, 'g', 17).arg(b.grad_norm, 0, 'g', 17);
    if (!same_bits(a.loss_scale, b.loss_scale))
        return QString("step %1: loss scale %2 vs %3").arg(a.step).arg(a.loss_scale).arg(b.loss_scale);
    if (a.skipped != b.skipped) return QString("step %1: skipped differs").arg(a.step);
    return {};
}

// Empty when the two frames measured the same tensors to the bit (memory excluded).
inline QString frame_difference(const mantissa::LayerStatsFrame& a, const mantissa::LayerStatsFrame& b)
{
    if (a.step != b.step) return QString("frame step %1 vs %2").arg(a.step).arg(b.step);
    if (a.tensors.size() != b.tensors.size())
        return QString("frame %1: %2 vs %3 tensors").arg(a.step).arg(a.tensors.size()).arg(b.tensors.size());
    for (size_t i = 0; i < a.tensors.size(); ++i) {
        const auto &x = a.tensors[i], &y = b.tensors[i];
        const bool same = x.layer == y.layer && x.role == y.role && x.format == y.format &&
                          x.first_exponent == y.first_exponent && x.exponent_counts == y.exponent_counts &&
                          x.count == y.count && x.zeros == y.zeros && x.infs == y.infs && x.nans == y.nans &&
                          same_bits(x.underflow, y.underflow) && same_bits(x.subnormal, y.subnormal) &&
                          same_bits(x.overflow, y.overflow) && same_bits(x.amax, y.amax) &&
                          same_bits(x.scale, y.scale) && same_bits(x.quant_mse, y.quant_mse) &&
                          same_bits(x.quant_snr_db, y.quant_snr_db) && same_bits(x.update_ratio, y.update_ratio);
        if (!same)
            return QString("frame %1: %2 %3 differs (amax %4 vs %5)").arg(a.step).arg(QString::fromStdString(x.layer),
                       QString::fromStdString(x.role)).arg(x.amax, 0, 'g', 17).arg(y.amax, 0, 'g', 17);
    }
    if (a.attention_max_logit != b.attention_max_logit) return QString("frame %1: attention max logit differs").arg(a.step);
    if (!same_bits(a.log_z_mean, b.log_z_mean) || !same_bits(a.log_z_max, b.log_z_max))
        return QString("frame %1: log Z differs").arg(a.step);
    return {};
}
