"""Damage and failures: a torn tail is cut with a warning, a damaged segment stops reading with the file and
byte, a full disk or a read-only file system fails the group whole and leaves the archive as it was,
and a second owner of an archive is refused with the first one's pid."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streams.archive.files import AppendFile, OsFiles
from streams.archive.lock import DirLock, Locked
from streams.archive.reader import ArchiveCorrupt, read_partition, verify
from streams.archive.segments import index_path, read_index, segments_in
from streams.archive.writer import ArchiveWriteError, ArchiveWriter
from tests.archive.builders import EVENTS, records, written


def only_segment(root: Path) -> Path:
    (segment,) = segments_in(root / EVENTS / "0")
    return segment


def offsets(root: Path) -> list[int]:
    return [record.offset for record in read_partition(root, EVENTS, 0)]


def reopen(root: Path) -> tuple[ArchiveWriter, list[str]]:
    writer = ArchiveWriter(root)
    return writer, writer.open()


# ---------------------------------------------------------------------------------------------- torn tails


@pytest.mark.parametrize("damage", ["cut short", "zeros after it", "garbage after it"])
def test_a_torn_last_block_is_cut_with_a_warning_naming_partition_and_offset(tmp_path: Path, damage: str) -> None:
    written(tmp_path, groups=3, per_group=10)
    segment = only_segment(tmp_path)
    last_block = read_index(index_path(segment))[-1].position
    data = segment.read_bytes()
    if damage == "cut short":
        segment.write_bytes(data[:-7])  # power lost in the middle of the last group's write
    elif damage == "zeros after it":
        segment.write_bytes(data[:last_block] + b"\0" * 300)  # the file grew, its data never reached the disk
    else:
        segment.write_bytes(data[:last_block] + data[last_block : last_block + 40])  # a prefix of the block, no sync marker
    writer, cuts = reopen(tmp_path)
    try:
        (cut,) = cuts
        assert "flotilla.events[0]" in cut and "at offset 20" in cut and str(segment) in cut, cut
        assert writer.next_offset(EVENTS, 0) == 20
        writer.write_group({(EVENTS, 0): records(20, 5)})
    finally:
        writer.close()
    assert segment.stat().st_size == last_block
    assert offsets(tmp_path) == list(range(25))
    assert not any(report.problems for report in verify(tmp_path))


def test_a_segment_whose_first_block_was_torn_is_removed(tmp_path: Path) -> None:
    written(tmp_path, groups=2, per_group=10)
    writer = ArchiveWriter(tmp_path)
    writer.open()
    writer.write_group({(EVENTS, 0): records(20, 10)})  # a new run starts a new segment
    writer.close()
    first, second = segments_in(tmp_path / EVENTS / "0")
    header_and_block = second.read_bytes()
    second.write_bytes(header_and_block[:-20])
    writer, cuts = reopen(tmp_path)
    writer.close()
    assert len(cuts) == 0 and not second.exists() and not index_path(second).exists()
    assert segments_in(tmp_path / EVENTS / "0") == [first]
    assert offsets(tmp_path) == list(range(20))


def test_an_index_that_says_more_than_the_segment_is_rebuilt(tmp_path: Path) -> None:
    written(tmp_path, groups=3, per_group=10)
    segment = only_segment(tmp_path)
    index = index_path(segment)
    index.write_bytes(index.read_bytes()[:40] + os.urandom(70))  # one good entry, then nonsense
    writer, cuts = reopen(tmp_path)
    writer.close()
    assert cuts == []
    assert [(e.first_offset, e.last_offset) for e in read_index(index)] == [(0, 9), (10, 19), (20, 29)]
    assert offsets(tmp_path) == list(range(30))


# ---------------------------------------------------------------------------------------------- damage


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_damaged_segment_before_the_last_stops_reading_naming_file_and_byte(tmp_path: Path) -> None:
    written(tmp_path, groups=20, per_group=20, codec="null", segment_bytes=8_000)
    first, *_ = segments_in(tmp_path / EVENTS / "0")
    block = read_index(index_path(first))[1]
    flip(first, block.position + 60)
    with pytest.raises(ArchiveCorrupt) as stopped:
        offsets(tmp_path)
    message = str(stopped.value)
    assert str(first) in message and f"byte {block.position}" in message and "flotilla log verify" in message, message
    (report,) = verify(tmp_path)
    assert len(report.problems) == 1 and str(first) in report.problems[0] and "damaged" in report.problems[0], report.problems
    # Opening the writer looks at the last segment only; the damage is found where the log is read (the restore).
    writer, cuts = reopen(tmp_path)
    writer.close()
    assert cuts == []


def test_damage_in_the_last_segment_with_records_after_it_is_no_torn_tail(tmp_path: Path) -> None:
    written(tmp_path, groups=5, per_group=10, codec="null")
    segment = only_segment(tmp_path)
    index = index_path(segment)
    block = read_index(index)[2]
    index.write_bytes(index.read_bytes()[: 3 * 40])  # the index lost its last two entries: the check starts at block 2
    flip(segment, block.position + 100)
    with pytest.raises(ArchiveCorrupt) as stopped:
        reopen(tmp_path)
    assert str(segment) in str(stopped.value) and f"byte {block.position}" in str(stopped.value)
    assert segment.stat().st_size > block.position, "nothing may be cut"


def test_damage_before_the_last_indexed_block_is_found_by_reading_not_cut(tmp_path: Path) -> None:
    written(tmp_path, groups=5, per_group=10, codec="null")
    segment = only_segment(tmp_path)
    size = segment.stat().st_size
    block = read_index(index_path(segment))[1]
    flip(segment, block.position + 100)
    writer, cuts = reopen(tmp_path)
    writer.close()
    assert cuts == [] and segment.stat().st_size == size
    with pytest.raises(ArchiveCorrupt, match=f"at byte {block.position}"):
        offsets(tmp_path)


def test_a_changed_value_is_caught_by_its_checksum(tmp_path: Path) -> None:
    written(tmp_path, groups=2, per_group=10, codec="null")
    segment = only_segment(tmp_path)
    data = segment.read_bytes()
    at = data.index(b"value 13 ")
    segment.write_bytes(data[:at] + b"VALUE 13 " + data[at + 9 :])
    (report,) = verify(tmp_path)
    assert any("checksum mismatch in the record at offset 13" in problem for problem in report.problems), report.problems


# ---------------------------------------------------------------------------------------------- failing writes


@dataclass
class Disk:
    """A file system with ``free`` bytes left (ENOSPC, part-way through a write, past them), or one that
    fails every open or sync with ``fail_with``."""

    free: int = 1 << 40
    fail_with: int | None = None
    fail_sync: bool = False
    real: OsFiles = field(default_factory=OsFiles)

    def append(self, path: Path) -> AppendFile:
        if self.fail_with is not None:
            raise OSError(self.fail_with, os.strerror(self.fail_with), str(path))
        return LimitedFile(self, self.real.append(path))

    def sync_dir(self, path: Path) -> None:
        self.real.sync_dir(path)

    def remove(self, path: Path) -> None:
        self.real.remove(path)

    def rename(self, source: Path, target: Path) -> None:
        self.real.rename(source, target)


@dataclass
class LimitedFile:
    disk: Disk
    file: AppendFile

    def write(self, data: bytes) -> None:
        if len(data) > self.disk.free:
            self.file.write(data[: self.disk.free])
            self.disk.free = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.file.write(data)
        self.disk.free -= len(data)

    def sync(self) -> None:
        if self.disk.fail_sync:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        self.file.sync()

    def truncate(self, size: int) -> None:
        self.file.truncate(size)

    def size(self) -> int:
        return self.file.size()

    def close(self) -> None:
        self.file.close()


def test_a_full_disk_fails_the_group_whole_and_a_retry_after_space_is_freed_writes_it(tmp_path: Path) -> None:
    disk = Disk()
    writer = ArchiveWriter(tmp_path, files=disk, codec="null")
    writer.open()
    try:
        writer.write_group({(EVENTS, 0): records(0, 10)})
        size = only_segment(tmp_path).stat().st_size
        disk.free = 500  # less than the next group: its block is written part-way
        with pytest.raises(ArchiveWriteError, match="No space left on device"):
            writer.write_group({(EVENTS, 0): records(10, 10)})
        assert only_segment(tmp_path).stat().st_size == size, "the half-written block must be cut back"
        assert writer.next_offset(EVENTS, 0) == 10
        assert offsets(tmp_path) == list(range(10))
        disk.free = 1 << 40
        assert writer.write_group({(EVENTS, 0): records(10, 10)}) == {(EVENTS, 0): 20}
    finally:
        writer.close()
    assert offsets(tmp_path) == list(range(20))
    assert not any(report.problems for report in verify(tmp_path))


def test_a_full_disk_at_a_new_segment_leaves_no_file_behind(tmp_path: Path) -> None:
    disk = Disk(free=100)  # not even a header
    writer = ArchiveWriter(tmp_path, files=disk)
    writer.open()
    try:
        with pytest.raises(ArchiveWriteError, match="No space left on device"):
            writer.write_group({(EVENTS, 0): records(0, 10)})
        assert [p.name for p in (tmp_path / EVENTS / "0").iterdir()] == []
    finally:
        writer.close()


@pytest.mark.parametrize("failure", ["read-only file system", "sync fails"])
def test_an_unwritable_archive_acknowledges_nothing(tmp_path: Path, failure: str) -> None:
    disk = Disk()
    writer = ArchiveWriter(tmp_path, files=disk)
    writer.open()
    try:
        writer.write_group({(EVENTS, 0): records(0, 10)})
        if failure == "sync fails":
            disk.fail_sync = True
            expected = "Input/output error"
        else:
            writer.close()  # a restart on a file system that went read-only: the next group needs a new segment
            writer = ArchiveWriter(tmp_path, files=disk)
            writer.open()
            disk.fail_with = errno.EROFS
            expected = "Read-only file system"
        with pytest.raises(ArchiveWriteError, match=expected):
            writer.write_group({(EVENTS, 0): records(10, 10)})
        assert writer.next_offset(EVENTS, 0) == 10
    finally:
        writer.close()
    assert offsets(tmp_path) == list(range(10))


# ---------------------------------------------------------------------------------------------- the lock

HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from streams.archive.lock import DirLock
    held = DirLock(Path(sys.argv[1]), "a test").acquire()
    print("locked", flush=True)
    time.sleep(60)
    """
)


def test_a_second_owner_is_refused_with_the_first_ones_pid_until_it_is_gone(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(Locked) as refused:
            ArchiveWriter(tmp_path).open()
        assert refused.value.pid == holder.pid
        assert f"in use by pid {holder.pid}" in str(refused.value)
    finally:
        holder.send_signal(signal.SIGKILL)  # no clean-up: the kernel drops the lock
        holder.wait()
    writer = ArchiveWriter(tmp_path)
    writer.open()
    writer.close()


def test_the_lock_is_per_directory(tmp_path: Path) -> None:
    with DirLock(tmp_path / "a", "one"), DirLock(tmp_path / "b", "two"), pytest.raises(Locked, match=r"in use by pid \d+ \(one\)"):
        DirLock(tmp_path / "a", "three").acquire()
