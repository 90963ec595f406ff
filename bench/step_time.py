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
import statistics
import subprocess
import sys
import tempfile

from benchlib import ROOT, SHAKESPEARE, STEP_RE, add_common_args, data_path, run_cli


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    data = data_path(args)
    sets = [f"data.path={data}", f"training.steps={args.steps}", "eval.interval=0", "eval.batches=1",
            "eval.sample_tokens=0"]
    py_cmd = [sys.executable, os.path.join(ROOT, "bench", "reference_gpt.py"), SHAKESPEARE, "--no-eval"]
    for s in sets:
        py_cmd += ["--set", s]

    def measure_python():
        out = subprocess.run(py_cmd, check=True, capture_output=True, text=True).stdout
        return float(STEP_RE.search(out).group(1))

    with tempfile.TemporaryDirectory() as tmp:
        cpp, py = [], []
        for r in range(args.rounds):
            cpp.append(run_cli(args, os.path.join(tmp, "bench.sqlite"), sets)[0])
            py.append(measure_python())
            print(f"round {r + 1}: mantissa-train {cpp[-1]:.2f} ms/step, plain PyTorch {py[-1]:.2f} ms/step",
                  flush=True)
    c, p = statistics.median(cpp), statistics.median(py)
    print(f"shakespeare-char FP32, {args.steps} steps x {args.rounds} rounds (median):")
    print(f"  mantissa-train : {c:.2f} ms/step")
    print(f"  plain PyTorch  : {p:.2f} ms/step")
    print(f"  ratio C++/PyTorch = {c / p:.3f}  ({'faster' if c < p else 'slower'})")


if __name__ == "__main__":
    main()
