// SPDX-License-Identifier: GPL-3.0-or-later
#pragma once
// Stores as earlier schema versions wrote them (tests/data/run_store_v*.sql), for the tests
// of in-place upgrades and of reading old stores.

#include <QFile>
#include <QString>

#include <sqlite3.h>

#include <string>

// Creates `db_path` from the SQL fixture `name` in tests/data; false if that failed.
inline bool load_store_fixture(const std::string& db_path, const char* name)
{
    QFile sql(QString(MANTISSA_TEST_DATA_DIR "/") + name);
    if (!sql.open(QIODevice::ReadOnly)) return false;
    sqlite3* db = nullptr;
    const bool opened = sqlite3_open(db_path.c_str(), &db) == SQLITE_OK;
    const bool loaded = opened && sqlite3_exec(db, sql.readAll().constData(), nullptr, nullptr, nullptr) == SQLITE_OK;
    sqlite3_close(db);
    return loaded;
}
