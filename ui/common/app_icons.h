// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The icons compiled in from resources/mantissa.qrc: the application icon and the run
// actions, each a QIcon holding every rendered PNG size (resources/README.md).

#include <QIcon>

namespace mantissa {

enum class ActionIcon { Start, Pause, Stop, Checkpoint, Sweep, Open, Save };

QIcon app_icon();
QIcon action_icon(ActionIcon which);

} // namespace mantissa
