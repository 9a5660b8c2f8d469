"""`flotilla up` (everything on this machine) and `flotilla worker` (one control-plane worker)."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from streams.client import Client, ClientError
from streams.config import Settings


def register(commands: Any) -> None:
    up = commands.add_parser("up", help="run Flotilla on this machine: embedded broker, control plane, REST API")
    up.add_argument("--broker-port", type=int, default=9092, help="embedded broker port (default 9092; 0 = any free port)")
    up.add_argument("--web-port", type=int, default=8080, help="REST API port on 127.0.0.1 (default 8080)")
    up.add_argument("--state-dir", type=Path, default=Path(".flotilla"), help="worker data and logs (default .flotilla)")
    up.set_defaults(func=_up)

    worker = commands.add_parser("worker", help="run one control-plane worker (Faust) against a broker")
    worker.add_argument("--broker", help="kafka://host:port, or tansu://host:port for the embedded broker (default $FLOTILLA_BROKER or tansu://127.0.0.1:9092)")
    worker.add_argument("--web-port", type=int, help="REST API port (default 8080)")
    worker.add_argument("--web-host", help="REST API address (default 127.0.0.1)")
    worker.add_argument("--data-dir", type=Path, help="table data directory (default .flotilla/data)")
    worker.add_argument("--partitions", type=int, help="partitions of the partitioned topics (default 1)")
    worker.set_defaults(func=_worker)


def _worker(args: argparse.Namespace) -> int:
    from streams.worker import run_worker

    settings = Settings.from_env(
        broker=args.broker, web_port=args.web_port, web_host=args.web_host, data_dir=args.data_dir, partitions=args.partitions
    )
    return run_worker(settings)


def _up(args: argparse.Namespace) -> int:
    from ops.broker import BrokerError, EmbeddedBroker, free_port

    state = args.state_dir.resolve()
    data_dir = state / "data"
    # The embedded broker keeps its log in memory, so it starts empty: table state left by an
    # earlier run would describe a log that no longer exists.
    shutil.rmtree(data_dir, ignore_errors=True)
    state.mkdir(parents=True, exist_ok=True)

    port = args.broker_port or free_port()
    if args.broker_port and not _port_free(port):
        port = free_port()
        print(f"port {args.broker_port} is busy; the embedded broker uses {port} instead", flush=True)
    broker = EmbeddedBroker(port=port, log_path=state / "broker.log")
    try:
        broker.start()
    except BrokerError as exc:
        print(f"error: {exc} (see {state / 'broker.log'})", file=sys.stderr)
        return 1

    env = {
        **os.environ,
        "FLOTILLA_BROKER": broker.url,
        "FLOTILLA_WEB_PORT": str(args.web_port),
        "FLOTILLA_DATA_DIR": str(data_dir),
    }
    worker_log = open(state / "worker.log", "ab")  # noqa: SIM115 - lives as long as the worker
    worker = subprocess.Popen(
        [sys.executable, "-m", "streams.cli", "worker"], env=env, stdout=worker_log, stderr=subprocess.STDOUT
    )
    children = [("control plane", worker)]
    try:
        if not _wait_healthy(Client.from_env(f"http://127.0.0.1:{args.web_port}"), worker, timeout_s=120):
            print(f"error: the control plane did not become ready (see {state / 'worker.log'})", file=sys.stderr)
            return 1
        print(
            "Flotilla is running:\n"
            f"  broker         {broker.url}  (embedded Tansu, log in memory)\n"
            f"  control plane  pid {worker.pid}  (ingest, job-state agents; log {state / 'worker.log'})\n"
            f"  REST API       http://127.0.0.1:{args.web_port}  (GET /health, /api/v1/queues, /api/v1/jobs)\n"
            "Try: flotilla queue create demo && flotilla submit job.yaml\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        while all(child.poll() is None for _, child in children):
            time.sleep(0.5)
        for name, child in children:
            if child.poll() is not None:
                print(f"error: {name} exited with code {child.returncode}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping...", flush=True)
        return 0
    finally:
        for _, child in reversed(children):
            _stop(child)
        broker.stop()
        worker_log.close()


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _wait_healthy(client: Client, process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if client.call("GET", "/health", accept=(503,)).get("status") == "ok":
                return True
        except ClientError:
            pass
        time.sleep(0.3)
    return False


def _stop(process: subprocess.Popen[bytes], grace_s: float = 15.0) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
