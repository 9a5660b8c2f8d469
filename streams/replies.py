"""Answers to callers waiting for the agent that handles their request, on whichever worker that runs.

The API produces a submit request to the log and waits for the ingest agent to say what became
of each item (job id or rejection reason); this is the rendezvous. The ingest agent of the
request's partition may run on another worker, so the API puts its own address on the record
(the `flotilla-reply-to` header) and the agent hands the answer back there: in process when it is
its own address, else by a call to that worker (`streams.peers`), retried for a while. A partition
that moves before it is answered is ingested, and answered, by its new owner. A caller whose
answer never comes is told so rather than assumed failed: the request is on the log and will
still be processed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from streams.archive.durable import ArchiveUnavailable
from streams.peers import PeerRefused, PeerUnavailable

log = logging.getLogger(__name__)

REPLY_TO = "flotilla-reply-to"
# How long an answer for another worker is retried before it is given up (its caller has timed out by then or gone).
SEND_PATIENCE_S = 15.0
_RETRY_S = 0.2

# Hands a batch of answers to the worker at a URL (Peers.send_answers).
Send = Callable[[str, list[dict[str, Any]]], Awaitable[None]]


def reply_to(headers: Mapping[str, bytes] | Sequence[tuple[str, bytes]] | None) -> str | None:
    """The address a record's answer goes to, from its headers; None for records nobody waits for."""
    pairs = headers.items() if isinstance(headers, Mapping) else (headers or ())
    for name, value in pairs:
        if name == REPLY_TO and value:
            return bytes(value).decode(errors="replace")
    return None


class Replies:
    def __init__(self, me: str = "", send: Send | None = None) -> None:
        self.me = me  # this worker's address (its canonical URL), where its callers' answers come
        self._send = send
        self._waiting: dict[str, asyncio.Future[Any]] = {}
        self._outgoing: dict[str, list[dict[str, Any]]] = {}
        self._senders: dict[str, asyncio.Future[None]] = {}

    def headers(self) -> dict[str, bytes]:
        """The headers that bring a request's answer back here."""
        return {REPLY_TO: self.me.encode()} if self.me else {}

    def expect(self, request_id: str) -> asyncio.Future[Any]:
        if request_id in self._waiting:
            raise ValueError(f"request id {request_id!r} is already awaited")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        return future

    def forget(self, request_id: str) -> None:
        self._waiting.pop(request_id, None)

    def resolve(self, request_id: str, answer: Any, to: str | None = None) -> None:
        """Answer the request; ``to``: the address its record asked answers to go to."""
        if self._elsewhere(to):
            self._queue(to, {"request_id": request_id, "items": answer})
            return
        future = self._waiting.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(answer)

    def fail(self, request_id: str, error: ArchiveUnavailable, to: str | None = None) -> None:
        """The request was handled but cannot be answered as done (its events are not durable): the caller gets ``error``."""
        if self._elsewhere(to):
            self._queue(to, {"request_id": request_id, "unavailable": error.reason})
            return
        future = self._waiting.pop(request_id, None)
        if future is not None and not future.done():
            future.set_exception(error)

    def received(self, answers: list[dict[str, Any]]) -> None:
        """Answers another worker handed over for requests made here."""
        for answer in answers:
            if "unavailable" in answer:
                self.fail(str(answer["request_id"]), ArchiveUnavailable(str(answer["unavailable"])))
            else:
                self.resolve(str(answer["request_id"]), answer.get("items"))

    def _elsewhere(self, to: str | None) -> bool:
        return bool(to) and to != self.me and self._send is not None

    def _queue(self, to: str | None, answer: dict[str, Any]) -> None:
        assert to is not None
        self._outgoing.setdefault(to, []).append(answer)
        if to not in self._senders:
            sender = asyncio.ensure_future(self._deliver(to))
            self._senders[to] = sender
            sender.add_done_callback(lambda _: self._senders.pop(to, None))

    async def _deliver(self, to: str) -> None:
        """Send what is queued for ``to``, batch by batch, retrying a failed batch until its patience is over."""
        assert self._send is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SEND_PATIENCE_S
        while self._outgoing.get(to):
            batch = self._outgoing.pop(to)
            try:
                await self._send(to, batch)
                deadline = loop.time() + SEND_PATIENCE_S
            except (PeerUnavailable, PeerRefused) as exc:
                if loop.time() > deadline:
                    dropped = len(batch) + len(self._outgoing.pop(to, []))
                    log.warning("gave up handing %d submission answers to %s: %s", dropped, to, exc)
                    return
                self._outgoing[to] = batch + self._outgoing.get(to, [])
                await asyncio.sleep(_RETRY_S)
