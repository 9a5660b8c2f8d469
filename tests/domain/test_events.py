"""The one builder of `events` records: valid Avro, keyed by job set, split at the per-sequence limit."""

from __future__ import annotations

import pytest

from schemas.codec import decode, encode
from streams.api.control_requests import JOB_ACTIONS
from streams.domain import events
from streams.domain.events import MAX_EVENTS_PER_SEQUENCE

EVENT_ID = "01HZ3N0000000000000000000A"
CREATED = 1_700_000_000_000


@pytest.mark.parametrize("job_id", ["01HZ3N0000000000000000JOB1", None])
def test_a_control_request_is_one_valid_event_for_the_job_or_the_whole_job_set(job_id: str | None) -> None:
    event = events.event(EVENT_ID, CREATED, job_id, JOB_ACTIONS["cancel"]({"reason": "r"}))
    (sequence,) = events.sequences("q", "set", "anonymous", (), [event])
    assert decode("event_sequence", encode("event_sequence", sequence)) == {
        "queue": "q",
        "job_set_id": "set",
        "user": "anonymous",
        "groups": [],
        "events": [
            {"event_id": EVENT_ID, "created": CREATED, "job_id": job_id, "payload": ("flotilla.JobCancelRequested", {"reason": "r"})},
        ],
    }


def test_payload_kinds_are_named_in_the_flotilla_namespace() -> None:
    assert events.payload("JobLeased", {"run_id": "r"}) == ("flotilla.JobLeased", {"run_id": "r"})


def test_every_writer_keys_a_sequence_by_queue_and_job_set() -> None:
    assert events.sequence_key("research", "nightly") == "research/nightly"


def test_long_runs_of_events_are_split_in_order_at_the_limit() -> None:
    many = [
        events.event(f"e{i}", CREATED, f"j{i}", events.payload("JobSucceeded", {"run_id": f"r{i}"}))
        for i in range(2 * MAX_EVENTS_PER_SEQUENCE + 1)
    ]
    sequences = events.sequences("q", "set", "executor:x", ["g"], many)
    assert [len(s["events"]) for s in sequences] == [MAX_EVENTS_PER_SEQUENCE, MAX_EVENTS_PER_SEQUENCE, 1]
    assert [e for s in sequences for e in s["events"]] == many
    assert all((s["queue"], s["job_set_id"], s["user"], s["groups"]) == ("q", "set", "executor:x", ["g"]) for s in sequences)


def test_no_events_make_no_sequence() -> None:
    assert events.sequences("q", "set", "u", (), []) == []
