"""Cancel, preempt and reprioritise requests: their bodies checked, and the event payload each writes.

Kept apart from the views so the rules a caller meets (what a body may hold, what each action
puts on the log) are plain functions, tested without a server.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from streams.api.errors import ApiError
from streams.domain.events import Payload
from streams.domain.states import ACTIVE, UNFINISHED

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


# ---------------------------------------------------------------------------- many jobs at once


@dataclass(frozen=True)
class JobFilter:
    """Which unfinished jobs a queue- or executor-wide request acts on; an empty set matches any.

    A job's pool is its latest run's; a queued job may still go to any pool, so it is in every one.
    """

    states: frozenset[str]
    queues: frozenset[str] = frozenset()
    priority_classes: frozenset[str] = frozenset()
    pools: frozenset[str] = frozenset()
    executor: str | None = None

    def matches(self, job: dict[str, Any]) -> bool:
        if job["state"] not in self.states:
            return False
        if (self.queues and job["queue"] not in self.queues) or (
            self.priority_classes and job["priority_class"] not in self.priority_classes
        ):
            return False
        run = job["runs"][-1] if job["state"] in ACTIVE and job["runs"] else None
        if self.executor is not None and (run is None or run["executor"] != self.executor):
            return False
        return not self.pools or run is None or run.get("pool") in self.pools


def _names(body: dict[str, Any], field: str) -> frozenset[str]:
    raw = body.get(field) or []
    if not isinstance(raw, list) or not all(isinstance(name, str) and name for name in raw):
        raise ApiError(400, f"{field} must be a list of names, not {raw!r}")
    return frozenset(raw)


def queue_filter(body: dict[str, Any], action: str) -> tuple[JobFilter, str]:
    """A queue-wide cancel or preempt body: ``priority_classes``, ``pools`` (none: any), a cancel's
    ``job_states`` (required, of queued, leased, pending, running) and a ``reason``."""
    fields = ("priority_classes", "pools", "reason") + (("job_states",) if action == "cancel" else ())
    _only(body, *fields)
    reason = reason_of({"reason": body.get("reason")})
    if action == "preempt":
        return JobFilter(ACTIVE, priority_classes=_names(body, "priority_classes"), pools=_names(body, "pools")), reason
    states = _names(body, "job_states")
    if not states:
        raise ApiError(400, f"job_states is required: the states of the jobs to cancel, of {', '.join(UNFINISHED)}")
    unknown = sorted(states - set(UNFINISHED))
    if unknown:
        raise ApiError(400, f"job_states may name {', '.join(UNFINISHED)} (unfinished jobs), not {', '.join(unknown)}")
    return JobFilter(states, priority_classes=_names(body, "priority_classes"), pools=_names(body, "pools")), reason


def executor_filter(body: dict[str, Any], executor: str, action: str) -> tuple[JobFilter, str]:
    """An executor-wide cancel or preempt body: ``queues``, ``priority_classes``, ``pools`` (none: any) and a ``reason``."""
    _only(body, "queues", "priority_classes", "pools", "reason")
    reason = reason_of({"reason": body.get("reason")})
    found = JobFilter(
        ACTIVE,
        queues=_names(body, "queues"),
        priority_classes=_names(body, "priority_classes"),
        pools=_names(body, "pools"),
        executor=executor,
    )
    return found, reason


def bulk_payload(action: str, reason: str, source: str) -> Payload:
    """The event a queue- or executor-wide request writes for each job it matches."""
    why = reason or f"{'cancelled' if action == 'cancel' else 'preempted'} by {source}"
    return (CANCEL_REQUESTED if action == "cancel" else PREEMPT_REQUESTED), {"reason": why}


def matching(jobs: Iterable[dict[str, Any]], job_filter: JobFilter) -> list[dict[str, Any]]:
    return sorted((job for job in jobs if job_filter.matches(job)), key=lambda job: job["job_id"])
