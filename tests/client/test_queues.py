"""Queue commands: armadactl's spelling (`create|update|delete|get queue`, `get queues`) and the noun-first
one (`queue create|...|list`) send the same requests; an update sends back the settings not given."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streams.client.cli import main
from streams.client.commands.queues import labels, names
from tests.client.stub_api import StubApi
from tests.kit.jobs import QUEUE


def queue(name: str = "demo", **fields: Any) -> dict[str, Any]:
    return {**QUEUE, "name": name, **fields}


CREATE_ARGS = ["--priority-factor", "2", "--owners", "alice,bob", "--group-owners", "team-a", "--cordon", "--labels", "tier=gold,site=lon"]
CREATED: dict[str, Any] = {
    "name": "demo",
    "priority_factor": 2.0,
    "user_owners": ["alice", "bob"],
    "group_owners": ["team-a"],
    "cordoned": True,
    "labels": {"tier": "gold", "site": "lon"},
}


@pytest.mark.parametrize("spelling", [["create", "queue"], ["queue", "create"]])
def test_create_sends_the_settings_given(api: StubApi, capsys: pytest.CaptureFixture[str], spelling: list[str]) -> None:
    api.answer("POST", "/api/v1/queues", 201, queue(**{k: v for k, v in CREATED.items() if k != "name"}))
    assert main([*spelling, "demo", *CREATE_ARGS]) == 0
    assert api.requests == [("POST", "/api/v1/queues", CREATED)]
    assert capsys.readouterr().out == "created queue demo (priority factor 2)\n"


def test_create_without_settings_leaves_them_to_the_server(api: StubApi) -> None:
    api.answer("POST", "/api/v1/queues", 201, queue())
    assert main(["create", "queue", "demo"]) == 0
    assert api.requests == [("POST", "/api/v1/queues", {"name": "demo"})]


@pytest.mark.parametrize("spelling", [["update", "queue"], ["queue", "update"]])
def test_update_keeps_the_settings_not_given(api: StubApi, spelling: list[str]) -> None:
    current = queue(
        priority_factor=3.0,
        user_owners=["alice"],
        labels={"tier": "gold"},
        resource_limits_by_priority_class_name={
            "default": {"maximum_resource_fraction": {"cpu": 0.5}, "maximum_resource_fraction_by_pool": {}}
        },
    )
    api.answer("GET", "/api/v1/queues/demo", 200, current)
    api.answer("PUT", "/api/v1/queues/demo", 200, {**current, "cordoned": True})
    assert main([*spelling, "demo", "--cordon"]) == 0
    assert api.requests == [("GET", "/api/v1/queues/demo", None), ("PUT", "/api/v1/queues/demo", {**current, "cordoned": True})]


def test_update_can_clear_owners_and_labels_and_lift_a_cordon(api: StubApi) -> None:
    current = queue(user_owners=["alice"], group_owners=["team-a"], cordoned=True, labels={"tier": "gold"})
    api.answer("GET", "/api/v1/queues/demo", 200, current)
    api.answer("PUT", "/api/v1/queues/demo", 200, queue())
    assert main(["update", "queue", "demo", "--owners", "", "--group-owners", "", "--labels", "", "--no-cordon"]) == 0
    assert api.requests[-1] == ("PUT", "/api/v1/queues/demo", queue())


def test_update_of_a_missing_queue_writes_nothing(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("GET", "/api/v1/queues/nope", 404, {"error": "queue 'nope' does not exist"})
    assert main(["update", "queue", "nope", "--priority-factor", "2"]) == 1
    assert [r[0] for r in api.requests] == ["GET"]
    assert capsys.readouterr().err == "error: queue 'nope' does not exist (HTTP 404)\n"


@pytest.mark.parametrize("spelling", [["delete", "queue"], ["queue", "delete"]])
def test_delete(api: StubApi, capsys: pytest.CaptureFixture[str], spelling: list[str]) -> None:
    api.answer("DELETE", "/api/v1/queues/demo", 200, {"deleted": "demo"})
    assert main([*spelling, "demo"]) == 0
    assert api.requests == [("DELETE", "/api/v1/queues/demo", None)]
    assert capsys.readouterr().out == "deleted queue demo\n"


@pytest.mark.parametrize("spelling", [["get", "queue"], ["queue", "get"]])
def test_get_describes_the_queue(api: StubApi, capsys: pytest.CaptureFixture[str], spelling: list[str]) -> None:
    api.answer("GET", "/api/v1/queues/demo", 200, queue(**{k: v for k, v in CREATED.items() if k != "name"}))
    assert main([*spelling, "demo"]) == 0
    assert capsys.readouterr().out == (
        "queue demo\n"
        "  priority factor  2\n"
        "  cordoned         yes\n"
        "  owners           alice, bob\n"
        "  group owners     team-a\n"
        "  labels           site=lon,tier=gold\n"
    )


QUEUES = [
    queue("demo"),
    queue("night-batch", priority_factor=0.5, user_owners=["alice"], group_owners=["ops", "ml"], cordoned=True, labels={"tier": "gold"}),
]


@pytest.mark.parametrize("spelling", [["get", "queues"], ["queue", "list"]])
def test_get_queues_prints_a_table(api: StubApi, capsys: pytest.CaptureFixture[str], spelling: list[str]) -> None:
    api.answer("GET", "/api/v1/queues", 200, {"queues": QUEUES})
    assert main(spelling) == 0
    assert capsys.readouterr().out.splitlines() == [
        "NAME         PRIORITY FACTOR  CORDONED  OWNERS  GROUP OWNERS  LABELS",
        "demo         1                no        -       -             -",
        "night-batch  0.5              yes       alice   ops,ml        tier=gold",
    ]


def test_get_queues_json_is_the_list(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("GET", "/api/v1/queues", 200, {"queues": QUEUES})
    assert main(["get", "queues", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == QUEUES


def test_no_queues(api: StubApi, capsys: pytest.CaptureFixture[str]) -> None:
    api.answer("GET", "/api/v1/queues", 200, {"queues": []})
    assert main(["get", "queues"]) == 0
    assert capsys.readouterr().out == "no queues\n"


def test_list_options() -> None:
    assert names("alice, bob,,") == ["alice", "bob"]
    assert names("") == []
    assert labels("tier=gold, site = lon") == {"tier": "gold", "site": "lon"}
    assert labels("empty=") == {"empty": ""}
    assert labels("") == {}


@pytest.mark.parametrize("bad", ["tier", "=gold"])
def test_a_label_that_is_not_key_value_is_refused_before_any_request(api: StubApi, capsys: pytest.CaptureFixture[str], bad: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["create", "queue", "demo", "--labels", f"site=lon,{bad}"])
    assert exited.value.code == 2
    assert f"label {bad!r} is not KEY=VALUE" in capsys.readouterr().err
    assert api.requests == []


def test_owners_may_be_repeated(api: StubApi) -> None:
    api.answer("POST", "/api/v1/queues", 201, queue())
    assert main(["create", "queue", "demo", "--owners", "alice", "--owners", "bob,carol"]) == 0
    assert api.requests[0][2]["user_owners"] == ["alice", "bob", "carol"]
