#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Telemetry overhead on shakespeare-char: step time with per-layer statistics off, at the
default cadence (every 50 steps), every 10 and every step, interleaved over rounds, side by side.
With --baseline BUILD (which may be given more than once), other builds (e.g. one of the
previous commit) run in the same rounds, so all are measured under the same machine load.

  .venv/bin/python bench/telemetry.py [--data PATH] [--preset fp32] [--steps 200] [--rounds 3]
                                      [--cadences 0,50,10,1] [--baseline BUILD_DIR] [--threads N]
"""
import argparse
import os
import statistics
import re
import tempfile
from types import SimpleNamespace

from benchlib import add_common_args, data_path, run_cli

LOOP_RE = re.compile(r"mean loop time: ([0-9.]+) ms")


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--preset", default="fp32")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cadences", default="0,50,10,1", help="telemetry.interval values; 0 (off) is the base")
    ap.add_argument("--baseline", action="append", default=[],
                    help="another build directory (holding app/mantissa-train) to measure in the same rounds; repeatable")
    ap.add_argument("--threads", type=int, help="training.threads (and OMP_NUM_THREADS) for the runs (1: no thread "
                    "barriers, steadier on a machine shared with other work)")
    args = ap.parse_args()
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    data = data_path(args)
    cadences = [int(c) for c in args.cadences.split(",")]
    if 0 not in cadences:
        cadences.insert(0, 0)
    builds = {}
    for i, b in enumerate(args.baseline):
        builds["baseline" if len(args.baseline) == 1 else f"base{i + 1}"] = SimpleNamespace(build=b)
    builds["this"] = args
    times = {(b, c): [] for b in builds for c in cadences}
    loops = {(b, c): [] for b in builds for c in cadences}  # empty for a build that does not print it
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for b, build in builds.items():
                for c in cadences:
                    sets = [f"data.path={data}", f"training.steps={args.steps}", "eval.interval=0", "eval.batches=1",
                            "eval.sample_tokens=0", f"telemetry.interval={c}", f"precision.preset={args.preset}"]
                    # mantissa-train sets its own thread count (training.threads, all cores by default):
                    # OMP_NUM_THREADS alone was overridden, and "one thread" runs took every core.
                    if args.threads:
                        sets.append(f"training.threads={args.threads}")
                    ms, out = run_cli(build, os.path.join(tmp, "b.sqlite"), sets)
                    times[(b, c)].append(ms)
                    loop = LOOP_RE.search(out)
                    if loop:
                        loops[(b, c)].append(float(loop.group(1)))
                print(f"round {r + 1} {b}: " + ", ".join(f"interval {c}: {times[(b, c)][-1]:.1f} ms" for c in cadences),
                      flush=True)
    threads = f", training.threads={args.threads}" if args.threads else ""
    print(f"\n{args.preset}, {args.steps} steps x {args.rounds} rounds{threads} (median ms/step):")
    print("step: the training step alone; loop: the step with its telemetry frame's read-back and the sinks,"
          " what statistics cost the run (builds before 2026-12-05 print no loop time)")
    for b in builds:
        base = statistics.median(times[(b, 0)])
        loop_base = statistics.median(loops[(b, 0)]) if loops[(b, 0)] else None
        for c in cadences:
            m = statistics.median(times[(b, c)])
            label = "off" if c == 0 else f"every {c} step{'s' if c > 1 else ''}"
            line = f"  {b:8s} telemetry {label:14s} step {m:7.2f} ms {100 * (m / base - 1):+6.1f}%"
            if loop_base and loops[(b, c)]:
                lm = statistics.median(loops[(b, c)])
                line += f"   loop {lm:7.2f} ms {100 * (lm / loop_base - 1):+6.1f}%"
            print(line)


if __name__ == "__main__":
    main()
