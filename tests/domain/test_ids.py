import random

import pytest
from ulid import ULID

from streams.domain.ids import IdFactory, new_id, run_id_for


def test_same_time_and_seed_give_the_same_id():
    assert new_id(1_700_000_000_000, random.Random(7)) == new_id(1_700_000_000_000, random.Random(7))


def test_id_is_a_ulid_carrying_the_time():
    value = new_id(1_700_000_000_123, random.Random(1))
    assert len(value) == 26
    assert ULID.from_str(value).milliseconds == 1_700_000_000_123


def test_an_id_is_the_ulid_of_its_time_and_80_drawn_bits():
    """Byte for byte what the ulid package writes: ids made before and after a restart must agree."""
    for seed in range(500):
        draw = random.Random(seed)
        now_ms = draw.randrange(2**48)
        expected = ULID.from_bytes(now_ms.to_bytes(6, "big") + random.Random(seed).getrandbits(80).to_bytes(10, "big"))
        assert new_id(now_ms, random.Random(seed)) == str(expected)
    assert new_id(2**48 - 1, random.Random(0)) == str(ULID.from_bytes(b"\xff" * 6 + random.Random(0).getrandbits(80).to_bytes(10, "big")))


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


def test_a_run_id_is_its_job_id_and_attempt_number() -> None:
    job = new_id(1_700_000_000_000, random.Random(5))
    assert run_id_for(job, 1) == f"{job}-1"
    assert run_id_for(job, 1) == run_id_for(job, 1), "a replay names the run the same"


def test_run_ids_are_unique_per_job_and_attempt() -> None:
    """One-to-one, even for job ids that end in what looks like an attempt number."""
    jobs = ["a", "a-1", "a-11", "a-1-1", "1", "11", new_id(10, random.Random(1)), new_id(10, random.Random(2))]
    pairs = [(job, attempt) for job in jobs for attempt in (1, 2, 11, 111)]
    ids = [run_id_for(job, attempt) for job, attempt in pairs]
    assert len(set(ids)) == len(pairs)
    assert all(tuple(r.rsplit("-", 1)) == (job, str(attempt)) for r, (job, attempt) in zip(ids, pairs, strict=True))


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempts_count_from_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="not positive"):
        run_id_for("job", attempt)
