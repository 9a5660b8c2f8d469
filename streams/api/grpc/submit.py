"""Armada's Submit service: submit jobs, cancel, preempt and reprioritise them, and its deprecated queue calls.

A submission answers per item with a job id or the reason it was refused, like the REST API
(Armada refuses a whole request for one bad item; Flotilla's answer says which items were bad and
still runs the good ones). Job control answers once its events are on the log; the scheduler acts
on them at its next cycle.
"""

from __future__ import annotations

from typing import Any

import grpc
from armada_client.armada import health_pb2, submit_pb2, submit_pb2_grpc
from google.protobuf import empty_pb2

from streams.api.control_requests import cancel_payload, preempt_payload, reprioritise_payload
from streams.api.errors import ApiError
from streams.api.grpc.calls import Api
from streams.api.grpc.convert import UNFINISHED, filter_states, job_item
from streams.api.grpc.errors import answers_errors
from streams.api.grpc.queues import QueueCalls


def _job_set(request: Any) -> tuple[str, str]:
    if not request.queue:
        raise ValueError("queue is required")
    if not request.job_set_id:
        raise ValueError("job_set_id is required")
    return request.queue, request.job_set_id


def convert_items(items: Any) -> list[dict[str, Any] | str]:
    """Each request item as a complete Avro item, or the reason it cannot be one."""
    converted: list[dict[str, Any] | str] = []
    for index, item in enumerate(items):
        try:
            converted.append(job_item(item))
        except (ValueError, KeyError, TypeError) as exc:
            converted.append(f"item {index}: {exc}")
    return converted


class SubmitService(QueueCalls, submit_pb2_grpc.SubmitServicer):
    def __init__(self, api: Api) -> None:
        self.api = api

    @answers_errors
    async def SubmitJobs(self, request: submit_pb2.JobSubmitRequest, context: grpc.aio.ServicerContext) -> submit_pb2.JobSubmitResponse:
        principal = self.api.caller(context)
        if not request.job_request_items:
            raise ValueError("job_request_items is empty: a submission needs at least one job")
        converted = convert_items(request.job_request_items)
        valid = [item for item in converted if not isinstance(item, str)]
        answers = iter((await self.api.ops.submit(principal, request.queue, request.job_set_id, valid, typed=True)).items if valid else [])
        return submit_pb2.JobSubmitResponse(
            job_response_items=[
                submit_pb2.JobSubmitResponseItem(error=item)
                if isinstance(item, str)
                else submit_pb2.JobSubmitResponseItem(**_response_item(next(answers)))
                for item in converted
            ]
        )

    @answers_errors
    async def CancelJobs(self, request: submit_pb2.JobCancelRequest, context: grpc.aio.ServicerContext) -> submit_pb2.CancellationResult:
        principal = self.api.caller(context)
        job_set = _job_set(request)
        payload = cancel_payload({"reason": request.reason})
        job_ids = list(dict.fromkeys([*request.job_ids, *([request.job_id] if request.job_id else [])]))
        if not job_ids:
            # Armada's deprecated form: no job ids cancels the whole job set.
            await self.api.ops.control_job_set(principal, *job_set, payload)
            return submit_pb2.CancellationResult()
        cancelled = [job_id for job_id, error in (await self._each_job(principal, job_ids, payload, job_set)).items() if not error]
        return submit_pb2.CancellationResult(cancelled_ids=cancelled)

    @answers_errors
    async def CancelJobSet(self, request: submit_pb2.JobSetCancelRequest, context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        principal = self.api.caller(context)
        job_set = _job_set(request)
        payload = cancel_payload({"reason": request.reason})
        states = filter_states(request.filter.states)
        if states == UNFINISHED:
            await self.api.ops.control_job_set(principal, *job_set, payload)
        else:
            await self.api.ops.cancel_in_states(principal, *job_set, payload, states)
        return empty_pb2.Empty()

    @answers_errors
    async def ReprioritizeJobs(
        self, request: submit_pb2.JobReprioritizeRequest, context: grpc.aio.ServicerContext
    ) -> submit_pb2.JobReprioritizeResponse:
        principal = self.api.caller(context)
        job_set = _job_set(request)
        payload = reprioritise_payload({"priority": request.new_priority})
        if not request.job_ids:
            await self.api.ops.control_job_set(principal, *job_set, payload)
            return submit_pb2.JobReprioritizeResponse()
        results = await self._each_job(principal, list(dict.fromkeys(request.job_ids)), payload, job_set)
        return submit_pb2.JobReprioritizeResponse(reprioritization_results=results)

    @answers_errors
    async def PreemptJobs(self, request: submit_pb2.JobPreemptRequest, context: grpc.aio.ServicerContext) -> submit_pb2.PreemptionResult:
        principal = self.api.caller(context)
        job_set = _job_set(request)
        if not request.job_ids:
            raise ValueError("job_ids is empty: name the jobs to preempt")
        payload = preempt_payload({"reason": request.reason})
        results = await self._each_job(principal, list(dict.fromkeys(request.job_ids)), payload, job_set)
        return submit_pb2.PreemptionResult(preemption_results=results)

    async def Health(self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext) -> health_pb2.HealthCheckResponse:
        status = health_pb2.HealthCheckResponse.SERVING if self.api.ready() else health_pb2.HealthCheckResponse.NOT_SERVING
        return health_pb2.HealthCheckResponse(status=status)

    async def _each_job(self, principal: Any, job_ids: list[str], payload: Any, job_set: tuple[str, str]) -> dict[str, str]:
        """Job id -> "" once its event is on the log, else why not (unknown, elsewhere, finished).

        A refused permission fails the whole call: every job named is in the one queue the request names.
        """
        results = {}
        for job_id in job_ids:
            try:
                await self.api.ops.control_job(principal, job_id, payload, job_set=job_set)
                results[job_id] = ""
            except ApiError as exc:  # JobFinished included
                results[job_id] = exc.reason
        return results


def _response_item(answer: dict[str, Any]) -> dict[str, str]:
    return {"job_id": answer["job_id"]} if "job_id" in answer else {"error": answer.get("error") or "refused"}
