"""The archiver's fetch wait: longer while a restored log is refolded, the short one again once it has caught up."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from streams.archive.archiver import FETCH_WAIT_MS, REFOLD_FETCH_WAIT_MS, Archiver
from streams.archive.refold import RefoldGate
from streams.archive.writer import ArchiveWriter
from streams.kafka import KafkaClients

EVENTS = "flotilla.events"


class Consumer:
    """What `Archiver._fetch` uses of an aiokafka consumer: each fetch notes the wait its fetcher would ask the broker for."""

    def __init__(self, on_fetch: Any) -> None:
        self._fetcher = SimpleNamespace(_fetch_max_wait_ms=FETCH_WAIT_MS)
        self.waits: list[int] = []
        self._on_fetch = on_fetch

    async def getmany(self, **options: Any) -> dict[Any, list[Any]]:
        self.waits.append(self._fetcher._fetch_max_wait_ms)
        self._on_fetch(len(self.waits))
        return {}


def test_fetches_wait_longer_while_a_restored_log_is_refolded(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        gate = RefoldGate()
        gate.arm({0: 10})
        archiver = Archiver(ArchiveWriter(tmp_path), KafkaClients("127.0.0.1:1"), {EVENTS: 1})
        archiver.patient_while(lambda: not gate.caught_up)

        def on_fetch(count: int) -> None:
            if count == 2:  # the refold reaches the archive's end
                gate.folded_part([SimpleNamespace(partition=0, offset=9)], [])
            if count == 3:
                archiver._stopping = True

        consumer = Consumer(on_fetch)
        archiver._consumer = consumer
        archiver._room.set()
        await asyncio.wait_for(archiver._fetch(), 5)
        return consumer.waits

    assert asyncio.run(scenario()) == [REFOLD_FETCH_WAIT_MS, REFOLD_FETCH_WAIT_MS, FETCH_WAIT_MS]


def test_an_archiver_not_told_of_a_refold_fetches_with_the_short_wait(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        archiver = Archiver(ArchiveWriter(tmp_path), KafkaClients("127.0.0.1:1"), {EVENTS: 1})

        def on_fetch(count: int) -> None:
            archiver._stopping = count == 2

        consumer = Consumer(on_fetch)
        archiver._consumer = consumer
        archiver._room.set()
        await asyncio.wait_for(archiver._fetch(), 5)
        return consumer.waits

    assert asyncio.run(scenario()) == [FETCH_WAIT_MS, FETCH_WAIT_MS]
