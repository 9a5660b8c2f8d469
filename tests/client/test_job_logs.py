"""`flotilla job logs`: the output file of a job's run on a local executor, or why there is none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streams.client.cli import main
from tests.client.stub_api import StubApi

JOB = "01HZ3N0000000000000000JOB1"


def run(run_id: str, executor: str = "local", state: str = "succeeded") -> dict[str, Any]:
    return {
        "run_id": run_id,
        "executor": executor,
        "node": "local-0",
        "state": state,
        "exit_code": None,
        "reason": None,
        "leased_at": 1,
        "started_at": 2,
        "finished_at": 3,
    }


def job(*runs: dict[str, Any], state: str = "succeeded") -> dict[str, Any]:
    return {"job_id": JOB, "queue": "demo", "job_set": "first", "state": state, "runs": list(runs)}


def write_log(state_dir: Path, run_id: str, text: str, executor: str = "local") -> None:
    path = state_dir / "executors" / executor / "runs" / run_id / "output.log"
    path.parent.mkdir(parents=True)
    path.write_text(text)


def logs(api: StubApi, the_job: dict[str, Any], state_dir: Path, *extra: str) -> int:
    api.answer("GET", f"/api/v1/jobs/{JOB}", 200, the_job)
    return main(["job", "logs", JOB, "--state-dir", str(state_dir), *extra])


def test_prints_the_latest_runs_output(api: StubApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_log(tmp_path, "run-1", "first try\n")
    write_log(tmp_path, "run-2", "hello\n")
    assert logs(api, job(run("run-1", state="lease_returned"), run("run-2")), tmp_path) == 0
    assert capsys.readouterr().out == "hello\n"


def test_run_picks_an_earlier_run(api: StubApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_log(tmp_path, "run-1", "first try\n")
    write_log(tmp_path, "run-2", "hello\n")
    assert logs(api, job(run("run-1"), run("run-2")), tmp_path, "--run", "run-1") == 0
    assert capsys.readouterr().out == "first try\n"


@pytest.mark.parametrize(
    ("the_job", "extra", "reason"),
    [
        (job(state="queued"), [], f"job {JOB} has not run yet (it is queued)"),
        (job(run("run-1")), ["--run", "run-9"], f"job {JOB} has no run run-9 (its runs: run-1)"),
        (job(run("run-1", executor="gpu-cluster")), [], "run run-1 ran on executor 'gpu-cluster', which keeps no files under "),
        (job(run("run-3", state="leased"), state="leased"), [], "run run-3 has no log yet (it is leased; expected "),
    ],
)
def test_says_why_there_is_no_log(
    api: StubApi, tmp_path: Path, capsys: pytest.CaptureFixture[str], the_job: dict[str, Any], extra: list[str], reason: str
) -> None:
    write_log(tmp_path, "run-1", "elsewhere\n")
    assert logs(api, the_job, tmp_path, *extra) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"error: {reason}"), captured.err


def test_an_unknown_job_prints_the_servers_reason(api: StubApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["job", "logs", JOB, "--state-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == "error: no such stub (HTTP 404)\n"
