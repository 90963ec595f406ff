#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Step-time cost of recording a run: mantissa-train with the run store vs --no-store, on
shakespeare-char with telemetry every 10 steps (so layer statistics flow too), interleaved.

  .venv/bin/python bench/store_cost.py [--data PATH] [--steps 200] [--rounds 3]
"""
import argparse
import os
import statistics
import tempfile

from benchlib import add_common_args, data_path, run_cli


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    data = data_path(args)
    sets = [f"data.path={data}", f"training.steps={args.steps}", "eval.interval=0", "eval.batches=1",
            "eval.sample_tokens=0", "telemetry.interval=10"]
    times = {"store": [], "no store": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in times:
                db = os.path.join(tmp, f"r{r}.sqlite") if mode == "store" else None
                times[mode].append(run_cli(args, db, sets)[0])
            print(f"round {r + 1}: " + ", ".join(f"{m} {times[m][-1]:.2f} ms" for m in times), flush=True)
    s, n = statistics.median(times["store"]), statistics.median(times["no store"])
    print(f"\nmedian ms/step: with store {s:.2f}, without {n:.2f}: storing costs {100 * (s / n - 1):+.1f}%")


if __name__ == "__main__":
    main()
