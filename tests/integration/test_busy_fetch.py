"""The worker's consumer asks the embedded broker for a short fetch wait while records keep coming and
the long one once its partitions are quiet (streams/transport.py, `BusyFetcher`)."""

from __future__ import annotations

import asyncio

import pytest

from ops.broker import EmbeddedBroker
from streams.config import Settings
from streams.kafka import kafka_clients
from streams.transport import _FETCH_BUSY_WAIT_MS, _FETCH_MAX_WAIT_MS, fetch_busy
from tests.kit.topics import fresh_partition

pytestmark = pytest.mark.integration


def test_the_fetch_wait_is_short_after_records_and_long_when_quiet(broker: EmbeddedBroker) -> None:
    kafka = kafka_clients(Settings(broker=broker.url))

    async def scenario() -> tuple[list[int], list[int]]:
        tp = await fresh_partition(kafka, "it-busy")
        producer = kafka.producer(linger_ms=0)
        consumer = kafka.consumer(enable_auto_commit=False, fetch_max_wait_ms=_FETCH_MAX_WAIT_MS)
        await producer.start()
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            fetch_busy(consumer)
            fetcher = consumer._fetcher
            quiet, busy = [], []
            for at in range(5):
                await asyncio.sleep(0.5)  # nothing fetched for longer than the long wait
                quiet.append(fetcher._fetch_max_wait_ms)
                await producer.send_and_wait(tp.topic, f"{at}".encode(), partition=0)
                while not (await consumer.getmany(tp, timeout_ms=1000)).get(tp):
                    pass
                await asyncio.sleep(0.005)  # the fetcher asks again once its records are taken
                busy.append(fetcher._fetch_max_wait_ms)
            return quiet, busy
        finally:
            await consumer.stop()
            await producer.stop()

    quiet, busy = asyncio.run(scenario())
    assert quiet == [_FETCH_MAX_WAIT_MS] * 5
    # Asked again within a few ms of the records (the fetch that follows is sent at once): far below the long wait.
    assert all(_FETCH_BUSY_WAIT_MS <= wait < _FETCH_MAX_WAIT_MS // 2 for wait in busy), busy
