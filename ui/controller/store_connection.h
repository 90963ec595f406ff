// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// The window's read/edit connection to the run store, shared by the Runs and Compare pages
// (the training worker writes through its own). Opened on first use and never created:
// a store that does not exist yet simply has no runs. A store that cannot be written is
// opened read-only: everything shows, and edits fail with "is read-only". runsChanged() tells every page that
// runs were renamed, tagged, deleted or added.

#include <QObject>
#include <QString>

#include <memory>

namespace mantissa {

class RunStore;

class StoreConnection : public QObject {
    Q_OBJECT

public:
    explicit StoreConnection(const QString& path, QObject* parent = nullptr);
    ~StoreConnection() override;

    QString path() const { return path_; }
    bool exists() const;
    // nullptr with a message (naming the file) when it does not exist yet or cannot be
    // opened (not a store, newer schema, unreadable). Retries on every call after a failure.
    RunStore* store(QString* error = nullptr);
    // Drops the connection (after an error), so the next store() reopens.
    void close();
    bool readOnly() const; // the open store is read-only

    void notifyChanged() { emit runsChanged(); }
    // Points the pages at another store: a remote store's replica (read-only, since the
    // mirror overwrites it) or the local one again. Reopens and announces runsChanged().
    void switchTo(const QString& path, bool readOnly);
    // Reopens the same store: a new connection sees what a mirror changed in its runs' locks.
    // It skips PRAGMA quick_check, which reads the whole file (a second on a gigabyte replica)
    // on the GUI thread at every change of the run list: this file passed it when this
    // connection first opened it, and only the mirror has written it since. close() and
    // switchTo() check it again.
    void reopen();

signals:
    void runsChanged();

private:
    QString path_;
    bool forceReadOnly_ = false;
    bool checked_ = false; // the file at path_ passed quick_check in this connection
    std::unique_ptr<RunStore> store_;
};

} // namespace mantissa
