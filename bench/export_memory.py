#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Peak memory of `mantissa-train export` against the run's length: the exports stream the rows
they read (store/csv_export.h, TensorBoardExport), so their peak should not grow with the run.

A short run with telemetry every step is trained once, then copied into itself (its rows again
at later steps, straight in SQLite) to make runs `--scales` times as long. For each length: the
peak RSS of `list` (LibTorch's start-up, the floor of every command) and of each export, and
the export's excess over the floor. One run of the script, every figure side by side.

  .venv/bin/python bench/export_memory.py [--data PATH] [--steps 100] [--scales 1,30]
"""
import argparse
import os
import sqlite3
import subprocess
import tempfile

from benchlib import add_common_args, data_path

EXPORTS = {
    "csv metrics": ["--out", "{tmp}/m.csv"],
    "csv layers": ["--table", "layers", "--out", "{tmp}/l.csv"],
    "csv layers to stdout": ["--table", "layers"],
    "tensorboard": ["--format", "tensorboard", "--out", "{tmp}/tb"],
}


def peak_rss_mb(cmd):
    """Peak resident memory of `cmd` in MB, by GNU time; its output is dropped."""
    out = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], check=True, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True).stderr
    return int(out.strip().splitlines()[-1]) / 1024


def lengthen(db, times):
    """Appends the run's own rows `times - 1` more times after its last step."""
    con = sqlite3.connect(db)
    last = con.execute("SELECT MAX(step) FROM scalars WHERE run_id=1").fetchone()[0]
    with con:
        for k in range(1, times):
            con.execute("INSERT INTO scalars(run_id, tag, step, value) SELECT run_id, tag, step + ?, value "
                        "FROM scalars WHERE run_id=1 AND step BETWEEN 1 AND ?", (k * last, last))
            con.execute("INSERT INTO layer_stats SELECT run_id, step + ?, layer, role, format, count, zeros, infs, "
                        "nans, underflow, subnormal, overflow, amax, scale, quant_mse, quant_snr_db, update_ratio, "
                        "first_exponent, exponent_counts FROM layer_stats WHERE run_id=1 AND step BETWEEN 1 AND ?",
                        (k * last, last))
    rows = [con.execute(f"SELECT COUNT(*) FROM {t} WHERE run_id=1").fetchone()[0] for t in ("scalars", "layer_stats")]
    con.close()
    return rows


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--scales", default="1,30", help="run lengths, as multiples of --steps")
    args = ap.parse_args()
    exe = os.path.join(args.build, "app", "mantissa-train")
    project = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "projects",
                           "shakespeare-char.json")
    sets = [f"data.path={data_path(args)}", f"training.steps={args.steps}", "eval.interval=0", "eval.batches=1",
            "eval.sample_tokens=0", "telemetry.interval=1"]
    with tempfile.TemporaryDirectory() as tmp:
        seed = os.path.join(tmp, "seed.sqlite")
        cmd = [exe, "run", project, "--db", seed]
        for s in sets:
            cmd += ["--set", s]
        subprocess.run(cmd, check=True, capture_output=True)
        print(f"{'steps':>7} {'metric rows':>12} {'layer rows':>11}  {'command':<28} {'peak MB':>8} {'over list':>10}")
        for scale in (int(s) for s in args.scales.split(",")):
            db = os.path.join(tmp, f"x{scale}.sqlite")
            con = sqlite3.connect(seed)
            con.execute(f"VACUUM INTO '{db}'")
            con.close()
            metric_rows, layer_rows = lengthen(db, scale)
            floor = peak_rss_mb([exe, "list", "--db", db])
            lead = f"{args.steps * scale:>7} {metric_rows:>12} {layer_rows:>11}"
            print(f"{lead}  {'list':<28} {floor:>8.0f} {'':>10}", flush=True)
            for name, extra in EXPORTS.items():
                peak = peak_rss_mb([exe, "export", "1", "--db", db] + [a.format(tmp=tmp) for a in extra])
                print(f"{lead}  {'export ' + name:<28} {peak:>8.0f} {peak - floor:>+9.0f}", flush=True)


if __name__ == "__main__":
    main()
