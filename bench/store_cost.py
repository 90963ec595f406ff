#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Step-time cost of recording a run: mantissa-train with the run store vs --no-store, on
shakespeare-char with telemetry every 10 steps (so layer statistics flow too), interleaved.

  .venv/bin/python bench/store_cost.py [--data PATH] [--steps 200] [--rounds 3]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "dev"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    data = os.path.abspath(args.data)
    if not os.path.exists(data):
        sys.exit(f"tinyshakespeare not found at {data}; pass --data")
    cli = os.path.join(args.build, "app", "mantissa-train")
    sets = [f"data.path={data}", f"training.steps={args.steps}", "eval.interval=0", "eval.batches=1",
            "eval.sample_tokens=0", "telemetry.interval=10"]
    times = {"store": [], "no store": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for mode in times:
                cmd = [cli, "run", os.path.join(ROOT, "projects", "shakespeare-char.json")]
                cmd += ["--db", os.path.join(tmp, f"r{r}.sqlite")] if mode == "store" else ["--no-store"]
                for s in sets:
                    cmd += ["--set", s]
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                times[mode].append(float(re.search(r"mean step time: ([0-9.]+) ms", out).group(1)))
            print(f"round {r + 1}: " + ", ".join(f"{m} {times[m][-1]:.2f} ms" for m in times), flush=True)
    s, n = statistics.median(times["store"]), statistics.median(times["no store"])
    print(f"\nmedian ms/step: with store {s:.2f}, without {n:.2f}: storing costs {100 * (s / n - 1):+.1f}%")


if __name__ == "__main__":
    main()
