"""The job-state agent's fold over one event sequence, with the jobs store over a plain dict.

Stored values are real job_state Avro bytes, so what is folded, stored and read back is exactly
what the Faust table and the job-states topic hold.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from schemas.codec import decode
from streams.agents.job_state import apply_sequence
from streams.tables.jobs import JobStore
from tests.domain.builders import ENVELOPE, Events


@dataclass
class Plane:
    """The one part of the control plane the fold touches."""

    table: dict[str, bytes] = field(default_factory=dict)

    @property
    def jobs(self) -> JobStore:
        return JobStore(self.table)  # type: ignore[arg-type]


def sequence(*events: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {**ENVELOPE, "events": [{**event, "payload": (f"flotilla.{kind}", event["payload"])} for kind, event in events]}


def test_events_are_folded_and_counted_by_outcome() -> None:
    plane, ev = Plane(), Events("job-1")
    submitted, leased = ev.submitted(), ev.leased("run-1")
    stray = Events("never-submitted").leased("run-9")
    refused = ev("JobRunRunning", run_id="run-404", node="node-1")  # a run the job never had
    cycle = ("SchedulingCycle", {"event_id": "c1", "created": 5, "job_id": None,
                                 "payload": {"cycle_id": "c1", "cycle_time": 5, "seed": 1, "feed_offsets": {}, "decisions": []}})

    folded = apply_sequence(plane, sequence(submitted, leased, submitted, stray, refused, cycle), random.Random(1))

    assert folded.outcomes == {"applied": 2, "unchanged": 1, "unknown_job": 1, "refused": 1}
    stored = decode("job_state", plane.table["job-1"])
    assert stored["state"] == "leased" and [r["run_id"] for r in stored["runs"]] == ["run-1"]
    assert set(plane.table) == {"job-1"}


def test_replaying_a_sequence_changes_nothing() -> None:
    plane, ev = Plane(), Events("job-2")
    events = sequence(ev.submitted(), ev.leased("run-1"), ev("JobRunRunning", run_id="run-1", node="node-1"))
    apply_sequence(plane, events, random.Random(1))
    first = dict(plane.table)

    again = apply_sequence(plane, events, random.Random(1))
    assert again.outcomes == {"unchanged": 3}
    assert again.feed == [] and again.commands == []
    assert plane.table == first
