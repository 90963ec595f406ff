-- The run store as schema version 4 wrote it (kept as a migration fixture): typed events
-- (events.fields), run identities, recorded checkpoints; event ids a plain INTEGER PRIMARY KEY.
-- Upgrading to v5 keeps every event and its id, and from then on no id is given twice.
CREATE TABLE runs(id INTEGER PRIMARY KEY, name TEXT NOT NULL, project_path TEXT NOT NULL DEFAULT '',
config_json TEXT NOT NULL, status TEXT NOT NULL,
created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')), finished_at TEXT,
uuid TEXT, legacy_checkpoints INTEGER NOT NULL DEFAULT 0);
CREATE TABLE scalars(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, tag TEXT NOT NULL,
step INTEGER NOT NULL, value REAL, PRIMARY KEY(run_id, tag, step)) WITHOUT ROWID;
CREATE TABLE events(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
step INTEGER NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL,
created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')), fields TEXT NOT NULL DEFAULT '{}');
CREATE INDEX events_by_run ON events(run_id, step);
CREATE TABLE layer_stats(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
layer TEXT NOT NULL, role TEXT NOT NULL, format TEXT NOT NULL,
count INTEGER NOT NULL, zeros INTEGER NOT NULL, infs INTEGER NOT NULL, nans INTEGER NOT NULL,
underflow REAL, subnormal REAL, overflow REAL,
amax REAL, scale REAL, quant_mse REAL, quant_snr_db REAL, update_ratio REAL,
first_exponent INTEGER NOT NULL, exponent_counts BLOB NOT NULL,
PRIMARY KEY(run_id, layer, role, step)) WITHOUT ROWID;
CREATE TABLE run_tags(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, tag TEXT NOT NULL,
PRIMARY KEY(run_id, tag)) WITHOUT ROWID;
CREATE INDEX run_tags_by_tag ON run_tags(tag, run_id);
CREATE TABLE checkpoints(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
path TEXT NOT NULL, checksum TEXT NOT NULL, bytes INTEGER NOT NULL, PRIMARY KEY(run_id, step)) WITHOUT ROWID;
INSERT INTO runs(name, config_json, status, created_at, finished_at, uuid) VALUES('v4 fp32',
'{"precision": {"preset": "fp32", "layers": [], "fp8": {"scaling": "delayed"}}}', 'finished',
'2026-11-20T10:00:00Z', '2026-11-20T10:05:00Z', '0123456789abcdef0123456789abcdef');
INSERT INTO scalars VALUES(1, 'train/loss', 1, 2.5), (1, 'train/loss', 2, 2.25), (1, 'train/loss', 3, 2.0);
INSERT INTO checkpoints VALUES(1, 2, '/data/runs.sqlite.checkpoints/run-1/step-00000002.pt', 'fnv1a64:0011223344556677', 4096);
INSERT INTO events(id, run_id, step, kind, message, fields) VALUES
(1, 1, 0, 'run_started', '1 layer, 2 heads, 16 dims, context 16; precision fp32', '{"text":"1 layer, 2 heads, 16 dims, context 16; precision fp32"}'),
(2, 1, 2, 'checkpoint', '/data/runs.sqlite.checkpoints/run-1/step-00000002.pt', '{"path":"/data/runs.sqlite.checkpoints/run-1/step-00000002.pt"}'),
(3, 1, 3, 'run_finished', 'finished 3 steps', '{"text":"finished 3 steps"}'),
(4, 1, 3, 'sample', 'To be, or not', '{"text":"To be, or not"}');
PRAGMA application_id=1296125524; PRAGMA user_version=4;
