"""Floor benchmark: what one Faust worker costs per message and per table write, with no Flotilla logic.

Issue 2 asks for 25,000 jobs/s through ingest and fold, issue 4 for 5,000 leases/s. Every job
state is a `jobs` table write (a RocksDB put plus a record on the `job-states` changelog), and a
lease is three of them (leased, pending, running) plus the scheduler index's. This measures the
price of those writes on this machine, so the targets can be compared with what the framework
alone allows.

It starts an embedded Tansu on a free port, produces `--messages` records of `--value-bytes` to a
one-partition source topic, then runs a worker subprocess: one Faust app built by
`streams.app.create_app` (the control plane's settings), one agent on the source that for each
record does, by `--mode`:

- `consume`: nothing (the cost of delivering a record to an agent);
- `send`: `--per-message` sends to a topic (`topic.send`, the path of events and feed records);
- `table`: `--per-message` writes of distinct keys to a RocksDB table with a changelog (the path of
  every job state), values of `--value-bytes`.

The worker times from the first record its agent sees to the last one processed and the producer
drained, with its own CPU time, and writes them to a file as JSON; the parent prints a line per
mode and, last, one JSON object with every mode's figures. Each mode runs on a fresh broker.

Usage: .venv/bin/python bench/faust_floor.py [--messages 1000] [--per-message 100] [--value-bytes 318]
       [--modes consume,send,table]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaProducer  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from bench.processes import Children, Command, exit_status  # noqa: E402
from ops.broker import EmbeddedBroker, free_port  # noqa: E402

SOURCE, SINK, CHANGELOG = "floor.source", "floor.sink", "floor.changelog"
TOPICS = (SOURCE, SINK, CHANGELOG)
MODES = ("consume", "send", "table")
WORKER_TIMEOUT_S = 600.0


def log(text: str) -> None:
    print(f"[faust-floor] {text}", file=sys.stderr, flush=True)


async def produce_source(bootstrap: str, messages: int, value_bytes: int) -> None:
    """Into topics created with one partition each, as the table's changelog has (the broker's default is more)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1) for name in TOPICS])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        value = b"x" * value_bytes
        for i in range(messages):
            await producer.send(SOURCE, key=str(i).encode(), value=value)
        await producer.flush()
    finally:
        await producer.stop()


def run_mode(mode: str, args: argparse.Namespace, children: Children) -> dict[str, Any]:
    """One mode on a fresh broker; the broker and the worker are stopped before it returns or raises."""
    with tempfile.TemporaryDirectory(prefix="flotilla-bench-floor-") as tmp:
        result_path, worker_log = Path(tmp) / "result.json", Path(tmp) / "worker.log"
        try:
            broker = children.add(EmbeddedBroker(port=free_port(), log_path=Path(tmp) / "broker.log", new_session=True))
            broker.start()
            asyncio.run(produce_source(broker.bootstrap, args.messages, args.value_bytes))
            command = [
                sys.executable,
                __file__,
                "--serve",
                mode,
                "--broker",
                broker.url,
                "--data-dir",
                str(Path(tmp) / "data"),
                "--messages",
                str(args.messages),
                "--per-message",
                str(args.per_message),
                "--value-bytes",
                str(args.value_bytes),
                "--result",
                str(result_path),
            ]
            with open(worker_log, "wb") as output:
                worker = children.add(Command(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT)).start()
            assert worker.process is not None
            try:
                code: int | str = worker.process.wait(WORKER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                code = f"none, still running after {WORKER_TIMEOUT_S:.0f} s"
        finally:
            children.stop_all()
        if not result_path.exists():
            tail = worker_log.read_text(errors="replace")[-3000:] if worker_log.exists() else ""
            raise SystemExit(f"worker for mode {mode} wrote no result (exit {code}):\n{tail}")
        return json.loads(result_path.read_text())


# -- the worker side ---------------------------------------------------------------------------
def serve(mode: str, args: argparse.Namespace) -> None:
    import faust

    from streams.config import Settings
    from streams.gc_tuning import tune_for_long_lived_state
    from streams.plane import create_app
    from streams.tables.types import TEXT_CODEC, TextKey, register_text_codec

    register_text_codec()
    settings = Settings.from_env(
        broker=args.broker, data_dir=Path(args.data_dir), app_id="floor", web_port=free_port(), log_level="warning"
    )
    app = create_app(settings)
    source = app.topic(SOURCE, key_serializer=TEXT_CODEC, value_serializer="raw", partitions=1)
    sink = app.topic(SINK, key_serializer=TEXT_CODEC, value_serializer="raw", partitions=1)
    table = app.Table(
        "floor",
        key_type=TextKey,
        value_type=bytes,
        partitions=1,
        changelog_topic=app.topic(CHANGELOG, key_serializer=TEXT_CODEC, value_serializer="raw", partitions=1, compacting=True),
    )
    value = b"v" * args.value_bytes
    per_message = args.per_message
    state: dict[str, Any] = {"seen": 0}

    @app.agent(source, name="floor", concurrency=1)
    async def work(stream: Any) -> None:
        async for _event in stream.events():
            if state["seen"] == 0:
                # This script's worker comes up with the root logger at DEBUG (the control plane's
                # does not): every send would build the debug records of Faust and aiokafka.
                logging.getLogger().setLevel(logging.WARNING)
                state["start"], state["cpu"] = time.perf_counter(), time.process_time()
            base = state["seen"] * per_message
            if mode == "send":
                for i in range(per_message):
                    await sink.send(key=str(base + i), value=value)
            elif mode == "table":
                for i in range(per_message):
                    table[str(base + i)] = value
            state["seen"] += 1
            if state["seen"] == args.messages:
                await app.producer.buffer.flush()
                await app.producer.flush()
                seconds, cpu = time.perf_counter() - state["start"], time.process_time() - state["cpu"]
                operations = args.messages * (per_message if mode != "consume" else 1)
                result = {
                    "mode": mode,
                    "messages": args.messages,
                    "operations": operations,
                    "seconds": round(seconds, 3),
                    "cpu_s": round(cpu, 3),
                }
                Path(args.result).write_text(json.dumps(result))  # stdout belongs to Faust's logging
                os._exit(0)

    tune_for_long_lived_state()
    faust.Worker(app, loglevel=settings.log_level, override_logging=True).execute_from_commandline()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1000, help="source records (default 1000)")
    parser.add_argument(
        "--per-message", type=int, default=100, help="sends or table writes per record (default 100, like the jobs of one submit request)"
    )
    parser.add_argument("--value-bytes", type=int, default=318, help="value size (default 318, one job_state record)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of consume,send,table (default all)")
    parser.add_argument("--serve", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--broker", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args)
        return 0
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}")
    log(
        f"{os.cpu_count()} cores, Python {platform.python_version()}; {args.messages:,} records, "
        f"{args.per_message} operations each, values of {args.value_bytes} B"
    )
    results = []
    # Each mode's broker and worker are stopped when the mode ends, however it ends (an error, Ctrl-C,
    # SIGTERM: see bench/processes.py).
    try:
        with Children(log) as children:
            for mode in modes:
                log(f"mode {mode} ...")
                result = run_mode(mode, args, children)
                result["us_per_operation"] = round(result["cpu_s"] / result["operations"] * 1e6, 1)
                result["operations_per_s"] = round(result["operations"] / result["seconds"], 1)
                results.append(result)
                unit = "record" if mode == "consume" else ("send" if mode == "send" else "table write")
                print(
                    f"{mode}: {result['operations']:,} in {result['seconds']:.2f} s = {result['operations_per_s']:,.0f}/s;"
                    f" worker CPU {result['cpu_s']:.2f} s = {result['us_per_operation']} us per {unit}",
                    flush=True,
                )
    except KeyboardInterrupt:
        log("interrupted")
        return exit_status()
    print(json.dumps({"cores": os.cpu_count(), "python": platform.python_version(), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
