"""The archiver against the real embedded broker: what any producer writes is archived as the broker stored
it, a waiter hears once it is synced, a stop archives what the broker holds, and a restore puts every
record back into an empty broker in the same partition at the same offset."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ops.broker import EmbeddedBroker
from streams.archive.archiver import Archiver
from streams.archive.reader import read_partition
from streams.archive.restore import RestoreError, restore
from streams.archive.writer import ArchiveWriter
from streams.kafka import KafkaClients

pytestmark = pytest.mark.integration

EVENTS, QUEUES = "archived.events", "archived.queues"
TOPICS = {EVENTS: 2, QUEUES: 1}
Stored = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]


async def create_topics(bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, count, 1) for name, count in TOPICS.items()])
    finally:
        await admin.close()


async def stored(bootstrap: str) -> dict[tuple[str, int], list[Stored]]:
    """Every record of the topics as the broker holds it: (offset, timestamp, key, value, headers)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    found: dict[tuple[str, int], list[Stored]] = {}
    try:
        partitions = [TopicPartition(topic, p) for topic, count in TOPICS.items() for p in range(count)]
        consumer.assign(partitions)
        for _ in range(20):
            fetched = await consumer.getmany(timeout_ms=200)
            for tp, messages in fetched.items():
                found.setdefault((tp.topic, tp.partition), []).extend(
                    (m.offset, m.timestamp, m.key, m.value, tuple(m.headers)) for m in messages
                )
            if not fetched and all(consumer.highwater(tp) is not None for tp in partitions):
                break
    finally:
        await consumer.stop()
    return found


async def produce(bootstrap: str, count: int) -> list[tuple[str, int, int]]:
    """Records as any client writes them (keys, headers, its own timestamps); returns (topic, partition, offset) of each."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        sent = [
            await producer.send(
                EVENTS if i % 5 else QUEUES,
                value=None if i == 7 else f"value {i}".encode() * (1 + i % 4),
                key=f"q/set-{i % 3}".encode() if i % 11 else None,
                partition=i % 2 if i % 5 else 0,
                timestamp_ms=1_700_000_000_000 + i,
                headers=[("n", str(i).encode())] if i % 2 else None,
            )
            for i in range(count)
        ]
        return [((m := await future).topic, m.partition, m.offset) for future in sent]
    finally:
        await producer.stop()


def test_everything_produced_is_archived_and_restored_at_the_same_offsets(tmp_path: Path, broker: EmbeddedBroker) -> None:
    archive = tmp_path / "log"

    async def scenario() -> None:
        await create_topics(broker.bootstrap)
        archiver = Archiver(ArchiveWriter(archive), KafkaClients(broker.bootstrap), TOPICS)
        archiver.open()
        await archiver.start()
        try:
            written = await produce(broker.bootstrap, 300)
            last: dict[tuple[str, int], int] = {}
            for topic, partition, offset in written:
                last[(topic, partition)] = max(offset, last.get((topic, partition), -1))
            for (topic, partition), offset in last.items():
                await asyncio.wait_for(archiver.durability.wait(topic, {partition: offset}), 10)
            more = await produce(broker.bootstrap, 20)  # not waited for: the stop archives them
            assert more
        finally:
            await archiver.stop()
        original = await stored(broker.bootstrap)
        assert sum(len(records) for records in original.values()) == 320
        for (topic, partition), records in original.items():
            archived = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in read_partition(archive, topic, partition)]
            assert archived == records, f"{topic}[{partition}] archived differs from the broker's"

        await create_topics(empty.bootstrap)
        result = await restore(archive, KafkaClients(empty.bootstrap))
        assert result.done == 320
        assert await stored(empty.bootstrap) == original
        with pytest.raises(RestoreError, match="already holds records"):
            await restore(archive, KafkaClients(empty.bootstrap))

        # A second run of the archiver goes on from where the archive ends.
        again = Archiver(ArchiveWriter(archive), KafkaClients(broker.bootstrap), TOPICS)
        again.open()
        await again.start()
        try:
            (topic, partition, offset), *_ = await produce(broker.bootstrap, 1)
            await asyncio.wait_for(again.durability.wait(topic, {partition: offset}), 10)
        finally:
            await again.stop()
        on_broker = (await stored(broker.bootstrap))[(EVENTS, 0)]
        assert [r.offset for r in read_partition(archive, EVENTS, 0)] == [record[0] for record in on_broker]

    with EmbeddedBroker() as empty:  # another broker, with nothing in it
        asyncio.run(scenario())


def test_an_idle_archiver_fetches_rarely_and_a_waiter_wakes_it_at_once(tmp_path: Path, broker: EmbeddedBroker) -> None:
    """Idle, the archiver sends a fetch only every idle interval (3 s here; the 5 ms fetches before were 200 a
    second); a record no one waits for is archived within it, and one someone waits for as soon as it is synced."""
    topic = "idle-archiver.events"
    idle_s = 3.0

    async def scenario() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            await admin.close()
        archiver = Archiver(ArchiveWriter(tmp_path / "log"), KafkaClients(broker.bootstrap), {topic: 1}, idle_fetch_s=idle_s)
        archiver.open()
        await archiver.start()
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            # The fetch requests its consumer sends (aiokafka's client, counted from outside: test-only).
            assert archiver._consumer is not None
            client = archiver._consumer._client
            sent, fetches = client.send, []

            def counting(node_id: int, request: Any, **options: Any) -> Any:
                if type(request).__name__.startswith("FetchRequest"):
                    fetches.append(request)
                return sent(node_id, request, **options)

            client.send = counting
            await asyncio.sleep(2 * idle_s)
            assert len(fetches) <= 4, f"{len(fetches)} fetches in {2 * idle_s:.0f} idle seconds"

            unawaited = await (await producer.send(topic, b"no one waits for me"))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + idle_s + 2
            while archiver.durability.offsets().get((topic, 0), 0) <= unawaited.offset:
                assert loop.time() < deadline, "a record no one waits for is archived within the idle interval"
                await asyncio.sleep(0.05)

            took = []
            for i in range(5):
                await asyncio.sleep(0.7)  # each at another point of the idle interval
                awaited = await (await producer.send(topic, f"acknowledge me {i}".encode()))
                started = loop.time()
                await asyncio.wait_for(archiver.durability.wait(topic, {0: awaited.offset}), 2 * idle_s)
                took.append(loop.time() - started)
            assert max(took) < 0.5, f"waiters answered after {[round(t, 3) for t in took]} s"
        finally:
            await producer.stop()
            await archiver.stop()
        assert [r.value for r in read_partition(tmp_path / "log", topic, 0)] == [b"no one waits for me"] + [
            f"acknowledge me {i}".encode() for i in range(5)
        ]

    asyncio.run(scenario())
