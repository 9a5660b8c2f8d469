"""The archive's format: what is written reads back whole, in order, from an offset or a time, in any
Avro library, with every codec; groups become blocks; segments roll; the index points at blocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fastavro
import pytest

from streams.archive.reader import partitions, read_partition, verify
from streams.archive.segments import CODECS, Block, Header, index_path, read_index, segments_in
from streams.archive.source import ArchiveSource
from streams.archive.writer import ArchiveWriter
from tests.archive.builders import EVENTS, T0, records, written
from tests.kit.avro import as_record


@pytest.mark.parametrize("codec", CODECS)
def test_every_record_reads_back_as_written_with_each_codec(tmp_path: Path, codec: str) -> None:
    written(tmp_path, groups=5, per_group=40, codec=codec)
    assert list(read_partition(tmp_path, EVENTS, 0)) == records(0, 200)


def test_a_standard_avro_reader_reads_every_segment(tmp_path: Path) -> None:
    written(tmp_path, groups=30, per_group=50, codec="null", segment_bytes=100_000)
    segments = segments_in(tmp_path / EVENTS / "0")
    assert len(segments) > 3, "segments should roll at their size"
    read = []
    for segment in segments:
        with open(segment, "rb") as handle:
            avro = fastavro.reader(handle)
            assert avro.metadata["flotilla.topic"] == EVENTS and avro.metadata["flotilla.partition"] == "0"
            read += [(r["offset"], r["key"], r["value"], r["timestamp"]) for r in map(as_record, avro)]
    assert read == [(r.offset, r.key, r.value, r.timestamp) for r in records(0, 1500)]


def test_each_group_is_one_block_and_the_index_lists_them(tmp_path: Path) -> None:
    written(tmp_path, groups=4, per_group=25)
    (segment,) = segments_in(tmp_path / EVENTS / "0")
    entries = read_index(index_path(segment))
    assert [(e.first_offset, e.last_offset) for e in entries] == [(0, 24), (25, 49), (50, 74), (75, 99)]
    assert [(e.min_timestamp, e.max_timestamp) for e in entries] == [(T0 + 10 * e.first_offset, T0 + 10 * e.last_offset) for e in entries]


def test_reads_start_from_an_offset_or_a_time(tmp_path: Path) -> None:
    written(tmp_path, groups=40, per_group=50, codec="null", segment_bytes=200_000)
    assert [r.offset for r in read_partition(tmp_path, EVENTS, 0, from_offset=1234)] == list(range(1234, 2000))
    since = [r.offset for r in read_partition(tmp_path, EVENTS, 0, since_ms=T0 + 10 * 777, until_ms=T0 + 10 * 1500)]
    assert since == list(range(777, 1501))


def test_a_read_from_a_late_offset_skips_the_segments_and_blocks_before_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written(tmp_path, groups=40, per_group=50, codec="null", segment_bytes=200_000)
    import streams.archive.reader as reader

    decoded: list[int] = []
    original = reader.decode

    def counting(block: Block, header: Header) -> list[dict[str, Any]]:
        found = original(block, header)
        decoded.append(len(found))
        return found

    monkeypatch.setattr(reader, "decode", counting)
    assert sum(1 for _ in read_partition(tmp_path, EVENTS, 0, from_offset=1950)) == 50
    assert sum(decoded) == 50, "only the block holding the offset should be decoded"


def test_the_writer_goes_on_where_the_archive_ends_and_skips_what_it_has(tmp_path: Path) -> None:
    written(tmp_path, groups=2, per_group=10)
    writer = ArchiveWriter(tmp_path)
    writer.open()
    try:
        assert writer.next_offset(EVENTS, 0) == 20
        assert writer.write_group({(EVENTS, 0): records(15, 10)}) == {(EVENTS, 0): 25}  # 15-19 again: left out
    finally:
        writer.close()
    assert [r.offset for r in read_partition(tmp_path, EVENTS, 0)] == list(range(25))


def test_partitions_and_topics_are_kept_apart(tmp_path: Path) -> None:
    writer = ArchiveWriter(tmp_path)
    writer.open()
    try:
        writer.write_group(
            {
                (EVENTS, 0): records(0, 3),
                (EVENTS, 1): records(0, 2, partition=1),
                ("flotilla.queues", 0): records(0, 1, topic="flotilla.queues"),
            }
        )
    finally:
        writer.close()
    assert partitions(tmp_path) == [(EVENTS, 0), (EVENTS, 1), ("flotilla.queues", 0)]
    assert [(r.topic, r.partition, r.offset) for r in read_partition(tmp_path, EVENTS, 1)] == [(EVENTS, 1, 0), (EVENTS, 1, 1)]
    source = ArchiveSource(tmp_path)
    assert source.topic("queues") == "flotilla.queues"
    merged = list(source.merged())
    assert len(merged) == 6
    assert [r.timestamp for r in merged] == sorted(r.timestamp for r in merged)
    reports = {(r.topic, r.partition): r for r in verify(tmp_path)}
    assert (reports[(EVENTS, 0)].records, reports[(EVENTS, 0)].first_offset, reports[(EVENTS, 0)].last_offset) == (3, 0, 2)
    assert not any(r.problems for r in reports.values())


def test_an_unknown_codec_is_refused_when_the_archive_is_opened(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown archive codec 'lzo'"):
        ArchiveWriter(tmp_path, codec="lzo").open()
