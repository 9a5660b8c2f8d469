"""The replay reads the API serves, answered from the worker's broker log as the commands answer them.

- a job as the log said at a time (`GET /api/v1/jobs/{job_id}?at=TIME`): `events` folded up to then;
- the queues at a time, with their queued and running jobs and usage (`GET /api/v1/queues?at=TIME`);
- the audit of the scheduler's cycles (`GET /api/v1/audit?since=TIME&until=TIME`), administrators only.

Each reads the whole log up to its time with the commands' own functions (`streams.replay`), on a
thread of its own with its own consumers, so the worker's event loop goes on serving; the read
costs CPU in proportion to the log (README: "Audit and recovery from the log"), so the commands
with ``--from-archive`` are the way to ask these of a large log without loading the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streams.api.errors import ApiError
from streams.api.operations import Operations
from streams.auth.principal import Principal
from streams.domain.views import job_view
from streams.replay.source import LogUnavailable
from streams.replay.times import parse_time

if TYPE_CHECKING:
    from streams.plane import ControlPlane


def moment(query: Mapping[str, str], name: str) -> int | None:
    """The time a query parameter names (ISO 8601 or epoch ms), None when absent; 400 when it is no time."""
    text = query.get(name)
    if text is None:
        return None
    try:
        return parse_time(text)
    except ValueError as exc:
        raise ApiError(400, f"{name}: {exc}") from exc


async def job_at(plane: ControlPlane, ops: Operations, principal: Principal, job_id: str, at: int) -> dict[str, Any]:
    from streams.replay.jobs import job_at as fold_job

    job = await _on_the_log(plane, lambda log: fold_job(log, job_id, at))
    if job is None:
        raise ApiError(404, f"job {job_id!r} not found on the log as of {at}")
    ops.check_watch(principal, job)
    return {**job_view(job), "as_of": at}


async def queues_at(plane: ControlPlane, at: int) -> dict[str, Any]:
    from streams.replay.jobs import fold_queues

    return {"as_of": at, "queues": await _on_the_log(plane, lambda log: fold_queues(log, at))}


async def audit(plane: ControlPlane, principal: Principal, since: int | None, until: int | None) -> dict[str, Any]:
    from streams.replay.audit import audit as run_audit
    from streams.replay.cycles import Configurations

    plane.permissions.check_admin(principal, "audit the scheduler's cycles")
    configurations = Configurations([plane.configuration])
    report = await _on_the_log(plane, lambda log: run_audit(log, configurations, since_ms=since, until_ms=until))
    return dict(report.to_json())


async def _on_the_log(plane: ControlPlane, read: Any) -> Any:
    """``read(log)`` over the worker's broker log, on a thread; 503 when the log cannot answer."""
    from streams.replay.broker import BrokerLog

    def run() -> Any:
        with BrokerLog(plane.settings) as log:
            return read(log)

    try:
        return await asyncio.to_thread(run)
    except LogUnavailable as exc:
        raise ApiError(503, str(exc)) from exc
