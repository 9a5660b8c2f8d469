"""Reads of this worker's replicas that answer 404 when the thing named in the URL is unknown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streams.api.http import ApiError

if TYPE_CHECKING:
    from streams.app import ControlPlane


def queue_or_404(plane: ControlPlane, name: str) -> dict[str, Any]:
    queue = plane.queues.get(name)
    if queue is None:
        raise ApiError(404, f"queue {name!r} does not exist")
    return queue


def job_or_404(plane: ControlPlane, job_id: str) -> dict[str, Any]:
    job = plane.jobs.get(job_id)
    if job is None:
        raise ApiError(404, f"job {job_id!r} not found")
    return job
