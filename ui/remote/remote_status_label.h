// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The status bar's word on a remote connection: its state, the lag behind the server and
// the bytes per second it receives. Hidden while no remote store is connected.

#include <QLabel>

namespace mantissa {

class RemoteMirror;

class RemoteStatusLabel : public QLabel {
    Q_OBJECT

public:
    explicit RemoteStatusLabel(QWidget* parent = nullptr);
    void setMirror(RemoteMirror* mirror); // nullptr: hidden
    void refresh();

    static QString describe(const RemoteMirror& mirror); // "connected to h:p · lag 0.2 s · 1.3 kB/s"

private:
    RemoteMirror* mirror_ = nullptr;
};

} // namespace mantissa
