"""What a folded job change means for the scheduler and for executors.

The job-state agent is the one place where every job change is seen in order, with the full
spec at hand. So it tells the scheduler (through the feed) when the job's scheduling view
changed, and it tells executors to start a run the fold accepted or to stop a run the job no
longer has. Sending commands only for accepted transitions means a lease the fold refused
(say, the job was cancelled first) never reaches an executor.
"""

from __future__ import annotations

from typing import Any

from streams.domain.feed import JobDelta, spec_fields, state_fields
from streams.domain.states import RUN_TERMINAL

_ACTIVE_RUN = frozenset({"leased", "pending", "running"})
# The job-level ends that stop a run, and the command that stops it.
_STOP_COMMAND = {"cancelled": "cancel_run", "preempted": "preempt_run", "failed": "cancel_run"}


def _significant(fields: dict[str, Any]) -> dict[str, Any]:
    """Pending and running hold the same resources: the scheduler need not hear of the step.

    The job's state moves along with its latest run's, so both are compared as "active"."""
    if fields["run_state"] not in _ACTIVE_RUN:
        return fields
    return {**fields, "run_state": "active", "state": "active" if fields["state"] in _ACTIVE_RUN else fields["state"]}


def feed_change(before: dict[str, Any] | None, after: dict[str, Any]) -> JobDelta | None:
    """The delta to forward, or None when the scheduler's view of the job did not change.

    The fold never changes a job's spec, so only the part its events change is compared, and
    the spec is read only for a delta that is sent."""
    state = state_fields(after)
    if before is not None and _significant(state_fields(before)) == _significant(state):
        return None
    return JobDelta(**state, **spec_fields(after["spec"]))


def executor_command(before: dict[str, Any] | None, after: dict[str, Any], command_id: str, now_ms: int) -> dict[str, Any] | None:
    """An executor_command record for the executor concerned, or None."""
    if before is None:
        return None
    if len(after["runs"]) > len(before["runs"]) and after["state"] == "leased":
        run = after["runs"][-1]
        return _command(after, run, "lease", command_id, now_ms, spec=after["spec"], node=run["node"])
    kind = _STOP_COMMAND.get(after["state"])
    if kind is None or before["state"] == after["state"]:
        return None
    stopped = [
        new for old, new in zip(before["runs"], after["runs"]) if old["state"] not in RUN_TERMINAL and new["state"] in RUN_TERMINAL
    ]
    if not stopped:
        return None
    return _command(after, stopped[-1], kind, command_id, now_ms, reason=after["reason"])


def _command(job: dict[str, Any], run: dict[str, Any], kind: str, command_id: str, now_ms: int, **extra: Any) -> dict[str, Any]:
    pod = job["spec"].get("pod_spec") or {}
    return {
        "command_id": command_id,
        "executor": run["executor"],
        "kind": kind,
        "job_id": job["job_id"],
        "run_id": run["run_id"],
        "queue": job["queue"],
        "job_set_id": job["job_set_id"],
        "node": extra.get("node"),
        "spec": extra.get("spec"),
        "grace_period_seconds": int(pod.get("termination_grace_period_seconds") or 1),
        "reason": extra.get("reason"),
        "created": now_ms,
    }
