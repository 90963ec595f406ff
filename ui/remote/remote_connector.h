// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The window's remote connection: a RemoteMirror into a replica store, with the window's
// StoreConnection pointed at the replica (read-only) while it lasts, so that the Runs and
// Compare pages read the remote runs as they read local ones. Disconnecting points them at
// the local store again; the replica stays on disk and the next connection resumes from it.

#include <QObject>
#include <QString>
#include <QUrl>

#include "remote/remote_mirror.h" // complete for the signal's meta type

class QTimer;

namespace mantissa {

class StoreConnection;

class RemoteConnector : public QObject {
    Q_OBJECT

public:
    // `replicaDir` empty: "<app data>/remote".
    RemoteConnector(StoreConnection* store, const QString& replicaDir = {}, QObject* parent = nullptr);
    ~RemoteConnector() override;

    // False with the reason in `error` when the replica cannot be created.
    // `certificateSha256`: a pinned self-signed certificate (RemoteMirror::setPinnedCertificate).
    bool connectTo(const QUrl& server, const QString& token, QString* error = nullptr,
                   const QByteArray& certificateSha256 = {});
    void disconnectFromServer();
    RemoteMirror* mirror() const { return mirror_; }
    void setReplicaDir(const QString& dir) { replicaDir_ = dir; } // for the next connection
    // The run a steering command goes to: the newest remote run that is running; -1 if none.
    qint64 runningRun() const;
    // One replica per server: "<dir>/HOST_PORT.sqlite". A second window on the same server
    // keeps a replica of its own, "<dir>/HOST_PORT-2.sqlite", and so on (`copy` 2, 3, ...):
    // connectTo() takes the first that no other mirror keeps.
    QString replicaPathFor(const QUrl& server, int copy = 1) const;
    static constexpr int kMaxReplicasPerServer = 16;

signals:
    void mirrorChanged(mantissa::RemoteMirror* mirror); // nullptr: disconnected

private:
    StoreConnection* store_;
    QString localPath_;
    QString replicaDir_;
    RemoteMirror* mirror_ = nullptr;
    QTimer* rowsTick_ = nullptr; // pages reload at most once a second while rows stream in
};

} // namespace mantissa
