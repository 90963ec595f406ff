// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// "Run <layer> in ▸": the Monitor's right-click menu on a heatmap row, a layer's precision
// switched from where its trouble shows. The choices are whole recipes (formats of the three
// GEMMs and, for the FP8 and FP4 ones, the scaling recipe), as a user flips a layer to try
// another; the precision table keeps the per-GEMM edits.

#include <QString>

#include <functional>
#include <optional>
#include <vector>

#include "precision_policy.h"

class QMenu;
class QWidget;

namespace mantissa {

struct LayerSwitchChoice {
    QString label;                     // "NVFP4 (E2M1, E4M3 scales per 16)"
    GemmFormats formats;
    std::optional<Fp8Scaling> scaling; // none: the layer keeps its recipe (16- and 32-bit choices)
};

// In the order the menu lists them.
std::vector<LayerSwitchChoice> layer_switch_choices();

// The menu for `layer`, owned by `parent`; `pick` is called with the choice taken.
QMenu* make_layer_switch_menu(const QString& layer, QWidget* parent,
                              const std::function<void(const LayerSwitchChoice&)>& pick);

} // namespace mantissa
