"""The queue agent: folds the compacted `queues` topic into the `queues` global table.

The topic is the public record of queue definitions (anyone may produce to it); the agent
re-validates each definition so a bad one is logged and skipped instead of reaching the scheduler.
A tombstone (no value) deletes the queue.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from schemas.codec import SchemaError, decode
from streams.domain.queues import validate_queue

if TYPE_CHECKING:
    from streams.app import ControlPlane

log = logging.getLogger(__name__)


def register(plane: ControlPlane) -> None:
    @plane.app.agent(plane.topics.queues, name="queues", concurrency=1)
    async def fold(stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            name = message.key.decode(errors="replace") if message.key else ""
            if message.value is None:
                plane.queues.pop(name, None)
                continue
            try:
                queue, reason = validate_queue(decode("queue", message.value))
            except SchemaError as exc:
                queue, reason = None, str(exc)
            if queue is None or queue["name"] != name:
                log.error("ignoring queue definition %r at offset %s: %s", name, message.offset, reason or "key differs from name")
                continue
            plane.queues[name] = queue
