"""The scheduler's account of itself, from the log, for any past cycle (`streams.api.scheduler_reports`).

- `GET /api/v1/jobs/{job_id}/explain[?replay=false]`: the job's story (Armada's job report):
  its events, why it waited each cycle with its queue's shares, where it was placed, why it was
  preempted; ``report`` is the same as text.
- `GET /api/v1/queues/{queue}/scheduler-report[?cycle=ID|at=TIME]`: the queue in one cycle.
- `GET /api/v1/scheduling-report[?cycle=ID|at=TIME]`: what one cycle did, per pool and queue.

Without ``cycle`` or ``at`` a report is of the last recorded cycle. Each answer carries its
``report`` text as `flotilla explain` and `flotilla get ...-report` print it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faust import web

from streams.api.errors import ApiError
from streams.api.operations import Operations
from streams.api.rest.http import answers_errors, caller
from streams.api.scheduler_reports import SchedulerReports, parse_at
from streams.replay.report_text import job_report_text, queue_report_text, scheduling_report_text

if TYPE_CHECKING:
    from streams.plane import ControlPlane


def _cycle(request: web.Request) -> tuple[str | None, int | None]:
    cycle, at = request.query.get("cycle") or None, request.query.get("at") or None
    if cycle and at:
        raise ApiError(400, "give cycle or at, not both")
    return cycle, parse_at(at)


def register(plane: ControlPlane, ops: Operations) -> None:
    app = plane.app
    reports = SchedulerReports(plane.settings, plane.configuration, ops)

    @app.page("/api/v1/jobs/{job_id}/explain")
    class JobExplain(web.View):
        @answers_errors
        async def get(self, request: web.Request, job_id: str) -> web.Response:
            replay = request.query.get("replay", "true").lower() not in ("false", "0", "no")
            report = await reports.job(caller(plane.auth, request), job_id, replay=replay)
            return self.json({**report, "report": job_report_text(report)})

    @app.page("/api/v1/queues/{queue}/scheduler-report")
    class QueueReport(web.View):
        @answers_errors
        async def get(self, request: web.Request, queue: str) -> web.Response:
            report = await reports.queue(caller(plane.auth, request), queue, *_cycle(request))
            return self.json({**report, "report": queue_report_text(report)})

    @app.page("/api/v1/scheduling-report")
    class SchedulingReport(web.View):
        @answers_errors
        async def get(self, request: web.Request) -> web.Response:
            report = await reports.scheduling(caller(plane.auth, request), *_cycle(request))
            return self.json({**report, "report": scheduling_report_text(report)})
