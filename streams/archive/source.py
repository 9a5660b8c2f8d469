"""The log as an archive directory holds it: what replays read when there is no broker (``--from-archive DIR``).

`ArchiveSource` answers the questions a replay asks of Kafka (which topics and partitions, the
records of one partition from an offset or a time, every record in time order, the decoded event
sequences) from the archive alone. `flotilla log export` reads through it, and a replay can take it as its source of records
(the command line has no replay command yet).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.codec import decode
from streams.archive.reader import partition_dir, partitions, read_partition
from streams.archive.segments import Record, first_offset_of, index_path, read_index, segments_in


@dataclass(frozen=True)
class ArchiveSource:
    root: Path

    def topics(self) -> list[str]:
        return sorted({topic for topic, _ in partitions(self.root)})

    def topic(self, name: str) -> str:
        """The archived topic called ``name``, with or without its prefix (``events`` finds ``flotilla.events``)."""
        topics = self.topics()
        if name in topics:
            return name
        found = [topic for topic in topics if topic.endswith(f".{name}")]
        if len(found) != 1:
            raise KeyError(f"the archive {self.root} has no topic {name!r} (it has: {', '.join(topics) or 'none'})")
        return found[0]

    def partitions(self, topic: str) -> list[int]:
        return [p for t, p in partitions(self.root) if t == topic]

    def end_offset(self, topic: str, partition: int) -> int:
        """The partition's next offset as the archive's index says (quick: no segment is read)."""
        segments = segments_in(partition_dir(self.root, topic, partition))
        if not segments:
            return 0
        entries = read_index(index_path(segments[-1]))
        return entries[-1].last_offset + 1 if entries else first_offset_of(segments[-1])

    def start_offset(self, topic: str, partition: int) -> int | None:
        """The partition's first offset as the archive's index says (quick: no block is decoded); None when it holds no segment."""
        segments = segments_in(partition_dir(self.root, topic, partition))
        if not segments:
            return None
        entries = read_index(index_path(segments[0]))
        return entries[0].first_offset if entries else first_offset_of(segments[0])

    def records(
        self, topic: str, partition: int, *, from_offset: int = 0, since_ms: int | None = None, until_ms: int | None = None
    ) -> Iterator[Record]:
        """One partition's records in offset order."""
        return read_partition(self.root, topic, partition, from_offset=from_offset, since_ms=since_ms, until_ms=until_ms)

    def merged(self, topics: Iterable[str] | None = None, *, since_ms: int | None = None, until_ms: int | None = None) -> Iterator[Record]:
        """Every record of ``topics`` (default: all) in timestamp order; each partition's own order is kept."""
        chosen = set(self.topics() if topics is None else topics)
        streams = [
            self.records(topic, partition, since_ms=since_ms, until_ms=until_ms)
            for topic, partition in partitions(self.root)
            if topic in chosen
        ]
        return heapq.merge(*streams, key=lambda record: (record.timestamp, record.topic, record.partition, record.offset))

    def event_sequences(self, *, since_ms: int | None = None, until_ms: int | None = None) -> Iterator[tuple[Record, dict[str, Any]]]:
        """The `events` topic's records with their decoded event sequences, in timestamp order."""
        for record in self.merged([self.topic("events")], since_ms=since_ms, until_ms=until_ms):
            yield record, decode("event_sequence", record.value)
