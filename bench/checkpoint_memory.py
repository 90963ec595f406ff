#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Host memory and time of a checkpoint write and of a resume, against the state they hold.

A checkpoint holds the FP32 weights and the two Adam moments: 12 B a parameter. It is written a
tensor at a time (core/trainer_checkpoint.cpp), and a resume maps the file
(core/checkpoint_weights.cpp). For each binary given (e.g. an older build beside this one), one
model is trained for 2 steps three ways, one after the other on one machine:
  - with no checkpoint (--no-store, no training.checkpoint_dir): the floor;
  - with a checkpoint at each step;
  - resumed for 1 step from the second checkpoint (it loads one and writes one).
Printed: the peak RSS of each (GNU time), the excess over the floor in bytes a parameter, and
the wall time. The default model is GPT-2 small's blocks at context 128 on the synthetic
addition data (85 M parameters, a 1.02 GB checkpoint): about 3 GB of memory and 2 GB of disk.

  .venv/bin/python bench/checkpoint_memory.py [--exe build/dev/app/mantissa-train ...] [--layers 12]
"""
import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARAMS_RE = re.compile(r"([0-9]+) parameters")


def measured(cmd):
    """(peak RSS in MB, seconds, stdout) of `cmd`."""
    start = time.monotonic()
    done = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], check=True, capture_output=True, text=True)
    seconds = time.monotonic() - start
    return int(done.stderr.strip().splitlines()[-1]) / 1024, seconds, done.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", action="append", help="mantissa-train binaries to compare (default: build/dev's)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    args = ap.parse_args()
    exes = args.exe or [os.path.join(ROOT, "build", "dev", "app", "mantissa-train")]
    project = os.path.join(ROOT, "projects", "default.json")
    sets = [f"model.n_layer={args.layers}", f"model.n_embd={args.width}", f"model.n_head={max(1, args.width // 64)}",
            "model.context_length=128", "training.batch_size=1", "eval.interval=0", "eval.batches=1",
            "eval.sample_tokens=8", "training.steps=2"]
    flags = [arg for s in sets for arg in ("--set", s)]
    print(f"{'binary':<40} {'phase':<22} {'peak MB':>8} {'over floor':>11} {'B/param':>8} {'s':>6}")
    for exe in exes:
        tmp = tempfile.mkdtemp(prefix="ckpt-bench-")
        try:
            floor, secs, out = measured([exe, "run", project, "--no-store", *flags])
            params = int(PARAMS_RE.search(out).group(1))
            db = os.path.join(tmp, "runs.sqlite")
            write, wsecs, _ = measured([exe, "run", project, "--db", db, *flags,
                                        "--set", "training.checkpoint_interval=1"])
            resume, rsecs, _ = measured([exe, "resume", "1", "--db", db, "--set", "training.steps=3"])
            name = os.path.relpath(exe, ROOT) if exe.startswith(ROOT) else exe
            for phase, mb, s in (("no checkpoint", floor, secs), ("a checkpoint a step", write, wsecs),
                                 ("resume, 1 step", resume, rsecs)):
                over = mb - floor
                print(f"{name[-40:]:<40} {phase:<22} {mb:8.0f} {over:11.0f} {over * 1048576 / params:8.1f} {s:6.1f}")
            print(f"{'':<40} {params:,} parameters")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
