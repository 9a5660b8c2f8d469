"""Reading the archive back: records from an offset or a time, a torn tail found and cut, a full check.

An archive is ``<root>/<topic>/<partition>/`` directories of segments (`streams.archive.segments`).
Records come back in offset order per partition; a block that does not read is never skipped:
reading stops with `ArchiveCorrupt`, naming the file and the byte, except for the one damage a
crash leaves behind, a torn last block of a partition's last segment, which `repair_tail` cuts
when the writer opens the archive (it was never acknowledged: its group had not been synced).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from streams.archive.files import Files
from streams.archive.segments import (
    BadBlock,
    Block,
    Header,
    IndexEntry,
    Record,
    blocks,
    decode,
    entry_for,
    first_offset_of,
    index_path,
    read_header,
    read_index,
    segments_in,
    to_record,
)

log = logging.getLogger(__name__)


class ArchiveCorrupt(RuntimeError):
    """A segment that does not read, where no crash could have left it so: acknowledged records may be at stake."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(
            f"the log archive is damaged: {path} at byte {position}: {reason}. Nothing after it was read. "
            f"Run `flotilla log verify --from-archive {path.parents[2]}` for a full report; restore the file from a backup, "
            "or move the damaged segment and every later one of its partition out of the archive to start from what is before it"
        )
        self.path, self.position, self.reason = path, position, reason


def partitions(root: Path) -> list[tuple[str, int]]:
    """(topic, partition) of every partition directory under ``root``, sorted."""
    if not root.is_dir():
        return []
    found = []
    for topic_dir in root.iterdir():
        if topic_dir.is_dir():
            found += [(topic_dir.name, int(p.name)) for p in topic_dir.iterdir() if p.is_dir() and p.name.isdigit()]
    return sorted(found)


def partition_dir(root: Path, topic: str, partition: int) -> Path:
    return root / topic / str(partition)


# A topic set aside when the broker's copy of it started again from offset 0 is archived as
# ``<topic>@<n>``: Kafka topic names cannot hold the character, so no topic is ever mistaken for one.
GENERATION = "@"


def generations(root: Path, topic: str) -> list[str]:
    """The archived names of ``topic``'s generations, oldest first: ``<topic>@1``, ``<topic>@2``, ..., then ``topic``."""
    names = {name for name, _ in partitions(root)}
    sealed = sorted((int(n[len(topic) + 1 :]), n) for n in names if n.startswith(topic + GENERATION) and n[len(topic) + 1 :].isdigit())
    return [n for _, n in sealed] + ([topic] if topic in names else [])


def is_generation(name: str) -> bool:
    """Whether an archived topic name is a generation set aside (`generations`), not a topic of the broker."""
    return GENERATION in name


@contextmanager
def mapped(path: Path) -> Iterator[memoryview]:
    """The file's bytes (segments are tens of MiB at most)."""
    yield memoryview(path.read_bytes())


def _segment_header(path: Path, data: memoryview) -> Header:
    try:
        return read_header(data)
    except BadBlock as exc:
        raise ArchiveCorrupt(path, exc.position, exc.reason) from exc


def read_partition(
    root: Path, topic: str, partition: int, *, from_offset: int = 0, since_ms: int | None = None, until_ms: int | None = None
) -> Iterator[Record]:
    """The partition's records in offset order, from ``from_offset`` on, with a timestamp within [since_ms, until_ms].

    The index picks the first segment and block to read; blocks whose time range lies outside
    the window are passed over without decoding. A partial block at the very end of the last
    segment is where the writer is (or was when it stopped): reading ends there."""
    segments = _segments_from(partition_dir(root, topic, partition), from_offset, since_ms)
    for path in segments:
        with mapped(path) as data:
            header = _segment_header(path, data)
            start = _start_position(read_index(index_path(path)), header, from_offset, since_ms)
            entries = {entry.position: entry for entry in read_index(index_path(path))}
            try:
                for block in blocks(data, header, start):
                    entry = entries.get(block.position)
                    if entry is not None and (
                        entry.last_offset < from_offset
                        or (since_ms is not None and entry.max_timestamp < since_ms)
                        or (until_ms is not None and entry.min_timestamp > until_ms)
                    ):
                        continue
                    for envelope in decode(block, header):
                        if envelope["offset"] < from_offset:
                            continue
                        stamp = envelope["timestamp"]
                        if (since_ms is None or stamp >= since_ms) and (until_ms is None or stamp <= until_ms):
                            yield to_record(envelope)
            except BadBlock as exc:
                if path == segments[-1] and not _readable_after(data, header, exc.position):
                    return
                raise ArchiveCorrupt(path, exc.position, exc.reason) from exc


def _segments_from(directory: Path, from_offset: int, since_ms: int | None) -> list[Path]:
    segments = segments_in(directory)
    first = 0
    for i, path in enumerate(segments):
        if first_offset_of(path) <= from_offset:
            first = i
    segments = segments[first:]
    if since_ms is not None:
        # Skip whole segments whose every indexed block is older (a segment without index is read).
        while len(segments) > 1:
            entries = read_index(index_path(segments[0]))
            if not entries or max(e.max_timestamp for e in entries) >= since_ms:
                break
            segments = segments[1:]
    return segments


def _start_position(entries: list[IndexEntry], header: Header, from_offset: int, since_ms: int | None) -> int:
    start = header.end
    for entry in entries:
        if entry.first_offset > from_offset or (since_ms is not None and entry.max_timestamp >= since_ms):
            break
        start = entry.position
    return start


# ---------------------------------------------------------------------------------------------- the tail


@dataclass(frozen=True)
class Tail:
    """A partition's state once its last segment was checked: where to write next and what was cut."""

    next_offset: int  # the offset the next record is expected at (0 when the partition is empty)
    cut: str | None = None  # the warning, when a torn tail was cut


def repair_tail(root: Path, topic: str, partition: int, files: Files) -> Tail:
    """Check the partition's last segment from its last indexed block on, cut a torn tail, rewrite its index.

    Damage with readable records after it is no torn tail: ArchiveCorrupt. Earlier segments were
    complete when the next one was started and are checked by `verify` or while being read."""
    directory = partition_dir(root, topic, partition)
    segments = segments_in(directory)
    while segments:
        path = segments[-1]
        with mapped(path) as data:
            scan = _scan_tail(path, data)
        if not scan.entries:  # no whole block: it held nothing that was acknowledged
            files.remove(path)
            files.remove(index_path(path))
            files.sync_dir(directory)
            if scan.torn is not None:
                log.warning("log archive %s[%d]: removed %s, whose first block was torn (never acknowledged)", topic, partition, path.name)
            segments.pop()
            continue
        cut = None
        if scan.torn is not None:
            handle = files.append(path)
            try:
                handle.truncate(scan.good_end)
                handle.sync()
            finally:
                handle.close()
            next_offset = scan.entries[-1].last_offset + 1
            cut = (
                f"log archive {topic}[{partition}]: cut a torn last block at offset {next_offset} ({path} from byte {scan.good_end}:"
                f" {scan.torn}); it was written when the process stopped and never acknowledged"
            )
            log.warning(cut)
        _rewrite_index(path, scan.entries, files)
        return Tail(scan.entries[-1].last_offset + 1, cut)
    return Tail(0)


@dataclass
class _Scan:
    entries: list[IndexEntry] = field(default_factory=list)
    good_end: int = 0  # end of the last whole block (or of the header when there is none)
    torn: str | None = None


def _scan_tail(path: Path, data: memoryview) -> _Scan:
    header = _segment_header(path, data)  # written whole before the segment got its name: damage, not a tear
    indexed = [e for e in read_index(index_path(path)) if e.position < len(data)]
    for attempt in (indexed, []):  # from the last indexed block; from the first if that one does not read
        start = attempt[-1].position if attempt else header.end
        scan = _Scan(entries=list(attempt[:-1]) if attempt else [], good_end=start)
        try:
            for block in blocks(data, header, start):
                scan.entries.append(entry_for(block.position, decode(block, header)))
                scan.good_end = block.end
            return scan
        except BadBlock as exc:
            if attempt and exc.position == start:
                continue  # the index pointed at no block: read the segment from its start
            if _readable_after(data, header, exc.position):
                raise ArchiveCorrupt(path, exc.position, exc.reason) from exc
            scan.torn = exc.reason
            return scan
    raise AssertionError("unreachable")


def _readable_after(data: memoryview, header: Header, position: int) -> bool:
    """Whether some whole block that decodes follows ``position``: then the damage is not a torn tail."""
    raw = bytes(data)
    at = raw.find(header.sync, position + 1)
    while at != -1:
        try:
            block = next(blocks(data, header, at + len(header.sync)), None)
            if block is not None:
                decode(block, header)
                return True
        except BadBlock:
            pass
        at = raw.find(header.sync, at + 1)
    return False


def _rewrite_index(path: Path, entries: list[IndexEntry], files: Files) -> None:
    target = index_path(path)
    if read_index(target) == entries:
        return
    files.remove(target)
    handle = files.append(target)
    try:
        handle.write(b"".join(entry.pack() for entry in entries))
    finally:
        handle.close()


# ---------------------------------------------------------------------------------------------- verify


@dataclass
class PartitionReport:
    topic: str
    partition: int
    segments: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    first_time: int | None = None
    last_time: int | None = None
    problems: list[str] = field(default_factory=list)


def verify(root: Path) -> list[PartitionReport]:
    """Read every block of every segment: per partition the count, first and last offset and time, and every problem found."""
    reports = []
    for topic, partition in partitions(root):
        report = PartitionReport(topic, partition)
        segments = segments_in(partition_dir(root, topic, partition))
        report.segments = len(segments)
        expected: int | None = None
        for number, path in enumerate(segments, start=1):
            with mapped(path) as data:
                try:
                    header = read_header(data)
                except BadBlock as exc:
                    report.problems.append(f"{path} at byte {exc.position}: {exc.reason}")
                    continue
                try:
                    for block in blocks(data, header):
                        expected = _check_block(report, path, block, header, expected)
                except BadBlock as exc:
                    last = number == len(segments) and not _readable_after(data, header, exc.position)
                    what = "torn last block (never acknowledged; cut at the next start)" if last else "damaged"
                    report.problems.append(f"{path} at byte {exc.position}: {what}: {exc.reason}")
                    expected = None  # the rest of the segment is unread: the next one's first offset is not a gap of its own
        reports.append(report)
    return reports


def _check_block(report: PartitionReport, path: Path, block: Block, header: Header, expected: int | None) -> int:
    records = decode(block, header)
    for envelope in records:
        offset, stamp = envelope["offset"], envelope["timestamp"]
        if expected is not None and offset != expected:
            kind = "gap" if offset > expected else "repeated or out-of-order offsets"
            report.problems.append(f"{path} at byte {block.position}: {kind}: offset {offset} follows {expected - 1}")
        expected = offset + 1
        if report.first_offset is None:
            report.first_offset, report.first_time = offset, stamp
        report.last_offset, report.last_time = offset, stamp
        report.records += 1
    return expected if expected is not None else 0
