"""`flotilla watch`: the job set's events with the counts of its jobs by state (a line per event when
stdout is not a terminal, a table redrawn in place when it is), or the events as JSON lines."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from streams.api.rest.sse import HEARTBEAT, sse_message
from streams.client.cli import main
from streams.client.commands.job_set_counts import JobSetCounts
from streams.client.commands.watch import CLEAR_BELOW, LiveTable, counts_line, counts_table, event_line
from tests.client.stub_api import StubApi

T0 = 1_717_000_000_000  # 2024-05-29T16:26:40Z
JOB = "01HZ3N0000000000000000JOB1"


def record(n: int, kind: str, job_id: str | None = JOB, **payload: Any) -> dict[str, Any]:
    return {
        "event_id": f"01HZ3N{n:020d}",
        "created": T0 + n,
        "job_id": job_id,
        "queue": "demo",
        "job_set": "first",
        "kind": kind,
        "payload": payload,
    }


RECORDS = [
    record(1, "JobSubmitted", priority=0.0, priority_class="default", client_id="hello-1", namespace="default"),
    record(2, "JobLeased", run_id="run-1", executor="local", node="local-0", pool=None, scheduled_at_priority=0),
    record(
        3, "JobRunFailed", run_id="run-1", reason="Error", message="exit status 3", exit_code=3, category="container_error", retryable=False
    ),
    record(4, "JobReprioritised", job_id=None, new_priority=2.0),
]


@pytest.mark.parametrize(
    ("event", "line"),
    [
        (RECORDS[0], f"2024-05-29T16:26:40.001Z  {JOB}  JobSubmitted          priority=0 priority_class=default client_id=hello-1"),
        (RECORDS[1], f"2024-05-29T16:26:40.002Z  {JOB}  JobLeased             run_id=run-1 executor=local node=local-0"),
        (
            RECORDS[2],
            f"2024-05-29T16:26:40.003Z  {JOB}  JobRunFailed          run_id=run-1 exit_code=3 "
            f'category=container_error reason=Error message="exit status 3"',
        ),
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


def test_watch_prints_one_line_per_event_starting_with_the_counts_after_it(stream: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "demo", "first", "--no-follow"]) == 0
    after = ["queued=1 leased=0", "queued=0 leased=1", "queued=0 leased=1", "queued=0 leased=1"]
    rest = " pending=0 running=0 succeeded=0 failed=0 cancelled=0 preempted=0"
    assert capsys.readouterr().out.splitlines() == [f"{counts}{rest} | {event_line(r)}" for counts, r in zip(after, RECORDS, strict=True)]
    assert [r[:2] for r in stream.requests] == [("GET", "/api/v1/queues/demo/jobsets/first/events?watch=false")]


def test_watch_json_prints_the_events_as_json_lines(stream: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "demo", "first", "--no-follow", "--json"]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == RECORDS


def test_watch_follows_by_default_so_the_end_of_the_stream_is_an_error(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.stream("/api/v1/queues/demo/jobsets/first/events?watch=true", sse_message(RECORDS[0]))
    assert main(["watch", "demo", "first"]) == 1
    assert [r[:2] for r in api.requests] == [("GET", "/api/v1/queues/demo/jobsets/first/events?watch=true")]
    captured = capsys.readouterr()
    assert captured.out == f"{counts_line(JobSetCounts({JOB: 'queued'}))} | {event_line(RECORDS[0])}\n"
    assert captured.err == "error: the server ended the event stream (it is stopping?)\n"


def test_ctrl_c_ends_a_watch_with_status_0(api: StubApi, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(*args: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr("streams.client.rest.Client.events", interrupted)
    assert main(["watch", "demo", "first"]) == 0


def test_an_unknown_queue_prints_the_reason_and_exits_1(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("GET", "/api/v1/queues/nope/jobsets/first/events?watch=true", 404, {"error": "queue 'nope' does not exist"})
    assert main(["watch", "nope", "first"]) == 1
    assert capsys.readouterr().err == "error: queue 'nope' does not exist (HTTP 404)\n"


def test_the_table_has_a_title_with_the_job_count_and_one_column_per_state() -> None:
    counts = JobSetCounts({"a": "running", "b": "running", "c": "succeeded"})
    assert counts_table(counts, "job set first in queue demo") == [
        "job set first in queue demo: 3 jobs",
        "QUEUED  LEASED  PENDING  RUNNING  SUCCEEDED  FAILED  CANCELLED  PREEMPTED",
        "     0       0        0        2          1       0          0          0",
    ]
    assert counts_table(JobSetCounts({"a": "failed"}), "t")[0] == "t: 1 job, all finished"


def test_on_a_terminal_events_scroll_above_a_table_redrawn_in_place() -> None:
    out = io.StringIO()
    view = LiveTable(out, "job set first in queue demo", width=200)
    counts = JobSetCounts()
    view.start(counts)
    shown = out.getvalue()
    assert shown == "\n".join(counts_table(counts, "job set first in queue demo")) + "\n"
    for record in RECORDS[:2]:
        counts.apply(record)
        view.event(record, counts)
    # each event: move up over the 3 table lines, clear them, print the event line, then the new table
    first, second = out.getvalue()[len(shown) :].split("\x1b[3F" + CLEAR_BELOW)[1:]
    assert first.splitlines() == [event_line(RECORDS[0]), *counts_table(JobSetCounts({JOB: "queued"}), view.title)]
    assert second.splitlines() == [event_line(RECORDS[1]), *counts_table(counts, view.title)]
    assert second.splitlines()[-1].split()[:2] == ["0", "1"]  # queued 0, leased 1


def test_table_lines_are_cut_to_the_terminal_width_so_each_takes_one_row() -> None:
    out = io.StringIO()
    LiveTable(out, "a long title " * 10, width=30).start(JobSetCounts())
    assert [len(line) for line in out.getvalue().splitlines()] == [30, 30, 30]


def test_watch_draws_the_live_table_when_stdout_is_a_terminal(
    stream: StubApi, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert main(["watch", "demo", "first", "--no-follow"]) == 0
    out = capsys.readouterr().out
    assert out.count(CLEAR_BELOW) == len(RECORDS)
    assert out.splitlines()[-3:] == counts_table(JobSetCounts({JOB: "leased"}), "job set first in queue demo")


def test_a_dumb_terminal_gets_the_counts_lines(
    stream: StubApi, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    monkeypatch.setenv("TERM", "dumb")
    assert main(["watch", "demo", "first", "--no-follow"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert out.splitlines()[-1] == f"{counts_line(JobSetCounts({JOB: 'leased'}))} | {event_line(RECORDS[-1])}"


DONE = [record(1, "JobSubmitted"), record(2, "JobLeased", run_id="run-1"), record(3, "JobSucceeded", run_id="run-1")]


def test_exit_on_done_stops_after_the_replay_when_every_job_finished(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.stream("/api/v1/queues/demo/jobsets/first/events?watch=false", b"".join(map(sse_message, DONE)))
    assert main(["watch", "demo", "first", "--exit-on-done"]) == 0
    assert [r[1] for r in api.requests] == ["/api/v1/queues/demo/jobsets/first/events?watch=false"]
    assert capsys.readouterr().out.splitlines()[-1].startswith("queued=0 leased=0 pending=0 running=0 succeeded=1 ")


def test_exit_on_done_follows_from_the_last_event_until_every_job_finished(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.stream("/api/v1/queues/demo/jobsets/first/events?watch=false", b"".join(map(sse_message, DONE[:2])))
    later = record(9, "JobSubmitted", job_id="01HZ3N0000000000000000JOB2")  # after the job set was done: not shown
    live = f"/api/v1/queues/demo/jobsets/first/events?watch=true&from={DONE[1]['event_id']}"
    api.stream(live, b"".join(map(sse_message, [DONE[2], later])))
    assert main(["watch", "demo", "first", "--exit-on-done"]) == 0
    assert [r[1] for r in api.requests] == ["/api/v1/queues/demo/jobsets/first/events?watch=false", live]
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[1] for line in lines] == [event_line(r) for r in DONE]


def test_exit_on_done_is_an_error_if_the_stream_ends_first(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.stream("/api/v1/queues/demo/jobsets/first/events?watch=false", sse_message(DONE[0]))
    api.stream(f"/api/v1/queues/demo/jobsets/first/events?watch=true&from={DONE[0]['event_id']}", b"")
    assert main(["watch", "demo", "first", "--exit-on-done"]) == 1
    assert capsys.readouterr().err == "error: the server ended the event stream (it is stopping?)\n"
