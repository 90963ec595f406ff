// SPDX-License-Identifier: GPL-3.0-or-later
#include "remote/remote_status_label.h"

#include <QTimer>

#include "remote/remote_mirror.h"

namespace mantissa {

RemoteStatusLabel::RemoteStatusLabel(QWidget* parent) : QLabel(parent)
{
    setObjectName(QStringLiteral("remoteStatus"));
    hide();
    // The lag grows while nothing arrives: it is read out once a second, not only on news.
    auto* tick = new QTimer(this);
    connect(tick, &QTimer::timeout, this, &RemoteStatusLabel::refresh);
    tick->start(1000);
}

void RemoteStatusLabel::setMirror(RemoteMirror* mirror)
{
    if (mirror_) mirror_->disconnect(this);
    mirror_ = mirror;
    if (mirror_) {
        connect(mirror_, &RemoteMirror::stateChanged, this, &RemoteStatusLabel::refresh);
        connect(mirror_, &RemoteMirror::statsChanged, this, &RemoteStatusLabel::refresh);
        connect(mirror_, &QObject::destroyed, this, [this] { setMirror(nullptr); });
    }
    setVisible(mirror_ != nullptr);
    refresh();
}

QString RemoteStatusLabel::describe(const RemoteMirror& mirror)
{
    QString text = mirror.stateText();
    const double lag = mirror.lagSeconds();
    if (lag >= 0) text += tr(" · lag %1 s").arg(lag, 0, 'f', 1);
    const double rate = mirror.bytesPerSecond();
    text += rate >= 1024 ? tr(" · %1 kB/s").arg(rate / 1024.0, 0, 'f', 1) : tr(" · %1 B/s").arg(rate, 0, 'f', 0);
    return text;
}

void RemoteStatusLabel::refresh()
{
    if (mirror_) setText(describe(*mirror_));
}

} // namespace mantissa
