#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Data-parallel CPU weak scaling (docs/DISTRIBUTED.md): the same per-rank work (one
micro-batch per rank and step, one thread per rank) on 1 and 2 ranks of Gloo over loopback.
Prints the mean step time (rank 0's, after warm-up), the allreduce time and its share of the
step, and each rank's mean step time (a straggler shows there).

  .venv/bin/python bench/data_parallel.py [--project projects/default.json] [--steps 60]
"""
import argparse
import csv
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(exe, project, ranks, steps, db):
    sets = [f"training.steps={steps}", f"training.grad_accum={ranks}", "training.threads=1", "eval.interval=0",
            "telemetry.interval=0"]
    cmd = [exe, "run", project, "--db", db] + [a for s in sets for a in ("--set", s)]
    if ranks == 1:
        subprocess.run(cmd, check=True, capture_output=True)
    else:
        port = str(free_port())
        procs = []
        for r in range(ranks):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1",
                       MASTER_PORT=port)
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        for p in procs:
            out, err = p.communicate()
            if p.returncode != 0:
                sys.exit(f"a rank failed: {err.decode()[-2000:]}")
    text = subprocess.run([exe, "export", "1", "--db", db], check=True, capture_output=True, text=True).stdout
    rows = list(csv.DictReader(io.StringIO(text)))[max(2, steps // 10):]  # warm-up steps left out

    def mean(tag):
        values = [float(r[tag]) for r in rows if r.get(tag)]
        return statistics.mean(values) if values else float("nan")

    per_rank = [mean(f"dp/step_ms/rank_{r}") for r in range(ranks)] if ranks > 1 else []
    return mean("step_time_ms"), mean("dp/allreduce_ms") if ranks > 1 else 0.0, per_rank


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", default=os.path.join(ROOT, "projects", "default.json"))
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "dev"))
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    exe = os.path.join(args.build, "app", "mantissa-train")
    print(f"{'ranks':>5}  {'ms/step':>8}  {'allreduce ms':>12}  {'share':>6}  per-rank ms/step")
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in (1, 2):
            step, allreduce, per_rank = run(exe, args.project, ranks, args.steps, os.path.join(tmp, f"r{ranks}.db"))
            share = allreduce / step if ranks > 1 else 0.0
            print(f"{ranks:>5}  {step:8.2f}  {allreduce:12.3f}  {share:6.1%}  " +
                  " ".join(f"{t:.2f}" for t in per_rank))


if __name__ == "__main__":
    main()
