"""Job and run state machines as explicit transition tables.

Events arrive at least once and executors report asynchronously, so the fold meets three kinds
of event: ones that move a state forward (allowed here), ones that restate or lag behind where a
job or run already is (harmless no-ops), and ones that contradict it (refused, so the caller logs
them instead of the table silently absorbing a corrupt state).
"""

from __future__ import annotations

# A job or run in one of these states holds resources on a node: jobs and runs share the names.
ACTIVE = frozenset({"leased", "pending", "running"})

JOB_TERMINAL = frozenset({"succeeded", "failed", "cancelled", "preempted"})
JOB_STATES = frozenset({"queued"}) | ACTIVE | JOB_TERMINAL
# The order lists, counts and messages show job states in: a job's progress, then the ways it can end.
JOB_STATE_ORDER = ("queued", "leased", "pending", "running", "succeeded", "failed", "cancelled", "preempted")
UNFINISHED = tuple(state for state in JOB_STATE_ORDER if state not in JOB_TERMINAL)

JOB_TRANSITIONS: dict[str, frozenset[str]] = {
    "queued": frozenset({"leased", "cancelled", "failed"}),
    "leased": frozenset({"pending", "running", "queued"}) | JOB_TERMINAL,
    "pending": frozenset({"running", "queued"}) | JOB_TERMINAL,
    "running": frozenset({"queued"}) | JOB_TERMINAL,
    **{state: frozenset() for state in JOB_TERMINAL},
}

RUN_TERMINAL = frozenset({"succeeded", "failed", "preempted", "cancelled", "lease_expired", "lease_returned"})
RUN_STATES = ACTIVE | RUN_TERMINAL
RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    "leased": frozenset({"pending", "running"}) | RUN_TERMINAL,
    "pending": frozenset({"running"}) | RUN_TERMINAL,
    "running": RUN_TERMINAL,
    **{state: frozenset() for state in RUN_TERMINAL},
}

# How far along a job or run is: a report of a state already passed is late, not wrong.
_JOB_PROGRESS = {"queued": 0, "leased": 1, "pending": 2, "running": 3}
_RUN_PROGRESS = {"leased": 0, "pending": 1, "running": 2, **{state: 3 for state in RUN_TERMINAL}}


class TransitionRefused(ValueError):
    """An event contradicts the state it was applied to; the state is left unchanged."""


def job_transition(job_id: str, current: str, target: str) -> bool:
    """True if the job should move to ``target``, False if that is a duplicate or already passed."""
    if target in JOB_TRANSITIONS[current]:
        return True
    if target == current or (target in _JOB_PROGRESS and current in _JOB_PROGRESS and _JOB_PROGRESS[target] < _JOB_PROGRESS[current]):
        return False
    raise TransitionRefused(f"job {job_id}: cannot go from {current} to {target}")


def run_transition(run_id: str, current: str, target: str) -> bool:
    """True if the run should move to ``target``, False if that is a duplicate or already passed."""
    if target in RUN_TRANSITIONS[current]:
        return True
    if target == current or _RUN_PROGRESS[target] < _RUN_PROGRESS[current]:
        return False
    raise TransitionRefused(f"run {run_id}: cannot go from {current} to {target}")
