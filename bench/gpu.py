#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU benchmark (issues 11 and 12), in one run on one machine:

1. the BF16 matmul peak of this GPU, measured (8192^3 GEMMs), for MFU;
2. for each shape (GPT-2 small: 12 x 768, 12 heads, context 1024, batch 16; wide: 4 x 4096,
   32 heads, context 2048, batch 8), every preset through mantissa-train (native executor)
   and the PyTorch baselines of bench/torch_twin.py (eager fp32, autocast bf16/fp16,
   torch.compile bf16, an FP8 _scaled_mm Linear): ms/step, tokens/s, MFU, peak memory, and
   the ratio to autocast;
3. the telemetry cost on GPT-2 small BF16: statistics off, every 50 (the default), every 10
   and every step, over --telemetry-steps steps.

The runs go in the order of what they are worth to the issues, since a lent GPU's time is
short: `--part first` is BF16/FP16 against autocast on GPT-2 small, then FP8 delayed against
BF16 on the wide shape, then the telemetry cost; `--part rest` is every other row. Each run
has its own time limit (--run-timeout), and the tables are printed, and written as JSON
(--json), after each part.

Random tokens in nanoGPT .bin files (vocabulary 50304). Run it on the device machine after
the build (bench/gpu_session.sh does both, see ../shared/gpu/README.md):

  python3 bench/gpu.py --build build/gpu [--part first|rest|all|profile] [--steps 30] [--shapes small,wide]
                       [--telemetry] [--skip-twins] [--json results.json]

`--part profile` times nothing: it runs bench/gpu_profile on the rows in PROFILES and prints
where their steps' device time goes, by kernel and by kind of work.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = 50304
SHAPES = {
    "small": dict(layers=12, heads=12, width=768, context=1024, batch=16),
    "wide": dict(layers=4, heads=32, width=4096, context=2048, batch=8),
}
# Current scaling (TE's Float8CurrentScaling) prices its amax pass against delayed above.
# Issue 18's GPU measure: fp8-block (E4M3 throughout, so every GEMM may take cuBLAS's blockwise
# path on sm_90) against Mantissa's own FP8 delayed recipe with the same formats, and BF16 above.
# Every Mantissa row runs with its default deterministic kernels (training.deterministic), which
# PyTorch's twins do not use; the last row prices that guarantee.
RECIPES = {"fp8-hybrid current": ["precision.preset=fp8-hybrid", "precision.fp8.scaling=current"],
           "fp8-e4m3 delayed": ["precision.preset=fp8-e4m3"],
           "fp8-block": ["precision.preset=fp8-e4m3", "precision.fp8.scaling=fp8-block"],
           # The same recipe through the emulator's autograd (values split into codes around
           # each GEMM), as before session 30: what the codes-from-the-cast path bought.
           "fp8-block, split path": ["precision.preset=fp8-e4m3", "precision.fp8.scaling=fp8-block",
                                     "env:MANTISSA_FP8_BLOCK_CODES=0"],
           "bf16, deterministic off": ["precision.preset=bf16", "training.deterministic=false"],
           # fc2's input cast from fc1's output with the GELU in it (session 32), turned off: what
           # the fused activation cast buys, or costs, against at::gelu then the cast.
           "fp8-hybrid, GELU apart": ["precision.preset=fp8-hybrid", "env:MANTISSA_GELU_CAST=0"]}
TWINS = ["fp32", "bf16", "fp16", "bf16-compile", "fp8"]
# --part profile: where the time of the rows that miss their targets goes, kernel by kernel
# (bench/gpu_profile), in the order of what each is worth: a telemetry step against a plain
# BF16 step (issue 12), FP8 delayed against BF16 on GPT-2 small (issue 11), fp8-block on the
# wide shape (issue 18).
PROFILES = [("small", "bf16, telemetry every step", ["precision.preset=bf16", "telemetry.interval=1"]),
            ("small", "bf16", ["precision.preset=bf16"]),
            ("small", "fp8-hybrid", ["precision.preset=fp8-hybrid"]),
            ("wide", "fp8-block", RECIPES["fp8-block"]),
            ("wide", "fp8-e4m3 delayed", RECIPES["fp8-e4m3 delayed"])]
NOTES = {}  # run -> the fallback warnings it printed


def matmul_peak_tflops():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(10):  # the clocks ramp up first
        a @ b
    torch.cuda.synchronize()
    t0, n = time.perf_counter(), 500  # ~0.5 s of GEMMs: past the clocks' first boost
    for _ in range(n):
        a @ b
    torch.cuda.synchronize()
    return 2 * 8192**3 * n / (time.perf_counter() - t0) / 1e12


def flops_per_token(s):
    # nanoGPT's estimate: 6 N for the weights' GEMMs plus 12 L T C for attention.
    L, C, T = s["layers"], s["width"], s["context"]
    n_params = L * 12 * C * C + VOCAB * C
    return 6 * n_params + 12 * L * T * C


def write_data(folder):
    rng = np.random.default_rng(0)
    for split, n in (("train", 8_000_000), ("val", 1_000_000)):
        rng.integers(0, VOCAB, n, dtype=np.uint16).tofile(os.path.join(folder, f"{split}.bin"))


def project(folder, s, steps):
    return {
        "name": "gpu-bench",
        "model": {"n_layer": s["layers"], "n_head": s["heads"], "n_embd": s["width"],
                  "context_length": s["context"], "bias": True, "dropout": 0.0},
        "data": {"kind": "bin", "dir": folder, "vocab_size": VOCAB},
        "optimizer": {"learning_rate": 3e-4, "min_learning_rate": 3e-5, "warmup_steps": min(5, steps),
                      "decay_steps": steps},
        "training": {"steps": steps, "batch_size": s["batch"], "device": "cuda"},
        "eval": {"interval": 0, "sample_tokens": 0, "batches": 1},  # the run's last evaluation: not timed, kept short
        "precision": {"preset": "fp32"},
    }


def parse(out, what):
    step = re.search(r"mean step time: ([0-9.]+) ms", out)
    mem = re.search(r"peak (?:device )?memory: ([0-9.]+) MiB", out)
    if not step:
        print(f"  {what}: no step time\n{out[-2000:]}", flush=True)
        return None, None
    return float(step.group(1)), (float(mem.group(1)) if mem else float("nan"))


def run(cmd, what, timeout_s, env=None):
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                           env=dict(os.environ, **env) if env else None)
    except subprocess.TimeoutExpired as e:
        tail = ((e.stdout or b"") + (e.stderr or b""))[-2000:]
        tail = tail.decode(errors="replace") if isinstance(tail, bytes) else tail
        print(f"  {what}: still running after {timeout_s} s, stopped\n{tail}", flush=True)
        return None, None
    out = r.stdout + r.stderr
    # A recipe that fell back to emulation says so on stderr: its time is not the native one.
    for line in out.splitlines():
        # (A kernel whose probe failed says its LibTorch "ops stay".)
        if line.startswith("mantissa:") and ("emulated" in line or "dequantised" in line or "ops stay" in line
                                             or "round after" in line):
            print(f"  {what}: {line.strip()}", flush=True)
            NOTES.setdefault(what, []).append(line.strip())
    if r.returncode != 0:
        print(f"  {what}: exit {r.returncode} after {time.time() - t0:.0f} s\n{out[-3000:]}", flush=True)
        return None, None
    return parse(out, what)


def jobs(part, shapes, twins, telemetry):
    """(shape, row label, command kind, its argument) in the order of their value."""
    def m(shape, label, sets):
        return (shape, f"mantissa {label}", "mantissa", sets)

    def t(shape, mode):
        return (shape, f"torch {mode}", "torch", mode)

    # The first call is, realistically, the only one (15 minutes of device time, start-up
    # included): everything issue 11 names comes first, the slow wide FP32 rows last.
    first = [  # issue 11's headline: BF16/FP16 against autocast on GPT-2 small
        m("small", "bf16", ["precision.preset=bf16"]), t("small", "bf16"),
        m("small", "fp16", ["precision.preset=fp16"]), t("small", "fp16"),
        # Mantissa runs deterministic kernels by default, the twins do not: what that costs.
        m("small", "bf16, deterministic off", RECIPES["bf16, deterministic off"]),
        # how far from torch.compile, and FP32 parity
        t("small", "bf16-compile"), m("small", "fp32", ["precision.preset=fp32"]), t("small", "fp32"),
        # issue 12's telemetry costs (with --telemetry), before the wide shape's slower runs
        ("small", "telemetry", "telemetry", None),
        # FP8 delayed against BF16: >= 1.2x on the wide shape, >= 0.9x on GPT-2 small
        m("wide", "bf16", ["precision.preset=bf16"]), m("wide", "fp8-hybrid", ["precision.preset=fp8-hybrid"]),
        t("wide", "bf16"), t("wide", "fp8"),
        m("small", "fp8-hybrid", ["precision.preset=fp8-hybrid"]),
        # issue 18's GPU measure: fp8-block against the FP8 delayed recipe (and BF16 above)
        m("wide", "fp8-e4m3 delayed", RECIPES["fp8-e4m3 delayed"]), m("wide", "fp8-block", RECIPES["fp8-block"]),
        m("wide", "fp8-block, split path", RECIPES["fp8-block, split path"]),
        # last, so that it is the row a short first part loses: the fused GELU cast's effect
        m("small", "fp8-hybrid, GELU apart", RECIPES["fp8-hybrid, GELU apart"]),
    ]
    # Then the other recipes and presets, and last the slow wide FP32 runs.
    rest = [t("small", "fp8")]
    rest += [m("wide", label, sets) for label, sets in RECIPES.items() if m("wide", label, sets) not in first]
    rest += [m("small", label, sets) for label, sets in RECIPES.items() if m("small", label, sets) not in first]
    rest += [m(shape, "fp8-hybrid-keep-ends", ["precision.preset=fp8-hybrid-keep-ends"]) for shape in ("small", "wide")]
    rest += [m("wide", "fp16", ["precision.preset=fp16"]), t("wide", "fp16"), t("wide", "bf16-compile"),
             m("wide", "fp32", ["precision.preset=fp32"]), t("wide", "fp32")]
    chosen = {"first": first, "rest": rest, "all": first + rest}[part]
    return [j for j in chosen if j[0] in shapes and (twins or j[2] != "torch") and (telemetry or j[2] != "telemetry")]


def print_tables(results, peak, reference):
    for name, rows in results.items():
        s = SHAPES[name]
        tokens = s["batch"] * s["context"]
        ref = rows.get("torch bf16", reference.get(name, {}).get("torch bf16", (None, None)))[0]
        print(f"\n## {name}: {s}\n| run | ms/step | tokens/s | MFU | peak MiB | x autocast bf16 (tokens/s) |")
        print("|---|---|---|---|---|---|")
        for what, (ms, mem) in rows.items():
            if ms is None:
                print(f"| {what} | failed | | | | |")
                continue
            tps = tokens / (ms / 1000)
            mfu = tps * flops_per_token(s) / (peak * 1e12)
            ratio = f"{ref / ms:.2f}" if ref else "-"
            # A row taken over from an earlier call's JSON has null for a missing reading.
            mem_text = "-" if mem is None or mem != mem else f"{mem:.0f}"
            print(f"| {what} | {ms:.1f} | {tps:,.0f} | {mfu:.1%} | {mem_text} | {ratio} |")
    print(flush=True)


def profile(args, shapes):
    exe = os.path.join(args.build, "bench", "gpu_profile")
    with tempfile.TemporaryDirectory() as tmp:
        write_data(tmp)
        for shape, label, sets in PROFILES:
            if shape not in shapes:
                continue
            path = os.path.join(tmp, f"{shape}.json")
            with open(path, "w") as f:
                json.dump(project(tmp, SHAPES[shape], 12), f)
            cmd = [exe, path, "--from", "5", "--steps", "3", "--set", "telemetry.interval=0"]
            for kv in sets:
                cmd += ["--set", kv]
            print(f"\n## profile: {shape} {label}", flush=True)
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.run_timeout)
            except subprocess.TimeoutExpired:
                print(f"  still running after {args.run_timeout} s, stopped", flush=True)
                continue
            # Kineto's own log lines go to stderr; a failure's reason too.
            print(r.stdout if r.returncode == 0 else f"  exit {r.returncode}\n{(r.stdout + r.stderr)[-3000:]}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "gpu"))
    ap.add_argument("--part", choices=["first", "rest", "all", "profile"], default="all")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--shapes", default="small,wide")
    ap.add_argument("--skip-twins", action="store_true")
    ap.add_argument("--telemetry", action="store_true", help="also the telemetry cadence costs (GPT-2 small BF16)")
    ap.add_argument("--telemetry-steps", type=int, default=110,
                    help="steps of each telemetry run: mantissa-train times steps 11-110, so every 50 "
                         "is exactly 2 in 100 timed steps and every 10 exactly 10")
    ap.add_argument("--run-timeout", type=int, default=150, help="seconds one run may take before it is stopped")
    ap.add_argument("--json", help="write the results here as well")
    ap.add_argument("--ref-json", help="an earlier part's --json: its rows give this part's ratios their "
                                       "'torch bf16' where this part has none")
    ap.add_argument("--skip-done", help="an earlier call's --json: its measured rows are taken over, not run again")
    args = ap.parse_args()
    # The session's deadline stops this script with SIGTERM: leave as an exception, so that
    # subprocess.run kills the run in progress instead of leaving it on the GPU.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(124))
    exe = os.path.join(args.build, "app", "mantissa-train")
    shapes = args.shapes.split(",")
    print(f"# {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, {torch.cuda.get_device_name()}, part {args.part}",
          flush=True)
    if args.part == "profile":
        profile(args, shapes)
        return
    peak = matmul_peak_tflops()
    print(f"# measured BF16 matmul peak: {peak:.0f} TFLOP/s", flush=True)
    results, telemetry = {}, {}

    def save():
        # Strict JSON (a missing reading is null, not NaN), and never half a file: the session's
        # deadline may stop this script at any moment.
        if args.json:
            def plain(v):
                if isinstance(v, float) and v != v:
                    return None
                if isinstance(v, (list, tuple)):
                    return [plain(x) for x in v]
                if isinstance(v, dict):
                    return {k: plain(x) for k, x in v.items()}
                return v
            with open(args.json + ".tmp", "w") as f:
                json.dump(plain({"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                                 "gpu": torch.cuda.get_device_name(), "bf16_peak_tflops": peak, "part": args.part,
                                 "steps": args.steps, "rows": results, "telemetry": telemetry, "notes": NOTES}),
                          f, indent=1)
            os.replace(args.json + ".tmp", args.json)

    with tempfile.TemporaryDirectory() as tmp:
        write_data(tmp)
        paths = {}
        for name in SHAPES:
            paths[name] = os.path.join(tmp, f"{name}.json")
            with open(paths[name], "w") as f:
                json.dump(project(tmp, SHAPES[name], args.steps), f)
        done, done_telemetry = {}, {}
        if args.skip_done and os.path.exists(args.skip_done):
            with open(args.skip_done) as f:
                earlier = json.load(f)
            done, done_telemetry = earlier.get("rows", {}), earlier.get("telemetry", {})

        def telemetry_costs():
            path = os.path.join(tmp, "telemetry.json")
            with open(path, "w") as f:
                json.dump(project(tmp, SHAPES["small"], args.telemetry_steps), f)
            print(f"\n## telemetry cost, GPT-2 small BF16, {args.telemetry_steps} steps\n"
                  "| telemetry.interval | ms/step | x off |\n|---|---|---|")
            # "Every step" (issue 12's +25 %) before the cheaper cadences, which come in the
            # order 50 (the default), then 10: if time runs out, the last is the one lost.
            # Ratios are to the run without telemetry. From the every-step run, the cost a
            # cadence of N would have if a telemetry step cost what it costs there, (ms1 -
            # ms0) / (N ms0), is printed as well: the measured cadences differ by little more
            # than the noise between two processes.
            base = None
            for interval in (0, 1, 50, 10):
                if done_telemetry.get(str(interval)):  # measured by an earlier call
                    ms = done_telemetry[str(interval)]
                else:
                    ms, _ = run([exe, "run", path, "--no-store", "--set", "precision.preset=bf16",
                                 "--set", f"telemetry.interval={interval}"], f"telemetry {interval}", args.run_timeout)
                telemetry[str(interval)] = ms
                save()
                if interval == 0:
                    base = ms
                print(f"| {interval} | {ms} | {ms / base:.2f} |" if ms and base else
                      f"| {interval} | {ms} | - |" if ms else f"| {interval} | failed | |", flush=True)
            every, base = telemetry.get("1"), telemetry.get("0")
            if every and base:
                for n in (50, 10):
                    print(f"derived from every step: telemetry every {n} costs {(every - base) / (n * base):+.1%}",
                          flush=True)

        for shape, label, kind, arg in jobs(args.part, shapes, not args.skip_twins, args.telemetry):
            if kind == "telemetry":
                telemetry_costs()
                continue
            if (done.get(shape, {}).get(label) or [None])[0] is not None:  # measured by an earlier call
                results.setdefault(shape, {})[label] = tuple(done[shape][label])
                continue
            env = {}
            if kind == "mantissa":
                cmd = [exe, "run", paths[shape], "--no-store", "--set", "telemetry.interval=0"]
                for kv in arg:
                    if kv.startswith("env:"):  # an environment variable, e.g. env:MANTISSA_FP8_BLOCK_CODES=0
                        name, _, value = kv[4:].partition("=")
                        env[name] = value
                    else:
                        cmd += ["--set", kv]
            else:
                # The same steps timed as mantissa-train times (core/trainer.cpp: from step
                # min(10, steps / 10) + 1 on), except torch.compile's, whose first steps compile.
                warmup = 10 if arg.endswith("compile") else min(10, args.steps // 10)
                cmd = [sys.executable, os.path.join(ROOT, "bench", "torch_twin.py"), "--mode", arg,
                       "--steps", str(args.steps), "--warmup", str(warmup)] + \
                    [f"--{k}={v}" for k, v in SHAPES[shape].items()]
            results.setdefault(shape, {})[label] = run(cmd, f"{shape} {label}", args.run_timeout, env)
            print(f"  {shape} {label}: {results[shape][label]}", flush=True)
            save()
        reference = {}
        if args.ref_json and os.path.exists(args.ref_json):
            with open(args.ref_json) as f:
                reference = json.load(f).get("rows", {})
        print_tables(results, peak, reference)


if __name__ == "__main__":
    main()
