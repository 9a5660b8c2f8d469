"""At-least-once delivery: re-delivered events must leave the job exactly as one delivery does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.domain.jobs import RECENT_EVENT_IDS, apply_event
from streams.domain.states import TransitionRefused
from tests.kit.jobs import ENVELOPE, Events

CATEGORIES = ["container_error", "lease_returned", "lease_expired", "preempted", "cancelled", "deadline_exceeded"]
ACTIONS = [
    "lease",
    "pending",
    "running",
    "run_succeeded",
    "run_failed",
    "run_failed_no_run",
    "run_preempted",
    "succeeded",
    "failed",
    "cancelled",
    "preempted",
    "requeued",
    "cancel_requested",
    "preempt_requested",
    "reprioritised",
    "validated",
]
# Re-delivered after newer events *beyond* the id window these act again: a reprioritisation wins
# again (last writer wins), and a preempt request dropped while the job had no run would preempt
# the run it has by then.
ORDER_SENSITIVE = {"JobReprioritised", "JobPreemptRequested"}

TERMINAL_ACTIONS = {"succeeded", "failed", "cancelled", "preempted"}
# Job-ending actions are rarer so histories run long enough to exercise requeues and re-leases.
WEIGHTED_ACTIONS = [a for a in ACTIONS for _ in range(1 if a in TERMINAL_ACTIONS else 6)]
action = st.tuples(st.sampled_from(WEIGHTED_ACTIONS), st.integers(0, 2), st.sampled_from(CATEGORIES), st.integers(0, 3))
actions = st.lists(action, max_size=45)
redeliveries = st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, RECENT_EVENT_IDS - 1)), max_size=25)
# (action, how many runs back, run failure category, a number for ids and exit codes)
Step = tuple[str, int, str, int]
Event = tuple[str, dict[str, Any]]


def _event(ev: Events, job: dict[str, Any], name: str, back: int, category: str, number: int, run_counter: list[int]) -> Event:
    runs = [run["run_id"] for run in job["runs"]]
    run_id = runs[-1 - back] if back < len(runs) else "r-unknown"
    if name == "lease":
        run_counter[0] += 1
        return ev.leased(f"r{run_counter[0]}", node=f"node-{number}")
    simple: dict[str, Event] = {
        "pending": ("JobRunPending", {"run_id": run_id}),
        "running": ("JobRunRunning", {"run_id": run_id, "node": None if number == 0 else f"node-{number}"}),
        "run_succeeded": ("JobRunSucceeded", {"run_id": run_id}),
        "run_preempted": ("JobRunPreempted", {"run_id": run_id, "reason": f"preempted {number}", "preemptor_job_id": None}),
        "succeeded": ("JobSucceeded", {"run_id": run_id}),
        "failed": ("JobFailed", {"reason": "failed", "message": str(number), "exit_code": number}),
        "cancelled": ("JobCancelled", {"run_id": run_id, "reason": "cancelled"}),
        "preempted": ("JobPreempted", {"run_id": run_id, "reason": "preempted"}),
        "requeued": ("JobRequeued", {"run_id": run_id, "reason": f"requeued {number}", "avoid_nodes": []}),
        "cancel_requested": ("JobCancelRequested", {"reason": f"cancel {number}"}),
        "preempt_requested": ("JobPreemptRequested", {"reason": f"preempt {number}"}),
        "reprioritised": ("JobReprioritised", {"new_priority": float(number)}),
        "validated": ("JobValidated", {"pools": []}),
    }
    if name in ("run_failed", "run_failed_no_run"):
        return ev.run_failed(run_id if name == "run_failed" else None, category=category, exit_code=number)
    kind, payload = simple[name]
    return ev(kind, **payload)


def accepted_sequence(steps: list[Step]) -> list[Event]:
    """The events of ``steps`` that the fold accepts, in order: a history the system could write."""
    ev, run_counter = Events(), [0]
    history = [ev.submitted()]
    job = apply_event(None, *history[0], ENVELOPE)
    for step in steps:
        assert job is not None, "the job was submitted first"
        candidate = _event(ev, job, *step, run_counter)
        try:
            job = apply_event(job, *candidate, ENVELOPE)
        except TransitionRefused:
            continue
        history.append(candidate)
    return history


def with_redeliveries(
    history: list[Event], redelivered: list[tuple[int, int]], allowed: Callable[[str, dict[str, Any]], bool] = lambda kind, event: True
) -> list[Event]:
    """``history`` with copies of some events re-inserted 1..31 positions after the original."""
    after: dict[int, list[Event]] = {}
    for source, gap in redelivered:
        index = source % len(history)
        if allowed(*history[index]):
            after.setdefault(min(index + gap - 1, len(history) - 1), []).append(history[index])
    result = []
    for index, event in enumerate(history):
        result.append(event)
        result.extend(after.get(index, []))
    return result


def fold(history: list[Event], forget_ids: bool = False) -> dict[str, Any]:
    job: dict[str, Any] | None = None
    for kind, event in history:
        if forget_ids and job is not None:
            job = {**job, "recent_event_ids": []}
        job = apply_event(job, kind, event, ENVELOPE)
    assert job is not None, "a history starts with the job's submission"
    return job


def without_ids(job: dict[str, Any]) -> dict[str, Any]:
    return {**job, "recent_event_ids": None}


@settings(max_examples=400, deadline=None)
@given(actions, redeliveries)
def test_redeliveries_within_the_id_window_change_nothing(steps: list[Step], redelivered: list[tuple[int, int]]) -> None:
    history = accepted_sequence(steps)
    assert fold(with_redeliveries(history, redelivered)) == fold(history)


@settings(max_examples=400, deadline=None)
@given(actions, st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 60)), max_size=25))
def test_state_machines_alone_make_redeliveries_harmless(steps: list[Step], redelivered: list[tuple[int, int]]) -> None:
    """With the id window forgotten before every event, only the transition checks protect."""

    def allowed(kind: str, event: dict[str, Any]) -> bool:
        return kind not in ORDER_SENSITIVE and not (kind == "JobRunFailed" and event["payload"]["run_id"] is None)

    history = accepted_sequence(steps)
    expected = without_ids(fold(history, forget_ids=True))
    assert without_ids(fold(with_redeliveries(history, redelivered, allowed), forget_ids=True)) == expected


def test_generator_covers_requeue_and_every_terminal_state() -> None:
    seen = set()
    scripts: dict[str, list[Step]] = {
        "succeeded": [("lease", 0, "container_error", 1), ("running", 0, "container_error", 0), ("succeeded", 0, "container_error", 0)],
        "failed": [("lease", 0, "container_error", 1), ("run_failed", 0, "container_error", 1), ("failed", 0, "container_error", 1)],
        "cancelled": [("cancel_requested", 0, "container_error", 1), ("cancelled", 0, "container_error", 1)],
        "preempted": [("lease", 0, "container_error", 1), ("run_preempted", 0, "preempted", 1), ("preempted", 0, "preempted", 1)],
        "queued": [("lease", 0, "container_error", 1), ("requeued", 0, "lease_returned", 1)],
    }
    for expected, script in scripts.items():
        job = fold(accepted_sequence(script))
        seen.add(job["state"])
        assert job["state"] == expected
    assert seen == set(scripts)
