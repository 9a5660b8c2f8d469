"""Armada's Event service: a job set's events from its start or after a message id, in order, then live.

Each stream reads the job set's key from the start of the `events` topic with its own group-less
consumer (`JobSetLog`, as the REST stream does) and maps what it reads with `JobSetEvents`; a
`from_message_id` only decides where sending starts. Nothing is sent until that id is found, so an
id this job set never had is NOT_FOUND rather than an empty stream. `errorIfMissing` (which
Armada's Python client always sets) makes a job set with no events yet NOT_FOUND, as in Armada.

A stream ends after the events present at the call when `watch` is false, when the client cancels
(the handler is cancelled and leaving `JobSetLog` closes the consumer), and within one poll when
the worker starts stopping: the client sees the stream end, and its resilient iterator reconnects
from the last message id it received.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
from armada_client.armada import event_pb2, event_pb2_grpc, health_pb2
from google.protobuf import empty_pb2

from streams.api.errors import ApiError
from streams.api.grpc.calls import Api
from streams.api.grpc.errors import answers_errors, streams_errors
from streams.api.grpc.event_mapping import JobSetEvents, Position, check_message_id, resume_ids
from streams.api.resume import ResumeAfter

# How long one read waits for new events: also how soon a stopping worker ends a stream.
POLL_MS = 500


@dataclass(frozen=True)
class _Request:
    queue: str
    job_set_id: str
    from_message_id: str
    watch: bool
    error_if_missing: bool


class EventService(event_pb2_grpc.EventServicer):
    def __init__(self, api: Api) -> None:
        self.api = api

    @streams_errors
    async def GetJobSetEvents(
        self, request: event_pb2.JobSetRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[event_pb2.EventStreamMessage]:
        asked = _Request(request.queue, request.id, request.from_message_id, request.watch, request.errorIfMissing)
        async for message in self._stream(asked, context):
            yield message

    @streams_errors
    async def Watch(
        self, request: event_pb2.WatchRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[event_pb2.EventStreamMessage]:
        """Armada's deprecated form of GetJobSetEvents: always live, and a job set with no events yet is waited for."""
        asked = _Request(request.queue, request.job_set_id, request.from_id, watch=True, error_if_missing=False)
        async for message in self._stream(asked, context):
            yield message

    @answers_errors
    async def Health(self, request: empty_pb2.Empty, context: grpc.aio.ServicerContext) -> health_pb2.HealthCheckResponse:
        """Open to anyone, like the REST /health: SERVING once this worker's tables are recovered."""
        serving = health_pb2.HealthCheckResponse.SERVING if self.api.ready() else health_pb2.HealthCheckResponse.NOT_SERVING
        return health_pb2.HealthCheckResponse(status=serving)

    async def _stream(self, asked: _Request, context: grpc.aio.ServicerContext) -> AsyncIterator[event_pb2.EventStreamMessage]:
        self.api.ops.watchable(self.api.caller(context), asked.queue)
        if asked.from_message_id:
            check_message_id(asked.from_message_id)  # a ValueError is INVALID_ARGUMENT
        where = f"job set {asked.job_set_id!r} of queue {asked.queue!r}"
        async with self.api.events.job_set(asked.queue, asked.job_set_id) as log:
            mapping = JobSetEvents()
            resume: ResumeAfter[Position] = ResumeAfter(asked.from_message_id or None, answers_to=resume_ids)
            found_any = False

            async def next_positions() -> list[Position]:
                nonlocal found_any
                positions = [position for sequence in await log.read(POLL_MS) for position in mapping.positions(sequence)]
                found_any = found_any or bool(positions)
                return resume.admit(positions)

            pending = await next_positions()
            while resume.waiting or (asked.error_if_missing and not found_any):
                if await log.caught_up():
                    if not found_any:
                        raise ApiError(404, f"{where} does not exist: it has no events")
                    raise ApiError(404, f"message {asked.from_message_id!r} is not in {where}")
                pending = await next_positions()
            while True:
                for position in pending:
                    if position.message is not None:
                        yield position.message
                if (not asked.watch and await log.caught_up()) or self.api.stopping():
                    return
                pending = await next_positions()
