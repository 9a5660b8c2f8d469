"""Cancel, preempt and reprioritise requests land on `events` as one event each; refused requests
write nothing; a job set's events stream over HTTP (replay, resume, live), and closing the stream
closes its consumer.

Against the real embedded broker and a real control-plane worker. What the scheduler then does
with the requests (cancelling jobs) is not asserted here: only what the endpoints write and stream.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from schemas.codec import decode, encode
from streams.client.rest import ServerEvent, parse_sse
from tests.integration.helpers import broker_connections, call, create_queue, get_job, item, submit
from tests.integration.workers import Worker, poll

pytestmark = pytest.mark.integration

QUEUE = "control"
CONTROL_KINDS = {"flotilla.JobCancelRequested", "flotilla.JobPreemptRequested", "flotilla.JobReprioritised"}


@pytest.fixture(scope="module", autouse=True)
def queue(worker: Worker) -> None:
    create_queue(worker.client, QUEUE)


def submit_jobs(worker: Worker, job_set: str, count: int) -> list[str]:
    status, body = submit(worker.client, QUEUE, job_set, [item() for _ in range(count)])
    assert status == 200, body
    return body["job_ids"]


def logged_events(worker: Worker) -> list[tuple[str, dict[str, Any]]]:
    """Every event on the events topic in log order, with its message key."""
    found = []
    for record in worker.read(worker.topic("events")):
        for event in decode("event_sequence", record.value)["events"]:
            found.append(((record.key or b"").decode(), event))
    return found


def logged(worker: Worker, event_id: str) -> tuple[str, dict[str, Any]]:
    def find() -> tuple[str, dict[str, Any]] | None:
        return next(((key, event) for key, event in logged_events(worker) if event["event_id"] == event_id), None)

    return poll(find, 30, f"event {event_id} on the events topic")


@pytest.mark.parametrize(
    ("action", "body", "payload"),
    [
        ("cancel", {"reason": "wrong input"}, ("flotilla.JobCancelRequested", {"reason": "wrong input"})),
        ("cancel", None, ("flotilla.JobCancelRequested", {"reason": ""})),
        ("preempt", {"reason": "node drain"}, ("flotilla.JobPreemptRequested", {"reason": "node drain"})),
        ("reprioritize", {"priority": 7}, ("flotilla.JobReprioritised", {"new_priority": 7.0})),
    ],
)
def test_a_job_request_writes_one_event_for_that_job(
    worker: Worker, action: str, body: dict[str, Any] | None, payload: tuple[str, dict[str, Any]]
) -> None:
    job_set = f"one-{action}-{bool(body)}"
    target, other = submit_jobs(worker, job_set, 2)

    status, answer = call(worker.client, "POST", f"/api/v1/jobs/{target}/{action}", body)

    assert status == 202, answer
    (event_id,) = answer["event_ids"]
    key, event = logged(worker, event_id)
    assert key == f"{QUEUE}/{job_set}"
    assert event["job_id"] == target
    assert event["payload"] == payload
    control = [e for k, e in logged_events(worker) if k == key and e["payload"][0] in CONTROL_KINDS]
    assert [e["event_id"] for e in control] == [event_id], "one event, and none for the job's neighbour"


@pytest.mark.parametrize(
    ("action", "body", "payload"),
    [
        ("cancel", {"reason": "abandoned"}, ("flotilla.JobCancelRequested", {"reason": "abandoned"})),
        ("reprioritize", {"priority": 0.5}, ("flotilla.JobReprioritised", {"new_priority": 0.5})),
    ],
)
def test_a_job_set_request_writes_one_event_without_a_job_id(
    worker: Worker, action: str, body: dict[str, Any], payload: tuple[str, dict[str, Any]]
) -> None:
    job_set = f"whole-{action}"
    submit_jobs(worker, job_set, 3)

    status, answer = call(worker.client, "POST", f"/api/v1/queues/{QUEUE}/jobsets/{job_set}/{action}", body)

    assert status == 202, answer
    (event_id,) = answer["event_ids"]
    key, event = logged(worker, event_id)
    assert key == f"{QUEUE}/{job_set}"
    assert event["job_id"] is None
    assert event["payload"] == payload


def finished_job(worker: Worker, job_set: str) -> str:
    """A job that failed: its JobFailed is produced straight to the log, as the scheduler would."""
    (job_id,) = submit_jobs(worker, job_set, 1)
    failed = {
        "queue": QUEUE,
        "job_set_id": job_set,
        "user": "integration",
        "groups": [],
        "events": [
            {
                "event_id": "01HZ3N0000000000000000FA11",
                "created": 1,
                "job_id": job_id,
                "payload": ("flotilla.JobFailed", {"reason": "test", "message": "failed on purpose", "exit_code": 1}),
            }
        ],
    }
    worker.produce("events", [(f"{QUEUE}/{job_set}".encode(), encode("event_sequence", failed))])
    poll(lambda: (get_job(worker.client, job_id) or {}).get("state") == "failed", 30, f"job {job_id} to fail")
    return job_id


def test_refused_requests_answer_why_and_write_nothing(worker: Worker) -> None:
    (queued,) = submit_jobs(worker, "refused", 1)
    failed = finished_job(worker, "refused-finished")
    unknown = "01HZ3N00000000000000000000"
    refusals = [
        ("POST", f"/api/v1/jobs/{unknown}/cancel", {}, 404, f"job '{unknown}' not found"),
        ("POST", f"/api/v1/jobs/{failed}/cancel", {}, 409, f"job {failed} already finished (failed); there is nothing to cancel"),
        ("POST", f"/api/v1/jobs/{failed}/reprioritize", {"priority": 1}, 409, f"job {failed} already finished (failed)"),
        ("POST", f"/api/v1/jobs/{queued}/reprioritize", {"priority": -2}, 400, "priority must be >= 0, not -2"),
        ("POST", f"/api/v1/jobs/{queued}/reprioritize", None, 400, "priority is required"),
        ("POST", f"/api/v1/jobs/{queued}/cancel", {"reason": 5}, 400, "reason must be a string, not int"),
        ("POST", f"/api/v1/jobs/{queued}/cancel", {"why": "x"}, 400, "unknown field(s) 'why'"),
        ("POST", f"/api/v1/jobs/{queued}/cancel", [1], 400, "request body must be a JSON object"),
        ("POST", "/api/v1/queues/nowhere/jobsets/refused/cancel", {}, 404, "queue 'nowhere' does not exist"),
        (
            "POST",
            f"/api/v1/queues/{QUEUE}/jobsets/refused/reprioritize",
            {"priority": "high"},
            400,
            "priority must be a finite number, not 'high'",
        ),
    ]
    for method, path, body, expected_status, reason in refusals:
        status, answer = call(worker.client, method, path, body)
        assert (status, answer["error"][: len(reason)]) == (expected_status, reason), (path, body)

    # A request that gets through afterwards is on the log after anything the refused ones could have written.
    status, answer = call(worker.client, "POST", f"/api/v1/jobs/{queued}/cancel", {"reason": "marker"})
    assert status == 202, answer
    logged(worker, answer["event_ids"][0])
    targets = {f"{QUEUE}/refused", f"{QUEUE}/refused-finished", "nowhere/refused"}
    control = [e for k, e in logged_events(worker) if k in targets and e["payload"][0] in CONTROL_KINDS]
    assert [e["event_id"] for e in control] == answer["event_ids"]
    assert not [e for _, e in logged_events(worker) if e["job_id"] == unknown]


# --------------------------------------------------------------------------- the event stream


class EventStream:
    """A GET of a job set's events over one HTTP connection, read as server-sent events."""

    def __init__(self, worker: Worker, job_set: str, query: str = "") -> None:
        url = urlsplit(worker.url)
        assert url.hostname is not None, worker.url
        self.connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        self.connection.request("GET", f"/api/v1/queues/{QUEUE}/jobsets/{job_set}/events{query}")
        self.response = self.connection.getresponse()
        self.events: Iterator[ServerEvent] = parse_sse(line.decode() for line in self.response)

    def next(self) -> dict[str, Any]:
        event = next(self.events)
        record = json.loads(event.data)
        assert (event.id, event.event) == (record["event_id"], record["kind"])
        return record

    def rest(self) -> list[dict[str, Any]]:
        return [json.loads(event.data) for event in self.events]

    def close(self) -> None:
        self.response.close()
        self.connection.close()


def job_set_ids(worker: Worker, job_set: str) -> list[str]:
    """The ids of the job set's events on the log, in log order."""
    return [e["event_id"] for k, e in logged_events(worker) if k == f"{QUEUE}/{job_set}"]


@pytest.fixture(scope="module")
def streamed(worker: Worker) -> list[str]:
    """A job set of five jobs submitted in two requests; their job ids in submission order."""
    return submit_jobs(worker, "streamed", 3) + submit_jobs(worker, "streamed", 2)


def test_the_stream_replays_the_job_set_in_order_and_ends_without_watch(worker: Worker, streamed: list[str]) -> None:
    before = job_set_ids(worker, "streamed")
    stream = EventStream(worker, "streamed", "?watch=false")
    assert stream.response.status == 200
    assert stream.response.getheader("Content-Type") == "text/event-stream"
    records = stream.rest()
    stream.close()

    submitted = [r for r in records if r["kind"] == "JobSubmitted"]
    assert [r["job_id"] for r in submitted] == streamed
    assert all(r["queue"] == QUEUE and r["job_set"] == "streamed" for r in records)
    assert submitted[0]["payload"]["priority"] == 1.0 and submitted[0]["payload"]["pod_spec"]["containers"]
    ids = [r["event_id"] for r in records]
    assert ids[: len(before)] == before, "every event on the log at the call, in log order"
    assert ids == job_set_ids(worker, "streamed")[: len(ids)], "and nothing that is not on the log"


def test_the_stream_resumes_after_an_event_id(worker: Worker, streamed: list[str]) -> None:
    ids = job_set_ids(worker, "streamed")
    stream = EventStream(worker, "streamed", f"?watch=false&from={ids[1]}")
    resumed = [r["event_id"] for r in stream.rest()]
    stream.close()
    assert resumed[: len(ids) - 2] == ids[2:]
    assert ids[0] not in resumed and ids[1] not in resumed


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        (
            f"/api/v1/queues/{QUEUE}/jobsets/streamed/events?from=01HZ3N00000000000000000000",
            404,
            f"event 01HZ3N00000000000000000000 is not an event of job set {QUEUE}/streamed",
        ),
        (f"/api/v1/queues/{QUEUE}/jobsets/streamed/events?from=latest", 400, "from must be an event id (a ULID)"),
        (f"/api/v1/queues/{QUEUE}/jobsets/streamed/events?watch=maybe", 400, "watch must be true or false"),
        ("/api/v1/queues/nowhere/jobsets/streamed/events", 404, "queue 'nowhere' does not exist"),
    ],
)
def test_a_bad_stream_request_is_answered_with_the_reason(worker: Worker, streamed: list[str], path: str, status: int, reason: str) -> None:
    answer_status, answer = call(worker.client, "GET", path)
    assert (answer_status, answer["error"][: len(reason)]) == (status, reason)


def test_the_stream_follows_live_events_and_closing_it_closes_its_consumer(worker: Worker, streamed: list[str]) -> None:
    assert worker.process is not None
    pid, port = worker.process.pid, int(worker.bootstrap.rsplit(":", 1)[1])
    idle = broker_connections(pid, port)
    replayed = len(job_set_ids(worker, "streamed"))

    stream = EventStream(worker, "streamed")
    try:
        for _ in range(replayed):
            stream.next()
        assert broker_connections(pid, port) > idle, "the stream reads the log with a consumer of its own"

        status, answer = call(worker.client, "POST", f"/api/v1/jobs/{streamed[-1]}/reprioritize", {"priority": 3})
        assert status == 202, answer
        live = stream.next()
        while live["event_id"] != answer["event_ids"][0]:  # anything written meanwhile comes first
            live = stream.next()
        assert (live["job_id"], live["kind"], live["payload"]) == (streamed[-1], "JobReprioritised", {"new_priority": 3.0})
    finally:
        stream.close()

    # Well within the 15 s heartbeat: the closed connection is noticed, not found by a failed write.
    poll(lambda: broker_connections(pid, port) <= idle, 5, "the stream's consumer to close its broker connections")
