// SPDX-License-Identifier: GPL-3.0-or-later
#include "remote/remote_connector.h"

#include <QDir>
#include <QRegularExpression>
#include <QStandardPaths>
#include <QTimer>

#include "controller/store_connection.h"
#include "remote/remote_mirror.h"
#include "run_store.h"

namespace mantissa {

RemoteConnector::RemoteConnector(StoreConnection* store, const QString& replicaDir, QObject* parent)
    : QObject(parent), store_(store), localPath_(store->path()), replicaDir_(replicaDir)
{
    if (replicaDir_.isEmpty())
        replicaDir_ = QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation) + "/remote";
    rowsTick_ = new QTimer(this);
    rowsTick_->setSingleShot(true);
    rowsTick_->setInterval(1000);
    connect(rowsTick_, &QTimer::timeout, store_, &StoreConnection::notifyChanged);
}

// The mirror is a child; the store connection may already be gone (the window's children go
// in order), so it is not pointed anywhere now.
RemoteConnector::~RemoteConnector() = default;

QString RemoteConnector::replicaPathFor(const QUrl& server, int copy) const
{
    const int port = server.port(server.scheme() == "https" ? 443 : 80);
    QString host = server.host();
    host.replace(QRegularExpression(QStringLiteral("[^A-Za-z0-9.-]")), QStringLiteral("_"));
    const QString suffix = copy > 1 ? QStringLiteral("-%1").arg(copy) : QString();
    return QDir(replicaDir_).filePath(QStringLiteral("%1_%2%3.sqlite").arg(host).arg(port).arg(suffix));
}

qint64 RemoteConnector::runningRun() const
{
    RunStore* store = mirror_ ? store_->store() : nullptr;
    if (!store) return -1;
    // The server names the run its process trains: the store may hold another "running" one
    // (trained by another process on the server), which would answer 404.
    const qint64 named = mirror_->trainingRun();
    qint64 newest = -1;
    for (const auto& run : store->list_runs())
        if (run.status == RunStatus::Running) {
            if (named > 0 && run.id == named) return named;
            newest = run.id;
        }
    return named > 0 ? -1 : newest; // the named run has ended: no remote run is training
}

bool RemoteConnector::connectTo(const QUrl& server, const QString& token, QString* error,
                                const QByteArray& certificateSha256)
{
    disconnectFromServer();
    QDir().mkpath(replicaDir_);
    RemoteMirror* mirror = nullptr;
    for (int copy = 1; !mirror; ++copy) {
        mirror = new RemoteMirror(server, token, replicaPathFor(server, copy), this);
        mirror->setPinnedCertificate(certificateSha256);
        try {
            mirror->start();
        } catch (const ReplicaInUse& e) {
            delete mirror;
            mirror = nullptr;
            if (copy < kMaxReplicasPerServer) continue;
            if (error)
                *error = tr("Cannot keep a replica of %1: %2 windows are connected to it already")
                             .arg(server.authority())
                             .arg(kMaxReplicasPerServer);
            return false;
        } catch (const std::exception& e) {
            if (error) *error = tr("Cannot keep a replica of %1: %2").arg(server.authority(), QString::fromUtf8(e.what()));
            delete mirror;
            return false;
        }
    }
    mirror_ = mirror;
    // A new connection each time the runs change: it sees the mirror's locks on live runs.
    connect(mirror_, &RemoteMirror::runsChanged, store_, &StoreConnection::reopen);
    connect(mirror_, &RemoteMirror::rowsArrived, this, [this] {
        if (!rowsTick_->isActive()) rowsTick_->start();
    });
    store_->switchTo(mirror_->replicaPath(), /*readOnly=*/true);
    emit mirrorChanged(mirror_);
    return true;
}

void RemoteConnector::disconnectFromServer()
{
    if (!mirror_) return;
    rowsTick_->stop();
    delete mirror_;
    mirror_ = nullptr;
    store_->switchTo(localPath_, /*readOnly=*/false);
    emit mirrorChanged(nullptr);
}

} // namespace mantissa
