import math

from streams.scheduler.algorithm.limits import Bucket, absolute_limits
from streams.scheduler.algorithm.model import UNLIMITED, RateLimit, TokenBucket


def test_bucket_starts_full_and_refills_at_rate_up_to_burst():
    limit = RateLimit(2.0, 4)
    assert Bucket(limit, None, 0.0).tokens == 4
    assert Bucket(limit, TokenBucket(0.0, 0.0), 1.0).tokens == 2
    assert Bucket(limit, TokenBucket(1.0, 0.0), 10.0).tokens == 4


def test_bucket_state_round_trips_consumption():
    limit = RateLimit(1.0, 3)
    bucket = Bucket(limit, None, 5.0)
    bucket.reserve(3)
    assert bucket.state(5.0) == TokenBucket(0.0, 5.0)
    assert Bucket(limit, bucket.state(5.0), 6.0).tokens == 1


def test_unlimited_bucket_has_no_state():
    bucket = Bucket(UNLIMITED, None, 0.0)
    assert math.isinf(bucket.tokens)
    assert bucket.state(0.0) is None


def test_absolute_limits_round_to_milli_units():
    assert absolute_limits({"cpu": 32000}, {"cpu": 0.5, "gpu": 1.0}) == {"cpu": 16000, "gpu": 0}
