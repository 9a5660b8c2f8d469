"""Archives written for tests: records of a partition with known offsets, times and bytes."""

from __future__ import annotations

from pathlib import Path

from streams.archive.files import Files, OsFiles
from streams.archive.segments import Record
from streams.archive.writer import ArchiveWriter

EVENTS = "flotilla.events"
T0 = 1_800_000_000_000  # epoch ms


def records(first: int, count: int, topic: str = EVENTS, partition: int = 0, step_ms: int = 10) -> list[Record]:
    """Offsets first.., one every ``step_ms``, with a value that tells them apart and a header."""
    return [
        Record(
            topic,
            partition,
            offset,
            T0 + offset * step_ms,
            f"queue/set-{offset % 3}".encode(),
            f"value {offset} ".encode() * 20,
            (("trace", f"t{offset}".encode()),),
        )
        for offset in range(first, first + count)
    ]


def written(
    root: Path, groups: int, per_group: int, *, codec: str = "deflate", segment_bytes: int = 1 << 20, files: Files | None = None
) -> None:
    """An archive of ``groups`` group commits of ``per_group`` records each on partition 0 of events, closed."""
    writer = ArchiveWriter(root, files=files or OsFiles(), codec=codec, segment_bytes=segment_bytes)
    writer.open()
    try:
        for group in range(groups):
            writer.write_group({(EVENTS, 0): records(group * per_group, per_group)})
    finally:
        writer.close()
