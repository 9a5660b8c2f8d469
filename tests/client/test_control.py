"""`flotilla cancel|preempt|reprioritize`: what each sends where, and what it prints."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streams.client.cli import main
from tests.client.stub_api import StubApi

JOB = "01HZ3N0000000000000000JOB1"
EVENT = "01HZ3N000000000000000EVENT"


@pytest.mark.parametrize(
    ("argv", "path", "body", "printed"),
    [
        (
            ["cancel", "job", JOB, "--reason", "wrong input"],
            f"/api/v1/jobs/{JOB}/cancel",
            {"reason": "wrong input"},
            f"cancel requested for job {JOB}",
        ),
        (["cancel", "job", JOB], f"/api/v1/jobs/{JOB}/cancel", {}, f"cancel requested for job {JOB}"),
        (
            ["cancel", "job-set", "demo", "first", "--reason", "r"],
            "/api/v1/queues/demo/jobsets/first/cancel",
            {"reason": "r"},
            "cancel requested for every unfinished job of job set first in queue demo",
        ),
        (["preempt", "job", JOB], f"/api/v1/jobs/{JOB}/preempt", {}, f"preemption requested for job {JOB}"),
        (
            ["reprioritize", "job", JOB, "2.5"],
            f"/api/v1/jobs/{JOB}/reprioritize",
            {"priority": 2.5},
            f"priority 2.5 requested for job {JOB}",
        ),
        (
            ["reprioritize", "job-set", "demo", "night run", "0"],
            "/api/v1/queues/demo/jobsets/night%20run/reprioritize",
            {"priority": 0.0},
            "priority 0 requested for every unfinished job of job set night run in queue demo",
        ),
    ],
)
def test_each_command_posts_its_request_and_says_what_it_asked(
    api: StubApi, capsys: pytest.CaptureFixture[str], argv: list[str], path: str, body: dict[str, Any], printed: str
) -> None:
    api.answer("POST", path, 202, {"event_ids": [EVENT]})
    assert main(argv) == 0
    assert api.requests == [("POST", path, body)]
    assert capsys.readouterr().out == f"{printed} (event {EVENT})\n"


def test_json_prints_the_answer_as_is(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("POST", f"/api/v1/jobs/{JOB}/cancel", 202, {"event_ids": [EVENT]})
    assert main(["cancel", "job", JOB, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"event_ids": [EVENT]}


def test_a_refusal_prints_the_servers_reason_and_exits_1(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("POST", f"/api/v1/jobs/{JOB}/cancel", 409, {"error": f"job {JOB} already finished (succeeded)"})
    assert main(["cancel", "job", JOB, "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"error: job {JOB} already finished (succeeded) (HTTP 409)\n"


def test_a_priority_that_is_not_a_number_is_refused_before_any_request(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["reprioritize", "job", JOB, "high"])
    assert exited.value.code == 2
    assert "invalid float value: 'high'" in capsys.readouterr().err
    assert api.requests == []


def test_preempting_a_job_set_is_not_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["preempt", "job-set", "demo", "first"])
    assert "invalid choice: 'job-set'" in capsys.readouterr().err


def job_status(queue: str = "demo", job_set: str = "first") -> dict[str, Any]:
    return {"job_id": JOB, "queue": queue, "job_set": job_set, "state": "running", "runs": []}


@pytest.mark.parametrize(
    ("argv", "action", "body"),
    [
        (["cancel", "job", "demo", "first", JOB, "--reason", "r"], "cancel", {"reason": "r"}),
        (["preempt", "job", "demo", "first", JOB], "preempt", {}),
        (["reprioritize", "job", "demo", "first", JOB, "4"], "reprioritize", {"priority": 4.0}),
    ],
)
def test_armadactls_queue_job_set_job_id_form_checks_the_job_is_there_then_acts(
    api: StubApi, argv: list[str], action: str, body: dict[str, Any]
) -> None:
    api.answer("GET", f"/api/v1/jobs/{JOB}", 200, job_status())
    api.answer("POST", f"/api/v1/jobs/{JOB}/{action}", 202, {"event_ids": [EVENT]})
    assert main(argv) == 0
    assert api.requests == [("GET", f"/api/v1/jobs/{JOB}", None), ("POST", f"/api/v1/jobs/{JOB}/{action}", body)]


@pytest.mark.parametrize(("queue", "job_set"), [("other", "first"), ("demo", "second")])
def test_a_job_outside_the_named_job_set_is_left_alone(api: StubApi, capsys: pytest.CaptureFixture[str], queue: str, job_set: str) -> None:
    api.answer("GET", f"/api/v1/jobs/{JOB}", 200, job_status(queue, job_set))
    assert main(["cancel", "job", "demo", "first", JOB]) == 1
    assert [r[0] for r in api.requests] == ["GET"]
    assert capsys.readouterr().err == (f"error: job {JOB} is in job set {job_set} of queue {queue}, not in job set first of queue demo\n")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["cancel", "job", "demo", JOB], "expected [QUEUE JOB_SET] JOB_ID, got 2 argument(s)"),
        (["preempt", "job", "demo", "first", JOB, "extra"], "expected [QUEUE JOB_SET] JOB_ID, got 4 argument(s)"),
        (["reprioritize", "job", "5"], "expected [QUEUE JOB_SET] JOB_ID PRIORITY, got 1 argument(s)"),
        (["reprioritize", "job", "demo", JOB, "5"], "expected [QUEUE JOB_SET] JOB_ID PRIORITY, got 3 argument(s)"),
    ],
)
def test_a_wrong_number_of_arguments_is_refused_before_any_request(
    api: StubApi, capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert expected in capsys.readouterr().err
    assert api.requests == []
