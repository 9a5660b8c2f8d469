"""Cancel, preempt and reprioritise over REST: per job and per job set, each answered once its event is on the log.

A per-job request takes the job's queue and job set from this worker's jobs table, so its event
lands on the job set's key with every other event of the job. A job-set request writes one event
without a job id; the job-state agent hands it to the scheduler, which applies it to every
unfinished job of the set at its next cycle. The answer is 202: the request is on the log, and
what it does happens later (a cancelled job shows `JobCancelled` on the job set's event stream).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faust import web

from streams.api.control_requests import JOB_ACTIONS, JOB_SET_ACTIONS
from streams.api.operations import Operations
from streams.api.rest.http import answers_errors, caller, json_body

if TYPE_CHECKING:
    from streams.plane import ControlPlane


def register(plane: ControlPlane, ops: Operations) -> None:
    app = plane.app

    @app.page(f"/api/v1/jobs/{{job_id}}/{{action:{'|'.join(JOB_ACTIONS)}}}")
    class JobControl(web.View):
        @answers_errors
        async def post(self, request: web.Request, job_id: str, action: str) -> web.Response:
            principal = caller(plane.auth, request)
            payload = JOB_ACTIONS[action](await json_body(request, optional=True))
            event_id = await ops.control_job(principal, job_id, payload)
            return self.json({"event_ids": [event_id]}, status=202)

    @app.page(f"/api/v1/queues/{{queue}}/jobsets/{{job_set}}/{{action:{'|'.join(JOB_SET_ACTIONS)}}}")
    class JobSetControl(web.View):
        @answers_errors
        async def post(self, request: web.Request, queue: str, job_set: str, action: str) -> web.Response:
            principal = caller(plane.auth, request)
            payload = JOB_SET_ACTIONS[action](await json_body(request, optional=True))
            event_id = await ops.control_job_set(principal, queue, job_set, payload)
            return self.json({"event_ids": [event_id]}, status=202)
