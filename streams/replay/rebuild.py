"""`flotilla rebuild --into DIR`: the recovery drill. Refold `events` from offset 0 into fresh tables
and compare them with the live ones.

Every table is derived from `events` (DESIGN.md, principle 1). The drill proves it for the two that
matter most: the `jobs` table (whose changelog is the public `job-states` topic) and the scheduler's
index of unfinished jobs. It folds the whole log with the job-state agent's own fold into
``DIR/jobs`` and ``DIR/job-specs`` (RocksDB: job id -> job_state Avro and job id -> its spec,
job_submitted Avro, as the worker's tables hold them) and builds the
index those jobs imply into ``DIR/scheduler-index`` (the index table's keys and values for its
jobs), then compares them with the live `job-states` and the live index table (its changelog), when
there are live tables to compare with: counts, and every job whose state differs, field by field.

The live index also holds decisions not yet confirmed by the fold (a lease just made) and the
executors' state, which `events` does not: compare a quiet system, and only its jobs.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.codec import SchemaError, decode
from streams.domain.states import JOB_TERMINAL
from streams.replay.diff import differences
from streams.replay.jobs import Refold, RocksTable, refold
from streams.replay.source import LogSource
from streams.scheduler import feed
from streams.scheduler.index import JOB_KEY_PREFIX, SchedulerIndex

JOBS, SPECS, INDEX, LIVE = "jobs", "job-specs", "scheduler-index", "live-job-states"
SHOWN_DIFFERENCES = 8  # fields shown per differing job
SIDES = ("live", "rebuilt")


@dataclass
class JobDifference:
    job_id: str
    rebuilt: str | None  # its state as rebuilt; None when only the live table has the job
    live: str | None
    differences: list[str] = field(default_factory=list)


@dataclass
class RebuildReport:
    into: str
    records: int = 0  # records of `events` read
    events: int = 0  # events folded
    outcomes: dict[str, int] = field(default_factory=dict)  # applied, unchanged, refused...
    jobs: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    index_jobs: int = 0  # unfinished jobs: the scheduler index's
    live: str | None = None  # where the live tables were read, None when there were none to compare
    live_jobs: int = 0
    live_index_jobs: int = 0
    same: int = 0
    jobs_differing: list[JobDifference] = field(default_factory=list)
    index_differing: list[JobDifference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.jobs_differing and not self.index_differing

    def to_json(self) -> dict[str, Any]:
        body = dict(vars(self))
        body["jobs_differing"] = [vars(d) for d in self.jobs_differing]
        body["index_differing"] = [vars(d) for d in self.index_differing]
        return {**body, "ok": self.ok}


@dataclass(frozen=True)
class LiveTables:
    """The live tables to compare with: where they were read, and the records of `job-states` and of the
    index table's changelog in log order, (key, value), None for a tombstone; the last of a key wins."""

    where: str
    job_states: Iterable[tuple[bytes, bytes | None]]
    index: Iterable[tuple[bytes, bytes | None]]


def rebuild(source: LogSource, into: Path, live: LiveTables | None = None, progress: Callable[[int], None] | None = None) -> RebuildReport:
    """Refold the log into fresh tables under ``into`` (which must hold none yet) and compare with ``live``."""
    report = RebuildReport(str(into))
    jobs = RocksTable(into / JOBS)
    specs = RocksTable(into / SPECS)
    index_table = RocksTable(into / INDEX)
    live_table = RocksTable(into / LIVE) if live is not None else None
    try:
        refolded = refold(source, Refold(jobs, specs), progress=progress)
        report.events, report.outcomes = refolded.events, dict(refolded.outcomes)
        index = SchedulerIndex()
        states: Counter[str] = Counter()
        # A finished job is not indexed (its delta would only take it out): its spec is not read.
        for job in refolded.folded_jobs(with_spec=lambda job: job["state"] not in JOB_TERMINAL):
            states[job["state"]] += 1
            if job["state"] not in JOB_TERMINAL:
                index.apply(feed.job_delta(job))
        report.jobs, report.by_state = sum(states.values()), dict(sorted(states.items()))
        report.index_jobs = len(index.jobs)
        job_keys = (key for key in sorted(index.keys()) if key.startswith(JOB_KEY_PREFIX))
        index_table.write((key, value) for key in job_keys if (value := index.dump(key)) is not None)
        if live is not None and live_table is not None:
            report.live = live.where
            live_table.write((key.decode(), value) for key, value in live.job_states)
            compare_jobs(report, jobs, live_table)
            compare_index(report, index, live.index)
    finally:
        for table in (jobs, specs, index_table, live_table):
            if table is not None:
                table.close()
    return report


def compare_jobs(report: RebuildReport, rebuilt: RocksTable, live: RocksTable) -> None:
    for job_id, raw in rebuilt.items():
        theirs = live.get(job_id)
        if theirs == raw:
            report.same += 1
            report.live_jobs += 1
            continue
        ours = decode("job_state", raw)
        if theirs is None:
            report.jobs_differing.append(JobDifference(job_id, ours["state"], None, ["not in the live table"]))
            continue
        report.live_jobs += 1
        try:
            live_job = decode("job_state", theirs)
        except SchemaError as exc:
            report.jobs_differing.append(JobDifference(job_id, ours["state"], "?", [f"the live state does not decode: {exc}"]))
            continue
        found = differences(live_job, ours, SHOWN_DIFFERENCES, SIDES)
        if found:
            report.jobs_differing.append(JobDifference(job_id, ours["state"], live_job["state"], found))
        else:
            report.same += 1  # other bytes (another framing or schema release), the same state
    for job_id, raw in live.items():
        if rebuilt.get(job_id) is None:
            report.live_jobs += 1
            try:
                state = decode("job_state", raw)["state"]
            except SchemaError:
                state = "?"
            report.jobs_differing.append(JobDifference(job_id, None, state, ["not rebuilt from events: the log has no submission of it"]))


def compare_index(report: RebuildReport, rebuilt: SchedulerIndex, live: Iterable[tuple[bytes, bytes | None]]) -> None:
    """The unfinished jobs of the live index table and of the rebuilt one, each job's scheduling view compared."""
    table = SchedulerIndex()
    latest = {key: value for key, value in live}
    table.load((key.decode(), value) for key, value in latest.items() if value is not None)  # read as the scheduler reads its table
    live_jobs = {job_id: entry.delta for job_id, entry in table.jobs.items()}
    report.live_index_jobs = len(live_jobs)
    for job_id in sorted(set(rebuilt.jobs) | set(live_jobs)):
        entry, theirs = rebuilt.jobs.get(job_id), live_jobs.get(job_id)
        if entry is None:
            assert theirs is not None
            report.index_differing.append(
                JobDifference(job_id, None, theirs.state, ["unfinished in the live index, finished (or unknown) in the log"])
            )
        elif theirs is None:
            report.index_differing.append(JobDifference(job_id, entry.delta.state, None, ["unfinished in the log, not in the live index"]))
        else:
            found = differences(_view(theirs), _view(entry.delta), SHOWN_DIFFERENCES, SIDES)
            if found:
                report.index_differing.append(JobDifference(job_id, entry.delta.state, theirs.state, found))


def _view(delta: feed.JobDelta) -> dict[str, Any]:
    """What the scheduler decides on: its state part, pending and running alike (they hold the same resources)."""
    fields = {field.name: getattr(delta, field.name) for field in dataclasses.fields(delta)}
    if delta.run_active:
        fields["run_state"] = "active"
        fields["state"] = "active"
    return fields
