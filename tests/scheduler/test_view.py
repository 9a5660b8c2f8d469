"""What the scheduling worker shows of a cycle: shares and allocation per queue, why jobs wait, its executors."""

from __future__ import annotations

from dataclasses import replace

from streams.scheduler.algorithm import reasons
from streams.scheduler.algorithm.model import CycleInput, CycleResult, LimiterState, PreemptedJob, Unscheduled
from streams.scheduler.config import CycleConfig
from streams.scheduler.cycle import run_cycle
from streams.scheduler.feed import ExecutorSettings
from streams.scheduler.index import SchedulerIndex
from streams.scheduler.view import ClusterView
from tests.kit.quantities import CPU, GI
from tests.kit.scheduler import delta, executor, nodes, running, tick


def test_the_cycle_observer_shows_each_queues_shares_allocation_and_why_jobs_wait() -> None:
    index = SchedulerIndex()
    for i in range(3):
        index.apply(delta(f"a-{i}", "a", cpu=8, submitted=100 + i))
    index.apply(delta("b-0", "b", cpu=8, submitted=100))
    index.apply(delta("huge", "b", cpu=64, submitted=200))
    index.apply(executor("ex1", 1_000, nodes(1, cpu=16, mem=64)))
    view = ClusterView(index=lambda: index)

    outcome = run_cycle(index, tick(2_000, "a", "b"), 1, CycleConfig(observe=view.observe))

    assert outcome.leased == 2
    (cycle,) = view.pools.values()
    shares = {q["queue"]: q for q in cycle.queues()}
    assert cycle.queues() is cycle.queues()  # counted once per cycle
    assert shares["a"]["fair_share"] == shares["b"]["fair_share"] == 0.5
    held = {name: q["allocation"].get("cpu", 0) for name, q in shares.items()}
    assert held == {"a": 8 * CPU, "b": 8 * CPU}  # one 8-cpu job each, by fair share
    assert (shares["a"]["queued"], shares["b"]["queued"]) == (3, 2)
    assert cycle.capacity() == {"cpu": 16 * CPU, "memory": 64 * GI}
    assert sum(cycle.unschedulable().values()) == 3
    assert view.why("huge") is not None and view.why("a-0") is None
    (ex,) = view.executors(now_ms=3_500)
    assert ex["executor"] == "ex1" and ex["nodes"] == 1 and ex["report_age_s"] == 2.5


def test_a_job_preempted_is_told_so_before_any_reason_it_waits_and_an_unknown_job_has_none() -> None:
    view = ClusterView()
    inputs = CycleInput(queues=(), nodes=(), running=(), queued=(), now=2.0, seed=1, limiters=LimiterState())
    result = CycleResult(
        scheduled=(),
        preempted=(PreemptedJob("j-2", "n1", "fair share"),),
        unscheduled=(Unscheduled("no room", True, ("j-1", "j-2")), Unscheduled("gang incomplete", False, ("j-3",))),
        limiters=LimiterState(),
        shares=(),
    )
    view.observe("default", inputs, result)
    assert [view.why(job) for job in ("j-1", "j-2", "j-3", "j-4")] == ["no room", "preempted: fair share", "gang incomplete", None]


def test_an_executors_active_runs_and_allocation_count_its_running_jobs_only() -> None:
    index = SchedulerIndex()
    index.apply(executor("ex1", 1_000, nodes(2, cpu=16, mem=64)))
    index.apply(executor("ex2", 1_000, nodes(1, cpu=16, mem=64, prefix="m")))
    for i in range(50):
        index.apply(delta(f"q-{i}", cpu=2))
    index.apply(running(delta("r-1", cpu=3), "run-1", "ex1", "n0", 1_000))
    index.apply(running(delta("r-2", cpu=5), "run-2", "ex1", "n1", 1_000))
    index.apply(running(delta("r-3", cpu=7), "run-3", "ex2", "m0", 1_000))
    index.apply(replace(running(delta("r-4", cpu=11), "run-4", "ex2", "m0", 1_000), run_state="succeeded", state="succeeded"))
    shown = {ex["executor"]: ex for ex in ClusterView(index=lambda: index).executors(now_ms=2_000)}
    assert {name: ex["active_runs"] for name, ex in shown.items()} == {"ex1": 2, "ex2": 1}
    assert shown["ex1"]["allocated"]["cpu"] == 8 * CPU and shown["ex2"]["allocated"]["cpu"] == 7 * CPU


def test_a_view_without_the_scheduler_shows_no_executors() -> None:
    assert ClusterView().executors(0) == [] and not ClusterView().scheduling


def test_reasons_that_name_things_are_counted_by_their_kind() -> None:
    assert reasons.reason_kind(reasons.gang_incomplete("g-17", 2, 3)) == "gang incomplete"
    assert reasons.reason_kind(reasons.inactive_queue("q")) == "queue is not active in this pool"
    assert reasons.reason_kind(reasons.node_or_class_gone("n", "pc")) == "node or priority class no longer known"
    assert reasons.reason_kind(reasons.JOB_DOES_NOT_FIT) == reasons.JOB_DOES_NOT_FIT


def test_the_capacity_shown_is_the_one_the_shares_were_taken_of() -> None:
    """An unschedulable node no job runs on is left out of the pool's totals (`PoolNodes.totals`): the
    cycle record and the observer (the /cluster page and flotilla_pool_capacity) leave it out too."""
    index = SchedulerIndex()
    index.apply(delta("a-0", "a", cpu=8))
    cordoned = replace(nodes(2)[1], unschedulable=True)
    index.apply(executor("ex1", 1_000, (nodes(1)[0], cordoned)))
    view = ClusterView(index=lambda: index)
    outcome = run_cycle(index, tick(2_000, "a"), 1, CycleConfig(observe=view.observe))
    [pool] = outcome.records[0]["events"][0]["payload"][1]["pools"]
    assert pool["capacity"] == view.pools["default"].capacity() == {"cpu": 32 * CPU, "memory": 256 * GI}
    assert [q["share"] for q in pool["queues"]] == [0.25]


def test_an_executor_shows_its_cordon_and_the_active_runs_its_latest_state_does_not_list() -> None:
    index = SchedulerIndex()
    for i in range(3):
        index.apply(running(delta(f"j{i}"), f"r{i}", "ex1", "n0", 500))
    index.apply(executor("ex1", 1_000, runs={"r0": "j0"}))
    index.apply(executor("ex2", 1_000))
    index.apply(ExecutorSettings("ex1", True, "rack move", "root", 900, "e1"))
    view = ClusterView(index=lambda: index)
    shown = {ex["executor"]: ex for ex in view.executors(now_ms=1_000)}
    assert {name: (ex["cordoned"], ex["cordon_reason"], ex["cordoned_by"]) for name, ex in shown.items()} == {
        "ex1": (True, "rack move", "root"),
        "ex2": (False, "", ""),
    }
    assert (shown["ex1"]["active_runs"], shown["ex1"]["unacknowledged_runs"], shown["ex2"]["unacknowledged_runs"]) == (3, 2, 0)
    index.apply(ExecutorSettings("ex1", False, "", "root", 950, "e2"))
    (ex1, _) = view.executors(now_ms=1_000)
    assert (ex1["cordoned"], ex1["cordon_reason"], ex1["cordoned_by"]) == (False, "", "")
