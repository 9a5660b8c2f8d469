"""`flotilla log verify` and `flotilla log export`, run as the command line runs them, on archives written here."""

from __future__ import annotations

import json
from pathlib import Path

import fastavro
import pytest

from schemas.codec import encode
from streams.archive.segments import Record, index_path, read_index, segments_in
from streams.archive.source import ArchiveSource
from streams.archive.writer import ArchiveWriter
from streams.client.cli import main
from streams.domain import events
from tests.archive.builders import EVENTS, T0, written
from tests.kit.avro import as_record

QUEUES = "flotilla.queues"


def event_log(root: Path) -> None:
    """Three event sequences of job set q/s, a second apart, and one queue definition."""
    writer = ArchiveWriter(root)
    writer.open()
    try:
        for offset in range(3):
            cancel = events.payload("JobCancelRequested", {"reason": "x"})
            body = events.event(f"event-{offset}", T0 + offset * 1000, f"job-{offset}", cancel)
            (sequence,) = events.sequences("q", "s", "alice", [], [body])
            record = Record(EVENTS, 0, offset, T0 + offset * 1000, b"q/s", encode("event_sequence", sequence), ())
            writer.write_group({(EVENTS, 0): [record]})
        queue = encode("queue", {"name": "q", "priority_factor": 1.0})
        writer.write_group({(QUEUES, 0): [Record(QUEUES, 0, 0, T0, b"q", queue, ())]})
    finally:
        writer.close()


def test_verify_reports_each_partition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event_log(tmp_path)
    assert main(["log", "verify", "--from-archive", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "flotilla.events[0]: 3 records in 1 segment(s), offsets 0-2, 2027-01-15T08:00:00.000Z to 2027-01-15T08:00:02.000Z" in out, out
    assert "flotilla.queues[0]: 1 records" in out
    assert main(["log", "verify", "--from-archive", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [(p["topic"], p["records"], p["problems"]) for p in report["partitions"]] == [(EVENTS, 3, []), (QUEUES, 1, [])]


def test_verify_fails_on_a_damaged_segment_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    written(tmp_path, groups=3, per_group=10, codec="null")
    (segment,) = segments_in(tmp_path / EVENTS / "0")
    data = bytearray(segment.read_bytes())
    data[read_index(index_path(segment))[0].position + 50] ^= 0xFF
    segment.write_bytes(bytes(data))
    assert main(["log", "verify", "--from-archive", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert f"problem: {segment} at byte" in captured.out and "1 problem(s) found" in captured.err


def test_export_writes_the_window_as_json_lines_with_values_decoded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    event_log(tmp_path)
    since, until = "2027-01-15T08:00:01Z", str(T0 + 2000)
    assert main(["log", "export", "--from-archive", str(tmp_path), "--topic", "events", "--since", since, "--until", until]) == 0
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [line["offset"] for line in lines] == [1, 2] and "exported 2 records" in captured.err
    assert lines[0]["key"] == "q/s" and lines[0]["time"] == "2027-01-15T08:00:01.000Z"
    assert lines[0]["value"]["events"][0]["event_id"] == "event-1" and lines[0]["value"]["user"] == "alice"


def test_export_as_avro_is_the_envelope_any_avro_reader_reads(tmp_path: Path) -> None:
    event_log(tmp_path)
    out = tmp_path / "export.avro"
    assert main(["log", "export", "--from-archive", str(tmp_path), "--format", "avro", "--output", str(out)]) == 0
    with open(out, "rb") as handle:
        records = [as_record(r) for r in fastavro.reader(handle)]
    assert [(r["topic"], r["offset"]) for r in records] == [(EVENTS, 0), (QUEUES, 0), (EVENTS, 1), (EVENTS, 2)]


def test_export_refuses_what_it_cannot_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "export", "--from-archive", str(tmp_path / "none")]) == 1
    assert "no log archive at" in capsys.readouterr().err
    event_log(tmp_path)
    assert main(["log", "export", "--from-archive", str(tmp_path), "--since", "yesterday"]) == 1
    assert "'yesterday' is not a time" in capsys.readouterr().err
    assert main(["log", "export", "--from-archive", str(tmp_path), "--topic", "jobs"]) == 1
    assert "has no topic 'jobs'" in capsys.readouterr().err


def test_a_replay_reads_the_event_sequences_from_the_archive_alone(tmp_path: Path) -> None:
    event_log(tmp_path)
    source = ArchiveSource(tmp_path)
    assert source.topics() == [EVENTS, QUEUES] and source.partitions(EVENTS) == [0]
    read = [(record.offset, sequence["events"][0]["event_id"]) for record, sequence in source.event_sequences(since_ms=T0 + 1000)]
    assert read == [(1, "event-1"), (2, "event-2")]
