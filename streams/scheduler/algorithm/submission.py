"""Submission order of a group of interchangeable queued jobs: (submit_time, id).

A queue can hold a million jobs; sorting them with a Python key takes ~0.5 s, most of it
comparing key tuples. NumPy sorts the submission times instead and Python only breaks ties by
id, so the result is exactly `sorted(jobs, key=SUBMISSION)`.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

from streams.scheduler.algorithm.model import Job

SUBMISSION = attrgetter("submit_time", "id")
_SUBMIT_TIME = attrgetter("submit_time")
# Below this size the plain sort is as fast as the conversions to and from NumPy.
_NUMPY_FROM = 256


def in_submission_order(jobs: list[Job]) -> list[Job]:
    """The jobs sorted by (submit_time, id)."""
    if len(jobs) < _NUMPY_FROM:
        return sorted(jobs, key=SUBMISSION)
    times = np.fromiter(map(_SUBMIT_TIME, jobs), dtype=np.float64, count=len(jobs))
    if np.isnan(times).any():
        # NaN compares false both ways: keep whatever order Python's sort makes of it.
        return sorted(jobs, key=SUBMISSION)
    order = np.argsort(times, kind="stable")
    ordered = list(map(jobs.__getitem__, order.tolist()))
    # Equal float64 times (true ties, or integers too large to convert exactly; conversion keeps
    # order, so only equal values can be misordered) are re-sorted by the exact key.
    times = times[order]
    tied = np.flatnonzero(times[1:] == times[:-1])
    if tied.size:
        starts = tied[np.r_[True, tied[1:] != tied[:-1] + 1]]
        ends = tied[np.r_[tied[1:] != tied[:-1] + 1, True]] + 2
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            ordered[start:end] = sorted(ordered[start:end], key=SUBMISSION)
    return ordered
