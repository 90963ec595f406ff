#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Instructions per value in the main loops of Mantissa's CUDA kernels, read from the compiled
SASS (sm_90) with cuobjdump: a static count for machines without a GPU, not a timing.

A kernel's loop is its largest backward branch. The statistics kernel's loop holds two paths;
the count is that of the path a whole span takes (its 16-byte loads up to the join). Values
per loop iteration and thread are the kernels' own constants (below). Counts include both sides
of any branch left in a loop, so a loop with branches executes fewer than it holds: the last
column is the fewest and the most one trip through the loop executes (path_lengths).

  .venv/bin/python bench/sass_per_value.py [OBJECT.o ...]
      default: build/cuda-check/core/CMakeFiles/mantissa_cuda_kernels.dir/cuda/*.cu.o
      (../shared/gpu/cuda-compile-check.sh builds them)

cuobjdump (and the nvdisasm it runs) come from $CUDA_HOME/bin, else from the
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels, installed once into
~/.cache/mantissa-cuda-check/sass-tools.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(os.path.expanduser("~"), ".cache", "mantissa-cuda-check", "sass-tools")

# (pattern in the mangled name, values a thread handles per loop iteration, what it is)
KERNELS = [
    ("partial_rows", 8, "statistics row, whole-span path"),
    ("scale_cast_amax_transpose_64", 16, "FP8 cast-transpose, 64 x 64 tiles"),
    ("scale_cast_amax_transpose", 4, "FP8 cast-transpose, 32 x 32 tiles"),
    ("scale_cast_amax", 4, "FP8 cast"),
    ("block_rows", 4, "fp8-block 1x128 cast"),
    ("block_tiles", 64, "fp8-block 128x128 cast"),
    ("block_rows_cols", 64, "fp8-block 1x128 cast, rows and columns"),
    ("split_blocks", 4, "fp8-block split"),
]
DTYPES = [("BFloat16", "bf16"), ("Half", "fp16"), ("Float8_e4m3fn", "e4m3"), ("Float8_e5m2", "e5m2")]
AGAINST = {"0": "uncompared", "1": "against its cast", "2": "against itself"}


def cuobjdump():
    """The cuobjdump to run, with an environment in which it finds its nvdisasm."""
    local = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin")
    if os.path.exists(os.path.join(local, "cuobjdump")) and os.path.exists(os.path.join(local, "nvdisasm")):
        return os.path.join(local, "cuobjdump"), dict(os.environ)
    found = glob.glob(os.path.join(TOOLS, "nvidia", "*", "bin", "cuobjdump"))
    if not found or not glob.glob(os.path.join(TOOLS, "nvidia", "*", "bin", "nvdisasm")):
        os.makedirs(TOOLS, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", TOOLS,
                        "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"], check=True)
        found = glob.glob(os.path.join(TOOLS, "nvidia", "*", "bin", "cuobjdump"))
    if not found:
        sys.exit("cuobjdump not found in the nvidia-cuda-cuobjdump wheel")
    bin_dir = os.path.dirname(found[0])
    for tool in ("cuobjdump", "nvdisasm"):
        os.chmod(os.path.join(bin_dir, tool), 0o755)
    env = dict(os.environ)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    return found[0], env


def instructions(body):
    return [(int(m.group(1), 16), m.group(2).strip())
            for m in re.finditer(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", body)]


def main_loop(ins):
    best = None
    for addr, text in ins:
        m = re.search(r"BRA (0x[0-9a-f]+)", text)
        if m and int(m.group(1), 16) < addr:
            target = int(m.group(1), 16)
            if best is None or addr - target > best[1] - best[0]:
                best = (target, addr)
    return best


def whole_span_path(ins):
    """The statistics kernel's run path: from its first 16-byte load's block to the join."""
    loads = [i for i, (_, t) in enumerate(ins) if "LDG.E.128" in t]
    if not loads:
        return None
    j = loads[0]
    while j > 0 and not re.search(r"\bBRA\b", ins[j - 1][1]):
        j -= 1
    m = re.search(r"BRA (0x[0-9a-f]+)", ins[j - 1][1])
    return (ins[j][0], int(m.group(1), 16) - 16) if m else None


def split_plain_runs(inside):
    """The statistics kernel's whole-span path, split where it tests for a plain run (only normal
    finite values, and a cast without zeros, non-finite values or verdicts): a conditional branch
    forward to one tally, the other tally falling through up to its unconditional branch to the
    join. nvcc places either tally first; the plain one is the shorter. Without that test, the
    path as it is."""
    for i, (_, text) in enumerate(inside):
        m = re.search(r"^@!?U?P\d+ BRA (?:!?U?P\d+, )?(0x[0-9a-f]+)", text)
        if not m:
            continue
        target = int(m.group(1), 16)
        end = next((j for j in range(i + 1, len(inside)) if re.match(r"^BRA ", inside[j][1])), None)
        if end is None or inside[end][0] >= target:
            continue
        prefix = inside[:i + 1]
        fallthrough = inside[i + 1:end + 1]
        at_target = [(a, t) for a, t in inside if a >= target]
        plain, other = sorted((fallthrough, at_target), key=len)
        return [(", plain runs", prefix + plain), (", other runs", prefix + other)]
    return [("", inside)]


def path_lengths(inside):
    """The fewest and the most instructions one trip through a loop body executes: its forward
    branches taken or not (a predicated BRA has two successors, an unconditional one one), to
    the loop's back edge or out of the body. A body whose variants are chosen once per launch
    (saturating or not, a flag) executes one of them, where its static count holds them all."""
    index = {a: i for i, (a, _) in enumerate(inside)}
    n = len(inside)
    shortest, longest = [0] * (n + 1), [0] * (n + 1)
    for i in range(n - 1, -1, -1):
        text = inside[i][1]
        m = re.search(r"\bBRA (?:!?U?P\d+, )?(0x[0-9a-f]+)", text)
        target = int(m.group(1), 16) if m else None
        forward = target is not None and target in index and index[target] > i
        successors = []
        if not m or text.startswith("@"):
            successors.append(i + 1)  # falls through (the last instruction falls out: n)
        if forward:
            successors.append(index[target])
        # A branch backward or out of the body ends the trip.
        shortest[i] = 1 + (min(shortest[j] for j in successors) if successors else 0)
        longest[i] = 1 + (max(longest[j] for j in successors) if successors else 0)
    return shortest[0], longest[0]


def describe(name):
    """(pattern, values per iteration, label) of a kernel, from its mangled name; the dtypes
    are listed in template order, FP32 ones left out (a one-letter code)."""
    for pattern, per, what in KERNELS:
        if pattern + "I" not in name:
            continue
        args = name.split(pattern + "I", 1)[1]
        types = [short for _, short in sorted((args.find(key), short) for key, short in DTYPES if key in args)]
        if re.search(r"S4_L", args):  # the statistics' Q the same type as X
            types.append(types[0] + " (same)" if types else "fp32 (same)")
        label = what + (" " + "/".join(types) if types else " fp32")
        mode = re.search(r"AgainstE(\d)ELb(\d)", args)
        if mode:
            label += ", " + AGAINST[mode.group(1)] + (", scaled" if mode.group(2) == "1" else "")
        if pattern in ("block_rows", "block_tiles"):  # the last template argument: kCodes
            flag = re.search(r"Lb([01])EEEv", args)
            if flag:
                label += ", writes " + ("codes" if flag.group(1) == "1" else "values")
        if pattern == "scale_cast_amax_transpose_64":  # the last template arguments: kSums, kGelu
            flags = re.search(r"Lb([01])ELb([01])EEEv", args)
            if flags:
                label += ", with column sums" if flags.group(1) == "1" else ""
                label += ", GELU first" if flags.group(2) == "1" else ""
        return pattern, per, label
    return None


def main():
    objects = sys.argv[1:] or sorted(glob.glob(os.path.join(
        ROOT, "build", "cuda-check", "core", "CMakeFiles", "mantissa_cuda_kernels.dir", "cuda", "*.cu.o")))
    if not objects:
        sys.exit("no object files: run ../shared/gpu/cuda-compile-check.sh first, or name them")
    tool, env = cuobjdump()
    print(f"{'kernel':86s} {'loop':>6s} {'per value':>9s} {'branches':>8s} {'executed per value':>18s}")
    for obj in objects:
        sass = subprocess.run([tool, "-sass", obj], check=True, capture_output=True, text=True, env=env).stdout
        for part in re.split(r"\n\s*Function : ", sass)[1:]:
            name = part.split("\n", 1)[0]
            known = describe(name)
            if not known:
                continue
            pattern, per, what = known
            ins = instructions(part)
            span = whole_span_path(ins) if pattern == "partial_rows" else main_loop(ins)
            if not span:
                continue
            inside = [(a, t) for a, t in ins if span[0] <= a <= span[1]]
            paths = split_plain_runs(inside) if pattern == "partial_rows" else [("", inside)]
            for label, path in paths:
                branches = sum(1 for _, t in path if re.search(r"\bBRA\b", t))
                name = what + label
                # The statistics row's paths are single paths already (split above).
                low, high = (len(path), len(path)) if pattern == "partial_rows" else path_lengths(path)
                executed = f"{low / per:.1f}" + (f"-{high / per:.1f}" if high != low else "")
                print(f"{name[:86]:86s} {len(path):6d} {len(path) / per:9.1f} {branches:8d} {executed:>18s}")


if __name__ == "__main__":
    main()
