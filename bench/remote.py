#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""The store server's cost and latency (docs/REMOTE.md) on projects/default.json, loopback only:

- mean training step time with --serve off, and on with 0, 1 and 4 long-polling clients
  (the clients do what the window's RemoteMirror does: rows after their marks, wait_ms=1000);
- bytes per training step that one client receives, layer statistics included, for the
  default project and a 12-layer model;
- step -> client latency, p50 and p99: from the moment the CLI prints "step S" (flushed at
  every log line) to the moment a client holds that step's train/loss row;
- step -> pixel latency, p50 and p99: from the CLI printing "step S" to the Monitor page of
  bench/remote_monitor (RemoteMirror + RunFollower + MonitorPage, offscreen) having drawn it;
- opening a remote run of 1,000,000 rows: time until its whole loss curve is drawn, with the
  mirror's pages offered to the Monitor as they arrive (as the window does) against the
  Monitor reading the replica alone, in interleaved rounds (--rounds).

  .venv/bin/python bench/remote.py [--build build/dev] [--steps 600] [--interval 10] [--rounds 2]
                                   [--only overhead,bytes,pixel,open]
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
# Not a terminal: the token is not printed, only the file that holds it.
LISTEN_RE = re.compile(r"listening on (http://127\.0\.0\.1:\d+)\ntoken: in ([^\n]+)\n")
STEP_LINE_RE = re.compile(r"^step (\d+)/")


def token_of(listening):
    """The token from the file a LISTEN_RE match names."""
    with open(listening.group(2)) as f:
        return f.read().strip()


class Client(threading.Thread):
    """Mirrors run 1 by row marks, as RemoteMirror does, counting bytes and arrival times."""

    def __init__(self, url, token):
        super().__init__(daemon=True)
        self.url, self.token = url, token
        self.bytes = 0
        self.arrivals = {}  # train/loss step -> perf_counter when received
        self.layer_rows = 0
        self.stop = False

    def get(self, path):
        req = urllib.request.Request(self.url + path, headers={"Authorization": "Bearer " + self.token})
        with urllib.request.urlopen(req, timeout=15) as r:
            body = r.read()
        self.bytes += len(body)
        return json.loads(body)

    def run(self):
        from_step, after_event, from_layer_step = 0, 0, 0
        while not self.stop:
            try:
                page = self.get(f"/v1/runs/1/rows?from_step={from_step}&after_event={after_event}"
                                f"&from_layer_step={from_layer_step}&limit=5000&wait_ms=1000")
            except OSError:
                return  # the run ended and its server with it
            now = time.perf_counter()
            for step, tag, _ in page["scalars"]:
                if tag == "train/loss":
                    self.arrivals.setdefault(step, now)
            self.layer_rows += len(page.get("layer_stats", []))
            from_step, after_event = page["next_from_step"], page["next_after_event"]
            from_layer_step = page["next_from_layer_step"]
            if page["status"] != "running" and not page["more"]:
                return


def train(args, serve, clients, log_interval, sets=(), steps=None, monitor=None):
    """One run; returns (mean ms/step, [Client], {step: printed at}).

    monitor: a list that receives (step, drawn at) from bench/remote_monitor following the run."""
    exe = os.path.join(args.build, "app", "mantissa-train")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [exe, "run", PROJECT, "--db", os.path.join(tmp, "runs.sqlite"), "--set",
               f"training.steps={steps or args.steps}",
               "--set", f"telemetry.interval={args.interval}", "--set", f"telemetry.log_interval={log_interval}"]
        for s in sets:
            cmd += ["--set", s]
        if serve:
            cmd += ["--serve", "127.0.0.1:0", "--requests-per-s", "1000"]
        pin = None
        if args.train_cpu is not None:
            # The training thread (one thread) on its own core; the run's other threads (the
            # server, the store's writer) and this script's clients on the others, as a GPU
            # server's spare cores and other machines would hold them.
            cmd += ["--set", "training.threads=1"]
            pin = lambda: os.sched_setaffinity(0, {args.train_cpu})  # noqa: E731
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1, preexec_fn=pin)
        pinned = set()

        def pin_helpers():
            if args.train_cpu is None:
                return
            others = os.sched_getaffinity(0)
            for tid in os.listdir(f"/proc/{p.pid}/task") if os.path.isdir(f"/proc/{p.pid}/task") else []:
                if int(tid) != p.pid and tid not in pinned:
                    try:
                        os.sched_setaffinity(int(tid), others)
                        pinned.add(tid)
                    except OSError:
                        pass
        out, printed, started, viewer, listening = "", {}, [], None, False
        for line in p.stdout:
            out += line
            m = STEP_LINE_RE.match(line)
            if m:
                printed[int(m.group(1))] = time.perf_counter()
                pin_helpers()
            if serve and not listening:
                lm = LISTEN_RE.search(out)
                if lm:
                    listening = True
                    pin_helpers()
                    started = [Client(lm.group(1), token_of(lm)) for _ in range(clients)]
                    for c in started:
                        c.start()
                    if monitor is not None:
                        viewer = start_monitor(args, "follow", lm.group(1), token_of(lm), tmp, monitor)
        p.wait()
        if viewer:
            # The server went with the run: the viewer has drawn all it will; it would wait for
            # the server to come back.
            time.sleep(3)
            viewer[1].terminate()
            viewer[0].join(timeout=10)
        for c in started:
            c.join(timeout=10)
        m = STEP_RE.search(out)
        if p.returncode != 0 or not m:
            raise SystemExit("run failed: " + " ".join(cmd) + "\n" + out[-2000:])
        return float(m.group(1)), started, printed


def start_monitor(args, mode, url, token, tmp, drawn, env_extra=None):
    """bench/remote_monitor in a thread; its "drawn STEP T" lines go to `drawn` as (step, T)."""
    exe = os.path.join(args.build, "bench", "remote_monitor")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", **(env_extra or {}))
    replica = os.path.join(tmp, "replica.sqlite")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(replica + suffix):
            os.remove(replica + suffix)
    proc = subprocess.Popen([exe, mode, url, token, replica], stdout=subprocess.PIPE,
                            text=True, bufsize=1, env=env)

    def read():
        for line in proc.stdout:
            parts = line.split()
            if parts[:1] == ["drawn"]:
                drawn.append((int(parts[1]), float(parts[2])))
            elif parts:
                drawn.append(line.strip())
        proc.wait()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return t, proc


OPEN_RE = re.compile(r"whole loss curve \((\d+) points\) drawn (\d+) ms .*written after (\d+) ms")


def open_million(args):
    """A finished remote run of 1M train/loss rows: time until the Monitor has drawn it all,
    with the mirror's pages offered to the Monitor as they arrive (the window's way) and, in
    interleaved rounds, with the Monitor reading the replica alone (REMOTE_MONITOR_NO_OFFER)."""
    exe = os.path.join(args.build, "bench", "remote_monitor")
    train_exe = os.path.join(args.build, "app", "mantissa-train")
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "million.sqlite")
        subprocess.run([exe, "generate", db, str(args.rows)], check=True, capture_output=True,
                       env=dict(os.environ, QT_QPA_PLATFORM="offscreen"))
        server = subprocess.Popen([train_exe, "serve", "--db", db, "--listen", "0", "--requests-per-s", "1000"],
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        out = ""
        for line in server.stdout:
            out += line
            lm = LISTEN_RE.search(out)
            if lm:
                break
        lines = []
        drawn_ms = {"offered": [], "replica only": []}
        try:
            for _ in range(args.rounds):
                for label, env in (("offered", None), ("replica only", {"REMOTE_MONITOR_NO_OFFER": "1"})):
                    drawn = []
                    t, proc = start_monitor(args, "open", lm.group(1), token_of(lm), tmp, drawn, env)
                    t.join(timeout=600)
                    if proc.poll() is None:
                        proc.terminate()
                        drawn.append("not drawn within 600 s")
                    for d in drawn:
                        if isinstance(d, str) and d != "done":
                            lines.append(f"{label}: {d}")
                            m = OPEN_RE.search(d)
                            if m and int(m.group(1)) == args.rows:
                                drawn_ms[label].append(int(m.group(2)))
        finally:
            server.terminate()
            server.wait()
        if drawn_ms["offered"] and drawn_ms["replica only"]:
            a, b = statistics.median(drawn_ms["offered"]), statistics.median(drawn_ms["replica only"])
            lines.append(f"whole curve drawn, median of {args.rounds} interleaved rounds: pages offered {a:.0f} ms "
                         f"{sorted(drawn_ms['offered'])}, replica only {b:.0f} ms {sorted(drawn_ms['replica only'])}: "
                         f"{b / a:.2f}x")
        return lines


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    ap = argparse.ArgumentParser()
    add_common_args(ap)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--interval", type=int, default=10, help="telemetry.interval (layer statistics every N steps)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps12", type=int, default=40, help="steps of the 12-layer run (bytes per step)")
    ap.add_argument("--rows", type=int, default=1000000, help="rows of the run that 'open' opens")
    ap.add_argument("--only", default="overhead,bytes,pixel,open")
    ap.add_argument("--train-cpu", type=int, default=None,
                    help="pin the training process (one thread, its server included) to this CPU and this "
                         "script's clients to the others")
    args = ap.parse_args()
    if args.train_cpu is not None:
        others = os.sched_getaffinity(0) - {args.train_cpu}
        if others:
            os.sched_setaffinity(0, others)
    only = set(args.only.split(","))

    if "overhead" in only:
        overhead(args)
    if "bytes" in only:
        for label, sets, steps in [("default project", (), args.steps),
                                   ("12-layer model", ("model.n_layer=12",), args.steps12)]:
            _, clients, printed = train(args, True, 1, log_interval=1, sets=sets, steps=steps)
            client = clients[0]
            print(f"{label}, {steps} steps, telemetry every {args.interval}: {client.bytes / steps:.0f} bytes "
                  f"per training step ({client.layer_rows} layer-statistics rows in all)")
            lat = [(client.arrivals[s] - printed[s]) * 1000 for s in printed if s in client.arrivals]
            if lat and label == "default project":
                print(f"  step -> client latency over {len(lat)} steps: p50 {percentile(lat, 0.5):.0f} ms, "
                      f"p99 {percentile(lat, 0.99):.0f} ms")
    if "pixel" in only:
        drawn = []
        _, _, printed = train(args, True, 0, log_interval=1, monitor=drawn)
        frames = sorted(d for d in drawn if not isinstance(d, str))
        lat = []
        for s, at in printed.items():
            later = [t for step, t in frames if step >= s and t >= at]
            if later:
                lat.append((min(later) - at) * 1000)
        print(f"step -> pixel latency over {len(lat)} of {len(printed)} steps, {len(frames)} frames: "
              f"p50 {percentile(lat, 0.5):.0f} ms, p99 {percentile(lat, 0.99):.0f} ms" if lat else
              "step -> pixel: no frame drawn")
    if "open" in only:
        for line in open_million(args):
            print(f"open a remote run of {args.rows} rows: {line}")


def overhead(args):
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


if __name__ == "__main__":
    main()
