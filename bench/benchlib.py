# SPDX-License-Identifier: GPL-3.0-or-later
"""What the benchmark scripts share: where things are, and how to time a mantissa-train run."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAKESPEARE = os.path.join(ROOT, "projects", "shakespeare-char.json")
STEP_RE = re.compile(r"mean step time: ([0-9.]+) ms")


def add_common_args(parser):
    parser.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt"),
                        help="tinyshakespeare text")
    parser.add_argument("--build", default=os.path.join(ROOT, "build", "dev"), help="CMake build directory")


def data_path(args):
    path = os.path.abspath(args.data)
    if not os.path.exists(path):
        sys.exit(f"tinyshakespeare not found at {path}; pass --data")
    return path


def run_cli(args, db, sets, project=SHAKESPEARE):
    """Runs `mantissa-train run` (db None: --no-store); returns (mean ms/step, stdout)."""
    cmd = [os.path.join(args.build, "app", "mantissa-train"), "run", project]
    cmd += ["--db", db] if db else ["--no-store"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    match = STEP_RE.search(out)
    if not match:
        sys.exit("no step time in output of: " + " ".join(cmd) + "\n" + out)
    return float(match.group(1)), out
