"""A consumer following the embedded broker's tail while many producers append reads every record, in
order, once (streams/contiguous_fetch.py): Tansu can show a later batch before an earlier one."""

from __future__ import annotations

import asyncio
import time

import pytest

from ops.broker import EmbeddedBroker
from streams.config import Settings
from streams.contiguous_fetch import HOLES
from streams.kafka import kafka_clients
from tests.kit.topics import fresh_partition

pytestmark = pytest.mark.integration

PRODUCERS, BATCHES, PER_BATCH = 12, 600, 3  # in about every other unguarded run the tail reader lost a batch or two


def test_a_tail_reader_misses_no_batch_of_concurrent_producers(broker: EmbeddedBroker) -> None:
    kafka = kafka_clients(Settings(broker=broker.url))
    total = PRODUCERS * BATCHES * PER_BATCH

    async def scenario() -> tuple[list[int], list[bytes]]:
        tp = await fresh_partition(kafka, "it-tail")
        producers = [kafka.producer(linger_ms=0) for _ in range(PRODUCERS)]
        consumer = kafka.consumer(enable_auto_commit=False, fetch_max_wait_ms=50)
        for client in (*producers, consumer):
            await client.start()
        offsets: list[int] = []
        values: list[bytes] = []

        async def produce(number: int) -> None:
            producer = producers[number]
            for at in range(BATCHES):
                batch = producer.create_batch()
                for record in range(PER_BATCH):
                    batch.append(key=None, value=f"{number}:{at * PER_BATCH + record}".encode(), timestamp=None)
                batch.close()
                await (await producer.send_batch(batch, tp.topic, partition=0))

        async def follow() -> None:
            deadline = time.monotonic() + 120
            while len(offsets) < total and time.monotonic() < deadline:
                for message in (await consumer.getmany(tp, timeout_ms=200)).get(tp, []):
                    offsets.append(message.offset)
                    values.append(message.value)

        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            following = asyncio.ensure_future(follow())
            await asyncio.gather(*(produce(number) for number in range(PRODUCERS)))
            await following
        finally:
            for client in (*producers, consumer):
                await client.stop()
        return offsets, values

    offsets, values = asyncio.run(scenario())
    print(f"{total} records, fetches stopped at a hole and asked again: {HOLES.waited}, holes read past: {HOLES.skipped}")
    assert offsets == list(range(total))
    assert sorted(values) == sorted(f"{number}:{n}".encode() for number in range(PRODUCERS) for n in range(BATCHES * PER_BATCH))
    for number in range(PRODUCERS):  # each producer's records in the order it sent them
        own = [value for value in values if value.startswith(f"{number}:".encode())]
        assert own == [f"{number}:{n}".encode() for n in range(BATCHES * PER_BATCH)]
    assert HOLES.skipped == 0
