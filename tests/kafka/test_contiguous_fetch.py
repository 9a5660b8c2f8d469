"""A fetch answer's records stop at a missing offset, and the hole is read past only once the patience ran out."""

from __future__ import annotations

import struct

from aiokafka.consumer import fetcher
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

from streams.contiguous_fetch import ContiguousPartitionRecords, Holes

TP = TopicPartition("feed", 0)


def batch(base: int, count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20
    )
    for delta in range(count):
        builder.append(delta, timestamp=1, key=None, value=f"{base + delta}".encode(), headers=[])
    built = builder.build()
    struct.pack_into(">q", built, 0, base)  # the batch's base offset, which the broker sets (outside the CRC)
    return bytes(built)


def fetched(holes: Holes, fetch_offset: int, *batches: bytes) -> tuple[list[int], int]:
    """The offsets a fetch answer made of ``batches`` gives, and the offset the next fetch asks for."""

    class Records(ContiguousPartitionRecords):
        pass

    Records.holes = holes
    records = Records(TP, MemoryRecords(b"".join(batches)), [], fetch_offset, None, None, True, fetcher.READ_UNCOMMITTED)
    offsets = [record.offset for record in records]
    return offsets, records.next_fetch_offset


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_contiguous_answer_is_read_whole() -> None:
    holes = Holes(clock=Clock())
    assert fetched(holes, 0, batch(0, 3), batch(3, 2)) == ([0, 1, 2, 3, 4], 5)
    assert fetched(holes, 4, batch(3, 2), batch(5, 1)) == ([4, 5], 6)  # an answer may start inside a batch
    assert holes.waited == holes.skipped == 0


def test_records_stop_at_a_missing_batch_and_the_next_fetch_asks_for_it() -> None:
    clock = Clock()
    holes = Holes(patience_s=5.0, clock=clock)
    # The batch at 3-5 is not readable yet: what comes after it is not given out.
    assert fetched(holes, 0, batch(0, 3), batch(6, 2)) == ([0, 1, 2], 3)
    # Nor when the hole is at the very offset asked for.
    clock.now += 1.0
    assert fetched(holes, 3, batch(6, 2)) == ([], 3)
    assert holes.waited == 2
    # The next fetch finds it: read in order, and the hole forgotten.
    assert fetched(holes, 3, batch(3, 3), batch(6, 2)) == ([3, 4, 5, 6, 7], 8)
    assert holes.seen == {} and holes.skipped == 0


def test_a_hole_still_there_after_the_patience_is_read_past() -> None:
    clock = Clock()
    holes = Holes(patience_s=5.0, clock=clock)
    assert fetched(holes, 10, batch(10, 1), batch(14, 1)) == ([10], 11)
    clock.now += 4.9
    assert fetched(holes, 11, batch(14, 1)) == ([], 11)
    clock.now += 0.2
    assert fetched(holes, 11, batch(14, 2)) == ([14, 15], 16)
    assert holes.skipped == 1 and holes.seen == {}
