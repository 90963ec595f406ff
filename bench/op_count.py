#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""ATen ops per optimizer step: Mantissa's native executor against PyTorch's eager training
step (bench/torch_twin.py: autocast, fused AdamW, foreach clipping, as on a GPU), same model,
same shapes, measured side by side in one run on the CPU.

Why: on a GPU nearly every ATen op that does work launches a kernel, and at GPT-2 small's size
the host's launch rate can set the step time (issue 11). The CPU dispatches the same ops, so
their count is measurable here without a GPU. What is counted: ATen ops with no ATen op inside
them (the ones that do the work themselves), and each _foreach_ / _fused_ op once whatever it
calls inside (on the CPU these loop over their tensors; on a GPU they are a few multi-tensor
kernels). Views, allocations and pass-throughs (view, transpose, empty, a dropout of p = 0, ...)
are counted apart: they launch nothing. FP8 is left out: on the CPU its GEMMs take the
dequantised route, not the GPU's.

With --time-steps N it also times N steps of each side (mantissa-train, and the twin with a
GPU's optimizer) and prints the mean step times: at a small width the CPU's step is mostly
the host dispatching ops, which is what limits a launch-bound GPU step.

  bench/op_count.py [--layers 2 --width 128 --heads 4 --context 64 --batch 8] [--time-steps 40]
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile

from benchlib import ROOT, STEP_RE

# Ops that launch no kernel on any device: views of a storage, allocations, and (as a leaf)
# a dropout of p = 0, which returns its input.
NO_KERNEL = {"aten::dropout", "aten::view", "aten::as_strided", "aten::transpose", "aten::t", "aten::reshape", "aten::unsqueeze",
         "aten::squeeze", "aten::expand", "aten::slice", "aten::narrow", "aten::select", "aten::split",
         "aten::permute", "aten::detach", "aten::alias", "aten::_unsafe_view", "aten::resolve_conj",
         "aten::resolve_neg", "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::lift_fresh",
         "aten::_reshape_alias", "aten::unbind", "aten::chunk", "aten::split_with_sizes", "aten::view_as",
         "aten::resize_", "aten::contiguous", "aten::result_type", "aten::is_nonzero"}


def read_events(path):
    events = []
    with open(path) as f:
        for line in f:
            name, thread, start, end = line.rstrip("\n").split("\t")
            events.append((name, int(thread), int(start), int(end)))
    return events


def working_ops(events):
    """The ops that do work themselves: no ATen op inside them (on the same thread), or a
    _foreach_/_fused_ op, whose insides are not counted."""
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[e[1]].append(e)
    counted = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e[2], -e[3]))
        stack = []  # [event, has_child, inside_foreach]
        def close(entry):
            e, has_child, inside = entry
            fused = e[0].startswith(("aten::_foreach_", "aten::_fused_"))
            if not inside and (fused or not has_child):
                counted.append(e[0])
        for e in evs:
            while stack and stack[-1][0][3] <= e[2]:
                close(stack.pop())
            inside = bool(stack) and (stack[-1][2] or stack[-1][0][0].startswith(("aten::_foreach_", "aten::_fused_")))
            if stack:
                stack[-1][1] = True
            stack.append([e, False, inside])
        while stack:
            close(stack.pop())
    return collections.Counter(counted)


def summary(counts):
    work = sum(n for name, n in counts.items() if name not in NO_KERNEL)
    return work, sum(counts.values()) - work


def step_times(args, sets, preset, vocab):
    """Mean ms per step of mantissa-train and of the twin (after their warm-up), in turn."""
    steps = args.time_steps
    cmd = [os.path.join(args.build, "app", "mantissa-train"), "run", os.path.join(ROOT, "projects", "default.json"),
           "--no-store"] + sum((["--set", s] for s in sets + [f"training.steps={steps}", "eval.batches=1"]), [])
    mine = float(STEP_RE.search(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout).group(1))
    twin = [sys.executable, os.path.join(ROOT, "bench", "torch_twin.py"), "--device", "cpu", "--gpu-optimizer",
            "--mode", preset, "--layers", str(args.layers), "--heads", str(args.heads), "--width", str(args.width),
            "--context", str(args.context), "--batch", str(args.batch), "--vocab", str(vocab), "--steps", str(steps),
            "--warmup", str(min(10, steps // 2))]
    theirs = float(STEP_RE.search(subprocess.run(twin, check=True, capture_output=True, text=True).stdout).group(1))
    return mine, theirs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--presets", default="fp32,bf16,fp16")
    ap.add_argument("--detail", action="store_true", help="print each op whose count differs, both sides")
    ap.add_argument("--time-steps", type=int, default=0, help="also time this many steps of each side")
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "dev"), help="CMake build directory")
    args = ap.parse_args()
    events_tool = os.path.join(args.build, "bench", "op_events")
    vocab = 13  # the default project's synthetic-addition data
    print(f"ATen ops per optimizer step, {args.layers} layers x {args.width} wide, {args.heads} heads, "
          f"context {args.context}, batch {args.batch} (CPU; counted as the module docstring says)")
    timing = f"   {'ms/step m/p':>15} {'ratio':>6}" if args.time_steps else ""
    print(f"{'preset':8} {'mantissa':>9} {'pytorch':>8} {'ratio':>6}   {'no kernel m/p':>14}" + timing)
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            mine, theirs = os.path.join(tmp, f"m-{preset}.tsv"), os.path.join(tmp, f"p-{preset}.tsv")
            sets = [f"precision.preset={preset}", "precision.backend=native", "telemetry.interval=0",
                    f"model.n_layer={args.layers}", f"model.n_embd={args.width}", f"model.n_head={args.heads}",
                    f"model.context_length={args.context}", f"training.batch_size={args.batch}",
                    "training.grad_accum=1", "model.dropout=0"]
            with open(mine, "w") as out:
                subprocess.run([events_tool, "--after", "3"] + sum((["--set", s] for s in sets), []), stdout=out,
                               stderr=subprocess.DEVNULL, check=True)
            subprocess.run([sys.executable, os.path.join(ROOT, "bench", "torch_twin.py"), "--device", "cpu",
                            "--mode", preset, "--layers", str(args.layers), "--heads", str(args.heads),
                            "--width", str(args.width), "--context", str(args.context), "--batch", str(args.batch),
                            "--vocab", str(vocab), "--steps", "5", "--warmup", "3", "--op-events", theirs],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            m, p = working_ops(read_events(mine)), working_ops(read_events(theirs))
            (mw, mv), (pw, pv) = summary(m), summary(p)
            line = f"{preset:8} {mw:9d} {pw:8d} {mw / pw:6.2f}   {mv:7d}/{pv:<6d}"
            if args.time_steps:
                mine_ms, theirs_ms = step_times(args, sets, preset, vocab)
                line += f"   {mine_ms:7.2f}/{theirs_ms:<7.2f} {mine_ms / theirs_ms:6.2f}"
            print(line, flush=True)
            if args.detail:
                for name in sorted(set(m) | set(p), key=lambda n: -(m[n] + p[n])):
                    if m[name] != p[name]:
                        print(f"    {name:40} {m[name]:5d} {p[name]:5d}")


if __name__ == "__main__":
    main()
