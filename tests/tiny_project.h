// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The tiny model the GUI tests train for real: one block, 16 dims, synthetic addition data,
// well under a second for 30 steps on one core.

#include <cstdint>
#include <string>

#include "project_config.h"

inline mantissa::ProjectConfig tiny_run_config(const std::string& name, int64_t steps, int64_t eval_interval)
{
    mantissa::ProjectConfig c;
    c.name = name;
    c.model.n_layer = 1;
    c.model.n_head = 2;
    c.model.n_embd = 16;
    c.model.context_length = 16;
    c.data.kind = mantissa::DataKind::SyntheticAddition;
    c.data.examples = 500;
    c.training.steps = steps;
    c.training.batch_size = 4;
    c.training.threads = 1; // leave the other core to the GUI thread on small CI machines
    c.eval.interval = eval_interval;
    c.eval.batches = 2;
    return c;
}
