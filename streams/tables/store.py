"""RocksDB options for Flotilla's tables.

Faust opens every partition of every table as a RocksDB database of its own, with memtables of
64 MiB (up to three each) and a 2 GiB block cache each: sized for one large table, not for a
worker holding three tables over several partitions, where memtables alone may reach 576 MiB per
partition. Flotilla's tables are written in batches and read mostly through caches above them (the
job store's decoded jobs, the scheduler's in-memory index), so small memtables and a small block
cache cost little speed and bound the worker's memory.
"""

from __future__ import annotations

from typing import Any

MIB = 1024 * 1024


def store_options() -> dict[str, Any]:
    """Options for `app.Table(..., options=...)`; a fresh dict each time (Faust pops from it)."""
    return {"write_buffer_size": 16 * MIB, "max_write_buffer_number": 2, "block_cache_size": 32 * MIB}
