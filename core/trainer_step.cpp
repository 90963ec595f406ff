// SPDX-License-Identifier: GPL-3.0-or-later
// One optimizer step: forward and backward over the micro-batches, the loss-scale policy,
// clipping, and the update, all queued on the device; the step's one read runs beside the update.
#include "trainer_impl.h"

#include <limits>

namespace mantissa {

StepOutcome Trainer::Impl::train_step(bool armed, TelemetryStep& telemetry, TelemetrySink& sink)
{
    const auto& cfg = config;
    StepOutcome out;
    out.learning_rate = learning_rate_at(cfg.optimizer, step);
    out.loss_scale = scaler.scale();
    device_scale.follow(scaler, device);
    if (armed) telemetry.arm(model);
    // The step's losses add up on the device (FP64, the order the host would add them in):
    // the step reads them back once, with the gradient norms.
    auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
    dp_fp8_begin_step();
    bool first = true;
    for (int64_t micro = 0; micro < cfg.training.grad_accum; ++micro) {
        auto [x, y] = train_batches->next(); // (B, T) each
        // Data parallel: every rank draws every micro-batch, so that the sampler's state is
        // the same on all of them (and in a checkpoint), and runs only its own.
        if (!dp_owns_micro_batch(micro)) continue;
        x = to_device(x);
        y = to_device(y);
        seed_dropout(micro);
        auto loss = model->loss(model->forward(x), y); // scalar
        dp_before_backward(micro);
        // The scale multiplies the loss so that small gradients survive FP16's range. It is
        // the device's copy: the host need not know it before the backward is queued.
        const auto scaled = scaler.enabled() ? loss * device_scale.scale() : loss;
        (scaled / static_cast<double>(cfg.training.grad_accum)).backward();
        loss_sum = loss_sum + loss.detach().to(torch::kFloat64);
        if (armed && first) telemetry.disarm(model); // statistics of the first micro-batch
        first = false;
    }
    // Data parallel: gradients and loss summed over the ranks (each backward already divided
    // by the global grad_accum), FP8 amaxes reduced with MAX. Everything after this point sees
    // the same values on every rank: the finite check, so every rank skips the same steps, and
    // the norms and the update.
    out.allreduce_ms = dp_reduce_step(loss_sum, out.overlapped_buckets);
    if (armed) telemetry.remember_weights(model);
    // From here on, everything is queued on the device and decided there: unscaling (before
    // the measure, so that the norms and the finite check see the true gradients), clipping,
    // the skip (the fused AdamW's found_inf) and the next scale.
    if (scaler.enabled()) gradients.scale(device_scale.inverse());
    const auto measured = gradients.measure(scaler.enabled());
    // The step's one host read is queued here, behind the measure and ahead of the update: the
    // loss, the norms, the layers whose gradients were not finite, and the loss-scale state
    // this step used. The host waits for it below, while the GPU runs the update.
    std::vector<torch::Tensor> extras{loss_sum};
    if (scaler.enabled()) extras.push_back(device_scale.state_tensor());
    const auto pending = gradients.start_read(measured, extras);
    gradients.clip(measured, cfg.optimizer.grad_clip);
    optimizer->step(out.learning_rate, measured.found_inf);
    // (No gradient at all, which no model here has, is a clean step, as the host counts it.)
    if (scaler.enabled())
        device_scale.update(measured.found_inf.defined() ? measured.found_inf : torch::zeros_like(device_scale.scale()));
    // Every step casts its weights afresh, skipped or not (as TransformerEngine does): a cast
    // kept across a skipped step was made under the scale before that step's amax, so a cast
    // that overflowed stayed NaN and every later step was skipped too, and a resumed run
    // (which casts afresh) parted from the straight one.
    for (const auto& g : model->gemm_layers()) g->invalidate_weight_cache();
    optimizer->zero_grad();

    const auto report = gradients.finish_read(measured, pending); // the step's one host sync
    out.train_loss = report.extras[0] / static_cast<double>(cfg.training.grad_accum);
    // The device's state before this step's update is the host's before its replay of it.
    if (scaler.enabled()) device_scale.check(scaler, report.extras.data() + 1);
    out.skipped = update_loss_scale(out.loss_scale, report.non_finite_layers, out, sink);
    if (scaler.enabled()) device_scale.expect(scaler);
    out.layer_grad_norms = report.layer_norms;
    out.grad_norm = out.skipped ? std::numeric_limits<double>::quiet_NaN() : report.total_norm;
    return out;
}

void Trainer::Impl::rescale_gradient_amaxes(double measured_under)
{
    // to_float32: inf (a scale that backed off to 0) changes nothing, where a cast would be UB.
    if (const double ratio = scaler.scale() / measured_under; ratio != 1.0)
        for (auto& g : model->gemm_layers()) g->rescale_gradient_amaxes(to_float32(ratio));
}

void Trainer::Impl::seed_dropout(int64_t micro) const
{
    if (config.model.dropout <= 0.0) return;
    // splitmix64 of (seed, step, micro-batch): every micro-batch's masks are its own, whichever
    // process runs it, so W data-parallel ranks draw the single process's masks, and a resumed
    // run draws the uninterrupted run's. Seeds the CPU and CUDA generators (host only, no sync).
    uint64_t z = config.training.seed + 0x9E3779B97F4A7C15ULL * (static_cast<uint64_t>(step) * 1024 + static_cast<uint64_t>(micro) + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    torch::manual_seed(z ^ (z >> 31));
}

torch::Tensor Trainer::Impl::to_device(const torch::Tensor& host) const
{
    if (!device.is_cuda()) return host;
    // Pinned and asynchronous: a pageable copy would make the host wait for the GPU.
    return host.pin_memory().to(device, /*non_blocking=*/true);
}

bool Trainer::Impl::update_loss_scale(double used_scale, const std::vector<std::string>& bad_layers,
                                      StepOutcome& outcome, TelemetrySink& sink)
{
    if (!scaler.enabled()) return false;
    const auto result = scaler.update(!bad_layers.empty());
    RunEvent e;
    e.step = step + 1;
    e.layers = bad_layers;
    e.old_scale = used_scale;
    e.new_scale = scaler.scale();
    if (result == LossScaler::Outcome::SkippedAndBackedOff) {
        e.kind = EventKind::LossScaleBackoff;
        sink.on_event(e);
    } else if (result == LossScaler::Outcome::Skipped) {
        e.kind = EventKind::StepSkipped;
        sink.on_event(e);
    } else if (result == LossScaler::Outcome::Grew) {
        e.kind = EventKind::LossScaleGrowth;
        sink.on_event(e);
    }
    // The FP8 gradient histories follow a growth or backoff, or the step after a growth saturated
    // the largest gradients (7.7% of lm_head's E5M2 dy at a growth every 4 steps; a read-only
    // review, 2026-12-07). Powers of 2: exact.
    rescale_gradient_amaxes(used_scale);
    if (scaler.mode() == LossScalingMode::Dynamic)
        outcome.alerts = watchers.on_loss_scale(step + 1, scaler.scale(),
                                                result == LossScaler::Outcome::SkippedAndBackedOff);
    return !bad_layers.empty();
}

} // namespace mantissa
