"""What a backend's run change means on the log: Armada run events, batched per job set.

Pure: the runtime supplies the clock readings and the id factory, so tests pin every field.
A run's end carries the job's end too where the executor is the authority on it (the job's
container succeeded or failed); a returned lease, a cancellation or a preemption is only the
run's end, and the control plane decides what becomes of the job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from executor.backend import RunStatus
from streams.domain.events import Payload, event, sequence_key, sequences


@dataclass(frozen=True)
class Change:
    """A run's new state and when the executor saw it (epoch ms)."""

    status: RunStatus
    seen_ms: int


def _is_deadline(reason: str) -> bool:
    # the local and fake backends say deadline_exceeded, Kubernetes says DeadlineExceeded
    return reason.replace("_", "").lower() == "deadlineexceeded"


def _run_failed(status: RunStatus, category: str, retryable: bool, reason: str | None = None) -> Payload:
    return (
        "flotilla.JobRunFailed",
        {
            "run_id": status.run_id,
            "reason": reason if reason is not None else (status.reason or status.state),
            "message": status.message,
            "exit_code": status.exit_code,
            "category": category,
            "retryable": retryable,
        },
    )


def run_payloads(status: RunStatus) -> list[Payload]:
    """The events that report ``status``, in order."""
    state, run_id = status.state, status.run_id
    if state == "pending":
        return [("flotilla.JobRunPending", {"run_id": run_id})]
    if state == "running":
        return [("flotilla.JobRunRunning", {"run_id": run_id, "node": status.node})]
    if state == "succeeded":
        return [("flotilla.JobRunSucceeded", {"run_id": run_id}), ("flotilla.JobSucceeded", {"run_id": run_id})]
    if state == "failed":
        category = "deadline_exceeded" if _is_deadline(status.reason) else "container_error"
        reason = status.reason or "failed"
        return [
            _run_failed(status, category, retryable=False, reason=reason),
            ("flotilla.JobFailed", {"reason": reason, "message": status.message, "exit_code": status.exit_code}),
        ]
    if state == "returned":
        return [_run_failed(status, "lease_returned", retryable=True)]
    if state == "preempted":
        return [("flotilla.JobRunPreempted", {"run_id": run_id, "reason": status.reason or "preempted", "preemptor_job_id": None})]
    if state == "cancelled":
        return [_run_failed(status, "cancelled", retryable=False, reason="cancelled")]
    raise ValueError(f"run {run_id}: unknown run state {state!r}")


def event_sequences(changes: Iterable[Change], executor_id: str, new_id: Callable[[int], str]) -> list[tuple[str, dict[str, Any]]]:
    """``(key, event_sequence record)`` pairs: one per queue and job set, in the order first seen.

    ``new_id(ms)`` returns a fresh event id (a ULID) for that time.
    """
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for change in changes:
        status = change.status
        events = grouped.setdefault((status.queue, status.job_set_id), [])
        events.extend(event(new_id(change.seen_ms), change.seen_ms, status.job_id, payload) for payload in run_payloads(status))
    user = f"executor:{executor_id}"
    return [
        (sequence_key(queue, job_set_id), sequence)
        for (queue, job_set_id), events in grouped.items()
        for sequence in sequences(queue, job_set_id, user, (), events)
    ]
