"""Equal values decoded for different jobs are one object in the scheduler's index."""

from __future__ import annotations

from dataclasses import replace

from streams.domain import shared
from streams.scheduler import feed
from streams.scheduler.convert import scheduling_job
from streams.scheduler.feed import JobDelta


def test_equal_values_are_one_object_and_types_are_not_conflated() -> None:
    first, second, other_order = {"cpu": 1000, "memory": 2**30}, {"cpu": 1000, "memory": 2**30}, {"memory": 2**30, "cpu": 1000}
    assert shared.shared(first) is shared.shared(second) is first
    assert shared.shared(other_order) is other_order  # encodes differently: kept apart
    assert shared.shared(({"key": "gpu"},)) is shared.shared(({"key": "gpu"},))
    assert shared.shared({"cpu": 1}) is not shared.shared({"cpu": 1.0})
    assert shared.shared((1,)) is not shared.shared([1])
    assert shared.shared("queue-" + "a") is shared.shared("queue-a")
    labels = (("app", "bench"), ("team", "x"))
    assert shared.shared(labels) is shared.shared((("app", "bench"), ("team", "x"))) is labels  # text pairs: their own key
    assert shared.shared((("app", 1),)) is not shared.shared((("app", 1.0),))
    assert shared.shared((("app", "bench"),)) is not shared.shared([("app", "bench")])


def test_a_value_evicted_stays_valid_and_unhashable_leaves_pass_through() -> None:
    kept = shared.shared({"evicted-later": 1})
    for n in range(shared.SIZE + 1):
        shared.shared({"filler": n})
    assert kept == {"evicted-later": 1}
    assert shared.shared({"evicted-later": 1}) is not kept  # no longer handed out, still intact
    odd = {"leaf": {1, 2}}  # a set: unhashable inside a frozen key
    assert shared.shared(odd) is odd


def test_decoded_job_deltas_and_their_scheduling_jobs_share_what_is_equal() -> None:
    base = JobDelta(
        "job-1",
        "queue-a",
        "set-1",
        "queued",
        "armada-default",
        1.0,
        1_000,
        {"cpu": 1000, "memory": 1024},
        node_selector={"zone": "a"},
        tolerations=({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},),
        gang={"armadaproject.io/gangId": "g"},
    )
    one, two = (feed.decode(feed.encode(replace(base, job_id=job_id, submitted=n))) for n, job_id in enumerate(("job-1", "job-2")))
    assert isinstance(one, JobDelta) and isinstance(two, JobDelta) and one.job_id != two.job_id
    for name in ("queue", "job_set_id", "state", "priority_class", "requests", "node_selector", "tolerations", "gang"):
        assert getattr(one, name) is getattr(two, name), name
    assert scheduling_job(one).tolerations is scheduling_job(two).tolerations
    assert scheduling_job(one) != scheduling_job(two)
