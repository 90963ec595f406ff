#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Telemetry overhead on shakespeare-char: step time with per-layer statistics off, at the
default cadence (every 50 steps), every 10 and every step, interleaved over rounds, side by side.

  .venv/bin/python bench/telemetry.py [--data PATH] [--preset fp32] [--steps 200] [--rounds 3]
"""
import argparse
import os
import statistics
import tempfile

from benchlib import add_common_args, data_path, run_cli


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--preset", default="fp32")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    data = data_path(args)
    cadences = [0, 50, 10, 1]
    times = {c: [] for c in cadences}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for c in cadences:
                sets = [f"data.path={data}", f"training.steps={args.steps}", "eval.interval=0", "eval.batches=1",
                        "eval.sample_tokens=0", f"telemetry.interval={c}", f"precision.preset={args.preset}"]
                times[c].append(run_cli(args, os.path.join(tmp, "b.sqlite"), sets)[0])
            print(f"round {r + 1}: " + ", ".join(f"interval {c}: {times[c][-1]:.1f} ms" for c in cadences), flush=True)
    base = statistics.median(times[0])
    print(f"\n{args.preset}, {args.steps} steps x {args.rounds} rounds (median ms/step):")
    for c in cadences:
        m = statistics.median(times[c])
        label = "off" if c == 0 else f"every {c} step{'s' if c > 1 else ''}"
        print(f"  telemetry {label:14s} {m:7.2f} ms   overhead {100 * (m / base - 1):+.1f}%")


if __name__ == "__main__":
    main()
