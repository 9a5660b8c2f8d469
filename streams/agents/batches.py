"""The agents' batches of messages, taken without polling: an idle agent costs no CPU.

Faust's `Stream.take_events(max_, within)` waits for its buffer to fill with a timeout of
``within`` and loops, whether or not anything arrived: every ``within`` (5 ms here) it builds a
`mode` wait with three tasks and cancels them again, about 0.3 ms of CPU each time on this
machine, so each agent kept ~5% of a core busy while idle and a worker with its four agents
~20%. That is paid per worker, not per job: with two workers it was paid twice for the same
jobs, and it was most of the growth of the CPU per job from one worker to two (issue 14).

`batches` waits for the first message with no timeout. Once one has arrived after a pause it
waits ``within`` for the rest of the same fetch (the broker hands a fetch's records over one at a
time), then takes what is waiting, up to ``max_messages``; messages that arrived while the last
batch was being handled are taken at once. Acknowledgement is as with `take_events`: a batch's
messages are acknowledged once the agent has finished with it (its loop body returned), so their
offsets are committed only after what they caused was written (at-least-once; the agents are idempotent).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from faust.types import EventT, StreamT


async def batches(
    stream: StreamT[Any], max_messages: int | Callable[[], int], within_s: float, counted: Callable[[int], None] | None = None
) -> AsyncIterator[list[EventT[Any]]]:
    """The stream's events in batches of at most ``max_messages`` (or as many as it says when called: the
    job-state agent takes bigger batches while a restored log is refolded), each acknowledged once its
    consumer's loop body has run (or raised). ``counted`` is told each batch's size (`Metrics.batch_counter`)."""
    limit = max_messages if callable(max_messages) else lambda: max_messages
    stream.enable_acks = False  # acknowledged below, after the batch
    waiting: list[EventT[Any]] = []
    arrived = asyncio.Event()  # set while ``waiting`` holds events or the reader ended
    room = asyncio.Event()  # set while ``waiting`` is not full
    room.set()

    async def read() -> None:
        try:
            async for event in stream.events():
                waiting.append(event)
                arrived.set()
                if len(waiting) >= limit():
                    room.clear()
                    await room.wait()
        finally:
            arrived.set()  # wake the consumer: the reader's error or end is raised there

    reader = asyncio.ensure_future(read())
    try:
        while True:
            idle = not waiting
            await arrived.wait()
            if not waiting:  # the reader ended
                reader.result()  # the stream's error, if any
                return
            most = limit()
            if idle and len(waiting) < most:
                await asyncio.sleep(within_s)  # the rest of the fetch the first message came with
            batch = waiting[:most]
            del waiting[:most]
            if not waiting:
                arrived.clear()
            room.set()
            if counted is not None:
                counted(len(batch))
            try:
                yield batch
            finally:
                for event in batch:
                    await stream.ack(event)
    finally:
        reader.cancel()
