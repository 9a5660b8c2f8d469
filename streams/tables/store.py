"""RocksDB options for Flotilla's tables.

Faust opens every partition of every table as a RocksDB database of its own, with memtables of
64 MiB (up to three each) and a 2 GiB block cache each: sized for one large table, not for a
worker holding three tables over several partitions, where memtables alone may reach 576 MiB per
partition. Flotilla's tables are written in batches and read mostly through caches above them (the
job store's decoded jobs, the scheduler's in-memory index), so small memtables and a small block
cache cost little speed and bound the worker's memory: a memtable holds what was written since
the last flush, so each hot table of a worker that ingested 100,000 jobs held 16-32 MiB (jobs,
job index and scheduler index take 17-35 MB each) with 16 MiB memtables, and holds 8-16 with 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streams.tables.batched import is_rocksdb
from streams.tables.types import TEXT_CODEC

MIB = 1024 * 1024


def store_options(write_buffer_mib: int = 8, block_cache_mib: int = 32) -> dict[str, Any]:
    """Options for `app.Table(..., options=...)`; a fresh dict each time (Faust pops from it).

    A table written once per key and read on misses of the caches above it (the jobs' specs) takes
    smaller ones: its memtables would otherwise hold tens of MiB of specs no one reads."""
    return {"write_buffer_size": write_buffer_mib * MIB, "max_write_buffer_number": 2, "block_cache_size": block_cache_mib * MIB}


def read(table: Any, key: Any) -> Any:
    """``key``'s value in ``table`` (a Faust table, or a mapping standing in for one), or None.

    Read from the table's store itself: Faust's `table.get` looks a key up twice and raises and
    catches a KeyError for a missing one, most of what looking up a new job or client id cost. A
    text key and a raw value are their bytes (as `TableBatch` writes them): Faust's serializers took
    ~7 us a key to say so, most of a refold's lookup of each new job. On a RocksDB store, each
    partition database the store holds is asked in turn, as Faust's own lookup of a key it has not
    seen does, without its key -> partition cache (a locked LRU whose miss raises and catches a
    KeyError) or its bloom-filter probe before each get (rocksdict's get probes the filter itself):
    Faust's `_get` was ~5% of the worker's py-spy samples under bench/pipeline.py's stream, three
    reads of each job leased (its state, its spec, the spec again) and one of each new one."""
    store: Any = getattr(table, "data", None)
    if is_rocksdb(store):
        stored_key = _stored_key(table, store, key)
        for database in store._dbs.values():
            raw = database.get(stored_key)
            if raw is not None:
                return _value(table, store, raw)
        return None
    return table.get(key)


def _stored_key(table: Any, store: Any, key: Any) -> bytes:
    """``key`` as the store holds it: a text key is its UTF-8 bytes, as Faust's serializer makes them without its lookups (~5 us a key)."""
    return key.encode() if type(key) is str and table.key_serializer == TEXT_CODEC else store._encode_key(key)


def _value(table: Any, store: Any, raw: bytes | None) -> Any:
    """A stored value as the table gives it (a raw value is its bytes), or None."""
    return raw if raw is None or table.value_serializer == "raw" else store._decode_value(raw)


def read_many(table: Any, keys: Sequence[Any]) -> list[Any]:
    """Each of ``keys``' values in ``table`` (as `read` gives it), in order, or None.

    On a RocksDB store, one multi-get per partition database the store holds, as Faust's lookup of a
    key it has not seen searches them all: looking up a request's client ids one by one cost a tenth of
    the ingest agent's time, most of it Faust's search for a key not there (a KeyError raised and caught)."""
    store: Any = getattr(table, "data", None)
    if not is_rocksdb(store):
        return [read(table, key) for key in keys]
    encoded = [_stored_key(table, store, key) for key in keys]
    found: list[bytes | None] = [None] * len(keys)
    for database in list(store._dbs.values()):
        missing = [number for number, value in enumerate(found) if value is None]
        if not missing:
            break
        for number, value in zip(missing, database.get([encoded[number] for number in missing]), strict=True):
            found[number] = value
    return [_value(table, store, value) for value in found]
