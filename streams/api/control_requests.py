"""Cancel, preempt and reprioritise requests: their bodies checked, and the event payload each writes.

Kept apart from the views so the rules a caller meets (what a body may hold, what each action
puts on the log) are plain functions, tested without a server.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from streams.api.errors import ApiError
from streams.domain.events import Payload

CANCEL_REQUESTED = "flotilla.JobCancelRequested"
PREEMPT_REQUESTED = "flotilla.JobPreemptRequested"
REPRIORITISED = "flotilla.JobReprioritised"

# The queue permission each request needs (streams/auth/permissions.py).
VERBS = {CANCEL_REQUESTED: "cancel", PREEMPT_REQUESTED: "preempt", REPRIORITISED: "reprioritize"}

# Enough for any human explanation; the reason is stored in the job's state and shown by the UI.
MAX_REASON_CHARS = 4096


def _only(body: dict[str, Any], *allowed: str) -> None:
    """A misspelt field (`reson`) is refused instead of silently dropped."""
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        expected = ", ".join(repr(name) for name in allowed)
        raise ApiError(400, f"unknown field(s) {', '.join(map(repr, unknown))}; this request takes {expected}")


def reason_of(body: dict[str, Any]) -> str:
    _only(body, "reason")
    reason = body.get("reason")
    if reason is None:
        return ""
    if not isinstance(reason, str):
        raise ApiError(400, f"reason must be a string, not {type(reason).__name__}")
    if len(reason) > MAX_REASON_CHARS:
        raise ApiError(400, f"reason is {len(reason)} characters long; at most {MAX_REASON_CHARS} are allowed")
    return reason


def priority_of(body: dict[str, Any]) -> float:
    _only(body, "priority")
    if "priority" not in body:
        raise ApiError(400, "priority is required")
    priority = body["priority"]
    # bool is an int in Python, and JSON's `true` is no priority
    if isinstance(priority, bool) or not isinstance(priority, int | float) or not math.isfinite(priority):
        raise ApiError(400, f"priority must be a finite number, not {priority!r}")
    if priority < 0:
        raise ApiError(400, f"priority must be >= 0, not {priority!r}")
    return float(priority)


def cancel_payload(body: dict[str, Any]) -> Payload:
    return CANCEL_REQUESTED, {"reason": reason_of(body)}


def preempt_payload(body: dict[str, Any]) -> Payload:
    return PREEMPT_REQUESTED, {"reason": reason_of(body)}


def reprioritise_payload(body: dict[str, Any]) -> Payload:
    return REPRIORITISED, {"new_priority": priority_of(body)}


# The action in the URL -> how its body becomes the event payload.
JOB_ACTIONS: dict[str, Callable[[dict[str, Any]], Payload]] = {
    "cancel": cancel_payload,
    "preempt": preempt_payload,
    "reprioritize": reprioritise_payload,
}
JOB_SET_ACTIONS: dict[str, Callable[[dict[str, Any]], Payload]] = {
    "cancel": cancel_payload,
    "reprioritize": reprioritise_payload,
}
