// SPDX-License-Identifier: GPL-3.0-or-later
// Precompiled header for the engine's LibTorch translation units: parsing torch/torch.h
// dominates their compile time, so it is parsed once per target.
#pragma once
#include <torch/torch.h>
