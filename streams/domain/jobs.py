"""The fold of job events into the ``job_state`` record.

Delivery is at least once, so applying an event twice must change nothing. The last
``RECENT_EVENT_IDS`` applied event ids catch re-deliveries cheaply; behind that window the state
machines do the work: a lease names a run that already exists, a run report names a state the
run has passed, a flag is already set. Two events rely on the window alone: a reprioritisation
(last writer wins) and a preempt request dropped because the job had no run to preempt. A
re-delivery of either more than ``RECENT_EVENT_IDS`` events later would act again.

The input job is never mutated. When an event changes nothing the same object is returned, so
the caller can skip publishing with ``new is old``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streams.domain.states import JOB_TERMINAL, RUN_TERMINAL, TransitionRefused, job_transition, run_transition

RECENT_EVENT_IDS = 32

Job = dict[str, Any]

# JobRunFailed categories that name their own run state; every other category means "failed".
_RUN_STATE_BY_CATEGORY = {
    "lease_expired": "lease_expired",
    "lease_returned": "lease_returned",
    "preempted": "preempted",
    "cancelled": "cancelled",
}


# Event kinds by the names events give them: a few, looked up for every event folded.
_KINDS: dict[str, str] = {}


def event_kind(kind: str) -> str:
    """``flotilla.JobLeased`` and ``JobLeased`` name the same payload."""
    found = _KINDS.get(kind)
    if found is None:
        found = kind.rsplit(".", 1)[-1]
        if len(_KINDS) < 1_024:  # names no schema has are not kept
            _KINDS[kind] = found
    return found


def apply_event(job: Job | None, kind: str, event: dict[str, Any], envelope: dict[str, Any]) -> Job | None:
    """The job after ``event`` (an ``Event`` record of kind ``kind``) from sequence ``envelope``.

    Returns ``None`` for an event about a job that was never submitted, ``job`` itself when the
    event is a duplicate, stale or about a finished job, and a new dict otherwise. Raises
    ``TransitionRefused`` when the event contradicts the job's state, and for unknown kinds.
    """
    name = event_kind(kind)
    handler = _HANDLERS.get(name)
    if handler is None:
        raise TransitionRefused(f"unknown event kind {kind!r}")
    payload = event["payload"]
    if isinstance(payload, tuple):  # fastavro's return_record_name=True form
        payload = payload[1]
    if job is None:
        return _submitted(event, payload, envelope) if name == "JobSubmitted" else None
    if event["event_id"] in job["recent_event_ids"] or job["state"] in JOB_TERMINAL:
        return job
    draft = {**job, "runs": [dict(run) for run in job["runs"]]}
    if not handler(draft, event["created"], payload):
        return job
    if draft["state"] != job["state"]:
        draft["last_transition"] = event["created"]
    draft["recent_event_ids"] = [*job["recent_event_ids"], event["event_id"]][-RECENT_EVENT_IDS:]
    return draft


def _submitted(event: dict[str, Any], payload: dict[str, Any], envelope: dict[str, Any]) -> Job:
    return {
        "job_id": event["job_id"],
        "queue": envelope["queue"],
        "job_set_id": envelope["job_set_id"],
        "client_id": payload.get("client_id"),
        "state": "queued",
        "priority": payload["priority"],
        "priority_class": payload["priority_class"],
        "submitted": event["created"],
        "last_transition": event["created"],
        "cancel_requested": False,
        "preempt_requested": False,
        # Shared, not copied: no handler ever writes into the spec (reprioritising changes the
        # job's own priority), and copying it was a measurable share of ingest time.
        "spec": payload,
        "runs": [],
        "reason": None,
        "recent_event_ids": [event["event_id"]],
    }


def _find_run(job: Job, run_id: str | None) -> dict[str, Any] | None:
    for run in job["runs"]:  # a loop, not next() over a generator: ~2% of a refold's fold (py-spy, bench/fold.py)
        if run["run_id"] == run_id:
            return run
    return None


def _latest_run(job: Job) -> dict[str, Any] | None:
    return job["runs"][-1] if job["runs"] else None


def _move_job(job: Job, target: str) -> bool:
    if not job_transition(job["job_id"], job["state"], target):
        return False
    job["state"] = target
    return True


def _move_run(job: Job, run_id: str | None, target: str, at: int) -> dict[str, Any] | None:
    """The run moved to ``target``, or ``None`` when the run was already there or past it."""
    run = _find_run(job, run_id)
    if run is None:
        raise TransitionRefused(f"job {job['job_id']}: no run {run_id}")
    if not run_transition(run_id or "", run["state"], target):
        return None
    run["state"] = target
    if target == "running":
        run["started_at"] = at
    if target in RUN_TERMINAL:
        run["finished_at"] = at
    return run


def _close_active_runs(job: Job, target: str, at: int) -> None:
    for run in job["runs"]:
        if run["state"] not in RUN_TERMINAL:
            _move_run(job, run["run_id"], target, at)


def _with_message(reason: str, message: str | None) -> str:
    return f"{reason}: {message}" if message else reason


def _leased(job: Job, at: int, payload: dict[str, Any]) -> bool:
    if _find_run(job, payload["run_id"]) is not None:
        return False
    if job["state"] != "queued":
        raise TransitionRefused(f"job {job['job_id']}: new run {payload['run_id']} leased while {job['state']}")
    _move_job(job, "leased")
    job["reason"] = None  # a new run: why the last one ended is no longer why the job is where it is
    job["runs"].append(
        {
            "run_id": payload["run_id"],
            "executor": payload["executor"],
            "node": payload["node"],
            "pool": payload.get("pool") or "",
            "state": "leased",
            "exit_code": None,
            "reason": None,
            "leased_at": at,
            "started_at": None,
            "finished_at": None,
        }
    )
    return True


def _run_progress(target: str) -> Callable[[Job, int, dict[str, Any]], bool]:
    """Pending and running reports move the run, and the job with it when it is the latest run."""

    def handle(job: Job, at: int, payload: dict[str, Any]) -> bool:
        run = _move_run(job, payload["run_id"], target, at)
        if run is None:
            return False
        if payload.get("node"):
            run["node"] = payload["node"]
        if run is _latest_run(job):
            _move_job(job, target)
        return True

    return handle


def _run_succeeded(job: Job, at: int, payload: dict[str, Any]) -> bool:
    return _move_run(job, payload["run_id"], "succeeded", at) is not None


def _run_failed(job: Job, at: int, payload: dict[str, Any]) -> bool:
    reason = _with_message(payload["reason"], payload.get("message"))
    if payload.get("run_id") is None:
        job["reason"] = reason  # last writer wins: see _reprioritised
        return True
    target = _RUN_STATE_BY_CATEGORY.get(payload.get("category", ""), "failed")
    run = _move_run(job, payload["run_id"], target, at)
    if run is None:
        return False
    run["exit_code"] = payload.get("exit_code")
    run["reason"] = reason
    job["reason"] = reason
    return True


def _run_preempted(job: Job, at: int, payload: dict[str, Any]) -> bool:
    run = _move_run(job, payload["run_id"], "preempted", at)
    if run is None:
        return False
    run["reason"] = job["reason"] = payload["reason"]
    return True


def _job_ending(target: str, run_target: str) -> Callable[[Job, int, dict[str, Any]], bool]:
    """Job-level terminal events end the job and whatever run is still active."""

    def handle(job: Job, at: int, payload: dict[str, Any]) -> bool:
        requested = job["reason"] if target == "cancelled" and job["cancel_requested"] else None
        _move_job(job, target)
        _close_active_runs(job, run_target, at)
        # The scheduler that ends a job on request does not know why it was asked; the job does.
        # A job that succeeded has no reason, whatever was asked of it or happened to earlier runs.
        job["reason"] = _with_message(payload["reason"], payload.get("message") or requested) if "reason" in payload else None
        latest = _latest_run(job)
        if latest is not None and latest["exit_code"] is None:
            latest["exit_code"] = payload.get("exit_code")
        return True

    return handle


def _requeued(job: Job, at: int, payload: dict[str, Any]) -> bool:
    latest = _latest_run(job)
    stale = payload.get("run_id") is not None and (latest is None or latest["run_id"] != payload["run_id"])
    if job["state"] == "queued" or stale:
        return False
    _move_job(job, "queued")
    _close_active_runs(job, "lease_returned", at)
    job["reason"] = payload["reason"]
    return True


def _flag(name: str) -> Callable[[Job, int, dict[str, Any]], bool]:
    """Requests are sticky: once asked, a job stays asked, which keeps re-delivery harmless.

    The job's reason becomes the request's (none when none was given), for the event that ends it."""

    def handle(job: Job, at: int, payload: dict[str, Any]) -> bool:
        if job[name]:
            return False
        job[name] = True
        job["reason"] = payload.get("reason") or None
        return True

    return handle


def _preempt_requested(job: Job, at: int, payload: dict[str, Any]) -> bool:
    """Preemption stops a run: a job without an active run has none to stop, and the request is
    dropped (as Armada does), not kept to preempt the job once it is next leased.

    A dropped request still counts as applied, so that its id is remembered: a re-delivery
    arriving after the job was leased is then recognised instead of preempting it. A request
    while one already stands changes nothing whatever the run's state, so that a re-delivery of
    it after the run ended is the same no-op as the first delivery was.
    """
    if job["preempt_requested"]:
        return False
    latest = _latest_run(job)
    if latest is None or latest["state"] in RUN_TERMINAL:
        return True
    return _request_preemption(job, at, payload)


def _reprioritised(job: Job, at: int, payload: dict[str, Any]) -> bool:
    """Always counts as applied, even to the current value, so that its id is remembered.

    Otherwise a re-delivery arriving after a later reprioritisation would not be recognised
    and would put the old priority back.
    """
    job["priority"] = payload["new_priority"]
    return True


def _no_change(job: Job, at: int, payload: dict[str, Any]) -> bool:
    return False


_request_preemption = _flag("preempt_requested")

_HANDLERS: dict[str, Callable[[Job, int, dict[str, Any]], bool]] = {
    "JobSubmitted": _no_change,  # only creates; a second one for a known job is a re-delivery
    "JobValidated": _no_change,
    "SchedulingCycle": _no_change,
    "JobLeased": _leased,
    "JobRunPending": _run_progress("pending"),
    "JobRunRunning": _run_progress("running"),
    "JobRunSucceeded": _run_succeeded,
    "JobRunFailed": _run_failed,
    "JobRunPreempted": _run_preempted,
    "JobSucceeded": _job_ending("succeeded", "succeeded"),
    "JobFailed": _job_ending("failed", "failed"),
    "JobCancelled": _job_ending("cancelled", "cancelled"),
    "JobPreempted": _job_ending("preempted", "preempted"),
    "JobRequeued": _requeued,
    "JobCancelRequested": _flag("cancel_requested"),
    "JobPreemptRequested": _preempt_requested,
    "JobReprioritised": _reprioritised,
}
