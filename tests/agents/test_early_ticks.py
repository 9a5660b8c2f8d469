"""When the scheduling agent closes a window before its period: new work, room for it, and a gap."""

from __future__ import annotations

import pytest

from streams.agents.scheduler import EARLY_TICK_MIN_GAP_S, EarlyTicks, brings_work
from streams.scheduler import feed
from tests.kit.loop import Loop
from tests.kit.scheduler import delta, executor


def test_new_work_on_an_idle_cluster_ticks_once_the_gap_has_passed() -> None:
    early = EarlyTicks()
    early.ticked(at=10.0)
    early.cycled(left_waiting=False, seconds=0.001)
    assert early.delay(at=20.0) is None, "nothing new: the period decides"
    early.work()
    assert early.delay(at=10.0 + EARLY_TICK_MIN_GAP_S / 4) == pytest.approx(EARLY_TICK_MIN_GAP_S * 3 / 4)
    assert early.delay(at=10.0 + EARLY_TICK_MIN_GAP_S) == 0


def test_work_that_came_too_soon_after_a_tick_waits_for_the_gap_not_for_more_work() -> None:
    """The work is remembered until a tick's cycle has seen it: no second record, and no period, is needed."""
    early = EarlyTicks()
    early.ticked(at=10.0)
    early.work()  # before the tick's cycle ran: that cycle may or may not see it
    early.cycled(left_waiting=False, seconds=0.001)
    assert early.delay(at=10.001) is None, "the tick's cycle ran over everything before it on the feed"
    early.work()  # after the cycle: only a later tick sees it
    assert early.delay(at=10.002) == pytest.approx(EARLY_TICK_MIN_GAP_S - 0.002)
    assert early.delay(at=30.0) == 0, "still due long after, with nothing else on the feed"


def test_a_cycle_that_left_jobs_waiting_keeps_the_steady_period() -> None:
    early = EarlyTicks()
    early.cycled(left_waiting=True, seconds=0.001)
    early.work()
    assert early.delay(at=1_000.0) is None
    early.cycled(left_waiting=False, seconds=0.001)
    early.work()
    assert early.delay(at=1_000.0) == 0


def test_long_cycles_widen_the_gap_so_cycles_take_a_fifth_of_the_time_at_most() -> None:
    early = EarlyTicks()
    early.ticked(at=0.0)
    early.cycled(left_waiting=False, seconds=0.5)
    early.work()
    assert early.delay(at=1.9) == pytest.approx(0.1)
    assert early.delay(at=2.0) == 0


def test_only_queued_jobs_bring_work() -> None:
    queued, leased = delta("job-1", "a"), delta("job-2", "a", state="leased")
    assert brings_work(queued) and not brings_work(leased)
    assert brings_work(feed.Changes((leased, queued))) and not brings_work(feed.Changes((leased,)))
    assert not brings_work(executor("ex1", time=1))


def test_a_cycle_says_whether_it_left_a_queued_job_waiting() -> None:
    loop = Loop()
    loop.report("ex1", at=1_000)
    loop.submit("fits", cpu="1")
    assert not loop.cycle(2_000, "a").left_waiting
    loop.submit("too-big", cpu="1000")
    assert loop.cycle(3_000, "a").left_waiting


def test_with_no_executor_a_queued_job_is_left_waiting_so_new_work_does_not_tick_early() -> None:
    """Nothing could lease it: ticking before the period would only repeat a cycle that changes nothing."""
    loop = Loop()
    assert not loop.cycle(1_000, "a").left_waiting
    loop.submit("nowhere", cpu="1")
    assert loop.cycle(2_000, "a").left_waiting
    loop.report("ex1", at=2_500)
    assert not loop.cycle(3_000, "a").left_waiting  # an executor came: the job is leased
