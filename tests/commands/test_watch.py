"""`flotilla watch`: one line per event of the job set's stream, or the events as JSON lines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streams.api.sse import HEARTBEAT, sse_message
from streams.cli import main
from streams.commands.watch import event_line
from tests.commands.conftest import StubApi

T0 = 1_717_000_000_000  # 2024-05-29T16:26:40Z
JOB = "01HZ3N0000000000000000JOB1"


def record(n: int, kind: str, job_id: str | None = JOB, **payload: Any) -> dict[str, Any]:
    return {"event_id": f"01HZ3N{n:020d}", "created": T0 + n, "job_id": job_id, "queue": "demo", "job_set": "first",
            "kind": kind, "payload": payload}


RECORDS = [
    record(1, "JobSubmitted", priority=0.0, priority_class="default", client_id="hello-1", namespace="default"),
    record(2, "JobLeased", run_id="run-1", executor="local", node="local-0", pool=None, scheduled_at_priority=0),
    record(3, "JobRunFailed", run_id="run-1", reason="Error", message="exit status 3", exit_code=3,
           category="container_error", retryable=False),
    record(4, "JobReprioritised", job_id=None, new_priority=2.0),
]


@pytest.mark.parametrize(
    ("event", "line"),
    [
        (RECORDS[0], f"2024-05-29T16:26:40.001Z  {JOB}  JobSubmitted          priority=0 priority_class=default client_id=hello-1"),
        (RECORDS[1], f"2024-05-29T16:26:40.002Z  {JOB}  JobLeased             run_id=run-1 executor=local node=local-0"),
        (RECORDS[2], f'2024-05-29T16:26:40.003Z  {JOB}  JobRunFailed          run_id=run-1 exit_code=3 '
                     f'category=container_error reason=Error message="exit status 3"'),
        (RECORDS[3], f"2024-05-29T16:26:40.004Z  {'-':<26}  JobReprioritised      new_priority=2"),
    ],
)
def test_a_line_has_time_job_kind_and_the_details_that_matter(event: dict[str, Any], line: str) -> None:
    assert event_line(event) == line


def test_a_zero_exit_code_is_shown() -> None:
    assert event_line(record(5, "JobFailed", reason="r", message="", exit_code=0)).endswith("exit_code=0 reason=r")


@pytest.fixture
def stream(api: StubApi) -> StubApi:
    wire = b"".join([sse_message(RECORDS[0]), HEARTBEAT, *map(sse_message, RECORDS[1:])])
    api.stream("/api/v1/queues/demo/jobsets/first/events?watch=false", wire)
    return api


def test_watch_prints_one_line_per_event(stream: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "demo", "first", "--no-follow"]) == 0
    assert capsys.readouterr().out.splitlines() == [event_line(r) for r in RECORDS]
    assert [r[:2] for r in stream.requests] == [("GET", "/api/v1/queues/demo/jobsets/first/events?watch=false")]


def test_watch_json_prints_the_events_as_json_lines(stream: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "demo", "first", "--no-follow", "--json"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == RECORDS


def test_watch_follows_by_default_so_the_end_of_the_stream_is_an_error(
    api: StubApi, capsys: pytest.CaptureFixture[str]
) -> None:
    api.stream("/api/v1/queues/demo/jobsets/first/events?watch=true", sse_message(RECORDS[0]))
    assert main(["watch", "demo", "first"]) == 1
    assert [r[:2] for r in api.requests] == [("GET", "/api/v1/queues/demo/jobsets/first/events?watch=true")]
    captured = capsys.readouterr()
    assert captured.out == event_line(RECORDS[0]) + "\n"
    assert captured.err == "error: the server ended the event stream (it is stopping?)\n"


def test_ctrl_c_ends_a_watch_with_status_0(api: StubApi, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("streams.client.Client.events", interrupted)
    assert main(["watch", "demo", "first"]) == 0


def test_an_unknown_queue_prints_the_reason_and_exits_1(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("GET", "/api/v1/queues/nope/jobsets/first/events?watch=true", 404, {"error": "queue 'nope' does not exist"})
    assert main(["watch", "nope", "first"]) == 1
    assert capsys.readouterr().err == "error: queue 'nope' does not exist (HTTP 404)\n"
