"""armadactl's `cordon|uncordon queues`, `cancel|preempt queues`, `cancel|preempt executor`, `cordon|uncordon executor` and
`version`: which queues each picks, what it sends where, and what it prints."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from streams.client.cli import main
from tests.client.stub_api import StubApi


def queue(name: str, cordoned: bool = False, **labels: str) -> dict[str, Any]:
    return {"name": name, "priority_factor": 1.0, "user_owners": [], "group_owners": [], "cordoned": cordoned, "labels": labels}


QUEUES = [queue("alpha", tier="gold"), queue("beta", True, tier="gold"), queue("gamma", tier="silver")]


@pytest.fixture
def listed(api: StubApi) -> StubApi:
    api.answer("GET", "/api/v1/queues", 200, {"queues": QUEUES})
    for found in QUEUES:
        api.answer("PUT", f"/api/v1/queues/{found['name']}", 200, found)
        for action in ("cancel", "preempt"):
            api.answer("POST", f"/api/v1/queues/{found['name']}/{action}", 202, {"job_ids": [f"{found['name']}-job"]})
    return api


def writes(api: StubApi) -> list[tuple[str, str, Any]]:
    return [request for request in api.requests if request[0] != "GET"]


@pytest.mark.parametrize(
    ("selection", "chosen"),
    [
        (["alpha", "gamma"], ["alpha", "gamma"]),
        (["--selector", "tier=gold"], ["alpha", "beta"]),
        (["--selector", "tier=gold", "--inverse"], ["gamma"]),
        (["--selector", "tier=gold", "--only-cordoned"], ["beta"]),
        (["alpha", "--inverse"], ["beta", "gamma"]),
    ],
)
def test_cordon_picks_queues_by_name_or_label_as_armadactl(listed: StubApi, selection: list[str], chosen: list[str]) -> None:
    assert main(["cordon", "queues", *selection]) == 0
    assert [(method, path) for method, path, _ in writes(listed)] == [("PUT", f"/api/v1/queues/{name}") for name in chosen]
    assert all(body["cordoned"] is True for _, _, body in writes(listed))


def test_uncordon_lifts_the_cordon_and_keeps_every_other_setting(listed: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["uncordon", "queue", "beta"]) == 0
    assert writes(listed) == [("PUT", "/api/v1/queues/beta", {**QUEUES[1], "cordoned": False})]
    assert capsys.readouterr().out == "uncordoned queue beta\n"


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["cordon", "queues"], "queue selection must be narrowed down either by names or by --selector labels"),
        (["cordon", "queues", "alpha", "--selector", "tier=gold"], "either with a set of names or a set of labels, but not both"),
        (["cordon", "queues", "delta"], "no such queue: delta"),
    ],
)
def test_a_selection_that_names_nothing_or_too_much_is_refused(
    listed: StubApi, capsys: pytest.CaptureFixture[str], argv: list[str], error: str
) -> None:
    assert main(argv) == 1
    assert error in capsys.readouterr().err and writes(listed) == []


def test_a_dry_run_says_what_it_would_do_and_does_nothing(listed: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preempt", "queues", "--selector", "tier=gold", "-a", "--dry-run"]) == 0
    assert writes(listed) == []
    assert capsys.readouterr().out.splitlines() == [
        'would preempt the jobs of queue alpha matching {"priority_classes": [], "pools": []}',
        'would preempt the jobs of queue beta matching {"priority_classes": [], "pools": []}',
    ]


def test_cancel_queues_sends_the_states_classes_pools_and_reason(listed: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["cancel", "queues", "alpha", "gamma", "-s", "queued,running", "-p", "armada-default", "--pools", "gpu", "--reason", "cleanup"]
    assert main(argv) == 0
    body = {"priority_classes": ["armada-default"], "pools": ["gpu"], "job_states": ["queued", "running"], "reason": "cleanup"}
    assert writes(listed) == [("POST", "/api/v1/queues/alpha/cancel", body), ("POST", "/api/v1/queues/gamma/cancel", body)]
    assert capsys.readouterr().out.splitlines() == [
        "cancel requested for 1 job(s) of queue alpha",
        "cancel requested for 1 job(s) of queue gamma",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["cancel", "queues", "alpha", "-a"],  # no --job-states
        ["preempt", "queues", "alpha"],  # neither --priority-classes nor --all-priority-classes
        ["preempt", "queues", "alpha", "-a", "-p", "x"],  # both
        ["preempt", "executor", "-a"],  # no executor
        ["cordon", "executor", "cluster-1"],  # no --reason
        ["uncordon", "executor"],  # no executor
    ],
)
def test_armadactls_required_flags_are_required(api: StubApi, argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and api.requests == []


def test_an_executor_wide_request_names_the_executor_and_its_filters(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("POST", "/api/v1/executors/cluster-1/preempt", 202, {"job_ids": ["a", "b"]})
    assert main(["preempt", "executor", "cluster-1", "-q", "alpha,beta", "--all-priority-classes", "--json"]) == 0
    assert api.requests == [
        ("POST", "/api/v1/executors/cluster-1/preempt", {"priority_classes": [], "pools": [], "queues": ["alpha", "beta"]})
    ]
    assert json.loads(capsys.readouterr().out) == {"job_ids": ["a", "b"]}


def test_cordon_and_uncordon_executor_post_to_the_executor_with_the_reason(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    for action in ("cordon", "uncordon"):
        api.answer("POST", f"/api/v1/executors/cluster%201/{action}", 202, {"event_ids": [f"{action}-event"]})
    assert main(["cordon", "executor", "cluster 1", "--reason", "kernel upgrade"]) == 0
    assert main(["uncordon", "executor", "cluster 1", "--json"]) == 0
    assert api.requests == [
        ("POST", "/api/v1/executors/cluster%201/cordon", {"reason": "kernel upgrade"}),
        ("POST", "/api/v1/executors/cluster%201/uncordon", {}),
    ]
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "cordoned executor cluster 1" and json.loads(printed[1]) == {"event_ids": ["uncordon-event"]}


def test_version_names_this_command_lines_release(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    assert found["version"] == project["version"] and found["python"].count(".") == 2
