"""What an idle `flotilla up` costs, and how fast it answers a submission while idle.

Starts `flotilla up` (the README's `ops/run`) from a checkout (``--root``, default this one: its
`.venv/bin/flotilla`, run in that directory) on a fresh state directory and free ports, waits for
its banner, lets it settle (``--settle`` s), then with nothing submitted reads each process's CPU
time (user + system, /proc/PID/stat) over ``--windows`` windows of ``--window`` s: the broker, the
control plane (worker), the executor, `flotilla up` itself and any other process below it, each as
a percentage of one core. Then one queue and ``--acks`` single-job REST submissions, one at a time,
each after a seeded random pause of ``--gap-min``..``--gap-max`` ms (so that they land at every
phase of whatever the idle processes do periodically): the time each takes to be answered is the
idle submit->ack latency through `flotilla up` (with its log archive: an answer waits until the
job's events are archived and synced). The jobs ask for more CPU than a local node has, so they stay
queued and the processes stay idle. ``--root`` makes an A/B of two checkouts (each with its own
venv) with one copy of this script.

Usage: .venv/bin/python bench/idle.py [--root DIR] [--settle 20] [--windows 3] [--window 60]
       [--acks 200] [--gap-min 20] [--gap-max 300] [--seed 1]
Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest import cpu_seconds, http, percentile
from bench.processes import Children, Command, exit_status
from ops.broker import free_port

READY_LINE = "Press Ctrl-C to stop."
QUEUE = "idle-bench"


def log(message: str) -> None:
    print(f"[idle] {message}", file=sys.stderr, flush=True)


def descendants(root: int) -> dict[int, str]:
    """Pid -> command line of every process below ``root`` (from /proc), ``root`` included."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            parents.setdefault(parent, []).append(int(entry))
    found, todo = [root], [root]
    while todo:
        for pid in parents.get(todo.pop(), []):
            found.append(pid)
            todo.append(pid)
    commands = {}
    for pid in found:
        try:
            commands[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
    return commands


def named(up_pid: int, banner: str) -> dict[str, int]:
    """Role -> pid of every process of `flotilla up`: its own, the control plane's and the executor's
    (from the banner), the broker (tansu), and any other by its command line."""
    roles = {"flotilla up": up_pid}
    for role, pattern in (("worker", r"control plane +pid (\d+)"), ("executor", r"executor +\S+, pid (\d+)")):
        found = re.search(pattern, banner)
        if found:
            roles[role] = int(found.group(1))
    known = set(roles.values())
    for pid, command in descendants(up_pid).items():
        if pid in known:
            continue
        roles["broker" if "tansu" in command else f"other {pid}: {command[:60]}"] = pid
    return roles


def cpu_windows(roles: dict[str, int], windows: int, window_s: float) -> list[dict[str, float]]:
    """Per window, each role's CPU as a percentage of one core."""
    measured = []
    for i in range(windows):
        before = {role: cpu_seconds(pid) for role, pid in roles.items()}
        started = time.monotonic()
        time.sleep(window_s)
        elapsed = time.monotonic() - started
        shares = {role: round(100 * (cpu_seconds(pid) - before[role]) / elapsed, 2) for role, pid in roles.items()}
        log(f"window {i + 1}/{windows} ({elapsed:.0f} s): " + ", ".join(f"{role} {share:.2f}%" for role, share in shares.items()))
        measured.append(shares)
    return measured


def idle_acks(url: str, count: int, gap_ms: tuple[float, float], seed: int) -> list[float]:
    """Milliseconds from sending each one-job REST submission to its answer."""
    status, answer = http("POST", f"{url}/api/v1/queues", {"name": QUEUE, "priority_factor": 1.0}, timeout=30)
    if status not in (200, 201):
        raise RuntimeError(f"creating queue {QUEUE} answered HTTP {status}: {answer}")
    rng = random.Random(seed)
    resources = {"cpu": "1000", "memory": "16Mi"}  # more than any local node: the job stays queued
    container = {"name": "c", "image": "none", "command": ["true"], "resources": {"requests": resources, "limits": resources}}
    latencies = []
    for i in range(count):
        time.sleep(rng.uniform(*gap_ms) / 1000)
        body = {
            "queue": QUEUE,
            "job_set_id": "idle",
            "items": [{"priority": 1.0, "pod_spec": {"restart_policy": "Never", "containers": [container]}}],
        }
        started = time.perf_counter()
        status, answer = http("POST", f"{url}/api/v1/jobs", body, timeout=30)
        latencies.append((time.perf_counter() - started) * 1000)
        if status != 200:
            raise RuntimeError(f"submission {i} answered HTTP {status}: {answer}")
    return latencies


def run(args: argparse.Namespace, children: Children, state: Path) -> dict[str, Any]:
    """``state``: an empty state directory for `flotilla up`."""
    root = args.root.resolve()
    web_port = free_port()
    up = children.add(
        Command(
            [str(root / ".venv/bin/flotilla"), "up", "--state-dir", str(state), "--broker-port", "0"]
            + ["--web-port", str(web_port), "--grpc-port", str(free_port())],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            grace_s=60,
        )
    )
    up.start()
    assert up.process is not None and up.process.stdout is not None
    lines: list[str] = []
    ready = threading.Event()

    def read(stream: Any) -> None:
        for raw in stream:
            lines.append(raw.decode(errors="replace"))
            if READY_LINE in lines[-1]:
                ready.set()

    threading.Thread(target=read, args=(up.process.stdout,), daemon=True).start()
    if not ready.wait(args.start_timeout):
        raise RuntimeError("flotilla up did not print its banner:\n" + "".join(lines))
    banner = "".join(lines)
    roles = named(up.process.pid, banner)
    log(f"{root}: flotilla up ready, state {state}; " + ", ".join(f"{role} {pid}" for role, pid in roles.items()))
    time.sleep(args.settle)
    windows = cpu_windows(roles, args.windows, args.window)
    medians = {role: round(statistics.median(w[role] for w in windows), 2) for role in roles}
    log("median CPU, % of a core: " + ", ".join(f"{role} {share:.2f}" for role, share in medians.items()))
    latencies = idle_acks(f"http://127.0.0.1:{web_port}", args.acks, (args.gap_min, args.gap_max), args.seed) if args.acks else []
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    if latencies:
        log(f"idle submit->ack over REST, {len(latencies)} submissions: p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {max(latencies):.1f} ms")
    return {
        "root": str(root),
        "cpu_percent_median": medians,
        "cpu_percent_windows": windows,
        "idle_submit_ack_p50_ms": round(p50, 2),
        "idle_submit_ack_p99_ms": round(p99, 2),
        "idle_submits": len(latencies),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="the checkout to run (default this one)")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after the banner before measuring (default 20)")
    parser.add_argument("--windows", type=int, default=3, help="CPU windows (default 3)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds per CPU window (default 60)")
    parser.add_argument("--acks", type=int, default=200, help="single-job submissions timed after the CPU windows (default 200)")
    parser.add_argument("--gap-min", type=float, default=20.0, help="least pause before a submission, ms (default 20)")
    parser.add_argument("--gap-max", type=float, default=300.0, help="longest pause before a submission, ms (default 300)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the pauses (default 1)")
    parser.add_argument("--start-timeout", type=float, default=180.0, help="seconds to wait for the banner (default 180)")
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="flotilla-idle-"))
    try:
        with Children(log) as children:
            result = run(args, children, state)
    except KeyboardInterrupt:
        return exit_status()
    finally:
        shutil.rmtree(state, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
