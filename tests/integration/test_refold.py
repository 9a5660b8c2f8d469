"""A restore's refold leaves exactly the tables a live fold of the same log left.

A worker with the log archive folds a log of events as they arrive (jobs submitted in records of
many, leased, pending, running and succeeded, some cancelled while queued, some left queued, and a
job set reprioritised); then the archive is restored into another, empty broker, as `flotilla up`
restores it, and a fresh worker with an empty data directory refolds it (in the refold's large
parts, each written while the next is folded). Every job state, spec, job-index row and scheduler
index entry of a job must be the same on both brokers. No executor runs and no cycle (a period of an
hour): the scheduler leases nothing, announces no priority and expires no lease, so the log is only
what the test produced.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from ops.broker import EmbeddedBroker
from schemas.codec import encode
from streams.client.commands.restoring import restore_log
from streams.config import Settings
from streams.domain import events
from tests.integration.log import latest_values
from tests.integration.workers import STARTED, Worker, new_worker, poll
from tests.kit.jobs import Events

pytestmark = pytest.mark.integration

QUEUE, USER = "team-a", "alice"
NO_CYCLES = {"FLOTILLA_SCHEDULE_PERIOD_S": "3600", "FLOTILLA_EARLY_TICKS": "false"}
JOB_SETS = ("set-1", "set-2")
ANNOUNCED = "set-1"  # its reprioritisation was announced to each job by a cycle; set-2's is still to announce
JOBS_PER_SET = 120
SUBMITS_PER_RECORD = 40


def sequence(job_set: str, *folded: tuple[str, dict[str, Any]]) -> tuple[bytes, bytes]:
    record = {
        "queue": QUEUE,
        "job_set_id": job_set,
        "user": USER,
        "groups": [],
        "events": [{**event, "payload": (f"flotilla.{kind}", event["payload"])} for kind, event in folded],
    }
    return events.sequence_key(QUEUE, job_set).encode(), encode("event_sequence", record)


def the_log() -> tuple[list[tuple[bytes, bytes]], dict[str, str]]:
    """The `events` records and the state each job ends in: per job set, its jobs submitted 40 to a record;
    of each three, one runs to success (a record per step of a lease's 40 jobs), one is cancelled while
    queued, one stays queued; then the job set is reprioritised (its queued jobs' priority changes)."""
    records, ends = [], {}
    for job_set in JOB_SETS:
        jobs = {f"{job_set}-job-{n:03d}": Events(f"{job_set}-job-{n:03d}") for n in range(JOBS_PER_SET)}
        ids = list(jobs)
        for start in range(0, len(ids), SUBMITS_PER_RECORD):
            records.append(sequence(job_set, *(jobs[i].submitted() for i in ids[start : start + SUBMITS_PER_RECORD])))
        runs, cancelled = ids[0::3], ids[1::3]
        records.append(sequence(job_set, *(jobs[i].leased(f"run-{i}") for i in runs)))
        for kind in ("JobRunPending", "JobRunRunning", "JobRunSucceeded", "JobSucceeded"):
            records.append(
                sequence(
                    job_set, *(jobs[i](kind, run_id=f"run-{i}", **({"node": "node-1"} if kind == "JobRunRunning" else {})) for i in runs)
                )
            )
        records.append(sequence(job_set, *(jobs[i]("JobCancelled", run_id=None, reason="not needed") for i in cancelled)))
        action = {"event_id": f"{job_set}-reprioritised", "created": 99_000, "job_id": None, "payload": {"new_priority": 7.0}}
        records.append(sequence(job_set, ("JobReprioritised", action)))
        if job_set == ANNOUNCED:  # a cycle announced it to each of the job set's queued jobs
            queued = [i for i in ids if i not in runs and i not in cancelled]
            records.append(sequence(job_set, *(jobs[i]("JobReprioritised", new_priority=7.0) for i in queued)))
        ends.update({i: "succeeded" if i in runs else "cancelled" if i in cancelled else "queued" for i in ids})
    return records, ends


def tables(worker: Worker) -> dict[str, dict[str, bytes | None]]:
    """What the worker's folds left, as the changelogs hold it (the last value per key): job states,
    specs, job-index rows and the scheduler index's job entries."""
    # A job's entry is deleted once it ends: a refold that folds its submission and its end together never writes it.
    entries = latest_values(worker.read(worker.changelog("scheduler-index")))
    index: dict[str, bytes | None] = {key: value for key, value in entries.items() if key.startswith("j:") and value is not None}
    return {
        "job-states": latest_values(worker.read(worker.topic("job-states"))),
        "job-specs": latest_values(worker.read(worker.topic("job-specs"))),
        "job-index": latest_values(worker.read(worker.changelog("job-index"))),
        "scheduler-index": index,
    }


def steady(worker: Worker) -> dict[str, dict[str, bytes | None]] | None:
    """The worker's tables if they are the same one second later (nothing left to fold), else None."""
    first = tables(worker)
    time.sleep(1.0)
    return first if tables(worker) == first else None


def test_a_restored_log_refolds_into_the_tables_its_live_fold_left(tmp_path: Path, broker: EmbeddedBroker) -> None:
    archive = tmp_path / "log"
    live = new_worker(broker, tmp_path / "live", "refold-live")
    live.extra_env.update(FLOTILLA_ARCHIVE_DIR=str(archive), **NO_CYCLES)
    records, ends = the_log()
    live.start()
    try:
        live.produce("events", records)
        poll(lambda: {k: v["state"] for k, v in live.job_states().items()} == ends or None, 60, "the live fold of every job")
        poll(
            lambda: len(tables(live)["scheduler-index"]) == sum(1 for end in ends.values() if end == "queued") or None,
            30,
            "the scheduler's index",
        )
        folded_live = poll(lambda: steady(live), 30, "the live fold's tables to stay the same")
    finally:
        live.stop()  # a clean stop archives whatever the broker holds

    with EmbeddedBroker(log_path=tmp_path / "empty-broker.log") as empty:
        restored = Worker(
            broker=empty,
            prefix=live.prefix,
            app_id=live.app_id,
            data_dir=tmp_path / "restored" / "data",
            log_path=tmp_path / "restored-worker.log",
            extra_env={"FLOTILLA_ARCHIVE_DIR": str(archive), "FLOTILLA_REFOLD_BEFORE_SCHEDULING": "true", **NO_CYCLES},
        )
        STARTED.append(restored)
        assert restore_log(Settings.from_env(restored.env())) >= len(records)
        restored.start()  # healthy once every restored record is folded
        try:
            queued = len(folded_live["scheduler-index"])
            poll(lambda: len(tables(restored)["scheduler-index"]) == queued or None, 30, "the restored scheduler's index")
            folded_again = tables(restored)
        finally:
            restored.stop()

    assert {k: v for k, v in folded_live["job-states"].items() if v} and set(folded_live["job-states"]) == set(ends)
    assert len(folded_live["job-index"]) >= len(ends)
    assert len(folded_live["scheduler-index"]) == len(ends) // 3
    for table, values in folded_live.items():
        assert folded_again[table] == values, f"{table} after the restore differs from the live fold's"
    # The refold forwards the reprioritisation again: only the job set whose jobs have no JobReprioritised
    # event yet is left to announce (the other's announcements were made, and would be made twice).
    announcing = {key[2:].rsplit("-job-", 1)[0] for key, value in folded_again["scheduler-index"].items() if json.loads(value or b"")[3]}
    assert announcing == set(JOB_SETS) - {ANNOUNCED}
