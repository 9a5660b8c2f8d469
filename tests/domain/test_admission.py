"""Submission limits: per-queue and per-user token buckets of jobs on the log's time, and the size limit."""

from __future__ import annotations

from typing import Any

import pytest

from streams.domain.admission import MAX_BUCKETS, Admission, SubmissionLimits

T = 1_717_000_000_000  # epoch ms


def limited(**limits: Any) -> Admission:
    return Admission(SubmissionLimits(**limits))


def test_no_limits_by_default() -> None:
    admission = Admission()
    assert admission.admit("q", "alice", 10**9, T) is None
    assert SubmissionLimits().oversized(10**9) is None


def test_a_queue_gets_its_burst_then_its_rate() -> None:
    admission = limited(queue_rate=10, queue_burst=100)
    assert admission.admit("q", "alice", 60, T) is None
    assert admission.admit("q", "bob", 40, T) is None
    refused = admission.admit("q", "carol", 1, T)
    assert refused == "queue 'q' is over its submission limit of 10 jobs/s (bursts of 100): 1 jobs submitted, 0 admissible now; retry later"
    assert admission.admit("other", "carol", 100, T) is None  # another queue is not held up
    assert admission.admit("q", "carol", 6, T + 500) is not None  # half a second: 5 tokens
    assert admission.admit("q", "carol", 5, T + 500) is None
    assert admission.admit("q", "carol", 100, T + 3_600_000) is None  # refilled up to the burst, no further
    assert admission.admit("q", "carol", 1, T + 3_600_000) is not None


def test_a_user_is_limited_over_all_queues() -> None:
    admission = limited(user_rate=1, user_burst=10)
    assert admission.admit("a", "alice", 6, T) is None
    refused = admission.admit("b", "alice", 6, T)
    assert refused is not None and refused.startswith("user 'alice' is over its submission limit of 1 jobs/s (bursts of 10): 6 jobs")
    assert admission.admit("b", "bob", 6, T) is None


def test_a_refused_request_takes_no_tokens_from_either_bucket() -> None:
    admission = limited(queue_rate=1, queue_burst=10, user_rate=1, user_burst=8)
    assert admission.admit("q", "alice", 4, T) is None
    assert admission.admit("q", "alice", 5, T) is not None  # alice has 4 left: the queue keeps its 6
    assert admission.admit("q", "bob", 6, T) is None
    assert admission.admit("q", "bob", 1, T) is not None


def test_a_request_larger_than_the_burst_can_never_pass() -> None:
    admission = limited(queue_rate=100, queue_burst=50)
    assert (
        admission.admit("q", "alice", 51, T + 10**9)
        == "51 jobs in one request are more than queue 'q' may submit at once (50); split the request"
    )


def test_time_is_the_logs_and_never_runs_backwards() -> None:
    """A message stamped in the past refills nothing, and the same messages decide the same way again."""

    def decisions() -> list[bool]:
        admission = limited(queue_rate=10, queue_burst=10)
        stamps = [T, T + 1_000, T + 200, T + 300, T + 1_100, T + 5_000]
        return [admission.admit("q", "u", 6, at) is None for at in stamps]

    assert decisions() == [True, True, False, False, False, True]
    assert decisions() == decisions()


def test_full_buckets_are_forgotten_when_there_are_too_many() -> None:
    admission = limited(user_rate=1, user_burst=10)
    for user in range(MAX_BUCKETS):
        assert admission.admit("q", f"user-{user}", 1, T) is None
    assert admission.admit("q", "one-more", 1, T + 20_000) is None  # all refilled by then: forgotten
    assert len(admission._users) == 1


def test_size_limit() -> None:
    limits = SubmissionLimits(max_message_bytes=1000)
    assert limits.oversized(1000) is None
    assert limits.oversized(1001) == "submission of 1001 bytes is over the limit of 1000 bytes; split it into smaller requests"


@pytest.mark.parametrize(
    "limits",
    [{"queue_rate": -1.0}, {"queue_rate": 1.0, "queue_burst": 0}, {"user_rate": 2.0}, {"max_message_bytes": -1}],
)
def test_impossible_limits_are_refused(limits: dict) -> None:
    with pytest.raises(ValueError):
        SubmissionLimits(**limits)
