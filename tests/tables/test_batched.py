"""Writing many keys of a table at once (`TableBatch`) stores and publishes exactly what per-key writes would.

The per-key path is Faust's own (`table.send_changelog`, captured by the recording producer of
`tests.kit.plane`); the batch path goes through a recording batch producer. Both run on the real
tables of a plane, on the memory store and on RocksDB.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest
from faust.stores.rocksdb import Store
from faust.types import TP

from streams.plane import ControlPlane
from streams.tables.batched import Headers, Records, TableBatch
from tests.kit.plane import agent_plane, sent


class Recorded:
    """A batch producer that keeps what it was given and acknowledges it at offset ``next_offset``."""

    def __init__(self, next_offset: int = 0) -> None:
        self.batches: list[tuple[str, int, list[tuple[bytes | None, bytes | None]]]] = []
        self.next_offset = next_offset

    async def send_partition(self, topic: str, partition: int, records: Records, headers: Headers = ()) -> asyncio.Future[int]:
        self.batches.append((topic, partition, list(records)))
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        done.set_result(self.next_offset)
        self.next_offset += len(records)
        return done

    async def send_keyed(self, topic: str, records: Records, headers: Headers = ()) -> asyncio.Future[dict[int, int]]:
        raise AssertionError("a table writes to the partitions of its source records")


def per_key_records(
    plane: ControlPlane, table_name: str, writes: Sequence[tuple[int, str, bytes | str | None]]
) -> list[tuple[int, bytes | None, bytes | None]]:
    """What Faust's own per-key changelog path sends for ``writes``."""
    table = plane.app.tables[table_name]
    before = len(sent(plane))
    for partition, key, value in writes:
        table.send_changelog(partition, key, value)
    return [(s.partition or 0, s.key, s.value) for s in sent(plane)[before:]]


@pytest.mark.parametrize("store", ["memory://", "rocksdb://"])
def test_the_changelog_records_are_byte_for_byte_what_per_key_writes_send(tmp_path: Path, store: str) -> None:
    async def scenario() -> None:
        plane = agent_plane(tmp_path, store=store)
        writes = [(0, "job-1", b"\x01state-a"), (0, "jöb-2", b"\x02state-b"), (0, "job-1", b"\x03state-c")]
        expected = per_key_records(plane, "jobs", writes)
        send = Recorded()
        batch = TableBatch(plane.jobs.table, send)
        for partition, key, value in writes:
            batch.put(partition, key, value)
        await batch.write()

        ((topic, partition, records),) = send.batches
        assert topic == plane.jobs.table.changelog_topic.get_topic_name() == "flotilla.job-states"
        assert partition == 0
        # the last write of a key wins, and goes out after the others
        assert records == [(expected[1][1], expected[1][2]), (expected[2][1], expected[2][2])]
        assert [plane.jobs.table.data[key] for key in ("job-1", "jöb-2")] == [b"\x03state-c", b"\x02state-b"]

    asyncio.run(scenario())


def test_text_values_are_byte_for_byte_what_per_key_writes_send(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = agent_plane(tmp_path, store="rocksdb://")
        expected = per_key_records(plane, "client-ids", [(0, "team-a/clïent", "01JÖB")])
        send = Recorded()
        batch = TableBatch(plane.client_ids, send)
        batch.put(0, "team-a/clïent", "01JÖB")
        await batch.write()
        assert send.batches[0][2] == [(key, value) for _, key, value in expected]
        assert plane.client_ids.data.get("team-a/clïent") == "01JÖB"

    asyncio.run(scenario())


def test_text_keys_and_deletes_reach_the_store_and_the_changelog(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = agent_plane(tmp_path, store="rocksdb://")
        table = plane.client_ids
        send = Recorded()
        batch = TableBatch(table, send)
        batch.put(0, "team-a/client-1", "01JOB")
        batch.put(0, "team-a/client-2", "02JOB")
        await batch.write()
        batch.delete(0, "team-a/client-1")
        await batch.write()

        assert send.batches[0][2] == [(b"team-a/client-1", b"01JOB"), (b"team-a/client-2", b"02JOB")]
        assert send.batches[1][2] == [(b"team-a/client-1", None)]
        assert table.data.get("team-a/client-2") == "02JOB"
        assert "team-a/client-1" not in table.data

    asyncio.run(scenario())


def test_each_partition_is_written_to_its_own_database_and_changelog_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = agent_plane(tmp_path, store="rocksdb://", partitions=3)
        table = plane.jobs.table
        send = Recorded(next_offset=40)
        batch = TableBatch(table, send)
        batch.put(2, "job-on-2", b"two")
        batch.put(0, "job-on-0", b"zero")
        batch.put(2, "job-also-on-2", b"two again")
        await batch.write()

        assert [(partition, [key for key, _ in records]) for _, partition, records in send.batches] == [
            (2, [b"job-on-2", b"job-also-on-2"]),
            (0, [b"job-on-0"]),
        ]
        store = table.data
        assert isinstance(store, Store)
        assert store._db_for_partition(2).get(b"job-also-on-2") == b"two again"
        assert store._db_for_partition(0).get(b"job-on-0") == b"zero"
        assert store._db_for_partition(0).get(b"job-on-2") is None
        # acknowledged at offsets 40-41 (partition 2) and 42 (partition 0): recovery resumes after them
        topic = table.changelog_topic.get_topic_name()
        assert store.persisted_offset(TP(topic, 2)) == 41
        assert store.persisted_offset(TP(topic, 0)) == 42

    asyncio.run(scenario())


def test_an_empty_batch_sends_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = agent_plane(tmp_path)
        send = Recorded()
        await TableBatch(plane.jobs.table, send).write()
        assert send.batches == []

    asyncio.run(scenario())


def test_a_batch_larger_than_faust_s_key_index_keeps_its_last_keys_indexed(tmp_path: Path) -> None:
    """Faust's key -> partition cache holds its last `limit` keys: a batch of more adds only its last ones,
    and every key is read from the store whether indexed or not."""

    async def scenario() -> None:
        plane = agent_plane(tmp_path, store="rocksdb://", partitions=2)
        table = plane.jobs.table
        store = table.data
        assert isinstance(store, Store)
        limit = store._key_index.limit
        assert limit is not None
        batch = TableBatch(table, Recorded())
        keys = [f"job-{n}" for n in range(limit + 500)]
        for key in keys:
            batch.put(1, key, key.encode())
        await batch.write()
        assert len(store._key_index) == limit
        assert store._key_index.data == {key.encode(): 1 for key in keys[-limit:]}
        assert [table.data.get(key) for key in (keys[0], keys[-1])] == [b"job-0", keys[-1].encode()]

    asyncio.run(scenario())
