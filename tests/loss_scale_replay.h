// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The loss scale's device rule (DeviceLossScale) against the host's (LossScaler), replayed
// step by step on random overflow sequences over configurations that reach every branch:
// growth, backoff, hysteresis, the floor, growth refused at FLT_MAX, backoff through the
// subnormals to 0, a factor that rounds. test_numerics runs it on the CPU, bench/cuda_checks
// on a GPU (whose double-to-float conversions must round as the host's).

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "device_loss_scale.h"
#include "loss_scaler.h"

namespace mantissa {

struct LossScaleCase {
    const char* name;
    LossScalingConfig config;
    double overflow_odds;
};

inline std::vector<LossScaleCase> loss_scale_cases()
{
    const auto dynamic = [](double init, double growth, double backoff, int64_t interval, double min_scale,
                            int64_t hysteresis) {
        return LossScalingConfig{.mode = LossScalingMode::Dynamic, .init_scale = init, .growth_factor = growth,
                                 .backoff_factor = backoff, .growth_interval = interval, .min_scale = min_scale,
                                 .hysteresis = hysteresis};
    };
    const LossScalingConfig fixed{.mode = LossScalingMode::Static, .init_scale = 1024.0};
    return {
        {"pytorch", dynamic(65536.0, 2.0, 0.5, 3, 0.0, 1), 0.3},
        {"hysteresis and floor", dynamic(4.0, 2.0, 0.5, 2, 1.0, 3), 0.5},
        {"floor not a float", dynamic(4.0, 2.0, 0.5, 2, 0.1, 1), 0.6},
        {"to FLT_MAX", dynamic(std::ldexp(1.0, 120), 2.0, 0.5, 1, 0.0, 1), 0.05},
        {"grow refused", dynamic(std::numeric_limits<float>::max(), 1.0 + std::ldexp(1.0, -24), 0.5, 1, 0.0, 1), 0.1},
        {"to zero", dynamic(std::ldexp(1.0, -140), 2.0, 0.5, 4, 0.0, 1), 0.9},
        {"factor 0.3", dynamic(1e-38, 3.0, 0.3, 2, 0.0, 2), 0.5},
        {"static", fixed, 0.5},
    };
}

struct LossScaleReplay {
    int64_t differing = 0; // steps whose device state or unscaling factor is not the host's
    int64_t moves = 0;     // steps that changed the scale
    int64_t skips = 0;     // steps the host skipped
    int64_t reloads = 0;   // agreeing steps after which follow() loaded the state again (needlessly)
    std::string first_difference;
};

inline LossScaleReplay replay_loss_scale(const LossScaleCase& c, const torch::Device& device, int steps = 400)
{
    LossScaleReplay out;
    LossScaler host(c.config);
    DeviceLossScale scale;
    scale.follow(host, device);
    std::mt19937 rng(7);
    std::bernoulli_distribution overflow(c.overflow_odds);
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    for (int step = 0; step < steps; ++step) {
        const bool found = overflow(rng);
        const double before = host.scale();
        const auto outcome = host.update(found);
        out.skips += outcome == LossScaler::Outcome::Skipped || outcome == LossScaler::Outcome::SkippedAndBackedOff;
        out.moves += host.scale() != before;
        scale.update(torch::full({}, found ? 1.0 : 0.0, f32));
        const auto state = scale.state_tensor().to(torch::kCPU);
        const double* v = state.data_ptr<double>();
        const auto h = host.state();
        const float inverse = scale.inverse().to(torch::kCPU).item<float>();
        const bool same = std::bit_cast<uint64_t>(v[0]) == std::bit_cast<uint64_t>(h.scale) &&
                          static_cast<int64_t>(v[1]) == h.growth_tracker &&
                          static_cast<int64_t>(v[2]) == h.overflows_left &&
                          std::bit_cast<uint32_t>(inverse) == std::bit_cast<uint32_t>(to_float32(1.0 / h.scale));
        if (!same) {
            if (out.differing++ == 0) {
                char text[200];
                std::snprintf(text, sizeof text, "step %d: device %a/%g/%g inverse %a, host %a/%lld/%lld", step + 1,
                              v[0], v[1], v[2], double(inverse), h.scale, static_cast<long long>(h.growth_tracker),
                              static_cast<long long>(h.overflows_left));
                out.first_difference = text;
            }
            scale.follow(host, device); // unchecked after its update: loads the host's state
            continue;
        }
        scale.check(host, v);
        scale.expect(host);
        const void* held = scale.scale().data_ptr();
        scale.follow(host, device);
        out.reloads += scale.scale().data_ptr() != held;
    }
    return out;
}

} // namespace mantissa
