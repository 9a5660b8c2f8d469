"""Which partition a keyed record lands on, computed the way Kafka producers do it.

Kafka's default partitioner (the Java client's, aiokafka's, and so Faust's) hashes the key with
MurmurHash2 (seed 0x9747b28c), clears the sign bit and takes the remainder by the partition count.
Every event of a job set is keyed by `queue/job set`, so the job's state lives in that partition
of every table folded from `events`; a job id carries the key's hash (`streams.domain.ids`) so that
any worker finds the job's partition from its id alone, whatever the partition count.
"""

from __future__ import annotations

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def key_hash(key: bytes) -> int:
    """Kafka's partitioning hash of ``key``: MurmurHash2 as the Java client computes it, sign bit cleared (0 .. 2^31-1)."""
    length = len(key)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for start in range(0, whole, 4):
        k = int.from_bytes(key[start : start + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = key[whole:]
    if tail:
        # The Java client mixes the 1-3 trailing bytes in as one little-endian word, then multiplies.
        h ^= int.from_bytes(tail, "little")
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h & 0x7FFFFFFF


def partition_for(hashed: int, partitions: int) -> int:
    """The partition of a key whose `key_hash` is ``hashed``, among ``partitions``."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return hashed % partitions
