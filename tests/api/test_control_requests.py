"""What cancel, preempt and reprioritise requests may hold, and the event payload each one writes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from streams.api.control_requests import (
    JOB_ACTIONS,
    JOB_SET_ACTIONS,
    MAX_REASON_CHARS,
    bulk_payload,
    executor_filter,
    matching,
    priority_of,
    queue_filter,
    reason_of,
)
from streams.api.errors import ApiError


def refusal(parse: Any, body: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as raised:
        parse(body)
    assert raised.value.status == 400
    return raised.value.reason


def test_a_reason_is_optional_and_must_be_a_short_string() -> None:
    assert reason_of({}) == ""
    assert reason_of({"reason": None}) == ""
    assert reason_of({"reason": "wrong input"}) == "wrong input"
    assert "must be a string" in refusal(reason_of, {"reason": 3})
    assert f"at most {MAX_REASON_CHARS}" in refusal(reason_of, {"reason": "x" * (MAX_REASON_CHARS + 1)})


def test_a_misspelt_field_is_refused_not_ignored() -> None:
    assert refusal(reason_of, {"reson": "typo"}) == "unknown field(s) 'reson'; this request takes 'reason'"
    assert "unknown field(s) 'prio'" in refusal(priority_of, {"priority": 1, "prio": 2})


@pytest.mark.parametrize("priority", [0, 0.0, 3, 2.5, 1e9])
def test_priorities_are_non_negative_numbers(priority: float) -> None:
    assert priority_of({"priority": priority}) == float(priority)
    assert isinstance(priority_of({"priority": priority}), float)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({}, "priority is required"),
        ({"priority": -1}, "priority must be >= 0, not -1"),
        ({"priority": "3"}, "priority must be a finite number, not '3'"),
        ({"priority": True}, "priority must be a finite number, not True"),
        ({"priority": None}, "priority must be a finite number, not None"),
        ({"priority": float("inf")}, "priority must be a finite number, not inf"),
        ({"priority": float("nan")}, "priority must be a finite number, not nan"),
    ],
)
def test_bad_priorities_are_refused_with_the_reason(body: dict[str, Any], reason: str) -> None:
    assert refusal(priority_of, body) == reason


def test_each_action_names_its_event_kind() -> None:
    assert JOB_ACTIONS["cancel"]({"reason": "r"}) == ("flotilla.JobCancelRequested", {"reason": "r"})
    assert JOB_ACTIONS["preempt"]({}) == ("flotilla.JobPreemptRequested", {"reason": ""})
    assert JOB_ACTIONS["reprioritize"]({"priority": 4}) == ("flotilla.JobReprioritised", {"new_priority": 4.0})
    assert set(JOB_SET_ACTIONS) == {"cancel", "reprioritize"}, "a job set cannot be preempted as a whole"


# -- queue- and executor-wide requests ------------------------------------------------------------


def job(
    job_id: str, state: str, queue: str = "q", pc: str = "armada-default", executor: str = "ex1", pool: str | None = None
) -> dict[str, Any]:
    runs = [] if state == "queued" else [{"run_id": f"{job_id}-1", "executor": executor, "node": "n0", "state": state, "pool": pool}]
    return {"job_id": job_id, "state": state, "queue": queue, "priority_class": pc, "runs": runs}


JOBS = [
    job("queued", "queued"),
    job("leased", "leased", pc="armada-preemptible"),
    job("running", "running", pool="gpu"),
    job("elsewhere", "running", executor="ex2", pool="cpu"),
    job("done", "succeeded"),
    job("other-queue", "running", queue="r"),
]


def ids(found: list[dict[str, Any]]) -> list[str]:
    return [j["job_id"] for j in found]


def test_a_queue_wide_preempt_matches_the_running_jobs_of_its_classes_and_pools() -> None:
    everything, _ = queue_filter({}, "preempt")
    assert ids(matching(JOBS, replace(everything, queues=frozenset({"q"})))) == ["elsewhere", "leased", "running"]
    by_class, reason = queue_filter({"priority_classes": ["armada-preemptible"], "reason": "maintenance"}, "preempt")
    assert (ids(matching(JOBS, by_class)), reason) == (["leased"], "maintenance")
    by_pool, _ = queue_filter({"pools": ["gpu"]}, "preempt")
    assert "running" in ids(matching(JOBS, by_pool)) and "elsewhere" not in ids(matching(JOBS, by_pool))


def test_a_queue_wide_cancel_needs_the_states_it_acts_on() -> None:
    queued, _ = queue_filter({"job_states": ["queued"], "pools": ["gpu"]}, "cancel")
    assert ids(matching(JOBS, queued)) == ["queued"], "a queued job may go to any pool, so it is in every one"
    assert "job_states is required" in refusal(lambda body: queue_filter(body, "cancel"), {})
    assert "not succeeded" in refusal(lambda body: queue_filter(body, "cancel"), {"job_states": ["succeeded"]})
    assert "unknown field(s) 'job_states'" in refusal(lambda body: queue_filter(body, "preempt"), {"job_states": ["queued"]})
    assert "must be a list of names" in refusal(lambda body: queue_filter(body, "cancel"), {"job_states": "queued"})


def test_an_executor_wide_request_matches_the_runs_on_that_executor() -> None:
    on_ex1, _ = executor_filter({}, "ex1", "cancel")
    assert ids(matching(JOBS, on_ex1)) == ["leased", "other-queue", "running"]
    narrowed, _ = executor_filter({"queues": ["q"], "priority_classes": ["armada-default"]}, "ex1", "preempt")
    assert ids(matching(JOBS, narrowed)) == ["running"]


def test_each_job_gets_the_request_with_its_source_as_the_default_reason() -> None:
    assert bulk_payload("cancel", "", "CancelOnQueue") == ("flotilla.JobCancelRequested", {"reason": "cancelled by CancelOnQueue"})
    assert bulk_payload("preempt", "drain", "PreemptOnExecutor") == ("flotilla.JobPreemptRequested", {"reason": "drain"})
