#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Milliseconds per training step: mantissa-train vs the same model in plain PyTorch.

Runs the two back to back, alternating, several rounds, on the shakespeare-char settings,
and prints the median of each and their ratio. Both report the mean step time after
their first warm-up steps, measured the same way (forward + backward + clip + update).

  .venv/bin/python bench/step_time.py [--data PATH] [--steps 300] [--rounds 3]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEP_RE = re.compile(r"mean step time: ([0-9.]+) ms")


def measure(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    m = STEP_RE.search(out)
    if not m:
        sys.exit("no step time in output of: " + " ".join(cmd) + "\n" + out)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "dev"))
    args = ap.parse_args()
    data = os.path.abspath(args.data)
    if not os.path.exists(data):
        sys.exit(f"tinyshakespeare not found at {data}; pass --data")
    project = os.path.join(ROOT, "projects", "shakespeare-char.json")
    sets = [f"data.path={data}", f"training.steps={args.steps}", "eval.interval=0", "eval.batches=1",
            "eval.sample_tokens=0"]
    cli = os.path.join(args.build, "app", "mantissa-train")
    with tempfile.TemporaryDirectory() as tmp:
        cpp_cmd = [cli, "run", project, "--db", os.path.join(tmp, "bench.sqlite")]
        for s in sets:
            cpp_cmd += ["--set", s]
        py_cmd = [sys.executable, os.path.join(ROOT, "bench", "reference_gpt.py"), project, "--no-eval"]
        for s in sets:
            py_cmd += ["--set", s]
        cpp, py = [], []
        for r in range(args.rounds):
            cpp.append(measure(cpp_cmd))
            py.append(measure(py_cmd))
            print(f"round {r + 1}: mantissa-train {cpp[-1]:.2f} ms/step, plain PyTorch {py[-1]:.2f} ms/step",
                  flush=True)
    c, p = statistics.median(cpp), statistics.median(py)
    print(f"shakespeare-char FP32, {args.steps} steps x {args.rounds} rounds (median):")
    print(f"  mantissa-train : {c:.2f} ms/step")
    print(f"  plain PyTorch  : {p:.2f} ms/step")
    print(f"  ratio C++/PyTorch = {c / p:.3f}  ({'faster' if c < p else 'slower'})")


if __name__ == "__main__":
    main()
