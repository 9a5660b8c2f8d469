"""The JSON view of a job shared by the REST API and ``flotilla job status --json``."""

from __future__ import annotations

from typing import Any

_RUN_FIELDS = ("run_id", "executor", "node", "state", "exit_code", "reason", "leased_at", "started_at", "finished_at")


def job_view(job: dict[str, Any]) -> dict[str, Any]:
    """A stable, JSON-serialisable summary: the spec is left out because it can be 64 KiB."""
    return {
        "job_id": job["job_id"],
        "queue": job["queue"],
        "job_set": job["job_set_id"],
        "client_id": job["client_id"],
        "state": job["state"].lower(),
        "priority": job["priority"],
        "priority_class": job["priority_class"],
        "submitted": job["submitted"],
        "last_transition": job["last_transition"],
        "cancel_requested": job["cancel_requested"],
        "preempt_requested": job["preempt_requested"],
        "reason": job["reason"],
        "runs": [{field: run[field] for field in _RUN_FIELDS} for run in job["runs"]],
    }
