"""How many jobs of a job set are in each state, folded on the client from the job set's event stream.

The server's fold (streams.domain.jobs) keeps whole jobs and refuses contradictions; a watcher needs
only each job's state and latest run, and must never stop on an event it did not expect, so this
fold is smaller and lenient. A job set's events arrive in log order, but a report about a run that
was since replaced can follow the new lease: such reports are recognised by their run id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from streams.domain.states import JOB_STATE_ORDER, JOB_TERMINAL

# The state an event puts its job in; other kinds (requests, reprioritisations, run-level endings
# that the job-level event follows) leave it where it is.
STATE_AFTER_KIND = {
    "JobSubmitted": "queued",
    "JobRequeued": "queued",
    "JobLeased": "leased",
    "JobRunPending": "pending",
    "JobRunRunning": "running",
    "JobSucceeded": "succeeded",
    "JobFailed": "failed",
    "JobCancelled": "cancelled",
    "JobPreempted": "preempted",
}
# Reports about one run: they move the job only while that run is its latest.
RUN_REPORTS = frozenset({"JobRunPending", "JobRunRunning", "JobRequeued"})
# An executor's reports can arrive out of order; a run never goes back from running to pending.
_ORDER = {"leased": 0, "pending": 1, "running": 2}


def state_after(current: str | None, kind: str) -> str | None:
    """The job's new state after an event of ``kind`` (``None``: unchanged); ``current`` is ``None`` for a job not seen yet."""
    target = STATE_AFTER_KIND.get(kind.rsplit(".", 1)[-1])
    if target is None or target == current or current in JOB_TERMINAL:
        return None
    if current in _ORDER and target in _ORDER and _ORDER[target] < _ORDER[current]:
        return None
    return target


@dataclass
class JobSetCounts:
    """Each job's state and latest run, from the events applied so far."""

    states: dict[str, str] = field(default_factory=dict)
    latest_runs: dict[str, str] = field(default_factory=dict)

    def apply(self, record: dict[str, Any]) -> bool:
        """Fold one event of the stream (the server's JSON record); True if a job changed state."""
        job_id = record.get("job_id")
        if not job_id:
            return False  # a job-set request: the scheduler answers it with per-job events
        kind = str(record.get("kind", "")).rsplit(".", 1)[-1]
        run_id = (record.get("payload") or {}).get("run_id")
        new = state_after(self.states.get(job_id), kind)
        if new is None:
            return False
        if kind in RUN_REPORTS and run_id and self.latest_runs.get(job_id, run_id) != run_id:
            return False
        if kind == "JobLeased" and run_id:
            self.latest_runs[job_id] = run_id
        self.states[job_id] = new
        return True

    def counts(self) -> dict[str, int]:
        found = dict.fromkeys(JOB_STATE_ORDER, 0)
        for state in self.states.values():
            found[state] += 1
        return found

    @property
    def done(self) -> bool:
        """Every job seen has finished (and there is at least one)."""
        return bool(self.states) and all(state in JOB_TERMINAL for state in self.states.values())
