"""`events` folded into job states from the log alone, with the job-state agent's own fold.

`Refold` applies event sequences in the order the log holds them (each partition in offset order,
as the agent folds them; every event of a job is on one partition) with `streams.scheduler.fold`,
over the worker's `JobStore`, into a table that is a dict (small logs, one job) or a RocksDB
directory (`RocksTable`: `flotilla rebuild --into DIR`, and the `--at` reads over whole logs, whose
job states need not fit in memory). The tables hold what the worker's `jobs` and `job-specs` tables
hold: job id -> job_state Avro bytes, and job id -> job_submitted Avro bytes (the job's spec).

`job_at` and `queues_at` answer the time-travel reads: the log folded up to a time.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rocksdict import Options, Rdict, WriteBatch

from schemas.codec import decode
from streams.archive.segments import Record
from streams.domain.resources import job_resource_request
from streams.domain.states import ACTIVE
from streams.replay.source import EVENTS, QUEUES, LogSource, merged
from streams.scheduler.fold import Folded, apply_sequence, message_rng
from streams.tables.jobs import SPEC_TYPE, JobStore

# Sequences folded between two writes of the job states into the table.
FLUSH_EVERY = 2_000
WRITE_BATCH = 10_000


class JobTable(Protocol):
    def get(self, key: str) -> bytes | None: ...

    def __contains__(self, key: object) -> bool: ...

    def write(self, items: Iterable[tuple[str, bytes]]) -> None: ...

    def items(self) -> Iterator[tuple[str, bytes]]: ...


@dataclass
class MemoryTable:
    values: dict[str, bytes] = field(default_factory=dict)

    def get(self, key: str) -> bytes | None:
        return self.values.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self.values

    def write(self, items: Iterable[tuple[str, bytes]]) -> None:
        self.values.update(items)

    def items(self) -> Iterator[tuple[str, bytes]]:
        return iter(self.values.items())


class RocksTable:
    """A RocksDB database of text keys and byte values, written in batches."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = Rdict(str(path), options=Options(raw_mode=True))

    def get(self, key: str) -> bytes | None:
        value = self._db.get(key.encode())
        return None if value is None else bytes(value)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.encode() in self._db

    def write(self, items: Iterable[tuple[str, bytes | None]]) -> None:
        """Put each item (None: delete its key), in write batches of `WRITE_BATCH`."""
        batch, size = WriteBatch(raw_mode=True), 0
        for key, value in items:
            if value is None:
                batch.delete(key.encode())
            else:
                batch.put(key.encode(), value)
            size += 1
            if size == WRITE_BATCH:
                self._db.write(batch)
                batch, size = WriteBatch(raw_mode=True), 0
        if size:
            self._db.write(batch)

    def items(self) -> Iterator[tuple[str, bytes]]:
        for key, value in self._db.items():
            assert isinstance(key, bytes) and isinstance(value, bytes)
            yield key.decode(), value

    def close(self) -> None:
        self._db.close()


@dataclass
class Refold:
    table: JobTable = field(default_factory=MemoryTable)
    specs: JobTable = field(default_factory=MemoryTable)
    outcomes: Counter[str] = field(default_factory=Counter)
    sequences: int = 0
    events: int = 0
    jobs: JobStore = field(init=False)

    def __post_init__(self) -> None:
        self.jobs = JobStore(self.table, self.specs)  # type: ignore[arg-type]  # the store reads its tables with get and in

    def fold(self, record: Record, sequence: dict[str, Any]) -> Folded:
        """Fold one `events` record (its sequence decoded) into job states, as the job-state agent folds it."""
        rng = message_rng(record.topic, record.partition, record.offset)
        folded = apply_sequence(self.jobs, sequence, rng, record.partition, forward=False)
        self.outcomes.update(folded.outcomes)
        self.sequences += 1
        self.events += len(sequence["events"])
        if self.sequences % FLUSH_EVERY == 0:
            self.flush()
        return folded

    def flush(self) -> None:
        """Write the specs of the jobs created, then the jobs, as the agent does (`JobStore.write_specs`, `write_states`)."""
        self.specs.write((job_id, raw) for _, job_id, raw in self.jobs.new_specs())
        self.table.write((job_id, raw) for _, job_id, raw in self.jobs.encoded())
        self.jobs.mark_written()

    def job(self, job_id: str) -> dict[str, Any] | None:
        """The job as the tables hold it, its spec whole (the fold's own reads hold part of it: `JobStore.latest`)."""
        self.flush()
        return self.jobs.get(job_id)

    def states(self) -> Iterator[tuple[str, bytes]]:
        """Every job's state as the table holds it (encoded, without its spec), once the last sequence is written."""
        self.flush()
        return self.table.items()

    def folded_jobs(self, with_spec: Callable[[dict[str, Any]], bool] | None = None) -> Iterator[dict[str, Any]]:
        """Every job as the fold left it, once the last sequence is written: with its spec
        (``spec``) when ``with_spec`` is None or says so of the job. Reading a spec costs more than
        the rest of a job, and the drill and the ``--at`` reads need it for the few unfinished jobs only."""
        for job_id, raw in self.states():
            state = decode("job_state", raw)
            job = self.jobs.get(job_id) if with_spec is None or with_spec(state) else state
            assert job is not None
            yield job


def refold(
    source: LogSource,
    refolded: Refold,
    *,
    until_ms: int | None = None,
    keep: Callable[[Record], bool] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Refold:
    """Fold `events` up to ``until_ms`` (the records' time on the log) into ``refolded``; ``keep``
    picks the records worth decoding; ``progress`` is told the records read so far, now and then."""
    read = 0
    for record in merged(source, EVENTS, until_ms=until_ms):
        read += 1
        if progress is not None and read % 10_000 == 0:
            progress(read)
        if record.value is None or (keep is not None and not keep(record)):
            continue
        refolded.fold(record, decode("event_sequence", record.value, keep=SPEC_TYPE))
    refolded.flush()
    if progress is not None:
        progress(read)
    return refolded


def job_at(source: LogSource, job_id: str, until_ms: int | None) -> dict[str, Any] | None:
    """The job as the log said at ``until_ms`` (None: it was not submitted by then). Only the
    records naming the job are decoded: a job's events all carry its id."""
    needle = job_id.encode()
    refolded = refold(source, Refold(), until_ms=until_ms, keep=lambda record: needle in (record.value or b""))
    return refolded.job(job_id)


def fold_queues(source: LogSource, until_ms: int | None, progress: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """The queues at ``until_ms`` with their jobs' counts and usage (`queue_summaries`): the whole of
    `events` up to then folded into a scratch RocksDB table, so memory stays small however long the log."""
    with tempfile.TemporaryDirectory(prefix="flotilla-at-") as scratch:
        table, specs = RocksTable(Path(scratch) / "jobs"), RocksTable(Path(scratch) / "job-specs")
        try:
            refolded = refold(source, Refold(table, specs), until_ms=until_ms, progress=progress)
            return queue_summaries(queue_definitions(source, until_ms), refolded.folded_jobs(with_spec=lambda job: job["state"] in ACTIVE))
        finally:
            table.close()
            specs.close()


def queue_definitions(source: LogSource, until_ms: int | None) -> dict[str, dict[str, Any]]:
    """The queues as the `queues` topic defined them at ``until_ms`` (a deleted queue is gone)."""
    queues: dict[str, dict[str, Any] | None] = {}
    for record in merged(source, QUEUES, until_ms=until_ms):
        name = (record.key or b"").decode()
        queues[name] = None if record.value is None else decode("queue", record.value)
    return {name: queue for name, queue in sorted(queues.items()) if queue is not None}


def queue_summaries(queues: Mapping[str, dict[str, Any]], jobs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per queue its definition's main settings, its jobs by state, and what its running jobs hold
    (``usage``, in units: cpu cores, memory bytes...; only their jobs need ``spec``). Queues that hold jobs but are no longer
    defined are listed too, marked ``defined: false``."""
    counts: dict[str, Counter[str]] = {}
    usage: dict[str, Counter[str]] = {}
    for job in jobs:
        queue = job["queue"]
        counts.setdefault(queue, Counter())[job["state"]] += 1
        if job["state"] in ACTIVE:
            usage.setdefault(queue, Counter()).update(job_resource_request(job["spec"].get("pod_spec") or {}))
    summaries = []
    for name in sorted(set(queues) | set(counts)):
        queue = queues.get(name)
        by_state = counts.get(name, Counter())
        summaries.append(
            {
                "name": name,
                "defined": queue is not None,
                "priority_factor": queue["priority_factor"] if queue else None,
                "cordoned": queue["cordoned"] if queue else None,
                "queued": by_state["queued"],
                "running": sum(by_state[state] for state in ACTIVE),
                "states": dict(sorted(by_state.items())),
                "usage": {resource: milli / 1000 for resource, milli in sorted(usage.get(name, Counter()).items())},
            }
        )
    return summaries
