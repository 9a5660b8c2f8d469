"""Reading and writing the log directly in integration tests, with plain aiokafka clients."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from schemas.codec import decode
from streams import contiguous_fetch


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int = 0  # epoch ms, the broker's


async def _read_all(bootstrap: str, topic: str, timeout: float) -> list[Record]:
    """Every record of ``topic`` from the earliest offset up to its end at call time.

    The end is the high watermark of the fetch responses: Tansu answers ListOffsets(latest) with
    the base offset of the last record batch + 1, not the log end offset (see test_recovery.py).
    It reads without holes, as Flotilla's own consumers of Tansu do (streams/contiguous_fetch.py).
    """
    contiguous_fetch.require()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
        fetch_max_bytes=16 * 1024 * 1024,
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            await consumer._client.force_metadata_update()
            partitions = consumer.partitions_for_topic(topic) or set()
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
        if not assigned:
            return []
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        ends = await consumer.end_offsets(assigned)
        records: list[Record] = []
        deadline = asyncio.get_running_loop().time() + timeout
        pending = {tp for tp in assigned if ends[tp] > 0}
        while pending:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"reading {topic}: did not reach the end offsets {ends} within {timeout:.0f}s")
            batches = await consumer.getmany(*pending, timeout_ms=500)
            for messages in batches.values():
                records += [Record(m.partition, m.offset, m.key, m.value, m.timestamp) for m in messages]
            for tp in list(pending):
                highwater = consumer.highwater(tp)
                if highwater is not None and await consumer.position(tp) >= max(highwater, ends[tp]):
                    pending.discard(tp)
        return records
    finally:
        await consumer.stop()


async def _committed(bootstrap: str, group: str, topic: str) -> tuple[int | None, int]:
    """(offset committed by ``group`` on partition 0 of ``topic``, the partition's true end)."""
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])  # manual assignment: an OffsetFetch, never a group join
        committed = await consumer.committed(tp)
    finally:
        await consumer.stop()
    records = await _read_all(bootstrap, topic, 30.0)
    return committed, max((r.offset for r in records), default=-1) + 1


def committed_offset(bootstrap: str, group: str, topic: str) -> tuple[int | None, int]:
    """(``group``'s committed offset on ``topic``, the topic's end offset); partition 0."""
    return asyncio.run(_committed(bootstrap, group, topic))


def read_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Record]:
    return asyncio.run(_read_all(bootstrap, topic, timeout))


def latest_by_key(records: list[Record], schema: str) -> dict[str, dict[str, Any] | None]:
    """Compacted-topic view: the last value per UTF-8 key, decoded (``None`` for a tombstone)."""
    return {key: None if value is None else decode(schema, value) for key, value in latest_values(records).items()}


def latest_values(records: list[Record]) -> dict[str, bytes | None]:
    """Compacted-topic view: the last value per UTF-8 key, as bytes (``None`` for a tombstone)."""
    latest: dict[str, bytes | None] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        latest[(record.key or b"").decode()] = record.value
    return latest


async def _produce(bootstrap: str, topic: str, messages: Sequence[tuple[bytes | None, bytes | None]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=4 * 1024 * 1024, linger_ms=5)
    await producer.start()
    try:
        futures = [await producer.send(topic, key=key, value=value) for key, value in messages]
        await producer.flush()
        for future in futures:
            await future
    finally:
        await producer.stop()


def produce(bootstrap: str, topic: str, messages: Sequence[tuple[bytes | None, bytes | None]]) -> None:
    """Produce ``(key, value)`` pairs in order and wait until the broker acknowledged all of them."""
    asyncio.run(_produce(bootstrap, topic, messages))
