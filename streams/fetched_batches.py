"""A consumer that takes each fetch as the broker's record batches, for a reader that copies records as they are.

aiokafka hands a fetch over as a `ConsumerRecord` per record, built in a generator (two with the
contiguous reader of Tansu, streams/contiguous_fetch.py), then gathered into a list by `getmany`.
The standby follower (streams/tables/standby.py) only copies each record's key and value bytes into
RocksDB: with two workers it follows every table write of the other one, so that per-record Python
is paid once more for every job (issue 14). A consumer whose ``key_deserializer`` is `BATCHES`
gets the fetch's record batches instead (`Fetched`: a batch and the first offset wanted from it),
and its reader walks each batch's records itself; its position moves as aiokafka's does (to the
next offset after each batch taken). Transaction markers (control batches) are passed over as
aiokafka passes them over; aborted transactions are not filtered (``read_uncommitted`` only).

aiokafka builds a fetch's records in `fetcher.PartitionRecords`, looked up in its module for every
fetch answer, with no per-consumer hook: `install` makes it `BatchPartitionRecords` for the process
(or keeps the contiguous reader, a subclass), which hands batches to `BATCHES` consumers only and
records, as before, to every other consumer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from aiokafka.consumer import fetcher
from aiokafka.errors import CorruptRecordException


def BATCHES(data: bytes | None) -> bytes | None:  # a marker, named as one
    """The key deserializer of a consumer that takes record batches (never called: records are not built)."""
    return data


class Fetched(NamedTuple):
    """One record batch of a fetch; its records before ``start`` were read before (a fetch may start inside a batch)."""

    batch: Any  # aiokafka's DefaultRecordBatch (or a legacy one): iterating it gives records with offset, key and value
    start: int


class BatchPartitionRecords(fetcher.PartitionRecords):
    """A fetch answer's records, or its record batches for a `BATCHES` consumer."""

    next_fetch_offset: int

    def _unpack_records(self) -> Iterator[Any]:
        """aiokafka's iterator of the answer (not a generator itself: no extra frame per record for other consumers)."""
        if self._key_deserializer is BATCHES:
            return self._batches()
        return self._records_of_fetch()

    def _batches(self) -> Iterator[Fetched]:
        if self._isolation_level != fetcher.READ_UNCOMMITTED:
            raise ValueError("a consumer of record batches reads uncommitted: it does not filter aborted transactions")
        records = self._records
        while records.has_next():
            batch = records.next_batch()
            if self._check_crcs and not batch.validate_crc():
                raise CorruptRecordException(f"Invalid CRC - {self._tp}")
            expected = self.next_fetch_offset
            if batch.base_offset > expected and self._stop_at_hole(expected, batch.base_offset):
                return
            self._passed_hole(expected)
            self.next_fetch_offset = batch.next_offset
            if not batch.is_control_batch:
                yield Fetched(batch, expected)

    def _records_of_fetch(self) -> Iterator[Any]:
        """The fetch's `ConsumerRecord`s, as aiokafka makes them."""
        return super()._unpack_records()

    def _stop_at_hole(self, missing: int, found: int) -> bool:
        """Whether to stop before offsets ``missing`` to ``found`` - 1, absent from the answer (a compacted topic's are gone for good)."""
        return False

    def _passed_hole(self, offset: int) -> None:
        """The batch at ``offset`` was taken."""


def install() -> None:
    """Let this process's `BATCHES` consumers take record batches (see the module's docstring)."""
    if not issubclass(fetcher.PartitionRecords, BatchPartitionRecords):
        fetcher.PartitionRecords = BatchPartitionRecords
