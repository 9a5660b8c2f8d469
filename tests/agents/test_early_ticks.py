"""When the scheduling agent closes a window before its period: new work, room for it, and a gap."""

from __future__ import annotations

from streams.agents.scheduler import EARLY_TICK_MIN_GAP_S, EarlyTicks, brings_work
from streams.scheduler import feed
from tests.kit.loop import Loop
from tests.kit.scheduler import delta, executor


def test_new_work_on_an_idle_cluster_ticks_once_the_gap_has_passed() -> None:
    early = EarlyTicks()
    early.ticked(at=10.0)
    early.cycled(left_waiting=False, seconds=0.001)
    assert not early.due(new_work=True, at=10.0 + EARLY_TICK_MIN_GAP_S / 2)
    assert early.due(new_work=True, at=10.0 + EARLY_TICK_MIN_GAP_S)
    assert not early.due(new_work=False, at=20.0), "nothing new: the period decides"


def test_a_cycle_that_left_jobs_waiting_keeps_the_steady_period() -> None:
    early = EarlyTicks()
    early.cycled(left_waiting=True, seconds=0.001)
    assert not early.due(new_work=True, at=1_000.0)
    early.cycled(left_waiting=False, seconds=0.001)
    assert early.due(new_work=True, at=1_000.0)


def test_long_cycles_widen_the_gap_so_cycles_take_a_fifth_of_the_time_at_most() -> None:
    early = EarlyTicks()
    early.ticked(at=0.0)
    early.cycled(left_waiting=False, seconds=0.5)
    assert not early.due(new_work=True, at=1.9)
    assert early.due(new_work=True, at=2.0)


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
