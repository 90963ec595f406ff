#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Precision presets on shakespeare-char: step time relative to FP32, and final val loss.

Part 1 (--timing): every preset runs --steps steps, interleaved over --rounds rounds so that
machine noise hits them alike; prints the median ms/step and the ratio to FP32.
Part 2 (--quality): every preset (plus fp16 without loss scaling) trains the full 2000
steps; prints the final validation loss and its gap to FP32.

  .venv/bin/python bench/presets.py [--data PATH] [--timing] [--quality]
"""
import argparse
import os
import re
import statistics
import tempfile

from benchlib import add_common_args, data_path, run_cli

PRESETS = ["fp32", "bf16", "fp16", "fp8-hybrid", "fp8-hybrid-keep-ends"]


def run(args, db, data, extra):
    step, out = run_cli(args, db, [f"data.path={data}", "eval.sample_tokens=0"] + extra)
    val = re.search(r"val loss ([0-9.]+)\n", out)
    skipped = out.count("[step_skipped]") + out.count("[loss_scale_backoff]")
    return step, (float(val.group(1)) if val else None), skipped


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--quality", action="store_true")
    args = ap.parse_args()
    if not (args.timing or args.quality):
        args.timing = args.quality = True
    data = data_path(args)
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.sqlite")
        if args.timing:
            times = {p: [] for p in PRESETS}
            for r in range(args.rounds):
                for p in PRESETS:
                    t, _, _ = run(args, db, data, [f"precision.preset={p}", f"training.steps={args.steps}",
                                                  "eval.interval=0", "eval.batches=1"])
                    times[p].append(t)
                print(f"round {r + 1}: " + ", ".join(f"{p} {times[p][-1]:.1f}" for p in PRESETS), flush=True)
            base = statistics.median(times["fp32"])
            print(f"\nstep time, shakespeare-char, {args.steps} steps x {args.rounds} rounds (median ms/step):")
            for p in PRESETS:
                m = statistics.median(times[p])
                print(f"  {p:22s} {m:7.2f} ms   x{m / base:.2f} vs fp32")
        if args.quality:
            print("\nfinal validation loss after 2000 steps:")
            runs = [(p, [f"precision.preset={p}"]) for p in PRESETS]
            runs.append(("fp16, loss scaling off", ["precision.preset=fp16", "precision.loss_scaling.mode=off"]))
            base = None
            for name, extra in runs:
                _, val, skipped = run(args, db, data, extra)
                base = val if base is None else base
                print(f"  {name:24s} val {val:.4f}   gap {val - base:+.4f}   skipped/backoff events {skipped}",
                      flush=True)


if __name__ == "__main__":
    main()
