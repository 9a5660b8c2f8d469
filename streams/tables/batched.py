"""Writing many keys of a Faust table at once: one RocksDB `WriteBatch`, one produce batch per partition.

A per-key write (`table[key] = value`) costs about 90-230 us of CPU in Faust (bench/faust_floor.py):
a store put, a changelog message through Faust's producer buffer, its callback. The primitives
underneath cost 3 us a key when batched (../shared/tools/batch_floor.py). `TableBatch` collects a
batch's writes and `write` applies them with those primitives, leaving Faust the owner of the table:

- the keys go into the table's own store, partition by partition: for the RocksDB store one
  `WriteBatch` per partition database, as Faust's `apply_changelog_batch` restores them;
- the changelog records are byte for byte what per-key writes would send (the table's own key and
  value serializers), on the partition the key's source record came from, produced with aiokafka's
  batch API through the app's own producer, so Faust's flush before every offset commit also
  flushes them: a batch's writes reach the broker before its source offsets are committed;
- the store is written once the changelog records are acknowledged, never before (see `write`),
  and the table's persisted offset for each changelog partition moves to the last of them, as
  Faust's per-message callback does, so recovery after a restart replays only the tail.

Within one batch the last write of a key wins, in the store and on the changelog alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import faust
from aiokafka.producer.message_accumulator import BatchBuilder
from faust.types import TP

from streams.fetched_batches import Fetched
from streams.tables.types import TEXT_CODEC

Records = Sequence[tuple[bytes | None, bytes | None]]
# Headers given to every record of a send: (name, value) pairs, as Kafka carries them.
Headers = Sequence[tuple[str, bytes]]

BATCH_BYTES = 1024 * 1024  # the largest batch the batch path sends (topics take up to MAX_MESSAGE_BYTES)


class BatchProducer(Protocol):
    """The broker as the batch path sees it: records for one partition, or keyed records for a topic."""

    async def send_partition(self, topic: str, partition: int, records: Records, headers: Headers = ()) -> asyncio.Future[int]:
        """Queue ``records`` for ``partition`` in order, each with ``headers``; the future gives the first one's
        offset once all are acknowledged."""
        ...

    async def send_keyed(self, topic: str, records: Records, headers: Headers = ()) -> asyncio.Future[dict[int, int]]:
        """Queue ``records`` on the partitions their keys hash to (as `topic.send(key=...)` would), in
        order per partition, each with ``headers``; the future gives each partition's last offset once all
        are acknowledged."""
        ...


@dataclass
class KafkaBatchProducer:
    """Batches through the app's own aiokafka producer (`create_batch` / `send_batch`), which Faust
    flushes before it commits source offsets."""

    app: faust.App

    def _producer(self) -> Any:
        return self.app.producer._ensure_producer()  # type: ignore[attr-defined]  # Faust's aiokafka driver

    async def send_partition(self, topic: str, partition: int, records: Records, headers: Headers = ()) -> asyncio.Future[int]:
        producer = self._producer()
        futures = []
        batch = _builder(producer)
        listed = list(headers)  # aiokafka's compiled record builder takes a list, nothing else
        for key, value in records:
            while batch.append(key=key, value=value, timestamp=None, headers=listed) is None:
                if batch.record_count() == 0:
                    raise ValueError(f"a record of {len(value or b'')} bytes for {topic} exceeds the producer's batch size")
                futures.append(await _send_closed(producer, batch, topic, partition))
                batch = _builder(producer)
        if batch.record_count():
            futures.append(await _send_closed(producer, batch, topic, partition))
        return _first_offset(futures)

    async def send_keyed(self, topic: str, records: Records, headers: Headers = ()) -> asyncio.Future[dict[int, int]]:
        producer = self._producer()
        await producer.partitions_for(topic)  # the partitioner needs the partition count
        by_partition: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        # A key's partition once per key: the records of a batch share few keys (an executor's
        # commands, a job set's events), and hashing each again was ~2% of a refold's worker.
        partition_of: dict[bytes, int] = {}
        for key, value in records:
            partition = partition_of.get(key) if key is not None else None
            if partition is None:
                partition = producer._partition(topic, None, None, None, key, value)
                if key is not None:
                    partition_of[key] = partition
            by_partition.setdefault(partition, []).append((key, value))
        sent = {
            partition: (await self.send_partition(topic, partition, keyed, headers), len(keyed))
            for partition, keyed in by_partition.items()
        }
        return _last_offsets(sent)


def _builder(producer: Any) -> BatchBuilder:
    """An empty batch of up to `BATCH_BYTES`, not the producer's `producer_max_batch_size` (16 KiB): aiokafka
    queues one batch per partition at a time and sends one request per broker at a time, so each batch
    of a partition costs a round trip to the broker. A refold part's 1,800 job states (~300 KiB) went in
    20 of them, its index rows in 28 more."""
    accumulator = producer._message_accumulator
    transactional = accumulator._txn_manager is not None and accumulator._txn_manager.transactional_id is not None
    return BatchBuilder(
        BATCH_BYTES,
        accumulator._compression_type,
        is_transactional=transactional,
        key_serializer=producer._key_serializer,
        value_serializer=producer._value_serializer,
    )


async def _send_closed(producer: Any, batch: Any, topic: str, partition: int) -> asyncio.Future[Any]:
    """Queue a batch that is complete: closed, aiokafka's sender takes it at once instead of letting it
    linger (`producer_linger_ms`, 5 ms) for records no one will add. Every batch a fold part awaits
    (its feed and commands, then each table's changelog) paid that linger once more."""
    batch.close()
    return await producer.send_batch(batch, topic, partition=partition)


def _last_offsets(sent: dict[int, tuple[asyncio.Future[int], int]]) -> asyncio.Future[dict[int, int]]:
    """Each partition's last offset once every batch is acknowledged."""

    async def wait() -> dict[int, int]:
        firsts = await asyncio.gather(*(future for future, _ in sent.values()))
        return {partition: first + count - 1 for (partition, (_, count)), first in zip(sent.items(), firsts, strict=True)}

    return asyncio.ensure_future(wait())


def _first_offset(futures: list[asyncio.Future[Any]]) -> asyncio.Future[int]:
    """The offset of the first record once every batch is acknowledged."""

    async def wait() -> int:
        results = await asyncio.gather(*futures)
        return int(results[0].offset)

    return asyncio.ensure_future(wait())


def is_rocksdb(store: Any) -> bool:
    """Whether a table's store is Faust's RocksDB store (one database per partition), not memory:// (unit tests)."""
    return hasattr(store, "_db_for_partition")


def write_raw(store: Any, partition: int, records: Iterable[tuple[bytes, bytes | None]]) -> None:
    """Serialized keys and values (None deletes) into the RocksDB store's database of ``partition``, in one `WriteBatch`."""
    import rocksdict

    batch = rocksdict.WriteBatch(raw_mode=True)
    for key, value in records:
        if value is None:
            batch.delete(key)
        else:
            batch.put(key, value)
    store._db_for_partition(partition).write(batch)


def write_fetched(store: Any, partition: int, fetched: Iterable[Fetched]) -> int | None:
    """A changelog partition's fetched record batches into the RocksDB store's database of ``partition``, with the
    table's persisted offset moved to the last record read, all in one `WriteBatch` (a copy and its offset
    never disagree); a record without a key is passed over, a None value deletes. Returns that offset,
    None when there was no record (nothing is written). Each record's bytes go from the fetched batch
    straight into the `WriteBatch`; the offset is written as Faust's `set_persisted_offset` writes it."""
    import rocksdict

    batch = rocksdict.WriteBatch(raw_mode=True)
    last = None
    for records, start in fetched:
        for record in records:
            offset = record.offset
            if offset < start:
                continue
            last = offset
            key = record.key
            if key is None:
                continue
            value = record.value
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
    if last is not None:
        batch.put(store.offset_key, str(last).encode())
        store._db_for_partition(partition).write(batch)
    return last


@dataclass
class Outbox:
    """The messages one batch of input sends: queued as they are made, acknowledged all together.

    An agent awaits `delivered` before it writes its tables, so that a table never records an
    input as applied while what the input caused may still be lost: a worker killed in between
    folds the input again after its restart and sends the same messages once more (every reader
    is idempotent), where the other order would leave them unsent for ever."""

    producer: BatchProducer
    _sent: list[asyncio.Future[Any]] = field(default_factory=list)

    async def keyed(self, topic: str, records: Records) -> asyncio.Future[dict[int, int]] | None:
        """Queue ``records``; the future (None when there are none) gives each partition's last offset once acknowledged."""
        if not records:
            return None
        sent = await self.producer.send_keyed(topic, records)
        self._sent.append(sent)
        return sent

    async def partition(self, topic: str, partition: int, records: Records) -> None:
        if records:
            self._sent.append(await self.producer.send_partition(topic, partition, records))

    async def delivered(self) -> None:
        sent, self._sent = self._sent, []
        await asyncio.gather(*sent)


async def write_puts(table: Any, producer: BatchProducer, puts: Iterable[tuple[int, Any, Any]]) -> None:
    """Write (partition, key, value) ``puts`` to ``table`` and its changelog as one `TableBatch`."""
    batch = TableBatch(table, producer)
    for partition, key, value in puts:
        batch.put(partition, key, value)
    await batch.write()


@dataclass
class TableBatch:
    """The writes of one batch to one table, in order; ``write`` applies and publishes them."""

    table: Any  # faust.Table; Any because Faust types tables per value type
    producer: BatchProducer
    # (partition, key bytes) -> (key, value, value bytes); value None deletes the key.
    _writes: dict[tuple[int, bytes], tuple[Any, Any, bytes | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Text keys and values, and raw values, are their bytes as Faust's serializers would make them
        # (UTF-8, as they are), without the serializers' lookups: most of a put's cost for the hot tables.
        self._text_keys = self.table.key_serializer == TEXT_CODEC
        self._text_values = self.table.value_serializer == TEXT_CODEC
        self._raw_values = self.table.value_serializer == "raw"

    def put(self, partition: int, key: Any, value: Any) -> None:
        """Set ``key`` (as the table's key type) to ``value``; ``partition``: the source record's."""
        self._add(partition, key, value, self._value_bytes(value))

    def delete(self, partition: int, key: Any) -> None:
        self._add(partition, key, None, None)

    def keys(self) -> list[Any]:
        """The keys to be written (or deleted), each once."""
        return [key for key, _, _ in self._writes.values()]

    def _add(self, partition: int, key: Any, value: Any, raw: bytes | None) -> None:
        where = (partition, self._key_bytes(key))
        self._writes.pop(where, None)  # a later write of a key goes out after the others
        self._writes[where] = (key, value, raw)

    async def write(self) -> None:
        """Send the writes' changelog records, wait until the broker has them, then apply them to the store.

        The store never runs ahead of the changelog: a worker killed before the acknowledgement
        has neither, folds the batch's input again after its restart and publishes the same
        records; one killed after it has both, and the refold changes nothing. Were the store
        written first, a restart with the data directory kept would find the writes applied and
        never publish the records the kill lost."""
        if not self._writes:
            return
        by_partition: dict[int, list[tuple[bytes, Any, Any, bytes | None]]] = {}
        for (partition, key_bytes), (key, value, raw) in self._writes.items():
            by_partition.setdefault(partition, []).append((key_bytes, key, value, raw))
        self._writes = {}
        topic = self.table.changelog_topic.get_topic_name()
        sent = [
            await self.producer.send_partition(topic, partition, [(key_bytes, raw) for key_bytes, _, _, raw in writes])
            for partition, writes in by_partition.items()
        ]
        firsts = await asyncio.gather(*sent)
        self._store(by_partition)
        for (partition, writes), first in zip(by_partition.items(), firsts, strict=True):
            self.table.data.set_persisted_offset(TP(topic, partition), first + len(writes) - 1)

    def _store(self, by_partition: dict[int, list[tuple[bytes, Any, Any, bytes | None]]]) -> None:
        store = self.table.data
        if is_rocksdb(store):
            for partition, writes in by_partition.items():
                write_raw(store, partition, [(key_bytes, raw) for key_bytes, _, _, raw in writes])
                # Faust's key -> partition cache (as its per-key writes keep it) holds the last `limit` keys
                # (1,000): a refold part's 10,000 were each added, then dropped one at a time.
                index = store._key_index
                kept = writes[-index.limit :] if index.limit else writes
                index.update((key_bytes, partition) for key_bytes, _, _, _ in kept)
            return
        # Any other store (memory:// in unit tests) through its own mapping interface.
        for writes in by_partition.values():
            for _, key, value, raw in writes:
                if raw is None:
                    store.pop(key, None)
                else:
                    store[key] = value

    def _key_bytes(self, key: Any) -> bytes:
        if self._text_keys and type(key) is str:
            return key.encode()
        raw = self.table.app.serializers.dumps_key(self.table.key_type, key, serializer=self.table.key_serializer)
        assert raw is not None
        return bytes(raw)

    def _value_bytes(self, value: Any) -> bytes | None:
        if self._raw_values and type(value) is bytes:
            return value
        if self._text_values and type(value) is str:
            return value.encode()
        raw = self.table.app.serializers.dumps_value(self.table.value_type, value, serializer=self.table.value_serializer)
        return None if raw is None else bytes(raw)
