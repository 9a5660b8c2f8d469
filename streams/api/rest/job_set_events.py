"""GET /api/v1/queues/{queue}/jobsets/{job_set}/events: a job set's events as server-sent events.

Replays the job set from the start of the `events` topic (or after the event named by `from`),
then, with `watch` (the default), keeps streaming new events until the client goes away; with
`watch=false` it ends after the events that were on the log when the call was made. The caller
needs the `watch` permission on the queue.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from aiohttp.web import BaseRequest, StreamResponse
from faust import web

from streams.api.errors import ApiError
from streams.api.job_set_log import EventsTopic, JobSetLog
from streams.api.operations import Operations
from streams.api.rest.http import answers_errors, caller
from streams.api.rest.sse import CONTENT_TYPE, HEARTBEAT, StreamOptions, event_records, sse_message, stream_options
from streams.api.resume import ResumeAfter

if TYPE_CHECKING:
    from faust.web.drivers.aiohttp import Web as AiohttpWeb

    from streams.plane import ControlPlane

# How long one read waits for new events: also how soon a closed connection or a stopping
# server ends a stream.
POLL_MS = 500
HEARTBEAT_S = 15.0


def register(plane: ControlPlane, ops: Operations) -> None:
    app = plane.app
    events = EventsTopic.of(plane.settings)
    stopping = asyncio.Event()

    async def on_shutdown(_: Any) -> None:
        # Without this, stopping the worker waits for every open stream's handler to time out.
        stopping.set()

    cast("AiohttpWeb", app.web).web_app.on_shutdown.append(on_shutdown)

    @app.page("/api/v1/queues/{queue}/jobsets/{job_set}/events")
    class JobSetEvents(web.View):
        @answers_errors
        async def get(self, request: web.Request, queue: str, job_set: str) -> StreamResponse:
            principal = caller(plane.auth, request)
            options = stream_options(request.query)
            ops.watchable(principal, queue)
            async with events.job_set(queue, job_set) as log:
                # The aiohttp driver hands views aiohttp's own requests.
                return await _stream(cast(BaseRequest, request), log, options, stopping, log.key.decode())


async def _next_records(log: JobSetLog, resume: ResumeAfter[dict[str, Any]]) -> list[dict[str, Any]]:
    return resume.admit([record for sequence in await log.read(POLL_MS) for record in event_records(sequence)])


def _disconnected(request: BaseRequest) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _stream(request: BaseRequest, log: JobSetLog, options: StreamOptions, stopping: asyncio.Event, job_set: str) -> StreamResponse:
    resume: ResumeAfter[dict[str, Any]] = ResumeAfter(options.after)
    pending: list[dict[str, Any]] = []
    # Nothing is sent until the `from` event is found, so an id this job set never had is still a 404.
    while resume.waiting:
        pending = await _next_records(log, resume)
        if resume.waiting and await log.caught_up():
            raise ApiError(404, f"event {options.after} is not an event of job set {job_set}")

    response = StreamResponse(headers={"Content-Type": CONTENT_TYPE, "Cache-Control": "no-cache"})
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    last_write = loop.time()
    try:
        while True:
            if pending:
                await response.write(b"".join(sse_message(record) for record in pending))
                last_write = loop.time()
            if (not options.watch and await log.caught_up()) or stopping.is_set() or _disconnected(request):
                break
            if loop.time() - last_write >= HEARTBEAT_S:
                await response.write(HEARTBEAT)
                last_write = loop.time()
            pending = await _next_records(log, resume)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client went away mid-write; leaving closes the consumer
    return response
