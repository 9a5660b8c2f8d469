"""`flotilla cancel|preempt|reprioritize`: what each sends where, and what it prints."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streams.cli import main
from tests.commands.conftest import StubApi

JOB = "01HZ3N0000000000000000JOB1"
EVENT = "01HZ3N000000000000000EVENT"


@pytest.mark.parametrize(
    ("argv", "path", "body", "printed"),
    [
        (["cancel", "job", JOB, "--reason", "wrong input"], f"/api/v1/jobs/{JOB}/cancel", {"reason": "wrong input"},
         f"cancel requested for job {JOB}"),
        (["cancel", "job", JOB], f"/api/v1/jobs/{JOB}/cancel", {}, f"cancel requested for job {JOB}"),
        (["cancel", "job-set", "demo", "first", "--reason", "r"], "/api/v1/queues/demo/jobsets/first/cancel",
         {"reason": "r"}, "cancel requested for every unfinished job of job set first in queue demo"),
        (["preempt", "job", JOB], f"/api/v1/jobs/{JOB}/preempt", {}, f"preemption requested for job {JOB}"),
        (["reprioritize", "job", JOB, "2.5"], f"/api/v1/jobs/{JOB}/reprioritize", {"priority": 2.5},
         f"priority 2.5 requested for job {JOB}"),
        (["reprioritize", "job-set", "demo", "night run", "0"], "/api/v1/queues/demo/jobsets/night%20run/reprioritize",
         {"priority": 0.0}, "priority 0 requested for every unfinished job of job set night run in queue demo"),
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
