"""A `BATCHES` consumer takes a fetch as its record batches; the standby copy written from them is what the records say.

Every other consumer still gets aiokafka's `ConsumerRecord`s, and on Tansu holes are still waited
for, between batches."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

from aiokafka.consumer import fetcher
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition
from faust.stores.rocksdb import Store
from faust.types import TP as FaustTP

from streams.contiguous_fetch import ContiguousPartitionRecords, Holes
from streams.fetched_batches import BATCHES, BatchPartitionRecords
from streams.tables.batched import write_fetched
from tests.kit.plane import agent_plane

TP = TopicPartition("flotilla.job-states-changelog", 0)


def batch(base: int, records: list[tuple[bytes | None, bytes | None]]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20
    )
    for delta, (key, value) in enumerate(records):
        builder.append(delta, timestamp=1, key=key, value=value, headers=[])
    built = builder.build()
    struct.pack_into(">q", built, 0, base)  # the batch's base offset, which the broker sets (outside the CRC)
    return bytes(built)


def numbered(base: int, count: int) -> bytes:
    return batch(base, [(f"k{base + delta}".encode(), f"v{base + delta}".encode()) for delta in range(count)])


def answer(
    kind: type[BatchPartitionRecords], fetch_offset: int, *batches: bytes, key_deserializer: object = BATCHES
) -> BatchPartitionRecords:
    return kind(TP, MemoryRecords(b"".join(batches)), [], fetch_offset, key_deserializer, None, True, fetcher.READ_UNCOMMITTED)


def offsets_of(fetched: list) -> list[int]:
    return [record.offset for one in fetched for record in one.batch if record.offset >= one.start]


def test_a_batches_consumer_gets_each_batch_and_the_first_offset_it_wants_from_it() -> None:
    records = answer(BatchPartitionRecords, 4, numbered(3, 2), numbered(5, 3))
    fetched = list(records)
    assert [(one.batch.base_offset, one.start) for one in fetched] == [(3, 4), (5, 5)]
    assert offsets_of(fetched) == [4, 5, 6, 7]
    assert records.next_fetch_offset == 8


def test_other_consumers_still_get_consumer_records() -> None:
    records = answer(BatchPartitionRecords, 4, numbered(3, 2), numbered(5, 1), key_deserializer=None)
    assert [(record.offset, record.key, record.value) for record in records] == [(4, b"k4", b"v4"), (5, b"k5", b"v5")]
    assert records.next_fetch_offset == 6


def test_on_tansu_batches_stop_at_a_missing_batch_until_the_patience_runs_out() -> None:
    clock = [100.0]
    holes = Holes(patience_s=5.0, clock=lambda: clock[0])

    class Records(ContiguousPartitionRecords):
        pass

    Records.holes = holes
    records = answer(Records, 0, numbered(0, 3), numbered(6, 2))
    assert offsets_of(list(records)) == [0, 1, 2]
    assert records.next_fetch_offset == 3  # the next fetch asks for the missing batch
    clock[0] += 6.0
    records = answer(Records, 3, numbered(6, 2))
    assert offsets_of(list(records)) == [6, 7]
    assert records.next_fetch_offset == 8
    assert (holes.waited, holes.skipped) == (1, 1)


def test_the_copy_holds_the_records_last_value_and_deletes_and_the_last_offset_read(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = agent_plane(tmp_path, store="rocksdb://", partitions=2)
        store = plane.jobs.table.data
        assert isinstance(store, Store)
        store._db_for_partition(1)[b"gone"] = b"old"
        first = batch(10, [(b"read-before", b"x"), (b"a", b"1"), (b"gone", None), (b"a", b"2")])
        second = batch(14, [(b"b", b"3"), (None, b"keyless")])
        fetched = list(answer(BatchPartitionRecords, 11, first, second))  # offset 10 was read before: not applied again

        assert write_fetched(store, 1, fetched) == 15  # the last record read, keyless or not, as Faust counts them
        db = store._db_for_partition(1)
        assert (db.get(b"a"), db.get(b"b"), db.get(b"gone"), db.get(b"read-before")) == (b"2", b"3", None, None)
        assert store._db_for_partition(0).get(b"a") is None
        topic = plane.jobs.table.changelog_topic.get_topic_name()
        assert store.persisted_offset(FaustTP(topic, 1)) == 15  # in the same `WriteBatch`, as Faust writes it
        assert write_fetched(store, 1, []) is None
        assert store.persisted_offset(FaustTP(topic, 1)) == 15

    asyncio.run(scenario())
