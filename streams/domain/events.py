"""The `events` topic's records: one builder for event sequences and the key they go under.

Every writer (ingest, the API's job control, the scheduler, executors) appends to `events`
keyed by ``queue/job set``, so all events of a job land on one partition in order and the
job-state fold sees them in that order. A sequence holds at most `MAX_EVENTS_PER_SEQUENCE`
events: a cycle can lease, or an executor end, tens of thousands of runs of one job set at once,
and a message should stay far below the broker's size limit (an event is about 100-300 bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MAX_EVENTS_PER_SEQUENCE = 1000

# An event's payload as fastavro's union form: (record name, fields), e.g. ("flotilla.JobLeased", {...}).
Payload = tuple[str, dict[str, Any]]


def payload(kind: str, fields: dict[str, Any]) -> Payload:
    """``kind`` without the namespace: ``payload("JobLeased", {...})``."""
    return f"flotilla.{kind}", fields


def sequence_key(queue: str, job_set_id: str) -> str:
    return f"{queue}/{job_set_id}"


def event(event_id: str, created: int, job_id: str | None, body: Payload) -> dict[str, Any]:
    """One `Event` record; ``job_id`` None addresses the whole job set (or, for a cycle record, no job)."""
    return {"event_id": event_id, "created": created, "job_id": job_id, "payload": body}


def sequences(queue: str, job_set_id: str, user: str, groups: Sequence[str], events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `event_sequence` records carrying ``events`` in order, `MAX_EVENTS_PER_SEQUENCE` at most each."""
    return [
        {
            "queue": queue,
            "job_set_id": job_set_id,
            "user": user,
            "groups": list(groups),
            "events": list(events[start : start + MAX_EVENTS_PER_SEQUENCE]),
        }
        for start in range(0, len(events), MAX_EVENTS_PER_SEQUENCE)
    ]
