"""Putting the archive back: every archived record re-produced into an empty broker at its own offset.

Each partition's records go back to the same partition in the same order, with their keys,
values, headers and timestamps, in produce batches of up to `BATCH_BYTES`. The broker's answer to
each batch gives the offset it stored the batch at, which must be the archived one: offsets are
what consumers, event ids and the archive itself refer to, so a difference stops the restore.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition

from streams.archive.reader import is_generation, partition_dir, partitions, read_partition
from streams.archive.segments import index_path, read_index, segments_in
from streams.config import MAX_MESSAGE_BYTES
from streams.kafka import KafkaClients

BATCH_BYTES = 1024 * 1024
IN_FLIGHT_BATCHES = 8
PROGRESS_EVERY_S = 1.0

Progress = Callable[["RestoreProgress"], None]


class RestoreError(RuntimeError):
    """The archive cannot be put back as it was."""


@dataclass(frozen=True)
class RestoreProgress:
    done: int
    total: int  # records the archive's index counts (the restore may find more where an index falls short)
    elapsed_s: float
    finished: bool = False


def restored_partitions(root: Path) -> list[tuple[str, int]]:
    """The archived partitions a restore puts back: not the generations of a topic set aside."""
    return [(topic, partition) for topic, partition in partitions(root) if not is_generation(topic)]


def archived_count(root: Path) -> int:
    """Records a restore puts back, as the archive's indexes count them (quick: no segment is read)."""
    total = 0
    for topic, partition in restored_partitions(root):
        for segment in segments_in(partition_dir(root, topic, partition)):
            total += sum(entry.last_offset - entry.first_offset + 1 for entry in read_index(index_path(segment)))
    return total


async def restore(root: Path, kafka: KafkaClients, on_progress: Progress | None = None) -> RestoreProgress:
    """Re-produce every archived partition into the broker ``kafka`` connects to, whose topics exist and are empty."""
    parts = restored_partitions(root)
    await _check_empty(kafka, parts)
    producer = kafka.producer(max_batch_size=BATCH_BYTES, max_request_size=MAX_MESSAGE_BYTES, linger_ms=0)
    await producer.start()
    started = time.monotonic()
    total = archived_count(root)
    done = 0
    last_report = started
    try:
        for topic, partition in parts:
            known = producer.client.cluster.partitions_for_topic(topic) or await producer.partitions_for(topic)
            if partition not in known:
                raise RestoreError(f"the archive has partition {partition} of {topic} but the broker's topic has {len(known)} partitions")
            in_flight: list[tuple[int, asyncio.Future[Any]]] = []
            batch = producer.create_batch()
            first: int | None = None
            expected = 0
            for record in read_partition(root, topic, partition):
                if record.offset != expected:
                    raise RestoreError(
                        f"{topic}[{partition}] in the archive jumps from offset {expected - 1} to {record.offset}:"
                        " an empty broker cannot store it at the same offsets"
                    )
                expected += 1
                appended = batch.append(key=record.key, value=record.value, timestamp=record.timestamp, headers=list(record.headers))
                if appended is None:
                    assert first is not None
                    in_flight.append((first, await producer.send_batch(batch, topic, partition=partition)))
                    batch, first = producer.create_batch(), None
                    if batch.append(key=record.key, value=record.value, timestamp=record.timestamp, headers=list(record.headers)) is None:
                        raise RestoreError(f"the record at offset {record.offset} of {topic}[{partition}] is larger than a produce batch")
                if first is None:
                    first = record.offset
                done += 1
                if len(in_flight) >= IN_FLIGHT_BATCHES:
                    await _acknowledged(in_flight.pop(0), topic, partition)
                now = time.monotonic()
                if on_progress is not None and now - last_report >= PROGRESS_EVERY_S:
                    on_progress(RestoreProgress(done, max(total, done), now - started))
                    last_report = now
            if first is not None:
                in_flight.append((first, await producer.send_batch(batch, topic, partition=partition)))
            for sent in in_flight:
                await _acknowledged(sent, topic, partition)
    finally:
        await producer.stop()
    result = RestoreProgress(done, done, time.monotonic() - started, finished=True)
    if on_progress is not None:
        on_progress(result)
    return result


async def _acknowledged(sent: tuple[int, asyncio.Future[Any]], topic: str, partition: int) -> None:
    first, future = sent
    stored = (await future).offset
    if stored != first:
        raise RestoreError(f"the broker stored the records of {topic}[{partition}] from offset {first} at offset {stored}: is it empty?")


async def _check_empty(kafka: KafkaClients, parts: list[tuple[str, int]]) -> None:
    """Every partition to restore exists and holds no record."""
    if not parts:
        return
    consumer = kafka.consumer(enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, partition) for topic, partition in parts]
        ends = await consumer.end_offsets(tps)
        full = [f"{tp.topic}[{tp.partition}] ({end} records)" for tp, end in ends.items() if end > 0]
        if full:
            raise RestoreError(f"the broker already holds records: {', '.join(full)}; the archive is restored into an empty broker only")
    finally:
        await consumer.stop()
