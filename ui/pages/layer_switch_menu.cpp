// SPDX-License-Identifier: GPL-3.0-or-later
#include "pages/layer_switch_menu.h"

#include <QCoreApplication>
#include <QMenu>

namespace mantissa {
namespace {

QString tr(const char* text) { return QCoreApplication::translate("LayerSwitchMenu", text); }

} // namespace

std::vector<LayerSwitchChoice> layer_switch_choices()
{
    const GemmFormats hybrid{NumberFormat::E4M3, NumberFormat::E5M2, NumberFormat::E5M2};
    const GemmFormats e4m3 = GemmFormats::all(NumberFormat::E4M3);
    return {
        {tr("FP32"), GemmFormats::all(NumberFormat::FP32), std::nullopt},
        {tr("BF16"), GemmFormats::all(NumberFormat::BF16), std::nullopt},
        {tr("FP16"), GemmFormats::all(NumberFormat::FP16), std::nullopt},
        {tr("FP8 hybrid (E4M3 forward, E5M2 gradients), delayed scaling"), hybrid, Fp8Scaling::Delayed},
        {tr("FP8 hybrid, current scaling"), hybrid, Fp8Scaling::Current},
        {tr("FP8 E4M3, 1×128 / 128×128 blocks (fp8-block)"), e4m3, Fp8Scaling::Block128},
        {tr("NVFP4 (E2M1, E4M3 scale per 16)"), e4m3, Fp8Scaling::NvFp4},
        {tr("MXFP4 (E2M1, E8M0 scale per 32)"), e4m3, Fp8Scaling::MxFp4},
    };
}

QMenu* make_layer_switch_menu(const QString& layer, QWidget* parent,
                              const std::function<void(const LayerSwitchChoice&)>& pick)
{
    auto* menu = new QMenu(tr("Run %1 in").arg(layer), parent);
    menu->setObjectName(QStringLiteral("layerSwitchMenu"));
    menu->addSection(tr("Run %1 in").arg(layer));
    for (const auto& choice : layer_switch_choices()) {
        QAction* action = menu->addAction(choice.label);
        QObject::connect(action, &QAction::triggered, menu, [pick, choice] { pick(choice); });
    }
    return menu;
}

} // namespace mantissa
