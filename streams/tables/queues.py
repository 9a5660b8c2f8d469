"""Every worker's replica of all queue definitions, read from the compacted `queues` topic.

This is what a Faust GlobalTable promises, built directly: faust-streaming 0.15.3's GlobalTable
does not deliver later updates to a worker whose own agent never writes it (issue 283; with
`synchronize_all_active_partitions` the other worker misses them instead), so with two workers a
queue created at run time reached only one. Queue definitions are few and small, so each worker
reads the whole topic with its own group-less consumer, from the start, and keeps following it.
The topic is compacted and is the durable record; nothing is stored locally.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from mode import Service

from schemas.codec import SchemaError, decode
from streams.config import Settings
from streams.domain.queues import validate_queue
from streams.kafka import kafka_clients

log = logging.getLogger(__name__)


class QueueReplica(Service):
    def __init__(self, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._partition = TopicPartition(settings.topic("queues"), 0)
        self._kafka = kafka_clients(settings)
        self._queues: dict[str, dict[str, Any]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self.caught_up = asyncio.Event()
        # The offset of the next record to read: every record before it is applied.
        self.position = 0

    def get(self, name: str, default: dict[str, Any] | None = None) -> dict[str, Any] | None:
        return self._queues.get(name, default)

    def values(self) -> Iterator[dict[str, Any]]:
        return iter(list(self._queues.values()))

    def apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        """One record of the topic: a definition, or a tombstone that deletes the queue."""
        self.position = max(self.position, offset + 1)
        name = key.decode(errors="replace") if key else ""
        if value is None:
            self._queues.pop(name, None)
            return
        try:
            queue, reason = validate_queue(decode("queue", value))
        except SchemaError as exc:
            queue, reason = None, str(exc)
        if queue is None or queue["name"] != name:
            log.error("ignoring queue definition %r at offset %s: %s", name, offset, reason or "key differs from name")
            return
        self._queues[name] = queue

    async def on_start(self) -> None:
        self._consumer = self._kafka.consumer(enable_auto_commit=False)
        await self._consumer.start()
        self._consumer.assign([self._partition])
        await self._consumer.seek_to_beginning(self._partition)

    async def on_stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    @Service.task
    async def _follow(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self.should_stop:
            fetched = await consumer.getmany(self._partition, timeout_ms=200)
            for record in fetched.get(self._partition, []):
                self.apply(record.key, record.value, record.offset)
            # The fetch high watermark, not ListOffsets: Tansu answers the latter short.
            highwater = consumer.highwater(self._partition)
            if highwater is not None and await consumer.position(self._partition) >= highwater:
                self.caught_up.set()
