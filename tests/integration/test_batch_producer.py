"""The hot path's batch producer (`streams.tables.batched.KafkaBatchProducer`) on the embedded broker:
a batch it sends goes out at once, whatever the producer's linger, and lands in order."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import TopicPartition

from ops.broker import EmbeddedBroker
from streams.config import Settings
from streams.kafka import kafka_clients
from streams.tables.batched import KafkaBatchProducer
from streams.topics import ensure_topics

pytestmark = pytest.mark.integration

LINGER_MS = 60_000


@dataclass
class _FaustProducer:
    """What KafkaBatchProducer asks of Faust's producer: the aiokafka producer it drives."""

    producer: Any

    def _ensure_producer(self) -> Any:
        return self.producer


@dataclass
class _App:
    producer: _FaustProducer


def test_a_batch_is_sent_without_lingering_and_lands_in_order(broker: EmbeddedBroker) -> None:
    """A fold part awaits four batches in turn (its feed and commands, then each table's changelog):
    left open, each waited out the producer's linger before it went (5 ms in the worker; here a minute)."""
    prefix = f"it-batch-{uuid.uuid4().hex[:8]}."
    settings = Settings(broker=broker.url, topic_prefix=prefix, app_id=prefix.rstrip("."))
    asyncio.run(ensure_topics(settings))
    topic = settings.topic("events")
    records = [(f"key-{n}".encode(), f"value-{n}".encode()) for n in range(3)]

    async def scenario() -> list[tuple[bytes | None, bytes | None]]:
        kafka = kafka_clients(settings)
        producer = kafka.producer(linger_ms=LINGER_MS)
        await producer.start()
        try:
            batches = KafkaBatchProducer(_App(_FaustProducer(producer)))  # type: ignore[arg-type]
            for expected_first in (0, 3):
                sent = await batches.send_partition(topic, 0, records)
                assert await asyncio.wait_for(sent, LINGER_MS / 1000 / 4) == expected_first
        finally:
            await producer.stop()
        consumer = kafka.consumer(enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            read = await consumer.getmany(tp, timeout_ms=5_000)
            return [(message.key, message.value) for message in read.get(tp, [])]
        finally:
            await consumer.stop()

    assert asyncio.run(scenario()) == records * 2


def test_a_keyed_record_goes_at_once_to_its_keys_partition_with_its_headers(broker: EmbeddedBroker) -> None:
    """How the API sends a submission (`Operations.submit`): one record, keyed by its queue, with the address
    its answer comes back to, on the partition `topic.send(key=...)` would choose, without lingering."""
    prefix = f"it-batch-{uuid.uuid4().hex[:8]}."
    settings = Settings(broker=broker.url, topic_prefix=prefix, app_id=prefix.rstrip("."), partitions=3)
    asyncio.run(ensure_topics(settings))
    topic = settings.topic("submissions")
    headers = [("flotilla-reply-to", b"http://worker-1:6066")]

    async def scenario() -> tuple[int, int, list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]]]:
        kafka = kafka_clients(settings)
        producer = kafka.producer(linger_ms=LINGER_MS)
        await producer.start()
        try:
            batches = KafkaBatchProducer(_App(_FaustProducer(producer)))  # type: ignore[arg-type]
            sent = await batches.send_keyed(topic, [(b"team-a", b"request")], headers)
            offsets = await asyncio.wait_for(sent, LINGER_MS / 1000 / 4)
            expected = producer._partition(topic, None, None, None, b"team-a", b"request")
        finally:
            await producer.stop()
        ((partition, offset),) = offsets.items()
        consumer = kafka.consumer(enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            read = await consumer.getmany(tp, timeout_ms=5_000)
            return partition - expected, offset, [(m.key, m.value, list(m.headers)) for m in read.get(tp, [])]
        finally:
            await consumer.stop()

    assert asyncio.run(scenario()) == (0, 0, [(b"team-a", b"request", headers)])
