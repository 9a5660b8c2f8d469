"""Reading the embedded broker's partitions without holes.

Tansu (the embedded broker) can answer a fetch at a partition's tail with a later record batch while
an earlier one, whose offsets it has already given out to a concurrent producer, is not readable
yet. aiokafka moves the consumer's position past whatever the fetch returned, so the earlier batch
is skipped for good; Faust even counts the hole as read and commits past it. Measured on the
embedded broker: twelve producers appending batches of three records to one partition, a consumer
following the tail missed one or two of the 6,000 batches in about every other run, and a fetch
again from the first missing offset found every record there. On the scheduler feed a skipped
record is a lost job delta: the failover test saw the scheduler keep seven finished jobs leased.

No partition of the embedded broker has a real hole (it neither compacts nor writes transaction
markers), so a process connected to it reads contiguously (`require`): a fetch's records stop at
the first missing offset, and the next fetch starts there. A hole still there after
`HOLE_PATIENCE_S` is taken as real and read past with a warning, so that no consumer stalls for ever.
Kafka compacts and has transactions, where holes are normal: this is for `tansu://` only.

aiokafka makes a fetch's records with `aiokafka.consumer.fetcher.PartitionRecords`, looked up in its
module for every fetch answer; there is no per-consumer hook, so `require` replaces it for the process
(keeping the record batches of streams/fetched_batches.py for the consumers that take them, holes
checked between batches).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka.consumer import fetcher

from streams.fetched_batches import BatchPartitionRecords

log = logging.getLogger(__name__)

HOLE_PATIENCE_S = 5.0


@dataclass
class Holes:
    """Missing offsets seen before a partition's later records, and since when."""

    patience_s: float = HOLE_PATIENCE_S
    clock: Callable[[], float] = time.monotonic
    seen: dict[tuple[Any, int], float] = field(default_factory=dict)  # (partition, first missing offset) -> first seen
    waited: int = 0  # fetches cut short at a hole
    skipped: int = 0  # holes read past after the patience ran out

    def wait(self, partition: Any, missing: int, found: int) -> bool:
        """Whether to stop at the hole from ``missing`` to ``found`` - 1 and fetch again from ``missing``."""
        now = self.clock()
        first = self.seen.setdefault((partition, missing), now)
        if now - first < self.patience_s:
            self.waited += 1
            return True
        del self.seen[(partition, missing)]
        self.skipped += 1
        log.warning(
            "%s: offsets %d to %d still missing %.1f s after a later record was read; reading on from offset %d",
            partition,
            missing,
            found - 1,
            now - first,
            found,
        )
        return False

    def filled(self, partition: Any, offset: int) -> None:
        self.seen.pop((partition, offset), None)


HOLES = Holes()


class ContiguousPartitionRecords(BatchPartitionRecords):
    """One fetch answer's records (or record batches), up to the first missing offset (where the next fetch starts)."""

    holes: Holes = HOLES

    def _records_of_fetch(self) -> Iterator[Any]:
        expected = self.next_fetch_offset
        holes = self.holes
        for record in super()._records_of_fetch():
            offset = record.offset
            if offset != expected:
                if holes.wait(self._tp, expected, offset):
                    self.next_fetch_offset = expected
                    return
            elif holes.seen:
                holes.filled(self._tp, offset)
            expected = offset + 1
            yield record

    def _stop_at_hole(self, missing: int, found: int) -> bool:
        if self.holes.wait(self._tp, missing, found):
            self.next_fetch_offset = missing
            return True
        return False

    def _passed_hole(self, offset: int) -> None:
        if self.holes.seen:
            self.holes.filled(self._tp, offset)


def require() -> None:
    """Make every consumer of this process read its partitions without holes (see the module's docstring)."""
    fetcher.PartitionRecords = ContiguousPartitionRecords
