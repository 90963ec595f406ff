#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Native executor against the emulator on this CPU (shakespeare-char): step time per preset,
interleaved over rounds, and plain PyTorch under CPU autocast BF16 beside them.

On a CPU the native executor's 16-bit GEMMs run on the CPU's own BF16/FP16 kernels and its
FP8 GEMMs are the emulator's (dequantised codes, FP32 GEMM), so this measures the dataflow
(activations in their compute dtype, fused attention, no rounding passes), not tensor cores:
bench/gpu.py measures those on a GPU.

  .venv/bin/python bench/executors.py [--steps 100] [--rounds 3]
"""
import argparse
import os
import statistics
import subprocess
import sys

from benchlib import ROOT, SHAKESPEARE, STEP_RE, add_common_args, data_path, run_cli

PRESETS = ["fp32", "bf16", "fp16", "fp8-hybrid"]


def torch_autocast(args, data):
    cmd = [sys.executable, os.path.join(ROOT, "bench", "reference_gpt.py"), SHAKESPEARE, "--no-eval",
           "--autocast", "bf16", "--set", f"data.path={data}", "--set", f"training.steps={args.steps}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(STEP_RE.search(out).group(1))


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    data = data_path(args)
    runs = [(p, b) for p in PRESETS for b in ("emulated", "native")]
    times = {r: [] for r in runs}
    times["torch autocast bf16"] = []
    for rnd in range(args.rounds):
        for p, b in runs:
            ms, _ = run_cli(args, None, [f"data.path={data}", "eval.interval=0", "eval.sample_tokens=0",
                                         f"training.steps={args.steps}", f"precision.preset={p}",
                                         f"precision.backend={b}"])
            times[(p, b)].append(ms)
        times["torch autocast bf16"].append(torch_autocast(args, data))
        print(f"round {rnd + 1}: " + ", ".join(f"{k if isinstance(k, str) else '/'.join(k)} {v[-1]:.1f}"
                                                for k, v in times.items()), flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    fp32 = med[("fp32", "emulated")]
    print("median ms/step:")
    for p in PRESETS:
        e, n = med[(p, "emulated")], med[(p, "native")]
        print(f"  {p:12s} emulated {e:7.2f}  native {n:7.2f}  native/emulated {n / e:.2f}  native/fp32 {n / fp32:.2f}")
    a = med["torch autocast bf16"]
    print(f"  PyTorch autocast bf16 {a:.2f}; mantissa native bf16 / autocast = {med[('bf16', 'native')] / a:.2f}")


if __name__ == "__main__":
    main()
