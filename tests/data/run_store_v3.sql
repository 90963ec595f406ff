-- The run store as schema version 3 wrote it (kept as a migration fixture): version 2's tables
-- plus run_tags, and events as kind + English text only, exactly as Mantissa 0.1 worded them.
-- Upgrading to v4 must recover each event's facts (layers, scales, path, formats) from that text.
CREATE TABLE runs(id INTEGER PRIMARY KEY, name TEXT NOT NULL, project_path TEXT NOT NULL DEFAULT '',
config_json TEXT NOT NULL, status TEXT NOT NULL,
created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ','now')), finished_at TEXT);
CREATE TABLE scalars(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, tag TEXT NOT NULL,
step INTEGER NOT NULL, value REAL, PRIMARY KEY(run_id, tag, step)) WITHOUT ROWID;
CREATE TABLE events(id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
step INTEGER NOT NULL, kind TEXT NOT NULL, message TEXT NOT NULL,
created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')));
CREATE INDEX events_by_run ON events(run_id, step);
CREATE TABLE layer_stats(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, step INTEGER NOT NULL,
layer TEXT NOT NULL, role TEXT NOT NULL, format TEXT NOT NULL,
count INTEGER NOT NULL, zeros INTEGER NOT NULL, infs INTEGER NOT NULL, nans INTEGER NOT NULL,
underflow REAL, subnormal REAL, overflow REAL,
amax REAL, scale REAL, quant_mse REAL, quant_snr_db REAL, update_ratio REAL,
first_exponent INTEGER NOT NULL, exponent_counts BLOB NOT NULL,
PRIMARY KEY(run_id, layer, role, step)) WITHOUT ROWID;
INSERT INTO runs(name, config_json, status, created_at, finished_at) VALUES('v2 fp32',
'{"precision": {"preset": "fp32", "layers": [], "fp8": {"scaling": "delayed"}}}', 'finished',
'2026-11-01T10:00:00Z', '2026-11-01T10:05:00Z');
INSERT INTO runs(name, config_json, status, created_at) VALUES('v2 fp8',
'{"precision": {"preset": "fp8-hybrid", "layers": [{"match": "lm_head", "format": "bf16"}], "fp8": {"scaling": "current"}}}',
'stopped', '2026-11-02T10:00:00Z');
INSERT INTO scalars VALUES(1, 'train/loss', 1, 2.5), (1, 'train/loss', 2, 2.25), (1, 'val/loss', 2, 2.125),
(1, 'tokens_per_s', 1, 100.0), (1, 'tokens_per_s', 2, 300.0), (1, 'memory/resident_bytes', 1, 1048576.0),
(2, 'train/loss', 1, 2.75), (2, 'skipped', 1, 1.0);
INSERT INTO layer_stats VALUES(1, 1, 'lm_head', 'weight', 'fp32', 64, 0, 0, 0, 0.0, 0.0, 0.0, 0.5, 1.0, 0.0,
0.0, -1.0, -3, X'0100000000000000');
CREATE TABLE run_tags(run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE, tag TEXT NOT NULL,
PRIMARY KEY(run_id, tag)) WITHOUT ROWID;
CREATE INDEX run_tags_by_tag ON run_tags(tag, run_id);
INSERT INTO run_tags VALUES(1, 'baseline');
INSERT INTO events(run_id, step, kind, message) VALUES
(1, 0, 'run_started', '2 layers, 2 heads, 32 dims, context 16; precision fp32'),
(1, 1, 'layer_backends', 'blocks.0.attn.qkv e4m3/e5m2/e5m2 emulated; lm_head fp32/fp32/fp32 fp32'),
(1, 1, 'checkpoint', '/data/runs/checkpoints/run-1/step-00000001.pt'),
(1, 2, 'loss_scale_backoff', 'scale 65536.000000 -> 32768.000000; non-finite gradients in blocks.1.mlp.fc1, lm_head'),
(1, 2, 'step_skipped', 'non-finite gradients in lm_head'),
(1, 2, 'loss_scale_growth', 'scale 32768.000000 -> 65536.000000'),
(1, 2, 'precision_changed', 'blocks.1.mlp.* -> bf16/bf16/bf16 (blocks.1.mlp.fc1, blocks.1.mlp.fc2); FP8 scale history restarted'),
(1, 2, 'alert_fp8_underflow', 'blocks.0.mlp.fc2: grad_output of blocks.0.mlp.fc2: 7.5% of values flush to zero in e5m2 (threshold 5%)'),
(1, 2, 'alert_loss_spike', 'loss 3.86 is 4.1 sigma above its EMA 2.31'),
(1, 2, 'watch_action', 'nonfinite: switched blocks.1.attn.proj to bf16'),
(1, 2, 'watch_action', 'loss_spike: pausing training'),
(1, 2, 'sample', 'To be, or not'),
(1, 2, 'some_future_kind', 'kept as it was'),
(1, 2, 'run_finished', 'finished 2 steps');
PRAGMA application_id=1296125524; PRAGMA user_version=3;
