"""The worker's archiver: follows every partition of the archived topics and group-commits them to disk.

Records reach the archive as the broker stored them, whoever produced them (the API, the agents,
executors, other services), by following the topics with a group-less consumer from the archive's
own next offsets. Two tasks share the work: one fetches, the other writes, so a group is whatever
arrived while the previous one was being written and synced; no record waits longer than one
group's write and sync once fetched. Writing runs in a thread, off the event loop.

Fetching follows demand, because each fetch costs the worker and the broker CPU whether or not it
brings anything, and Tansu answers a fetch sent while it has records for it at once, but one sent
before they arrived only when its wait (`FETCH_WAIT_MS`) runs out. So the fetcher keeps its
partitions paused (aiokafka then sends no fetch of its own) and sends one fetch at a time: again at
once while fetches bring records or someone waits for a record not fetched yet, otherwise after
`IDLE_FETCH_S`, or as soon as a new waiter wakes it (`ArchivedOffsets.asked`). A waiter's records
are on the broker before it waits, so its fetch is answered at once; records no one waits for (the
executors' run events, the scheduler feed) are archived within `IDLE_FETCH_S` of a quiet spell. An
idle `flotilla up` fetched 200 times a second before (~10% of a core in the worker, ~7% in Tansu).

Callers that must not answer before their records are durable `wait` for their offsets
(`streams.archive.durable`). When a group cannot be written (a full disk, a file system gone
read-only) the archiver says why (`failure`), fails every waiter and refuses new writes at once
(`check`), keeps the group, and tries it again every `RETRY_S` until it goes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import OffsetOutOfRangeError
from mode import Service

from streams.archive.durable import ArchivedOffsets
from streams.archive.segments import Record
from streams.archive.writer import ArchiveWriteError, ArchiveWriter
from streams.config import MAX_MESSAGE_BYTES
from streams.kafka import KafkaClients

log = logging.getLogger(__name__)

FETCH_WAIT_MS = 5  # how long Tansu holds a fetch it has nothing for: a record arriving meanwhile waits this long
# With nothing fetched last and no one waiting, the next fetch: the most a record no one waits for stays unarchived.
IDLE_FETCH_S = 0.25
# The wait while a restored log is refolded (`patient_while`): fetching every 5 ms cost the worker ~8% of a core and
# Tansu ~7% even with nothing to fetch (an idle aiokafka consumer, measured apart), CPU the refold needs; an
# acknowledgement asked for meanwhile waits up to this much longer.
REFOLD_FETCH_WAIT_MS = 50
MAX_PENDING_RECORDS = 50_000  # fetched, not yet written: the fetcher waits beyond this
RETRY_S = 1.0
DRAIN_TIMEOUT_S = 5.0

Key = tuple[str, int]


class Archiver(Service):
    def __init__(
        self, writer: ArchiveWriter, kafka: KafkaClients, topics: Mapping[str, int], idle_fetch_s: float = IDLE_FETCH_S, **kwargs: Any
    ) -> None:
        """``topics``: full topic name -> partition count."""
        super().__init__(**kwargs)
        self._idle_fetch_s = idle_fetch_s
        self.writer = writer
        self._kafka = kafka
        self._partitions = [TopicPartition(topic, p) for topic, count in topics.items() for p in range(count)]
        self._consumer: AIOKafkaConsumer | None = None
        self._pending: dict[Key, list[Record]] = defaultdict(list)
        self._pending_count = 0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self.durability = ArchivedOffsets()
        self._workers: list[asyncio.Task[None]] = []
        self._stopping = False
        self._unwritten: dict[Key, list[Record]] = {}  # a group taken for writing and not written yet
        self._fetched: dict[Key, int] = {}  # the next offset to fetch, per partition
        self._patient: Callable[[], bool] = _never

    def patient_while(self, refolding: Callable[[], bool]) -> None:
        """Fetch with the longer `REFOLD_FETCH_WAIT_MS` while ``refolding()`` (a restored log is refolded)."""
        self._patient = refolding

    def _fetch_wait_ms(self) -> int:
        return REFOLD_FETCH_WAIT_MS if self._patient() else FETCH_WAIT_MS

    def open(self) -> list[str]:
        """Lock the archive and repair its tails (before the worker starts, so a refusal stops it early);
        returns the warnings of what was cut."""
        cuts = self.writer.open()
        self.durability.archived(self.writer.offsets())
        return cuts

    # ------------------------------------------------------------------ service

    async def on_start(self) -> None:
        self._room.set()
        self._consumer = self._kafka.consumer(
            enable_auto_commit=False,
            auto_offset_reset="none",
            fetch_max_wait_ms=self._fetch_wait_ms(),
            max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
            fetch_max_bytes=MAX_MESSAGE_BYTES,
        )
        await self._consumer.start()
        self._consumer.assign(self._partitions)
        self._consumer.pause(*self._partitions)  # before aiokafka's fetcher sees them: `_fetch_once` resumes them
        for tp in self._partitions:
            self._fetched[(tp.topic, tp.partition)] = self.writer.next_offset(tp.topic, tp.partition)
            self._consumer.seek(tp, self._fetched[(tp.topic, tp.partition)])
        log.info("archiving %s to %s", ", ".join(sorted({tp.topic for tp in self._partitions})), self.writer.root)
        self._workers = [asyncio.create_task(self._fetch(), name="archive-fetch"), asyncio.create_task(self._commit(), name="archive")]

    async def on_stop(self) -> None:
        """Archive what the broker holds now before letting go: a clean stop leaves nothing unarchived."""
        if self._consumer is None:
            return
        self._stopping = True
        self._room.set()
        self.durability.asked.set()
        fetch, commit = self._workers
        await asyncio.gather(fetch, return_exceptions=True)  # its fetch in hand ends within its timeout
        self._consumer.resume(*self._partitions)
        async with self._write_lock:
            commit.cancel()
        await asyncio.gather(commit, return_exceptions=True)
        try:
            await asyncio.wait_for(self._drain(), DRAIN_TIMEOUT_S)
        except (TimeoutError, ArchiveWriteError) as exc:
            log.warning("log archive: stopped before it had everything the broker holds: %s", exc or "timed out")
        finally:
            await self._consumer.stop()
            self._consumer = None
            self.writer.close()

    async def _drain(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while True:
            self._take(await consumer.getmany(timeout_ms=50))
            behind = [tp for tp in self._partitions if (consumer.highwater(tp) or 0) > await consumer.position(tp)]
            if not behind:
                break
        await self._write(_merged(self._unwritten, self._swap()))

    async def _fetch(self) -> None:
        while not self._stopping:
            await self._room.wait()
            if self._stopping:
                return
            try:
                brought = await self._fetch_once()
            except OffsetOutOfRangeError as exc:
                await self._out_of_range(exc)
                continue
            if not (brought or self._unfetched_awaited()):
                await self._quiet()

    async def _quiet(self) -> None:
        """Wait `IDLE_FETCH_S`, or less if someone comes to wait for a record not fetched yet (or the archiver stops)."""
        deadline = asyncio.get_running_loop().time() + self._idle_fetch_s
        while not (self._stopping or self._unfetched_awaited()):
            self.durability.asked.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.durability.asked.wait(), deadline - asyncio.get_running_loop().time())
            if asyncio.get_running_loop().time() >= deadline:
                return

    async def _fetch_once(self) -> int:
        """One fetch (paused again before aiokafka's fetcher could send the next); how many records it brought."""
        consumer = self._consumer
        assert consumer is not None
        wait_ms = self._fetch_wait_ms()
        # aiokafka's fetcher takes no other way to change it: its next fetch request asks for this wait.
        consumer._fetcher._fetch_max_wait_ms = wait_ms
        consumer.resume(*self._partitions)
        try:
            fetched = await consumer.getmany(timeout_ms=wait_ms, max_records=10_000)
        finally:
            consumer.pause(*self._partitions)
        self._take(fetched)
        return sum(len(messages) for messages in fetched.values())

    def _unfetched_awaited(self) -> bool:
        """Whether someone waits for a record of ours not fetched yet."""
        return any(offset >= self._fetched.get(key, offset + 1) for key, offset in self.durability.awaited().items())

    def _take(self, fetched: dict[TopicPartition, list[Any]]) -> None:
        for tp, messages in fetched.items():
            self._pending[(tp.topic, tp.partition)] += [
                Record(tp.topic, tp.partition, m.offset, m.timestamp, m.key, m.value, tuple(m.headers or ())) for m in messages
            ]
            self._pending_count += len(messages)
            if messages:
                self._fetched[(tp.topic, tp.partition)] = messages[-1].offset + 1
        if fetched:
            self._arrived.set()
        if self._pending_count >= MAX_PENDING_RECORDS:
            self._room.clear()

    async def _out_of_range(self, exc: OffsetOutOfRangeError) -> None:
        """The archive's next offset is not on the broker: records deleted before they were archived, or an archive of another log."""
        consumer = self._consumer
        assert consumer is not None
        for tp in exc.args[0] if exc.args and isinstance(exc.args[0], dict) else self._partitions:
            start = (await consumer.beginning_offsets([tp]))[tp]
            wanted = self.writer.next_offset(tp.topic, tp.partition)
            if wanted < start:
                log.error("log archive: %s[%d] offsets %d to %d were deleted unarchived", tp.topic, tp.partition, wanted, start - 1)
                consumer.seek(tp, start)
                self._fetched[(tp.topic, tp.partition)] = start
            else:
                failure = (
                    f"the log archive {self.writer.root} holds {tp.topic}[{tp.partition}] up to offset {wanted - 1},"
                    " beyond the broker's log: it is the archive of another log (move it away, or restore it into an empty broker)"
                )
                self.durability.failed(failure)
                log.error(failure)
                await asyncio.sleep(RETRY_S * 10)

    def _swap(self) -> dict[Key, list[Record]]:
        group, self._pending, self._pending_count = self._pending, defaultdict(list), 0
        self._room.set()
        return group

    async def _commit(self) -> None:
        while True:
            await self._arrived.wait()
            self._arrived.clear()
            self._unwritten = self._swap()
            while True:
                try:
                    await self._write(self._unwritten)
                    self._unwritten = {}
                    break
                except ArchiveWriteError:
                    await asyncio.sleep(RETRY_S)
                    self._unwritten = _merged(self._unwritten, self._swap())

    async def _write(self, group: dict[Key, list[Record]]) -> None:
        if not group:
            return
        async with self._write_lock:
            try:
                advanced = await asyncio.to_thread(self.writer.write_group, group)
            except ArchiveWriteError as exc:
                if self.durability.failure != exc.reason:
                    log.error("log archive: %s; nothing is acknowledged until it writes again (retry every %g s)", exc.reason, RETRY_S)
                self.durability.failed(exc.reason)
                raise
        if self.durability.failure is not None:
            log.info("log archive: writing again")
        self.durability.archived(advanced)


def _never() -> bool:
    return False


def _merged(group: dict[Key, list[Record]], later: dict[Key, list[Record]]) -> dict[Key, list[Record]]:
    """A group that failed, with what arrived while it waited to be tried again."""
    for key, records in later.items():
        group.setdefault(key, []).extend(records)
    return group
