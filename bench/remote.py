#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The store server's cost and latency (docs/REMOTE.md) on projects/default.json, loopback only:

- mean training step time with --serve off, and on with 0, 1 and 4 long-polling clients
  (the clients do what the window's RemoteMirror does: rows after their marks, wait_ms=1000);
- bytes per training step that one client receives;
- step -> client latency, p50 and p99: from the moment the CLI prints "step S" (flushed at
  every log line) to the moment a client holds that step's train/loss row.

  .venv/bin/python bench/remote.py [--build build/dev] [--steps 600] [--interval 10] [--rounds 2]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from benchlib import ROOT, STEP_RE, add_common_args

PROJECT = os.path.join(ROOT, "projects", "default.json")
LISTEN_RE = re.compile(r"listening on (http://127\.0\.0\.1:\d+)\ntoken: ([0-9a-f]{32})")
STEP_LINE_RE = re.compile(r"^step (\d+)/")


class Client(threading.Thread):
    """Mirrors run 1 by row marks, as RemoteMirror does, counting bytes and arrival times."""

    def __init__(self, url, token):
        super().__init__(daemon=True)
        self.url, self.token = url, token
        self.bytes = 0
        self.arrivals = {}  # train/loss step -> perf_counter when received
        self.stop = False

    def get(self, path):
        req = urllib.request.Request(self.url + path, headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(req, timeout=15) as r:
            body = r.read()
        self.bytes += len(body)
        return json.loads(body)

    def run(self):
        from_step, after_event = 0, 0
        while not self.stop:
            try:
                page = self.get(f"/v1/runs/1/rows?from_step={from_step}&after_event={after_event}&limit=5000"
                                "&wait_ms=1000")
            except OSError:
                return  # the run ended and its server with it
            now = time.perf_counter()
            for step, tag, _ in page["scalars"]:
                if tag == "train/loss":
                    self.arrivals.setdefault(step, now)
            from_step, after_event = page["next_from_step"], page["next_after_event"]
            if page["status"] != "running" and not page["more"]:
                return


def train(args, serve, clients, log_interval):
    """One run; returns (mean ms/step, [Client], {step: printed at})."""
    exe = os.path.join(args.build, "app", "mantissa-train")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [exe, "run", PROJECT, "--db", os.path.join(tmp, "runs.sqlite"), "--set", f"training.steps={args.steps}",
               "--set", f"telemetry.interval={args.interval}", "--set", f"telemetry.log_interval={log_interval}"]
        if serve:
            cmd += ["--serve", "127.0.0.1:0", "--requests-per-s", "1000"]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
        out, printed, started = "", {}, []
        for line in p.stdout:
            out += line
            m = STEP_LINE_RE.match(line)
            if m:
                printed[int(m.group(1))] = time.perf_counter()
            if serve and not started:
                lm = LISTEN_RE.search(out)
                if lm:
                    started = [Client(lm.group(1), lm.group(2)) for _ in range(clients)]
                    for c in started:
                        c.start()
        p.wait()
        for c in started:
            c.join(timeout=10)
        m = STEP_RE.search(out)
        if p.returncode != 0 or not m:
            raise SystemExit("run failed: " + " ".join(cmd) + "\n" + out[-2000:])
        return float(m.group(1)), started, printed


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--interval", type=int, default=10, help="telemetry.interval (layer statistics every N steps)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    configs = [("--serve off", False, 0), ("--serve, 0 clients", True, 0), ("--serve, 1 client", True, 1),
               ("--serve, 4 clients", True, 4)]
    times = {name: [] for name, _, _ in configs}
    for _ in range(args.rounds):  # interleaved, so that machine load hits every configuration alike
        for name, serve, clients in configs:
            times[name].append(train(args, serve, clients, log_interval=50)[0])
            print(f"  ({name}: {times[name][-1]:.3f} ms/step)", file=sys.stderr, flush=True)
    base = statistics.median(times["--serve off"])
    print(f"default project, {args.steps} steps, telemetry every {args.interval}; median of {args.rounds} rounds")
    for name, _, _ in configs:
        t = statistics.median(times[name])
        print(f"  {name:20s} {t:8.3f} ms/step  {100 * (t - base) / base:+6.1f} %")

    _, clients, printed = train(args, True, 1, log_interval=1)
    client = clients[0]
    lat = [(client.arrivals[s] - printed[s]) * 1000 for s in printed if s in client.arrivals]
    print(f"one client: {client.bytes / args.steps:.0f} bytes per training step")
    if lat:
        print(f"step -> client latency over {len(lat)} steps: p50 {percentile(lat, 0.5):.0f} ms, "
              f"p99 {percentile(lat, 0.99):.0f} ms")


if __name__ == "__main__":
    main()
