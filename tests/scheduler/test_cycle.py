"""One scheduling cycle around the algorithm: requests, the lease lifecycle, placement, ids.

Most tests drive the whole loop (`tests.kit.loop`): the cycle's events go through Avro and
the real fold, whose deltas come back through the feed to the index, as on the log.
"""

from __future__ import annotations

import copy
import json
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.domain.ids import run_id_for
from streams.scheduler.config import CycleConfig
from streams.scheduler.config_file import parse
from streams.scheduler.cycle import MAX_DECISIONS_PER_RECORD, Cycle, CycleOutcome, run_cycle
from streams.scheduler.feed import JobSetAction, QueueInfo, queue_info
from streams.scheduler.index import END, LEASE, SchedulerIndex
from tests.kit.loop import Loop, decisions, events, kinds, leases, preempted
from tests.kit.quantities import CPU
from tests.kit.scheduler import DEFAULT, PREEMPTIBLE, delta, executor, holding, nodes, running, tick

GANG = "armadaproject.io/gangId", "armadaproject.io/gangCardinality"


def lease_of(loop: Loop, job_id: str) -> tuple[str, str]:
    run = loop.job(job_id)["runs"][-1]
    return run["executor"], run["node"]


# -- placement and preemption ------------------------------------------------------------------


def test_a_second_queue_preempts_exactly_the_most_recent_half_of_the_first() -> None:
    loop = Loop()
    for i in range(64):
        loop.submit(f"a{i:02d}", "a", cpu="1", at=1_000 + i)
    loop.report("ex1", 1_500)
    first = loop.cycle(2_000)
    assert first.leased == 64 and first.preempted == 0
    assert Counter(lease["node"] for lease in leases(first).values()) == {"n0": 32, "n1": 32}
    assert {loop.job(f"a{i:02d}")["state"] for i in range(64)} == {"leased"}

    loop.report("ex1", 2_500)
    loop.submit("b0", "b", cpu="32", at=2_600)
    second = loop.cycle(3_000)

    assert second.preempted == 32 and second.leased == 1
    assert preempted(second) == {f"a{i:02d}" for i in range(32, 64)}  # the 32 most recently submitted
    assert set(leases(second)) == {"b0"}
    assert {loop.job(f"a{i:02d}")["state"] for i in range(32, 64)} == {"preempted"}
    assert {loop.job(f"a{i:02d}")["state"] for i in range(32)} == {"leased"}
    # the executor is told to stop each preempted run, and to start b0's
    stops = [c for c in loop.commands if c["kind"] == "preempt_run"]
    assert sorted(c["job_id"] for c in stops) == [f"a{i:02d}" for i in range(32, 64)]
    assert {c["run_id"] for c in stops} == {loop.job(c["job_id"])["runs"][0]["run_id"] for c in stops}
    started = [c for c in loop.commands if c["kind"] == "lease" and c["job_id"] == "b0"]
    assert len(started) == 1 and started[0]["node"] == lease_of(loop, "b0")[1]
    # b0 got the node the preempted jobs left
    assert {lease_of(loop, f"a{i:02d}")[1] for i in range(32, 64)} == {lease_of(loop, "b0")[1]}
    kinds_recorded = Counter(d["kind"] for d in decisions(second))
    assert kinds_recorded["preempted"] == 32 and kinds_recorded["leased"] == 1

    loop.report("ex1", 3_500)
    third = loop.cycle(4_000)
    assert third.leased == third.preempted == 0


def fair_share_counts(total: int, factors: dict[str, float]) -> dict[str, int]:
    """Armada's rule, worked out here: weight = 1 / priority factor, share proportional to weight."""
    weights = {name: 1 / factor for name, factor in factors.items()}
    return {name: round(total * w / sum(weights.values())) for name, w in weights.items()}


FACTORS = {"q1": 1.0, "q2": 2.0, "q4": 4.0}


def queues_with_factors() -> tuple[QueueInfo, ...]:
    return tuple(
        queue_info({"name": name, "priority_factor": factor, "cordoned": False, "resource_limits_by_priority_class_name": {}})
        for name, factor in FACTORS.items()
    )


def test_three_queues_share_a_full_cluster_by_their_priority_factors() -> None:
    expected = fair_share_counts(70, FACTORS)
    assert expected == {"q1": 40, "q2": 20, "q4": 10}
    index = SchedulerIndex()
    for name in FACTORS:
        for i in range(70):
            index.apply(delta(f"{name}-{i:02d}", name, submitted=100 + i))
    index.apply(executor("ex1", 1_000, nodes(2, cpu=35)))

    outcome = run_cycle(index, tick(2_000, *queues_with_factors()), 1, CycleConfig())

    assert outcome.leased == 70
    assert Counter(job_id.split("-")[0] for job_id in leases(outcome)) == expected


def test_queues_arriving_on_a_cluster_one_queue_fills_get_their_share_back() -> None:
    expected = fair_share_counts(70, FACTORS)
    index = SchedulerIndex()
    for i in range(70):
        index.apply(running(delta(f"q1-{i:02d}", "q1", submitted=100 + i), f"r{i}", "ex1", f"n{i % 2}", 500))
    for name in ("q2", "q4"):
        for i in range(70):
            index.apply(delta(f"{name}-{i:02d}", name, submitted=1_000 + i))
    index.apply(holding(index, "ex1", 1_000, nodes(2, cpu=35)))

    outcome = run_cycle(index, tick(2_000, *queues_with_factors()), 1, CycleConfig())

    assert len(preempted(outcome)) == 70 - expected["q1"]
    assert Counter(job_id.split("-")[0] for job_id in leases(outcome)) == {"q2": expected["q2"], "q4": expected["q4"]}


def gang(loop: Loop, cpu: str, at: int = 1_000) -> list[str]:
    members = [f"g{i}" for i in range(4)]
    for job_id in members:
        loop.submit(job_id, "a", cpu=cpu, at=at, annotations={GANG[0]: "gang-1", GANG[1]: "4"})
    return members


def test_a_gang_is_leased_all_together() -> None:
    loop = Loop()
    members = gang(loop, cpu="10")
    loop.report("ex1", 1_500)  # 2 nodes of 32 cpu: 3 members fit on one
    outcome = loop.cycle(2_000)
    assert set(leases(outcome)) == set(members)
    assert all(loop.job(j)["state"] == "leased" for j in members)


def test_a_gang_without_room_for_every_member_is_not_leased_at_all() -> None:
    loop = Loop()
    members = gang(loop, cpu="10")
    loop.report("ex1", 1_500, nodes(2, cpu=16))  # room for two members only
    outcome = loop.cycle(2_000)
    assert outcome.leased == 0 and leases(outcome) == {}
    assert all(loop.job(j)["state"] == "queued" for j in members)
    assert outcome.records == []  # nothing decided, nothing recorded
    # with another job leased in the same cycle, the record says why the gang was not
    loop.submit("small", "b", cpu="1", at=2_100)
    loop.report("ex1", 2_500, nodes(2, cpu=16))
    again = loop.cycle(3_000)
    assert set(leases(again)) == {"small"}
    unschedulable = {d["job_id"]: d["reason"] for d in decisions(again) if d["kind"] == "unschedulable"}
    assert set(unschedulable) == set(members) and all(unschedulable.values())


def test_a_cordoned_queue_is_not_leased() -> None:
    loop = Loop()
    loop.submit("a1", "a")
    loop.submit("b1", "b")
    loop.report("ex1", 1_500)
    outcome = loop.cycle(2_000, QueueInfo("a", 1.0, cordoned=True), QueueInfo("b", 1.0))
    assert set(leases(outcome)) == {"b1"}
    assert loop.job("a1")["state"] == "queued"


def test_a_queue_missing_from_the_tick_is_not_leased() -> None:
    loop = Loop()
    loop.submit("a1", "a")
    loop.submit("c1", "c")
    loop.report("ex1", 1_500)
    outcome = loop.cycle(2_000, "a", "b")
    assert set(leases(outcome)) == {"a1"}
    assert loop.job("c1")["state"] == "queued"
    later = loop.cycle(3_000, "a", "b")
    assert leases(later) == {}


@pytest.mark.parametrize("queue, pc", [("c", PREEMPTIBLE), ("a", "retired-class")])
def test_runs_the_cycle_does_not_know_keep_their_resources(queue: str, pc: str) -> None:
    """A running job of a queue missing from the tick, or of a class no longer configured, is
    neither preempted nor overbooked: its node stays full."""
    index = SchedulerIndex()
    index.apply(running(delta("c1", queue, cpu=30, pc=pc), "run-c1", "ex1", "n0", 500))
    index.apply(delta("a1", "a", cpu=8))
    index.apply(holding(index, "ex1", 1_500, nodes(1)))
    outcome = run_cycle(index, tick(2_000, "a"), 1, CycleConfig())
    assert leases(outcome) == {} and preempted(outcome) == set()

    index.apply(executor("ex1", 1_600, nodes(2), runs={"run-c1": "c1"}))
    outcome = run_cycle(index, tick(3_000, "a"), 2, CycleConfig())
    assert {j: p["node"] for j, p in leases(outcome).items()} == {"a1": "n1"}
    assert preempted(outcome) == set()


def test_nothing_to_do_records_nothing() -> None:
    loop = Loop()
    loop.report("ex1", 1_500)
    outcome = loop.cycle(2_000)
    assert outcome.sequences == [] and outcome.commands == [] and outcome.records == []


# -- no double lease ---------------------------------------------------------------------------


def test_a_stale_queued_delta_between_cycles_does_not_lease_a_job_twice() -> None:
    index = SchedulerIndex()
    queued = delta("j1")
    index.apply(queued)
    index.apply(executor("ex1", 1_500))
    first = run_cycle(index, tick(2_000), 1, CycleConfig())
    assert set(leases(first)) == {"j1"}

    index.apply(replace(queued, priority=1.0))  # folded before the lease, read after the cycle
    index.apply(holding(index, "ex1", 2_500))
    second = run_cycle(index, tick(3_000), 2, CycleConfig())
    assert leases(second) == {} and second.leased == 0


def test_no_double_lease_while_the_fold_lags_behind_the_cycles() -> None:
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_500)
    loop.run_event("j1", "JobReprioritised", 1_600, new_priority=2.0)
    stale = list(loop.feed)
    loop.feed.clear()  # the reprioritised (still queued) delta is on its way

    first = loop.cycle(2_000, deliver=False)
    assert set(leases(first)) == {"j1"}
    confirming = list(loop.feed)
    loop.feed[:] = stale  # the stale one arrives first, the confirmation not yet
    loop.deliver()
    assert loop.index.jobs["j1"].expect == LEASE

    second = loop.cycle(3_000, deliver=False)
    assert "JobLeased" not in kinds(second, "j1")
    loop.feed[:0] = confirming
    loop.deliver()
    assert loop.index.jobs["j1"].delta.run_id == leases(first)["j1"]["run_id"]
    third = loop.cycle(4_000)
    assert "JobLeased" not in kinds(third, "j1")
    assert len(loop.job("j1")["runs"]) == 1


# -- requests ----------------------------------------------------------------------------------


def test_cancel_requests_end_queued_and_running_jobs_which_are_never_leased_again() -> None:
    loop = Loop()
    loop.submit("run1")
    loop.report("ex1", 1_500)
    loop.cycle(2_000)
    loop.run_event("run1", "JobRunRunning", 2_200, run_id=loop.job("run1")["runs"][0]["run_id"], node="n0")
    loop.submit("q1", at=2_300)
    loop.run_event("q1", "JobCancelRequested", 2_400, reason="no longer needed")
    loop.run_event("run1", "JobCancelRequested", 2_400, reason="no longer needed")
    loop.report("ex1", 2_500)

    outcome = loop.cycle(3_000)

    cancelled = {j: payload for j, kind, payload in events(outcome) if kind == "JobCancelled"}
    assert set(cancelled) == {"run1", "q1"}
    assert cancelled["q1"]["run_id"] is None
    assert cancelled["run1"]["run_id"] == loop.job("run1")["runs"][0]["run_id"]
    assert leases(outcome) == {}
    assert loop.job("q1")["state"] == loop.job("run1")["state"] == "cancelled"
    assert loop.job("q1")["reason"] == loop.job("run1")["reason"] == "cancelled on request: no longer needed"
    assert "q1" not in loop.index.jobs and "run1" not in loop.index.jobs
    stop = [c for c in loop.commands if c["kind"] == "cancel_run"]
    assert [(c["job_id"], c["executor"]) for c in stop] == [("run1", "ex1")]
    for at in (4_000, 5_000):
        loop.report("ex1", at - 500)
        assert leases(loop.cycle(at)) == {}


def test_a_cancel_request_wins_over_a_lease_in_the_same_cycle() -> None:
    index = SchedulerIndex()
    index.apply(delta("j1", cancel_requested=True))
    index.apply(executor("ex1", 1_500))
    outcome = run_cycle(index, tick(2_000), 1, CycleConfig())
    assert kinds(outcome, "j1") == ["JobCancelled"]
    assert run_cycle(index, tick(3_000), 2, CycleConfig()).sequences == []


def test_a_preempt_request_preempts_a_running_job() -> None:
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_500)
    loop.cycle(2_000)
    run_id = loop.job("j1")["runs"][0]["run_id"]
    loop.run_event("j1", "JobRunRunning", 2_200, run_id=run_id, node="n0")
    loop.run_event("j1", "JobPreemptRequested", 2_300, reason="maintenance")
    loop.report("ex1", 2_500)

    outcome = loop.cycle(3_000)

    [(job_id, kind, payload)] = events(outcome)
    assert (job_id, kind, payload["run_id"]) == ("j1", "JobPreempted", run_id)
    assert loop.job("j1")["state"] == "preempted"
    assert [(c["kind"], c["run_id"], c["executor"]) for c in loop.commands if c["kind"] != "lease"] == [("preempt_run", run_id, "ex1")]


def test_a_job_set_cancel_ends_every_job_of_the_set_even_those_just_leased() -> None:
    loop = Loop()
    loop.submit("s1", job_set="s")
    loop.submit("s2", job_set="s")
    loop.submit("t1", job_set="t")
    loop.report("ex1", 1_500)
    loop.cycle(2_000, deliver=False)  # leases all three; the fold's confirmations are on their way
    confirmations = list(loop.feed)
    loop.feed.clear()
    loop.event(None, "JobCancelRequested", 2_200, job_set="s", reason="set done")
    loop.feed += confirmations  # read after the job-set action
    loop.deliver()
    loop.report("ex1", 2_500)

    outcome = loop.cycle(3_000)

    assert {j for j, kind, _ in events(outcome) if kind == "JobCancelled"} == {"s1", "s2"}
    assert loop.job("s1")["state"] == loop.job("s2")["state"] == "cancelled"
    assert loop.job("s1")["reason"] == loop.job("s2")["reason"] == "cancelled on request: set done"
    assert loop.job("t1")["state"] == "leased"


def test_a_job_set_reprioritisation_is_announced_once_per_job() -> None:
    index = SchedulerIndex()
    for job_id in ("j1", "j2"):
        index.apply(delta(job_id, cpu=64))  # too big to lease: they stay queued
    index.apply(delta("k1", job_set="other", cpu=64))
    index.apply(JobSetAction("a", "s", "reprioritise", new_priority=5.0))
    index.apply(executor("ex1", 1_500))
    first = run_cycle(index, tick(2_000), 1, CycleConfig())
    announced = {j: payload for j, kind, payload in events(first) if kind == "JobReprioritised"}
    assert announced == {"j1": {"new_priority": 5.0}, "j2": {"new_priority": 5.0}}
    second = run_cycle(index, tick(3_000), 2, CycleConfig())
    assert [kind for _, kind, _ in events(second)] == []


# -- the lease lifecycle -----------------------------------------------------------------------


def test_the_leases_of_a_silent_executor_expire_and_the_jobs_go_elsewhere() -> None:
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_000, nodes(1))
    loop.cycle(2_000)
    assert lease_of(loop, "j1") == ("ex1", "n0")
    first_run = loop.job("j1")["runs"][0]["run_id"]
    loop.report("ex2", 5_000, nodes(1, prefix="m"))
    for at in (4_000, 7_000):
        assert loop.cycle(at).sequences == []

    # Four cycles without a report from ex1, but 10.5 s after its last report: within the timeout
    assert loop.cycle(11_000).sequences == []
    outcome = loop.cycle(11_001)

    assert kinds(outcome, "j1")[:2] == ["JobRunFailed", "JobRequeued"]
    failed = next(p for j, kind, p in events(outcome) if kind == "JobRunFailed")
    assert (failed["category"], failed["run_id"], failed["retryable"]) == ("lease_expired", first_run, True)
    requeued = next(p for j, kind, p in events(outcome) if kind == "JobRequeued")
    assert requeued["run_id"] == first_run
    loop.report("ex2", 11_500, nodes(1, prefix="m"))
    loop.cycle(12_000)  # leased again by this cycle at the latest
    job = loop.job("j1")
    assert [(r["executor"], r["state"]) for r in job["runs"]] == [("ex1", "lease_expired"), ("ex2", "leased")]
    assert job["state"] == "leased"
    for at in (13_000, 14_000):
        loop.report("ex2", at - 500, nodes(1, prefix="m"))
        assert loop.cycle(at).sequences == []


def test_one_long_cycle_does_not_expire_leases_whose_reports_queued_behind_it() -> None:
    """A cycle that blocks the worker for longer than the timeout delays the reports too."""
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_000, nodes(1))
    loop.cycle(2_000)
    assert lease_of(loop, "j1") == ("ex1", "n0")
    for at in (14_000, 15_000, 16_000):  # 13 s after the last report, but only 3 cycles without one
        assert loop.cycle(at).sequences == []
    assert kinds(loop.cycle(17_000), "j1")[:2] == ["JobRunFailed", "JobRequeued"]


def test_a_job_of_a_silent_executor_with_nowhere_else_to_go_waits_queued() -> None:
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_000, nodes(1))
    loop.cycle(2_000)
    for at in (5_000, 8_000, 11_000):
        assert loop.cycle(at).sequences == []
    outcome = loop.cycle(20_000)
    assert kinds(outcome, "j1") == ["JobRunFailed", "JobRequeued"]
    assert loop.job("j1")["state"] == "queued"
    assert loop.cycle(21_000).sequences == []
    # ex1 comes back, still holding the expired run: it is told to stop it, then the job is leased anew
    old_run = loop.job("j1")["runs"][0]["run_id"]
    loop.report("ex1", 21_500, nodes(1), extra={old_run: "j1"})
    back = loop.cycle(22_000)
    assert [(c["kind"], c["run_id"]) for c in back.commands] == [("cancel_run", old_run)]
    assert set(leases(back)) == {"j1"}


def test_a_returned_run_is_requeued_avoiding_its_node() -> None:
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_000)
    loop.cycle(2_000)
    first_node = lease_of(loop, "j1")[1]
    loop.return_run("j1", 2_100)
    loop.report("ex1", 2_500)

    outcome = loop.cycle(3_000)

    requeued = next(p for j, kind, p in events(outcome) if kind == "JobRequeued")
    assert requeued["avoid_nodes"] == [f"ex1/{first_node}"]
    loop.report("ex1", 3_500)
    loop.cycle(4_000)
    job = loop.job("j1")
    assert len(job["runs"]) == 2 and job["state"] == "leased"
    assert job["runs"][1]["node"] != first_node


def test_a_job_whose_runs_keep_coming_back_fails_after_max_attempts() -> None:
    loop = Loop(CycleConfig(max_attempts=3))
    loop.submit("j1")
    loop.report("ex1", 1_000, nodes(4))
    loop.cycle(2_000)
    used = []
    for attempt in range(3):
        at = 3_000 + 1_000 * attempt
        used.append(lease_of(loop, "j1")[1])
        loop.return_run("j1", at - 900)
        loop.report("ex1", at - 500, nodes(4))
        outcome = loop.cycle(at)
        if attempt < 2:
            assert "JobRequeued" in kinds(outcome, "j1") and "JobFailed" not in kinds(outcome, "j1")
            assert lease_of(loop, "j1")[1] not in used  # leased again, on a node it was not returned from
    assert kinds(outcome, "j1") == ["JobFailed"]
    failed = next(p for j, kind, p in events(outcome) if kind == "JobFailed")
    assert failed["reason"] == "max_runs_exceeded"
    assert loop.job("j1")["state"] == "failed" and len(loop.job("j1")["runs"]) == 3
    assert "j1" not in loop.index.jobs


def test_a_run_the_executor_no_longer_reports_is_taken_back_after_the_grace() -> None:
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_000)
    loop.cycle(2_000)
    run_id = loop.job("j1")["runs"][0]["run_id"]
    node = lease_of(loop, "j1")[1]

    loop.report("ex1", 61_000, drop=(run_id,))  # 59 s after the lease: the command may still be on its way
    assert loop.cycle(61_500).sequences == []
    loop.report("ex1", 62_500, drop=(run_id,))
    outcome = loop.cycle(63_000)

    failed = next(p for j, kind, p in events(outcome) if kind == "JobRunFailed")
    assert (failed["category"], failed["run_id"]) == ("lease_returned", run_id)
    requeued = next(p for j, kind, p in events(outcome) if kind == "JobRequeued")
    assert requeued["avoid_nodes"] == [f"ex1/{node}"]
    loop.report("ex1", 63_500)
    loop.cycle(64_000)
    assert lease_of(loop, "j1")[1] != node


def test_a_lease_the_fold_accepted_late_has_its_grace_from_then() -> None:
    """Under load the fold accepts a lease (and sends its command) long after the cycle."""
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_000)
    loop.cycle(2_000, deliver=False)
    confirmation = list(loop.feed)
    loop.feed.clear()
    run_id = loop.index.jobs["j1"].delta.run_id
    assert run_id is not None
    for at in (30_000, 65_000, 70_000):  # the executor has not heard of the run: the fold lags
        loop.report("ex1", at, drop=(run_id,))
        assert loop.cycle(at + 500).sequences == []
    loop.feed[:0] = confirmation
    loop.deliver()
    loop.report("ex1", 120_000, drop=(run_id,))
    assert loop.cycle(120_500).sequences == []
    loop.report("ex1", 130_500, drop=(run_id,))
    outcome = loop.cycle(131_000)
    failed = next(p for j, kind, p in events(outcome) if kind == "JobRunFailed")
    assert (failed["category"], failed["run_id"]) == ("lease_returned", run_id)


def test_orphan_runs_are_cancelled_once() -> None:
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_000)
    loop.cycle(2_000)
    current = loop.job("j1")["runs"][0]["run_id"]
    state = loop.report("ex1", 2_500, extra={"stale-run": "j1", "ghost-run": "ghost"})
    assert set(state.active) == {current, "stale-run", "ghost-run"}

    outcome = loop.cycle(3_000)

    orphans = sorted((c["run_id"], c["job_id"], c["executor"], c["kind"]) for c in outcome.commands)
    assert orphans == [("ghost-run", "ghost", "ex1", "cancel_run"), ("stale-run", "j1", "ex1", "cancel_run")]
    assert outcome.records  # the cycle is recorded when it sent commands
    loop.report("ex1", 3_500, extra={"stale-run": "j1", "ghost-run": "ghost"})
    assert loop.cycle(4_000).commands == []


def test_the_run_of_a_job_ended_in_an_earlier_cycle_is_cancelled_if_still_reported() -> None:
    index = SchedulerIndex()
    index.apply(running(delta("j1", cancel_requested=True), "run-1", "ex1", "n0", 500))
    index.apply(executor("ex1", 1_500, runs={"run-1": "j1"}))
    first = run_cycle(index, tick(2_000), 1, CycleConfig())
    assert kinds(first, "j1") == ["JobCancelled"] and first.commands == []  # the fold sends the cancel_run
    # the terminal delta is late and the executor still holds the run
    index.apply(executor("ex1", 2_500, runs={"run-1": "j1"}))
    second = run_cycle(index, tick(3_000), 2, CycleConfig())
    assert [(c["kind"], c["run_id"]) for c in second.commands] == [("cancel_run", "run-1")]
    assert second.sequences == []


def finished(loop: Loop, job_id: str, at: int) -> str:
    """The executor ends the job's run (it succeeded); returns the run's id."""
    run_id = loop.job(job_id)["runs"][-1]["run_id"]
    loop.run_event(job_id, "JobRunSucceeded", at, run_id=run_id)
    loop.run_event(job_id, "JobSucceeded", at, run_id=run_id)
    loop.deliver()
    return run_id


def cancel_runs(outcome: CycleOutcome) -> list[tuple[str, str]]:
    return [(c["run_id"], c["job_id"]) for c in outcome.commands if c["kind"] == "cancel_run"]


def test_a_run_that_ended_after_its_executor_listed_it_gets_no_cancel_run() -> None:
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_000)
    loop.cycle(2_000)
    listed = loop.report("ex1", 2_500)  # the executor's runs as the scheduler has them for the next few seconds
    run_id = finished(loop, "j1", 3_000)
    assert run_id in listed.active and "j1" not in loop.index.jobs
    assert [cancel_runs(loop.cycle(at)) for at in (3_500, 4_500)] == [[], []]
    # A later state that still lists it active: the executor runs it on, a true orphan, told to stop once.
    loop.report("ex1", 5_000, extra={run_id: "j1"})
    assert cancel_runs(loop.cycle(5_500)) == [(run_id, "j1")]
    loop.report("ex1", 6_000, extra={run_id: "j1"})
    assert cancel_runs(loop.cycle(6_500)) == []


def test_without_orphans_in_later_reports_an_ended_run_still_listed_is_cancelled_as_before() -> None:
    """The rule of the releases before the setting, which their logs are audited with."""
    loop = Loop(config=CycleConfig(orphans_in_later_reports=False))
    loop.submit("j1")
    loop.report("ex1", 1_000)
    loop.cycle(2_000)
    loop.report("ex1", 2_500)
    run_id = finished(loop, "j1", 3_000)
    assert [cancel_runs(loop.cycle(at)) for at in (3_500, 4_500)] == [[(run_id, "j1")], []]


def test_the_runs_a_state_lists_unheld_are_kept_with_it_in_the_table() -> None:
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_000)
    loop.cycle(2_000)
    current = loop.job("j1")["runs"][0]["run_id"]
    loop.report("ex1", 2_500, extra={"ghost-run": "ghost"})
    finished(loop, "j1", 3_000)
    assert loop.index.unheld_runs == {"ex1": ("ghost-run",)}
    rebuilt = SchedulerIndex()
    rebuilt.load((key, value) for key in loop.index.keys() if (value := loop.index.dump(key)) is not None)
    assert rebuilt.unheld_runs == loop.index.unheld_runs
    # A row stored before they were kept: every active run may be an orphan, as then.
    stored = json.loads(loop.index.dump("e:ex1") or b"")
    del stored["o"]
    rebuilt.load([("e:ex1", json.dumps(stored).encode())])
    assert set(rebuilt.unheld_runs["ex1"]) == {current, "ghost-run"}


# -- ids and determinism -----------------------------------------------------------------------


def busy_index() -> SchedulerIndex:
    index = SchedulerIndex()
    for i in range(6):
        index.apply(delta(f"a{i}", "a", cpu=8, submitted=100 + i))
        index.apply(delta(f"b{i}", "b", cpu=8, submitted=200 + i, pc=DEFAULT))
    index.apply(running(delta("r1", "a", cpu=8), "run-r1", "ex1", "n0", 500))
    index.apply(
        replace(
            running(delta("r2", "a"), "run-r2", "ex1", "n1", 500),
            run_state="lease_returned",
            state="leased",
            returned_runs=1,
            avoid_nodes=("ex1/n1",),
        )
    )
    index.apply(delta("c1", "b", cancel_requested=True))
    index.apply(executor("ex1", 1_500, runs={"run-r1": "r1", "orphan": "zz"}))
    index.apply(executor("ex2", 1_500, nodes(1, prefix="m")))
    return index


def test_the_same_state_tick_and_offset_plan_the_same_cycle() -> None:
    one, two = busy_index(), busy_index()
    a = run_cycle(one, tick(2_000), 42, CycleConfig())
    b = run_cycle(two, tick(2_000), 42, CycleConfig())
    assert a.leased > 0 and a.requeued == 1 and a.ended == 1 and len(a.commands) == 1
    assert a.sequences == b.sequences
    assert a.commands == b.commands
    assert a.records == b.records
    assert a == b


def test_another_offset_gives_other_event_ids_but_the_same_run_ids() -> None:
    a = run_cycle(busy_index(), tick(2_000), 42, CycleConfig())
    b = run_cycle(busy_index(), tick(2_000), 43, CycleConfig())
    assert {j: p["node"] for j, p in leases(a).items()} == {j: p["node"] for j, p in leases(b).items()}
    assert {j: p["run_id"] for j, p in leases(a).items()} == {j: p["run_id"] for j, p in leases(b).items()}
    assert not {e["event_id"] for _, e in job_events(a)} & {e["event_id"] for _, e in job_events(b)}
    assert a.cycle_id != b.cycle_id


def job_events(outcome: CycleOutcome) -> list[tuple[str | None, dict[str, Any]]]:
    return [(e["job_id"], e) for seq in outcome.sequences for e in seq["events"]]


def test_a_run_id_is_the_job_id_and_its_attempt_number() -> None:
    loop = Loop()
    loop.submit("j1")
    loop.report("ex1", 1_000)
    assert leases(loop.cycle(2_000))["j1"]["run_id"] == run_id_for("j1", 1)
    loop.return_run("j1", 2_100)
    loop.report("ex1", 2_500)
    again = loop.cycle(3_000)
    assert kinds(again, "j1") == ["JobRequeued", "JobLeased"]
    assert leases(again)["j1"]["run_id"] == run_id_for("j1", 2)
    assert [run["run_id"] for run in loop.job("j1")["runs"]] == [run_id_for("j1", 1), run_id_for("j1", 2)]
    assert [c["run_id"] for c in loop.commands if c["kind"] == "lease"] == [run_id_for("j1", 1), run_id_for("j1", 2)]


@pytest.mark.parametrize("same_offset", [True, False], ids=["same offset", "another offset"])
def test_a_cycle_run_again_after_a_restart_never_leases_one_run_id_to_two_jobs(same_offset: bool) -> None:
    """Issue 21: a worker restarted behind its committed feed offset runs a tick again over an
    index that has moved on (it already holds that tick's lease of A, and B queued since), so
    the second run decides differently: B on the other node. A run id drawn from the tick's
    seed gave B the run id A holds; a run id derived from the job cannot."""
    loop = Loop()
    loop.submit("A", cpu="32", at=1_000)
    loop.report("ex1", 1_500)  # two nodes of 32 cpus
    first = loop.cycle(2_000)
    assert set(leases(first)) == {"A"}
    loop.submit("B", cpu="32", at=2_100)

    loop.restart()
    again = loop.cycle(2_000, offset=first.seed if same_offset else first.seed + 7)

    assert set(leases(again)) == {"B"}
    assert leases(again)["B"]["node"] != leases(first)["A"]["node"]
    owners: dict[str, set[str]] = defaultdict(set)
    for job_id in ("A", "B"):
        for run in loop.job(job_id)["runs"]:
            owners[run["run_id"]].add(job_id)
    for command in loop.commands:
        owners[command["run_id"]].add(command["job_id"])
    assert [run for run, jobs in owners.items() if len(jobs) > 1] == [], "a run id leased to two jobs"
    assert owners == {run_id_for("A", 1): {"A"}, run_id_for("B", 1): {"B"}}


def test_a_cycle_run_again_over_a_stale_index_leases_a_job_under_its_own_run_id_only() -> None:
    """Run again over an index that has not seen its own lease yet, a cycle leases the same job
    again, maybe elsewhere: under the same run id, which the fold recognises and ignores, so the
    executor is sent the first lease only."""
    loop = Loop()
    loop.submit("A", cpu="32", at=1_000)
    loop.report("ex1", 1_500)
    before = {key: value for key in loop.index.keys() if (value := loop.index.dump(key)) is not None}
    first = loop.cycle(2_000)
    loop.index = SchedulerIndex()
    loop.index.load(sorted(before.items()))

    again = loop.cycle(2_000, offset=first.seed + 1)

    assert leases(again)["A"]["run_id"] == leases(first)["A"]["run_id"] == run_id_for("A", 1)
    assert [run["run_id"] for run in loop.job("A")["runs"]] == [run_id_for("A", 1)]
    assert [(c["run_id"], c["node"]) for c in loop.commands if c["kind"] == "lease"] == [(run_id_for("A", 1), leases(first)["A"]["node"])]


def all_ids(outcome) -> list[str]:
    ids = [outcome.cycle_id]
    ids += [e["event_id"] for seq in outcome.sequences for e in seq["events"]]
    ids += [e["event_id"] for record in outcome.records for e in record["events"]]
    ids += [p["run_id"] for p in leases(outcome).values()]
    ids += [c["command_id"] for c in outcome.commands]
    return ids


def test_ids_never_collide_across_cycles() -> None:
    loop = Loop()
    for i in range(40):
        loop.submit(f"j{i:02d}", "ab"[i % 2], cpu="4", at=1_000 + i)
    seen: list[str] = []
    for n, at in enumerate((2_000, 2_000, 3_000, 3_000, 4_000, 5_000)):
        loop.report("ex1", at - 100, extra={f"orphan-{n}": "nobody"})
        if n == 2:  # make room: some runs come back, some jobs finish
            for i in range(0, 40, 3):
                if loop.job(f"j{i:02d}")["state"] == "leased":
                    loop.return_run(f"j{i:02d}", at - 50)
        outcome = loop.cycle(at)
        seen += all_ids(outcome)
    assert len(seen) > 60
    duplicated = [i for i, count in Counter(seen).items() if count > 1]
    assert duplicated == []


@pytest.mark.parametrize("offset", [0, 1, 2**40])
def test_the_cycle_record_names_its_decisions(offset: int) -> None:
    index = SchedulerIndex()
    index.apply(delta("small"))
    index.apply(delta("huge", cpu=1_000))
    index.apply(executor("ex1", 1_500))
    outcome = run_cycle(index, tick(2_000), offset, CycleConfig())
    assert outcome.seed == offset
    [record] = outcome.records
    [event] = record["events"]
    kind, payload = event["payload"]
    assert kind == "flotilla.SchedulingCycle" and event["job_id"] is None
    assert payload["cycle_id"] == outcome.cycle_id and payload["cycle_time"] == 2_000 and payload["seed"] == offset
    by_job = {d["job_id"]: d for d in payload["decisions"]}
    assert by_job["small"]["kind"] == "leased" and by_job["small"]["executor"] == "ex1"
    assert by_job["huge"]["kind"] == "unschedulable" and by_job["huge"]["reason"]


def test_a_large_cycle_is_recorded_in_records_of_bounded_size() -> None:
    """5,000 leases in one cycle: one record would be about half a megabyte and grow without bound."""
    index = SchedulerIndex()
    for i in range(5_000):
        index.apply(delta(f"j{i:05}", cpu=1))
    index.apply(executor("ex1", 1_500, nodes(count=200, cpu=32)))
    outcome = run_cycle(index, tick(2_000, "a"), 7, CycleConfig())
    assert outcome.leased == 5_000
    assert len(outcome.records) == 3
    assert {r["events"][0]["payload"][1]["cycle_id"] for r in outcome.records} == {outcome.cycle_id}
    assert all(len(r["events"][0]["payload"][1]["decisions"]) <= MAX_DECISIONS_PER_RECORD for r in outcome.records)
    assert [d["job_id"] for d in decisions(outcome)] == sorted(f"j{i:05}" for i in range(5_000))


def test_the_configured_token_bucket_caps_the_leases_of_one_cycle() -> None:
    """The configuration file's token bucket: a backlog is leased in steps of the burst, then at the rate."""
    config = parse({"scheduling": {"maximumSchedulingRate": 50.0, "maximumSchedulingBurst": 100}}).cycle
    index = SchedulerIndex()
    for i in range(500):
        index.apply(delta(f"j{i:03}", cpu=1))
    index.apply(executor("ex1", 1_500, nodes(count=20, cpu=32)))
    assert run_cycle(index, tick(2_000, "a"), 1, config).leased == 100
    assert run_cycle(index, tick(3_000, "a"), 2, config).leased == 50


# -- the configuration file's settings in a cycle ------------------------------------------------


def test_a_fail_fast_job_whose_run_comes_back_fails_at_once() -> None:
    loop = Loop(CycleConfig(max_attempts=3))
    loop.submit("lone")
    loop.submit("fast", annotations={"armadaproject.io/failFast": "true"})
    loop.report("ex1", 1_000, nodes(4))
    loop.cycle(2_000)
    loop.return_run("lone", 2_100)
    loop.return_run("fast", 2_100)
    loop.report("ex1", 2_500, nodes(4))
    outcome = loop.cycle(3_000)
    assert "JobRequeued" in kinds(outcome, "lone")
    assert kinds(outcome, "fast") == ["JobFailed"]
    failed = next(p for j, kind, p in events(outcome) if kind == "JobFailed")
    assert failed["reason"] == "max_runs_exceeded" and "fail-fast" in failed["message"]
    assert loop.job("fast")["state"] == "failed" and len(loop.job("fast")["runs"]) == 1


def test_every_gang_member_is_fail_fast() -> None:
    """Submission marks gang members fail-fast: one member is never re-run alone."""
    loop = Loop()
    gang = {GANG[0]: "g", GANG[1]: "2"}
    loop.submit("g0", annotations=gang)
    loop.submit("g1", annotations=gang)
    loop.report("ex1", 1_000, nodes(4))
    assert loop.cycle(2_000).leased == 2
    loop.return_run("g0", 2_100)
    loop.report("ex1", 2_500, nodes(4))
    outcome = loop.cycle(3_000)
    assert kinds(outcome, "g0") == ["JobFailed"] and loop.job("g1")["state"] == "leased"


def test_each_pool_is_scheduled_with_its_own_settings() -> None:
    """The per-queue class limit of the pool: a queue may take a quarter of pool small's cpus, all of big's."""
    configuration = parse(
        {
            "scheduling": {
                "priorityClasses": {
                    "armada-default": {"priority": 1000},
                    "armada-preemptible": {
                        "priority": 1000,
                        "preemptible": True,
                        "maximumResourceFractionPerQueueByPool": {"small": {"cpu": 0.25}},
                    },
                }
            }
        }
    )
    loop = Loop(configuration.cycle)
    for i in range(40):
        loop.submit(f"j{i:02d}", cpu="1", at=1_000 + i)
    loop.report("small-ex", 1_500, nodes(1, cpu=16, prefix="s"), pool="small")
    loop.report("big-ex", 1_500, nodes(1, cpu=16, prefix="b"), pool="big")
    loop.cycle(2_000)
    by_executor = Counter(lease_of(loop, f"j{i:02d}")[0] for i in range(40) if loop.job(f"j{i:02d}")["runs"])
    assert by_executor == {"big-ex": 16, "small-ex": 4}


def test_a_stale_executor_keeps_its_leases_but_gets_no_new_job() -> None:
    loop = Loop(CycleConfig(stale_executor_ms=5_000, executor_timeout_ms=60_000, missed_cycles=0))
    loop.submit("first")
    loop.report("ex1", 1_000)
    loop.cycle(2_000)
    loop.submit("second", at=3_000)
    outcome = loop.cycle(8_000)  # 7 s since ex1 was heard: stale, not expired
    assert outcome.leased == 0 and outcome.requeued == 0
    assert loop.job("first")["state"] == "leased" and loop.job("second")["state"] == "queued"
    loop.report("ex1", 8_500)
    assert set(leases(loop.cycle(9_000))) == {"second"}


def test_the_jobs_of_a_stale_executor_count_in_their_queues_share_of_the_pool() -> None:
    """Armada counts a stale executor's jobs in its queues' allocation and demand (its node db holds
    the fresh executors' nodes only): queue a runs 64 cpus on stale ex1, so queue b takes the 32 cpus
    of fresh ex2 before a gets more, and none of a's jobs is preempted though a is far above its share."""
    loop = Loop(CycleConfig(stale_executor_ms=5_000, executor_timeout_ms=60_000, missed_cycles=0))
    for i in range(4):
        loop.submit(f"a{i}", cpu="16")
    loop.report("ex1", 1_000)
    assert loop.cycle(2_000).leased == 4
    loop.report("ex1", 2_500)
    loop.cycle(2_600)  # a cycle since ex1's last report: it may go stale
    for queue in ("a", "b"):
        loop.submit(f"{queue}-new0", queue=queue, cpu="16", at=3_000)
        loop.submit(f"{queue}-new1", queue=queue, cpu="16", at=3_001)
    loop.report("ex2", 8_000, nodes(1))
    # The same cycle over the index rebuilt from its table (a restart, a replay) decides the same.
    rebuilt = SchedulerIndex()
    rebuilt.load(sorted((key, value) for key in loop.index.keys() if (value := loop.index.dump(key)) is not None))
    again = run_cycle(rebuilt, tick(9_000), loop.offset + 1, loop.config)
    outcome = loop.cycle(9_000)  # 6.5 s since ex1 was heard: stale, not expired
    assert set(leases(outcome)) == {"b-new0", "b-new1"} and not preempted(outcome)
    assert (again.sequences, again.records) == (outcome.sequences, outcome.records)
    [pool] = outcome.records[0]["events"][0]["payload"][1]["pools"]
    shares = {queue["queue"]: queue for queue in pool["queues"]}
    assert shares["a"]["allocation"]["cpu"] == 64 * CPU and shares["a"]["running"] == 0
    assert pool["capacity"]["cpu"] == 32 * CPU  # the fresh nodes only: the stale ones take no job


def test_queues_keep_their_rate_limit_buckets_while_another_pool_is_scheduled() -> None:
    config = parse({"scheduling": {"maximumPerQueueSchedulingRate": 1, "maximumPerQueueSchedulingBurst": 2}}).cycle
    loop = Loop(config)
    loop.submit("j0", at=1_000)
    loop.submit("j1", at=1_001)
    loop.report("ex1", 1_500, pool="one")
    loop.report("ex2", 1_500, nodes(2, prefix="m"), pool="two")
    assert loop.cycle(2_000).leased == 2  # the burst, in pool one; queue a has no job left for pool two
    loop.submit("j2", at=2_100)
    loop.submit("j3", at=2_101)
    assert loop.cycle(2_500).leased == 0, "half a token since the burst was spent: pool two's cycle must not have refilled it"
    assert loop.cycle(3_000).leased == 1


def test_every_cycle_record_carries_the_configuration_hash() -> None:
    configuration = parse({"scheduling": {"maxRetries": 5}})
    loop = Loop(configuration.cycle)
    loop.submit("j1")
    loop.report("ex1", 1_000)
    outcome = loop.cycle(2_000)
    assert outcome.records
    assert {r["events"][0]["payload"][1]["config_hash"] for r in outcome.records} == {configuration.hash}


def test_a_job_running_away_is_displaced_by_a_home_job_of_the_same_class_priority() -> None:
    """Away on a gpu node it does not tolerate, a job holds the node at its away priority (500),
    so a job of priority 1000 that tolerates the node displaces it, a cycle later as on the log."""
    gpu = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
    configuration = parse(
        {
            "scheduling": {
                "wellKnownNodeTypes": [{"name": "gpu", "taints": [gpu]}],
                "priorityClasses": {
                    "armada-default": {"priority": 1000},
                    "armada-preemptible": {"priority": 1000, "preemptible": True},
                    "away": {"priority": 1000, "preemptible": True, "awayNodeTypes": [{"priority": 500, "wellKnownNodeTypeName": "gpu"}]},
                },
            },
            "submission": {"allowedPriorityClassNames": {"armada-default": True, "armada-preemptible": True, "away": True}},
        }
    )
    loop = Loop(configuration.cycle, policy=configuration.policy)
    tainted = (replace(nodes(1, cpu=8)[0], taints=(gpu,)),)
    loop.submit("visitor", cpu="8", pc="away")
    loop.report("ex1", 1_000, tainted)
    first = loop.cycle(2_000)
    assert leases(first)["visitor"]["scheduled_at_priority"] == 500
    loop.submit("owner", cpu="8", at=2_100, tolerations=[gpu])
    loop.report("ex1", 2_500, tainted)
    second = loop.cycle(3_000)
    assert preempted(second) == {"visitor"} and set(leases(second)) == {"owner"}


# -- the lifecycle walks busy jobs only ----------------------------------------------------------


class EveryJob(Cycle):
    """The lifecycle as it was: every indexed job in id order, the ended ones skipped."""

    def lifecycle(self) -> None:
        for name in list(self.index.quiet):  # nothing was found quiet before
            self.index.unquiet(name, None)
        self.index.busy = {job_id for job_id, entry in self.index.jobs.items() if entry.expect != END}
        super().lifecycle()
        self.index.busy = busy_jobs(self.index)


def busy_jobs(index: SchedulerIndex) -> set[str]:
    return {job_id for job_id, entry in index.jobs.items() if entry.busy}


job_changes = st.lists(
    st.tuples(
        st.integers(0, 11),  # job
        st.sampled_from(["queued", "running", "returned", "expired", "cancel", "preempt", "reprioritise", "succeeded"]),
        st.sampled_from(["ex1", "ex2"]),
    ),
    max_size=40,
)


# Before cycle N (0..4), executor ex1 or ex2 reports again, no longer holding the runs of some jobs.
reports = st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["ex1", "ex2"]), st.sets(st.integers(0, 11))), max_size=4)


@settings(max_examples=150, deadline=None)
@given(changes=job_changes, held=st.sets(st.tuples(st.integers(0, 11), st.integers(1, 2))), late=st.booleans(), later=reports)
def test_walking_busy_jobs_decides_what_walking_every_job_did(
    changes: list[tuple[int, str, str]], held: set[tuple[int, int]], late: bool, later: list[tuple[int, str, set[int]]]
) -> None:
    """Same events (ids included), commands, records, changed keys and index, on indexes built from
    random deltas and job-set actions, with executors holding some runs, dropping some in later
    reports, or no longer heard from: the walk skips busy jobs found quiet by an earlier cycle."""
    index = SchedulerIndex()
    for number, change, where in changes:
        job = delta(f"j{number:02d}", job_set="s" if number % 2 else "t", submitted=100 + number)
        if change == "queued":
            index.apply(job)
        elif change == "running":
            index.apply(running(job, f"j{number:02d}-1", where, "n0", 500))
        elif change in ("returned", "expired"):
            state = "lease_returned" if change == "returned" else "lease_expired"
            index.apply(replace(running(job, f"j{number:02d}-1", where, "n0", 500), run_state=state, returned_runs=1))
        elif change == "cancel":
            index.apply(JobSetAction("a", job.job_set_id, "cancel", reason="stop", event_id=f"c{number}", time=600))
        elif change == "preempt":
            index.apply(replace(running(job, f"j{number:02d}-1", where, "n0", 500), preempt_requested=True))
        elif change == "reprioritise":
            index.apply(JobSetAction("a", job.job_set_id, "reprioritise", new_priority=float(number), event_id=f"p{number}", time=600))
        else:
            index.apply(replace(job, state="succeeded"))
        assert index.busy == busy_jobs(index)
    runs = {f"j{n:02d}-{attempt}": f"j{n:02d}" for n, attempt in held}  # attempt 2: never the job's run, an orphan
    for name in ("ex1", "ex2"):
        index.apply(executor(name, time=60_000 if late else 1_000, runs=runs))
    twin = copy.deepcopy(index)
    config = CycleConfig(missing_run_grace_ms=0)
    for number in range(5):  # without reports, the executors stop being live after a few cycles
        for at, name, dropped in later:
            if at == number:
                kept = {run_id: job_id for run_id, job_id in runs.items() if int(job_id[1:]) not in dropped}
                for built in (index, twin):
                    built.apply(executor(name, time=70_000 + number * 10_000 - 500, runs=kept))
        ours = Cycle(index, tick(70_000 + number * 10_000), 7 + number, config).run()
        theirs = EveryJob(twin, tick(70_000 + number * 10_000), 7 + number, config).run()
        for made in ("sequences", "commands", "records", "changed"):
            assert getattr(ours, made) == getattr(theirs, made), made
        assert {key: index.dump(key) for key in index.keys()} == {key: twin.dump(key) for key in twin.keys()}
        assert index.busy == busy_jobs(index)
