"""Armada's Jobs service: job status, details, errors and run details, and the active queues.

Answers come from the jobs tables of whichever workers hold the jobs (`streams.api.reads`). As in
Armada, an unknown job id is UNKNOWN in a status answer and absent from the other maps, and a
caller must be allowed to watch each job's queue.
"""

from __future__ import annotations

from typing import Any

import grpc
from armada_client.armada import job_pb2, job_pb2_grpc, submit_pb2

from streams.api.grpc.calls import Api
from streams.api.grpc.convert import EXTERNAL_JOB_URI, job_details, job_error, job_state, run_details
from streams.api.grpc.errors import answers_errors
from streams.auth import Principal

# A queued job may go to any pool (only its runs have one), so every active queue is reported in one pool.
POOL = "default"


class JobsService(job_pb2_grpc.JobsServicer):
    def __init__(self, api: Api) -> None:
        self.api = api

    async def _known(self, principal: Principal, job_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The jobs that exist, wherever they are held; an unknown one is left out (UNKNOWN in a status answer), as in Armada."""
        return await self.api.ops.jobs(principal, job_ids)

    @answers_errors
    async def GetJobStatus(self, request: job_pb2.JobStatusRequest, context: grpc.aio.ServicerContext) -> job_pb2.JobStatusResponse:
        known = await self._known(self.api.caller(context), list(request.job_ids))
        states = {job_id: job_state(known[job_id]["state"]) if job_id in known else submit_pb2.UNKNOWN for job_id in request.job_ids}
        return job_pb2.JobStatusResponse(job_states=states)

    @answers_errors
    async def GetJobStatusUsingExternalJobUri(
        self, request: job_pb2.JobStatusUsingExternalJobUriRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.JobStatusResponse:
        if not request.external_job_uri:
            raise ValueError("external_job_uri is required")
        principal = self.api.caller(context)
        jobs = await self.api.ops.annotated_jobs(principal, request.queue, request.jobset, EXTERNAL_JOB_URI, request.external_job_uri)
        return job_pb2.JobStatusResponse(job_states={job["job_id"]: job_state(job["state"]) for job in jobs})

    @answers_errors
    async def GetJobDetails(self, request: job_pb2.JobDetailsRequest, context: grpc.aio.ServicerContext) -> job_pb2.JobDetailsResponse:
        known = await self._known(self.api.caller(context), list(request.job_ids))
        return job_pb2.JobDetailsResponse(
            job_details={
                job_id: job_details(job, expand_job_spec=request.expand_job_spec, expand_job_run=request.expand_job_run)
                for job_id, job in known.items()
            }
        )

    @answers_errors
    async def GetJobErrors(self, request: job_pb2.JobErrorsRequest, context: grpc.aio.ServicerContext) -> job_pb2.JobErrorsResponse:
        known = await self._known(self.api.caller(context), list(request.job_ids))
        return job_pb2.JobErrorsResponse(job_errors={job_id: job_error(job) for job_id, job in known.items()})

    @answers_errors
    async def GetJobRunDetails(
        self, request: job_pb2.JobRunDetailsRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.JobRunDetailsResponse:
        found = await self.api.ops.runs(self.api.caller(context), list(request.run_ids))
        return job_pb2.JobRunDetailsResponse(job_run_details={run["run_id"]: run_details(job, run) for job, run in found})

    @answers_errors
    async def GetActiveQueues(
        self, request: job_pb2.GetActiveQueuesRequest, context: grpc.aio.ServicerContext
    ) -> job_pb2.GetActiveQueuesResponse:
        queues = await self.api.ops.active_queues(self.api.caller(context))
        by_pool = {POOL: job_pb2.ActiveQueues(queues=queues)} if queues else {}
        return job_pb2.GetActiveQueuesResponse(active_queues_by_pool=by_pool)
