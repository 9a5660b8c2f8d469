"""The log a replay reads, behind one interface: a running broker or an archive directory.

`LogSource` names topics by their short name (``events``, ``queues``, ``scheduler-feed``,
``job-states``); the source adds the deployment's prefix. Records are `streams.archive.segments.Record`
whatever the source. `ArchiveLog` reads an archive (``--from-archive DIR``) through
`streams.archive.source.ArchiveSource`; `streams.replay.broker.BrokerLog` reads a broker.

The scheduler feed comes in generations: on the embedded broker every `flotilla up` starts a new
one at offset 0 (the feed is not restored: the worker refolds `events` and feeds its scheduler
afresh), and the archive keeps the earlier ones apart (`streams.archive.reader.generations`). Each
generation replays from an empty index, as its scheduler started.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from schemas.codec import decode
from streams.archive.reader import generations
from streams.archive.segments import Record
from streams.archive.source import ArchiveSource
from streams.scheduler import feed

EVENTS, QUEUES, FEED, JOB_STATES = "events", "queues", "scheduler-feed", "job-states"


class LogUnavailable(RuntimeError):
    """The log cannot answer what a replay asks (a topic missing, records cut by retention); the message says what to do."""


@dataclass(frozen=True)
class FeedGeneration:
    """One scheduler feed from its offset 0: ``name`` as the source knows it, ``end`` its next offset."""

    name: str
    end: int
    read: Callable[[], Iterator[Record]]

    def records(self) -> Iterator[Record]:
        return self.read()


class LogSource(Protocol):
    @property
    def description(self) -> str:
        """For messages: "the archive DIR", "the broker HOST:PORT"."""
        ...

    def partitions(self, topic: str) -> list[int]:
        """The partitions of ``topic`` (short name); raises LogUnavailable when the log has no such topic."""
        ...

    def records(
        self, topic: str, partition: int, *, from_offset: int = 0, since_ms: int | None = None, until_ms: int | None = None
    ) -> Iterator[Record]:
        """One partition's records in offset order, from ``from_offset``, with a timestamp within [since_ms, until_ms]."""
        ...

    def feed_generations(self) -> list[FeedGeneration]:
        """The scheduler feed's generations, oldest first; raises LogUnavailable when a generation
        does not start at offset 0 (its first records deleted: no replay can rebuild the index)."""
        ...


def merged(source: LogSource, topic: str, *, since_ms: int | None = None, until_ms: int | None = None) -> Iterator[Record]:
    """Every record of ``topic`` in timestamp order; each partition's own order is kept."""
    streams = [source.records(topic, p, since_ms=since_ms, until_ms=until_ms) for p in source.partitions(topic)]
    return heapq.merge(*streams, key=lambda r: (r.timestamp, r.partition, r.offset))


def event_sequences(
    source: LogSource, *, since_ms: int | None = None, until_ms: int | None = None
) -> Iterator[tuple[Record, dict[str, Any]]]:
    """The records of `events` with their event sequences decoded, in timestamp order."""
    for record in merged(source, EVENTS, since_ms=since_ms, until_ms=until_ms):
        if record.value is not None:
            yield record, decode("event_sequence", record.value)


def feed_records(generation: FeedGeneration) -> Iterator[tuple[Record, feed.FeedRecord | None]]:
    """A feed generation's records, decoded; None for a record that is not a feed record (the
    scheduler skips those too)."""
    for record in generation.records():
        try:
            yield record, feed.decode(record.value or b"")
        except ValueError:
            yield record, None


@dataclass(frozen=True)
class ArchiveLog:
    """A `LogSource` over an archive directory: no broker needed."""

    archive: ArchiveSource

    @property
    def description(self) -> str:
        return f"the archive {self.archive.root}"

    def _topic(self, topic: str) -> str:
        try:
            return self.archive.topic(topic)
        except KeyError as exc:
            raise LogUnavailable(str(exc.args[0])) from exc

    def partitions(self, topic: str) -> list[int]:
        return self.archive.partitions(self._topic(topic))

    def records(
        self, topic: str, partition: int, *, from_offset: int = 0, since_ms: int | None = None, until_ms: int | None = None
    ) -> Iterator[Record]:
        return self.archive.records(self._topic(topic), partition, from_offset=from_offset, since_ms=since_ms, until_ms=until_ms)

    def feed_generations(self) -> list[FeedGeneration]:
        return [self._generation(name) for name in generations(self.archive.root, self._topic(FEED))]

    def _generation(self, name: str) -> FeedGeneration:
        first = self.archive.start_offset(name, 0)
        if first is not None and first != 0:
            raise LogUnavailable(f"{self.description} holds {name} from offset {first} only: a replay needs the feed from offset 0")
        return FeedGeneration(name, self.archive.end_offset(name, 0), lambda: self.archive.records(name, 0))
