"""Which worker keeps the standby copy of each partition: one copy besides its owner's, chosen from the assignment alone."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streams.tables.standby import standby_partitions

TOPIC = "flotilla.job-states"


def test_one_worker_keeps_no_copies_and_two_keep_each_others() -> None:
    assert standby_partitions({"http://a": {TOPIC: [0, 1]}}, TOPIC, "http://a") == set()
    two = {"http://a": {TOPIC: [0, 2]}, "http://b": {TOPIC: [1, 3]}}
    assert standby_partitions(two, TOPIC, "http://a") == {1, 3}
    assert standby_partitions(two, TOPIC, "http://b") == {0, 2}
    assert standby_partitions(two, "other-topic", "http://a") == set()
    assert standby_partitions(two, TOPIC, "http://not-a-member") == set()


@given(st.integers(2, 6), st.integers(1, 12), st.randoms(use_true_random=False))
def test_every_partition_has_one_copy_on_a_worker_that_does_not_own_it(workers: int, partitions: int, rng: object) -> None:
    members = [f"http://w{i}" for i in range(workers)]
    owners = {p: members[rng.randrange(workers)] for p in range(partitions)}  # type: ignore[attr-defined]
    distribution = {url: {TOPIC: [p for p, owner in owners.items() if owner == url]} for url in members}
    copies = {url: standby_partitions(distribution, TOPIC, url) for url in members}
    for partition, owner in owners.items():
        keepers = [url for url, kept in copies.items() if partition in kept]
        assert len(keepers) == 1 and keepers != [owner]
