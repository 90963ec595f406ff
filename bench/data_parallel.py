#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Data-parallel CPU weak scaling (docs/DISTRIBUTED.md): the same per-rank work (one
micro-batch per rank and step, one thread per rank) on 1 and 2 ranks of Gloo over loopback.
Prints the mean step time (rank 0's, after warm-up), the allreduce time (the wait after the
backward: what the overlap did not hide) and its share of the step, the gradient buckets
started during the backward, and each rank's mean step time (a straggler shows there).
Two ranks run once per --bucket-mb value: with DDP's 25 MiB a small model's gradients are one
bucket, started by the backward's last hook; smaller buckets start while the backward runs.

  .venv/bin/python bench/data_parallel.py [--project projects/default.json] [--steps 60]
      [--bucket-mb 25,0.0625]
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


def run(exe, project, ranks, steps, db, bucket_mb):
    # training.device=cpu: on a GPU machine "auto" would put every rank on CUDA (NCCL, one GPU each).
    sets = [f"training.steps={steps}", f"training.grad_accum={ranks}", "training.threads=1", "eval.interval=0",
            "training.device=cpu",
            "telemetry.interval=0", f"training.dp_bucket_mb={bucket_mb}"]
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
    dp = ranks > 1
    return mean("step_time_ms"), mean("dp/allreduce_ms") if dp else 0.0, mean("dp/overlapped_buckets") if dp else 0.0, per_rank


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--project", default=os.path.join(ROOT, "projects", "default.json"))
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "dev"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--bucket-mb", default="25,0.0625", help="comma-separated training.dp_bucket_mb values")
    args = parser.parse_args()
    exe = os.path.join(args.build, "app", "mantissa-train")
    print(f"{'ranks':>5}  {'bucket MiB':>10}  {'ms/step':>8}  {'allreduce ms':>12}  {'share':>6}  {'overlapped':>10}  "
          "per-rank ms/step")
    configs = [(1, 25.0)] + [(2, float(b)) for b in args.bucket_mb.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (ranks, bucket_mb) in enumerate(configs):
            step, allreduce, overlapped, per_rank = run(exe, args.project, ranks, args.steps,
                                                        os.path.join(tmp, f"r{i}.db"), bucket_mb)
            share = allreduce / step if ranks > 1 else 0.0
            bucket = f"{bucket_mb:g}" if ranks > 1 else "-"
            print(f"{ranks:>5}  {bucket:>10}  {step:8.2f}  {allreduce:12.3f}  {share:6.1%}  {overlapped:10.1f}  " +
                  " ".join(f"{t:.2f}" for t in per_rank))


if __name__ == "__main__":
    main()
