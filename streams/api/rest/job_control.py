"""Cancel, preempt and reprioritise over REST: per job, per job set, and per queue or executor with
filters; each answered once its events are on the log.

A per-job request takes the job's queue and job set from this worker's jobs table, so its event
lands on the job set's key with every other event of the job. A job-set request writes one event
without a job id; the job-state agent hands it to the scheduler, which applies it to every
unfinished job of the set at its next cycle. The answer is 202: the request is on the log, and
what it does happens later (a cancelled job shows `JobCancelled` on the job set's event stream).
A queue- or executor-wide request (Armada's CancelOnQueue, PreemptOnQueue, CancelOnExecutor,
PreemptOnExecutor, for administrators) writes one event per matching job and answers with their ids.
An executor's cordon (Armada's UpsertExecutorSettings, for administrators) is one event, answered
202 too: the scheduler places no new job on the executor's nodes from its next cycle on.
"""

from __future__ import annotations

from dataclasses import replace

import faust
from faust import web

from streams.api.control_requests import JOB_ACTIONS, JOB_SET_ACTIONS, bulk_payload, executor_filter, queue_filter, reason_of
from streams.api.operations import Operations
from streams.api.rest.http import answers_errors, caller, json_body
from streams.auth import Authenticator


def register(app: faust.App, auth: Authenticator, ops: Operations) -> None:
    @app.page(f"/api/v1/jobs/{{job_id}}/{{action:{'|'.join(JOB_ACTIONS)}}}")
    class JobControl(web.View):
        @answers_errors
        async def post(self, request: web.Request, job_id: str, action: str) -> web.Response:
            principal = caller(auth, request)
            payload = JOB_ACTIONS[action](await json_body(request, optional=True))
            event_id = await ops.control_job(principal, job_id, payload)
            return self.json({"event_ids": [event_id]}, status=202)

    @app.page(f"/api/v1/queues/{{queue}}/jobsets/{{job_set}}/{{action:{'|'.join(JOB_SET_ACTIONS)}}}")
    class JobSetControl(web.View):
        @answers_errors
        async def post(self, request: web.Request, queue: str, job_set: str, action: str) -> web.Response:
            principal = caller(auth, request)
            payload = JOB_SET_ACTIONS[action](await json_body(request, optional=True))
            event_id = await ops.control_job_set(principal, queue, job_set, payload)
            return self.json({"event_ids": [event_id]}, status=202)

    @app.page("/api/v1/queues/{queue}/{action:cancel|preempt}")
    class QueueControl(web.View):
        @answers_errors
        async def post(self, request: web.Request, queue: str, action: str) -> web.Response:
            principal = caller(auth, request)
            job_filter, reason = queue_filter(await json_body(request, optional=True), action)
            source = "CancelOnQueue" if action == "cancel" else "PreemptOnQueue"
            job_ids = await ops.control_matching(
                principal,
                replace(job_filter, queues=frozenset({queue})),
                bulk_payload(action, reason, source),
                f"{action} the jobs of queue {queue!r}",
            )
            return self.json({"job_ids": job_ids}, status=202)

    @app.page("/api/v1/executors/{executor}/{action:cancel|preempt}")
    class ExecutorControl(web.View):
        @answers_errors
        async def post(self, request: web.Request, executor: str, action: str) -> web.Response:
            principal = caller(auth, request)
            job_filter, reason = executor_filter(await json_body(request, optional=True), executor, action)
            source = "CancelOnExecutor" if action == "cancel" else "PreemptOnExecutor"
            job_ids = await ops.control_matching(
                principal, job_filter, bulk_payload(action, reason, source), f"{action} the jobs on executor {executor!r}"
            )
            return self.json({"job_ids": job_ids}, status=202)

    @app.page("/api/v1/executors/{executor}/{action:cordon|uncordon}")
    class ExecutorCordon(web.View):
        @answers_errors
        async def post(self, request: web.Request, executor: str, action: str) -> web.Response:
            principal = caller(auth, request)
            reason = reason_of(await json_body(request, optional=True))
            event_id = await ops.set_executor_cordon(principal, executor, action == "cordon", reason)
            return self.json({"event_ids": [event_id]}, status=202)
