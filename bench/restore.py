"""Restore benchmark: a log archive of N events put back into an empty broker and refolded by a worker.

What `flotilla up` does on every start, measured in its two phases:

1. restore: the archive re-produced into a fresh embedded Tansu (streams/archive/restore.py), every
   record at its own offset; timed from the first read of the archive to the last acknowledgement;
2. refold: a fresh worker (empty data directory, `FLOTILLA_REFOLD_BEFORE_SCHEDULING`) folds `events`
   into its tables; timed from the worker's spawn, and from its first progress on /health (so
   Faust's start-up is apart) to /health saying ok (every restored record folded).

The archive is written first (not timed) with the archive's own writer, in group commits of one
record each, as the worker's archiver writes it: jobs in waves of `--wave` (100), each wave
a submission (one record of JobSubmitted events), a cycle's leases (JobLeased events and the cycle's
SchedulingCycle record), then an executor's JobRunPending, JobRunRunning and JobRunSucceeded +
JobSucceeded records; every tenth wave stays queued (submitted only). Events are the individual
events inside the records (an `events` record carries an event sequence); both counts are printed.
After the refold, `--check` (200) jobs picked at random are read through the REST API and must be in
the state the log gives them (succeeded or queued).

`--py-spy BIN` records a `--format raw` profile of the worker and its refold's child process from its first refold progress to healthy
(`--profile-out`; that run's figures are perturbed). `--keep DIR` writes the archive into DIR once (~60 s at 1M
events) and later runs with the same log options copy it from there: alternated runs then refold the same log.

Usage: .venv/bin/python bench/restore.py [--events 1000000] [--wave 100] [--codec deflate] [--check 200] [--py-spy BIN]
       [--worker-log PATH] [--keep DIR]
Progress goes to stderr; the last stdout line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.ingest import cpu_seconds, http, raw_item  # noqa: E402
from bench.kept import kept_or_made  # noqa: E402
from bench.processes import Children, Command, exit_status  # noqa: E402
from ops.broker import EmbeddedBroker, free_port  # noqa: E402
from ops.worker import WorkerProcess  # noqa: E402
from schemas.codec import encode  # noqa: E402
from streams.archive.reader import read_partition, verify  # noqa: E402
from streams.archive.restore import restore  # noqa: E402
from streams.archive.segments import Record  # noqa: E402
from streams.archive.writer import ArchiveWriter  # noqa: E402
from streams.config import Settings  # noqa: E402
from streams.domain import events, jobspec  # noqa: E402
from streams.domain.ids import new_id, run_id_for  # noqa: E402
from streams.domain.validation import SubmitPolicy, validate_item  # noqa: E402
from streams.kafka import kafka_clients  # noqa: E402
from streams.tables.jobs import read_sequence  # noqa: E402
from streams.topics import ensure_topics  # noqa: E402

EVENTS_TOPIC = "flotilla.events"
QUEUE, EXECUTOR, NODE = "bench", "bench-executor", "node-0"
EVENTS_PER_FULL_WAVE_PER_JOB = 6  # submitted, leased, pending, running, run succeeded, succeeded
START_MS = 1_800_000_000_000
# A job read through the API once the worker is healthy: it rebuilds the job index from its table then, which on a
# loaded 2-core machine held a read past the usual 10 s (a run of main failed so, 2026-11-28).
CHECK_TIMEOUT_S = 120.0


def log(message: str) -> None:
    print(f"[restore] {message}", file=sys.stderr, flush=True)


def tree_cpu_seconds(pid: int | None) -> tuple[float, float]:
    """User + system CPU time of a process and its child processes (the refold's, `streams.agents.refold_child`),
    the ended ones included; and the children's part of it."""
    if pid is None:
        return 0.0, 0.0
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    own = cpu_seconds(pid)
    children = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # ended children, once waited for
    for child in child_pids(pid):
        children += sum(tree_cpu_seconds(child))
    return own + children, children


def child_pids(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def written_log(archive: Path, args: argparse.Namespace) -> tuple[int, int, dict[str, str]]:
    log(f"writing an archive of {args.events:,} events ({args.codec}) ...")
    return synthetic_log(archive, args.events, args.wave, args.codec)


def kept_log(keep: Path, archive: Path, args: argparse.Namespace) -> tuple[int, int, dict[str, str]]:
    """The archive kept in ``keep`` for these log options (written there first if it is not), copied to ``archive``:
    the worker archives into its archive (the new scheduler feed), so each run starts from a copy."""
    options = {"events": args.events, "wave": args.wave, "codec": args.codec}

    def written() -> dict[str, Any]:
        shutil.rmtree(keep / "log", ignore_errors=True)
        records, counted, states = written_log(keep / "log", args)
        return {"records": records, "events": counted, "states": states}

    meta, reused = kept_or_made(keep / "restore.json", options, "an archive of", written)
    if reused:
        log(f"copying the archive kept in {keep} ...")
    shutil.copytree(keep / "log", archive)
    return meta["records"], meta["events"], meta["states"]


def synthetic_log(root: Path, events_wanted: int, wave: int, codec: str) -> tuple[int, int, dict[str, str]]:
    """Write the archive; returns (records, events, job id -> the state the log leaves it in)."""
    writer = ArchiveWriter(root, codec=codec)
    writer.open()
    now = START_MS
    queue_record = Record("flotilla.queues", 0, 0, now, QUEUE.encode(), encode("queue", {"name": QUEUE, "priority_factor": 1.0}), ())
    writer.write_group({("flotilla.queues", 0): [queue_record]})
    offset = counted = 0
    states: dict[str, str] = {}
    try:
        for key, value, count in synthetic_events(events_wanted, wave, states):
            writer.write_group({(EVENTS_TOPIC, 0): [Record(EVENTS_TOPIC, 0, offset, now + offset, key, value, ())]})
            offset += 1
            counted += count
    finally:
        writer.close()
    return offset, counted, states


def synthetic_events(events_wanted: int, wave: int, states: dict[str, str]) -> Iterator[tuple[bytes, bytes, int]]:
    """The `events` records of the log, as (key, value, events in it), until ``events_wanted`` events;
    ``states`` is given each job's id and the state the log leaves it in."""
    rng = random.Random(7)
    job, reason = validate_item(jobspec.job_item(raw_item(0)), SubmitPolicy())
    assert job is not None, reason
    now = START_MS
    counted = 0

    def put(job_set: str, user: str, batch: list[dict[str, Any]], queue: str = QUEUE) -> Iterator[tuple[bytes, bytes, int]]:
        nonlocal now, counted
        for sequence in events.sequences(queue, job_set, user, [], batch):
            yield (
                events.sequence_key(queue, job_set).encode(),
                encode("event_sequence", sequence, validate_record=False),
                len(sequence["events"]),
            )
            now += 1
            counted += len(sequence["events"])

    number = 0
    while counted < events_wanted:
        job_set = f"set-{number // 50}"
        ids = [new_id(now, rng) for _ in range(wave)]
        yield from put(job_set, "bench", [events.event(new_id(now, rng), now, i, events.payload("JobSubmitted", job)) for i in ids])
        queued = number % 10 == 9
        for job_id in ids:
            states[job_id] = "queued" if queued else "succeeded"
        number += 1
        if queued:
            continue
        cycle = new_id(now, rng)
        leased = {
            "executor": EXECUTOR,
            "node": NODE,
            "pool": "default",
            "scheduled_at_priority": 0,
            "cycle_id": cycle,
        }
        yield from put(job_set, "scheduler", [event(rng, now, i, "JobLeased", {"run_id": run_id_for(i, 1), **leased}) for i in ids])
        decided = "scheduled in pool default"
        decisions = [{"job_id": i, "kind": "leased", "executor": EXECUTOR, "node": NODE, "reason": decided} for i in ids]
        cycle_payload = {"cycle_id": cycle, "cycle_time": now, "seed": number, "feed_offsets": {"0": number}, "decisions": decisions}
        record = events.event(new_id(now, rng), now, None, events.payload("SchedulingCycle", cycle_payload))
        yield from put("cycles", "scheduler", [record], "_scheduler")
        executor = f"executor:{EXECUTOR}"
        yield from put(job_set, executor, [event(rng, now, i, "JobRunPending", {"run_id": run_id_for(i, 1)}) for i in ids])
        yield from put(job_set, executor, [event(rng, now, i, "JobRunRunning", {"run_id": run_id_for(i, 1), "node": NODE}) for i in ids])
        ended = [event(rng, now, i, kind, {"run_id": run_id_for(i, 1)}) for i in ids for kind in ("JobRunSucceeded", "JobSucceeded")]
        yield from put(job_set, executor, ended)


def event(rng: random.Random, now: int, job_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
    return events.event(new_id(now, rng), now, job_id, events.payload(kind, payload))


def decode_floor(archive: Path) -> float:
    """CPU seconds to read every `events` record of the archive and decode its event sequence as the fold
    does (`read_sequence`: specs kept as their bytes and shared, cycles skipped): what no refold of this log,
    however it is fed, can go below."""
    started = time.process_time()
    for record in read_partition(archive, EVENTS_TOPIC, 0):
        read_sequence(record.value)
    return time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the archive (default 1,000,000)")
    parser.add_argument("--wave", type=int, default=100, help="jobs per submission, cycle and executor report (default 100)")
    parser.add_argument("--codec", default="deflate", help="the archive's codec (default deflate)")
    parser.add_argument("--check", type=int, default=200, help="jobs read back through the API after the refold (default 200)")
    parser.add_argument("--py-spy", metavar="BIN", help="profile the worker's refold with this py-spy")
    parser.add_argument("--profile-out", default="/tmp/restore-profile.txt", help="py-spy output (--format raw)")
    parser.add_argument("--worker-log", metavar="PATH", help="keep the worker's log here (its start-up's steps are timed in it)")
    parser.add_argument(
        "--keep", metavar="DIR", help="write the archive into DIR once (with the jobs' states) and copy it from there in later runs"
    )
    args = parser.parse_args(argv)

    state = Path(tempfile.mkdtemp(prefix="flotilla-bench-restore-"))
    archive = state / "log"
    try:
        started = time.perf_counter()
        records, counted, states = kept_log(Path(args.keep), archive, args) if args.keep else written_log(archive, args)
        written_s = time.perf_counter() - started
        archive_bytes = sum(path.stat().st_size for path in archive.rglob("*.avro"))
        mib = archive_bytes / 2**20
        log(f"{records:,} records, {counted:,} events, {len(states):,} jobs, {mib:,.1f} MiB, written in {written_s:.1f} s")
        started = time.perf_counter()
        (report, *_) = [r for r in verify(archive) if r.topic == EVENTS_TOPIC]
        read_s = time.perf_counter() - started
        assert report.records == records and not report.problems, report
        decode_s = decode_floor(archive)

        with Children(log) as children:
            broker = children.add(EmbeddedBroker(log_path=state / "broker.log", new_session=True))
            broker.start()
            settings = Settings(broker=broker.url, archive_dir=str(archive))
            asyncio.run(ensure_topics(settings))
            log("restoring into the empty broker ...")
            restored = asyncio.run(restore(archive, kafka_clients(settings), lambda p: log(f"restored {p.done:,} of {p.total:,} records")))
            broker_pid = broker.process.pid if broker.process else None

            port = free_port()
            env = {
                **os.environ,
                "FLOTILLA_BROKER": broker.url,
                "FLOTILLA_DATA_DIR": str(state / "data"),
                "FLOTILLA_WEB_PORT": str(port),
                "FLOTILLA_GRPC_PORT": str(free_port()),
                "FLOTILLA_ARCHIVE_DIR": str(archive),
                "FLOTILLA_REFOLD_BEFORE_SCHEDULING": "true",
            }
            worker = children.add(WorkerProcess(env=env, log_path=state / "worker.log", web_port=port, new_session=True))
            first_progress: list[float] = []
            last_log = [0.0]

            spy: list[Command] = []

            def progress(health: dict[str, Any]) -> None:
                now = time.perf_counter()
                if health.get("status") == "refolding" and health.get("folded", 0) > 0 and not first_progress:
                    first_progress.append(now)
                    if args.py_spy and worker.process is not None:
                        profiler = [args.py_spy, "record", "--format", "raw", "--subprocesses", "-o", args.profile_out]
                        profiler += ["--pid", str(worker.process.pid)]  # and its refold's child (streams.agents.refold_child)
                        command = Command([*profiler, "--rate", "100", "--nonblocking"], stop_signal=signal.SIGINT, grace_s=30.0)
                        spy.append(children.add(command).start())  # py-spy writes its output on SIGINT
                if now - last_log[0] > 5:
                    log(f"worker: {health}")
                    last_log[0] = now

            broker_cpu_before = cpu_seconds(broker_pid)
            spawned = time.perf_counter()
            worker.start(timeout_s=300, on_health=progress)
            healthy = time.perf_counter()
            worker_pid = worker.process.pid if worker.process else None
            worker_cpu, children_cpu = tree_cpu_seconds(worker_pid)
            broker_cpu = cpu_seconds(broker_pid) - broker_cpu_before
            for command in spy:
                command.stop()
            sample = random.Random(1).sample(sorted(states), min(args.check, len(states)))
            wrong = []
            for job_id in sample:
                status, job = http("GET", f"{worker.url}/api/v1/jobs/{job_id}", timeout=CHECK_TIMEOUT_S)
                if status != 200 or job.get("state") != states[job_id]:
                    wrong.append((job_id, status, job if status != 200 else job.get("state"), states[job_id]))
            if wrong:
                raise RuntimeError(f"{len(wrong)} of {len(sample)} jobs are not as the log says, first: {wrong[0]}")
    except KeyboardInterrupt:
        return exit_status()
    finally:
        if args.worker_log and (state / "worker.log").exists():
            shutil.copyfile(state / "worker.log", args.worker_log)
        shutil.rmtree(state, ignore_errors=True)

    refold_s = healthy - (first_progress[0] if first_progress else spawned)
    start_s = healthy - spawned
    total_s = restored.elapsed_s + start_s
    print(f"conditions: {os.cpu_count()} cores shared by the broker, the worker and this script; embedded Tansu; codec {args.codec}")
    if args.py_spy:
        print(f"  NOTE: the worker was profiled with py-spy during its refold ({args.profile_out}); figures are perturbed")
    print(
        f"  archive: {records:,} records of events carrying {counted:,} events ({len(states):,} jobs, waves of {args.wave}), "
        f"{archive_bytes / 2**20:,.1f} MiB; read and checked whole (flotilla log verify) in {read_s:.1f} s "
        f"({records / read_s:,.0f} records/s, {counted / read_s:,.0f} events/s)"
    )
    print(
        f"  floor: every record read and its events decoded as the fold decodes them, {decode_s:.1f} s CPU "
        f"({decode_s / counted * 1e6:.1f} us per event, {counted / decode_s:,.0f} events/s at most on one core)"
    )
    print(
        f"restore: {restored.done:,} records in {restored.elapsed_s:.1f} s "
        f"({restored.done / restored.elapsed_s:,.0f} records/s, {counted / restored.elapsed_s:,.0f} events/s)"
    )
    print(
        f"refold: {refold_s:.1f} s from the first progress to healthy ({counted / refold_s:,.0f} events/s, "
        f"{len(states) / refold_s:,.0f} jobs/s); {start_s:.1f} s from the worker's spawn (Faust start-up included); "
        f"worker CPU {worker_cpu:.1f} s ({worker_cpu / counted * 1e6:.0f} us per event; its child processes {children_cpu:.1f} s of it), "
        f"broker {broker_cpu:.1f} s ({broker_cpu / counted * 1e6:.0f} us per event)"
    )
    rate = counted / total_s
    verdict = "met" if rate >= 50_000 else "NOT met"
    print(f"restored and refolded: {counted:,} events in {total_s:.1f} s = {rate:,.0f} events/s (target >= 50,000: {verdict})")
    print(f"checked: {len(sample)} jobs read through the API are in the state the log gives them")
    print(
        json.dumps(
            {
                "events": counted,
                "records": records,
                "jobs": len(states),
                "archive_mib": round(archive_bytes / 2**20, 1),
                "read_s": round(read_s, 2),
                "read_decode_us_per_event": round(decode_s / counted * 1e6, 2),
                "restore_s": round(restored.elapsed_s, 2),
                "restore_events_per_s": round(counted / restored.elapsed_s),
                "refold_s": round(refold_s, 2),
                "worker_start_to_healthy_s": round(start_s, 2),
                "refold_events_per_s": round(counted / refold_s),
                "refold_jobs_per_s": round(len(states) / refold_s),
                "total_s": round(total_s, 2),
                "events_per_s": round(rate),
                "worker_cpu_s": round(worker_cpu, 1),
                "worker_cpu_us_per_event": round(worker_cpu / counted * 1e6, 1),
                "worker_children_cpu_s": round(children_cpu, 1),
                "broker_cpu_s": round(broker_cpu, 1),
                "codec": args.codec,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
