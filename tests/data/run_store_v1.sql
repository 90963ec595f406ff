-- The run store as schema version 1 wrote it (kept as a migration fixture).
CREATE TABLE runs(id INTEGER PRIMARY KEY, name TEXT NOT NULL, project_path TEXT NOT NULL DEFAULT '',
config_json TEXT NOT NULL, status TEXT NOT NULL,
created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')), finished_at TEXT);
CREATE TABLE scalars(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, tag TEXT NOT NULL,
step INTEGER NOT NULL, value REAL, PRIMARY KEY(run_id, tag, step)) WITHOUT ROWID;
CREATE TABLE events(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
step INTEGER NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL,
created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')));
INSERT INTO runs(name, config_json, status) VALUES('old run', '{}', 'finished');
INSERT INTO scalars VALUES(1, 'train/loss', 1, 2.5);
PRAGMA application_id=1296125524; PRAGMA user_version=1;
