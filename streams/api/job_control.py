"""Cancel, preempt and reprioritise: per job and per job set, each answered once its event is on the log.

A per-job request takes the job's queue and job set from this worker's jobs table, so its event
lands on the job set's key with every other event of the job. A job-set request writes one event
without a job id; the job-state agent hands it to the scheduler, which applies it to every
unfinished job of the set at its next cycle. The answer is 202: the request is on the log, and
what it does happens later (a cancelled job shows `JobCancelled` on the job set's event stream).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faust import web

from schemas.codec import encode
from streams.api.control_requests import JOB_ACTIONS, JOB_SET_ACTIONS, Payload, control_sequence
from streams.api.http import ApiError, answers_errors, json_body
from streams.api.lookups import job_or_404, queue_or_404
from streams.domain.ids import IdFactory, new_id
from streams.domain.states import JOB_TERMINAL

if TYPE_CHECKING:
    from streams.app import ControlPlane


def register(plane: ControlPlane, ids: IdFactory, user: str) -> None:
    app = plane.app

    async def write(queue: str, job_set_id: str, job_id: str | None, payload: Payload) -> dict[str, list[str]]:
        """The 202 answer, once the broker has acknowledged the event: the request is on the log."""
        created = ids.clock_ms()
        event_id = new_id(created, ids.rng)
        sequence = control_sequence(
            queue=queue, job_set_id=job_set_id, job_id=job_id, payload=payload, event_id=event_id, created=created, user=user
        )
        sent = await plane.topics.events.send(key=f"{queue}/{job_set_id}", value=encode("event_sequence", sequence))
        await sent
        return {"event_ids": [event_id]}

    @app.page(f"/api/v1/jobs/{{job_id}}/{{action:{'|'.join(JOB_ACTIONS)}}}")
    class JobControl(web.View):
        @answers_errors
        async def post(self, request: web.Request, job_id: str, action: str) -> web.Response:
            payload = JOB_ACTIONS[action](await json_body(request, optional=True))
            job = job_or_404(plane, job_id)
            if job["state"] in JOB_TERMINAL:
                raise ApiError(409, f"job {job_id} already finished ({job['state']}); there is nothing to {action}")
            return self.json(await write(job["queue"], job["job_set_id"], job_id, payload), status=202)

    @app.page(f"/api/v1/queues/{{queue}}/jobsets/{{job_set}}/{{action:{'|'.join(JOB_SET_ACTIONS)}}}")
    class JobSetControl(web.View):
        @answers_errors
        async def post(self, request: web.Request, queue: str, job_set: str, action: str) -> web.Response:
            payload = JOB_SET_ACTIONS[action](await json_body(request, optional=True))
            queue_or_404(plane, queue)
            return self.json(await write(queue, job_set, None, payload), status=202)
