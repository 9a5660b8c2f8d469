"""Acknowledged means durable: what a writer of the log awaits before it answers its caller.

With an archive (the embedded default) a record is durable once the archive has it synced; without
one (a replicated Kafka) once the broker acknowledged it, so `NotArchived` answers at once.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping
from typing import Protocol


class ArchiveUnavailable(RuntimeError):
    """The archive cannot take records now (a full disk, an unwritable directory): nothing may be acknowledged."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Durability(Protocol):
    def check(self) -> None:
        """Raise ArchiveUnavailable if records written now could not be archived; called before writing."""
        ...

    async def wait(self, topic: str, offsets: Mapping[int, int]) -> None:
        """Return once the record at each ``offsets[partition]`` of ``topic`` (and all before it) is durable;
        ArchiveUnavailable if the archive fails first."""
        ...


class NotArchived:
    """A log whose broker makes records durable itself."""

    def check(self) -> None:
        return None

    async def wait(self, topic: str, offsets: Mapping[int, int]) -> None:
        return None


class ArchivedOffsets:
    """What the archive has synced, per (topic, partition), and who waits for what: the archiver's `Durability`.

    A waiter sets `asked`: an idle archiver fetches rarely, and is woken by it to fetch what is awaited at once."""

    def __init__(self, offsets: Mapping[tuple[str, int], int] | None = None) -> None:
        self._next: dict[tuple[str, int], int] = dict(offsets or {})  # the first offset not archived yet
        self._waiters: dict[tuple[str, int], list[tuple[int, asyncio.Future[None]]]] = defaultdict(list)
        self.failure: str | None = None
        self.asked = asyncio.Event()

    def check(self) -> None:
        if self.failure is not None:
            raise ArchiveUnavailable(self.failure)

    async def wait(self, topic: str, offsets: Mapping[int, int]) -> None:
        self.check()
        waiting = []
        for partition, offset in offsets.items():
            key = (topic, partition)
            if self._next.get(key, 0) > offset:
                continue
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters[key].append((offset, future))
            waiting.append(future)
        if waiting:
            self.asked.set()
            await asyncio.gather(*waiting)

    def awaited(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the highest offset someone waits for, of the partitions someone waits on."""
        return {key: max(offset for offset, _ in waiting) for key, waiting in self._waiters.items() if waiting}

    def offsets(self) -> dict[tuple[str, int], int]:
        return dict(self._next)

    def archived(self, advanced: Mapping[tuple[str, int], int]) -> None:
        """The archive synced each partition up to (not including) the given offset."""
        self.failure = None
        for key, next_offset in advanced.items():
            self._next[key] = max(next_offset, self._next.get(key, 0))
            still = []
            for offset, future in self._waiters.get(key, []):
                if offset < next_offset:
                    if not future.done():
                        future.set_result(None)
                else:
                    still.append((offset, future))
            self._waiters[key] = still

    def failed(self, reason: str) -> None:
        """Nothing more is durable until `archived` is called again: every waiter hears why, and so will new writers."""
        self.failure = reason
        for waiting in self._waiters.values():
            for _, future in waiting:
                if not future.done():
                    future.set_exception(ArchiveUnavailable(reason))
        self._waiters.clear()
