"""Replay benchmark: how fast `flotilla audit`, `flotilla rebuild` and the `--at` reads go through a log.

The log is recorded first (not timed) by the pipeline's own pure parts (tests/kit/recorded.py): the
job-state fold, the scheduler's cycles with their committed records, an executor reporting its nodes
(in full every 5 s, heartbeats in between) and running each leased job for `--run-s` seconds, one
tick a second as the worker's default period. `--queues` queues each submit `--rate` jobs a second
in all (in job sets of 100) onto `--nodes` nodes of 32 cpus until the log holds `--events` events;
a second half of the queues starts late, so fair-share preemption happens. The log is written to an
archive as the worker's archiver writes it (`events`, `queues` and the scheduler feed).

Then, each in this process on one core, timed in process CPU and wall time:
- audit from the archive (`flotilla audit --from-archive`): every cycle repeated and compared;
- with `--broker`, the same from an embedded Tansu the archive is restored into (not timed);
- rebuild (`flotilla rebuild --into DIR`, nothing live to compare): every event refolded into RocksDB;
- queues at a time (`flotilla get queues --at T --from-archive`): the log folded up to its middle.

Rates are per event (the events inside `events` records) and per feed record. Target: audit at
50,000 events/s or more. `--py-spy BIN` profiles the audit (a second run, in a py-spy subprocess).

The defaults are a steady state: the nodes run jobs faster than they come (about 1,400 run at a
time, none waits long); with `--rate 300 --run-s 10` the queues grow, and every cycle walks them.

Recording takes minutes (about 320 s for the defaults): `--keep DIR` records the log into DIR once
(with `recorded.json`, what the figures need about it) and later runs with the same `--keep DIR`
reuse it; the other log options must then match what DIR was recorded with.

Usage: .venv/bin/python bench/replay.py [--events 1000000] [--rate 200] [--nodes 100] [--run-s 5] [--broker] [--keep DIR]
Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.kept import kept_or_made  # noqa: E402
from bench.processes import Children, Command, exit_status  # noqa: E402
from ops.broker import EmbeddedBroker  # noqa: E402
from schemas.codec import decode, encode  # noqa: E402
from streams.archive.restore import restore  # noqa: E402
from streams.archive.segments import Record  # noqa: E402
from streams.archive.source import ArchiveSource  # noqa: E402
from streams.archive.writer import ArchiveWriter  # noqa: E402
from streams.config import Settings  # noqa: E402
from streams.gc_tuning import tune_for_long_lived_state  # noqa: E402
from streams.kafka import kafka_clients  # noqa: E402
from streams.replay.audit import AuditReport, audit  # noqa: E402
from streams.replay.broker import BrokerLog  # noqa: E402
from streams.replay.cycles import Configurations  # noqa: E402
from streams.replay.headers import head  # noqa: E402
from streams.replay.jobs import fold_queues  # noqa: E402
from streams.replay.rebuild import rebuild  # noqa: E402
from streams.replay.source import EVENTS, FEED, ArchiveLog, LogSource, feed_records  # noqa: E402
from streams.scheduler.config_file import parse  # noqa: E402
from streams.scheduler.feed import Committed, NodeState, QueueInfo  # noqa: E402
from streams.topics import ensure_topics  # noqa: E402
from tests.kit.quantities import CPU, GI  # noqa: E402
from tests.kit.recorded import PREFIX, Recorder  # noqa: E402

# No rate limit: the workload, not Armada's default 100 leases a second, decides what is leased.
CONFIG = {
    "scheduling": {
        "maximumSchedulingRate": 100_000,
        "maximumSchedulingBurst": 100_000,
        "maximumPerQueueSchedulingRate": 100_000,
        "maximumPerQueueSchedulingBurst": 100_000,
    }
}
JOB_SET = 100


def log(message: str) -> None:
    print(f"[replay] {message}", file=sys.stderr, flush=True)


def record(events_wanted: int, rate: int, nodes: int, run_s: int, queues: int) -> tuple[Recorder, int]:
    """The log, recorded until it holds ``events_wanted`` events; returns it and its event count."""
    names = [f"q{i}" for i in range(queues)]
    recorder = Recorder(
        configuration=parse(CONFIG),
        nodes=tuple(NodeState(f"n{i:04d}", {"cpu": 32 * CPU, "memory": 256 * GI}) for i in range(nodes)),
        queues=tuple(QueueInfo(name, 1.0) for name in names),
        run_ms=run_s * 1000,
    )
    counted = second = 0
    started = time.monotonic()
    while counted < events_wanted:
        active = names if second >= 60 else names[: max(1, queues // 2)]  # the late half: fair-share preemption
        per_queue = rate // len(active)
        for name in active:
            for start in range(0, per_queue, JOB_SET):
                recorder.submit(name, f"s{second}-{start}", count=min(JOB_SET, per_queue - start))
        before = {key: len(records) for key, records in recorder.log.topics.items() if key[0] == EVENTS}
        recorder.step()
        for key, records in recorder.log.topics.items():
            if key[0] == EVENTS:
                counted += sum(len(decode("event_sequence", r.value)["events"]) for r in records[before.get(key, 0) :])
        second += 1
        if second % 50 == 0:
            log(f"recorded {second} s of the pipeline: {counted:,} events ({time.monotonic() - started:.0f} s)")
    return recorder, counted


def archive(recorder: Recorder, root: Path) -> dict[str, int]:
    """The log written as the worker's archiver writes it; returns the records per topic."""
    writer = ArchiveWriter(root)
    writer.open()
    try:
        for (topic, partition), records in sorted(recorder.log.topics.items()):
            for start in range(0, len(records), 5_000):
                writer.write_group({(PREFIX + topic, partition): records[start : start + 5_000]})
        definitions = [(q.name.encode(), encode("queue", {"name": q.name, "priority_factor": 1.0})) for q in recorder.queues]
        queues = [Record(PREFIX + "queues", 0, i, recorder.now, key, value, ()) for i, (key, value) in enumerate(definitions)]
        writer.write_group({(PREFIX + "queues", 0): queues})
    finally:
        writer.close()
    counts: dict[str, int] = {}
    for (topic, _), records in recorder.log.topics.items():
        counts[topic] = counts.get(topic, 0) + len(records)
    return counts


def timed(what: str, run: Callable[[], Any]) -> tuple[Any, float, float]:
    log(f"{what} ...")
    cpu, wall = time.process_time(), time.monotonic()
    result = run()
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    log(f"{what}: {wall:.1f} s wall, {cpu:.1f} s CPU")
    return result, cpu, wall


def audited(source: LogSource) -> AuditReport:
    report = audit(source, Configurations())
    if not report.ok:
        raise SystemExit(f"the audit found a divergence in a faithful log: {report.first}")
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the log (default 1,000,000)")
    parser.add_argument("--rate", type=int, default=200, help="jobs submitted per second of the recorded pipeline (default 200)")
    parser.add_argument("--nodes", type=int, default=100, help="32-cpu nodes (default 100)")
    parser.add_argument("--run-s", type=int, default=5, help="how long each job runs (default 5 s)")
    parser.add_argument("--queues", type=int, default=4, help="queues; half of them start a minute late (default 4)")
    parser.add_argument("--broker", action="store_true", help="also audit from an embedded Tansu the archive is restored into")
    parser.add_argument("--py-spy", metavar="BIN", help="also profile an audit of the archive with this py-spy (raw format, path printed)")
    parser.add_argument("--audit-only", action="store_true", help="time the audit alone (no rebuild, no --at read)")
    parser.add_argument("--keep", metavar="DIR", type=Path, help="record the log into DIR once and reuse it on later runs")
    args = parser.parse_args()
    tune_for_long_lived_state()  # as `flotilla audit` and `flotilla rebuild` do
    scratch = Path(tempfile.mkdtemp(prefix="bench-replay-"))
    try:
        with Children(log) as children:
            print(json.dumps(run(args, children, scratch)))
    except KeyboardInterrupt:
        return exit_status()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def run(args: argparse.Namespace, children: Children, scratch: Path) -> dict[str, Any]:
    root = args.keep if args.keep is not None else scratch / "log"
    log_options = {name: getattr(args, name) for name in ("events", "rate", "nodes", "run_s", "queues")}
    recorded, reused = kept_or_made(root / "recorded.json", log_options, "a log recorded with", lambda: record_into(args, root))
    if reused:
        log(f"reusing the log recorded in {root}")
    events_count, counts, jobs = recorded["events"], recorded["counts"], recorded["jobs"]
    feed_records = counts.get(FEED, 0)
    source = ArchiveLog(ArchiveSource(root))
    size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
    print(f"conditions: {os.cpu_count()} cores shared with other work, this process on one; python {sys.version.split()[0]}")
    print(
        f"  log: {events_count:,} events in {counts.get(EVENTS, 0):,} records of events, {feed_records:,} feed records,"
        f" {jobs:,} jobs, {args.nodes} nodes, {args.queues} queues, {args.rate} jobs/s for {args.run_s} s each;"
        f" archive {size / 2**20:.1f} MiB (recorded in {recorded['record_wall']:.0f} s, not timed)"
    )
    commands = commands_sent(source)
    per_job = ", ".join(f"{kind} {count / jobs:.3f}" for kind, count in sorted(commands.items()))
    print(f"  executor commands the scheduler's cycles committed (orphans), per job: {per_job or 'none'}")
    _, floor_cpu, _ = timed("the floor: reading and decoding the log alone", lambda: read_alone(source))
    print(
        f"floor (archive): reading the feed records decoded and the heads of `events` records, nothing repeated:"
        f" {floor_cpu / events_count * 1e6:.1f} us CPU per event, at most {events_count / floor_cpu:,.0f} events/s"
    )
    report, audit_cpu, audit_wall = timed("audit from the archive", lambda: audited(source))
    results: dict[str, Any] = {
        "events": events_count,
        "event_records": counts.get(EVENTS, 0),
        "feed_records": feed_records,
        "cycles": report.cycles,
        "deciding_cycles": report.deciding,
        "decisions": report.decisions_matched,
        "jobs": jobs,
        "cancel_run_per_job": round(commands.get("cancel_run", 0) / jobs, 3),
        "nodes": args.nodes,
        "queues": args.queues,
        "archive_mib": round(size / 2**20, 1),
        "floor_cpu_us_per_event": round(floor_cpu / events_count * 1e6, 2),
        "audit_archive_s": round(audit_wall, 2),
        "audit_archive_cpu_s": round(audit_cpu, 2),
        "audit_archive_events_per_s": round(events_count / audit_wall),
        "audit_cpu_us_per_event": round(audit_cpu / events_count * 1e6, 2),
        "audit_cpu_us_per_feed_record": round(audit_cpu / feed_records * 1e6, 2),
    }
    print(
        f"audit (archive): {audit_wall:.1f} s, {events_count / audit_wall:,.0f} events/s, {feed_records / audit_wall:,.0f} feed records/s;"
        f" {report.cycles:,} cycles ({report.deciding:,} deciding), {report.decisions_matched:,} decisions;"
        f" {audit_cpu / events_count * 1e6:.1f} us CPU per event (target: 50,000 events/s)"
    )
    if args.broker:
        results.update(broker_audit(children, scratch, root, events_count))
    if not args.audit_only:
        results.update(rest(source, scratch, recorded["middle"], events_count))
    results["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if args.py_spy:
        results["profile"] = profile(args.py_spy, children, root)
    return results


def commands_sent(source: LogSource) -> Counter[str]:
    """The executor commands of every cycle committed on the feed, by kind (not timed)."""
    kinds: Counter[str] = Counter()
    for generation in source.feed_generations():
        for _, record in feed_records(generation):
            if isinstance(record, Committed):
                kinds.update(decode("executor_command", value)["kind"] for _, value in record.commands)
    return kinds


def read_alone(source: LogSource) -> int:
    """What an audit cannot do without: every feed record read and decoded, every `events` record
    read and its head decoded (as the audit's matcher reads them); returns the records read."""
    read = 0
    for generation in source.feed_generations():
        for _ in feed_records(generation):
            read += 1
    for partition in source.partitions(EVENTS):
        for record in source.records(EVENTS, partition):
            if record.value is not None:
                head(record.value)
            read += 1
    return read


def rest(source: LogSource, scratch: Path, middle: int, events_count: int) -> dict[str, Any]:
    """Rebuild and the read of queues at the log's middle, timed."""
    results: dict[str, Any] = {}
    _, rebuild_cpu, rebuild_wall = timed("rebuild from the archive", lambda: rebuild(source, scratch / "rebuilt"))
    results.update(rebuild_s=round(rebuild_wall, 2), rebuild_events_per_s=round(events_count / rebuild_wall))
    print(
        f"rebuild (archive): {rebuild_wall:.1f} s, {events_count / rebuild_wall:,.0f} events/s,"
        f" {rebuild_cpu / events_count * 1e6:.1f} us CPU per event"
    )
    _, _, at_wall = timed("queues at the log's middle", lambda: fold_queues(source, middle))
    print(f"queues --at the log's middle (archive): {at_wall:.1f} s for about half the log")
    results.update(queues_at_middle_s=round(at_wall, 2))
    return results


def record_into(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """The log recorded and archived into ``root``; returns what the figures need about it."""
    (recorder, counted), _, wall = timed(
        f"recording {args.events:,} events", lambda: record(args.events, args.rate, args.nodes, args.run_s, args.queues)
    )
    return {
        "events": counted,
        "counts": archive(recorder, root),
        "jobs": len(recorder.jobs.table),
        "middle": (recorder.log.topics[(EVENTS, 0)][0].timestamp + recorder.now) // 2,
        "record_wall": wall,
    }


def broker_audit(children: Children, scratch: Path, root: Path, events_count: int) -> dict[str, Any]:
    """The archive restored into a fresh embedded Tansu (not timed), then audited from it."""
    broker = children.add(EmbeddedBroker(log_path=scratch / "broker.log", new_session=True))
    broker.start()
    settings = Settings(broker=broker.url)
    asyncio.run(ensure_topics(settings))
    asyncio.run(restore(root, kafka_clients(settings)))
    with BrokerLog(settings) as source:
        report, cpu, wall = timed("audit from the broker", lambda: audited(source))
    rate, per_event = events_count / wall, cpu / events_count * 1e6
    print(f"audit (broker): {wall:.1f} s, {rate:,.0f} events/s, {per_event:.1f} us CPU per event in this process")
    return {"audit_broker_s": round(wall, 2), "audit_broker_events_per_s": round(events_count / wall), "audit_broker_cycles": report.cycles}


def profile(py_spy: str, children: Children, root: Path) -> str:
    """A py-spy raw profile of an audit of the same archive, in a subprocess; kept beside the archive's scratch directory."""
    out = Path(tempfile.gettempdir()) / f"bench-replay-audit-{os.getpid()}.pyspy"
    script = (
        "from pathlib import Path\n"
        "from streams.archive.source import ArchiveSource\n"
        "from streams.replay.audit import audit\n"
        "from streams.replay.cycles import Configurations\n"
        "from streams.replay.source import ArchiveLog\n"
        "from streams.gc_tuning import tune_for_long_lived_state\n"
        "tune_for_long_lived_state()\n"
        f"audit(ArchiveLog(ArchiveSource(Path({str(root)!r}))), Configurations())\n"
    )
    command = children.add(Command([py_spy, "record", "--format", "raw", "-o", str(out), "--", sys.executable, "-c", script], cwd=ROOT))
    command.start()
    assert command.process is not None
    if command.process.wait() != 0:
        raise RuntimeError(f"py-spy ended with {command.process.returncode}")
    log(f"profile of the audit: {out}")
    return str(out)


if __name__ == "__main__":
    sys.exit(main())
