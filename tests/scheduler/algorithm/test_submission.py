"""Submission order via NumPy must equal the plain Python sort, ties and odd times included."""

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.scheduler.algorithm import submission
from streams.scheduler.algorithm.submission import SUBMISSION, in_submission_order
from tests.scheduler.algorithm.builders import job

# Few distinct times so that ties (sorted by id) are common; integers beyond 2**53 convert to
# float64 inexactly and must still end up in exact order.
times = st.one_of(st.sampled_from([0.0, 1.0, 1.5, -2.0]), st.integers(2**53, 2**53 + 4), st.floats(allow_nan=False))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(times, st.integers(0, 10**6)), max_size=40))
def test_equals_python_sort(specs):
    jobs = [job(f"j{n:07d}-{i}", "A", t=t) for i, (t, n) in enumerate(specs)]
    with mock.patch.object(submission, "_NUMPY_FROM", 0):  # the NumPy path even for small groups
        assert in_submission_order(list(jobs)) == sorted(jobs, key=SUBMISSION)


def test_large_group_with_long_tie_runs():
    jobs = [job(f"j{(i * 7919) % 1000:04d}", "A", t=float(i % 3)) for i in range(1000)]
    assert in_submission_order(list(jobs)) == sorted(jobs, key=SUBMISSION)
