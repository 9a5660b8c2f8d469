"""Executor commands: the one builder of `executor_command` records, and when the fold sends one.

The job-state agent is the one place where every job change is seen in order, with the full spec
at hand, so it tells executors to start a run the fold accepted or to stop a run the job no
longer has. Sending commands only for accepted transitions means a lease the fold refused (say,
the job was cancelled first) never reaches an executor. The scheduling cycle sends the one other
kind, a stop for an orphan run no job owns any more, through the same builder.
"""

from __future__ import annotations

from typing import Any

from streams.domain.states import RUN_TERMINAL

# The job-level ends that stop a run, and the command that stops it.
_STOP_COMMAND = {"cancelled": "cancel_run", "preempted": "preempt_run", "failed": "cancel_run"}


def command(
    *,
    command_id: str,
    executor: str,
    kind: str,
    job_id: str,
    run_id: str,
    queue: str,
    job_set_id: str,
    grace_period_s: int,
    created: int,
    node: str | None = None,
    spec: dict[str, Any] | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """An `executor_command` record: ``kind`` is lease (with node and spec), cancel_run or preempt_run."""
    return {
        "command_id": command_id,
        "executor": executor,
        "kind": kind,
        "job_id": job_id,
        "run_id": run_id,
        "queue": queue,
        "job_set_id": job_set_id,
        "node": node,
        "spec": spec,
        "grace_period_seconds": grace_period_s,
        "reason": reason,
        "created": created,
    }


def executor_command(before: dict[str, Any] | None, after: dict[str, Any], command_id: str, now_ms: int) -> dict[str, Any] | None:
    """The command a folded job change sends to the executor concerned, or None."""
    if before is None:
        return None
    if len(after["runs"]) > len(before["runs"]) and after["state"] == "leased":
        run = after["runs"][-1]
        return _job_command(after, run, "lease", command_id, now_ms, spec=after["spec"], node=run["node"])
    kind = _STOP_COMMAND.get(after["state"])
    if kind is None or before["state"] == after["state"]:
        return None
    stopped = [
        new
        for old, new in zip(before["runs"], after["runs"], strict=False)
        if old["state"] not in RUN_TERMINAL and new["state"] in RUN_TERMINAL
    ]
    if not stopped:
        return None
    return _job_command(after, stopped[-1], kind, command_id, now_ms, reason=after["reason"])


def _job_command(job: dict[str, Any], run: dict[str, Any], kind: str, command_id: str, now_ms: int, **extra: Any) -> dict[str, Any]:
    pod = job["spec"].get("pod_spec") or {}
    return command(
        command_id=command_id,
        executor=run["executor"],
        kind=kind,
        job_id=job["job_id"],
        run_id=run["run_id"],
        queue=job["queue"],
        job_set_id=job["job_set_id"],
        grace_period_s=int(pod.get("termination_grace_period_seconds") or 1),
        created=now_ms,
        **extra,
    )
