import random

import pytest
from ulid import ULID

from streams.domain.ids import IdFactory, new_id


def test_same_time_and_seed_give_the_same_id():
    assert new_id(1_700_000_000_000, random.Random(7)) == new_id(1_700_000_000_000, random.Random(7))


def test_id_is_a_ulid_carrying_the_time():
    value = new_id(1_700_000_000_123, random.Random(1))
    assert len(value) == 26
    assert ULID.from_str(value).milliseconds == 1_700_000_000_123


def test_ids_sort_by_time():
    rng = random.Random(3)
    ids = [new_id(t, rng) for t in (5, 1_000, 2_000_000)]
    assert ids == sorted(ids)


def test_out_of_range_time_refused():
    with pytest.raises(ValueError, match="outside the ULID range"):
        new_id(-1, random.Random())


def test_factory_uses_its_clock_and_rng():
    times = iter([10, 20])
    factory = IdFactory(clock_ms=lambda: next(times), rng=random.Random(9))
    first, second = factory.new(), factory.new()
    assert [ULID.from_str(v).milliseconds for v in (first, second)] == [10, 20]
    assert first == new_id(10, random.Random(9))
    assert IdFactory.system().new() != IdFactory.system().new()
