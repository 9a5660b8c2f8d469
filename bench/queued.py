"""Queued benchmark: N queued jobs held by one worker, and one scheduling cycle over them with no capacity.

Everything is real and runs as the user runs it: an embedded Tansu broker on a free port, one
control-plane worker (`python -m streams.client.cli worker`, schedule period `--period`) and one fake
executor (`python -m executor.cli --backend fake`) whose `--nodes` 32-cpu / 256Gi nodes are all
cordoned (`unschedulable: true`): the executor is live, so every cycle runs the scheduling algorithm
over its pool, but no job can be placed and none is leased. (With no executor at all a cycle has no
pool and never calls the algorithm: streams/scheduler/cycle.py's `place` walks the pools of live
executors.)

1. The executor starts first; the run waits until the worker has forwarded one of its reports to the
   scheduler feed (`flotilla_executor_reports_total{outcome="forwarded"}` at GET /metrics).
2. fill: N jobs (bench/ingest.py's jobs, 1 cpu / 1Gi, encoded before the clock starts), in submit
   requests of `--batch` items sent round-robin to queues `bench-0`..`bench-{Q-1}` as bench/ingest.py
   does, are produced to `flotilla.submissions` as fast as possible; the clock stops at the first
   GET /metrics whose `flotilla_scheduler_index_jobs` (set at the end of every cycle) says the
   scheduler's index holds all N. Cycles run all along over the jobs indexed so far. The fill time's
   resolution is that of the gauge: the clock stops after the first cycle whose tick came after the
   last job on the feed, up to about a period plus a cycle after the index held them all.
3. cycles: the scrape that showed N jobs also gives the count and the sum of the
   `flotilla_scheduling_cycle_seconds` histogram. The worker is polled until the count grows; when
   it grew by exactly one, the sum's growth is that one cycle's duration, the very figure (the time
   `run_cycle` took) that the worker's `cycle ... at offset N: X s, L leased` log line would print.
   The worker logs that line only for cycles that decided something, so a cycle with no capacity
   leaves no line; the histogram is the only place its duration is recorded. The cycle measured is
   the next one the worker ran after that scrape (a cycle never interleaves with a scrape: both run
   on the worker's event loop, and a cycle that decides nothing awaits nothing); its number is
   `flotilla_scheduling_cycles_total` afterwards. If a poll sees two or more new cycles at once the
   run tries again, up to MAX_TRIES times, then reports their mean and says so. Then the next cycles
   are measured the same way, `--cycles` (5) in all: `cycle_s` is their median, because one cycle's
   duration swings by a second or more between runs (the first one after the fill also folds what
   changed during the cycle before it, and the worker shares 2 cores with the broker and executor).
   Each of them runs over all N jobs, as `bench/scheduler.py queued_1m` repeats its cycle on the same
   input; the first one and every single figure are printed too.

Why that cycle ran over all N jobs: the index already held N at the end of the previous cycle and
jobs leave it only by a decision (none: `flotilla_scheduling_decisions_total{kind="leased"}` stays 0
and the gauge still says N afterwards); the cycle walks every index entry (lease lifecycle, orphans),
hands every queued job of a known queue and priority class to `schedule()` for the executor's pool,
and `schedule()` groups all of them by (queue, shape), tries the first job of each group on every
node (each refuses: "node is unschedulable") and then, as Armada does, reports the rest of the group
as attempted with the same reason without trying them again ("job does not fit on any node").
The executor must be live at that cycle (heard within the executor timeout, or at most 3 cycles
without a report): the reports it sent meanwhile are printed.

RSS is the worker's VmHWM (peak since it started, the start-up included) and VmRSS, from
/proc/<pid>/status; CPU seconds per process (worker, executor, broker, this process and the rest of
the machine) are taken per phase. Progress goes to stderr; the last stdout line is one JSON object.

Usage: .venv/bin/python bench/queued.py [--jobs 1000000] [--queues 10] [--batch 100] [--period 1.0]
       [--nodes 1000] [--cycles 5] [--reference-s S] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaProducer  # noqa: E402

from bench.ingest import PRODUCER_OPTIONS, encode_requests, produce_all, queue_names, read_status  # noqa: E402
from bench.pipeline import (  # noqa: E402
    NODE_CPU,
    NODE_MEMORY,
    PROGRESS_EVERY_S,
    STALL_TIMEOUT_S,
    PhaseResult,
    Session,
    metric_value,
    phase,
)
from bench.processes import Children, exit_status  # noqa: E402
from ops.executor import ExecutorProcess  # noqa: E402

SUBMISSIONS = "flotilla.submissions"
EXECUTOR_ID = "cordoned"
PARTITIONS = 1  # the worker's default (FLOTILLA_PARTITIONS is not set)
MAX_TRIES = 5  # polls that saw several new cycles at once before the mean of the last is taken
POLL_S = 0.05
RSS_TARGET_MIB = 1024.0


def log(message: str) -> None:
    print(f"[queued] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the worker's metrics


def labelled_value(exposition: str, name: str, label: str, value: str) -> float | None:
    """The value of a sample with one label in Prometheus's text format."""
    prefix = f'{name}{{{label}="{value}"}} '
    for line in exposition.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return None


@dataclass(frozen=True)
class Scrape:
    """What one GET /metrics said."""

    index_jobs: float  # jobs in the scheduler's index at the end of the last cycle
    cycles: float  # cycles observed by flotilla_scheduling_cycle_seconds
    cycle_seconds: float  # and the sum of their durations
    cycles_total: float  # flotilla_scheduling_cycles_total
    leased: float  # leases decided so far
    reports: float  # executor reports passed on to the scheduler feed (in full or as heartbeats)

    @classmethod
    def parse(cls, text: str) -> Scrape | None:
        """None when the worker did not answer or has not run a cycle yet."""
        count = metric_value(text, "flotilla_scheduling_cycle_seconds_count")
        total = metric_value(text, "flotilla_scheduling_cycle_seconds_sum")
        if count is None or total is None:
            return None
        return cls(
            index_jobs=metric_value(text, "flotilla_scheduler_index_jobs") or 0.0,
            cycles=count,
            cycle_seconds=total,
            cycles_total=metric_value(text, "flotilla_scheduling_cycles_total") or 0.0,
            leased=labelled_value(text, "flotilla_scheduling_decisions_total", "kind", "leased") or 0.0,
            reports=sum(
                labelled_value(text, "flotilla_executor_reports_total", "outcome", kind) or 0.0 for kind in ("forwarded", "heartbeat")
            ),
        )


async def scrape(session: Session) -> Scrape | None:
    (worker,) = await asyncio.to_thread(session.metrics)  # one worker: the scheduling one
    return Scrape.parse(worker)


def rss(session: Session) -> str:
    status = read_status(session.worker_pids[0])
    return f"worker RSS {status.get('VmRSS', 0) / 1024:,.0f} MiB (peak {status.get('VmHWM', 0) / 1024:,.0f})"


def check_crashes(session: Session) -> None:
    session.worker_log.poll()
    if session.worker_log.crashes:
        raise RuntimeError(f"an agent of the worker crashed: {session.worker_log.crashes[0][:300]}")


# ---------------------------------------------------------------- processes


def start_cordoned_executor(session: Session, nodes: int) -> None:
    """One fake executor with ``nodes`` cordoned nodes, registered with the session's children."""
    spec = session.directory / f"{EXECUTOR_ID}.yaml"
    group = {"count": nodes, "prefix": f"{EXECUTOR_ID}-node", "cpu": NODE_CPU, "memory": NODE_MEMORY, "unschedulable": True}
    spec.write_text(yaml.safe_dump({"nodes": [group]}))
    executor = ExecutorProcess(
        executor_id=EXECUTOR_ID,
        backend="fake",
        env={**os.environ, "FLOTILLA_BROKER": session.broker.url},
        log_path=session.directory / f"{EXECUTOR_ID}.log",
        args=("--cluster", str(spec)),
        new_session=True,
    )
    session.executors.append(session.children.add(executor))
    executor.start(120.0)


async def wait_executor_known(session: Session) -> Scrape:
    """Until the worker forwarded a report of the executor to the scheduler feed and ran a cycle."""
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while (found := await scrape(session)) is None or found.reports < 1:
        check_crashes(session)
        if time.monotonic() > deadline:
            raise RuntimeError(f"no executor report forwarded to the scheduler feed after {STALL_TIMEOUT_S:.0f}s")
        await asyncio.sleep(0.2)
    return found


# ---------------------------------------------------------------- phases


async def fill(session: Session, requests: list[tuple[bytes, bytes]], jobs: int) -> tuple[float, float, Scrape]:
    """Produce every request, then poll until the index holds ``jobs``; (seconds, seconds until every
    request was on the log, the scrape that showed them all)."""
    producer = AIOKafkaProducer(bootstrap_servers=session.broker.bootstrap, **PRODUCER_OPTIONS)
    await producer.start()
    try:
        started = time.monotonic()
        sending = asyncio.create_task(produce_all(producer, SUBMISSIONS, requests))
        produced: float | None = None
        last, last_change = -1.0, started
        next_report = started + PROGRESS_EVERY_S
        while True:
            found = await scrape(session)
            now = time.monotonic()
            if produced is None and sending.done():
                await sending  # raises a produce error
                produced = now - started
            if found is not None and found.index_jobs >= jobs:
                await sending
                return now - started, produced if produced is not None else now - started, found
            check_crashes(session)
            held = found.index_jobs if found is not None else last
            if held != last:
                last, last_change = held, now
            elif now - last_change > STALL_TIMEOUT_S:
                raise RuntimeError(f"the scheduler's index stayed at {held:,.0f}/{jobs:,} jobs for {STALL_TIMEOUT_S:.0f}s")
            if now >= next_report:
                elapsed, indexed = now - started, max(held, 0)
                log(f"  {indexed:,.0f}/{jobs:,} jobs in the index after {elapsed:.0f}s ({indexed / elapsed:,.0f} jobs/s); {rss(session)}")
                next_report = now + PROGRESS_EVERY_S
            await asyncio.sleep(0.5)
    finally:
        await producer.stop()


@dataclass(frozen=True)
class Measured:
    seconds: float  # one cycle's duration (the mean when `cycles` > 1)
    cycles: int  # cycles the histogram's growth covered
    tries: int
    before: Scrape
    after: Scrape


async def one_cycle(session: Session, base: Scrape) -> Measured:
    """The duration of the next cycle the worker runs after the ``base`` scrape, from the histogram."""
    tries = 1
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while True:
        found = await scrape(session)
        check_crashes(session)
        if found is not None and found.cycles > base.cycles:
            grown = round(found.cycles - base.cycles)
            if grown == 1 or tries >= MAX_TRIES:
                return Measured((found.cycle_seconds - base.cycle_seconds) / grown, grown, tries, base, found)
            log(f"  {grown} cycles between two polls; trying again ({tries}/{MAX_TRIES})")
            base, tries, deadline = found, tries + 1, time.monotonic() + STALL_TIMEOUT_S
        elif time.monotonic() > deadline:
            raise RuntimeError(f"no cycle ran for {STALL_TIMEOUT_S:.0f}s")
        await asyncio.sleep(POLL_S)


@dataclass
class Result:
    known: Scrape  # once the executor was known, before the first submission
    rss_before_mib: float  # the worker's VmRSS before the first submission
    fill_seconds: float
    produce_seconds: float
    full: Scrape  # the scrape that showed every job in the index
    measured: list[Measured]  # consecutive cycles over every job, the first after `full`
    phases: list[PhaseResult]

    @property
    def cycle_seconds(self) -> float:
        return statistics.median(m.seconds for m in self.measured)


async def run(session: Session, args: argparse.Namespace, requests: list[tuple[bytes, bytes]]) -> Result:
    phases: list[PhaseResult] = []
    log(f"starting the fake executor ({args.nodes:,} cordoned nodes) ...")
    await asyncio.to_thread(start_cordoned_executor, session, args.nodes)
    known = await wait_executor_known(session)
    rss_before = read_status(session.worker_pids[0]).get("VmRSS", 0) / 1024
    log(f"executor known to the scheduler; {rss(session)}; submitting {args.jobs:,} jobs ...")
    with phase(session, "fill", args.jobs, phases):
        fill_seconds, produce_seconds, full = await fill(session, requests, args.jobs)
    log(f"{args.jobs:,} jobs in the index after {fill_seconds:.1f}s ({args.jobs / fill_seconds:,.0f} jobs/s); {rss(session)}")
    measured: list[Measured] = []
    with phase(session, "cycle", args.jobs, phases):
        base = full
        while len(measured) < args.cycles:
            measured.append(await one_cycle(session, base))
            base = measured[-1].after
            log(f"cycle {base.cycles_total:,.0f}: {measured[-1].seconds:.3f}s; {rss(session)}")
    return Result(known, rss_before, fill_seconds, produce_seconds, full, measured, phases)


# ---------------------------------------------------------------- report


def report(args: argparse.Namespace, request_count: int, result: Result) -> int:
    """Print the conditions and the figures, the JSON last; returns the exit status."""
    fill_phase, cycle_phase = result.phases
    first, full = result.measured[0], result.measured[-1].after
    seconds = [m.seconds for m in result.measured]
    cycle_s = result.cycle_seconds
    peak = max(p.worker_peak_mib for p in result.phases)
    others = max(p.cpu["other"] / p.seconds for p in result.phases)
    per_job_kib = (peak - result.rss_before_mib) * 1024 / args.jobs
    problems = []
    if full.leased:
        problems.append(f"{full.leased:,.0f} jobs were leased: the nodes were meant to take none")
    if full.index_jobs != args.jobs:
        problems.append(f"the index held {full.index_jobs:,.0f} jobs after the cycle, not {args.jobs:,}")
    for number, measured in enumerate(result.measured, 1):
        if measured.cycles != 1:
            problems.append(f"cycle {number}: no poll saw exactly one new cycle in {measured.tries} tries: a mean of {measured.cycles}")
    logged = len(fill_phase.cycles) + len(cycle_phase.cycles)
    if logged:
        problems.append(f"the worker logged {logged} cycle(s) that decided something (leases, requeues, ...)")
    print(
        f"conditions: {os.cpu_count()} cores shared by the broker, the worker, the executor, this client and other "
        f"processes (these used at most {others:.0%} of one core in a phase); Python {platform.python_version()}; "
        f"embedded Tansu, log in memory; {PARTITIONS} partition per topic"
    )
    print(
        f"  jobs {args.jobs:,} (1 cpu / 1Gi each) in {request_count:,} submit requests of {args.batch} items, round-robin "
        f"over {args.queues} queue(s); schedule period {args.period:g}s; one fake executor with {args.nodes:,} "
        f"{NODE_CPU} cpu / {NODE_MEMORY} nodes, all cordoned (no capacity)"
    )
    for p in result.phases:
        share = ", ".join(f"{role} {seconds:.1f}s ({seconds / p.seconds:.0%})" for role, seconds in p.cpu.items())
        print(f"  phase {p.name}: {p.seconds:.1f}s wall; CPU (share of one core) {share}")
    print(
        f"fill: {args.jobs:,} jobs in the scheduler's index {result.fill_seconds:.1f}s after the first produce "
        f"({args.jobs / result.fill_seconds:,.0f} jobs/s; all produced after {result.produce_seconds:.1f}s; "
        f"{result.full.cycles:,.0f} cycles since the worker started, {result.full.cycle_seconds:.1f}s of cycle time); "
        f"worker RSS {result.rss_before_mib:,.1f} MiB before, {fill_phase.worker_rss_mib:,.1f} MiB then"
    )
    print(
        f"cycles: median {cycle_s:.3f}s of {len(seconds)} consecutive cycles over all {args.jobs:,} jobs "
        f"({', '.join(f'{s:.3f}' for s in seconds)} s; min {min(seconds):.3f}, max {max(seconds):.3f}), cycles "
        f"{first.after.cycles_total:,.0f}-{full.cycles_total:,.0f} of the worker, the first to start after the scrape that "
        f"showed all jobs in the index; after them: {full.index_jobs:,.0f} jobs in the index, {full.leased:,.0f} leased in "
        f"all; executor reports passed on to the scheduler feed: {first.before.reports - result.known.reports:,.0f} during "
        f"the fill, {full.reports - first.before.reports:,.0f} during the cycle phase (live while heard within the "
        f"executor timeout, 10 s by default)"
    )
    print(
        f"worker RSS: peak (VmHWM) {peak:,.1f} MiB, {cycle_phase.worker_rss_mib:,.1f} MiB at the end; "
        f"{per_job_kib:,.2f} KiB per queued job (peak minus the RSS before the first submission)"
    )
    within = args.reference_s is not None and cycle_s <= 1.5 * args.reference_s
    reference = f"; cycle_s <= 1.5 x {args.reference_s}s (queued_1m): {'met' if within else 'NOT met'}"
    print(
        f"targets (issue 13, for 1,000,000 jobs; this run: {args.jobs:,}): worker peak RSS <= {RSS_TARGET_MIB:,.0f} MiB: "
        f"{'met' if peak <= RSS_TARGET_MIB else 'NOT met'}"
        + (reference if args.reference_s else "; cycle_s: compare with bench/scheduler.py queued_1m (--reference-s)")
    )
    for problem in problems:
        print(f"  WARNING: {problem}")
    print(
        json.dumps(
            {
                "jobs": args.jobs,
                "worker_peak_rss_mib": round(peak, 1),
                "cycle_s": round(cycle_s, 3),
                "first_cycle_s": round(seconds[0], 3),
                "cycles_s": [round(s, 3) for s in seconds],
                "cycle_numbers": [round(m.after.cycles_total) for m in result.measured],
                "fill_s": round(result.fill_seconds, 1),
                "fill_jobs_per_s": round(args.jobs / result.fill_seconds, 1),
                "produce_s": round(result.produce_seconds, 1),
                "worker_rss_before_mib": round(result.rss_before_mib, 1),
                "rss_per_job_kib": round(per_job_kib, 3),
                "cycles_before": round(result.full.cycles),
                "cycle_seconds_before": round(result.full.cycle_seconds, 2),
                "index_jobs": round(full.index_jobs),
                "leased": round(full.leased),
                "worker_rss_full_mib": round(fill_phase.worker_rss_mib, 1),
                "worker_rss_end_mib": round(cycle_phase.worker_rss_mib, 1),
                "worker_cpu_fill_s": round(fill_phase.cpu["worker-0"], 1),
                "worker_cpu_cycle_phase_s": round(cycle_phase.cpu["worker-0"], 2),
                "cpu_s_by_phase": {p.name: {role: round(s, 1) for role, s in p.cpu.items()} for p in result.phases},
                "queues": args.queues,
                "batch": args.batch,
                "period_s": args.period,
                "nodes": args.nodes,
                "partitions": PARTITIONS,
                "reference_s": args.reference_s,
                "warnings": problems,
                "cores": os.cpu_count(),
                "python": platform.python_version(),
            }
        )
    )
    return 1 if problems else 0


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs to queue (default 1000000)")
    parser.add_argument("--queues", type=int, default=10, help="queues; requests go round-robin over them (default 10)")
    parser.add_argument("--batch", type=int, default=100, help="job items per submit request (default 100)")
    parser.add_argument("--period", type=float, default=1.0, help="FLOTILLA_SCHEDULE_PERIOD_S (default 1.0)")
    parser.add_argument("--nodes", type=int, default=1000, help=f"cordoned {NODE_CPU} cpu / {NODE_MEMORY} nodes (default 1000)")
    parser.add_argument("--cycles", type=int, default=5, help="cycles timed after the fill; cycle_s is their median (default 5)")
    parser.add_argument("--reference-s", type=float, help="bench/scheduler.py's queued_1m seconds, to check cycle_s against (x 1.5)")
    parser.add_argument("--keep", action="store_true", help="keep the logs directory instead of removing it")
    parser.set_defaults(executor_timeout=None)  # bench.pipeline.Session reads it: the worker's default
    # The pipeline's session, with one worker over one partition: the scheduler's index is measured.
    parser.set_defaults(workers=1, partitions=1)
    args = parser.parse_args(argv)
    if min(args.jobs, args.queues, args.batch, args.nodes, args.cycles) < 1 or args.period <= 0:
        parser.error("counts and the period must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    queues = queue_names(args.queues)
    directory = Path(tempfile.mkdtemp(prefix="flotilla-bench-queued-"))
    session: Session | None = None
    log(
        f"{args.jobs:,} jobs, {args.queues} queue(s), {args.batch} per request, period {args.period:g}s, "
        f"{args.nodes:,} cordoned nodes; {os.cpu_count()} cores, Python {platform.python_version()}, {PARTITIONS} partition"
    )
    # The broker, the worker and the executor are registered with children and stopped when the
    # block ends, however it ends (an error, Ctrl-C, SIGTERM: see bench/processes.py).
    try:
        with Children(log) as children:
            log(f"encoding {args.jobs:,} jobs ...")
            requests = encode_requests(args.jobs, args.batch, queues)
            session = Session("queued", directory / "session", args, queues, children)
            session.start()
            result = asyncio.run(run(session, args, requests))
    except KeyboardInterrupt:
        log("interrupted")
        return exit_status()
    except Exception as exc:  # noqa: BLE001 - report and clean up
        log(f"error: {exc!r}")
        if session is not None:
            for worker in session.workers:
                log(worker.log_tail())
            for executor in session.executors:
                log(executor.log_tail())
        return 1
    finally:
        if args.keep:
            log(f"logs kept in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    return report(args, len(requests), result)


if __name__ == "__main__":
    sys.exit(main())
