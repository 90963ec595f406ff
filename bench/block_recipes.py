#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Block recipes (issue 18) on shakespeare-char: emulation step time against FP32, and
optionally the final validation loss of each recipe and of each NVFP4 ablation.

--timing: every variant runs --steps steps, interleaved over --rounds rounds so that machine
noise hits them alike; prints the median ms/step, the ratio of the medians to FP32 (targets:
fp8-block <= 1.6x, nvfp4 <= 2.0x) and the range of each round's own ratio.
--quality: every variant trains the full 2000 steps; prints the final validation loss and
its gap to FP32 (slow: about an hour on two cores).

--set KEY=VALUE (repeatable) goes to every run.
--only "NAME;NAME": run just these variants (by name, as printed); the rest are skipped, and a
quality gap is then taken to the first variant that ran.

  .venv/bin/python bench/block_recipes.py [--data PATH] [--timing] [--quality] [--only "NAME;NAME"]
"""
import argparse
import os
import re
import statistics
import tempfile

from benchlib import add_common_args, data_path, run_cli

E4M3 = "precision.preset=fp8-e4m3"
TIMED = [
    ("fp32", ["precision.preset=fp32"]),
    ("bf16", ["precision.preset=bf16"]),
    ("fp8-hybrid (delayed)", ["precision.preset=fp8-hybrid"]),
    ("fp8-block", [E4M3, "precision.fp8.scaling=fp8-block"]),
    ("nvfp4", [E4M3, "precision.fp8.scaling=nvfp4"]),
    ("mxfp4", [E4M3, "precision.fp8.scaling=mxfp4"]),
]
NVFP4 = [E4M3, "precision.fp8.scaling=nvfp4"]
QUALITY = TIMED + [
    ("nvfp4, no RHT", NVFP4 + ["precision.nvfp4.rht=false"]),
    ("nvfp4, no SR", NVFP4 + ["precision.nvfp4.stochastic_rounding=false"]),
    ("nvfp4, 1x16 weights", NVFP4 + ["precision.nvfp4.weight_2d=false"]),
    ("nvfp4, all three off", NVFP4 + ["precision.nvfp4.rht=false", "precision.nvfp4.stochastic_rounding=false",
                                      "precision.nvfp4.weight_2d=false"]),
    ("nvfp4, last block bf16", NVFP4 + ["precision.keep_last_bf16=1"]),
]


def run(args, db, data, extra):
    step, out = run_cli(args, db, [f"data.path={data}", "eval.sample_tokens=0"] + extra + args.set)
    val = re.search(r"val loss ([0-9.]+)\n", out)
    return step, (float(val.group(1)) if val else None)


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timing", action="store_true")
    ap.add_argument("--quality", action="store_true")
    ap.add_argument("--only", default="", help="variant names separated by semicolons")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to every run, e.g. training.threads=1")
    args = ap.parse_args()
    only = {n.strip() for n in args.only.split(";") if n.strip()}
    known = {n for n, _ in QUALITY}
    if only - known:
        ap.error("unknown variant(s): " + ", ".join(sorted(only - known)) + "; known: " + ", ".join(n for n, _ in QUALITY))
    chosen = lambda variants: [(n, e) for n, e in variants if not only or n in only]
    if not (args.timing or args.quality):
        args.timing = True
    data = data_path(args)
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "bench.sqlite")
        if args.timing:
            timed = chosen(TIMED)
            times = {name: [] for name, _ in timed}
            for r in range(args.rounds):
                for name, extra in timed:
                    t, _ = run(args, None, data, extra + [f"training.steps={args.steps}", "eval.interval=0",
                                                          "eval.batches=1"])
                    times[name].append(t)
                print(f"round {r + 1}: " + ", ".join(f"{n} {times[n][-1]:.1f}" for n, _ in timed), flush=True)
            first = timed[0][0]
            base = statistics.median(times[first])
            print(f"\nstep time, shakespeare-char, {args.steps} steps x {args.rounds} rounds (median ms/step;"
                  f" in brackets the ratio to {first} of the same round, lowest and highest):")
            for name, _ in timed:
                m = statistics.median(times[name])
                per_round = [t / b for t, b in zip(times[name], times[first])]
                spread = f"({min(per_round):.2f}-{max(per_round):.2f})" if args.rounds > 1 else ""
                print(f"  {name:24s} {m:7.2f} ms   x{m / base:.2f} vs {first} {spread}")
        if args.quality:
            print("\nfinal validation loss after 2000 steps:")
            base = None
            for name, extra in chosen(QUALITY):
                _, val = run(args, db, data, extra)
                base = val if base is None else base
                print(f"  {name:24s} val {val:.4f}   gap {val - base:+.4f}", flush=True)


if __name__ == "__main__":
    main()
