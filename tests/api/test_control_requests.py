"""What cancel, preempt and reprioritise requests may hold, and the event payload each one writes."""

from __future__ import annotations

from typing import Any

import pytest

from streams.api.control_requests import (
    JOB_ACTIONS,
    JOB_SET_ACTIONS,
    MAX_REASON_CHARS,
    priority_of,
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
