// SPDX-License-Identifier: GPL-3.0-or-later
#include "controller/store_connection.h"

#include <QDir>
#include <QFileInfo>

#include "run_store.h"

namespace mantissa {

StoreConnection::StoreConnection(const QString& path, QObject* parent) : QObject(parent), path_(path) {}

StoreConnection::~StoreConnection() = default;

bool StoreConnection::exists() const { return QFileInfo(path_).isFile(); }

RunStore* StoreConnection::store(QString* error)
{
    // A store read as immutable (opened read-only while no WAL existed) reads stale or torn
    // pages once another process has written it: it is opened again then.
    if (store_ && store_->snapshot_outdated()) store_.reset();
    if (store_) return store_.get();
    if (!exists()) {
        if (error)
            *error = tr("No runs yet: the run store %1 does not exist (runs started here are recorded there).")
                         .arg(QDir::toNativeSeparators(path_));
        return nullptr;
    }
    try {
        try {
            // Never Create: the Runs and Compare pages must not write a schema into a file.
            if (forceReadOnly_) throw StoreReadOnlyError("a remote store's replica is read-only here");
            store_ = std::make_unique<RunStore>(path_.toStdString(), OpenMode::ReadWrite, !checked_);
        } catch (const StoreReadOnlyError&) {
            // An archive on a read-only share or file: shown in full; edits say it is read-only.
            store_ = RunStore::open_read_only(path_.toStdString(), !checked_);
        }
        checked_ = true;
    } catch (const std::exception& e) {
        if (error) *error = tr("Cannot open the run store: %1").arg(QString::fromStdString(e.what()));
        return nullptr;
    }
    return store_.get();
}

void StoreConnection::close()
{
    store_.reset();
    checked_ = false;
}

void StoreConnection::switchTo(const QString& path, bool readOnly)
{
    store_.reset();
    path_ = path;
    forceReadOnly_ = readOnly;
    checked_ = false;
    emit runsChanged();
}

void StoreConnection::reopen()
{
    store_.reset();
    emit runsChanged();
}

bool StoreConnection::readOnly() const { return store_ && store_->read_only(); }

} // namespace mantissa
