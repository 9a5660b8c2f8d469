"""In-process answers to callers waiting for the agent that handles their request.

The API produces a submit request to the log and waits for the ingest agent to say what became
of each item (job id or rejection reason); this is the rendezvous. It only works when the API and
the agent run in the same worker, which is why a caller that times out is told so rather than
assumed failed: the request is on the log and will still be processed.
"""

from __future__ import annotations

import asyncio
from typing import Any


class Replies:
    def __init__(self) -> None:
        self._waiting: dict[str, asyncio.Future[Any]] = {}

    def expect(self, request_id: str) -> asyncio.Future[Any]:
        if request_id in self._waiting:
            raise ValueError(f"request id {request_id!r} is already awaited")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        return future

    def forget(self, request_id: str) -> None:
        self._waiting.pop(request_id, None)

    def resolve(self, request_id: str, answer: Any) -> None:
        future = self._waiting.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(answer)

    def fail(self, request_id: str, error: Exception) -> None:
        """The request was handled but cannot be answered as done (its events are not durable): the caller gets ``error``."""
        future = self._waiting.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(error)
