"""Job, run and event ids as ULIDs, with the clock and randomness supplied by the caller.

Ids are part of replayed decisions (a lease names its run id), so the pure core must be able to
produce the same ids from the same recorded time and seed. Only the I/O shell builds a factory
from the real clock and ``os.urandom``.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from ulid import ULID

_TIMESTAMP_BYTES = 6
_RANDOM_BITS = 80


def new_id(now_ms: int, rng: random.Random) -> str:
    """A ULID string for time ``now_ms`` (epoch milliseconds) drawing 80 bits from ``rng``."""
    if not 0 <= now_ms < 2 ** (8 * _TIMESTAMP_BYTES):
        raise ValueError(f"timestamp {now_ms} ms is outside the ULID range")
    randomness = rng.getrandbits(_RANDOM_BITS).to_bytes(_RANDOM_BITS // 8, "big")
    return str(ULID.from_bytes(now_ms.to_bytes(_TIMESTAMP_BYTES, "big") + randomness))


@dataclass
class IdFactory:
    """Bundles a clock and a random source so callers can write ``ids.new()``."""

    clock_ms: Callable[[], int]
    rng: random.Random

    def new(self) -> str:
        return new_id(self.clock_ms(), self.rng)

    @classmethod
    def system(cls) -> IdFactory:
        """The production factory: wall clock and an OS-seeded generator."""
        return cls(clock_ms=lambda: time.time_ns() // 1_000_000, rng=random.Random(os.urandom(16)))
