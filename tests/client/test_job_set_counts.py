"""The client-side fold behind `flotilla watch`: event kind -> job state, stale run reports, counts, done."""

from __future__ import annotations

from typing import Any

import pytest

from streams.client.commands.job_set_counts import JobSetCounts, state_after
from streams.domain.states import JOB_STATE_ORDER


@pytest.mark.parametrize(
    ("current", "kind", "after"),
    [
        (None, "JobSubmitted", "queued"),
        ("queued", "JobLeased", "leased"),
        ("leased", "JobRunPending", "pending"),
        ("leased", "JobRunRunning", "running"),
        ("pending", "JobRunRunning", "running"),
        ("running", "JobSucceeded", "succeeded"),
        ("running", "JobFailed", "failed"),
        ("queued", "JobCancelled", "cancelled"),
        ("running", "JobPreempted", "preempted"),
        ("running", "JobRequeued", "queued"),
        ("running", "flotilla.JobSucceeded", "succeeded"),  # the Avro name means the same
        # a job first seen mid-stream takes the state the event names
        (None, "JobRunRunning", "running"),
    ],
)
def test_an_event_moves_its_job_to_the_state_it_names(current: str | None, kind: str, after: str) -> None:
    assert state_after(current, kind) == after


@pytest.mark.parametrize(
    ("current", "kind"),
    [
        ("queued", "JobSubmitted"),  # a re-delivery
        ("running", "JobRunPending"),  # a late report: runs do not go back
        ("pending", "JobLeased"),
        ("running", "JobRunRunning"),  # the same state again
        ("succeeded", "JobRequeued"),  # finished jobs stay finished
        ("cancelled", "JobLeased"),
        ("failed", "JobSucceeded"),
        ("running", "JobCancelRequested"),  # requests change nothing until the scheduler acts
        ("running", "JobPreemptRequested"),
        ("queued", "JobReprioritised"),
        ("running", "JobRunSucceeded"),  # the job-level event follows
        ("running", "JobRunFailed"),
        ("queued", "JobValidated"),
        ("queued", "SomethingNew"),  # a kind this client does not know is shown, never fatal
    ],
)
def test_other_events_leave_the_job_where_it_is(current: str, kind: str) -> None:
    assert state_after(current, kind) is None


def event(kind: str, job_id: str | None = "job-1", **payload: Any) -> dict[str, Any]:
    return {"event_id": "e", "created": 0, "job_id": job_id, "queue": "q", "job_set": "s", "kind": kind, "payload": payload}


def test_counts_follow_a_job_set_through_its_lifecycle() -> None:
    counts = JobSetCounts()
    for record in [
        event("JobSubmitted", "a"),
        event("JobSubmitted", "b"),
        event("JobSubmitted", "c"),
        event("JobLeased", "a", run_id="ra"),
        event("JobRunRunning", "a", run_id="ra"),
        event("JobLeased", "b", run_id="rb"),
        event("JobRunPending", "b", run_id="rb"),
        event("JobCancelled", "c"),
    ]:
        counts.apply(record)
    assert counts.counts() == dict.fromkeys(JOB_STATE_ORDER, 0) | {"running": 1, "pending": 1, "cancelled": 1}
    assert list(counts.counts()) == list(JOB_STATE_ORDER)  # always every state, in lifecycle order
    assert not counts.done
    counts.apply(event("JobSucceeded", "a"))
    counts.apply(event("JobFailed", "b"))
    assert counts.done
    assert counts.counts() == dict.fromkeys(JOB_STATE_ORDER, 0) | {"succeeded": 1, "failed": 1, "cancelled": 1}


def test_a_report_about_a_replaced_run_does_not_move_the_job() -> None:
    counts = JobSetCounts()
    counts.apply(event("JobSubmitted"))
    counts.apply(event("JobLeased", run_id="run-1"))
    assert counts.apply(event("JobRequeued", run_id="run-1", reason="lease expired"))
    assert counts.apply(event("JobLeased", run_id="run-2"))
    # the first run's executor reports late: the job is on run-2 now
    assert not counts.apply(event("JobRunRunning", run_id="run-1"))
    assert not counts.apply(event("JobRequeued", run_id="run-1", reason="lease returned"))
    assert counts.states == {"job-1": "leased"}
    assert counts.apply(event("JobRunRunning", run_id="run-2"))
    assert counts.states == {"job-1": "running"}


def test_job_set_requests_and_cycle_records_count_no_job() -> None:
    counts = JobSetCounts()
    counts.apply(event("JobSubmitted"))
    assert not counts.apply(event("JobCancelRequested", job_id=None, reason="r"))
    assert not counts.apply(event("SchedulingCycle", job_id=None))
    assert counts.states == {"job-1": "queued"}


def test_an_empty_job_set_is_not_done() -> None:
    assert not JobSetCounts().done
