"""Reading a key straight from a table's store (`streams.tables.store.read`) gives what Faust's table gives."""

from __future__ import annotations

import asyncio
from pathlib import Path

from streams.tables.batched import TableBatch
from streams.tables.store import read
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


def test_a_mapping_standing_in_for_a_table_is_read_as_a_mapping() -> None:
    assert read({"job-1": b"x"}, "job-1") == b"x" and read({}, "job-1") is None
