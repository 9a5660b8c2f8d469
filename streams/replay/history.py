"""The scheduler's history as the `events` topic holds it: cycle records, and one job's events.

Every question `flotilla explain` and the scheduler reports answer is read from here, whether the
event sequences come from a broker or a log archive: the caller hands them over in log order and
this module keeps only what the question needs (the cycle records, and the events of the job
asked about), so a long log is read in one pass without holding it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from streams.domain.jobs import event_kind
from streams.scheduler.cycle import CYCLES_JOB_SET, CYCLES_QUEUE


@dataclass
class CycleRecord:
    """One cycle as recorded, its records (split when it decided many jobs) joined."""

    cycle_id: str
    time: int
    # The offset of the tick that closed the cycle on the scheduler feed: where a replay repeats it.
    tick_offset: int
    config_hash: str
    decisions: list[dict[str, Any]] = field(default_factory=list)
    pools: list[dict[str, Any]] = field(default_factory=list)
    # Jobs left queued that the records do not name (the per-cycle cap).
    omitted: int = 0
    _by_job: dict[str, dict[str, Any]] | None = field(default=None, repr=False)

    def decision(self, job_id: str) -> dict[str, Any] | None:
        if self._by_job is None:
            self._by_job = {d["job_id"]: d for d in self.decisions}
        return self._by_job.get(job_id)

    def queue_share(self, queue: str, pool: str | None = None) -> tuple[str, dict[str, Any]] | None:
        """(pool, the queue's row) in ``pool``, or in the first pool where the queue was active."""
        for summary in self.pools:
            if pool is not None and summary["pool"] != pool:
                continue
            for row in summary["queues"]:
                if row["queue"] == queue:
                    return summary["pool"], row
        return None

    def on_node(self, executor: str | None, node: str | None, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.decisions if d["kind"] == kind and d["executor"] == executor and d["node"] == node]


@dataclass(frozen=True)
class JobEvent:
    time: int
    kind: str
    payload: dict[str, Any]
    queue: str
    job_set_id: str
    user: str
    # Addressed to the whole job set (a job-set cancel or reprioritisation), not to the job alone.
    job_set_wide: bool = False


def cycle_records(sequence: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The SchedulingCycle payloads of one event sequence (none unless it is the scheduler's)."""
    if sequence["queue"] != CYCLES_QUEUE or sequence["job_set_id"] != CYCLES_JOB_SET:
        return
    for event in sequence["events"]:
        kind, payload = event["payload"]
        if event_kind(kind) == "SchedulingCycle":
            yield payload


@dataclass
class History:
    """Cycle records in log order, and the events of the jobs asked about."""

    cycles: list[CycleRecord] = field(default_factory=list)
    events: dict[str, list[JobEvent]] = field(default_factory=dict)
    sequences: int = 0

    def cycle(self, cycle_id: str) -> CycleRecord | None:
        return next((c for c in self.cycles if c.cycle_id == cycle_id), None)

    def at(self, time_ms: int) -> CycleRecord | None:
        """The last cycle recorded at or before ``time_ms``."""
        found = None
        for cycle in self.cycles:
            if cycle.time > time_ms:
                break
            found = cycle
        return found

    def last(self) -> CycleRecord | None:
        return self.cycles[-1] if self.cycles else None


def read_history(sequences: Iterable[dict[str, Any]], jobs: Iterable[str] = ()) -> History:
    """Fold decoded event sequences (in log order) into the cycles and the events of ``jobs``.

    A job's job-set-wide events (cancel or reprioritise the whole set) are kept once its
    submission told which job set it is in."""
    history = History()
    wanted = set(jobs)
    for job_id in wanted:
        history.events[job_id] = []
    job_sets: dict[tuple[str, str], list[str]] = {}
    open_cycle: CycleRecord | None = None
    for sequence in sequences:
        history.sequences += 1
        for payload in cycle_records(sequence):
            if open_cycle is not None and open_cycle.cycle_id == payload["cycle_id"]:
                open_cycle.decisions += payload["decisions"]
                open_cycle.pools += payload.get("pools") or []
                open_cycle.omitted += payload.get("unschedulable_omitted") or 0
                continue
            open_cycle = CycleRecord(
                cycle_id=payload["cycle_id"],
                time=payload["cycle_time"],
                tick_offset=payload["seed"],
                config_hash=payload.get("config_hash") or "",
                decisions=list(payload["decisions"]),
                pools=list(payload.get("pools") or []),
                omitted=payload.get("unschedulable_omitted") or 0,
            )
            history.cycles.append(open_cycle)
        if not wanted:
            continue
        key = (sequence["queue"], sequence["job_set_id"])
        for event in sequence["events"]:
            job_id = event["job_id"]
            kind, payload = event["payload"]
            targets = [job_id] if job_id in wanted else job_sets.get(key, []) if job_id is None else []
            for target in targets:
                history.events[target].append(
                    JobEvent(event["created"], event_kind(kind), payload, key[0], key[1], sequence["user"], job_id is None)
                )
            if job_id in wanted and event_kind(kind) == "JobSubmitted":
                job_sets.setdefault(key, []).append(job_id)
    return history
