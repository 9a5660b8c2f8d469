"""A job set's events on the wire: stream options, the SSE message of each event, resuming after an id."""

from __future__ import annotations

import json

import pytest

from schemas.codec import decode, encode
from streams.api.errors import ApiError
from streams.api.rest.sse import HEARTBEAT, StreamOptions, event_records, sse_message, stream_options
from streams.api.resume import ResumeAfter
from streams.client.rest import ServerEvent, parse_sse
from tests.schemas.samples import JOB_ID, JOB_SET, QUEUE, RUN_ID, T0, event_sequence

EVENT_ID = "01HZ3N00000000000000000004"


def decoded_sequence() -> dict:
    """As the reader sees it: through the Avro codec, payloads as (name, record) tuples."""
    return decode("event_sequence", encode("event_sequence", event_sequence()))


def test_options_default_to_the_whole_job_set_watched_live() -> None:
    assert stream_options({}) == StreamOptions(after=None, watch=True)
    assert stream_options({"from": EVENT_ID, "watch": "false"}) == StreamOptions(after=EVENT_ID, watch=False)
    assert stream_options({"watch": "TRUE"}).watch is True


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ({"watch": "yes"}, "watch must be true or false, not 'yes'"),
        ({"from": "not-an-id"}, "from must be an event id (a ULID), not 'not-an-id'"),
        ({"from": ""}, "from must be an event id (a ULID), not ''"),
        ({"follow": "false"}, "unknown query parameter(s) 'follow'; expected 'from' and 'watch'"),
    ],
)
def test_bad_options_are_refused_with_the_reason(query: dict[str, str], reason: str) -> None:
    with pytest.raises(ApiError) as raised:
        stream_options(query)
    assert (raised.value.status, raised.value.reason) == (400, reason)


def test_every_event_of_a_sequence_becomes_one_record_in_order() -> None:
    records = event_records(decoded_sequence())
    written = event_sequence()["events"]
    assert [r["event_id"] for r in records] == [e["event_id"] for e in written]
    assert [r["kind"] for r in records] == [e["payload"][0].removeprefix("flotilla.") for e in written]
    running = records[4]
    assert running == {
        "event_id": EVENT_ID,
        "created": T0 + 4,
        "job_id": JOB_ID,
        "queue": QUEUE,
        "job_set": JOB_SET,
        "kind": "JobRunRunning",
        "payload": {"run_id": RUN_ID, "node": "gpu-node-17"},
    }
    assert records[-1]["job_id"] is None and records[-1]["kind"] == "SchedulingCycle"


def test_a_message_is_id_kind_and_one_line_of_json() -> None:
    record = {**event_records(decoded_sequence())[6]}
    record["payload"] = {**record["payload"], "message": "line one\nline two"}
    message = sse_message(record)
    lines = message.decode().split("\n")
    assert lines[0] == f"id: {record['event_id']}"
    assert lines[1] == "event: JobRunFailed"
    assert lines[2].startswith("data: ") and json.loads(lines[2][len("data: ") :]) == record
    assert lines[3:] == ["", ""], "a message ends with one blank line and has no other line break"


def test_the_client_parses_what_the_server_writes_and_skips_heartbeats() -> None:
    records = event_records(decoded_sequence())
    wire = b"".join([sse_message(records[0]), HEARTBEAT, sse_message(records[1])]).decode()
    parsed = list(parse_sse(wire.splitlines(keepends=True)))
    assert parsed == [
        ServerEvent(id=records[0]["event_id"], event="JobSubmitted", data=json.dumps(records[0], separators=(",", ":"))),
        ServerEvent(id=records[1]["event_id"], event="JobValidated", data=json.dumps(records[1], separators=(",", ":"))),
    ]
    assert [json.loads(event.data) for event in parsed] == records[:2]


def test_resuming_lets_through_only_what_follows_the_event() -> None:
    records = [{"event_id": name} for name in ("a", "b", "c", "d", "e")]
    resume: ResumeAfter[dict[str, str]] = ResumeAfter("c")
    assert resume.waiting
    assert resume.admit(records[:2]) == [], "nothing before the event is sent"
    assert resume.admit(records[2:4]) == [{"event_id": "d"}]
    assert not resume.waiting
    assert resume.admit(records[:1]) == [{"event_id": "a"}], "once found, everything goes through, whatever its id"
    assert ResumeAfter(None).admit(records) == records
