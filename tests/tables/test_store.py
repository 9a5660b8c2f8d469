"""Reading a key straight from a table's store (`streams.tables.store.read`) gives what Faust's table gives."""

from __future__ import annotations

import asyncio
from pathlib import Path

from streams.tables.batched import TableBatch
from streams.tables.store import read, read_many
from tests.kit.plane import agent_plane


def test_a_key_read_from_the_store_is_what_the_table_gives_and_a_missing_one_none(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = agent_plane(tmp_path, store="rocksdb://")
        jobs, client_ids = plane.jobs.table, plane.client_ids
        for table, key, value in ((jobs, "job-1", b"\x01state"), (client_ids, "team-a/client-1", "01JOB")):
            batch = TableBatch(table, plane.batch_producer)
            batch.put(0, key, value)
            await batch.write()
            assert read(table, key) == table.get(key) == value
            assert read(table, "missing") is None and table.get("missing") is None
        assert isinstance(read(client_ids, "team-a/client-1"), str)  # a text value comes back as text

    asyncio.run(scenario())


def test_a_key_is_read_from_whichever_partition_database_holds_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = agent_plane(tmp_path, store="rocksdb://", partitions=2)
        jobs = plane.jobs.table
        batch = TableBatch(jobs, plane.batch_producer)
        batch.put(0, "job-0", b"zero")
        batch.put(1, "job-1", b"one")  # another partition's database
        await batch.write()
        jobs.data._key_index.clear()  # type: ignore[attr-defined]  # Faust's key -> partition cache: read needs none
        assert [read(jobs, key) for key in ("job-1", "job-0", "missing")] == [b"one", b"zero", None]
        assert [jobs.get(key) for key in ("job-1", "job-0", "missing")] == [b"one", b"zero", None]

    asyncio.run(scenario())


def test_a_mapping_standing_in_for_a_table_is_read_as_a_mapping() -> None:
    assert read({"job-1": b"x"}, "job-1") == b"x" and read({}, "job-1") is None


def test_keys_read_together_are_what_the_table_gives_each_in_order_over_every_partition(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = agent_plane(tmp_path, store="rocksdb://", partitions=2)
        client_ids = plane.client_ids
        batch = TableBatch(client_ids, plane.batch_producer)
        batch.put(0, "team-a/öne", "01JOB-A")
        batch.put(1, "team-b/two", "01JOB-B")  # another partition's database
        await batch.write()
        keys = ["team-b/two", "missing", "team-a/öne", "team-a/öne"]
        assert read_many(client_ids, keys) == [client_ids.get(key) for key in keys] == ["01JOB-B", None, "01JOB-A", "01JOB-A"]
        assert read_many(client_ids, []) == []

    asyncio.run(scenario())


def test_keys_of_a_mapping_standing_in_for_a_table_are_read_as_a_mapping() -> None:
    assert read_many({"a": 1}, ["b", "a"]) == [None, 1]
