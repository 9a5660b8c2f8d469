"""Partitions computed as Kafka producers compute them, and job ids that lead to their job set's partition."""

from __future__ import annotations

import random

import pytest
from aiokafka.partitioner import DefaultPartitioner
from hypothesis import given
from hypothesis import strategies as st
from ulid import ULID

from streams.domain.events import sequence_key
from streams.domain.ids import job_of_run, job_partition, new_id, route_of, routed_id, run_id_for
from streams.domain.partitioning import key_hash, partition_for


@given(st.binary(max_size=64), st.integers(1, 64))
def test_a_key_lands_where_kafkas_default_partitioner_puts_it(key: bytes, partitions: int) -> None:
    every = list(range(partitions))
    assert partition_for(key_hash(key), partitions) == DefaultPartitioner()(key, every, every)


def test_a_topic_has_a_partition() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for(1, 0)


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20), st.integers(0, 2**40), st.integers(1, 16))
def test_a_job_id_leads_to_its_job_sets_partition_for_any_partition_count(queue: str, job_set: str, now_ms: int, partitions: int) -> None:
    route = key_hash(sequence_key(queue, job_set).encode())
    job_id = routed_id(now_ms, random.Random(now_ms), route)
    assert ULID.from_str(job_id).milliseconds == now_ms and len(job_id) == 26
    assert route_of(job_id) == route
    assert job_partition(job_id, partitions) == partition_for(route, partitions)
    assert job_partition(job_of_run(run_id_for(job_id, 3)), partitions) == job_partition(job_id, partitions)


def test_routed_ids_of_one_job_set_and_millisecond_differ() -> None:
    rng = random.Random(1)
    ids = {routed_id(1_700_000_000_000, rng, 12345) for _ in range(10_000)}
    assert len(ids) == 10_000 and {route_of(job_id) for job_id in ids} == {12345}


def test_an_id_ingest_cannot_have_made_has_no_partition_but_with_one_partition_every_id_is_in_it() -> None:
    assert job_partition("no-such-job", 4) is None and route_of("no-such-job") is None
    assert job_partition("no-such-job", 1) == 0
    assert job_partition(new_id(5, random.Random(2)), 4) in range(4)  # an id from before: some partition, not a refusal
    with pytest.raises(ValueError, match="does not fit"):
        routed_id(5, random.Random(), 2**32)
