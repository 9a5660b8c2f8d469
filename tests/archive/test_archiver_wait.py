"""The archiver's fetches: one at a time with its partitions paused in between, again at once while records come
or someone waits for a record not fetched yet, otherwise only every idle interval, and woken by a new waiter;
each asks Tansu for the longer wait while a restored log is refolded."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from streams.archive.archiver import FETCH_WAIT_MS, REFOLD_FETCH_WAIT_MS, Archiver
from streams.archive.reader import read_partition
from streams.archive.refold import RefoldGate
from streams.archive.writer import ArchiveWriter
from streams.kafka import KafkaClients

EVENTS = "flotilla.events"
TP = TopicPartition(EVENTS, 0)


class Consumer:
    """What `Archiver._fetch` uses of an aiokafka consumer. Each fetch notes the wait its fetcher would ask the broker
    for and whether the partitions were resumed for it, and brings the records offered to it so far."""

    def __init__(self, on_fetch: Callable[[int], None] = lambda count: None) -> None:
        self._fetcher = SimpleNamespace(_fetch_max_wait_ms=FETCH_WAIT_MS)
        self.waits: list[int] = []
        self.paused = True
        self.resumed_for_each: list[bool] = []
        self.offered: list[Any] = []
        self._on_fetch = on_fetch

    def pause(self, *partitions: TopicPartition) -> None:
        self.paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        self.paused = False

    def offer(self, first: int, count: int) -> None:
        """Records the broker now holds for the archiver (as a producer's would be)."""
        self.offered += [
            SimpleNamespace(offset=o, timestamp=1_800_000_000_000 + o, key=b"k", value=b"v%d" % o, headers=())
            for o in range(first, first + count)
        ]

    async def getmany(self, **options: Any) -> dict[Any, list[Any]]:
        self.waits.append(self._fetcher._fetch_max_wait_ms)
        self.resumed_for_each.append(not self.paused)
        self._on_fetch(len(self.waits))
        brought, self.offered = self.offered, []
        if not brought:
            await asyncio.sleep(options["timeout_ms"] / 1000)  # Tansu holds a fetch it has nothing for
        return {TP: brought} if brought else {}


def archiver_on(tmp_path: Path, consumer: Consumer, idle_fetch_s: float) -> Archiver:
    """An archiver of partition 0 of events, its archive open, reading from ``consumer``, its tasks not started."""
    archiver = Archiver(ArchiveWriter(tmp_path), KafkaClients("127.0.0.1:1"), {EVENTS: 1}, idle_fetch_s=idle_fetch_s)
    archiver.open()
    archiver._consumer = consumer
    archiver._fetched[(EVENTS, 0)] = 0
    archiver._room.set()
    return archiver


def test_fetches_wait_longer_while_a_restored_log_is_refolded(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        gate = RefoldGate()
        gate.arm({0: 10})

        def on_fetch(count: int) -> None:
            if count == 2:  # the refold reaches the archive's end
                gate.folded_part([SimpleNamespace(partition=0, offset=9)], [])
            if count == 3:
                archiver._stopping = True

        consumer = Consumer(on_fetch)
        archiver = archiver_on(tmp_path, consumer, idle_fetch_s=0.01)
        archiver.patient_while(lambda: not gate.caught_up)
        await asyncio.wait_for(archiver._fetch(), 5)
        return consumer.waits

    assert asyncio.run(scenario()) == [REFOLD_FETCH_WAIT_MS, REFOLD_FETCH_WAIT_MS, FETCH_WAIT_MS]


def test_an_archiver_not_told_of_a_refold_fetches_with_the_short_wait(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        def on_fetch(count: int) -> None:
            archiver._stopping = count == 2

        consumer = Consumer(on_fetch)
        archiver = archiver_on(tmp_path, consumer, idle_fetch_s=0.01)
        await asyncio.wait_for(archiver._fetch(), 5)
        return consumer.waits

    assert asyncio.run(scenario()) == [FETCH_WAIT_MS, FETCH_WAIT_MS]


def test_an_idle_archiver_fetches_again_only_after_its_idle_interval_and_with_its_partitions_paused_between(tmp_path: Path) -> None:
    async def scenario() -> Consumer:
        consumer = Consumer()
        consumer.offer(0, 3)
        archiver = archiver_on(tmp_path, consumer, idle_fetch_s=0.3)
        fetching = asyncio.ensure_future(archiver._fetch())
        await asyncio.sleep(0.2)
        # Records, then one fetch that brings none: then quiet.
        assert len(consumer.waits) == 2, consumer.waits
        assert consumer.paused, "no fetch of aiokafka's own between the archiver's"
        await asyncio.sleep(0.25)
        assert len(consumer.waits) == 3, "the next fetch comes after the idle interval"
        archiver._stopping = True
        archiver.durability.asked.set()
        await asyncio.wait_for(fetching, 1)
        return consumer

    consumer = asyncio.run(scenario())
    assert all(consumer.resumed_for_each)


def test_a_waiter_wakes_an_idle_archiver_at_once_and_is_answered_once_its_records_are_synced(tmp_path: Path) -> None:
    """An awaited acknowledgement does not wait for the idle interval (a minute here)."""

    async def scenario() -> float:
        consumer = Consumer()
        archiver = archiver_on(tmp_path, consumer, idle_fetch_s=60)
        workers = [asyncio.ensure_future(archiver._fetch()), asyncio.ensure_future(archiver._commit())]
        try:
            await asyncio.sleep(0.1)
            assert len(consumer.waits) == 1, "quiet since its first fetch brought nothing"
            consumer.offer(0, 5)  # a producer's records, acknowledged by the broker: then it waits for them
            started = asyncio.get_running_loop().time()
            await asyncio.wait_for(archiver.durability.wait(EVENTS, {0: 4}), 5)
            return asyncio.get_running_loop().time() - started
        finally:
            archiver._stopping = True
            archiver.durability.asked.set()
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            archiver.writer.close()

    took = asyncio.run(scenario())
    assert took < 1.0, f"the waiter was answered after {took:.2f} s"
    assert [r.offset for r in read_partition(tmp_path, EVENTS, 0)] == [0, 1, 2, 3, 4]
