"""Job and event ids as ULIDs, with the clock and randomness supplied by the caller; run ids
derived from their job.

Ids are part of replayed decisions (a lease names its run id), so the pure core must be able to
produce the same ids from the same recorded time and seed. Only the I/O shell builds a factory
from the real clock and ``os.urandom``.

A run id is what an executor, a pod and every report of the run hang on, so two jobs must never
share one, not even when a cycle is run again after a restart and decides differently. A random
draw cannot promise that (a re-run cycle draws the same numbers for other jobs), so a run id is
the job's id and the run's attempt number: the scheduler can lease a job's n-th run only to that
job, and a replay names it the same.

A job id also says where the job lives: the job's state is in the partition its job set's key
(`queue/job set`) hashes to, and ingest draws the job's id with that hash in place of the first
32 of the ULID's 80 random bits (`routed_id`), so any worker finds a job's partition from its id
(`job_partition`) without asking anyone, for any partition count. 48 random bits remain per
millisecond and job set; ingest redraws an id its batch already holds.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

_TIMESTAMP_BYTES = 6
RANDOM_BITS = 80
_ROUTE_BYTES = 4


# ULIDs are 26 characters of Crockford's base32: the first holds the top 3 of their 128 bits, then
# 12 pairs of characters hold 10 bits each and the last character 5.
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = tuple(first + second for first in _CROCKFORD for second in _CROCKFORD)
_DIGITS = {char: value for value, char in enumerate(_CROCKFORD)} | {char.lower(): value for value, char in enumerate(_CROCKFORD)}


def new_id(now_ms: int, rng: random.Random) -> str:
    """A ULID string for time ``now_ms`` (epoch milliseconds) drawing 80 bits from ``rng``."""
    return ulid(now_ms, rng.getrandbits(RANDOM_BITS))


def ulid(now_ms: int, random_bits: int) -> str:
    """The ULID string of time ``now_ms`` (epoch milliseconds) and ``random_bits`` (`RANDOM_BITS` of them).

    Written out here rather than through `ulid.ULID` (which the tests compare it with): three
    times faster, and ingest makes two per job."""
    if not 0 <= now_ms < 2 ** (8 * _TIMESTAMP_BYTES):
        raise ValueError(f"timestamp {now_ms} ms is outside the ULID range")
    return _ulid((now_ms << RANDOM_BITS) | random_bits)


def routed_id(now_ms: int, rng: random.Random, route: int) -> str:
    """A ULID for time ``now_ms`` whose randomness starts with ``route`` (a `key_hash`, 31 bits) and draws 48 bits from ``rng``."""
    if not 0 <= route < 2 ** (8 * _ROUTE_BYTES):
        raise ValueError(f"route {route} does not fit in {_ROUTE_BYTES} bytes")
    if not 0 <= now_ms < 2 ** (8 * _TIMESTAMP_BYTES):
        raise ValueError(f"timestamp {now_ms} ms is outside the ULID range")
    random_bits = RANDOM_BITS - 8 * _ROUTE_BYTES
    return _ulid((((now_ms << (8 * _ROUTE_BYTES)) | route) << random_bits) | rng.getrandbits(random_bits))


def _ulid(v: int) -> str:
    """The 26 characters of the 128-bit value ``v``."""
    p = _PAIRS
    return (
        _CROCKFORD[v >> 125]
        + p[(v >> 115) & 1023]
        + p[(v >> 105) & 1023]
        + p[(v >> 95) & 1023]
        + p[(v >> 85) & 1023]
        + p[(v >> 75) & 1023]
        + p[(v >> 65) & 1023]
        + p[(v >> 55) & 1023]
        + p[(v >> 45) & 1023]
        + p[(v >> 35) & 1023]
        + p[(v >> 25) & 1023]
        + p[(v >> 15) & 1023]
        + p[(v >> 5) & 1023]
        + _CROCKFORD[v & 31]
    )


def route_of(job_id: str) -> int | None:
    """The route hash a `routed_id` carries; None for a string that is not a ULID."""
    if len(job_id) != 26 or job_id[0] not in "01234567":
        return None
    v = 0
    for char in job_id:
        digit = _DIGITS.get(char)
        if digit is None:
            return None
        v = (v << 5) | digit
    return (v >> (RANDOM_BITS - 8 * _ROUTE_BYTES)) & 0x7FFFFFFF


def job_partition(job_id: str, partitions: int) -> int | None:
    """The partition holding the job ``job_id``, among ``partitions``; None when the id cannot be one
    ingest made (with one partition, every id is in partition 0)."""
    if partitions == 1:
        return 0
    route = route_of(job_id)
    return None if route is None else route % partitions


def job_of_run(run_id: str) -> str:
    """The job id a `run_id_for` id names."""
    return run_id.rpartition("-")[0]


def run_id_for(job_id: str, attempt: int) -> str:
    """The id of ``job_id``'s run number ``attempt`` (1 for its first lease): ``<job id>-<attempt>``.

    One-to-one: the attempt is the digits after the last hyphen, the job id everything before.
    For a job id from ingest (a ULID) the run id is a valid Kubernetes name once lower-cased.
    """
    if attempt < 1:
        raise ValueError(f"run attempt {attempt} of job {job_id} is not positive")
    return f"{job_id}-{attempt}"


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
