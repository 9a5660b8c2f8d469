"""The log of a running broker as a `LogSource`: what `flotilla audit`, `rebuild` and the `--at`
reads read when they are not given an archive.

Reads are plain aiokafka consumers without a group (nothing is committed, no worker is disturbed),
one per partition, driven from synchronous code through a private event loop, so the pure replays
consume the records as ordinary iterators. A partition is read up to its end as the fetch answers
report it when the read gets there (Tansu's ListOffsets answer stops at the last batch; the fetch's
high watermark does not), so a log that grows while it is read is read to where it has grown.
Call from a thread with no running event loop (the worker's API runs replays in a thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from streams.archive.segments import Record
from streams.config import MAX_MESSAGE_BYTES, Settings
from streams.kafka import KafkaConfigError, kafka_clients
from streams.replay.source import FEED, FeedGeneration, LogUnavailable
from streams.topics import changelog_name

FETCH_WAIT_MS = 100
FETCH_RECORDS = 10_000
CONNECT_TIMEOUT_S = 10.0


class BrokerLog:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.description = f"the broker {settings.bootstrap}"
        try:
            self._clients = kafka_clients(settings)  # the deployment's security settings, as every client
        except KafkaConfigError as exc:
            raise LogUnavailable(str(exc)) from exc
        self._loop = asyncio.new_event_loop()
        self._consumers: list[AIOKafkaConsumer] = []
        self._metadata = self._consumer()

    def close(self) -> None:
        for consumer in self._consumers:
            self._loop.run_until_complete(consumer.stop())
        self._consumers.clear()
        self._loop.close()

    def __enter__(self) -> BrokerLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, coroutine: Any) -> Any:
        return self._loop.run_until_complete(coroutine)

    def _consumer(self) -> AIOKafkaConsumer:
        async def started() -> AIOKafkaConsumer:
            consumer = self._clients.consumer(  # on this loop: aiokafka takes the running one
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=FETCH_WAIT_MS,
                max_partition_fetch_bytes=MAX_MESSAGE_BYTES,
                fetch_max_bytes=MAX_MESSAGE_BYTES,
                request_timeout_ms=int(CONNECT_TIMEOUT_S * 1000) + 5000,
            )
            try:
                await asyncio.wait_for(consumer.start(), CONNECT_TIMEOUT_S)
            except BaseException:
                await consumer.stop()
                raise
            return consumer

        try:
            consumer = self._run(started())
        except (KafkaError, OSError, TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            raise LogUnavailable(f"cannot reach {self.description}: {reason} (give --broker, or --from-archive DIR)") from exc
        self._consumers.append(consumer)
        return consumer

    def name(self, topic: str) -> str:
        """The full name of a topic given by its short name, or of a table's changelog (``<table>-changelog``)."""
        if topic.endswith("-changelog"):
            return changelog_name(self.settings, topic.removesuffix("-changelog"))
        return self.settings.topic(topic)

    def partitions(self, topic: str) -> list[int]:
        name = self.name(topic)
        found = self._metadata.partitions_for_topic(name)
        if not found:
            self._run(self._metadata._client.force_metadata_update())
            found = self._metadata.partitions_for_topic(name)
        if not found:
            raise LogUnavailable(f"{self.description} has no topic {name}")
        return sorted(found)

    def start_offset(self, topic: str, partition: int) -> int:
        tp = TopicPartition(self.name(topic), partition)
        return int(self._run(self._metadata.beginning_offsets([tp]))[tp])

    def records(
        self, topic: str, partition: int, *, from_offset: int = 0, since_ms: int | None = None, until_ms: int | None = None
    ) -> Iterator[Record]:
        self.partitions(topic)
        return self._read(TopicPartition(self.name(topic), partition), from_offset, since_ms, until_ms)

    def _read(self, tp: TopicPartition, from_offset: int, since_ms: int | None, until_ms: int | None) -> Iterator[Record]:
        consumer = self._consumer()
        try:
            self._run(_assign(consumer, tp))
            start = from_offset
            if since_ms is not None:
                found = self._run(consumer.offsets_for_times({tp: since_ms}))[tp]
                start = max(start, found.offset) if found is not None else -1
            if start < 0:
                return
            self._run(_seek(consumer, tp, start))
            while True:
                fetched = self._run(consumer.getmany(tp, timeout_ms=FETCH_WAIT_MS * 5, max_records=FETCH_RECORDS))
                for message in fetched.get(tp, ()):
                    if (since_ms is None or message.timestamp >= since_ms) and (until_ms is None or message.timestamp <= until_ms):
                        yield Record(
                            tp.topic,
                            tp.partition,
                            message.offset,
                            message.timestamp,
                            message.key,
                            message.value,
                            tuple(message.headers or ()),
                        )
                highwater = consumer.highwater(tp)
                if highwater is not None and self._run(consumer.position(tp)) >= highwater:
                    return
        finally:
            self._consumers.remove(consumer)
            self._run(consumer.stop())

    def feed_generations(self) -> list[FeedGeneration]:
        start = self.start_offset(FEED, 0)
        if start > 0:
            raise LogUnavailable(
                f"{self.description} holds {self.name(FEED)} from offset {start} only (the records before were deleted by"
                " retention): a replay needs the feed from offset 0; read an archive of it with --from-archive DIR"
            )
        return [FeedGeneration(self.name(FEED), self.end_offset(FEED, 0), lambda: self.records(FEED, 0))]

    def end_offset(self, topic: str, partition: int) -> int:
        """The partition's end as a fetch reports it (its high watermark)."""
        consumer = self._consumer()
        try:
            tp = TopicPartition(self.name(topic), partition)
            self._run(_assign(consumer, tp))
            end = int(self._run(consumer.end_offsets([tp]))[tp])
            if end > 0:
                self._run(_seek(consumer, tp, end - 1))
                while consumer.highwater(tp) is None:
                    self._run(consumer.getmany(tp, timeout_ms=FETCH_WAIT_MS * 5, max_records=1))
                end = max(end, consumer.highwater(tp) or 0)
            return end
        finally:
            self._consumers.remove(consumer)
            self._run(consumer.stop())

    def keyed(self, topic: str) -> Iterator[tuple[bytes, bytes | None]]:
        """A compacted topic's records (its short name, or ``<table>-changelog``) as (key, value), partition by
        partition in log order, None for a tombstone: the last of each key is the topic's view."""
        for partition in self.partitions(topic):
            for record in self.records(topic, partition):
                yield record.key or b"", record.value


# aiokafka's assign and seek want the running loop: they run on the reader's own.
async def _assign(consumer: AIOKafkaConsumer, tp: TopicPartition) -> None:
    consumer.assign([tp])


async def _seek(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> None:
    consumer.seek(tp, offset)
