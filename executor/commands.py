"""Executor commands as the runtime acts on them: a lease to launch, or a run to kill."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from executor.backend import Lease

_KILL_OUTCOMES = {"cancel_run": "cancelled", "preempt_run": "preempted"}
DEFAULT_GRACE_S = 30.0


class CommandError(ValueError):
    """A command the executor cannot act on; it is logged and skipped."""


@dataclass(frozen=True)
class Kill:
    run_id: str
    grace_period_s: float
    outcome: str  # cancelled or preempted


def parse_command(record: dict[str, Any]) -> Lease | Kill:
    """The action of a decoded ``executor_command``."""
    kind = record["kind"]
    if kind == "lease":
        if record.get("spec") is None or not record.get("node"):
            raise CommandError(f"lease {record['run_id']} has no {'spec' if record.get('spec') is None else 'node'}")
        return Lease(
            job_id=record["job_id"],
            run_id=record["run_id"],
            queue=record["queue"],
            job_set_id=record["job_set_id"],
            node=record["node"],
            spec=record["spec"],
        )
    if kind in _KILL_OUTCOMES:
        grace = record.get("grace_period_seconds")
        return Kill(record["run_id"], DEFAULT_GRACE_S if grace is None else float(grace), _KILL_OUTCOMES[kind])
    raise CommandError(f"unknown command kind {kind!r} for run {record['run_id']}")
