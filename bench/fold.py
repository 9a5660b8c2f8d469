"""Hot-path benchmark in one process, no broker: the CPU the worker's own code spends per job and per event.

Two workloads, each through the agents' pure parts in the batches the agents take, with in-memory
tables (a dict where RocksDB would be) and no Faust or aiokafka work:

- ``ingest``: `--jobs` (20,000) jobs in submit requests of `--batch` (100) items, built as
  bench/ingest.py builds them: the ingest agent judges each request (`Ingest.ingest_request`:
  decode, validate, ids, events encoded); the job-state agent folds the events
  (`streams.agents.job_state.fold_batch` and what each part `sent`, batches of its `BATCH_MAX_MESSAGES`) and encodes the
  batch's job states and job-index rows, as its table writes would; the scheduling agent decodes the
  feed records and applies them to its index, encoding the keys they changed (no cycle runs).
- ``refold``: bench/restore.py's log of `--events` (100,000) events (waves of `--wave` jobs
  submitted, leased with their cycle record, pending, running and succeeded, every tenth wave left
  queued), folded the same way (in the agent's refold parts, `REFOLD_PART_MAX_EVENTS`): what a restore's refold
  costs the worker, less Faust's share.
- ``child``: the same log folded as the refold's child process folds it (`streams.agents.refold_child.ChildFold`, in
  batches of `REFOLD_BATCH_MAX_MESSAGES`), each part pickled as its pipe hands it over: the child's CPU per event,
  the critical path of a restore's refold (bench/README.md).

Figures are process CPU time per job (ingest) or per event (refold), per stage and in all; the
median of `--rounds` (3) runs, each on fresh tables, with the worker's garbage-collector settings
(`streams.gc_tuning`). `--profile FILE` writes a cProfile of one more
run of each workload. The last stdout line is one JSON object.

Usage: .venv/bin/python bench/fold.py [--jobs 20000] [--events 100000] [--rounds 3] [--child-only] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pickle
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.ingest import JOB_SET, submit_request  # noqa: E402
from bench.restore import QUEUE, synthetic_events  # noqa: E402
from schemas.codec import decode, encode  # noqa: E402
from streams.agents import job_state  # noqa: E402
from streams.agents.ingest import Ingest  # noqa: E402
from streams.agents.refold_child import ChildFold, Raw  # noqa: E402
from streams.domain.job_index import row_of  # noqa: E402
from streams.domain.queues import validate_queue  # noqa: E402
from streams.domain.validation import SubmitPolicy  # noqa: E402
from streams.gc_tuning import tune_for_long_lived_state  # noqa: E402
from streams.metrics import Metrics  # noqa: E402
from streams.scheduler import feed  # noqa: E402
from streams.scheduler.index import SchedulerIndex  # noqa: E402
from streams.tables.jobs import JobStore  # noqa: E402

EVENTS_TOPIC = "flotilla.events"
START_S = 1_800_000_000.0


@dataclass(frozen=True)
class Message:
    """What the agents read of a Faust message."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: float
    headers: tuple[tuple[str, bytes], ...] = ()  # the ingest agent reads a request's reply-to header


class Queues:
    def __init__(self, *names: str) -> None:
        self._queues = {}
        for name in names:
            queue, reason = validate_queue(decode("queue", encode("queue", {"name": name, "priority_factor": 1.0})))
            assert queue is not None, reason
            self._queues[name] = queue

    def get(self, name: str, default: dict[str, Any] | None = None) -> dict[str, Any] | None:
        return self._queues.get(name, default)


class Refusals:
    """The rejected topic and the callers' answers: the benchmark's jobs are all accepted."""

    async def send(self, **kwargs: Any) -> None:
        raise AssertionError(f"rejected: {kwargs.get('value')}")

    def resolve(self, request_id: str, items: list[dict[str, Any]], to: str | None = None) -> None:
        pass


@dataclass
class Stages:
    """CPU seconds per stage of one run."""

    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, stage: str, call: Callable[[], Any]) -> Any:
        started = time.process_time()
        try:
            return call()
        finally:
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.process_time() - started


def ingest_messages(jobs: int, batch: int) -> list[Message]:
    queue = "bench-0"
    return [
        Message(
            "flotilla.submissions",
            0,
            index,
            queue.encode(),
            encode("submit_request", submit_request(first, min(batch, jobs - first), index, queue)),
            START_S,
        )
        for index, first in enumerate(range(0, jobs, batch))
    ]


def ingest(messages: list[Message], stages: Stages) -> list[Message]:
    """The ingest agent's work on ``messages``; returns the `events` messages it would send."""
    refusals = Refusals()
    agent = Ingest(
        queues=Queues("bench-0"),  # type: ignore[arg-type]
        policy=SubmitPolicy(),
        client_ids={},  # type: ignore[arg-type]
        events_topic=EVENTS_TOPIC,
        rejected=refusals,  # type: ignore[arg-type]
        producer=None,  # type: ignore[arg-type]
        replies=refusals,  # type: ignore[arg-type]
        metrics=Metrics(),
    )
    out: list[Message] = []

    async def run() -> None:
        for start in range(0, len(messages), job_state.BATCH_MAX_MESSAGES):
            for message in messages[start : start + job_state.BATCH_MAX_MESSAGES]:
                await agent.handle(message)  # type: ignore[arg-type]
            for key, value in agent.take_batch().events:
                assert value is not None
                out.append(Message(EVENTS_TOPIC, 0, len(out), key, value, START_S))

    stages.timed("ingest", lambda: asyncio.run(run()))
    return out


@dataclass
class Tables:
    jobs: dict[str, bytes] = field(default_factory=dict)
    specs: dict[str, bytes] = field(default_factory=dict)
    job_index: dict[str, bytes] = field(default_factory=dict)
    feed: list[bytes] = field(default_factory=list)
    commands: int = 0


def fold(messages: list[Message], stages: Stages, part_max: int = job_state.PART_MAX_EVENTS) -> Tables:
    """The job-state agent's work on ``messages``, in its batches and parts of ``part_max`` job events, its table writes encoded."""
    tables = Tables()
    store = JobStore(tables.jobs, tables.specs)  # type: ignore[arg-type]  # the store reads its tables with get and in
    for start in range(0, len(messages), job_state.BATCH_MAX_MESSAGES):
        batch = messages[start : start + job_state.BATCH_MAX_MESSAGES]
        parts = job_state.fold_batch(store, batch, part_max)  # type: ignore[arg-type]  # a Message of the fields the fold reads
        while (sent := stages.timed("fold", partial(next_part, parts))) is not None:
            records, commands = sent
            tables.feed += records
            tables.commands += len(commands)
            stages.timed("job_index", lambda: tables.job_index.update((job_id, row_of(job).encode()) for _, job_id, job in store.pending()))
            stages.timed("job_specs", lambda: tables.specs.update((job_id, raw) for _, job_id, raw in store.new_specs()))
            stages.timed("job_states", lambda: tables.jobs.update((job_id, raw) for _, job_id, raw in store.encoded()))
            store.mark_written()
    return tables


def next_part(parts: Iterator[job_state.FoldedPart]) -> tuple[list[bytes], list[tuple[bytes, bytes]]] | None:
    """The next part of a batch folded (the agent folds a batch in parts) and what it sends; None once the batch is done."""
    part = next(parts, None)
    return None if part is None else job_state.sent(part)


def schedule(records: list[bytes], stages: Stages) -> SchedulerIndex:
    """The scheduling agent's fold of the feed into its index, with the changed keys encoded (no cycle)."""
    index = SchedulerIndex()

    def run() -> None:
        for raw in records:
            record = feed.decode(raw)
            assert isinstance(record, feed.Changes)
            for key in dict.fromkeys(index.apply(record)):
                index.dump(key)

    stages.timed("scheduler", run)
    return index


def refold_messages(events: int, wave: int) -> tuple[list[Message], int]:
    records: Iterator[tuple[bytes, bytes, int]] = synthetic_events(events, wave, {})
    messages, counted = [], 0
    for offset, (key, value, count) in enumerate(records):
        messages.append(Message(EVENTS_TOPIC, 0, offset, key, value, START_S + offset / 1000))
        counted += count
    return messages, counted


def run_ingest(submissions: list[Message], stages: Stages) -> Tables:
    tables = fold(ingest(submissions, stages), stages)
    schedule(tables.feed, stages)
    return tables


def run_refold(messages: list[Message], stages: Stages) -> Tables:
    tables = fold(messages, stages, job_state.REFOLD_PART_MAX_EVENTS)  # the agent's parts while it refolds a restored log
    schedule(tables.feed, stages)
    return tables


def run_child(messages: list[Message], stages: Stages) -> ChildFold:
    """The refold child's work on ``messages``: its batches folded into parts, each part pickled for its pipe."""
    child = ChildFold(job_state.REFOLD_PART_MAX_EVENTS)
    raws = [Raw(m.topic, m.partition, m.offset, m.value) for m in messages]
    for start in range(0, len(raws), job_state.REFOLD_BATCH_MAX_MESSAGES):
        parts = stages.timed("fold", partial(list, child.batch(raws[start : start + job_state.REFOLD_BATCH_MAX_MESSAGES])))
        stages.timed("pickle", partial(pickle.dumps, parts, pickle.HIGHEST_PROTOCOL))
    return child


def median_stages(runs: list[Stages], per: int) -> dict[str, float]:
    """µs per item of each stage (and ``total``), the median over the runs."""
    names = list(runs[0].seconds)
    figures = {name: statistics.median(run.seconds[name] for run in runs) / per * 1e6 for name in names}
    figures["total"] = statistics.median(sum(run.seconds.values()) for run in runs) / per * 1e6
    return {name: round(value, 1) for name, value in figures.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs of the ingest workload (default 20,000)")
    parser.add_argument("--batch", type=int, default=100, help="items per submit request (default 100)")
    parser.add_argument("--events", type=int, default=100_000, help="events of the refold workload (default 100,000)")
    parser.add_argument("--wave", type=int, default=100, help="jobs per wave of the refold workload (default 100)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child-only", action="store_true", help="run the child workload only (its profile too)")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile (pstats) of one more run of each workload")
    args = parser.parse_args(argv)

    submissions = ingest_messages(args.jobs, args.batch)
    events, counted = refold_messages(args.events, args.wave)
    tune_for_long_lived_state()  # as the worker does once started: its collections are part of its cost
    print(
        f"python {platform.python_version()}, one process; ingest: {args.jobs:,} jobs in requests of {args.batch} to queue bench-0, "
        f"job set {JOB_SET}; refold: {counted:,} events in {len(events):,} records (waves of {args.wave}, queue {QUEUE}); "
        f"median of {args.rounds} rounds, process CPU time"
    )
    ingest_runs, refold_runs, child_runs = [], [], []
    for _ in range(args.rounds):
        if not args.child_only:
            stages = Stages()
            tables = run_ingest(submissions, stages)
            assert len(tables.jobs) == args.jobs, f"{len(tables.jobs)} job states for {args.jobs} jobs"
            ingest_runs.append(stages)
            stages = Stages()
            tables = run_refold(events, stages)
            refold_runs.append(stages)
        stages = Stages()
        child = run_child(events, stages)
        assert args.child_only or len(child.jobs.table) == len(tables.jobs), f"the child holds {len(child.jobs.table)} jobs"
        child_runs.append(stages)
    figures = {"child_us_per_event": median_stages(child_runs, counted)}
    if not args.child_only:
        ingest_figures, refold_figures = median_stages(ingest_runs, args.jobs), median_stages(refold_runs, counted)
        figures = {"ingest_us_per_job": ingest_figures, "refold_us_per_event": refold_figures, **figures}
    for workload, stages_us in figures.items():
        print(f"{workload}: " + ", ".join(f"{name} {value:.1f}" for name, value in stages_us.items()))
    if args.profile:
        profile = cProfile.Profile()
        if not args.child_only:
            profile.runcall(run_ingest, submissions, Stages())
            profile.runcall(run_refold, events, Stages())
        profile.runcall(run_child, events, Stages())
        profile.dump_stats(args.profile)
        print(f"profile of one run of each workload: {args.profile} (python -m pstats)")
    print(json.dumps({"jobs": args.jobs, "events": counted, **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
