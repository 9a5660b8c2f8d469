"""Armada's queue calls, served on QueueService and (deprecated there, but still called) on Submit.

A batch call (CreateQueues, UpdateQueues) answers each queue's refusal in its list of failures,
as Armada does, instead of failing the call; only an unauthenticated caller fails it.
PreemptOnQueue and CancelOnQueue (QueueService only, for administrators) ask for every matching
job of the queue to be preempted or cancelled, as Armada: no priority classes or pools match any,
and a cancel acts on the job states it names (none: no job).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from armada_client.armada import submit_pb2, submit_pb2_grpc
from google.protobuf import empty_pb2

from streams.api.control_requests import JobFilter, bulk_payload
from streams.api.grpc.calls import Api
from streams.api.grpc.convert import CANCELLABLE_BY_FILTER, queue_message, queue_record
from streams.api.grpc.errors import answers_errors, status_of, streams_errors
from streams.auth import Principal
from streams.domain.states import ACTIVE


class QueueCalls:
    """The queue methods, mixed into both servicers that carry them."""

    api: Api

    @answers_errors
    async def CreateQueue(self, request: submit_pb2.Queue, context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        await self.api.ops.create_queue(self.api.caller(context), queue_record(request))
        return empty_pb2.Empty()

    @answers_errors
    async def UpdateQueue(self, request: submit_pb2.Queue, context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        await self.api.ops.update_queue(self.api.caller(context), queue_record(request))
        return empty_pb2.Empty()

    @answers_errors
    async def CreateQueues(self, request: submit_pb2.QueueList, context: grpc.aio.ServicerContext) -> submit_pb2.BatchQueueCreateResponse:
        failed = await self._each(self.api.caller(context), request.queues, self.api.ops.create_queue)
        return submit_pb2.BatchQueueCreateResponse(
            failed_queues=[submit_pb2.QueueCreateResponse(queue=queue, error=error) for queue, error in failed]
        )

    @answers_errors
    async def UpdateQueues(self, request: submit_pb2.QueueList, context: grpc.aio.ServicerContext) -> submit_pb2.BatchQueueUpdateResponse:
        failed = await self._each(self.api.caller(context), request.queues, self.api.ops.update_queue)
        return submit_pb2.BatchQueueUpdateResponse(
            failed_queues=[submit_pb2.QueueUpdateResponse(queue=queue, error=error) for queue, error in failed]
        )

    @answers_errors
    async def DeleteQueue(self, request: submit_pb2.QueueDeleteRequest, context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        await self.api.ops.delete_queue(self.api.caller(context), request.name)
        return empty_pb2.Empty()

    @answers_errors
    async def GetQueue(self, request: submit_pb2.QueueGetRequest, context: grpc.aio.ServicerContext) -> submit_pb2.Queue:
        return queue_message(self.api.ops.queue(self.api.caller(context), request.name))

    @streams_errors
    async def GetQueues(
        self, request: submit_pb2.StreamingQueueGetRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[submit_pb2.StreamingQueueMessage]:
        queues = self.api.ops.list_queues(self.api.caller(context))
        # num 0 means all of them, as in Armada.
        for queue in queues[: request.num or None]:
            yield submit_pb2.StreamingQueueMessage(queue=queue_message(queue))
        yield submit_pb2.StreamingQueueMessage(end=submit_pb2.EndMarker())

    @staticmethod
    async def _each(
        principal: Principal,
        queues: Any,
        write: Callable[[Principal, dict[str, Any]], Awaitable[dict[str, Any]]],
    ) -> list[tuple[submit_pb2.Queue, str]]:
        failed = []
        for queue in queues:
            try:
                await write(principal, queue_record(queue))
            except Exception as exc:  # noqa: BLE001 - each queue's refusal is answered in the list, with its reason
                failed.append((queue, status_of(exc)[1]))
        return failed


class QueueService(QueueCalls, submit_pb2_grpc.QueueServiceServicer):
    def __init__(self, api: Api) -> None:
        self.api = api

    @answers_errors
    async def CordonQueue(self, request: submit_pb2.QueueCordonRequest, context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        await self._cordon(context, request.name, cordoned=True)
        return empty_pb2.Empty()

    @answers_errors
    async def UncordonQueue(self, request: submit_pb2.QueueUncordonRequest, context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        await self._cordon(context, request.name, cordoned=False)
        return empty_pb2.Empty()

    async def _cordon(self, context: grpc.aio.ServicerContext, name: str, *, cordoned: bool) -> None:
        principal = self.api.caller(context)
        await self.api.ops.update_queue(principal, {**self.api.ops.queue(principal, name), "cordoned": cordoned})

    @answers_errors
    async def PreemptOnQueue(self, request: submit_pb2.QueuePreemptRequest, context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        job_filter = JobFilter(ACTIVE, frozenset({_named(request.name)}), frozenset(request.priorityClasses), frozenset(request.pools))
        await self._on_queue(context, job_filter, "preempt")
        return empty_pb2.Empty()

    @answers_errors
    async def CancelOnQueue(self, request: submit_pb2.QueueCancelRequest, context: grpc.aio.ServicerContext) -> empty_pb2.Empty:
        refused = [submit_pb2.JobState.Name(s) for s in request.jobStates if s not in CANCELLABLE_BY_FILTER]
        if refused:
            raise ValueError(f"provided job states must be non-terminal (QUEUED, LEASED, PENDING, RUNNING), not {', '.join(refused)}")
        states = frozenset().union(*(CANCELLABLE_BY_FILTER[s] for s in request.jobStates))
        job_filter = JobFilter(states, frozenset({_named(request.name)}), frozenset(request.priorityClasses), frozenset(request.pools))
        await self._on_queue(context, job_filter, "cancel")
        return empty_pb2.Empty()

    async def _on_queue(self, context: grpc.aio.ServicerContext, job_filter: JobFilter, action: str) -> None:
        (queue,) = job_filter.queues
        source = "CancelOnQueue" if action == "cancel" else "PreemptOnQueue"
        what = f"{action} the jobs of queue {queue!r}"
        await self.api.ops.control_matching(self.api.caller(context), job_filter, bulk_payload(action, "", source), what)


def _named(name: str) -> str:
    if not name:
        raise ValueError("the queue's name is required")
    return name
