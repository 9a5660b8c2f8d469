"""The log read back from an archive: its feed's generations, audits and refolds from the archive alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.archive.reader import generations
from streams.archive.restore import restored_partitions
from streams.archive.source import ArchiveSource
from streams.archive.writer import ArchiveWriter, seal_generation
from streams.replay.audit import audit
from streams.replay.cycles import Configurations
from streams.replay.source import ArchiveLog, LogUnavailable, event_sequences
from tests.kit.recorded import FEED, PREFIX, MemoryLog, Recorder

FEED_TOPIC = PREFIX + FEED


def archive(log: MemoryLog, root: Path) -> None:
    """The log as a worker's archiver writes it, each sealed feed set aside as a restore does."""
    for sealed in log.sealed:
        writer = ArchiveWriter(root)
        writer.open()
        writer.write_group({(FEED_TOPIC, 0): sealed})
        writer.close()
        seal_generation(root, FEED_TOPIC)
    writer = ArchiveWriter(root)
    writer.open()
    writer.write_group({(PREFIX + topic, partition): records for (topic, partition), records in log.topics.items() if records})
    writer.close()


def test_a_restore_sets_the_feed_aside_and_restores_the_rest(tmp_path: Path) -> None:
    recorder = Recorder()
    recorder.submit("a", "s", count=3)
    recorder.step()
    recorder.restart()
    recorder.step()
    archive(recorder.log, tmp_path)
    assert generations(tmp_path, FEED_TOPIC) == [f"{FEED_TOPIC}@1", FEED_TOPIC]
    assert seal_generation(tmp_path, FEED_TOPIC) == f"{FEED_TOPIC}@2"
    assert seal_generation(tmp_path, FEED_TOPIC) is None, "nothing left to set aside"
    assert generations(tmp_path, FEED_TOPIC) == [f"{FEED_TOPIC}@1", f"{FEED_TOPIC}@2"]
    assert {topic for topic, _ in restored_partitions(tmp_path)} == {"flotilla.events"}


def test_an_audit_from_the_archive_alone_matches_the_audit_of_the_log(tmp_path: Path) -> None:
    recorder = Recorder()
    recorder.submit("a", "fill", count=40)
    recorder.submit("a", "gang", count=3, gang=3)
    for i in range(12):
        if i == 4:
            recorder.submit("b", "late", count=10)
        recorder.step()
    recorder.restart()
    for _ in range(6):
        recorder.step()
    archive(recorder.log, tmp_path)
    source = ArchiveLog(ArchiveSource(tmp_path))
    assert [g.name for g in source.feed_generations()] == [f"{FEED_TOPIC}@1", FEED_TOPIC]
    from_archive = audit(source, Configurations())
    from_log = audit(recorder.log, Configurations())
    assert from_archive.ok and from_log.ok, (from_archive.first, from_log.first)
    assert from_archive.to_json() | {"source": ""} == from_log.to_json() | {"source": ""}
    assert len(list(event_sequences(source))) == sum(len(r) for (topic, _), r in recorder.log.topics.items() if topic == "events")


def test_a_feed_whose_first_records_are_gone_cannot_be_replayed(tmp_path: Path) -> None:
    """The archive's index says where the feed starts; one that starts past offset 0 is refused, naming the offset."""
    recorder = Recorder()
    recorder.submit("a", "s", count=3)
    for _ in range(3):
        recorder.step()
    feed = recorder.log.topics[(FEED, 0)]
    writer = ArchiveWriter(tmp_path)
    writer.open()
    writer.write_group({(FEED_TOPIC, 0): feed[2:]})
    writer.close()
    source = ArchiveLog(ArchiveSource(tmp_path))
    assert source.archive.start_offset(FEED_TOPIC, 0) == feed[2].offset == 2
    with pytest.raises(LogUnavailable, match="from offset 2 only"):
        source.feed_generations()
    whole = tmp_path / "whole"
    writer = ArchiveWriter(whole)
    writer.open()
    writer.write_group({(FEED_TOPIC, 0): feed})
    writer.close()
    assert [g.end for g in ArchiveLog(ArchiveSource(whole)).feed_generations()] == [len(feed)]
