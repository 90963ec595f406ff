#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""ATen ops per optimizer step: Mantissa's native executor against PyTorch's eager training
step (bench/torch_twin.py: autocast, fused AdamW, foreach clipping, as on a GPU), same model,
same shapes, measured side by side in one run on the CPU.

Why: on a GPU nearly every ATen op that does work launches a kernel, and at GPT-2 small's size
the host's launch rate can set the step time (issue 11). The CPU dispatches the same ops, so
their count is measurable here without a GPU, though only as the CPU's count: CPU autocast
casts another list of ops than CUDA's, some ops split differently on the two devices, and FP8
is left out (its CPU GEMMs take the dequantised route). What is counted: the ops that do work
themselves (working_ops says how wrappers, views and helpers are told apart), each _foreach_ /
_fused_ op once whatever it calls inside (on the CPU these loop over their tensors; on a GPU
they are a few multi-tensor kernels); views, allocations and pass-throughs apart.

The same step's memory: the most bytes held at once above what the step started with
(activations saved for the backward, gradients, temporaries: what a GPU's peak adds to the
weights and optimizer state, both sides setting gradients to None between steps), from every
CPU allocation and free the profiler saw.

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

# Ops that launch no kernel themselves: views of a storage, allocations, and wrappers that
# either return their input (a dropout of p = 0, a `to` that changes nothing) or leave the work
# to an op inside them.
NO_KERNEL = {"aten::dropout", "aten::to", "aten::view", "aten::as_strided", "aten::transpose", "aten::t", "aten::reshape", "aten::unsqueeze",
         "aten::squeeze", "aten::expand", "aten::slice", "aten::narrow", "aten::select", "aten::split",
         "aten::permute", "aten::detach", "aten::alias", "aten::_unsafe_view", "aten::resolve_conj",
         "aten::resolve_neg", "aten::empty", "aten::empty_strided", "aten::empty_like", "aten::lift_fresh",
         "aten::_reshape_alias", "aten::unbind", "aten::chunk", "aten::split_with_sizes", "aten::view_as",
         "aten::resize_", "aten::contiguous", "aten::result_type", "aten::is_nonzero"}
# Ops that, run inside another op, are part of its one kernel on a GPU.
HELPERS = {"aten::copy_", "aten::fill_", "aten::zero_"}


def read_events(path):
    """(name, thread, start ns, end ns) of the ops, and (start ns, bytes) of the allocations."""
    events, memory = [], []
    with open(path) as f:
        for line in f:
            name, thread, start, end, nbytes = line.rstrip("\n").split("\t")
            if name == "[memory]":
                memory.append((int(start), int(nbytes)))
            else:
                events.append((name, int(thread), int(start), int(end)))
    return events, memory


def peak_bytes(memory):
    """The most bytes held at once above what the step started with (its activations,
    gradients and temporaries), from the allocations and frees in time order."""
    held = peak = 0
    for _, nbytes in sorted(memory):
        held += nbytes
        peak = max(peak, held)
    return peak


def working_ops(events):
    """The ops that do the work themselves, per thread, from how the profiler nests them.

    An op is a wrapper, and not counted, when another op inside it does work (linear around
    addmm, to around _to_copy). Otherwise it is counted once, with the copy_/fill_/zero_ it runs
    inside itself (addmm's bias copy, _to_copy's copy, zeros' fill: one kernel on a GPU). Views,
    allocations and no-ops (NO_KERNEL) are never counted, and do not make their parent a
    wrapper. A _foreach_ or _fused_ op counts once whatever it calls inside."""
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[e[1]].append(e)
    counted = []
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e[2], -e[3]))
        # The forest of ops on this thread: [name, end, children].
        roots, stack = [], []
        for name, _, start, end in evs:
            while stack and stack[-1][1] <= start:
                stack.pop()
            node = [name, end, []]
            (stack[-1][2] if stack else roots).append(node)
            stack.append(node)

        def visit(node):
            name, _, children = node
            if name.startswith(("aten::_foreach_", "aten::_fused_")):
                return [name]
            below = [visit(c) for c in children]
            work = [ops for c, ops in zip(children, below) if ops and not (c[0] in HELPERS and ops == [c[0]])]
            if name in NO_KERNEL or work:
                return [op for ops in below for op in ops]
            return [name]

        for root in roots:
            counted += visit(root)
    return collections.Counter(counted)


def no_kernel_ops(events):
    return sum(1 for e in events if e[0] in NO_KERNEL)


def step_times(args, sets, preset, vocab):
    """Mean ms per step of mantissa-train and of the twin (after their warm-up), in turn."""
    steps = args.time_steps
    cmd = [os.path.join(args.build, "app", "mantissa-train"), "run", os.path.join(ROOT, "projects", "default.json"),
           "--no-store"] + sum((["--set", s] for s in sets + [f"training.steps={steps}", "eval.batches=1"]), [])
    mine = float(STEP_RE.search(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout).group(1))
    twin = [sys.executable, os.path.join(ROOT, "bench", "torch_twin.py"), "--device", "cpu", "--gpu-optimizer",
            "--mode", preset, "--layers", str(args.layers), "--heads", str(args.heads), "--width", str(args.width),
            "--context", str(args.context), "--batch", str(args.batch), "--vocab", str(vocab), "--steps", str(steps),
            # mantissa-train leaves min(10, steps / 10) steps out of its mean: the twin the same
            # (it left out min(10, steps / 2): 10 against 6 at 60 steps).
            "--warmup", str(min(10, steps // 10))]
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
    print(f"{'preset':8} {'mantissa':>9} {'pytorch':>8} {'ratio':>6}   {'no kernel m/p':>14}"
          f"   {'peak MiB m/p':>15} {'ratio':>6}" + timing)
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            mine, theirs = os.path.join(tmp, f"m-{preset}.tsv"), os.path.join(tmp, f"p-{preset}.tsv")
            sets = ["training.device=cpu", f"precision.preset={preset}", "precision.backend=native", "telemetry.interval=0",
                    f"model.n_layer={args.layers}", f"model.n_embd={args.width}", f"model.n_head={args.heads}",
                    f"model.context_length={args.context}", f"training.batch_size={args.batch}",
                    "training.grad_accum=1", "model.dropout=0"]
            with open(mine, "w") as out:
                subprocess.run([events_tool, "--after", "3", "--memory"] + sum((["--set", s] for s in sets), []), stdout=out,
                               stderr=subprocess.DEVNULL, check=True)
            subprocess.run([sys.executable, os.path.join(ROOT, "bench", "torch_twin.py"), "--device", "cpu",
                            "--mode", preset, "--layers", str(args.layers), "--heads", str(args.heads),
                            "--width", str(args.width), "--context", str(args.context), "--batch", str(args.batch),
                            "--vocab", str(vocab), "--steps", "5", "--warmup", "3", "--op-events", theirs],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            (m_ops, m_mem), (p_ops, p_mem) = read_events(mine), read_events(theirs)
            m, p = working_ops(m_ops), working_ops(p_ops)
            mw, pw = sum(m.values()), sum(p.values())
            mv, pv = no_kernel_ops(m_ops), no_kernel_ops(p_ops)
            m_peak, p_peak = peak_bytes(m_mem) / 2**20, peak_bytes(p_mem) / 2**20
            line = f"{preset:8} {mw:9d} {pw:8d} {mw / pw:6.2f}   {mv:7d}/{pv:<6d}"
            line += f"   {m_peak:7.1f}/{p_peak:<7.1f} {m_peak / p_peak:6.2f}"
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
