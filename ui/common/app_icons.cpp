// SPDX-License-Identifier: GPL-3.0-or-later
#include "common/app_icons.h"

#include <QString>

// mantissa_ui is a static library: nothing would reference the compiled resources, and the
// linker would drop them, without this call (which must sit outside any namespace).
static void init_mantissa_resources()
{
    Q_INIT_RESOURCE(mantissa);
}

namespace mantissa {
namespace {

QIcon icon_from_pngs(const QString& stem, std::initializer_list<int> sizes)
{
    static const bool initialised = (init_mantissa_resources(), true);
    (void)initialised;
    QIcon icon;
    for (int size : sizes) icon.addFile(QStringLiteral(":/icons/%1-%2.png").arg(stem).arg(size), QSize(size, size));
    return icon;
}

const char* action_stem(ActionIcon which)
{
    switch (which) {
    case ActionIcon::Start: return "start";
    case ActionIcon::Pause: return "pause";
    case ActionIcon::Stop: return "stop";
    case ActionIcon::Checkpoint: return "checkpoint";
    case ActionIcon::Sweep: return "sweep";
    case ActionIcon::Open: return "open";
    case ActionIcon::Save: return "save";
    }
    return "start";
}

} // namespace

QIcon app_icon()
{
    return icon_from_pngs(QStringLiteral("app/mantissa"), {16, 22, 24, 32, 48, 64, 128, 256});
}

QIcon action_icon(ActionIcon which)
{
    return icon_from_pngs(QStringLiteral("actions/") + QLatin1String(action_stem(which)), {16, 24, 32, 48});
}

} // namespace mantissa
